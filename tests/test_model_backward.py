"""The model-facing kernels' backwards (attention_masked_backward, attention_varlen_backward) and
their autograd: against float64 references written here (torch's own float64 autograd over a
math-only attention for the masked kernel, a per-sequence flash-attn-convention reference for
varlen), the bits the contracts promise (no masks: attention_flash_backward's), determinism,
errors, and a transformers model's training step against eager attention."""
from __future__ import annotations

import copy

import ml_dtypes
import numpy as np
import pytest
import torch

import fuel_cy
from conftest import each_bf16_score_form
from fuel_cy.errors import InputError

BF16 = np.dtype(ml_dtypes.bfloat16)
DTYPES = [np.float32, np.float64, BF16, np.float16]
# gradient error vs the float64 reference, relative to the gradient's largest element: f32/f64 in
# their own type, bf16/f16 float32 math on the given (rounded) inputs, each gradient rounded once
TOL = {np.dtype(np.float32): 5e-6, np.dtype(np.float64): 1e-12, BF16: 2e-2, np.dtype(np.float16): 3e-3}


def _t(x: np.ndarray) -> torch.Tensor:
    return torch.tensor(np.asarray(x, np.float64), requires_grad=True)


def _rel(got: np.ndarray, ref: np.ndarray) -> float:
    return float(np.abs(got.astype(np.float64) - ref).max() / max(np.abs(ref).max(), 1e-300))


def _ref_masked(q, k, v, do, mask, bias, causal, scale, softcap):
    """torch SDPA's math in float64, with rows that nothing admits giving zeros (the contract)."""
    qt, kt, vt = _t(q), _t(k), _t(v)
    g = q.shape[1] // k.shape[1]
    s = scale * qt @ kt.repeat_interleave(g, 1).transpose(-1, -2)
    if softcap:
        s = torch.tanh(s / softcap) * softcap
    if bias is not None:
        s = s + torch.tensor(np.asarray(bias, np.float64))
    keep = torch.ones(s.shape, dtype=torch.bool)
    if mask is not None:
        keep = keep & torch.tensor(mask)
    if causal:   # top-left, as torch's is_causal
        keep = keep & torch.ones(s.shape[-2:], dtype=torch.bool).tril()
    p = torch.softmax(s.masked_fill(~keep, -torch.inf), -1).nan_to_num(0.0)
    (p @ vt.repeat_interleave(g, 1)).backward(torch.tensor(np.asarray(do, np.float64)))
    return [x.grad.numpy() for x in (qt, kt, vt)]


def _rand(rng, shape, dtype):
    return rng.standard_normal(shape).astype(dtype)


MASKED_CASES = ["padding", "holes+bias", "causal_sq_ne_sk", "softcap+bias", "mqa", "tiles"]


def _masked_case(case, dtype):
    """((q, k, v, do, mask, bias), kwargs) of one attention_masked_backward case."""
    rng = np.random.default_rng(MASKED_CASES.index(case))
    B, Hq, Hkv, Sq, Sk, D = 2, 4, 2, 37, 53, 24
    mask = bias = None
    causal, softcap = False, None
    if case == "padding":   # a key-padding mask [B, 1, 1, Sk]
        mask = np.ones((B, 1, 1, Sk), bool)
        mask[0, ..., 40:] = False
    elif case == "holes+bias":   # per-query holes, a row with nothing admitted, a per-head bias
        mask = rng.random((B, 1, Sq, Sk)) < 0.7
        mask[1, 0, 5] = False
        bias = _rand(rng, (1, Hq, 1, Sk), dtype)
    elif case == "causal_sq_ne_sk":
        causal = True
    elif case == "softcap+bias":
        softcap, bias = 4.0, _rand(rng, (B, Hq, Sq, Sk), dtype)
    elif case == "mqa":
        Hkv, D, causal = 1, 59, True
    elif case == "tiles":   # several key tiles and query steps; a mask that drops whole tiles for some steps
        Sq, Sk, D = 150, 300, 40
        mask = rng.random((B, 1, Sq, Sk)) < 0.9
        mask[0, :, :70, 128:256] = False   # the first query step skips the second tile
        mask[0, :, 140:, :] = False   # rows with nothing admitted
        mask[1, :, :, 260:] = False
        bias = -np.abs(_rand(rng, (B, 1, 1, Sk), dtype))
    q, do = _rand(rng, (B, Hq, Sq, D), dtype), _rand(rng, (B, Hq, Sq, D), dtype)
    k, v = _rand(rng, (B, Hkv, Sk, D), dtype), _rand(rng, (B, Hkv, Sk, D), dtype)
    return (q, k, v, do, mask, bias), dict(softmax_scale=0.3, causal=causal, softcap=softcap)


def _ref_masked_case(args, kw, dtype):
    eff = 0.3 if np.dtype(dtype) == np.float64 else float(np.float32(0.3))   # the scale T computes with
    return _ref_masked(*args, kw["causal"], eff, kw["softcap"])


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("case", MASKED_CASES)
def test_masked_backward_matches_float64_autograd(dtype, case):
    args, kw = _masked_case(case, dtype)
    got = fuel_cy.attention_masked_backward(*args, **kw)
    ref = _ref_masked_case(args, kw, dtype)
    for name, g, r, x in zip(("dq", "dk", "dv"), got, ref, args):
        assert g.dtype == np.dtype(dtype) and g.shape == x.shape
        assert _rel(g, r) <= TOL[np.dtype(dtype)], name
    if case == "holes+bias":   # the row with no admissible key contributes nothing
        assert not np.any(got[0][1, :, 5].astype(np.float64))


@pytest.mark.parametrize("case", MASKED_CASES)
def test_masked_backward_given_the_forwards_out_and_lse_matches_float64(case):
    """float32 with the forward's out and lse (return_lse=True): the statistics come from them,
    key tiles outer, the masks applied to each recomputed score; the gradients meet the same
    float64 bound, rows nothing admits are still exact zeros, and no input is modified."""
    args, kw = _masked_case(case, np.float32)
    q, k, v, do, mask, bias = args
    out, lse = fuel_cy.attention_masked(q, k, v, mask, bias, return_lse=True, **kw)
    before = [x.copy() for x in (*args[:4], out, lse)]
    got = fuel_cy.attention_masked_backward(*args, out=out, lse=lse, **kw)
    ref = _ref_masked_case(args, kw, np.float32)
    for name, g, r in zip(("dq", "dk", "dv"), got, ref):
        assert _rel(g, r) <= TOL[np.dtype(np.float32)], name
    if case == "holes+bias":
        assert not np.any(got[0][1, :, 5])
    if case == "tiles":
        assert not np.any(got[0][0, :, 140:])
    for x, b in zip((*args[:4], out, lse), before):
        assert x.tobytes() == b.tobytes()


def test_masked_backward_given_out_and_lse_takes_dlse():
    """dlse ([B, Hq, Sq], a dim of 1 broadcast) with and without the forward's statistics: the
    same gradients to float32 rounding, and far from the gradients without it."""
    args, kw = _masked_case("tiles", np.float32)
    q, k, v, do, mask, bias = args
    rng = np.random.default_rng(5)
    dlse = _rand(rng, (2, 4, 1), np.float32)
    out, lse = fuel_cy.attention_masked(q, k, v, mask, bias, return_lse=True, **kw)
    want = fuel_cy.attention_masked_backward(*args, dlse=dlse, **kw)
    got = fuel_cy.attention_masked_backward(*args, dlse=dlse, out=out, lse=lse, **kw)
    for g, w in zip(got, want):
        assert _rel(g, w.astype(np.float64)) <= 2e-6
    plain = fuel_cy.attention_masked_backward(*args, out=out, lse=lse, **kw)
    assert _rel(plain[0], got[0].astype(np.float64)) > 1e-2


def test_masked_backward_given_out_and_lse_recomputes_float64():
    """float64 (its float32 lse would cost it precision) takes out and lse and recomputes: the
    bits of the call without them."""
    args, kw = _masked_case("tiles", np.float64)
    q, k, v, do, mask, bias = args
    out, lse = fuel_cy.attention_masked(q, k, v, mask, bias, return_lse=True, **kw)
    a = fuel_cy.attention_masked_backward(*args, **kw)
    b = fuel_cy.attention_masked_backward(*args, out=out, lse=lse, **kw)
    for x, y in zip(a, b):
        assert x.tobytes() == y.tobytes()


@pytest.mark.parametrize("dtype", [BF16, np.float16], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("case", ["holes+bias", "softcap+bias", "mqa", "tiles"])
def test_half_masked_backward_given_out_and_lse_matches_float64(dtype, case):
    """bf16/f16 given the forward's out and lse (key tiles outer where _saved_stats takes them:
    the float32 loops and every form of the bf16 products; f16 on its split words recomputes), in
    both round_p modes and every form of the bf16 products: the same float64 bound as without
    them."""
    args, kw = _masked_case(case, dtype)
    q, k, v, do, mask, bias = args
    ref = _ref_masked_case(args, kw, dtype)
    for form in each_bf16_score_form():
        for rp in (True, False):
            out, lse = fuel_cy.attention_masked(q, k, v, mask, bias, return_lse=True, round_p=rp, **kw)
            got = fuel_cy.attention_masked_backward(*args, out=out, lse=lse, round_p=rp, **kw)
            for name, g, r in zip(("dq", "dk", "dv"), got, ref):
                assert g.dtype == np.dtype(dtype)
                assert _rel(g, r) <= TOL[np.dtype(dtype)], (form, rp, name)
            if case == "holes+bias":
                assert not np.any(got[0][1, :, 5].astype(np.float64))


def test_bf16_backward_given_out_and_lse_keeps_its_order_in_every_form():
    """bf16 given the forward's out and lse runs key tiles outer in every form of its products and
    both round_p modes (vdpbf16ps with round_p included, whose products read P and dS paired): the
    same bits at 1 and 2 threads, and not the recomputing order's bits (dQ summed over three key
    tiles in another order)."""
    rng = np.random.default_rng(11)
    q, do = _rand(rng, (1, 4, 96, 64), BF16), _rand(rng, (1, 4, 96, 64), BF16)
    k, v = _rand(rng, (1, 2, 300, 64), BF16), _rand(rng, (1, 2, 300, 64), BF16)
    for form in each_bf16_score_form():
        for rp in (True, False):
            out, lse = fuel_cy.attention_masked(q, k, v, return_lse=True, round_p=rp)
            try:
                fuel_cy.set_num_threads(1)
                one = fuel_cy.attention_masked_backward(q, k, v, do, out=out, lse=lse, round_p=rp)
                fuel_cy.set_num_threads(2)
                two = fuel_cy.attention_masked_backward(q, k, v, do, out=out, lse=lse, round_p=rp)
            finally:
                fuel_cy.set_num_threads(0)
            recomputed = fuel_cy.attention_masked_backward(q, k, v, do, round_p=rp)
            assert all(a.tobytes() == b.tobytes() for a, b in zip(one, two)), (form, rp)
            assert any(a.tobytes() != r.tobytes() for a, r in zip(one, recomputed)), (form, rp)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_masked_backward_without_masks_gives_flash_backwards_bits(dtype):
    rng = np.random.default_rng(3)
    q, do = _rand(rng, (1, 4, 70, 32), dtype), _rand(rng, (1, 4, 70, 32), dtype)
    k, v = _rand(rng, (1, 2, 90, 32), dtype), _rand(rng, (1, 2, 90, 32), dtype)
    flash = fuel_cy.attention_flash_backward_mixed if np.dtype(dtype).itemsize == 2 else fuel_cy.attention_flash_backward
    for causal in (False, True):
        # (a scale float32 holds exactly: attention_masked's is a float64, attention_flash's a float32)
        # (half types in the same round_p mode: the model-facing default rounds, the mixed one not)
        for rp in (True, False):
            a = fuel_cy.attention_masked_backward(q, k, v, do, softmax_scale=0.125, causal=causal, softcap=5.0,
                                                  round_p=rp)
            b = flash(q, k, v, do, softmax_scale=0.125, causal=causal, softcap=5.0,
                      **({"round_p": rp} if flash is fuel_cy.attention_flash_backward_mixed else {}))
            for x, y in zip(a, b):
                assert x.tobytes() == y.tobytes()


# ---- varlen ---------------------------------------------------------------------------------------


def _ref_varlen_seq(q, k, v, do, scale, causal, wl, wr, softcap, slopes):
    """One sequence in flash-attn's conventions: query i at key position i + lk - lq, ALiBi
    -slope * |p - j|; float64 autograd.  q [lq, Hq, D], k/v [lk, Hkv, D]."""
    qt, kt, vt = _t(q), _t(k), _t(v)
    lq, lk, g = q.shape[0], k.shape[0], q.shape[1] // k.shape[1]
    s = scale * qt.transpose(0, 1) @ kt.transpose(0, 1).repeat_interleave(g, 0).transpose(-1, -2)
    if softcap:
        s = torch.tanh(s / softcap) * softcap
    p = torch.arange(lq)[:, None] + lk - lq
    j = torch.arange(lk)[None, :]
    if slopes is not None:
        s = s - torch.tensor(np.asarray(slopes, np.float64))[:, None, None] * (p - j).abs()
    keep = torch.ones(lq, lk, dtype=torch.bool)
    if causal:
        keep &= j <= p
    if wl is not None:
        keep &= j >= p - wl
    if wr is not None:
        keep &= j <= p + wr
    prob = torch.softmax(s.masked_fill(~keep, -torch.inf), -1).nan_to_num(0.0)
    out = (prob @ vt.transpose(0, 1).repeat_interleave(g, 0)).transpose(0, 1)
    out.backward(torch.tensor(np.asarray(do, np.float64)))
    return [x.grad.numpy() for x in (qt, kt, vt)]


def _ref_varlen(q, k, v, do, cq, ck, used, scale, causal=False, wl=None, wr=None, softcap=None, slopes=None):
    ref = [np.zeros(x.shape) for x in (q, k, v)]
    for b in range(len(cq) - 1):
        lk = int(used[b]) if used is not None else int(ck[b + 1] - ck[b])
        if cq[b + 1] == cq[b] or lk == 0:
            continue
        qs, ks = slice(int(cq[b]), int(cq[b + 1])), slice(int(ck[b]), int(ck[b]) + lk)
        sl = None if slopes is None else (slopes if slopes.ndim == 1 else slopes[b])
        r = _ref_varlen_seq(q[qs], k[ks], v[ks], do[qs], scale, causal, wl, wr, softcap, sl)
        ref[0][qs], ref[1][ks], ref[2][ks] = r
    return ref


# ragged lengths: an empty sequence (lq = 0), one with no keys, more queries than keys, a decode step
LQ = [5, 0, 33, 1, 20, 12]
LK = [9, 4, 33, 17, 0, 7]
VARLEN_CASES = {
    "causal": dict(causal=True),
    "windows+alibi": dict(wl=3, wr=2, slopes="H"),
    "causal+softcap+alibi[B,H]+seqused": dict(causal=True, softcap=4.0, slopes="BH", used=True),
    "seqused": dict(used=True),
    "mqa_d59_causal": dict(causal=True, hkv=1, d=59),
}


def _varlen_case(case, dtype, seed):
    """VARLEN_CASES[case]'s inputs and keyword arguments over LQ/LK's ragged sequences."""
    opts = dict(VARLEN_CASES[case])
    rng = np.random.default_rng(seed)
    Hq, Hkv, D = 4, opts.pop("hkv", 2), opts.pop("d", 40)
    cq = np.concatenate([[0], np.cumsum(LQ)]).astype(np.uint32)
    ck = np.concatenate([[0], np.cumsum(LK)]).astype(np.uint32)
    used = np.array([7, 4, 30, 17, 0, 7], np.uint32) if opts.pop("used", False) else None
    slopes = opts.pop("slopes", None)
    if slopes is not None:
        slopes = (rng.random((len(LQ), Hq) if slopes == "BH" else Hq) * 0.3).astype(np.float32)
    q, do = _rand(rng, (int(cq[-1]), Hq, D), dtype), _rand(rng, (int(cq[-1]), Hq, D), dtype)
    k, v = _rand(rng, (int(ck[-1]), Hkv, D), dtype), _rand(rng, (int(ck[-1]), Hkv, D), dtype)
    kw = dict(softmax_scale=0.2, causal=opts.get("causal", False), window_size_left=opts.get("wl"),
              window_size_right=opts.get("wr"), softcap=opts.get("softcap"))
    return (q, k, v, do, cq, ck, slopes, used), kw


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("case", list(VARLEN_CASES))
def test_varlen_backward_matches_per_sequence_float64_reference(dtype, case):
    (q, k, v, do, cq, ck, slopes, used), kw = _varlen_case(case, dtype, len(case))
    got = fuel_cy.attention_varlen_backward(q, k, v, do, cq, ck, slopes, used, **kw)
    eff = float(np.float32(0.2))   # the contract's f32 scale
    ref = _ref_varlen(q, k, v, do, cq, ck, used, eff, kw["causal"], kw["window_size_left"], kw["window_size_right"],
                      kw["softcap"], slopes)
    for name, g, r, x in zip(("dq", "dk", "dv"), got, ref, (q, k, v)):
        assert g.dtype == np.dtype(dtype) and g.shape == x.shape
        assert _rel(g, r) <= TOL[np.dtype(dtype)], name
    # rows nothing read are exact zeros: the sequence without keys, keys past seqused_k
    assert not np.any(got[0][int(cq[4]):int(cq[5])].astype(np.float64))
    if used is not None:
        assert not np.any(got[1][int(ck[0]) + 7:int(ck[1])].astype(np.float64))


@pytest.mark.parametrize("case", list(VARLEN_CASES))
def test_varlen_backward_given_the_forwards_out_and_lse_matches_float64(case):
    """float32 with the forward's out and lse: the statistics come from them (key tiles outer);
    the gradients meet the same float64 bound, rows nothing reads are still exact zeros."""
    (q, k, v, do, cq, ck, slopes, used), kw = _varlen_case(case, np.float32, len(case))
    out, lse = fuel_cy.attention_varlen(q, k, v, cq, ck, slopes, None, used, return_lse=True, **kw)
    before = [x.copy() for x in (q, k, v, do, out, lse)]
    got = fuel_cy.attention_varlen_backward(q, k, v, do, cq, ck, slopes, used, out=out, lse=lse, **kw)
    ref = _ref_varlen(q, k, v, do, cq, ck, used, float(np.float32(0.2)), kw["causal"], kw["window_size_left"],
                      kw["window_size_right"], kw["softcap"], slopes)
    for name, g, r in zip(("dq", "dk", "dv"), got, ref):
        assert _rel(g, r) <= TOL[np.dtype(np.float32)], name
    assert not np.any(got[0][int(cq[4]):int(cq[5])])
    if used is not None:
        assert not np.any(got[1][int(ck[0]) + 7:int(ck[1])])
    for x, b in zip((q, k, v, do, out, lse), before):   # inputs are never modified
        assert x.tobytes() == b.tobytes()


def test_varlen_backward_given_out_and_lse_takes_dlse_and_long_rows():
    """Several key tiles per sequence (the tile loop's edges: 300 keys = 128 + 128 + 44), GQA,
    and dlse: against the recomputing backward's float64 reference plus lse's gradient."""
    rng = np.random.default_rng(11)
    cq, ck = np.array([0, 130, 390], np.uint32), np.array([0, 300, 557], np.uint32)
    q, do = _rand(rng, (390, 4, 72), np.float32), _rand(rng, (390, 4, 72), np.float32)
    k, v = _rand(rng, (557, 2, 72), np.float32), _rand(rng, (557, 2, 72), np.float32)
    dlse = _rand(rng, (4, 390), np.float32)
    for causal in (False, True):
        out, lse = fuel_cy.attention_varlen(q, k, v, cq, ck, causal=causal, return_lse=True)
        want = fuel_cy.attention_varlen_backward(q, k, v, do, cq, ck, dlse=dlse, causal=causal)
        got = fuel_cy.attention_varlen_backward(q, k, v, do, cq, ck, dlse=dlse, out=out, lse=lse, causal=causal)
        for g, w in zip(got, want):
            assert _rel(g, w.astype(np.float64)) <= 2e-6
        # and dlse counts: without it the gradients move by far more than that
        plain = fuel_cy.attention_varlen_backward(q, k, v, do, cq, ck, out=out, lse=lse, causal=causal)
        assert _rel(plain[0], got[0].astype(np.float64)) > 1e-2


def test_varlen_backward_given_out_and_lse_recomputes_float64():
    """float64 (its float32 lse would cost it precision) takes out and lse and recomputes: the
    bits of the call without them."""
    (q, k, v, do, cq, ck, slopes, used), kw = _varlen_case("causal+softcap+alibi[B,H]+seqused", np.float64, 12)
    out, lse = fuel_cy.attention_varlen(q, k, v, cq, ck, slopes, None, used, return_lse=True, **kw)
    a = fuel_cy.attention_varlen_backward(q, k, v, do, cq, ck, slopes, used, **kw)
    b = fuel_cy.attention_varlen_backward(q, k, v, do, cq, ck, slopes, used, out=out, lse=lse, **kw)
    for x, y in zip(a, b):
        assert x.tobytes() == y.tobytes()


@pytest.mark.parametrize("dtype", [BF16, np.float16], ids=lambda d: np.dtype(d).name)
def test_half_varlen_backward_given_out_and_lse_matches_float64(dtype):
    """bf16/f16 varlen given the forward's out and lse, both round_p modes, every product form:
    the per-sequence float64 bound, rows nothing reads still zero."""
    (q, k, v, do, cq, ck, slopes, used), kw = _varlen_case("causal+softcap+alibi[B,H]+seqused", dtype, 12)
    ref = _ref_varlen(q, k, v, do, cq, ck, used, float(np.float32(0.2)), kw["causal"], kw["window_size_left"],
                      kw["window_size_right"], kw["softcap"], slopes)
    for form in each_bf16_score_form():
        for rp in (True, False):
            out, lse = fuel_cy.attention_varlen(q, k, v, cq, ck, slopes, None, used, return_lse=True, round_p=rp, **kw)
            got = fuel_cy.attention_varlen_backward(q, k, v, do, cq, ck, slopes, used, out=out, lse=lse, round_p=rp,
                                                    **kw)
            for name, g, r in zip(("dq", "dk", "dv"), got, ref):
                assert _rel(g, r) <= TOL[np.dtype(dtype)], (form, rp, name)
            assert not np.any(got[0][int(cq[4]):int(cq[5])].astype(np.float64))


def _as_heads(x: np.ndarray) -> np.ndarray:
    """Packed varlen rows [l, H, D] as one batch item's heads [1, H, l, D], a fresh array."""
    return x.transpose(1, 0, 2)[None].copy()


def _as_rows(x: np.ndarray) -> np.ndarray:
    """_as_heads undone: [1, H, l, D] as packed rows [l, H, D], C-contiguous."""
    return np.ascontiguousarray(x[0].transpose(1, 0, 2))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_varlen_backward_of_one_causal_sequence_gives_flash_backwards_bits(dtype):
    rng = np.random.default_rng(5)
    S, H, D = 77, 4, 32
    q, k, v, do = (_rand(rng, (S, H, D), dtype) for _ in range(4))
    cu = np.array([0, S], np.uint32)
    flash = fuel_cy.attention_flash_backward_mixed if np.dtype(dtype).itemsize == 2 else fuel_cy.attention_flash_backward
    for rp in (True, False):   # (half types in the same round_p mode)
        got = fuel_cy.attention_varlen_backward(q, k, v, do, cu, cu, softmax_scale=0.2, causal=True, round_p=rp)
        want = flash(_as_heads(q), _as_heads(k), _as_heads(v), _as_heads(do), softmax_scale=0.2, causal=True,
                     **({"round_p": rp} if flash is fuel_cy.attention_flash_backward_mixed else {}))
        for g, w in zip(got, want):
            assert g.tobytes() == _as_rows(w).tobytes()


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_varlen_backward_given_out_and_lse_gives_each_sequences_masked_backward_bits(dtype):
    """Given the forward's out and lse, each sequence's gradients are the bits
    attention_masked_backward gives that sequence alone as [1, H, l, D] with the same out and lse,
    and the rows between sequences are zero.  Lengths cover a step padded to NR rows, several key
    tiles, a sequence of one query and an empty one; GQA; every form of the bf16 products and both
    round_p modes for the half types."""
    rng = np.random.default_rng(21)
    lens, H, Hkv, D = [45, 300, 1, 0, 70], 4, 2, 72
    cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.uint32)
    q, do = (_rand(rng, (int(cu[-1]), H, D), dtype) for _ in range(2))
    k, v = (_rand(rng, (int(cu[-1]), Hkv, D), dtype) for _ in range(2))
    half = np.dtype(dtype).itemsize == 2
    for form in each_bf16_score_form() if half else [None]:
        for rp in (True, False) if half else (True,):
            kw = dict(softmax_scale=0.25, causal=True, round_p=rp)   # (exact in f32: varlen's scale kind)
            out, lse = fuel_cy.attention_varlen(q, k, v, cu, cu, return_lse=True, **kw)
            got = fuel_cy.attention_varlen_backward(q, k, v, do, cu, cu, out=out, lse=lse, **kw)
            for b in range(len(lens)):
                rows = slice(int(cu[b]), int(cu[b + 1]))
                if lens[b] == 0:
                    continue
                want = fuel_cy.attention_masked_backward(_as_heads(q[rows]), _as_heads(k[rows]), _as_heads(v[rows]),
                                                         _as_heads(do[rows]), out=_as_heads(out[rows]),
                                                         lse=lse[None, :, rows].copy(), **kw)
                for name, g, w in zip(("dq", "dk", "dv"), got, want):
                    assert g[rows].tobytes() == _as_rows(w).tobytes(), (form, rp, b, name)
            # rows no sequence reads are zero whatever the output's memory held (the half types'
            # work arrays are reused from the call above, which wrote gradients there): sequence
            # 1's queries without keys and its keys, the keys past seqused_k
            used = np.array([45, 0, 1, 0, 60], np.uint32)
            got = fuel_cy.attention_varlen_backward(q, k, v, do, cu, cu, None, used, **kw)
            assert not np.any(got[0][int(cu[1]):int(cu[2])].astype(np.float64))
            assert not np.any(got[1][int(cu[1]):int(cu[2])].astype(np.float64))
            assert not np.any(got[1][int(cu[4]) + 60:].astype(np.float64))
            assert not np.any(got[2][int(cu[4]) + 60:].astype(np.float64))
            assert np.all(got[0][int(cu[4]) + 11:].astype(np.float64) != 0)   # (its first 10 precede every key, the 11th sees one)


def test_varlen_backward_keeps_a_rank4_key_arrays_shape():
    rng = np.random.default_rng(6)
    q, do = _rand(rng, (30, 4, 16), np.float32), _rand(rng, (30, 4, 16), np.float32)
    k, v = _rand(rng, (3, 10, 2, 16), np.float32), _rand(rng, (3, 10, 2, 16), np.float32)
    cq, ck = np.array([0, 10, 30], np.uint32), np.array([0, 12, 30], np.uint32)
    dq, dk, dv = fuel_cy.attention_varlen_backward(q, k, v, do, cq, ck, softmax_scale=0.25)
    assert dk.shape == k.shape and dv.shape == v.shape
    flat = fuel_cy.attention_varlen_backward(q, k.reshape(30, 2, 16), v.reshape(30, 2, 16), do, cq, ck,
                                             softmax_scale=0.25)
    assert dk.reshape(30, 2, 16).tobytes() == flat[1].tobytes() and dq.tobytes() == flat[0].tobytes()


@pytest.mark.parametrize("kernel", ["masked", "masked_saved", "masked_saved_bf16", "varlen", "varlen_saved"])
def test_backward_bits_do_not_depend_on_threads(kernel):
    rng = np.random.default_rng(7)
    if kernel.startswith("masked"):
        dt = BF16 if kernel.endswith("bf16") else np.float32
        q, do = _rand(rng, (2, 8, 150, 64), dt), _rand(rng, (2, 8, 150, 64), dt)
        k, v = _rand(rng, (2, 2, 170, 64), dt), _rand(rng, (2, 2, 170, 64), dt)
        mask = rng.random((2, 1, 1, 170)) < 0.9
        run = lambda: fuel_cy.attention_masked_backward(q, k, v, do, mask, causal=True)   # noqa: E731
        if kernel.startswith("masked_saved"):
            out, lse = fuel_cy.attention_masked(q, k, v, mask, causal=True, return_lse=True)
            run = lambda: fuel_cy.attention_masked_backward(q, k, v, do, mask, out=out, lse=lse,  # noqa: E731
                                                            causal=True)
    else:
        cq = np.array([0, 100, 300], np.uint32)
        q, do = _rand(rng, (300, 8, 64), np.float32), _rand(rng, (300, 8, 64), np.float32)
        k, v = _rand(rng, (300, 2, 64), np.float32), _rand(rng, (300, 2, 64), np.float32)
        run = lambda: fuel_cy.attention_varlen_backward(q, k, v, do, cq, cq, causal=True)   # noqa: E731
        if kernel == "varlen_saved":   # the forward's statistics: key tiles outer, dQ summed across them
            out, lse = fuel_cy.attention_varlen(q, k, v, cq, cq, causal=True, return_lse=True)
            run = lambda: fuel_cy.attention_varlen_backward(q, k, v, do, cq, cq, out=out, lse=lse,  # noqa: E731
                                                            causal=True)
    try:
        fuel_cy.set_num_threads(1)
        one = run()
        fuel_cy.set_num_threads(2)
        two = run()
    finally:
        fuel_cy.set_num_threads(0)
    for a, b in zip(one, two):
        assert a.tobytes() == b.tobytes()


def test_backward_inputs_are_validated():
    rng = np.random.default_rng(8)
    q = _rand(rng, (30, 4, 16), np.float32)
    k = _rand(rng, (30, 2, 16), np.float32)
    with pytest.raises(InputError, match=r"attention_varlen_backward: input 'cu_seqlens_q'.*non-decreasing"):
        fuel_cy.attention_varlen_backward(q, k, k, q, np.array([0, 20, 10, 30], np.uint32),
                                          np.array([0, 10, 20, 30], np.uint32))
    with pytest.raises(InputError, match=r"attention_varlen_backward: input 'do_grad'"):
        fuel_cy.attention_varlen_backward(q, k, k, q[:29], np.array([0, 30], np.uint32), np.array([0, 30], np.uint32))
    # the forward's out and lse come together, each shaped as the forward returns it
    cu = np.array([0, 30], np.uint32)
    out, lse = fuel_cy.attention_varlen(q, k, k, cu, cu, return_lse=True)
    with pytest.raises(InputError, match=r"attention_varlen_backward: input 'lse'.*both or neither.*'out' without 'lse'"):
        fuel_cy.attention_varlen_backward(q, k, k, q, cu, cu, out=out)
    with pytest.raises(InputError, match=r"attention_varlen_backward: input 'out'.*'lse' without 'out'"):
        fuel_cy.attention_varlen_backward(q, k, k, q, cu, cu, lse=lse)
    with pytest.raises(InputError, match=r"attention_varlen_backward: input 'lse'"):
        fuel_cy.attention_varlen_backward(q, k, k, q, cu, cu, out=out, lse=lse[:, :29])
    with pytest.raises(InputError, match=r"attention_varlen_backward: input 'out'"):
        fuel_cy.attention_varlen_backward(q, k, k, q, cu, cu, out=out.astype(np.float64), lse=lse)
    q4 = _rand(rng, (1, 4, 30, 16), np.float32)
    with pytest.raises(InputError, match=r"attention_masked_backward: input 'attn_mask'"):
        fuel_cy.attention_masked_backward(q4, q4, q4, q4, np.ones((1, 1, 2, 30), bool))
    before = q4.copy()
    fuel_cy.attention_masked_backward(q4, q4, q4, q4, np.ones((1, 1, 1, 30), bool))
    assert q4.tobytes() == before.tobytes()   # inputs are never modified
    out4, lse4 = fuel_cy.attention_masked(q4, q4, q4, return_lse=True)
    with pytest.raises(InputError, match=r"attention_masked_backward: input 'lse'.*both or neither.*'out' without 'lse'"):
        fuel_cy.attention_masked_backward(q4, q4, q4, q4, out=out4)
    with pytest.raises(InputError, match=r"attention_masked_backward: input 'out'.*'lse' without 'out'"):
        fuel_cy.attention_masked_backward(q4, q4, q4, q4, lse=lse4)
    with pytest.raises(InputError, match=r"attention_masked_backward: input 'lse'"):
        fuel_cy.attention_masked_backward(q4, q4, q4, q4, out=out4, lse=lse4[:, :, :29])
    with pytest.raises(InputError, match=r"attention_masked_backward: input 'dlse'"):
        fuel_cy.attention_masked_backward(q4, q4, q4, q4, dlse=lse4.astype(np.float64))


# ---- autograd through fuel_cy.torch ------------------------------------------------------------------


import fuel_cy.torch as ft  # noqa: E402  (torch is a test dependency; import fuel_cy alone never needs it)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_torch_sdpa_gradients_match_torchs_own(dtype):
    torch.manual_seed(0)
    q = torch.randn(2, 4, 30, 16, dtype=dtype, requires_grad=True)
    k = torch.randn(2, 2, 40, 16, dtype=dtype, requires_grad=True)
    v = torch.randn(2, 2, 40, 16, dtype=dtype, requires_grad=True)
    mask = torch.rand(2, 1, 30, 40) < 0.8
    grad = torch.randn(2, 4, 30, 16, dtype=dtype)
    for kwargs in (dict(attn_mask=mask), dict(is_causal=True), dict(attn_mask=torch.zeros(1, 4, 30, 40, dtype=dtype))):
        ours = torch.autograd.grad(ft.scaled_dot_product_attention(q, k, v, enable_gqa=True, **kwargs), (q, k, v), grad)
        qd, kd, vd = (x.detach().double().requires_grad_() for x in (q, k, v))
        theirs = torch.autograd.grad(torch.nn.functional.scaled_dot_product_attention(
            qd, kd, vd, enable_gqa=True, **{n: (t.double() if t.is_floating_point() else t) if isinstance(t, torch.Tensor)
                                             else t for n, t in kwargs.items()}), (qd, kd, vd), grad.double())
        for a, b in zip(ours, theirs):
            assert a.dtype == dtype
            assert float((a.double() - b).abs().max()) <= TOL[np.dtype(str(dtype).removeprefix("torch."))] * float(b.abs().max())


def test_torch_varlen_gradients_and_compile():
    torch.manual_seed(1)
    cq, ck = torch.tensor([0, 5, 25], dtype=torch.int32), torch.tensor([0, 10, 40], dtype=torch.int32)
    q = torch.randn(25, 4, 16, dtype=torch.float64, requires_grad=True)
    k = torch.randn(40, 2, 16, dtype=torch.float64, requires_grad=True)
    v = torch.randn(40, 2, 16, dtype=torch.float64, requires_grad=True)
    grad = torch.randn(25, 4, 16, dtype=torch.float64)
    f = lambda q, k, v: ft.attention_varlen(q, k, v, cq, ck, causal=True, softmax_scale=0.25)   # noqa: E731
    got = torch.autograd.grad(f(q, k, v), (q, k, v), grad)
    ref = _ref_varlen(q.detach().numpy(), k.detach().numpy(), v.detach().numpy(), grad.numpy(), cq.numpy(),
                      ck.numpy(), None, 0.25, causal=True)
    for a, r in zip(got, ref):
        assert _rel(a.numpy(), r) <= 1e-12
    compiled = torch.compile(f, fullgraph=True)
    again = torch.autograd.grad(compiled(q, k, v), (q, k, v), grad)
    for a, b in zip(got, again):
        assert torch.equal(a, b)


def test_torch_varlen_gradient_through_lse_matches_float64():
    """A loss that uses lse (as merging partial results by their lse does): its gradient is taken."""
    torch.manual_seed(2)
    cq, ck = torch.tensor([0, 7, 7, 26], dtype=torch.int32), torch.tensor([0, 12, 15, 40], dtype=torch.int32)
    q = torch.randn(26, 4, 16, dtype=torch.float64, requires_grad=True)
    k = torch.randn(40, 2, 16, dtype=torch.float64, requires_grad=True)
    v = torch.randn(40, 2, 16, dtype=torch.float64, requires_grad=True)
    w = torch.randn(4, 26, dtype=torch.float64)
    out, lse = ft.attention_varlen(q, k, v, cq, ck, causal=True, softmax_scale=0.25, return_lse=True)
    got = torch.autograd.grad(out.square().sum() + (lse.double() * w).sum(), (q, k, v))
    # float64 reference: the same loss over per-sequence float64 attention (flash-attn's conventions)
    qd, kd, vd = (x.detach().clone().requires_grad_() for x in (q, k, v))
    loss = 0
    for b in range(3):
        q0, q1, k0, k1 = int(cq[b]), int(cq[b + 1]), int(ck[b]), int(ck[b + 1])
        if q1 == q0:
            continue
        s = 0.25 * qd[q0:q1].transpose(0, 1) @ kd[k0:k1].transpose(0, 1).repeat_interleave(2, 0).transpose(-1, -2)
        p = torch.arange(q1 - q0)[:, None] + (k1 - k0) - (q1 - q0)
        s = s.masked_fill(torch.arange(k1 - k0)[None, :] > p, -torch.inf)
        o = torch.softmax(s, -1) @ vd[k0:k1].transpose(0, 1).repeat_interleave(2, 0)
        loss = loss + o.square().sum() + (torch.logsumexp(s, -1) * w[:, q0:q1]).sum()
    ref = torch.autograd.grad(loss, (qd, kd, vd))
    for a, r in zip(got, ref):
        # lse is float32 whatever q's dtype: its gradient enters at float32
        assert float((a - r).abs().max()) <= 1e-6 * float(r.abs().max())


def test_torch_varlen_autograd_passes_the_saved_out_and_lse():
    """float32 with return_lse: autograd hands the backward the forward's out and lse (the
    direct call's bits with them), and the gradients meet the float64 bound."""
    torch.manual_seed(3)
    cq, ck = torch.tensor([0, 70, 200], dtype=torch.int32), torch.tensor([0, 150, 300], dtype=torch.int32)
    q = torch.randn(200, 4, 32, requires_grad=True)
    k = torch.randn(300, 2, 32, requires_grad=True)
    v = torch.randn(300, 2, 32, requires_grad=True)
    grad = torch.randn(200, 4, 32)
    out, lse = ft.attention_varlen(q, k, v, cq, ck, causal=True, return_lse=True)
    got = torch.autograd.grad(out, (q, k, v), grad)
    n = lambda t: t.detach().numpy()   # noqa: E731
    want = fuel_cy.attention_varlen_backward(n(q), n(k), n(v), n(grad), n(cq), n(ck), out=n(out), lse=n(lse),
                                             causal=True)
    for a, w in zip(got, want):
        assert a.numpy().tobytes() == w.tobytes()
    recomputed = fuel_cy.attention_varlen_backward(n(q), n(k), n(v), n(grad), n(cq), n(ck), causal=True)
    assert any(a.numpy().tobytes() != r.tobytes() for a, r in zip(got, recomputed))   # (another order)
    ref = _ref_varlen(n(q), n(k), n(v), n(grad), n(cq), n(ck), None, float(np.float32(1 / np.sqrt(32))), causal=True)
    for a, r in zip(got, ref):
        assert _rel(a.numpy(), r) <= TOL[np.dtype(np.float32)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_torch_masked_gradient_through_lse_matches_float64(dtype):
    """attention_masked's lse in a loss: its gradient reaches q and k through dlse (float32 given
    the saved out and lse, float64 recomputing), against float64 autograd of the same loss."""
    torch.manual_seed(5)
    q = torch.randn(2, 4, 40, 16, dtype=dtype, requires_grad=True)
    k = torch.randn(2, 2, 150, 16, dtype=dtype, requires_grad=True)
    v = torch.randn(2, 2, 150, 16, dtype=dtype, requires_grad=True)
    mask = torch.rand(2, 1, 40, 150) < 0.7
    w = torch.randn(2, 4, 40, dtype=torch.float64)
    out, lse = ft.attention_masked(q, k, v, mask, softmax_scale=0.25, return_lse=True)
    got = torch.autograd.grad(out.double().square().sum() + (lse.double() * w).sum(), (q, k, v))
    qd, kd, vd = (x.detach().double().requires_grad_() for x in (q, k, v))
    s = (0.25 * qd @ kd.repeat_interleave(2, 1).transpose(-1, -2)).masked_fill(~mask, -torch.inf)
    o = torch.softmax(s, -1) @ vd.repeat_interleave(2, 1)
    ref = torch.autograd.grad(o.square().sum() + (torch.logsumexp(s, -1) * w).sum(), (qd, kd, vd))
    for a, r in zip(got, ref):
        # lse is float32 whatever q's dtype: its gradient enters at float32
        assert float((a.double() - r).abs().max()) <= 2e-5 * float(r.abs().max())


def _memory(t: torch.Tensor) -> np.ndarray:
    """The tensor's memory as fuel_cy's numpy input (bf16 as ml_dtypes.bfloat16)."""
    t = t.detach()
    return t.view(torch.int16).numpy().view(BF16) if t.dtype == torch.bfloat16 else t.numpy()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_torch_sdpa_training_hands_the_backward_out_and_lse(dtype):
    """fuel_cy.torch's SDPA under autograd in float32 (and bf16) saves the forward's out and lse
    and hands them to attention_masked_backward: the direct call's bits with them, not the
    recomputing backward's, and the gradients meet the float64 bound."""
    torch.manual_seed(4)
    q = torch.randn(2, 4, 150, 32).to(dtype).requires_grad_()
    k = torch.randn(2, 2, 200, 32).to(dtype).requires_grad_()
    v = torch.randn(2, 2, 200, 32).to(dtype).requires_grad_()
    mask = torch.rand(2, 1, 150, 200) < 0.8
    grad = torch.randn(2, 4, 150, 32).to(dtype)
    got = torch.autograd.grad(ft.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True), (q, k, v),
                              grad)
    out, lse = fuel_cy.attention_masked(_memory(q), _memory(k), _memory(v), _memory(mask), return_lse=True)
    want = fuel_cy.attention_masked_backward(_memory(q), _memory(k), _memory(v), _memory(grad), _memory(mask), out=out, lse=lse)
    for a, w in zip(got, want):
        assert _memory(a).tobytes() == w.tobytes()
    recomputed = fuel_cy.attention_masked_backward(_memory(q), _memory(k), _memory(v), _memory(grad), _memory(mask))
    assert any(_memory(a).tobytes() != r.tobytes() for a, r in zip(got, recomputed))   # (another order)
    ref = _ref_masked(_memory(q), _memory(k), _memory(v), _memory(grad), _memory(mask), None, False, float(np.float32(1 / np.sqrt(32))), None)
    for a, r in zip(got, ref):
        assert _rel(_memory(a), r) <= TOL[np.dtype(BF16 if dtype == torch.bfloat16 else np.float32)]


@pytest.mark.parametrize("kernel,dtype", [("attention_varlen", torch.float32), ("attention_flash_mixed", torch.bfloat16),
                                          ("attention_flash_mixed", torch.float16), ("attention_varlen", torch.float64)],
                         ids=["varlen-f32", "mixed-bf16", "mixed-f16", "varlen-f64"])
def test_torch_training_saves_out_and_lse_without_being_asked(kernel, dtype):
    """A forward whose backward takes its out and lse, called under autograd without return_lse,
    still saves both (float32 compute; float64 recomputes): the backward's bits are those of the
    direct call given them (f64: without them), the call returns out alone, as asked."""
    torch.manual_seed(6)
    if kernel == "attention_varlen":
        cu = torch.tensor([0, 90, 240], dtype=torch.int32)
        shapes, extra = ((240, 4, 32), (240, 2, 32), (240, 2, 32)), (cu, cu)
    else:
        shapes, extra = ((1, 4, 90, 32), (1, 2, 200, 32), (1, 2, 200, 32)), ()
    q, k, v = (torch.randn(sh).to(dtype).requires_grad_() for sh in shapes)
    grad = torch.randn(shapes[0]).to(dtype)
    out = getattr(ft, kernel)(q, k, v, *extra, causal=True)
    assert isinstance(out, torch.Tensor) and out.shape == q.shape
    got = torch.autograd.grad(out, (q, k, v), grad)

    args = (_memory(q), _memory(k), _memory(v), _memory(grad), *map(_memory, extra))
    backward = getattr(fuel_cy, f"{kernel}_backward" if kernel == "attention_varlen" else "attention_flash_backward_mixed")
    fwd_out, lse = getattr(fuel_cy, kernel)(_memory(q), _memory(k), _memory(v), *map(_memory, extra), causal=True, return_lse=True)
    saved = backward(*args, out=fwd_out, lse=lse, causal=True)
    recomputed = backward(*args, causal=True)
    want = recomputed if dtype == torch.float64 else saved
    for a, w in zip(got, want):
        assert _memory(a).tobytes() == w.tobytes()
    if dtype != torch.float64:
        assert any(s.tobytes() != r.tobytes() for s, r in zip(saved, recomputed))   # (another order)


def test_torch_autograd_refuses_what_the_backward_cannot_honour():
    q = torch.randn(25, 4, 16, requires_grad=True)
    k = torch.randn(40, 2, 16)
    cq, ck = torch.tensor([0, 5, 25], dtype=torch.int32), torch.tensor([0, 10, 40], dtype=torch.int32)
    pool = torch.randn(5, 8, 2, 16)
    table = torch.arange(10, dtype=torch.int32).reshape(2, 5) % 5
    with pytest.raises(InputError, match="block_table"):
        ft.attention_varlen(q, pool, pool, cq, ck, None, table).sum().backward()
    q4 = torch.randn(1, 4, 8, 16, requires_grad=True)
    bias = torch.zeros(1, 4, 8, 8, requires_grad=True)
    with pytest.raises(InputError, match="attn_bias"):
        ft.scaled_dot_product_attention(q4, q4, q4, attn_mask=bias).sum().backward()


@pytest.mark.parametrize("name", ["llama", "gemma2"])
def test_transformers_training_step_matches_eager(name):
    transformers = pytest.importorskip("transformers")
    import fuel_cy.transformers as fct
    common = dict(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=128)
    if name == "llama":
        config, cls = transformers.LlamaConfig(**common), transformers.LlamaForCausalLM
    else:   # softcap, sliding windows, head_dim != hidden / heads
        config, cls = (transformers.Gemma2Config(sliding_window=8, head_dim=24, attn_logit_softcapping=20.0, **common),
                       transformers.Gemma2ForCausalLM)
    torch.manual_seed(0)
    ref = cls._from_config(copy.deepcopy(config), attn_implementation="eager", dtype=torch.float32).train()
    ours = cls._from_config(copy.deepcopy(config), attn_implementation=fct.NAME, dtype=torch.float32).train()
    ours.load_state_dict(ref.state_dict())
    ids = torch.randint(0, 97, (2, 19), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(2, 19, dtype=torch.long)
    mask[0, :5] = 0   # left padding
    # padded positions take no part in the loss: eager gives their fully masked rows a uniform
    # softmax, fuel_cy zeros (the contract), and neither reaches a real position; the labels are
    # shifted (position t predicts t + 1), so the first real token is not a label either
    before = torch.cat([torch.zeros(2, 1, dtype=torch.long), mask[:, :-1]], 1)
    labels = ids.masked_fill((mask == 0) | (before == 0), -100)
    for model in (ref, ours):
        model(ids, attention_mask=mask, labels=labels).loss.backward()
    for (n, a), (_, b) in zip(ref.named_parameters(), ours.named_parameters()):
        assert a.grad is not None and b.grad is not None, n
        assert float((a.grad - b.grad).abs().max()) <= 1e-4 * max(float(a.grad.abs().max()), 1e-6), n


@pytest.mark.parametrize("dtype", [np.float32, np.float64, BF16], ids=lambda d: np.dtype(d).name)
def test_masked_backward_of_a_padded_tail_is_the_backward_without_it(dtype):
    """Keys a key-padding mask drops for every query take no part: the gradients are those of the
    call on the kept keys alone, bit for bit, and the dropped keys' dk and dv are zero."""
    rng = np.random.default_rng(9)
    q, do = _rand(rng, (1, 4, 90, 32), dtype), _rand(rng, (1, 4, 90, 32), dtype)
    k, v = _rand(rng, (1, 2, 300, 32), dtype), _rand(rng, (1, 2, 300, 32), dtype)
    keep = 211
    mask = (np.arange(300) < keep).reshape(1, 1, 1, 300)
    got = fuel_cy.attention_masked_backward(q, k, v, do, mask, softmax_scale=0.125, causal=False)
    cut = fuel_cy.attention_masked_backward(q, np.ascontiguousarray(k[:, :, :keep]), np.ascontiguousarray(v[:, :, :keep]),
                                            do, softmax_scale=0.125)
    # (bf16's tile products pack keys in pairs, and a pair across the cut sums in another order:
    # there each gradient is the same to within one rounding of bf16)
    same = (lambda a, b: a.tobytes() == b.tobytes()) if dtype != BF16 else (   # noqa: E731
        lambda a, b: _rel(a, b.astype(np.float64)) <= 2 ** -7)
    assert same(got[0], cut[0])
    for g, c in zip(got[1:], cut[1:]):
        assert same(np.ascontiguousarray(g[:, :, :keep]), c)
        assert not np.any(g[:, :, keep:].astype(np.float64))
