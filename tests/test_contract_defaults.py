"""Param defaults: a contract's `default:` is parsed and checked; fuel_cy's own defaults (for the
params a contract leaves to the caller) come from contracts/python-api.yaml, checked the same way;
the generated validators compute them with no per-param code."""
from __future__ import annotations

import math
import shutil

import numpy as np
import pytest

from conftest import ROOT
from fuel_cy.contract import ContractError, parse_document
from fuel_cy.contract.expr import Call, ExprError, Formula
from fuel_cy.contract.model import Default

SCALE = "    softmax_scale: { kind: f32 }"


def _field(doc, kernel: str, name: str):
    return next(f for f in doc.kernel(kernel).op_params.fields if f.name == name)


def test_contract_default_is_parsed(canonical_text):
    text = canonical_text.replace(SCALE, '    softmax_scale: { kind: f32, default: "1 / sqrt(max(d, 1))" }', 1)
    text = text.replace("    causal: { kind: bool }", "    causal: { kind: bool, default: true }", 1)
    doc = parse_document(text, "x.md")
    scale = _field(doc, "attention_naive", "softmax_scale").default
    assert scale is not None and scale.computed and str(scale.formula) == "1 / sqrt(max(d, 1))"
    assert isinstance(scale.formula.ast.right, Call)
    assert _field(doc, "attention_naive", "causal").default == Default(True, text="true")
    assert _field(doc, "attention_flash", "softmax_scale").default is None  # only where stated


def test_implied_defaults(canonical_text):
    doc = parse_document(canonical_text, "x.md")
    assert _field(doc, "attention_naive", "softcap").implied_default == Default(None, text="~")
    block = _field(doc, "attention_paged_naive", "block_size").implied_default
    assert block is not None and str(block.formula) == "k_cache.dim[1]"
    assert _field(doc, "attention_naive", "softmax_scale").implied_default is None


@pytest.mark.parametrize("field, default, message", [
    (SCALE, '"1 / sqrt(zz)"', "unknown symbol 'zz'"),
    (SCALE, '"sqrt(d"', "invalid default"),
    (SCALE, '"exp(d)"', "unknown function 'exp'"),
    (SCALE, '"sqrt(d, 2)"', "sqrt() takes 1 argument"),
    (SCALE, "~", "Option<...> param only"),
    (SCALE, "true", "expected a number"),
    (SCALE, '"q.dim[9]"', "out of range for rank 4"),
    ("    causal: { kind: bool }", "1", "expected true or false"),
    ("    window_size_left: { kind: \"Option<usize>\" }", '"sk"', "None is a value of 'Option<usize>'"),
    ("    window_size_left: { kind: \"Option<usize>\" }", "-3", "integer >= 0"),
    ("    block_size: { kind: usize, constraint: \"== k_cache.dim[1] == v_cache.dim[1]\" }", '"k_cache.dim[1] / 2"',
     "no '/' or sqrt"),
])
def test_bad_default_is_located(canonical_text, field, default, message):
    assert field in canonical_text
    new = field[:-2] + f", default: {default} }}"
    text = canonical_text.replace(field, new, 1)
    with pytest.raises(ContractError) as info:
        parse_document(text, "bad.md")
    hit = [p for p in info.value.problems if message in p.message]
    assert hit, [str(p) for p in info.value.problems]
    assert hit[0].keypath.endswith(".default") and new.strip() in text.splitlines()[hit[0].line - 1]


def test_calls_only_in_defaults():
    with pytest.raises(ExprError, match="calls are not allowed"):
        Formula.parse("sqrt(d)")
    f = Formula.parse("1 / sqrt(max(d, 1))", calls=True)
    assert Formula.parse(str(f), calls=True) == f
    assert f.evaluate({"d": 64}) == 0.125 and f.evaluate({"d": 0}) == 1.0


# ---- the generated code --------------------------------------------------------------------------

def _checkout(tmp_path):
    """A checkout to render from: a copy of contracts/, the real templates and core."""
    shutil.copytree(ROOT / "contracts", tmp_path / "contracts")
    (tmp_path / "fuel_cy").mkdir()
    (tmp_path / "fuel_cy" / "_core").symlink_to(ROOT / "fuel_cy" / "_core")
    (tmp_path / "templates").symlink_to(ROOT / "templates")
    return tmp_path


def _render(root):
    from fuel_cy.codegen.generate import Layout, render

    return render(Layout(root), root / "out").pending


def test_generated_defaults_have_no_per_param_code(tmp_path):
    root = _checkout(tmp_path)
    mixed = root / "contracts" / "fuel-cy-mixed.md"
    text = mixed.read_text()
    assert text.count(SCALE) == 3
    mixed.write_text(text.replace(SCALE, "    softmax_scale: { kind: f32, default: 0.25 }", 1))  # the contract's wins
    pyx = _render(root)["_kernels.pyx"]
    assert "def attention_flash_mixed(q, k, v, alibi_slopes=None, *, softmax_scale=0.25, causal=False," in pyx
    assert "def attention_flash(q, k, v, alibi_slopes=None, *, softmax_scale=None, causal=False," in pyx
    assert pyx.count("softmax_scale = <float>(1 / _fc_sqrt(max(q.shape[3], 1)))") == 6
    assert "        block_size = k_cache.shape[1]" in pyx


def test_bad_fuel_cy_default_is_located_in_python_api(tmp_path):
    root = _checkout(tmp_path)
    api = root / "contracts" / "python-api.yaml"
    text = api.read_text()
    old = '    default: "1 / sqrt(max(d, 1))"'
    assert old in text
    api.write_text(text.replace(old, '    default: "1 / sqrt(max(dd, 1))"'))
    with pytest.raises(ContractError) as info:
        _render(root)
    p = info.value.problems[0]
    assert p.path.endswith("python-api.yaml") and p.keypath == "params.softmax_scale.default"
    assert "unknown symbol 'dd'" in p.message and "dd" in api.read_text().splitlines()[p.line - 1]


def test_validators_compute_the_defaults():
    """softmax_scale: 1/sqrt(D) rounded to float32 (1 for D = 0); block_size: the pool's."""
    from fuel_cy._generated import _kernels

    for d in (0, 1, 3, 64, 80, 100, 128, 1000, 12345):
        q = np.zeros((1, 2, 3, d), np.float32)
        k = np.zeros((1, 1, 5, d), np.float32)
        _, params = _kernels._validate_attention_flash(q, k, k, None, None, False, None, None, None, None)
        want = float(np.float32(1 / math.sqrt(d))) if d else 1.0
        assert params["softmax_scale"] == want and type(params["softmax_scale"]) is float
        assert params["causal"] is False
    q = np.zeros((2, 4, 1, 8), np.float32)
    pool = np.zeros((6, 16, 2, 8), np.float32)
    table = np.zeros((2, 3), np.uint32)
    lens = np.ones(2, np.uint32)
    _, params = _kernels._validate_attention_paged_naive(q, pool, pool, table, lens, None, None, None, None)
    assert params["block_size"] == 16 and params["softmax_scale"] == float(np.float32(1 / math.sqrt(8)))
