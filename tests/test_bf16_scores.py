"""The bf16 scores of the float32-compute kernels (fuel_cy/_core/fc_amx.h): vdpbf16ps on zmm
registers, AMX-BF16 tiles where the CPU has them, and the tile loops with the tile instructions
emulated, which every AVX512-BF16 CPU runs so that the tiling is checked where no AMX is at hand.
Each form's scores are float32 sums of exact bf16 products; the emulated forms are pinned bit for
bit to numpy models of their order, the hardware tile form is held to the float32 error bound of
the sum, and the mixed kernels are checked against the float64 reference under every form."""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap

import ml_dtypes
import numpy as np
import pytest

import fuel_cy
import reference_impl as ref
from conftest import ROOT, each_bf16_score_form
from inputs import attention_inputs
from measures import bits as _bits
from measures import rel as _rel
from measures import near_in_another_f32_order

from fuel_cy.runtime.cpu import core

BF16 = ml_dtypes.bfloat16

# (rows, keys, d): whole tiles, a decode's few rows, ragged rows/keys/pairs, odd D, one pair chunk
SHAPES = [(5, 40, 7), (64, 128, 64), (9, 1, 128), (1, 77, 111), (48, 128, 96), (20, 100, 40),
          (33, 64, 33), (64, 127, 128), (16, 32, 32), (32, 96, 62)]


def _pairs_sum(s, q, k, dims):
    """s += q[:, e] k[:, e] for e in dims, each addition rounded to float32 (bf16 products are
    exact in float32, so a fused multiply-add is the rounded sum with the exact product)."""
    for e in dims:
        s = (s + np.outer(q[:, e], k[:, e]).astype(np.float32)).astype(np.float32)
    return s


def _vdpbf16ps_order(p0, d):
    """vdpbf16ps as Intel's SDM defines it: per pair, the odd product, then the even one."""
    return [e for p in range(2 * p0, d, 2) for e in (p + 1, p) if e < d]


def _vdpbf16ps_model(q, k):
    return _pairs_sum(np.zeros((q.shape[0], k.shape[0]), np.float32), q, k, _vdpbf16ps_order(0, q.shape[1]))


def _tiles_model(q, k):
    """The tile form: rows in whole 16-row tiles (of the 4-row padded count), keys in whole 32-key
    blocks, pairs in whole 16-pair chunks go to the tiles (the emulated instruction: per pair, the
    even product then the odd one), their last D2 % 16 pairs to vdpbf16ps; every other score is
    vdpbf16ps's alone."""
    rows, keys, d = q.shape[0], k.shape[0], q.shape[1]
    d2 = (d + 1) // 2
    rt, ct, pt = (rows + 3) // 4 * 4 // 16 * 16, keys // 32 * 32, d2 // 16 * 16
    s = _vdpbf16ps_model(q, k)
    if rt and ct and pt:
        tiles = _pairs_sum(np.zeros((rt, ct), np.float32), q[:rt], k[:ct], range(min(2 * pt, d)))
        s[:rt, :ct] = _pairs_sum(tiles, q[:rt], k[:ct], _vdpbf16ps_order(pt, d))
    return s


def _bf16_values(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(ml_dtypes.bfloat16).astype(np.float32)


@contextlib.contextmanager
def _form(form):
    """The score form switched to `form` inside the block, the CPU's choice restored after it (the
    form is process-wide: a test must not leave the tiles switched off for the next)."""
    c = core()
    chosen = c._test_bf16_score_form()
    try:
        c._test_bf16_score_form(form)
        yield
    finally:
        c._test_bf16_score_form(chosen)


def test_score_forms_follow_the_cpu():
    """AMX where the CPU has AMX-BF16 and Linux granted the tile state, vdpbf16ps at the other
    AVX512-BF16 CPUs; the emulated tile form exists at every AVX512-BF16 level for the tests and is
    never chosen; nothing can switch to the hardware form on a CPU without it."""
    from fuel_cy import _cpuid

    c = core()
    features, _, _, _ = _cpuid.probe()
    state = c._test_amx_state()
    if not c._TEST_HAVE_DPBF16:
        assert c._test_bf16_score_forms() == [] and state == "absent"
        with pytest.raises(ValueError):
            c._test_bf16_score_form("amx-emulated")
        return
    has_amx = {"amx_tile", "amx_bf16"} <= features
    assert state in (("granted", "refused") if has_amx else ("absent",))
    granted = state == "granted"
    assert c._test_bf16_score_forms() == ["vdpbf16ps", "amx-emulated"] + (["amx"] if granted else [])
    assert c._test_bf16_score_form() == ("amx" if granted else "vdpbf16ps")
    if not granted:
        with pytest.raises(ValueError):
            c._test_bf16_score_form("amx")  # never run a tile instruction without the tile state


@pytest.mark.parametrize("rows,keys,d", SHAPES)
def test_scores_are_each_forms_float32_sums(rows, keys, d):
    c = core()
    if not c._TEST_HAVE_DPBF16:
        assert c._test_qk_dpbf16(np.zeros((1, 2), np.float32), np.zeros((1, 2), np.float32)) is None
        return
    q, k = _bf16_values((rows, d), rows + d), _bf16_values((keys, d), keys * d)
    exact = q.astype(np.float64) @ k.astype(np.float64).T
    # every rounding of a d-term float32 sum is within 2^-24 of a partial sum, each below sum |q k|
    bound = d * 2.0**-24 * (np.abs(q).astype(np.float64) @ np.abs(k).astype(np.float64).T)
    c._test_amx_emulation_faults()
    for form in each_bf16_score_form():
        s = c._test_qk_dpbf16(q, k)
        assert np.all(np.abs(s - exact) <= bound), form
        if form == "vdpbf16ps":
            assert _bits(s) == _bits(_vdpbf16ps_model(q, k))
        elif form == "amx-emulated":
            assert _bits(s) == _bits(_tiles_model(q, k))
            assert c._test_amx_emulation_faults() == 0
        else:  # the hardware's order inside one instruction is its own: bounded, and repeatable
            assert _bits(s) == _bits(c._test_qk_dpbf16(q, k))


@pytest.mark.parametrize("nheads,rph,keys,d", [(1, 4, 40, 128), (2, 4, 128, 128), (1, 8, 17, 64), (2, 8, 33, 7),
                                                (1, 4, 1, 111), (3, 4, 100, 96), (1, 12, 127, 136), (2, 4, 5, 33),
                                                (1, 4, 16, 32), (1, 4, 31, 200)])
def test_decode_step_p_v_is_the_packed_forms_sum(nheads, rph, keys, d):
    """A bf16 decode step's round_p P V from V's rows read in place (fc_decode16.h: two rows
    interleaved into pairs per column, 32 keys at a time), bit for bit the vdpbf16ps model of the
    packed form (P rounded to bf16, per output element the key pairs in order from O's value, a
    lone last key with a zero), across kv heads side by side in each row, ragged keys and columns
    and an odd D."""
    c = core()
    bf = ml_dtypes.bfloat16
    rng = np.random.default_rng(nheads * 1000 + keys + d)
    nr = nheads * rph
    v = rng.standard_normal((keys, nheads * d)).astype(bf)
    p = rng.random((nr, keys)).astype(np.float32)
    o = rng.standard_normal((nr, d)).astype(np.float32)
    out = c._test_decode_pv_dpbf16(p, v.view(np.uint16), o, nheads)
    if not c._TEST_HAVE_DPBF16:
        assert out is None
        return
    pr = p.astype(bf).astype(np.float32)
    assert not np.array_equal(pr, p)
    for h in range(nheads):
        rows, vf = slice(h * rph, (h + 1) * rph), v[:, h * d:(h + 1) * d].astype(np.float32)
        assert _bits(out[rows]) == _bits(_pairs_sum(o[rows].copy(), pr[rows], vf.T, _vdpbf16ps_order(0, keys))), h


def _decode_lanes_model(q, k):
    """A bf16 decode step's scores as the mixed contract declares them: vdpbf16ps along d, sum l of
    16 taking the pairs (32c + 2l + 1, 32c + 2l) for c = 0, 1, ... (odd product first), q and k
    zero past D, then the 16 sums added by halves (l + 8, then l + 4, l + 2, l + 1)."""
    rows, d = q.shape
    dp = -(-d // 32) * 32
    qz, kz = (np.pad(x, ((0, 0), (0, dp - d))).reshape(x.shape[0], dp // 32, 16, 2) for x in (q, k))
    acc = np.zeros((rows, k.shape[0], 16), np.float32)
    for c in range(dp // 32):
        for e in (1, 0):   # bf16 products are exact in float32: only the additions round
            acc = (acc + qz[:, None, c, :, e] * kz[None, :, c, :, e]).astype(np.float32)
    for h in (8, 4, 2, 1):
        acc = (acc[..., :h] + acc[..., h:2 * h]).astype(np.float32)
    return acc[..., 0]


@pytest.mark.parametrize("nheads,rph,keys,d", [(1, 4, 40, 128), (2, 4, 128, 128), (1, 8, 17, 64), (2, 8, 33, 7),
                                                (1, 4, 1, 111), (3, 4, 100, 96), (1, 12, 127, 136), (2, 4, 5, 33),
                                                (1, 4, 16, 32), (1, 4, 31, 200), (4, 4, 9, 1)])
def test_decode_step_scores_are_the_lane_pairs_sum(nheads, rph, keys, d):
    """A bf16 decode step's scores from K's rows read in place (fc_decode16.h: 4 keys x 4 rows,
    16 lanes of pairs along d, one shuffle tree), bit for bit the model of the contract's decode
    order, across kv heads side by side in a row, ragged keys, D not a multiple of 32, odd D; and
    within float32's error bound of the exact dot."""
    c = core()
    rng = np.random.default_rng(nheads * 1000 + keys + d)
    nr = nheads * rph
    k = rng.standard_normal((keys, nheads * d)).astype(BF16)
    q = rng.standard_normal((nr, d)).astype(BF16).astype(np.float32)
    s = c._test_decode_qk_dpbf16(q, k.view(np.uint16), nheads)
    if not c._TEST_HAVE_DPBF16:
        assert s is None
        return
    for h in range(nheads):
        rows, kf = slice(h * rph, (h + 1) * rph), k[:, h * d:(h + 1) * d].astype(np.float32)
        assert _bits(s[rows]) == _bits(_decode_lanes_model(q[rows], kf)), h
        exact = q[rows].astype(np.float64) @ kf.astype(np.float64).T
        bound = d * 2.0**-24 * (np.abs(q[rows]).astype(np.float64) @ np.abs(kf).astype(np.float64).T)
        assert np.all(np.abs(s[rows] - exact) <= bound), h


def _decode_step_entries(q, k, v):
    """A decode step (one query per head) through each entry that reads K's rows in place:
    attention_flash_mixed on [1, H, S, D], and attention_varlen on one sequence, packed and in a
    paged pool of 16-key blocks; each output as [Hq, D] float64."""
    hq, hkv, s, d = q.shape[1], k.shape[1], k.shape[2], q.shape[3]
    yield "flash_mixed", fuel_cy.attention_flash_mixed(q, k, v)[0, :, 0]
    qp, kp, vp = (np.ascontiguousarray(x[0].transpose(1, 0, 2)) for x in (q, k, v))
    cu_q, cu_k = np.array([0, 1], np.uint32), np.array([0, s], np.uint32)
    yield "varlen", fuel_cy.attention_varlen(qp, kp, vp, cu_q, cu_k, causal=True)[0]
    nb = -(-s // 16)
    kc, vc = (np.zeros((nb * 16, hkv, d), q.dtype) for _ in range(2))
    kc[:s], vc[:s] = kp, vp
    order = np.arange(nb)[::-1].copy()   # blocks stored in reverse: read through the table
    pools = [x.reshape(nb, 16, hkv, d)[order] for x in (kc, vc)]
    table = np.argsort(order).astype(np.uint32)[None]
    yield "varlen paged", fuel_cy.attention_varlen(qp, *pools, cu_q, cu_k, block_table=table, causal=True)[0]


@pytest.mark.parametrize("hq,hkv,d", [(4, 1, 32), (8, 2, 64), (2, 2, 40), (4, 1, 128)])
def test_a_bf16_decode_steps_scores_run_along_d(hq, hkv, d):
    """On AVX512-BF16 a bf16 decode step's scores take the contract's decode order (vdpbf16ps along
    d, 16 sums of pairs added by halves), not the float32 loops' 16 lanes of single elements (a
    testing hook switches back to those) nor the sequential pairs of the tiled scores.  q is 2^40
    throughout; three keys tell the orders apart, k_a = (1, -1, 2^-25, 0, ...) and k_b with 1, -1,
    2^-25 at elements 0, 2, 16: the decode order gives them scores 2^15 and 0, the float32 lanes
    0 and 0, the sequential pairs 2^15 and 2^15; a third key scores 0 in every order.  Scaled, a
    score of 2^15 leaves the others weight 0, so with v = 1, 0.5, -1.5 the output is 1, 0 or 0.75.
    Both P V modes (the weights are 0 and 1, exact in either); f16 and the levels without the
    instruction keep the float32 loops."""
    c = core()
    saved = c._test_decode_qk_pairs()
    k = np.zeros((1, hkv, 3, d), np.float32)
    k[..., 0, :3] = (1.0, -1.0, 2.0**-25)
    k[..., 1, (0, 2, 16)] = (1.0, -1.0, 2.0**-25)
    v = np.ascontiguousarray(np.broadcast_to(np.array([1.0, 0.5, -1.5], np.float32)[:, None], (1, hkv, 3, d)))
    q = np.full((1, hq, 1, d), 2.0**40, np.float32)
    try:
        for on in (True, False):
            c._test_decode_qk_pairs(on)
            want = 1.0 if on and c._TEST_HAVE_DPBF16 else 0.0
            for name, out in _decode_step_entries(*(x.astype(BF16) for x in (q, k, v))):
                assert (np.asarray(out, np.float64) == want).all(), (name, on)
    finally:
        c._test_decode_qk_pairs(saved)


def test_the_emulated_tile_form_takes_the_tiles():
    """A whole 64 x 128 tile at D=64 goes through the tile loops, whose order differs from
    vdpbf16ps's: the emulated form's scores are not vdpbf16ps's (the test above would pass on a
    form that silently fell back to vdpbf16ps everywhere only if its model did too)."""
    c = core()
    if not c._TEST_HAVE_DPBF16:  # the float32 loops compute bf16 scores there: no forms to tell apart
        assert c._test_bf16_score_forms() == []
        return
    q, k = _bf16_values((64, 64), 1), _bf16_values((128, 64), 2)
    assert not np.array_equal(_tiles_model(q, k), _vdpbf16ps_model(q, k))
    for form in each_bf16_score_form():
        if form == "amx-emulated":
            assert _bits(c._test_qk_dpbf16(q, k)) == _bits(_tiles_model(q, k))


def _split3(p):
    """p = p1 + p2 + p3 exactly, each a bf16 value (to nearest even): the tile form's terms of P."""
    p1 = p.astype(ml_dtypes.bfloat16).astype(np.float32)
    r = (p - p1).astype(np.float32)
    p2 = r.astype(ml_dtypes.bfloat16).astype(np.float32)
    p3 = (r - p2).astype(np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)
    assert np.array_equal(p1.astype(np.float64) + p2 + p3, p.astype(np.float64))
    return p1, p2, p3


def _terms_by_32(acc, a, b, split_left, split=_split3):
    """acc + a b as the tiles sum it when one operand is float32 (a if split_left, else b): that
    operand split into its three bf16 terms, per 32 steps of the inner dimension the three terms in
    turn, step by step (each product exact, each addition rounded to float32).  split: the terms
    (one, the operand itself, where it holds bf16 values already: round_p's P)."""
    terms = split(a if split_left else b)
    for k0 in range(0, a.shape[1], 32):
        for t in terms:
            acc = _pairs_sum(acc, t if split_left else a, (b if split_left else t).T, range(k0, k0 + 32))
    return acc


def _pv_tiles_model(p, v, o, split=_split3):
    """The tile form of O += P V: rows in whole 16-row tiles, keys in whole 32-key blocks, columns
    in whole 16-column tiles take, per 32 keys, P's three bf16 terms in turn, key by key (each
    product exact, each addition rounded to float32); the float32 loops (the form beside vdpbf16ps
    scores: fc_pv_contig_f32, whose order test_kernels_forward pins) add the last keys to those
    sums and compute every other element whole."""
    c = core()
    rows, keys, d = p.shape[0], p.shape[1], v.shape[1]
    rt, kt, ct = (rows + 3) // 4 * 4 // 16 * 16, keys // 32 * 32, d // 16 * 16
    with _form("vdpbf16ps"):
        out = c._test_pv_bf16v(p, v, o)
        if rt and kt and ct:
            acc = _terms_by_32(o[:rt, :ct].copy(), p[:rt, :kt], v[:kt, :ct], split_left=True, split=split)
            if kt < keys:
                acc = c._test_pv_bf16v(np.ascontiguousarray(p[:rt, kt:]), np.ascontiguousarray(v[kt:, :ct]), acc)
            out[:rt, :ct] = acc
    return out


@pytest.mark.parametrize("rows,keys,d", [(64, 128, 64), (64, 128, 128), (20, 100, 40), (48, 96, 200), (5, 40, 7),
                                         (33, 64, 33), (64, 127, 136), (16, 32, 16)])
@pytest.mark.parametrize("prepaired", [False, True], ids=["paired-per-call", "prepaired"])
def test_pv_of_each_form(rows, keys, d, prepaired):
    """The mixed bf16 flash's O += P V beside each score form: the float32 loops beside
    vdpbf16ps, the tiles (P split into three exact bf16 terms) beside tile scores; each within the
    float32 error bound of the sum, the emulated tiles bit for bit as their model, with V's keys
    paired inside the product or once beforehand (as the flash does per kv head)."""
    c = core()
    rng = np.random.default_rng(rows + keys + d)
    p = rng.random((rows, keys)).astype(np.float32)
    v = _bf16_values((keys, d), keys + d)
    o = rng.standard_normal((rows, d)).astype(np.float32)
    if not c._TEST_HAVE_DPBF16:  # the flash's float32 loops: no forms
        assert c._test_bf16_score_forms() == []
        return
    exact = o.astype(np.float64) + p.astype(np.float64) @ v.astype(np.float64)
    # the tiles add three terms per key: at most 3 * keys + 1 roundings of sums below this
    bound = (3 * keys + 1) * 2.0**-24 * (np.abs(o).astype(np.float64) + p.astype(np.float64) @ np.abs(v).astype(np.float64))
    _check_each_product_form(lambda: c._test_pv_bf16v(p, v, o, prepaired), exact, bound, _pv_tiles_model(p, v, o),
                             tiles_ran=rows >= 16 and keys >= 32 and d >= 16)


@pytest.mark.parametrize("rows,keys,d", [(64, 128, 64), (64, 128, 128), (20, 100, 40), (48, 96, 200), (5, 40, 7),
                                         (33, 64, 33), (64, 127, 136), (16, 32, 16)])
def test_rounded_pv_of_each_form(rows, keys, d):
    """round_p's O += P V: P rounded to bf16 (nearest even), then beside vdpbf16ps scores
    vdpbf16ps on P's and V's pairs (per element the pairs in key order, in each the odd product
    then the even: the instruction's model above), beside tile scores one tile term per 32 keys
    (P is its own bf16 term) and the float32 loops on the rounded P at the edges."""
    c = core()
    rng = np.random.default_rng(rows * keys + d)
    p = rng.random((rows, keys)).astype(np.float32)
    v = _bf16_values((keys, d), keys + 3 * d)
    o = rng.standard_normal((rows, d)).astype(np.float32)
    if not c._TEST_HAVE_DPBF16:  # the float32 loops on the rounded P
        got = c._test_pv_bf16v(p, v, o, True, True)
        pr = p.astype(ml_dtypes.bfloat16).astype(np.float64)
        assert np.all(np.abs(got - (o + pr @ v)) <= (keys + 1) * 2.0**-24 * (np.abs(o) + pr @ np.abs(v)))
        return
    pr = p.astype(ml_dtypes.bfloat16).astype(np.float32)
    assert not np.array_equal(pr, p)
    exact = o.astype(np.float64) + pr.astype(np.float64) @ v.astype(np.float64)
    bound = (keys + 1) * 2.0**-24 * (np.abs(o).astype(np.float64) + pr.astype(np.float64) @ np.abs(v).astype(np.float64))
    with _form("vdpbf16ps"):
        got = c._test_pv_bf16v(p, v, o, True, True)
        assert _bits(got) == _bits(_pairs_sum(o.copy(), pr, v.T, _vdpbf16ps_order(0, keys)))
    _check_each_product_form(lambda: c._test_pv_bf16v(p, v, o, True, True), exact, bound,
                             _pv_tiles_model(pr, v, o, split=lambda x: (x,)),
                             tiles_ran=rows >= 16 and keys >= 32 and d >= 16)


def _check_each_product_form(product, exact, bound, model, tiles_ran):
    """A product beside the bf16 scores, in each form: within the float32 error bound of its sum,
    the emulated tiles bit for bit as their model (and, where the tiles ran, not the loops' bits),
    the hardware tiles repeatable."""
    c = core()
    c._test_amx_emulation_faults()
    for form in each_bf16_score_form():
        got = product()
        assert np.all(np.abs(got - exact) <= bound), form
        if form == "amx-emulated":
            assert _bits(got) == _bits(model)
            assert c._test_amx_emulation_faults() == 0
            if tiles_ran:  # their order is not the loops'
                with _form("vdpbf16ps"):
                    assert _bits(got) != _bits(product())
        elif form == "amx":
            assert _bits(got) == _bits(product())


def _tn_tiles_model(p, x, ct):
    """The tile form of Ct += X^T P (the mixed backward's dV and dK, accumulators transposed):
    query rows in whole 32-row blocks (at most 64), columns d in whole 16-column tiles and keys in
    whole 16-key tiles take, per 32 rows, P's three bf16 terms in turn, row by row (each product
    exact, each addition rounded to float32); the float32 loop (the form beside vdpbf16ps scores)
    adds the last rows to those sums and computes every other element whole."""
    c = core()
    rows, keys, d = p.shape[0], p.shape[1], x.shape[1]
    rt, kt, dt = min(rows // 32 * 32, 64), keys // 16 * 16, d // 16 * 16
    with _form("vdpbf16ps"):
        out = c._test_tn_bf16t(p, x, ct)
        if rt and kt and dt:
            acc = _terms_by_32(ct[:dt, :kt].copy(), x[:rt, :dt].T, p[:rt, :kt], split_left=False)
            if rt < rows:
                acc = c._test_tn_bf16t(np.ascontiguousarray(p[rt:, :kt]), np.ascontiguousarray(x[rt:, :dt]), acc)
            out[:dt, :kt] = acc
    return out


@pytest.mark.parametrize("rows,keys,d", [(32, 128, 64), (64, 128, 128), (64, 100, 40), (50, 77, 33), (5, 40, 7),
                                         (96, 48, 48), (31, 64, 64), (64, 16, 16), (40, 256, 136)])
def test_backward_products_of_each_form(rows, keys, d):
    """The mixed bf16 backward's dV += P^T dO and dK += dS^T Q into accumulators held transposed,
    as the tile form runs them: each form within the float32 error bound of the sum, the emulated
    tiles bit for bit as their model (P, of either sign, split into three exact bf16 terms)."""
    c = core()
    rng = np.random.default_rng(rows * keys + d)
    p = rng.standard_normal((rows, keys)).astype(np.float32)
    x = _bf16_values((rows, d), rows + 3 * d)
    ct = rng.standard_normal((d, keys)).astype(np.float32)
    if not c._TEST_HAVE_DPBF16:  # the backward's float32 loops: no forms
        assert c._test_bf16_score_forms() == []
        return
    exact = ct.astype(np.float64) + x.T.astype(np.float64) @ p.astype(np.float64)
    # three terms per row: at most 3 * rows + 1 roundings of sums below this
    bound = (3 * rows + 1) * 2.0**-24 * (np.abs(ct).astype(np.float64) + np.abs(x.T).astype(np.float64) @ np.abs(p).astype(np.float64))
    _check_each_product_form(lambda: c._test_tn_bf16t(p, x, ct), exact, bound, _tn_tiles_model(p, x, ct),
                             tiles_ran=rows >= 32 and keys >= 16 and d >= 16)


@pytest.mark.parametrize("rows_per_step", [32, 64])
def test_mixed_backward_products_take_the_tiles(rows_per_step):
    """In the tile form all three products of the mixed bf16 backward run on the tiles: at D=16 (8
    pairs, below one 16-pair chunk) the scores stay on vdpbf16ps, and with every dimension a whole
    number of tiles the emulated form runs exactly one tdpbf16ps per 16 x 16 x 32 block of
    dQ = dS K, dV = P^T dO and dK = dS^T Q per bf16 term of P and dS (three), whatever the order of
    the blocks; at both step heights the CPUs use (AMD 32 rows, Intel 64), each form within the
    contract's accuracy."""
    c = core()
    if not c._TEST_HAVE_DPBF16:
        assert c._test_bf16_score_forms() == []
        return
    b, hq, sq, sk, d = 1, 2, 128, 96, 16
    q, k, v, do, _ = attention_inputs(b, hq, 1, sq, sk, d, ml_dtypes.bfloat16, False, seed=7, with_do=True)
    grads = ref.backward(q, k, v, do, None)
    blocks = (sq // 16) * (d // 16) * (sk // 32) + 2 * (d // 16) * (sk // 16) * (sq // 32)
    rows = c._test_bwd_rows()
    c._test_amx_emulation_faults()
    try:
        c._test_bwd_rows(rows_per_step)
        for form in each_bf16_score_form():
            c._test_amx_emulation_dps()
            got = fuel_cy.attention_flash_backward_mixed(q, k, v, do)
            for g, want in zip(got, grads):
                assert _rel(g, want) <= 1e-2, form
            if form == "amx-emulated":
                assert c._test_amx_emulation_dps() == 3 * b * hq * blocks
                assert c._test_amx_emulation_faults() == 0
            elif form == "vdpbf16ps":
                assert c._test_amx_emulation_dps() == 0
    finally:
        c._test_bwd_rows(rows)


@pytest.mark.parametrize("round_p", [True, False])
def test_a_flash_task_configures_the_tiles_once_and_releases_them(round_p):
    """The tile configuration is loaded once per task (fc_amx.h fc_amx_hold): a bf16 flash whose
    tasks (64 query rows of one head) each cross three key tiles and two 64-column chunks of P V
    runs one emulated ldtilecfg per task where it ran nine (one for the scores, one per chunk of
    P V, per key tile), in both P modes, and leaves no tiles configured on the thread that ran them
    (one thread: the calling one); so does the backward, whose task is a whole kv head.  The
    outputs stay within the contract's accuracy."""
    c = core()
    if not c._TEST_HAVE_DPBF16:
        assert c._test_bf16_score_forms() == []
        return
    b, hq, sq, sk, d = 1, 2, 128, 384, 128
    q, k, v, do, _ = attention_inputs(b, hq, hq, sq, sk, d, ml_dtypes.bfloat16, False, seed=11, with_do=True)
    want = ref.forward(q, k, v, round_to=ml_dtypes.bfloat16 if round_p else None)
    grads = ref.backward(q, k, v, do)
    chosen, threads = c._test_bf16_score_form(), fuel_cy.get_num_threads()
    c._test_amx_emulation_faults()
    try:
        c._test_bf16_score_form("amx-emulated")
        fuel_cy.set_num_threads(1)
        c._test_amx_emulation_cfgs()
        got = fuel_cy.attention_flash_mixed(q, k, v, round_p=round_p)
        assert c._test_amx_emulation_cfgs() == (b * hq * (sq // 64), False)
        assert c._test_amx_emulation_faults() == 0
        assert _rel(got, want) <= 1e-2
        got = fuel_cy.attention_flash_backward_mixed(q, k, v, do, round_p=round_p)
        assert c._test_amx_emulation_cfgs() == (b * hq, False)
        assert c._test_amx_emulation_faults() == 0
        for g, w in zip(got, grads):
            assert _rel(g, w) <= 1e-2
    finally:
        c._test_bf16_score_form(chosen)
        fuel_cy.set_num_threads(threads)


# (b, hq, hkv, sq, sk, d, params, alibi): whole and ragged score tiles, odd D, a pair tail, GQA
MIXED = [
    (1, 2, 2, 64, 64, 64, {}, False),
    (2, 6, 2, 33, 70, 59, {"causal": True}, False),
    (1, 2, 1, 113, 203, 111, {}, True),
    (1, 4, 2, 50, 150, 32, {"window_size_left": 17, "window_size_right": 3, "softcap": 6.0}, True),
]


@pytest.mark.parametrize("rows_per_step", [32, 64])
@pytest.mark.parametrize("case", MIXED, ids=["plain", "odd-59 gqa causal", "ragged d111", "window+softcap"])
def test_mixed_bf16_kernels_under_every_score_form(case, rows_per_step):
    """The mixed flash and backward on bf16 under each score form: the contract's accuracy against
    the float64 reference, within one bf16 ulp of the float32 kernel on the widened inputs up to
    what another float32 summation order may move (the contract's identity up to the order of the
    sums), and the same bits at 1 and 2 threads;
    the backward at both step heights the CPUs use (AMD 32 query rows, Intel 64: with 64, ragged
    row counts leave the tiles' backward products a float32 tail of rows)."""
    saved = core()._test_bwd_rows()
    core()._test_bwd_rows(rows_per_step)
    try:
        _check_mixed_bf16_kernels_under_every_score_form(case)
    finally:
        core()._test_bwd_rows(saved)


def _check_mixed_bf16_kernels_under_every_score_form(case):
    b, hq, hkv, sq, sk, d, params, alibi = case
    q, k, v, do, slopes = attention_inputs(b, hq, hkv, sq, sk, d, ml_dtypes.bfloat16, alibi, seed=5, with_do=True)
    widened = [None if x is None else np.asarray(x, np.float32) for x in (q, k, v, do, slopes)]
    expected = ref.forward(q, k, v, slopes, causal=params.get("causal", False), left=params.get("window_size_left"),
                           right=params.get("window_size_right"), softcap=params.get("softcap"))
    f32 = fuel_cy.attention_flash(widened[0], widened[1], widened[2], widened[4], **params)
    grads = ref.backward(q, k, v, do, slopes, causal=params.get("causal", False), left=params.get("window_size_left"),
                         right=params.get("window_size_right"), softcap=params.get("softcap"))
    core()._test_amx_emulation_faults()
    for form in each_bf16_score_form():
        runs = []
        for threads in (1, 2):
            fuel_cy.set_num_threads(threads)
            try:
                out = fuel_cy.attention_flash_mixed(q, k, v, slopes, **params)
                dq, dk, dv = fuel_cy.attention_flash_backward_mixed(q, k, v, do, slopes, **params)
            finally:
                fuel_cy.set_num_threads(0)
            runs.append(_bits((out, dq, dk, dv)))
        assert runs[0] == runs[1], form
        assert _rel(out, expected) <= 1e-2, form
        assert near_in_another_f32_order(out, f32, sk + d, float(np.max(np.abs(widened[2])))), form
        for got, want in zip((dq, dk, dv), grads):
            assert _rel(got, want) <= 1e-2, form
        if form == "amx-emulated":
            assert core()._test_amx_emulation_faults() == 0


_FRESH_PROCESS = textwrap.dedent("""
    import json, sys
    import ml_dtypes, numpy as np
    sys.path.insert(0, sys.argv[1])
    import fuel_cy, reference_impl as ref
    from inputs import attention_inputs
    from fuel_cy.runtime.cpu import core
    c = core()
    report = {"state": c._test_amx_state(), "forms": c._test_bf16_score_forms(), "form": None}
    if "amx" in report["forms"]:
        report["form"] = c._test_bf16_score_form()
        rng = np.random.default_rng(0)
        q, k = (rng.standard_normal(s).astype(ml_dtypes.bfloat16).astype(np.float32) for s in ((64, 128), (128, 128)))
        s = c._test_qk_dpbf16(q, k)
        exact = q.astype(np.float64) @ k.astype(np.float64).T
        bound = 128 * 2.0**-24 * (np.abs(q).astype(np.float64) @ np.abs(k).astype(np.float64).T)
        report["scores_within_bound"] = bool(np.all(np.abs(s - exact) <= bound))
        q, k, v, slopes = attention_inputs(1, 4, 2, 96, 160, 64, ml_dtypes.bfloat16, True, seed=2)
        out = fuel_cy.attention_flash_mixed(q, k, v, slopes, causal=True)
        expected = ref.forward(q, k, v, slopes, causal=True)
        report["flash_rel"] = float(np.max(np.abs(np.asarray(out, np.float64) - expected)) / np.max(np.abs(expected)))
    print(json.dumps(report))
""")


def test_tile_instructions_run_in_a_fresh_process():
    """On a CPU with AMX-BF16 at an AVX512-BF16 level, a process that has not set up a small
    sigaltstack (pytest's faulthandler may have, in this one) gets the tile state and takes the
    tile form, whose scores and mixed flash are right; elsewhere no process ever sees the form.
    In a child process, so that a tile instruction gone wrong fails this test, not the suite."""
    from fuel_cy import _cpuid

    features, _, _, _ = _cpuid.probe()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONFAULTHANDLER"}
    proc = subprocess.run([sys.executable, "-c", _FRESH_PROCESS, str(ROOT / "tests")], capture_output=True,
                          text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    if core()._TEST_HAVE_DPBF16 and {"amx_tile", "amx_bf16"} <= features:
        assert report["state"] == "granted" and report["form"] == "amx", report
        assert report["scores_within_bound"] and report["flash_rel"] <= 1e-2, report
    else:
        assert report["state"] == "absent" and "amx" not in report["forms"], report


def _pairs_model(x: np.ndarray, which: str) -> np.ndarray:
    """The pair layouts the mixed flash's bf16 products read, from the bf16 bits x [n, D]: low half
    the even element, high half the odd one, missing elements zero."""
    n, d = x.shape
    d2 = (d + 1) // 2
    w = np.zeros((max(n, 1), 2 * d2), np.uint32)
    w[:n, :d] = x
    rows = w[:, 0::2] | (w[:, 1::2] << 16)     # [n, D2]: a row's elements paired
    if which == "q":
        return rows[:n]
    if which == "k":                            # [D2, 128]: keys along the columns
        out = np.zeros((d2, 128), np.uint32)
        out[:, :n] = rows[:n].T
        return out
    keys = np.zeros((128, d), np.uint32)        # "v" [64, D]: keys 2k and 2k + 1 per column
    keys[:n] = x
    return keys[0::2] | (keys[1::2] << 16)


@pytest.mark.parametrize("n,d", [(0, 8), (1, 1), (7, 33), (16, 32), (17, 64), (40, 72), (128, 128),
                                 (127, 111), (64, 130), (100, 31), (33, 256)])
@pytest.mark.parametrize("which", ["q", "k", "v"])
def test_pairs_from_bf16_storage_are_the_widened_routes(n, d, which):
    """The mixed flash pairs Q, K and V straight from their bf16 storage (no widened copy): the
    same pairs as the float32 route, bit for bit, in the layouts the products read (a numpy model),
    NaN and subnormal patterns included, every slot written."""
    rng = np.random.default_rng(n * 1000 + d)
    x = rng.integers(0, 1 << 16, size=(n, d), dtype=np.uint16)   # every bit pattern, NaNs included
    storage, widened = core()._test_pairs_from_storage(x, which)
    model = _pairs_model(x, which)
    assert storage.shape == model.shape
    assert np.array_equal(storage, model), which
    assert np.array_equal(widened, model), which


@pytest.mark.parametrize("s,d", [(256, 64), (300, 72)])
@pytest.mark.parametrize("kernel", ["attention_flash_mixed", "attention_masked"])
def test_the_mixed_flash_reads_v_in_its_storage_where_p_v_takes_its_pairs(s, d, kernel):
    """A bf16 mixed flash call (attention_flash_mixed, or attention_masked with a mask) whose P V
    reads V's pairs (the tile forms in both P modes, and round_p on vdpbf16ps) pairs V from its
    bf16 storage, its rows read there at the tiles' edges (ragged keys and odd column counts
    included): no widened float32 copy of V is written (the call's temporaries are kept by slot
    name, so a widened V would leave its slot behind); q and k are read in their storage always.
    Elsewhere (the exact mode on vdpbf16ps, a level without AVX512-BF16) V is widened."""
    c = core()
    rng = np.random.default_rng(s + d)
    q, k, v = (rng.standard_normal((1, 2, s, d)).astype(BF16) for _ in range(3))
    mask = rng.random((1, 1, s, s)) < 0.8
    for form in each_bf16_score_form():
        for round_p in (False, True):
            c._temps.arrays = {}
            c._temps.bufs = {}
            if kernel == "attention_masked":
                fuel_cy.attention_masked(q, k, v, mask, None, round_p=round_p)
            else:
                fuel_cy.attention_flash_mixed(q, k, v, round_p=round_p)
            slots = set(c._temps.arrays) | set(c._temps.bufs)
            in_storage = form in ("amx", "amx-emulated") or (form == "vdpbf16ps" and round_p)
            assert ("v" not in slots) == in_storage, (form, round_p, sorted(slots))
            assert not {"q", "k"} & slots, (form, round_p, sorted(slots))


@pytest.mark.parametrize("n,d", [(0, 8), (1, 1), (7, 33), (16, 64), (17, 65), (128, 128), (100, 130), (33, 256)])
@pytest.mark.parametrize("is_f16", [0, 1])
def test_kt_packed_from_half_storage_is_the_widened_route(n, d, is_f16):
    """Where the mixed flash's scores take the float32 loops (f16; bf16 without AVX512-BF16), K is
    widened as it is packed, from its storage: the same K^T bits as packing a widened copy, and
    the layout a numpy model gives (column j key j, keys n.. zero)."""
    rng = np.random.default_rng(n * 7 + d)
    x = rng.integers(0, 1 << 16, size=(n, d), dtype=np.uint16)
    if is_f16:   # finite f16 patterns (subnormals included): a NaN's widened payload is the converter's
        x[~np.isfinite(x.view(np.float16))] = 0x3c00
        wide = x.view(np.float16).astype(np.float32)
    else:
        wide = (x.astype(np.uint32) << 16).view(np.float32)
    storage, widened = core()._test_pairs_from_storage(np.ascontiguousarray(x), "kt", is_f16)
    model = np.zeros((d, 128), np.uint32)
    model[:, :n] = wide.view(np.uint32).T
    assert np.array_equal(storage, model)
    assert np.array_equal(widened, model)
