"""Property tests of the formula compiler: well-formed evaluates like Python; malformed is refused."""
from __future__ import annotations

import ast
import operator

import pytest
from hypothesis import assume, given, settings, strategies as st

from fuel_cy.contract import parse_document
from fuel_cy.contract.expr import ExprError, Formula, parse_constraint

SYMBOLS = ["b", "hq", "sq", "sk", "d", "hkv", "dtype_bytes"]
ENV_VALUES = st.integers(min_value=1, max_value=50)


@st.composite
def expressions(draw, depth=0):
    if depth > 3 or draw(st.booleans()):
        return draw(st.one_of(st.integers(0, 999).map(str), st.sampled_from(SYMBOLS)))
    op = draw(st.sampled_from(["+", "-", "*", "/"]))
    left = draw(expressions(depth + 1))
    right = draw(expressions(depth + 1))
    text = f"{left} {op} {right}"
    return f"({text})" if draw(st.booleans()) else text


def _python_value(text: str, env: dict) -> float:
    # The oracle: Python's own arithmetic on the same text, via a restricted AST walk.
    ops = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.USub: operator.neg}

    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.BinOp):
            return ops[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp):
            return ops[type(node.op)](ev(node.operand))
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            return env[node.id]
        raise AssertionError(node)

    return ev(ast.parse(text, mode="eval"))


@settings(max_examples=300, deadline=None)
@given(expressions(), st.fixed_dictionaries({s: ENV_VALUES for s in SYMBOLS}))
def test_well_formed_formulas_evaluate_like_python(text, env):
    try:
        expected = _python_value(text, env)
    except ZeroDivisionError:
        with pytest.raises(ZeroDivisionError):
            Formula.parse(text).evaluate(env)
        return
    f = Formula.parse(text)
    assert f.evaluate(env) == pytest.approx(expected, rel=1e-12, abs=1e-12)
    # normalized spelling round-trips to the same AST
    assert Formula.parse(str(f)) == f
    assert f.symbols <= set(SYMBOLS)


BAD_FRAGMENTS = ["__import__('os')", "b ** 2", "q.shape", "eval(b)", "b; d", "lambda: 1", "[b]", "{b}",
                 "b if d else hq", "'b'", "b @ d", "b % d", "not b", "b // d", "x.dim[1.5]", "a.__class__",
                 "b\nd", "!b", "b and d", "`b`"]


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(BAD_FRAGMENTS), expressions(), st.sampled_from(["+", "*"]))
def test_malformed_formulas_are_rejected_never_run(bad, good, op):
    for text in (bad, f"{good} {op} {bad}", f"({bad}) {op} {good}"):
        with pytest.raises(ExprError):
            Formula.parse(text)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40))
def test_arbitrary_text_is_either_a_formula_or_rejected(text):
    try:
        f = Formula.parse(text)
    except ExprError:
        return
    # anything accepted is arithmetic over identifiers, numbers and dim refs only, and its
    # canonical text parses back to the same tree
    assert all(ch.isalnum() or ch in "_+-*/(). []" for ch in str(f))
    assert all(name.isidentifier() for name in f.symbols)
    assert Formula.parse(str(f)).ast == f.ast


def test_constraints_round_trip():
    for text in ["divisible(q.dim[1], k.dim[1])", "same_as=k", "dim[0] == q.dim[1]",
                 "== k_cache.dim[1] == v_cache.dim[1]"]:
        c = parse_constraint(text)
        assert parse_constraint(str(c)) == c
    for bad in ["divisible(q.dim[1])", "same_as=", "dim[0] <= 3", "os.system('x')", "q.dim[1]"]:
        with pytest.raises(ExprError):
            parse_constraint(bad)


def test_malicious_formula_in_a_contract_is_never_executed(canonical_text, tmp_path):
    marker = tmp_path / "pwned"
    text = canonical_text.replace('flops: "12 * b * hq * sq * sk * d"',
                                  f"flops: \"__import__('os').system('touch {marker}')\"", 1)
    from fuel_cy.contract import ContractError

    with pytest.raises(ContractError):
        parse_document(text)
    assert not marker.exists()
