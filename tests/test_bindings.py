"""The declared binding of contract kernels to the hand-written core (codegen/cores.py BINDINGS)
is checked with the contract at generate time: a contract edited so that it no longer fits its
driver is a located ContractError, not a C compile error, a stub, or a crash at run time."""
from __future__ import annotations

import shutil

import pytest

from conftest import ROOT
from fuel_cy.codegen.cores import BINDINGS, FORWARD_DIMS, CoreBinding, Driver, check_binding
from fuel_cy.contract import ContractError, parse_document


def _checkout(tmp_path, prose_checks: str | None = None):
    shutil.copytree(ROOT / "contracts", tmp_path / "contracts")
    (tmp_path / "fuel_cy").mkdir()
    (tmp_path / "fuel_cy" / "_core").symlink_to(ROOT / "fuel_cy" / "_core")
    (tmp_path / "templates").symlink_to(ROOT / "templates")
    if prose_checks is not None:
        (tmp_path / "fuel_cy" / "runtime").mkdir()
        (tmp_path / "fuel_cy" / "runtime" / "_prose_checks.py").write_text(prose_checks)
    return tmp_path


def _render(root):
    from fuel_cy.codegen.generate import Layout, render

    return render(Layout(root), root / "out")


def _edit_mixed(root, kernel: str, old: str, new: str) -> str:
    """Replace `old` inside `kernel`'s block of fuel-cy-mixed.md; returns the new text."""
    path = root / "contracts" / "fuel-cy-mixed.md"
    text = path.read_text()
    start = text.index(f"kernel: {kernel}\n")
    end = text.index("```", start)
    assert old in text[start:end], old
    text = text[:start] + text[start:end].replace(old, new, 1) + text[end:]
    path.write_text(text)
    return text


def test_the_contracts_fit_their_drivers(tmp_path):
    pending = _render(_checkout(tmp_path)).pending
    # the mixed flash calls the half driver for both of its dtypes, under the float32 policy
    assert pending["_kernels.pyx"].count("_CORE.call('attention_flash_half', ") == 2
    assert "_CORE.call('attention_flash_half', 'BF16', True, " in pending["_kernels.pyx"]
    # and nothing of a contract reaches the per-level cores
    assert not any("contracts/" in text for name, text in pending.items() if name.startswith("_core_"))


SLOPES = '''    - name: alibi_slopes
      dtypes: [BF16, F16]
      layout: { contiguous: required, strided: rejected, broadcast_stride0: rejected, start_offset: rejected, reverse_strides: rejected }
      rank: 1
      dims: [Hq]
      shape_constraint: "dim[0]=q.dim[1]"
      optional: true
'''


@pytest.mark.parametrize("kernel, old, new, keypath, message", [
    ("attention_flash_mixed", SLOPES, "", "attention_flash_mixed.accept.inputs",
     "takes the inputs (q: T, k: T, v: T, alibi_slopes: T (optional)) in this order; "
     "the contract declares (q: T, k: T, v: T)"),
    ("attention_flash_mixed", "    - name: out\n", "    - name: output\n", "attention_flash_mixed.return",
     "writes the outputs (out, lse); the contract returns (output, lse)"),
    ("attention_paged_mixed", "    softmax_scale: { kind: f32 }\n", "", "attention_paged_mixed.op_params.fields",
     "reads the param 'softmax_scale'; the contract has none"),
])
def test_a_contract_that_no_longer_fits_its_driver_is_a_located_error(tmp_path, kernel, old, new, keypath, message):
    root = _checkout(tmp_path)
    text = _edit_mixed(root, kernel, old, new)
    with pytest.raises(ContractError) as info:
        _render(root)
    problems = info.value.problems
    assert len(problems) == 1, [str(p) for p in problems]
    p = problems[0]
    assert p.keypath == keypath and message in p.message and "drive_" in p.message and "BINDINGS" in p.message
    assert p.path.endswith("fuel-cy-mixed.md") and p.line > 0
    line = text.splitlines()[p.line - 1]
    assert any(word in line for word in ("- name:", "{ kind:")), line
    assert not (root / "out").exists()  # nothing written


@pytest.mark.parametrize("replacement, message", [
    ("", "whose masks are aligned bottom_right; the contract declares top_left"),   # the default
    ("mask_alignment: sideways", "one of top_left, bottom_right"),
])
def test_the_mask_alignment_is_the_drivers(tmp_path, replacement, message):
    """The varlen driver aligns its masks bottom-right: a contract that says otherwise (or says it
    wrong) is refused at its line, so the docs' pictures never show a mask the kernel does not use."""
    root = _checkout(tmp_path)
    path = root / "contracts" / "fuel-cy-model.md"
    text = path.read_text()
    line = "mask_alignment: bottom_right # query i of a sequence sits at key position i + lk - lq\n"
    assert line in text
    path.write_text(text.replace(line, replacement + "\n" if replacement else "", 1))   # attention_varlen's
    with pytest.raises(ContractError) as info:
        _render(root)
    (p,) = info.value.problems
    assert p.keypath.endswith("mask_alignment") and message in p.message and p.path.endswith("fuel-cy-model.md")


def test_dims_the_driver_takes_must_be_on_required_inputs(canonical_text):
    doc = parse_document(canonical_text, "x.md")
    kernel = doc.kernel("attention_flash")
    flash = BINDINGS["attention_flash"].driver
    wider = Driver(flash.name, FORWARD_DIMS + ("Hq",), flash.inputs, flash.outputs, flash.params)
    found: list[tuple[str, str]] = []
    check_binding(kernel, CoreBinding(wider), lambda keypath, msg: found.append((keypath, msg)))
    assert found == []  # Hq: on q
    slopes_only = Driver(flash.name, ("B", "Hq", "Sq", "D", "Z"), flash.inputs, flash.outputs, flash.params)
    check_binding(kernel, CoreBinding(slopes_only, half_storage=("pool",)), lambda keypath, msg: found.append((keypath, msg)))
    assert [k for k, _ in found] == ["accept.inputs", "accept.inputs"]
    assert "no required input of the contract has Z" in found[0][1]
    assert "reads the input 'pool' in 16-bit storage" in found[1][1]


def test_prose_rules_are_keyed_by_bound_drivers(tmp_path):
    root = _checkout(tmp_path, 'RULES: dict = {\n    "attention_flash": [],\n    "attention_flash_mixed": [],\n}\n')
    with pytest.raises(ContractError) as info:
        _render(root)
    (p,) = info.value.problems
    assert p.path.endswith("_prose_checks.py") and p.line == 3 and p.keypath == "RULES['attention_flash_mixed']"
    assert "driver names of fuel_cy/codegen/cores.py BINDINGS" in p.message


def test_the_real_prose_rules_name_drivers():
    from fuel_cy.runtime import _prose_checks

    drivers = {b.driver.name for b in BINDINGS.values()}
    assert set(_prose_checks.RULES) <= drivers
