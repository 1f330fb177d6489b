"""round_p: P rounded to T before P V (torch's CPU flash, flash-attn's and vLLM's order), and in
the backwards P and dS rounded before their products (flash-attn's), as the mixed contract states
it, checked against the suite's own float64 reference of that statement
(reference_impl._rounded_weights: each 128-key tile's weights rounded against the row's running
max), in every bf16 product form this CPU level has, for the three kernels that take it; and the
defaults: on for the model-facing kernels' half types, off for attention_flash_mixed, no effect on
float32."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import fuel_cy
import reference_impl as ref
from inputs import attention_inputs
from measures import bits
from conftest import each_bf16_score_form

from fuel_cy.runtime.cpu import core

BF16 = ml_dtypes.bfloat16
TYPES = {"bf16": BF16, "f16": np.float16}
# (hq, hkv, s, d): several key tiles with a ragged last one, GQA, one tile, odd D, a short tile
SHAPES = [(2, 1, 300, 72), (4, 4, 129, 64), (2, 2, 77, 16), (2, 1, 160, 33)]


def _kernel_call(name, q, k, v, causal, **kw):
    """One of the three kernels on [1, H, S, D] inputs, its output as [1, H, S, D] float64."""
    d = q.shape[-1]
    scale = 1 / np.sqrt(d)
    if name == "attention_masked":
        return fuel_cy.attention_masked(q, k, v, None, None, softmax_scale=scale, causal=causal, **kw)
    if name == "attention_flash_mixed":
        return fuel_cy.attention_flash_mixed(q, k, v, softmax_scale=scale, causal=causal, **kw)
    # one packed sequence: bottom-right alignment is top-left at lq == lk
    qp, kp, vp = (np.ascontiguousarray(x[0].transpose(1, 0, 2)) for x in (q, k, v))
    cu = np.array([0, q.shape[2]], np.uint32)
    out = fuel_cy.attention_varlen(qp, kp, vp, cu, cu, softmax_scale=scale, causal=causal, **kw)
    return out.transpose(1, 0, 2)[None]


def _match(got, want, T, vmax):
    """The fraction of elements equal to the reference rounded to T, and whether every element is
    near it: two units of T's last place of the output, plus one of a weight (a weight that
    rounds the other way moves an output by at most that times max |v|)."""
    w = want.astype(T).astype(np.float64)
    g = np.asarray(got).astype(np.float64)
    ulp = 2.0 ** (-7 if T is BF16 else -10)
    return float(np.mean(g == w)), bool(np.all(np.abs(g - w) <= 2 * ulp * np.abs(w) + ulp * vmax))


@pytest.mark.parametrize("tname", TYPES)
@pytest.mark.parametrize("name", ["attention_masked", "attention_varlen", "attention_flash_mixed"])
@pytest.mark.parametrize("hq,hkv,s,d", SHAPES)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_round_p_is_the_tile_rounded_reference(tname, name, hq, hkv, s, d, causal):
    T = TYPES[tname]
    q, k, v, _ = attention_inputs(1, hq, hkv, s, s, d, T, False, seed=s + d)
    rounded = ref.forward(q, k, v, scale=1 / np.sqrt(d), causal=causal, round_to=T)
    exact = ref.forward(q, k, v, scale=1 / np.sqrt(d), causal=causal)
    vmax = float(np.abs(v.astype(np.float64)).max())
    # (f16 too: on the tile forms its round_p products run on two bf16 terms per value)
    for form in (each_bf16_score_form() if core()._TEST_HAVE_DPBF16 else [None]):
        got = _kernel_call(name, q, k, v, causal, round_p=True)
        same, near = _match(got, rounded, T, vmax)
        # the kernel's exp is float32's, so a weight next to a rounding boundary of T may round
        # the other way: nearly every element is the reference's, none is far from it
        assert near and same >= 0.97, (form, same)
        assert same > _match(got, exact, T, vmax)[0] + 0.05, form   # it is the rounded mode, not the exact one
        got_exact = _kernel_call(name, q, k, v, causal, round_p=False)
        same_x, near_x = _match(got_exact, exact, T, vmax)
        assert near_x and same_x >= 0.99, (form, same_x)


@pytest.mark.parametrize("tname", TYPES)
def test_defaults_are_fast_for_models_and_exact_for_the_mixed_kernel(tname):
    T = TYPES[tname]
    q, k, v, _ = attention_inputs(1, 2, 2, 200, 200, 64, T, False, seed=3)
    for name, default in (("attention_masked", True), ("attention_varlen", True), ("attention_flash_mixed", False)):
        assert bits(_kernel_call(name, q, k, v, True)) == bits(_kernel_call(name, q, k, v, True, round_p=default))
        assert bits(_kernel_call(name, q, k, v, True)) != bits(_kernel_call(name, q, k, v, True, round_p=not default))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_round_p_leaves_f32_and_f64_alone(dtype):
    """P is in T already: the flag changes no bit."""
    q, k, v, _ = attention_inputs(1, 2, 1, 150, 150, 32, dtype, False, seed=4)
    for name in ("attention_masked", "attention_varlen"):
        assert bits(_kernel_call(name, q, k, v, False, round_p=True)) == bits(_kernel_call(name, q, k, v, False,
                                                                                            round_p=False))


@pytest.mark.parametrize("tname", TYPES)
def test_round_p_bits_do_not_depend_on_threads(tname):
    T = TYPES[tname]
    q, k, v, _ = attention_inputs(2, 4, 2, 260, 260, 64, T, False, seed=5)
    try:
        fuel_cy.set_num_threads(1)
        one = bits(fuel_cy.attention_masked(q, k, v, None, None, causal=True))
        fuel_cy.set_num_threads(2)
        two = bits(fuel_cy.attention_masked(q, k, v, None, None, causal=True))
    finally:
        fuel_cy.set_num_threads(0)
    assert one == two


def test_a_weight_rounded_up_to_bf16s_least_normal_enters_p_v():
    """round_p rounds each weight exactly to bf16, so one a hair below 2^-126 (an f32 subnormal)
    becomes 2^-126, bf16's least normal, and multiplies V like any other weight, in every bf16
    product form of this level (on vdpbf16ps, which reads subnormals as zero, the pairing rounds it:
    fc_bf16_pair_exact)."""
    # key 0 scores 0 (weight 1) against a zero V row; key 1 scores x, e^x = 2^-126 (1 - 2^-9), the
    # middle of the f32 subnormals that round up to 2^-126 (0x007F8000 .. 0x007FFFFF), against 2^100
    x = np.log(2.0**-126 * (1 - 2.0**-9))
    d = 16
    q = np.zeros((1, 1, 16, d), np.float32)   # (more than one query: a decode step takes another path)
    q[..., 0] = 1
    k = np.zeros((1, 1, 2, d), np.float32)
    k[0, 0, 1, 0] = -87.5
    v = np.zeros((1, 1, 2, d), np.float32)
    v[0, 0, 1] = 2.0**100
    q, k, v = (a.astype(BF16) for a in (q, k, v))
    scale = float(np.float32(x / -87.5))
    qp, kp, vp = (np.ascontiguousarray(a[0].transpose(1, 0, 2)) for a in (q, k, v))
    # the levels without AVX-512 take a lean exp that flushes weights below ~2e-38 to 0 (fc_exp.h
    # fc_expf_v): there the weight is 0 before any rounding, and so is the output
    level = fuel_cy.runtime.cpu.capability()
    expected = 2.0**-26 if "avx512f" in fuel_cy.build_info()["levels"][level]["features"] else 0.0
    for _ in each_bf16_score_form():
        for out in (fuel_cy.attention_flash_mixed(q, k, v, softmax_scale=scale, round_p=True),
                    fuel_cy.attention_varlen(qp, kp, vp, np.array([0, 16], np.uint32), np.array([0, 2], np.uint32),
                                             softmax_scale=scale)):
            out = np.asarray(out, np.float64)
            assert (out == expected).all(), (level, out)   # 2^-126 * 2^100 over a denominator of 1 (+ 2^-126)


def test_round_p_decode_step_reads_the_cache_in_place():
    """A decode step (one query row, K and V read in their 16-bit storage) rounds P too."""
    q, k, v, _ = attention_inputs(1, 4, 2, 1, 300, 64, BF16, False, seed=6)
    got = fuel_cy.attention_masked(q, k, v, None, None, softmax_scale=0.125)
    same, near = _match(got, ref.forward(q, k, v, scale=0.125, round_to=BF16), BF16,
                        float(np.abs(v.astype(np.float64)).max()))
    assert near and same >= 0.97


@pytest.mark.parametrize("hq,hkv,d", [(8, 2, 128), (4, 4, 64), (16, 1, 33)])
def test_a_bf16_decode_steps_p_v_runs_on_v_pairs(hq, hkv, d):
    """On AVX512-BF16 a bf16 decode step's round_p P V runs on vdpbf16ps over V's rows paired as
    they are read, in the contract's order for the mode (per pair of keys the odd product, then
    the even), not on the float32 loops it ran before (switched back by a testing hook).  Four
    keys of equal score (every weight 1) and v = 1, 0, 2^-25, -1 tell the orders apart: the pairs
    give (1 + -1) + 2^-25, key by key gives (1 + 2^-25) + -1 = 0.  The exact mode and f16 never
    take the pairs (both orders 0), nor a level without AVX512-BF16."""
    c = core()
    saved = c._test_decode_pairs()
    try:
        for T in (BF16, np.float16):
            q = np.zeros((1, hq, 1, d), T)
            k = np.random.default_rng(d).standard_normal((1, hkv, 4, d)).astype(T)
            v = np.ascontiguousarray(np.broadcast_to(np.array([1.0, 0.0, 2.0**-25, -1.0])[:, None], (1, hkv, 4, d)), T)
            for round_p in (True, False):
                for on in (True, False):
                    c._test_decode_pairs(on)
                    out = np.asarray(fuel_cy.attention_flash_mixed(q, k, v, round_p=round_p), np.float64)
                    pairs = T is BF16 and round_p and on and bool(c._TEST_HAVE_DPBF16)
                    assert (out == (2.0**-27 if pairs else 0.0)).all(), (T, round_p, on)
    finally:
        c._test_decode_pairs(saved)


@pytest.mark.parametrize("name", ["attention_masked", "attention_flash_mixed", "attention_varlen"])
def test_paired_weights_on_the_tiles_give_the_float32_weights_bits(name):
    """On the tile forms (AMX, and its emulation on every AVX512-BF16 CPU) round_p's bf16 exp pass
    writes the weights as bf16 pairs and P V loads them as they are, where it rounded them in
    float32 for P V to split before: the same products, bit for bit (switched back by a testing
    hook), whole tiles and ragged ones, causal diagonals, masks, GQA, and scores spread so wide
    (std ~64) that many weights fall below 2^-126, where vcvtneps2bf16 flushes what the tiles
    would read as zero anyway.  The emulated form counts the blocks that took the pairs."""
    c = core()
    saved = c._test_paired_weights()
    rng = np.random.default_rng(7)
    try:
        for form in each_bf16_score_form():
            for hq, hkv, s, d, causal, spread in [(2, 2, 256, 64, False, 1.0), (4, 2, 300, 80, True, 1.0),
                                                  (2, 1, 256, 64, False, 8.0), (2, 2, 200, 48, True, 8.0)]:
                q = (rng.standard_normal((1, hq, s, d)) * spread).astype(BF16)
                k = (rng.standard_normal((1, hkv, s, d)) * spread).astype(BF16)
                v = rng.standard_normal((1, hkv, s, d)).astype(BF16)
                kw = {"round_p": True}
                if name == "attention_masked" and not causal:
                    kw["attn_mask"] = rng.random((1, 1, s, s)) < 0.9
                outs = []
                for on in (True, False):
                    c._test_paired_weights(on)
                    before = c._test_emulated_paired_calls()
                    if name == "attention_masked" and "attn_mask" in kw:
                        d_ = fuel_cy.attention_masked(q, k, v, kw["attn_mask"], None, round_p=True)
                    else:
                        d_ = _kernel_call(name, q, k, v, causal, round_p=True)
                    outs.append(bits(np.asarray(d_)))
                    took = c._test_emulated_paired_calls() - before
                    assert took == 0 or (on and form == "amx-emulated"), (form, on, took)
                    if on and form == "amx-emulated":
                        assert took > 0, (hq, s, d)
                assert np.array_equal(outs[0], outs[1]), (form, hq, s, d, causal, spread)
    finally:
        c._test_paired_weights(saved)


def _backward_call(name, q, k, v, do, causal, **kw):
    """One of the three backwards on [1, H, S, D] inputs: (dq, dk, dv) as [1, H, S, D]."""
    scale = 1 / np.sqrt(q.shape[-1])
    if name == "attention_masked_backward":
        return fuel_cy.attention_masked_backward(q, k, v, do, None, None, softmax_scale=scale, causal=causal, **kw)
    if name == "attention_flash_backward_mixed":
        return fuel_cy.attention_flash_backward_mixed(q, k, v, do, softmax_scale=scale, causal=causal, **kw)
    if name == "attention_flash_backward_mixed+saved":   # given the forward's out and lse: key tiles outer
        out, lse = fuel_cy.attention_flash_mixed(q, k, v, softmax_scale=scale, causal=causal, return_lse=True, **kw)
        return fuel_cy.attention_flash_backward_mixed(q, k, v, do, out=out, lse=lse, softmax_scale=scale,
                                                      causal=causal, **kw)
    packed = [np.ascontiguousarray(x[0].transpose(1, 0, 2)) for x in (q, k, v, do)]
    cu = np.array([0, q.shape[2]], np.uint32)
    grads = fuel_cy.attention_varlen_backward(*packed, cu, cu, softmax_scale=scale, causal=causal, **kw)
    return [g.transpose(1, 0, 2)[None] for g in grads]


@pytest.mark.parametrize("tname", TYPES)
@pytest.mark.parametrize("name", ["attention_masked_backward", "attention_varlen_backward",
                                  "attention_flash_backward_mixed", "attention_flash_backward_mixed+saved"])
@pytest.mark.parametrize("hq,hkv,s,d", SHAPES)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_backward_round_p_is_the_rounded_reference(tname, name, hq, hkv, s, d, causal):
    """P (from the row's final statistics) and dS rounded to T before dV = P^T dO, dK = dS^T Q
    and dQ = dS K; in every product form (vdpbf16ps for all five products at an even D; f16's
    split words on the tile forms).  Given the forward's out and lse (+saved), rowsum(P dP) is
    dO . O of that out, rounded to T as the forward returned it: so is the reference's (except
    f16's split words on the tile forms, which recompute rowsum(P dP), as the contract says)."""
    T = TYPES[tname]
    q, k, v, do, _ = attention_inputs(1, hq, hkv, s, s, d, T, False, seed=s * d, with_do=True)
    scale = 1 / np.sqrt(d)
    rounded = ref.backward(q, k, v, do, scale=scale, causal=causal, round_to=T)
    exact = ref.backward(q, k, v, do, scale=scale, causal=causal)
    for form in (each_bf16_score_form() if core()._TEST_HAVE_DPBF16 else [None]):
        if name.endswith("+saved"):
            outs = [fuel_cy.attention_flash_mixed(q, k, v, softmax_scale=scale, causal=causal, round_p=rp)
                    for rp in (True, False)]
            splits = tname == "f16" and form not in (None, "vdpbf16ps")
            rounded = ref.backward(q, k, v, do, scale=scale, causal=causal, round_to=T,
                                   out=None if splits else outs[0])
            exact = ref.backward(q, k, v, do, scale=scale, causal=causal, out=outs[1])
        got = _backward_call(name, q, k, v, do, causal, round_p=True)
        got_exact = _backward_call(name, q, k, v, do, causal, round_p=False)
        for g, gx, want, want_x, wrt in zip(got, got_exact, rounded, exact, ("dq", "dk", "dv")):
            scale_of = float(np.abs(want).max())
            same, near = _match(g, want, T, scale_of)
            assert near and same >= 0.97, (form, wrt, same)
            assert same > _match(g, want_x, T, scale_of)[0] + 0.05, (form, wrt)
            same_x, near_x = _match(gx, want_x, T, scale_of)
            assert near_x and same_x >= 0.98, (form, wrt, same_x)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_backward_round_p_bits_do_not_depend_on_step_rows(causal):
    """With all five products on vdpbf16ps, dV^T and dK^T add the query rows pair after pair in
    order whatever rows a step holds (fc_uarch.h picks 128 on AMD, 64 elsewhere): steps of 16 to
    128 rows, whole and ragged (300 rows), give the same bits, GQA included."""
    c = core()
    q, k, v, do, _ = attention_inputs(1, 4, 2, 300, 300, 72, BF16, False, seed=11, with_do=True)
    saved = c._test_bwd_rows_pairs()
    seen = []
    try:
        for rows in (16, 36, 64, 128):
            assert c._test_bwd_rows_pairs(rows) == rows
            seen.append(bits(fuel_cy.attention_flash_backward_mixed(q, k, v, do, causal=causal, round_p=True)))
    finally:
        c._test_bwd_rows_pairs(saved)
    assert all(b == seen[0] for b in seen)
    for bad in (0, 6, 132):
        with pytest.raises(ValueError):
            c._test_bwd_rows_pairs(bad)


def test_backward_defaults_pair_with_the_forwards():
    """The model-facing backwards round by default, as their forwards; the mixed one does not."""
    q, k, v, do, _ = attention_inputs(1, 2, 1, 160, 160, 64, BF16, False, seed=9, with_do=True)
    for name, default in (("attention_masked_backward", True), ("attention_varlen_backward", True),
                          ("attention_flash_backward_mixed", False)):
        plain = _backward_call(name, q, k, v, do, True)
        same = _backward_call(name, q, k, v, do, True, round_p=default)
        other = _backward_call(name, q, k, v, do, True, round_p=not default)
        assert all(bits(a) == bits(b) for a, b in zip(plain, same))
        assert any(bits(a) != bits(b) for a, b in zip(plain, other))
