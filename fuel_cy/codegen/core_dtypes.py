"""The core's dtype lists, derived from the dtype record (fuel_cy/dtypes.py DTYPES): the validators'
dtype bits, the rounding tags and fused types every core loop is written over, the declarations and
dispatch of each dtype's C helpers, and the per-work-type C instantiations.  The generator renders
them into fuel_cy/_generated/ (_fastcheck_dtypes.pxi, _core_dtypes.pxi, fc_dtypes.h), so adding a
dtype is one record, not an edit of every list in fuel_cy/_core/.

The math stays hand-written in fuel_cy/_core/ (the roundings, the GEMMs, their vector forms): a
record only names it, by the spellings below.  `check_core_helpers` refuses to generate when a
record names C math that no core source defines, so a dtype added without its C fails at
`fuel-cy generate` with the dtype and the function, not in the C compiler.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

from .. import dtypes as _dtypes_module
from ..contract.errors import Collector
from ..dtypes import COMPUTE_F32, DType

DTYPES_FILE = "fuel_cy/dtypes.py"
TEMPLATES = ("_fastcheck_dtypes.pxi.j2", "_core_dtypes.pxi.j2", "fc_dtypes.h.j2")
"""Rendered from the dtype record alone (their header names dtypes.py, not the contracts)."""

# The hand-written C the generated lists call, per float dtype ({s}: the dtype's suffix, {w}: its
# work type's), with the core header expected to define it.  Every float dtype's policy has tile
# GEMMs (qk_tile_c / pv_accum_c dispatch to them); a dtype rounded at every step ("math in T")
# also has its scalar rounding, the conversions of its storage bits, its softmax pass
# (exp_sum_c, and exp_lanes_c / lane_totals_c that split it for many rows), its row dot product,
# dS row, softmax normalization and row scaling (dot16_c, ds_row_c, div_row_c, scale_row_c).
KERNEL_HELPERS = (("fc_qk_{s}", "fc_gemm.h"), ("fc_pv_{s}", "fc_gemm.h"))
ROUNDING_HELPERS = (("fc_round_{s}", "fc_math.h"), ("fc_{w}_to_{s}_bits", "fc_math.h"),
                    ("fc_{s}_bits_to_{w}", "fc_math.h"), ("fc_exp_scaled_sum16_{s}", "fc_exp.h"),
                    ("fc_dot16_{s}", "fc_exp.h"), ("fc_ds_row_{s}", "fc_exp.h"), ("fc_div_row_{s}", "fc_exp.h"),
                    ("fc_scale_row_{s}", "fc_exp.h"), ("fc_exp_scaled_lanes16_{s}", "fc_exp.h"),
                    ("fc_lane_totals_{s}", "fc_exp.h"))


def fast_bit(code: str) -> str:
    """The validators' dtype bit of a contract dtype (FC_F32, ...): the one spelling that
    _fastcheck_dtypes.pxi defines and the generated validators' masks use."""
    return f"FC_{code}"


def c_suffix(code: str) -> str:
    """How the core's C names spell a dtype: fc_qk_f32, fc_round_bf16."""
    return code.lower()


def typenum_lookup(code: str) -> str:
    """The module-level int that holds the numpy type number of a dtype numpy has no C constant
    for (ml_dtypes' bfloat16), looked up when the module is imported."""
    return f"_FC_NUM_{code}"


def typenum(d: DType) -> str:
    """Cython expression of a dtype's numpy type number: cnp.NPY_FLOAT32, or its lookup."""
    return f"cnp.{d.npy_typenum}" if d.npy_typenum else typenum_lookup(d.code)


@dataclass(frozen=True)
class Bit:
    """A dtype's bit in the validators' masks."""

    code: str
    name: str  # FC_<code>
    value: int
    typenum: str  # Cython expression of its numpy type number


@dataclass(frozen=True)
class Lookup:
    """A dtype whose numpy type number is read at import (numpy has no constant for it)."""

    name: str  # _FC_NUM_<code>
    module_alias: str  # the module's import name in the generated file
    numpy_name: str


@dataclass(frozen=True)
class WorkType:
    """A C type the core computes in: the distinct work types of the float dtypes."""

    ctype: str  # float
    suffix: str  # f32: the suffix of its kernels, that of the dtype stored as it
    lanes: str  # FC_W32: its lanes per vector (fc_isa.h)


@dataclass(frozen=True)
class Policy:
    """A float dtype's element policy and the suffix of its C tile GEMMs (fc_qk_<suffix>)."""

    code: str
    tag: str
    ctype: str  # the work type
    suffix: str


@dataclass(frozen=True)
class Rounding:
    """A dtype rounded at every step ("math in T"): its tag and its hand-written C helpers."""

    code: str
    tag: str
    suffix: str
    ctype: str  # storage
    work_ctype: str
    work_suffix: str


@dataclass(frozen=True)
class DTypeLists:
    """Everything the dtype templates render, derived from the record."""

    bits: tuple[Bit, ...]  # every dtype; those with a numpy constant first (the chain's order)
    imports: tuple[tuple[str, str], ...]  # (module, alias) of the modules the lookups read
    lookups: tuple[Lookup, ...]
    tags: tuple[str, ...]  # rnd_t's members, in record order
    work_types: tuple[WorkType, ...]  # real_t's members, in record order
    policies: tuple[Policy, ...]  # every float dtype
    roundings: tuple[Rounding, ...]
    halves: tuple[tuple[str, int], ...]  # (code, is_f16) of each 16-bit float
    # (code, the float32 policy's tag and work type) of each dtype the float32-compute kernels
    # take (precision.compute: f32)
    f32_policies: tuple[Policy, ...] = ()

    @property
    def dispatch(self) -> tuple[tuple[str, tuple[Policy, ...]], ...]:
        """The policies grouped by tag, for the dispatch chains (`if rnd_t is T: if real_t is C:`)."""
        return tuple((tag, tuple(p for p in self.policies if p.tag == tag)) for tag in self.tags)


def _record_lines(source: str) -> dict[str, int]:
    """The line of each record in dtypes.py's text (`DType("BF16", ...`), for located errors."""
    return {m.group(1): source.count("\n", 0, m.start()) + 1
            for m in re.finditer(r'DType\(\s*"(\w+)"', source)}


def dtypes_source() -> tuple[str, str]:
    """(text, sha256) of the dtypes.py that the record was read from."""
    data = Path(_dtypes_module.__file__).read_bytes()
    return data.decode("utf-8"), hashlib.sha256(data).hexdigest()


def dtype_lists(dtypes: Mapping[str, DType], source: str = "") -> DTypeLists:
    """The core's lists of `dtypes`; raises ContractError (located in dtypes.py's `source`) when
    the record cannot be spelled in C: a tag shared by a rounded and an un-rounded dtype, a
    rounded tag shared by two dtypes, a work type no dtype is stored as."""
    problems = Collector()
    lines = _record_lines(source)

    def report(code: str, message: str) -> None:
        problems.add(DTYPES_FILE, lines.get(code, 0), f"DTYPES[{code!r}]", message)

    ordered = [d for d in dtypes.values() if d.npy_typenum] + [d for d in dtypes.values() if not d.npy_typenum]
    position = {code: i for i, code in enumerate(dtypes)}  # bits follow the record's order
    bits = tuple(Bit(d.code, fast_bit(d.code), 1 << position[d.code], typenum(d)) for d in ordered)
    lookups = tuple(Lookup(typenum_lookup(d.code), f"_fc_{d.numpy_module}", d.numpy_name)
                    for d in dtypes.values() if not d.npy_typenum)
    imports = tuple(dict.fromkeys((d.numpy_module, f"_fc_{d.numpy_module}")
                                  for d in dtypes.values() if not d.npy_typenum))

    floats = [d for d in dtypes.values() if d.rounding]
    tags = tuple(dict.fromkeys(d.rounding for d in floats if d.rounding))
    for tag in tags:
        users = [d for d in floats if d.rounding == tag]
        if len({d.rounds_each_step for d in users}) > 1:
            report(users[-1].code, f"shares the rounding tag {tag} with {users[0].code}, but one rounds every "
                                   "step and the other does not: a tag is one policy")
        elif users[0].rounds_each_step and len(users) > 1:
            report(users[-1].code, f"shares the rounding tag {tag} with {users[0].code}: a rounded tag names "
                                   "one dtype's C rounding, give it a tag of its own")

    stored_as = {(d.ctype, d.numpy_name): d for d in dtypes.values() if d.is_float}
    work_types: dict[str, WorkType] = {}
    for d in floats:
        if d.work_ctype in work_types:
            continue
        own = stored_as.get((d.work_ctype, d.work_numpy))
        if own is None:
            report(d.code, f"computes in {d.work_ctype} ({d.work_numpy}), which no float dtype is stored as: "
                           "the core names a work type's kernels after that dtype")
            continue
        work_types[d.work_ctype] = WorkType(d.work_ctype, c_suffix(own.code), f"FC_W{8 * own.bytes}")
    seen: dict[tuple[str, str], str] = {}
    for d in floats:
        other = seen.setdefault((d.rounding or "", d.work_ctype), d.code)
        if other != d.code:
            report(d.code, f"runs under the policy ({d.rounding}, {d.work_ctype}) of {other}: the core picks a "
                           "dtype's C kernels by its policy, so no two dtypes may share one")
    problems.raise_if_any()

    policies = tuple(Policy(d.code, d.rounding, d.work_ctype, c_suffix(d.code)) for d in floats if d.rounding)
    roundings = tuple(Rounding(d.code, d.rounding, c_suffix(d.code), d.ctype, d.work_ctype,
                               work_types[d.work_ctype].suffix)
                      for d in floats if d.rounding and d.rounds_each_step)
    halves = tuple((d.code, d.half) for d in dtypes.values() if d.half is not None)
    f32 = COMPUTE_F32.policy
    assert f32 is not None
    f32_policies = tuple(Policy(d.code, f32[0], f32[1], c_suffix(d.code)) for d in floats if d.f32_compute)
    return DTypeLists(bits, imports, lookups, tags, tuple(work_types.values()), policies, roundings, halves,
                      f32_policies)


# ---- does the hand-written core define what the record names? ---------------------------------

_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)(\(([^)]*)\))?(.*)$", re.M)
_DIRECTIVE = re.compile(r"^[ \t]*#.*$", re.M)
_FUNCTION = re.compile(r"\bstatic\s+inline\s+[\w\s*]*?\b(\w+)\s*\(")
_WORD = re.compile(r"\b\w+\b")


def _arguments(text: str, start: int) -> tuple[list[str], int]:
    """The comma-separated arguments of the call whose '(' is at `start`, and the index after its ')'."""
    depth = 0
    args: list[str] = []
    current: list[str] = []
    for i in range(start, len(text)):
        c = text[i]
        if c == "(":
            depth += 1
            if depth == 1:
                continue
        elif c == ")":
            depth -= 1
            if depth == 0:
                args.append("".join(current).strip())
                return args, i + 1
        elif c == "," and depth == 1:
            args.append("".join(current).strip())
            current = []
            continue
        current.append(c)
    return args, len(text)


def _substitute(body: str, values: Mapping[str, str]) -> str:
    """A macro body with its parameters replaced by the arguments (word by word, as cpp does)."""
    return _WORD.sub(lambda w: values.get(w.group(0), w.group(0)), body)


def _expand(text: str, macros: Mapping[str, tuple[list[str], str]], depth: int) -> set[str]:
    """The static inline functions `text` defines, itself or by the macros it invokes."""
    names = set(_FUNCTION.findall(text))
    if depth > 8 or not macros:
        return names
    call = re.compile(r"\b(" + "|".join(map(re.escape, macros)) + r")\s*\(")
    pos = 0
    while (m := call.search(text, pos)) is not None:
        params, body = macros[m.group(1)]
        args, pos = _arguments(text, m.end() - 1)
        values = dict(zip(params, args))
        if params and params[-1] == "...":
            values["__VA_ARGS__"] = ", ".join(args[len(params) - 1:])
        names |= _expand(re.sub(r"\s*##\s*", "", _substitute(body, values)), macros, depth + 1)
    return names


def defined_names(sources: Iterable[str]) -> set[str]:
    """The functions and macros that C sources define, counting the functions a function-like
    macro makes where it is instantiated (FC_DEFINE_KERNELS(float, f32, FC_W32) -> fc_qk_f32,
    through X-macro lists too).  A reader's approximation of the preprocessor that ignores #if:
    enough to tell whether a helper exists in some branch, which is what the check asks."""
    text = "\n".join(_COMMENT.sub(" ", s).replace("\\\n", " ") for s in sources)
    macros: dict[str, tuple[list[str], str]] = {}
    names: set[str] = set()
    for m in _DEFINE.finditer(text):
        names.add(m.group(1))
        if m.group(2) is not None:
            macros[m.group(1)] = ([p.strip() for p in m.group(3).split(",") if p.strip()], m.group(4))
    return names | _expand(_DIRECTIVE.sub("", text), macros, 0)


def check_core_helpers(lists: DTypeLists, core: Path, generated_headers: Iterable[str] = (),
                       source: str = "") -> None:
    """Every C helper the generated lists name is defined by the core's headers in `core` (or by
    the generated ones, whose X-macros instantiate the hand-written kernel macros).  Raises
    ContractError naming each dtype and each missing function, located at its record."""
    names = defined_names([p.read_text(encoding="utf-8") for p in sorted(core.glob("*.h"))] + list(generated_headers))
    lines = _record_lines(source)
    problems = Collector()

    def need(code: str, why: str, pattern: str, header: str, **spell: str) -> None:
        name = pattern.format(**spell)
        if name not in names:
            problems.add(DTYPES_FILE, lines.get(code, 0), f"DTYPES[{code!r}]",
                         f"{why}, so the core needs the hand-written C function {name} (expected in "
                         f"fuel_cy/_core/{header}); no core source defines it")

    for p in lists.policies:
        for pattern, header in KERNEL_HELPERS:
            need(p.code, f"{p.code} runs under the policy ({p.tag}, {p.ctype})", pattern, header, s=p.suffix)
    for r in lists.roundings:
        for pattern, header in ROUNDING_HELPERS:
            need(r.code, f"{r.code} is rounded at every step ({r.tag})", pattern, header, s=r.suffix, w=r.work_suffix)
    for w in lists.work_types:
        if w.lanes not in names:
            problems.add(DTYPES_FILE, 0, "DTYPES", f"the work type {w.ctype} needs its lanes per vector, {w.lanes}, "
                                                   "defined in fuel_cy/_core/fc_isa.h; no core source defines it")
    problems.raise_if_any()


def render_context(dtypes: Mapping[str, DType]) -> tuple[DTypeLists, str, str]:
    """(lists, dtypes.py's text, its sha256) for `dtypes` (the record, or a test's stand-in)."""
    text, digest = dtypes_source()
    return dtype_lists(dtypes, text), text, digest

