"""`out=`: the contract's `caller_buffer` clause (attention_masked, attention_varlen) writes the
output into the caller's array and returns it; every way the array can be wrong is an InputError
naming the kernel, the param and the clause, raised before any compute (the array untouched)."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import fuel_cy
from fuel_cy.contract import ContractError, parse_document
from fuel_cy.errors import InputError

BF16 = np.dtype(ml_dtypes.bfloat16)


def _masked(dtype=np.float32):
    rng = np.random.default_rng(0)
    q = rng.standard_normal((2, 4, 30, 16)).astype(dtype)
    k = rng.standard_normal((2, 2, 40, 16)).astype(dtype)
    mask = rng.random((2, 1, 1, 40)) < 0.8
    return (q, k, k, mask), {"causal": True}, fuel_cy.attention_masked


def _varlen(dtype=np.float32):
    rng = np.random.default_rng(1)
    q = rng.standard_normal((30, 4, 16)).astype(dtype)
    k = rng.standard_normal((40, 2, 16)).astype(dtype)
    cq, ck = np.array([0, 10, 30], np.uint32), np.array([0, 20, 40], np.uint32)
    return (q, k, k, cq, ck), {"causal": True}, fuel_cy.attention_varlen


@pytest.mark.parametrize("make", [_masked, _varlen], ids=["masked", "varlen"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, BF16, np.float16], ids=lambda d: np.dtype(d).name)
def test_out_receives_the_bits_of_a_fresh_output(make, dtype):
    args, kw, fn = make(dtype)
    fresh = fn(*args, **kw)
    out = np.full_like(fresh, 7)
    got = fn(*args, **kw, out=out)
    assert got is out and out.tobytes() == fresh.tobytes()


@pytest.mark.parametrize("make", [_masked, _varlen], ids=["masked", "varlen"])
def test_out_with_a_second_output_returns_the_tuple(make):
    args, kw, fn = make()
    out = np.empty_like(args[0])
    got, lse = fn(*args, **kw, return_lse=True, out=out)
    want, want_lse = fn(*args, **kw, return_lse=True)
    assert got is out and np.array_equal(out, want) and np.array_equal(lse, want_lse)


@pytest.mark.parametrize("make", [_masked, _varlen], ids=["masked", "varlen"])
def test_every_wrong_out_is_refused_before_compute(make):
    args, kw, fn = make()
    q = args[0]
    fused = np.zeros((2,) + q.shape, q.dtype)   # q and the candidate side by side in one buffer
    fused[0] = q
    cases = {
        "have the output's shape": np.zeros(q.shape[:-1] + (q.shape[-1] + 1,), q.dtype),
        "have the output's dtype": np.zeros(q.shape, np.float64),
        "be C-contiguous": np.zeros(q.shape[:-1] + (2 * q.shape[-1],), q.dtype)[..., ::2],
        "be a numpy array": q.tolist(),
        "share no memory with an input": q,
    }
    ro = np.zeros(q.shape, q.dtype)
    ro.flags.writeable = False
    cases["be writeable"] = ro
    for clause, bad in cases.items():
        before = np.array(bad, copy=True) if isinstance(bad, np.ndarray) else None
        with pytest.raises(InputError, match=rf"{fn.__name__}: param 'out': return\.outputs\[0\]\.caller_buffer: .*{clause}"):
            fn(*args, **kw, out=bad)
        if before is not None:
            assert np.array_equal(before, bad, equal_nan=True)   # nothing written
    # a view into the same buffer as q that does not overlap it is fine; one that does is not
    ok = fused[1]
    fn(fused[0], *args[1:], **kw, out=ok)
    assert np.array_equal(ok, fn(*args, **kw))
    straddle = fused.reshape(-1)[q.size // 2: q.size // 2 + q.size].reshape(q.shape)
    with pytest.raises(InputError, match="share no memory"):
        fn(fused[0], *args[1:], **kw, out=straddle)


def test_torch_out_is_written_and_refused_like_the_arrays():
    torch = pytest.importorskip("torch")
    import fuel_cy.torch as ft
    args, kw, _ = _masked()
    t = [torch.from_numpy(a) for a in args]
    out = torch.empty(t[0].shape)
    got = ft.attention_masked(*t, **kw, out=out)
    assert got is out and torch.equal(out, ft.attention_masked(*t, **kw))
    with pytest.raises(InputError, match="shares no memory"):
        ft.attention_masked(*t, **kw, out=t[0])
    with pytest.raises(InputError, match="dtype and shape"):
        ft.attention_masked(*t, **kw, out=torch.empty(t[0].shape, dtype=torch.float64))
    q = t[0].clone().requires_grad_()
    with pytest.raises(InputError, match="not differentiable"):
        ft.attention_masked(q, *t[1:], **kw, out=torch.empty(q.shape))


def test_a_caller_buffer_named_like_an_input_is_refused(canonical_text):
    line = "      shape_rule: from_params(q) # [B, Hq, Sq, D]\n"
    text = canonical_text.replace(line, line + "      caller_buffer: k\n", 1)
    assert text != canonical_text
    with pytest.raises(ContractError, match="caller_buffer names an input or param"):
        parse_document(text, "x.md")
