"""Every validator clause, for every kernel, has a passing and a failing case -- generated from the
contract model itself, so a new kernel or input in a contract gets these tests for free."""
from __future__ import annotations

import numpy as np
import pytest

import fuel_cy
from measures import bits
from fuel_cy.contract import expr, load_contracts
from fuel_cy.runtime._validation import NUMPY_DTYPES
from fuel_cy.codegen.view import LAYOUT_ORDER

from conftest import ROOT

KERNELS = [k for d in load_contracts(ROOT / "contracts") for k in d.kernels]
# extents for dim symbols: distinct, small, and satisfying the divisibility the contracts state
SYMBOL_VALUES = {"B": 2, "Hq": 4, "Hkv": 2, "Sq": 3, "Sk": 5, "D": 8, "num_blocks": 6, "block_size": 4,
                 "max_blocks_per_seq": 3}


def _value(sym: str, overrides: dict) -> int:
    return overrides.get(sym, SYMBOL_VALUES.get(sym, 3))


def _inputs(kernel, dtype=None, overrides=None):
    """One array per input; floats in `dtype`, else the kernel's first (F32 where it takes it)."""
    overrides = overrides or {}
    if dtype is None:
        dtype = "F32" if "F32" in kernel.float_dtypes else kernel.float_dtypes[0]
    arrays = []
    for spec in kernel.inputs:
        shape = tuple(_value(s, overrides) for s in spec.dims)
        code = dtype if spec.is_float else spec.dtypes[0]
        arrays.append(np.full(shape, 0.5 if spec.is_float else 0, dtype=NUMPY_DTYPES[code]))
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


def _clause_cases():
    for k in KERNELS:
        yield k, "baseline"
        for idx, spec in enumerate(k.inputs):
            yield k, ("dtype", idx)
            yield k, ("rank", idx)
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
        # an omitted optional input is absent, not read: for ALiBi slopes that is slope 0
        idx = case[1]
        zeros = np.zeros_like(arrays[idx])
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
    elif kind == "param":
        field = next(f for f in kernel.op_params.fields if f.name == case[1])
        bad = {"f32": [float("nan"), float("inf"), "0.5", True], "bool": [1, "yes", None if not field.optional else 2],
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
