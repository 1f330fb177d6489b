"""attention_masked (contracts/fuel-cy-model.md): torch SDPA's boolean and additive masks, against
a float64 reference written here, never against the code under test; numpy only (the sanitizer
battery runs it).  fuel_cy.scaled_dot_product_attention against torch itself: test_sdpa_torch.py."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import fuel_cy
from conftest import input_error_of
from measures import bits, bound, peak_bytes_in_fresh_thread, rel

CODES = {np.dtype(np.float32): "F32", np.dtype(np.float64): "F64", np.dtype(ml_dtypes.bfloat16): "BF16",
         np.dtype(np.float16): "F16"}
HALF = (ml_dtypes.bfloat16, np.float16)


def scores(q, k, mask=None, bias=None, scale=None, causal=False, softcap=None):
    """[B, Hq, L, S] scores in float64 with the contract's order (scale, softcap, + bias, then
    masked to -inf) and which pairs are admissible."""
    q, k = np.asarray(q, np.float64), np.repeat(np.asarray(k, np.float64), q.shape[1] // k.shape[1], axis=1)
    scale = 1 / np.sqrt(max(q.shape[-1], 1)) if scale is None else scale
    s = np.einsum("bhid,bhjd->bhij", q, k) * scale
    if softcap is not None:
        s = np.tanh(s / softcap) * softcap
    if bias is not None:
        s = s + np.asarray(bias, np.float64)
    ok = np.ones(s.shape, bool)
    if mask is not None:
        ok &= np.broadcast_to(mask, s.shape)
    if causal:
        ok &= np.arange(s.shape[-1])[None, :] <= np.arange(s.shape[-2])[:, None]
    return np.where(ok, s, -np.inf), ok


def reference(q, k, v, mask=None, bias=None, scale=None, causal=False, softcap=None):
    """[B, Hq, L, D] attention in float64 over scores(); a row with nothing admissible is zero."""
    s, ok = scores(q, k, mask, bias, scale, causal, softcap)
    v = np.repeat(np.asarray(v, np.float64), q.shape[1] // v.shape[1], axis=1)
    m = s.max(axis=-1, keepdims=True) if s.shape[-1] else np.zeros(s.shape[:-1] + (1,))
    e = np.where(ok, np.exp(s - np.where(np.isfinite(m), m, 0)), 0.0)
    den = e.sum(axis=-1, keepdims=True)
    w = np.divide(e, den, out=np.zeros_like(e), where=den > 0)
    return np.einsum("bhij,bhjd->bhid", w, v)


def arrays(b, hq, hkv, lq, lk, d, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal(shape).astype(dtype)
                 for shape in ((b, hq, lq, d), (b, hkv, lk, d), (b, hkv, lk, d)))


def padding(b, lk, seed=0):
    """A key-padding mask [B, 1, 1, Sk]: sequence b keeps its first lens[b] keys (one keeps none)."""
    lens = np.random.default_rng(seed).integers(0, lk + 1, b)
    lens[0] = lk
    if b > 2:
        lens[2] = 0
    return (np.arange(lk)[None, :] < lens[:, None])[:, None, None, :]


def check(out, expected, code, d, lk):
    assert rel(out, expected) <= bound(code, d, lk, compute="f32"), (code, rel(out, expected))


SHAPES = [  # (B, Hq, Hkv, L, S, D): GQA, MQA, decode, more queries than keys, peers' head dims
    (3, 8, 2, 130, 300, 64),
    (2, 4, 1, 1, 577, 80),
    (2, 4, 4, 200, 70, 59),
    (1, 2, 2, 129, 257, 111),
    (2, 2, 1, 64, 128, 256),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, ml_dtypes.bfloat16, np.float16])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("which", ["padding", "bias", "both+causal", "dense+softcap", "per-head"])
def test_masks_match_the_reference(dtype, shape, which):
    b, hq, hkv, lq, lk, d = shape
    q, k, v = arrays(b, hq, hkv, lq, lk, d, dtype, seed=lq + d)
    rng = np.random.default_rng(d)
    kw: dict = {}
    if which in ("padding", "both+causal"):
        kw["attn_mask"] = padding(b, lk, seed=d)
    if which in ("bias", "both+causal"):
        kw["attn_bias"] = rng.standard_normal((1, hq, lq, lk)).astype(dtype)
    if which == "both+causal":
        kw["causal"] = True
    if which == "dense+softcap":
        kw["attn_mask"], kw["softcap"] = rng.random((b, 1, lq, lk)) < 0.3, 5.0
    if which == "per-head":
        kw["attn_mask"] = rng.random((1, hq, 1, lk)) < 0.5
        kw["attn_bias"] = rng.standard_normal((b, 1, 1, 1)).astype(dtype) * 3
    before = [x.copy() for x in (q, k, v, *[a for a in kw.values() if isinstance(a, np.ndarray)])]
    out = fuel_cy.attention_masked(q, k, v, **kw)
    assert out.shape == q.shape and out.dtype == q.dtype and out.flags.c_contiguous
    expected = reference(q, k, v, kw.get("attn_mask"), kw.get("attn_bias"), causal=kw.get("causal", False),
                         softcap=kw.get("softcap"))
    check(out, expected, CODES[np.dtype(dtype)], d, lk)
    after = [q, k, v, *[a for a in kw.values() if isinstance(a, np.ndarray)]]
    assert all(np.array_equal(x, y) for x, y in zip(before, after))
    dead = np.all(expected == 0, axis=-1)
    assert not np.asarray(out, np.float64)[dead].any()   # nothing admissible: exactly zero


def reference_lse(q, k, mask=None, bias=None, scale=None, causal=False, softcap=None):
    """[B, Hq, L] log-sum-exp of scores() in float64: +inf where nothing is admissible."""
    s, ok = scores(q, k, mask, bias, scale, causal, softcap)
    m = np.where(ok.any(-1), s.max(axis=-1), 0.0)
    total = np.where(ok, np.exp(s - m[..., None]), 0.0).sum(-1)
    return np.where(total > 0, m + np.log(np.where(total > 0, total, 1.0)), np.inf)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, ml_dtypes.bfloat16, np.float16])
@pytest.mark.parametrize("shape", SHAPES[:3])
def test_return_lse_is_each_rows_log_sum_exp(dtype, shape):
    """return_lse: [B, Hq, L] float32, the log of each row's softmax denominator over the scaled,
    capped, biased, masked scores (decode steps, GQA and half types included); +inf where a row
    admits nothing; the output's bits are those of the call without it."""
    b, hq, hkv, lq, lk, d = shape
    q, k, v = arrays(b, hq, hkv, lq, lk, d, dtype, seed=lq + 5)
    rng = np.random.default_rng(lk)
    mask = padding(b, lk, seed=d) & (rng.random((b, 1, lq, lk)) < 0.8)
    mask[-1, :, 0] = False   # a row that admits nothing
    bias = rng.standard_normal((1, hq, 1, lk)).astype(dtype)
    kw = dict(attn_mask=mask, attn_bias=bias, causal=lq > 1, softcap=6.0, softmax_scale=0.2)
    out, lse = fuel_cy.attention_masked(q, k, v, return_lse=True, **kw)
    assert lse.dtype == np.float32 and lse.shape == (b, hq, lq) and lse.flags.c_contiguous
    assert bits(out) == bits(fuel_cy.attention_masked(q, k, v, **kw))
    eff = 0.2 if np.dtype(dtype) == np.float64 else float(np.float32(0.2))
    expected = reference_lse(q, k, mask, bias, eff, kw["causal"], 6.0)
    dead = np.isinf(expected)
    assert dead.any() and np.array_equal(np.isinf(lse), dead) and (lse[dead] > 0).all()
    tol = 1e-5 if np.dtype(dtype).itemsize > 2 else 1e-4
    assert np.max(np.abs(lse[~dead] - expected[~dead])) <= tol * max(1.0, np.abs(expected[~dead]).max())


def test_without_masks_it_is_attention_flash_bit_for_bit():
    """bf16: attention_flash_mixed in the same P V mode (round_p, the default here)."""
    q, k, v = arrays(2, 8, 2, 300, 300, 64, np.float32, seed=1)
    for causal in (False, True):
        assert bits(fuel_cy.attention_masked(q, k, v, causal=causal)) == bits(fuel_cy.attention_flash(q, k, v, causal=causal))
    q, k, v = arrays(2, 8, 2, 300, 300, 64, ml_dtypes.bfloat16, seed=1)
    for causal in (False, True):
        assert bits(fuel_cy.attention_masked(q, k, v, causal=causal)) == bits(
            fuel_cy.attention_flash_mixed(q, k, v, causal=causal, round_p=True))
        assert bits(fuel_cy.attention_masked(q, k, v, causal=causal, round_p=False)) == bits(
            fuel_cy.attention_flash_mixed(q, k, v, causal=causal))


def test_an_all_true_mask_changes_no_bit():
    q, k, v = arrays(2, 4, 2, 200, 300, 64, np.float32, seed=2)
    keep = np.ones((2, 1, 200, 300), bool)
    assert bits(fuel_cy.attention_masked(q, k, v, attn_mask=keep)) == bits(fuel_cy.attention_flash(q, k, v))


def test_masked_key_tiles_are_never_read():
    """Keys whose whole 128-key tiles the mask drops may hold NaN: they are skipped, not zeroed."""
    q, k, v = arrays(1, 2, 2, 64, 512, 32, np.float32, seed=3)
    keep = np.zeros((1, 1, 1, 512), bool)
    keep[..., 128:256] = True
    k2, v2 = k.copy(), v.copy()
    k2[:, :, :128] = k2[:, :, 256:] = np.nan
    v2[:, :, :128] = v2[:, :, 256:] = np.nan
    out = fuel_cy.attention_masked(q, k2, v2, attn_mask=keep)
    assert rel(out, reference(q, k, v, keep)) <= 2e-5


def test_a_bias_never_unmasks_a_causal_pair():
    q, k, v = arrays(1, 1, 1, 8, 8, 4, np.float64, seed=4)
    future = np.arange(8)[None, :] > np.arange(8)[:, None]
    bias = np.where(future, np.inf, 0.0)[None, None]     # +inf exactly on the pairs causal masks
    out = fuel_cy.attention_masked(q, k, v, attn_bias=bias, causal=True)
    assert np.isfinite(out).all() and rel(out, reference(q, k, v, causal=True)) <= 1e-12


def test_empty_extents():
    for lq, lk in ((0, 5), (5, 0), (0, 0)):
        q, k, v = arrays(2, 2, 2, lq, lk, 8, np.float32)
        out = fuel_cy.attention_masked(q, k, v, attn_mask=np.ones((2, 1, 1, lk), bool))
        assert out.shape == q.shape and not out.any()


def test_deterministic_across_thread_counts():
    q, k, v = arrays(2, 8, 2, 300, 600, 64, np.float32, seed=5)
    keep = padding(2, 600, seed=5)
    runs = []
    for n in (1, 2):
        fuel_cy.set_num_threads(n)
        try:
            runs.append(bits(fuel_cy.attention_masked(q, k, v, attn_mask=keep, causal=True)))
        finally:
            fuel_cy.set_num_threads(0)
    assert runs[0] == runs[1]


@pytest.mark.parametrize("mask_shape, received", [
    ((2, 3, 1, 10), "attn_mask.shape = (2, 3, 1, 10)"),
    ((1, 1, 7, 10), "q.dim[2] = 5"),
    ((2, 1, 1, 9), "k.dim[2] = 10"),
])
def test_masks_that_do_not_broadcast_are_input_errors(mask_shape, received):
    q, k, v = arrays(2, 4, 2, 5, 10, 8, np.float32)
    msg = input_error_of(fuel_cy.attention_masked, q, k, v, attn_mask=np.ones(mask_shape, bool))
    assert msg and "attention_masked" in msg and "'attn_mask'" in msg and "broadcasts_to" in msg
    assert received in msg and "fuel-cy-model.md" in msg


def test_mask_dtypes_are_checked():
    q, k, v = arrays(1, 2, 2, 5, 10, 8, np.float32)
    msg = input_error_of(fuel_cy.attention_masked, q, k, v, attn_mask=np.ones((1, 1, 1, 10), np.uint8))
    assert msg and "'attn_mask'" in msg and "BOOL" in msg
    msg = input_error_of(fuel_cy.attention_masked, q, k, v, attn_bias=np.ones((1, 1, 1, 10), np.float64))
    assert msg and "'attn_bias'" in msg and "share one element type" in msg


@pytest.mark.parametrize("dtype", [np.float32, np.float64, ml_dtypes.bfloat16])
def test_strided_views_are_read_in_place(dtype):
    """[B, S, H, D] arrays viewed as [B, H, S, D], a slice of a fused qkv array (a start offset),
    an expanded kv head (stride 0): the bits of the same values made contiguous, and for float32
    no copy of q, k or v (the call allocates about the output alone)."""
    b, s, hq, hkv, d = 2, 300, 8, 2, 64
    rng = np.random.default_rng(8)
    qkv = rng.standard_normal((b, s, hq + 2 * hkv, d)).astype(dtype)          # one fused projection
    q = qkv[:, :, :hq].transpose(0, 2, 1, 3)
    k = qkv[:, :, hq:hq + hkv].transpose(0, 2, 1, 3)
    v = qkv[:, :, hq + hkv:].transpose(0, 2, 1, 3)
    keep = padding(b, s, seed=8)
    expected = fuel_cy.attention_masked(*(np.ascontiguousarray(x) for x in (q, k, v)), attn_mask=keep, causal=True)
    out = fuel_cy.attention_masked(q, k, v, attn_mask=keep, causal=True)
    assert bits(out) == bits(expected)
    assert rel(out, reference(q, k, v, keep, causal=True)) <= bound(CODES[np.dtype(dtype)], d, s, compute="f32")
    one = np.broadcast_to(k[:, :1], (b, hkv, s, d))                           # stride 0 over kv heads
    assert bits(fuel_cy.attention_masked(q, one, v)) == bits(fuel_cy.attention_masked(q, np.ascontiguousarray(one), v))
    if dtype == np.float32:
        _, peak = peak_bytes_in_fresh_thread(lambda: fuel_cy.attention_masked(q, k, v, attn_mask=keep))
        assert peak < out.nbytes + q.nbytes // 2, (peak, out.nbytes)


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("d", [64, 40])
def test_a_half_decode_step_reads_its_kv_cache_in_place(dtype, d):
    """One query per head against a bf16/f16 cache that is a view of a longer preallocated one (a
    static cache's live prefix): right against float64, the bits of the same values made
    contiguous, and no widened copy of K or V (the call allocates far less than K alone)."""
    b, hq, hkv, lk, cap = 3, 8, 2, 1500, 2048
    rng = np.random.default_rng(d)
    q = rng.standard_normal((b, hq, 1, d)).astype(dtype)
    k_cache, v_cache = (rng.standard_normal((b, hkv, cap, d)).astype(dtype) for _ in range(2))
    k, v = k_cache[:, :, :lk], v_cache[:, :, :lk]
    keep = padding(b, lk, seed=d)
    out = fuel_cy.attention_masked(q, k, v, attn_mask=keep)
    check(out, reference(q, k, v, keep), CODES[np.dtype(dtype)], d, lk)
    assert bits(out) == bits(fuel_cy.attention_masked(q, np.ascontiguousarray(k), np.ascontiguousarray(v),
                                                      attn_mask=keep))
    _, peak = peak_bytes_in_fresh_thread(lambda: fuel_cy.attention_masked(q, k, v, attn_mask=keep))
    assert peak < k.nbytes // 4, (peak, k.nbytes)
    kc, vc = np.ascontiguousarray(k), np.ascontiguousarray(v)
    flash, peak = peak_bytes_in_fresh_thread(lambda: fuel_cy.attention_flash_mixed(q, kc, vc))
    check(flash, reference(q, kc, vc), CODES[np.dtype(dtype)], d, lk)
    assert peak < k.nbytes // 4, (peak, k.nbytes)


def test_rows_that_are_not_unit_stride_are_copied_and_still_right():
    q, k, v = arrays(1, 2, 2, 40, 50, 16, np.float64, seed=9)
    wide = np.zeros(q.shape[:3] + (32,))
    wide[..., ::2] = q
    out = fuel_cy.attention_masked(wide[..., ::2], k, v)
    assert bits(out) == bits(fuel_cy.attention_masked(q, k, v))


def test_reversed_views_are_input_errors():
    q, k, v = arrays(1, 2, 2, 40, 50, 16, np.float32)
    msg = input_error_of(fuel_cy.attention_masked, q[:, :, ::-1], k, v)
    assert msg and "'q'" in msg and "reverse_strides: rejected" in msg
