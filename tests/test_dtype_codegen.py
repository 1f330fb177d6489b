"""The core's C-side dtype lists are generated from the dtype record (fuel_cy/dtypes.py DTYPES):
the validators' bits, the rounding tags and fused types, the C helpers' declarations and dispatch
chains, and the per-work-type instantiations of the C headers.  The rendered text is parsed and
compared with what the record says (not with a copy of today's lists), a record whose C math is
missing is refused at generate time with the dtype and the function, and every generated dtype
file names dtypes.py and its sha256."""
from __future__ import annotations

import ast
import hashlib
import importlib
import re
import shutil

import pytest

from conftest import ROOT
from fuel_cy import dtypes
from fuel_cy.codegen import core_dtypes
from fuel_cy.codegen.generate import Layout, render
from fuel_cy.contract import ContractError
from fuel_cy.dtypes import DTYPES, DType

DTYPE_FILES = ("_fastcheck_dtypes.pxi", "_core_dtypes.pxi", "fc_dtypes.h")


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> dict[str, str]:
    return render(Layout(ROOT), tmp_path_factory.mktemp("gen")).pending


def _floats() -> list[DType]:
    return [d for d in DTYPES.values() if d.rounding]


def _work_suffix(ctype: str) -> str:
    """The suffix of a work type's kernels, read from the record: that of the float dtype stored as it."""
    return next(d.code.lower() for d in DTYPES.values() if d.is_float and d.ctype == ctype and not d.narrow)


def _block(text: str, opener: str) -> list[str]:
    """The indented lines under `opener` (a `cdef enum:`, `ctypedef fused x:` or a def, whose
    signature may go on over more lines and whose docstring is left out)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(opener))
    while not lines[start].rstrip().endswith(":"):  # the rest of a signature
        start += 1
    body = []
    for line in lines[start + 1:]:
        if line and not line.startswith(" "):
            break
        body.append(line)
    joined = re.sub(r'^\s*""".*?"""\n', "", "\n".join(body) + "\n", count=1, flags=re.S)
    return [line for line in joined.splitlines() if line.strip()]


def _chain(text: str, function: str) -> list[tuple[str, ...]]:
    """A generated dispatch chain as the paths to its statements: (the `if` tests that lead to
    it..., the statement)."""
    paths: list[tuple[str, ...]] = []
    stack: list[str] = []
    for line in _block(text, function):
        depth = (len(line) - len(line.lstrip())) // 4
        stmt = line.strip()
        del stack[depth - 1:]
        if stmt.startswith(("if ", "elif ")):
            stack.append(stmt.split(" ", 1)[1].rstrip(":"))
        elif stmt != "else:":
            paths.append((*stack, stmt))
    return paths


# ---- the validators' dtype bits -------------------------------------------------------------

def test_every_dtype_has_a_distinct_bit_and_the_bits_round_trip(rendered):
    text = rendered["_fastcheck_dtypes.pxi"]
    enum = dict(re.fullmatch(r"\s+(FC_\w+) = (\d+)", line).groups() for line in _block(text, "cdef enum:"))
    bits = {name: int(value) for name, value in enum.items()}
    assert set(bits) == {core_dtypes.fast_bit(code) for code in DTYPES}
    assert len(set(bits.values())) == len(bits) and all(v & (v - 1) == 0 for v in bits.values())  # one bit each
    codes = re.search(r"^_FC_CODES = (\{.*\})$", text, re.M).group(1)
    pairs = ast.literal_eval(re.sub(r"FC_\w+", lambda m: str(bits[m.group(0)]), codes))
    assert pairs == {bits[core_dtypes.fast_bit(code)]: code for code in DTYPES}  # bit -> code -> bit
    chain = _chain(text, "cdef inline int _fc_typenum_bit")
    for code, d in DTYPES.items():
        number = f"cnp.{d.npy_typenum}" if d.npy_typenum else f"_FC_NUM_{code}"
        assert (f"num == {number}", f"return FC_{code}") in chain, code
        if d.npy_typenum is None:  # looked up at import, from the module that defines the dtype
            assert f"import {d.numpy_module} as _fc_{d.numpy_module}" in text
            assert f"cdef int _FC_NUM_{code} = _fc_np.dtype(_fc_{d.numpy_module}.{d.numpy_name}).num" in text
    assert chain[-1] == ("return 0",)


def test_the_validators_masks_use_the_generated_bits(rendered):
    masks = set(re.findall(r"\bFC_[A-Z0-9]+\b", rendered["_kernels.pyx"]))
    assert masks and masks <= {core_dtypes.fast_bit(code) for code in DTYPES}


def test_the_compiled_validators_carry_the_bits():
    from fuel_cy._generated import _kernels

    assert _kernels._FC_CODES == {1 << i: code for i, code in enumerate(DTYPES)}


# ---- the element policies -------------------------------------------------------------------

def test_every_rounding_tag_is_a_struct_and_in_rnd_t(rendered):
    text = rendered["_core_dtypes.pxi"]
    tags = list(dict.fromkeys(d.rounding for d in _floats()))
    assert [line.strip() for line in _block(text, "ctypedef fused rnd_t:")] == tags
    for tag in tags:
        assert f"\ncdef struct {tag}:\n    char unused\n" in text, tag
    works = list(dict.fromkeys(d.work_ctype for d in _floats()))
    assert [line.strip() for line in _block(text, "ctypedef fused real_t:")] == works


def test_R_rounds_every_rounded_dtype_and_nothing_else(rendered):
    chain = _chain(rendered["_core_dtypes.pxi"], "cdef inline real_t R(")
    rounded = [d for d in _floats() if d.rounds_each_step]
    assert chain == [(f"rnd_t is {d.rounding}", f"return fc_round_{d.code.lower()}(<{d.work_ctype}>x)")
                     for d in rounded] + [("return x",)]


@pytest.mark.parametrize("function, kernel", [("cdef inline bint qk_tile_c(", "fc_qk"),
                                              ("cdef inline bint pv_accum_c(", "fc_pv")])
def test_each_policy_dispatches_to_its_dtypes_gemm(rendered, function, kernel):
    chain = _chain(rendered["_core_dtypes.pxi"], function)
    calls = {path[:2]: path[2] for path in chain if len(path) == 3 and not path[2].startswith("return")}
    policies = {(tag.removeprefix("rnd_t is "), ct.removeprefix("real_t is ")): call.split("(")[0]
                for (tag, ct), call in calls.items()}
    assert policies == {(d.rounding, d.work_ctype): f"{kernel}_{d.code.lower()}" for d in _floats()}
    assert all((*head, "return True") in chain for head in calls)  # each call is the answer
    assert chain[-1] == ("return False",) and len(chain) == 2 * len(calls) + 1


def test_the_declarations_follow_the_record(rendered):
    text = rendered["_core_dtypes.pxi"]
    for d in _floats():
        s, t = d.code.lower(), d.work_ctype
        assert re.search(rf"^    void fc_qk_{s}\(const {t}\* Q,", text, re.M), d.code
        assert re.search(rf"^    void fc_pv_{s}\(const {t}\* P,", text, re.M), d.code
        if d.rounds_each_step:
            w = _work_suffix(t)
            assert f"    {t} fc_round_{s}({t} x)\n" in text
            assert f"    {d.ctype} fc_{w}_to_{s}_bits({t} x)\n" in text
            assert f"    {t} fc_{s}_bits_to_{w}({d.ctype} h)\n" in text


def test_the_half_flags_follow_the_record(rendered):
    chain = _chain(rendered["_core_dtypes.pxi"], "cdef inline int half_flag(")
    assert chain == [(f"code == {d.code!r}", f"return {d.half}") for d in DTYPES.values() if d.half is not None] + \
        [("return -1",)]


def test_the_work_types_of_the_c_headers(rendered):
    text = rendered["fc_dtypes.h"].replace("\\\n", " ")
    body = re.search(r"#define FC_FOR_EACH_WORK_TYPE\(X\)(.*)", text).group(1)
    works = list(dict.fromkeys(d.work_ctype for d in _floats()))
    assert re.findall(r"X\((\w+), (\w+), (\w+)\)", body) == [
        (t, _work_suffix(t), f"FC_W{8 * next(d.bytes for d in DTYPES.values() if d.ctype == t and not d.narrow)}")
        for t in works]


def test_the_hand_written_core_keeps_no_dtype_list():
    """The lists live in the generated files only: no hand-written core file spells a rounded
    dtype's tag or a validator bit (the C math it calls is named by dtype, and stays)."""
    core = ROOT / "fuel_cy" / "_core"
    for path in sorted(core.glob("*.pxi")):
        text = re.sub(r"#.*", "", path.read_text())  # the code, not the comments that explain it
        for d in DTYPES.values():
            assert not re.search(rf"\b{core_dtypes.fast_bit(d.code)}\b", text), (path.name, d.code)
            if d.rounds_each_step:
                assert not re.search(rf"\b{d.rounding}\b", text), (path.name, d.rounding)
    for path in sorted(core.glob("*.h")):
        assert not re.search(r"^FC_\w+\((float|double),", path.read_text(), re.M), path.name


# ---- headers --------------------------------------------------------------------------------

@pytest.mark.parametrize("name", DTYPE_FILES)
def test_the_dtype_files_name_dtypes_py_and_its_hash(rendered, name):
    digest = hashlib.sha256((ROOT / "fuel_cy" / "dtypes.py").read_bytes()).hexdigest()
    head = rendered[name].splitlines()[:4]
    lead = "/*" if name.endswith(".h") else "#"
    assert head[0] == f"{lead} GENERATED FILE -- DO NOT EDIT."
    assert head[1].endswith(f"Template: templates/cython/{name}.j2 (fuel_cy.codegen v1)")
    assert head[2].endswith(f"Source: fuel_cy/dtypes.py sha256:{digest}")
    assert "Contract:" not in rendered[name]
    if name.endswith(".h"):
        assert head[3].endswith("*/") and head[3].startswith(" * Edit fuel_cy/dtypes.py")


# ---- the generate-time check of the hand-written C ------------------------------------------

FP8 = DType("F8", 1, True, "float8_e4m3fn", "ml_dtypes", None, "unsigned char", "RoundF8", "float", "float32",
            False, 4)


def test_a_record_without_its_c_math_is_refused_naming_dtype_and_function(tmp_path, monkeypatch):
    generate = importlib.import_module("fuel_cy.codegen.generate")  # (the package exports a function of that name)
    monkeypatch.setattr(generate, "DTYPES", {**DTYPES, "F8": FP8})
    with pytest.raises(ContractError) as info:
        render(Layout(ROOT), tmp_path / "out")
    messages = [str(p) for p in info.value.problems]
    functions = ("fc_qk_f8", "fc_pv_f8", "fc_round_f8", "fc_f32_to_f8_bits", "fc_f8_bits_to_f32",
                 "fc_exp_scaled_sum16_f8", "fc_dot16_f8", "fc_ds_row_f8", "fc_div_row_f8", "fc_scale_row_f8",
                 "fc_exp_scaled_lanes16_f8", "fc_lane_totals_f8")
    for function in functions:
        assert any(f"C function {function} " in m and "DTYPES['F8']" in m for m in messages), (function, messages)
    assert len(messages) == len(functions) and all(p.path == "fuel_cy/dtypes.py" for p in info.value.problems)
    assert not (tmp_path / "out").exists()


def _checkout(tmp_path):
    shutil.copytree(ROOT / "contracts", tmp_path / "contracts")
    shutil.copytree(ROOT / "fuel_cy" / "_core", tmp_path / "fuel_cy" / "_core")
    (tmp_path / "templates").symlink_to(ROOT / "templates")
    return tmp_path


def test_a_core_that_lost_a_dtypes_helper_is_refused_at_its_record(tmp_path):
    root = _checkout(tmp_path)
    math = root / "fuel_cy" / "_core" / "fc_math.h"
    text = math.read_text()
    assert text.count("static inline float fc_round_f16(") == 1
    math.write_text(text.replace("static inline float fc_round_f16(", "static inline float fc_round_f16_gone("))
    with pytest.raises(ContractError) as info:
        render(Layout(root), root / "out")
    (p,) = info.value.problems
    assert p.keypath == "DTYPES['F16']" and "fc_round_f16 " in p.message and "fc_math.h" in p.message
    record = (ROOT / "fuel_cy" / "dtypes.py").read_text().splitlines()[p.line - 1]
    assert record.lstrip().startswith('DType("F16"'), record


def test_a_work_type_kernel_made_through_the_generated_x_macro_counts(tmp_path):
    """fc_qk_f32 exists only as FC_FOR_EACH_WORK_TYPE(FC_DEFINE_KERNELS) with the generated list:
    without that instantiation it is missing."""
    root = _checkout(tmp_path)
    gemm = root / "fuel_cy" / "_core" / "fc_gemm.h"
    gemm.write_text(gemm.read_text().replace("FC_FOR_EACH_WORK_TYPE(FC_DEFINE_KERNELS)", ""))
    with pytest.raises(ContractError) as info:
        render(Layout(root), root / "out")
    missing = sorted(re.search(r"C function (\w+)", p.message).group(1) for p in info.value.problems)
    works = {_work_suffix(d.work_ctype) for d in _floats()}
    assert missing == sorted(f"fc_{k}_{s}" for s in works for k in ("pv", "qk"))


def test_defined_names_reads_macro_instantiations():
    header = """
    /* static inline void fc_in_a_comment(void) {} */
    #define FC_LIST(X) X(float, f32) \\
        X(double, f64)
    #define FC_MAKE(T, SUF) static inline T fc_make_##SUF(T x) { return fc_used(x); }
    #define FC_NAMED(NAME, ...) static inline void NAME(__VA_ARGS__) {}
    FC_LIST(FC_MAKE)
    FC_NAMED(fc_named, int a, int b)
    static inline unsigned short fc_plain(float x) { return fc_called(x); }
    #define fc_alias fc_plain
    """
    names = core_dtypes.defined_names([header])
    assert {"fc_make_f32", "fc_make_f64", "fc_named", "fc_plain", "fc_alias"} <= names
    assert not {"fc_in_a_comment", "fc_used", "fc_called", "fc_make_"} & names


@pytest.mark.parametrize("change, message", [
    ({"F16": DTYPES["F16"]._replace(rounding="RoundBF16")}, "shares the rounding tag RoundBF16 with BF16"),
    ({"F64": DTYPES["F64"]._replace(work_ctype="long double", work_numpy="longdouble")},
     "computes in long double (longdouble), which no float dtype is stored as"),
    ({"F16": DTYPES["F16"]._replace(rounding="RoundNone")}, "shares the rounding tag RoundNone with F32"),
])
def test_records_the_core_cannot_spell_are_refused(change, message):
    text, _ = core_dtypes.dtypes_source()
    with pytest.raises(ContractError) as info:
        core_dtypes.dtype_lists({**DTYPES, **change}, text)
    assert any(message in p.message for p in info.value.problems), [str(p) for p in info.value.problems]


def test_the_lists_come_from_the_imported_record():
    text, digest = core_dtypes.dtypes_source()
    assert text == (ROOT / "fuel_cy" / "dtypes.py").read_text() and dtypes.__file__.endswith("dtypes.py")
    assert digest == hashlib.sha256(text.encode()).hexdigest()
