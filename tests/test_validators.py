"""Every validator clause, for every kernel, has a passing and a failing case -- generated from the
contract model itself, so a new kernel or input in a contract gets these tests for free."""
from __future__ import annotations

import numpy as np
import pytest

import fuel_cy
from measures import bits
from fuel_cy.contract import expr, load_contracts
from fuel_cy.runtime._validation import NUMPY_DTYPES
from fuel_cy.codegen.cores import BINDINGS
from fuel_cy.codegen.view import LAYOUT_ORDER
from fuel_cy.runtime import _prose_checks

from conftest import ROOT, input_error_of

KERNELS = [k for d in load_contracts(ROOT / "contracts") for k in d.kernels]
# extents for dim symbols: distinct, small, and satisfying the divisibility the contracts state
SYMBOL_VALUES = {"B": 2, "Hq": 4, "Hkv": 2, "Sq": 3, "Sk": 5, "D": 8, "num_blocks": 6, "block_size": 4,
                 "max_blocks_per_seq": 3, "B1": 3, "TB": 2, "TU": 2}   # varlen: B + 1 offsets, B table rows


def _value(sym: str, overrides: dict) -> int:
    return overrides.get(sym, SYMBOL_VALUES.get(sym, 3))


def _extent(kernel, by_name: dict, node) -> int:
    """A dim an expression names, from the arrays made so far (inputs come in contract order)."""
    if isinstance(node, expr.DimRef):
        return by_name[node.tensor].shape[node.index]
    name, axis = kernel.symbols[node.name.lower()]
    return by_name[name].shape[axis]


def _inputs(kernel, dtype=None, overrides=None):
    """One array per input; floats in `dtype`, else the kernel's first (F32 where it takes it)."""
    overrides = overrides or {}
    if dtype is None:
        dtype = "F32" if "F32" in kernel.float_dtypes else kernel.float_dtypes[0]
    arrays = []
    by_name = {}
    for spec in kernel.inputs:
        shape = tuple(_value(s, overrides) for s in spec.dims)
        if isinstance(spec.shape_constraint, expr.Broadcasts):   # the full extents it broadcasts to
            shape = tuple(int(expr.evaluate(t, lambda n: _extent(kernel, by_name, n)))
                          for t in spec.shape_constraint.targets)
        code = dtype if spec.shares_t else spec.dtypes[0]
        arrays.append(np.full(shape, 0.5 if spec.is_float else 0, dtype=NUMPY_DTYPES[code]))
        by_name[spec.name] = arrays[-1]
    for cu, rows_of in (("cu_seqlens_q", "q"), ("cu_seqlens_k", "k")):  # varlen: offsets ending at the rows
        if cu in by_name and by_name[cu].size and by_name[rows_of].ndim:
            rows = by_name[rows_of].shape[:-2]   # [T, H, D] or a pool [NB, BS, H, D]: its leading dims
            by_name[cu][-1] = int(np.prod(rows))
    return arrays


def _call(kernel, arrays, **params):
    return getattr(fuel_cy, kernel.name)(*arrays, **params)


def _layout_violations(arr: np.ndarray) -> dict:
    """One array per layout property, each violating it (and as few others as possible)."""
    out = {}
    big = np.zeros((arr.shape[0] + 1,) + arr.shape[1:], arr.dtype)
    out["start_offset"] = big[1:]
    out["contiguous"] = out["strided"] = np.asfortranarray(np.broadcast_to(arr, arr.shape).copy()) if arr.ndim > 1 else np.zeros(arr.shape[0] * 2, arr.dtype)[::2]
    axis = next(i for i, n in enumerate(arr.shape) if n > 1)
    out["reverse_strides"] = np.flip(arr.copy(), axis=axis)
    out["broadcast_stride0"] = np.broadcast_to(np.take(arr, [0], axis=axis), arr.shape)
    return out


def _first_failing_clause(spec, arr) -> str | None:
    from fuel_cy.runtime._validation import LAYOUT_PREDICATES

    for key in LAYOUT_ORDER:
        policy = spec.layout_policy(key)
        holds = LAYOUT_PREDICATES[key](arr)
        if (policy == "required" and not holds) or (policy == "rejected" and holds):
            return key
    return None


# optional inputs the contract's prose says come together (the forward's out and lse): the
# kernels whose driver has that rule
PAIRED_INPUTS = {(kernel, name): other for kernel, binding in BINDINGS.items()
                 if _prose_checks._out_with_lse in _prose_checks.RULES.get(binding.driver.name, [])
                 for name, other in (("out", "lse"), ("lse", "out"))}


def _clause_cases():
    for k in KERNELS:
        yield k, "baseline"
        for idx, spec in enumerate(k.inputs):
            yield k, ("dtype", idx)
            yield k, ("rank", idx)
            if spec.lowest_rank < spec.rank:
                yield k, ("min_rank", idx)
            for key in LAYOUT_ORDER:
                if spec.layout_policy(key) != "accepted":
                    yield k, ("layout", idx, key)
            if spec.optional:
                yield k, ("omitted", idx)
            yield k, ("not-an-array", idx)
        for sym in {s for spec in k.inputs for s in spec.dims}:
            if sum(s == sym for spec in k.inputs for s in spec.dims) > 1:
                yield k, ("dim", sym)
        for spec in k.inputs:
            if isinstance(spec.shape_constraint, expr.Divisible):
                yield k, ("divisible", spec.name)
            if isinstance(spec.shape_constraint, expr.Broadcasts):
                yield k, ("broadcasts", spec.name)
        for f in k.op_params.fields:
            yield k, ("param", f.name)
            if f.constraint is not None:
                yield k, ("param-constraint", f.name)


CASES = list(_clause_cases())


@pytest.mark.parametrize("kernel,case", CASES, ids=[f"{k.name}-{c if isinstance(c, str) else '-'.join(map(str, c))}" for k, c in CASES])
def test_clause(kernel, case):
    arrays = _inputs(kernel)
    if case == "baseline":
        for dtype in kernel.float_dtypes:
            out = _call(kernel, _inputs(kernel, dtype))
            parts = out if isinstance(out, tuple) else (out,)
            assert [p.dtype for p in parts] == [NUMPY_DTYPES[dtype]] * len(parts)
        return
    kind = case[0]
    if kind == "dtype":
        idx = case[1]
        arrays[idx] = arrays[idx].astype(np.int64)
        with pytest.raises(fuel_cy.InputError, match=rf"{kernel.inputs[idx].name}'.*accept\.inputs\[{idx}\]\.dtypes.*int64") as info:
            _call(kernel, arrays)
        assert info.value.kernel == kernel.name and f"{kernel.loc.path.split('/')[-1]}:" in str(info.value)
    elif kind == "rank":
        idx = case[1]
        arrays[idx] = arrays[idx][..., None]
        with pytest.raises(fuel_cy.InputError, match=rf"accept\.inputs\[{idx}\]\.rank"):
            _call(kernel, arrays)
    elif kind == "min_rank":   # leading dims may be left out down to min_rank, not further
        idx = case[1]
        spec = kernel.inputs[idx]
        lead = spec.rank - spec.lowest_rank
        arrays = _inputs(kernel, overrides={s: 1 for s in spec.dims[:lead]})   # the leading dims 1
        full = list(arrays)
        full[idx] = arrays[idx][(slice(0, 1),) * lead].copy()   # (one that broadcasts takes its targets' shape)
        low = full[idx].reshape(full[idx].shape[lead:])
        _call(kernel, full)
        _call(kernel, arrays[:idx] + [low] + arrays[idx + 1:])
        if spec.lowest_rank > 1:
            arrays[idx] = low[0].copy()
            with pytest.raises(fuel_cy.InputError, match=rf"accept\.inputs\[{idx}\]\.rank"):
                _call(kernel, arrays)
    elif kind == "layout":
        idx, key = case[1], case[2]
        spec = kernel.inputs[idx]
        bad = _layout_violations(arrays[idx])[key]
        clause = _first_failing_clause(spec, bad)
        assert clause is not None, "the constructed array must violate the contract"
        arrays[idx] = bad
        with pytest.raises(fuel_cy.InputError, match=rf"accept\.inputs\[{idx}\]\.layout\.{clause}"):
            _call(kernel, arrays)
    elif kind == "omitted":
        # an omitted optional input is absent, not read: for ALiBi slopes and a bias that is 0,
        # for a boolean mask True everywhere (every pair takes part)
        # (seqused_k: every key of each sequence; a block table: any, every key row holds 0.5)
        idx = case[1]
        partner = PAIRED_INPUTS.get((kernel.name, kernel.inputs[idx].name))
        if partner is not None:
            # inputs that come together (the prose): one alone is an error naming the one
            # missing; both omitted is the call without them
            arrays[idx] = None
            with pytest.raises(fuel_cy.InputError, match=rf"input '{kernel.inputs[idx].name}'.*both or neither"):
                _call(kernel, arrays)
            arrays[[s.name for s in kernel.inputs].index(partner)] = None
            assert all(np.all(np.isfinite(g)) for g in _call(kernel, arrays))
            return
        zeros = np.ones_like(arrays[idx]) if arrays[idx].dtype == np.bool_ else np.zeros_like(arrays[idx])
        if kernel.inputs[idx].name == "seqused_k":
            cu_k = arrays[[s.name for s in kernel.inputs].index("cu_seqlens_k")]
            zeros = np.diff(cu_k).astype(np.uint32)
        arrays[idx] = None
        omitted = _call(kernel, arrays)
        arrays[idx] = zeros
        assert bits(omitted) == bits(_call(kernel, arrays))
    elif kind == "not-an-array":
        idx = case[1]
        arrays[idx] = arrays[idx].tolist()
        with pytest.raises(fuel_cy.InputError, match="expected a numpy.ndarray, received list"):
            _call(kernel, arrays)
    elif kind == "dim":
        sym = case[1]
        owners = [(i, a) for i, spec in enumerate(kernel.inputs) for a, s in enumerate(spec.dims) if s == sym]
        idx, axis = owners[-1]
        shape = list(arrays[idx].shape)
        shape[axis] += 1
        arrays[idx] = np.zeros(shape, arrays[idx].dtype)
        with pytest.raises(fuel_cy.InputError, match=rf"dim {sym} is shared"):
            _call(kernel, arrays)
    elif kind == "divisible":
        spec = kernel.input(case[1])
        denom = spec.shape_constraint.denominator
        sym = kernel.input(denom.tensor).dims[denom.index]
        num = spec.shape_constraint.numerator
        num_value = SYMBOL_VALUES[kernel.input(num.tensor).dims[num.index]]
        arrays = _inputs(kernel, overrides={sym: num_value - 1})
        with pytest.raises(fuel_cy.InputError, match=r"shape_constraint 'divisible"):
            _call(kernel, arrays)
    elif kind == "broadcasts":
        # each dim may be 1 or its target's extent; one more than the target is neither
        idx = next(i for i, spec in enumerate(kernel.inputs) if spec.name == case[1])
        for axis in range(arrays[idx].ndim):
            shape = list(arrays[idx].shape)
            ok = list(shape)
            ok[axis] = 1
            shape[axis] += 1
            sym = kernel.inputs[idx].dims[axis]   # a dim another input binds is that extent alone
            shared = sum(sym in spec.dims for spec in kernel.inputs) > 1
            if not shared:
                good = list(arrays)
                good[idx] = np.zeros(ok, arrays[idx].dtype)
                _call(kernel, good)
            arrays2 = list(arrays)
            arrays2[idx] = np.zeros(shape, arrays[idx].dtype)
            with pytest.raises(fuel_cy.InputError, match=rf"dim {sym} is shared" if shared else r"shape_constraint 'broadcasts_to"):
                _call(kernel, arrays2)
    elif kind == "param":
        field = next(f for f in kernel.op_params.fields if f.name == case[1])
        bad = {"f32": [float("nan"), float("inf"), "0.5", True], "f64": [float("nan"), float("inf"), "0.5", True], "bool": [1, "yes", None if not field.optional else 2],
               "usize": [-1, 1.5, True], "DynScalar": [-1, 2.5, "3"]}[field.base_kind]
        for value in bad:
            if value is None:
                continue
            with pytest.raises(fuel_cy.InputError, match=rf"op_params\.fields\.{field.name}"):
                _call(kernel, arrays, **{field.name: value})
    elif kind == "param-constraint":
        field = next(f for f in kernel.op_params.fields if f.name == case[1])
        with pytest.raises(fuel_cy.InputError, match=rf"op_params\.fields\.{field.name}\.constraint"):
            _call(kernel, arrays, **{field.name: 1000})
    else:  # pragma: no cover
        raise AssertionError(case)


# ---- the prose rules' typed copies (fastcheck.pxi) -----------------------------------------------

def test_every_prose_rule_has_its_typed_copy_in_use():
    """The typed copies are used only while RULES lists exactly what they implement; today that
    is every driver (else a decode-sized paged call pays ~10 us of numpy checks again)."""
    from fuel_cy._generated import _kernels
    from fuel_cy.runtime import _prose_checks

    assert _kernels._FC_TYPED == frozenset(_prose_checks.RULES)


def _paged_case(rng, bad):
    b, mb, bs, nb = 5, 6, 4, 20
    kc = np.zeros((nb, bs, 2, 8), np.float32)
    q = np.zeros((b, 4, 1, 8), np.float32)
    lens = rng.integers(0, mb * bs + 1, b).astype(np.uint32)
    table = rng.integers(0, nb, (b, mb)).astype(np.uint32)
    for i in range(b):  # unused slots may hold anything (a sentinel, stale ids)
        table[i, -(-int(lens[i]) // bs):] = rng.choice([0xFFFFFFFF, nb, 3])
    if bad == "block" and lens.max() > 0:
        i = int(np.argmax(lens))
        table[i, rng.integers(0, -(-int(lens[i]) // bs))] = nb + int(rng.integers(0, 5))
    if bad == "capacity":
        lens[rng.integers(0, b)] = mb * bs + 1
    return q, kc, kc.copy(), table, lens


@pytest.mark.parametrize("seed", range(40))
def test_typed_paged_rules_accept_and_reject_what_the_python_rules_do(seed):
    """The typed block-id and capacity checks against the Python rules they copy, on tables whose
    unused slots hold garbage: the kernel raises exactly when _prose_checks._paged raises, with
    its message."""
    from fuel_cy.runtime import _prose_checks

    rng = np.random.default_rng(seed)
    q, kc, vc, table, lens = _paged_case(rng, ["none", "block", "capacity"][seed % 3])
    arrays = {"q": q, "k_cache": kc, "v_cache": vc, "block_table": table, "context_lens": lens}
    expected = input_error_of(_prose_checks._paged, "attention_paged_naive", arrays, {},
                              "contracts/fuel-reference-backend.md")
    assert input_error_of(fuel_cy.attention_paged_naive, q, kc, vc, table, lens) == expected


def test_a_rule_added_in_python_turns_the_typed_copy_off(tmp_path):
    """RULES gains a rule for the paged driver: the typed copy no longer covers it, so the new
    rule runs (here it refuses every call)."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import importlib.abc, importlib.util, sys
        import numpy as np

        def no(kernel, arrays, params, where):
            from fuel_cy.errors import InputError
            raise InputError(kernel, "input q", "prose: new rule", "refused", where)

        class AddRule(importlib.abc.MetaPathFinder):  # edits RULES as the module is first loaded
            def find_spec(self, name, path, target=None):
                if name != "fuel_cy.runtime._prose_checks":
                    return None
                sys.meta_path.remove(self)
                spec = importlib.util.find_spec(name)
                run = spec.loader.exec_module
                def exec_module(module):
                    run(module)
                    module.RULES["attention_paged_naive"] = module.RULES["attention_paged_naive"] + [no]
                spec.loader.exec_module = exec_module
                return spec

        sys.meta_path.insert(0, AddRule())
        import fuel_cy
        from fuel_cy._generated import _kernels
        assert "attention_paged_naive" not in _kernels._FC_TYPED and "attention_flash" in _kernels._FC_TYPED
        q = np.zeros((1, 2, 1, 8), np.float32)
        kc = np.zeros((2, 4, 1, 8), np.float32)
        try:
            fuel_cy.attention_paged_naive(q, kc, kc, np.zeros((1, 2), np.uint32), np.array([5], np.uint32))
        except fuel_cy.InputError as e:
            assert "prose: new rule" in str(e)
            print("refused")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == "refused", r.stdout + r.stderr


@pytest.mark.parametrize("value", [1e39, -3.5e38, float("inf")])
def test_an_f32_param_beyond_float32s_range_is_an_input_error_and_no_warning(value):
    """A `f32` param that rounds to an infinity in float32 is refused like any non-finite one,
    naming the param and the value, with no numpy overflow warning on the way."""
    import warnings

    q = np.zeros((3, 2, 4), np.float32)
    cu = np.array([0, 3], np.uint32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        msg = input_error_of(fuel_cy.attention_varlen, q, q, q, cu, cu, softmax_scale=value)
    assert msg and "attention_varlen" in msg and "softmax_scale" in msg and "a finite real" in msg, msg
    assert repr(value) in msg, msg


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("value", [10**400, -(10**400), 2**1024], ids=["1e400", "-1e400", "2^1024"])
def test_a_real_param_beyond_float64s_range_is_an_input_error(dtype, value):
    """An integer too large for float() itself (float(10**400) raises OverflowError) is a bad param
    like any other non-finite one: an InputError naming the kernel, the param and the kind, whatever
    the inputs' dtype."""
    q = np.zeros((1, 2, 4, 8), dtype)
    # attention_flash's softmax_scale is of kind f32, attention_masked's of kind f64
    for kernel, kind in ((fuel_cy.attention_flash, "f32"), (fuel_cy.attention_masked, "f64")):
        msg = input_error_of(kernel, q, q, q, softmax_scale=value)
        assert msg and kernel.__name__ in msg and "softmax_scale" in msg, msg
        assert f"kind {kind}: a finite real" in msg, msg
