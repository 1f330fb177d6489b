"""fuel_cy.scaled_dot_product_attention and fuel_cy.torch.scaled_dot_product_attention: torch's
signature, against torch's own SDPA in float64 (the peer's semantics: bool masks True-takes-part,
float masks of the query's dtype added, top-left is_causal, enable_gqa, any leading dims)."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

import fuel_cy
from conftest import input_error_of
from measures import bits, rel
from test_sdpa import CODES, arrays, check, padding, reference

F = torch.nn.functional


def torch_sdpa64(q, k, v, attn_mask=None, **kw):
    t = [torch.from_numpy(np.asarray(x, np.float64)) for x in (q, k, v)]
    m = None
    if attn_mask is not None:
        m = np.ascontiguousarray(attn_mask if attn_mask.dtype == np.bool_ else np.asarray(attn_mask, np.float64))
        m = torch.from_numpy(m)
    out = F.scaled_dot_product_attention(*t, attn_mask=m, **kw).numpy()
    return np.nan_to_num(out)   # torch's fully masked rows are NaN; fuel_cy's are zero (documented)


SDPA_CASES = [  # (q shape, kv heads, mask shape or None, mask kind)
    ((2, 8, 100, 64), 2, (2, 1, 1, 130), "bool"),       # key padding, GQA
    ((2, 8, 100, 64), 8, (1, 8, 100, 130), "float"),    # per-head bias
    ((3, 4, 77, 59), 4, (77, 130), "bool"),             # a 2-D mask over batch and heads
    ((100, 32), None, (100, 130), "float"),             # no batch, no heads
    ((2, 3, 4, 50, 16), 4, (3, 1, 50, 130), "bool"),    # two batch dims
    ((2, 4, 1, 80), 1, (2, 1, 1, 130), "bool"),         # decode, MQA
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, ml_dtypes.bfloat16])
@pytest.mark.parametrize("qshape, hkv, mshape, kind", SDPA_CASES)
def test_sdpa_matches_torch(dtype, qshape, hkv, mshape, kind):
    rng = np.random.default_rng(len(qshape) + qshape[-1])
    kshape = list(qshape)
    if hkv is not None:
        kshape[-3] = hkv
    kshape[-2] = 130
    q = rng.standard_normal(qshape).astype(dtype)
    k, v = (rng.standard_normal(kshape).astype(dtype) for _ in range(2))
    mask = rng.random(mshape) < 0.7 if kind == "bool" else rng.standard_normal(mshape).astype(dtype)
    gqa = hkv is not None and hkv != qshape[-3]
    out = fuel_cy.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)
    assert out.shape == q.shape and out.dtype == q.dtype
    expected = torch_sdpa64(q, k, v, mask, enable_gqa=gqa)
    check(out, expected, CODES[np.dtype(dtype)], qshape[-1], 130)


@pytest.mark.parametrize("lq, lk", [(100, 100), (37, 130), (130, 37)])
def test_sdpa_is_causal_is_top_left_as_torch(lq, lk):
    q, k, v = arrays(2, 4, 4, lq, lk, 32, np.float64, seed=lq)
    out = fuel_cy.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert rel(out, torch_sdpa64(q, k, v, is_causal=True)) <= 1e-12


def test_sdpa_reads_a_broadcast_mask_without_expanding_it():
    """np.broadcast_to's stride-0 dims are read as dims of 1: the same result, no [B, H, L, S] copy."""
    q, k, v = arrays(2, 8, 8, 200, 300, 32, np.float32, seed=6)
    small = padding(2, 300, seed=6)
    wide = np.broadcast_to(small, (2, 8, 200, 300))
    assert bits(fuel_cy.scaled_dot_product_attention(q, k, v, attn_mask=wide)) == \
        bits(fuel_cy.scaled_dot_product_attention(q, k, v, attn_mask=small))
    assert rel(fuel_cy.scaled_dot_product_attention(q, k, v, attn_mask=wide), torch_sdpa64(q, k, v, wide)) <= 2e-5


def test_sdpa_scale_and_softcap():
    q, k, v = arrays(1, 2, 2, 50, 60, 16, np.float64, seed=7)
    out = fuel_cy.scaled_dot_product_attention(q, k, v, scale=0.5)
    assert rel(out, torch_sdpa64(q, k, v, scale=0.5)) <= 1e-12
    capped = fuel_cy.scaled_dot_product_attention(q, k, v, scale=0.5, softcap=2.0)
    assert rel(capped, reference(q, k, v, scale=0.5, softcap=2.0)) <= 1e-12 and not np.allclose(capped, out)


@pytest.mark.parametrize("call, clause", [
    (lambda q, k, v: fuel_cy.scaled_dot_product_attention(q, k, v, dropout_p=0.1), "no dropout"),
    (lambda q, k, v: fuel_cy.scaled_dot_product_attention(q, k, v, attn_mask=np.ones((5, 10), bool),
                                                         is_causal=True), "is_causal=True"),
    (lambda q, k, v: fuel_cy.scaled_dot_product_attention(q, k[:, :2], v[:, :2]), "enable_gqa=True"),
    (lambda q, k, v: fuel_cy.scaled_dot_product_attention(q, k, v, attn_mask=np.ones((3, 10), bool)),
     "broadcastable to [..., H, L, S] = [2, 4, 5, 10]"),
    (lambda q, k, v: fuel_cy.scaled_dot_product_attention(q, k, v, attn_mask=np.ones((5, 10), np.int32)),
     "a bool mask, or a float mask of the query's dtype"),
    (lambda q, k, v: fuel_cy.scaled_dot_product_attention(q, k, v, attn_mask=np.ones((5, 10), np.float64)),
     "float64 with a float32 query"),
    (lambda q, k, v: fuel_cy.scaled_dot_product_attention(q.tolist(), k, v), "received list"),
    (lambda q, k, v: fuel_cy.scaled_dot_product_attention(q, k[0], v[0]), "share their leading (batch) dims"),
])
def test_sdpa_bad_arguments_are_input_errors(call, clause):
    q, k, v = arrays(2, 4, 4, 5, 10, 8, np.float32)
    msg = input_error_of(call, q, k, v)
    assert msg and msg.startswith("scaled_dot_product_attention:") and clause in msg


def test_torch_entry_matches_torch_and_compiles():
    import fuel_cy.torch as ft

    b, h, lq, lk, d = 2, 8, 64, 96, 32
    g = torch.Generator().manual_seed(0)
    q = torch.randn(b, lq, h, d, generator=g).transpose(1, 2)       # [B, S, H, D] viewed as [B, H, S, D]
    k = torch.randn(b, lk, 2, d, generator=g).transpose(1, 2)
    v = torch.randn(b, lk, 2, d, generator=g).transpose(1, 2)
    keep = (torch.arange(lk)[None, :] < torch.tensor([50, 96])[:, None])[:, None, None, :].expand(b, 1, lq, lk)
    expected = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=keep, enable_gqa=True)
    out = ft.scaled_dot_product_attention(q, k, v, attn_mask=keep, enable_gqa=True)
    assert out.dtype == torch.float32 and float((out - expected).abs().max()) <= 2e-5 * float(expected.abs().max())
    compiled = torch.compile(lambda q, k, v, m: ft.scaled_dot_product_attention(q, k, v, attn_mask=m, enable_gqa=True),
                             fullgraph=True)
    assert torch.equal(compiled(q, k, v, keep), out)


@pytest.mark.parametrize("grad", [False, True], ids=["inference", "autograd"])
def test_round_p_reaches_the_kernel(grad):
    """bf16: the default rounds P to bf16 (attention_masked's default), round_p=False keeps it
    float32, through the direct path and through the op that autograd records alike."""
    import fuel_cy.torch as ft

    q, k, v = arrays(1, 4, 2, 200, 200, 64, ml_dtypes.bfloat16, seed=8)
    t = [torch.from_numpy(x.view(np.uint16).astype(np.int32)).to(torch.int16).view(torch.bfloat16).requires_grad_(grad)
         for x in (q, k, v)]
    for round_p in (True, False):
        got = ft.scaled_dot_product_attention(*t, is_causal=True, enable_gqa=True, round_p=round_p)
        want = fuel_cy.attention_masked(q, k, v, causal=True, round_p=round_p)
        assert bits(got.detach().view(torch.int16).numpy()) == bits(want.view(np.int16))
        if grad:   # the backward runs in the forward's mode, given its out and lse
            do = np.ones_like(q)
            for x in t:
                x.grad = None
            got.backward(torch.ones_like(got))
            out, lse = fuel_cy.attention_masked(q, k, v, causal=True, round_p=round_p, return_lse=True)
            want_grads = fuel_cy.attention_masked_backward(q, k, v, do, causal=True, round_p=round_p, out=out,
                                                           lse=lse)
            for x, w in zip(t, want_grads):
                assert bits(x.grad.view(torch.int16).numpy()) == bits(w.view(np.int16))
