"""f16 on the AMX-BF16 tiles (fuel_cy/_core/fc_f16_tiles.h): with round_p, the mixed f16 flash
splits every f16 value into two bf16 terms, hi = bf16(x) and lo = bf16(x - hi), which the mixed
contract states are exact, and runs its products on the tiles; inputs holding an infinity or a NaN
(which have no such split) keep the float32 loops.  The backwards with round_p run their five
products from the same split words.  The split is checked on every f16 value, the route by the
emulated tile form's instruction count, which runs on every AVX512-BF16 CPU."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import fuel_cy
import reference_impl as ref
from inputs import attention_inputs
from measures import bits
from conftest import each_bf16_score_form
from test_round_p import _backward_call

from fuel_cy.runtime.cpu import core


def _terms(words: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    hi = (words & 0xFFFF).astype(np.uint16)
    lo = (words >> 16).astype(np.uint16)
    return hi, lo


def _bf16(b: np.ndarray) -> np.ndarray:
    return b.view(ml_dtypes.bfloat16).astype(np.float64)


@pytest.mark.parametrize("n", [65536, 37])
def test_every_finite_f16_splits_exactly_into_two_bf16_terms(n):
    """hi is x rounded to bf16 (nearest even), lo = x - hi exactly, and lo is zero or a normal bf16
    (the tiles read subnormal bf16 as zero); Q's row holds the words twice."""
    x = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    x = x[(x & 0x7C00) != 0x7C00][:n]
    words = core()._test_f16_split_q(x)
    assert words.shape == (2 * x.size,)
    assert np.array_equal(words[: x.size], words[x.size:])
    hi, lo = _terms(words[: x.size])
    xv = x.view(np.float16).astype(np.float64)
    assert np.array_equal(_bf16(hi), x.view(np.float16).astype(ml_dtypes.bfloat16).astype(np.float64))
    assert np.array_equal(_bf16(hi) + _bf16(lo), xv)
    assert np.all(((lo & 0x7F80) != 0) | ((lo & 0x7FFF) == 0))


def _emulated_dps(fn):
    """fn() on the emulated tile form, and how many tdpbf16ps it ran."""
    c = core()
    chosen = c._test_bf16_score_form()
    try:
        c._test_bf16_score_form("amx-emulated")
        c._test_amx_emulation_dps()
        out = fn()
        assert c._test_amx_emulation_faults() == 0
        return out, c._test_amx_emulation_dps()
    finally:
        c._test_bf16_score_form(chosen)


def _split_off(fn):
    """_emulated_dps(fn) with the f16 split switched off (the float32 loops), then on again."""
    c = core()
    try:
        c._test_f16_split(False)
        return _emulated_dps(fn)
    finally:
        c._test_f16_split(True)


needs_tiles = pytest.mark.skipif(not core()._TEST_HAVE_DPBF16,
                                 reason="this CPU level has no bf16 tile form (the f16 flash takes the float32 loops)")


def _f16_call(name, q, k, v):
    """round_p -> the kernel's [1, H, S, D] output, causal (one square sequence for varlen, whose
    bottom-right alignment is then top-left)."""
    if name == "attention_flash_mixed":
        return lambda rp: fuel_cy.attention_flash_mixed(q, k, v, causal=True, round_p=rp)
    if name == "attention_masked":
        return lambda rp: fuel_cy.attention_masked(q, k, v, None, None, causal=True, round_p=rp)
    qp, kp, vp = (np.ascontiguousarray(x[0].transpose(1, 0, 2)) for x in (q, k, v))
    cu = np.array([0, q.shape[2]], np.int32)
    return lambda rp: fuel_cy.attention_varlen(qp, kp, vp, cu, cu, causal=True, round_p=rp).transpose(1, 0, 2)[None]


@needs_tiles
@pytest.mark.parametrize("name", ["attention_flash_mixed", "attention_masked", "attention_varlen"])
def test_the_f16_flash_with_round_p_runs_on_the_tiles(name):
    q, k, v, _ = attention_inputs(1, 2, 1, 150, 150, 40, np.float16, False, seed=11)
    call = _f16_call(name, q, k, v)
    got, dps = _emulated_dps(lambda: call(True))
    assert dps > 0
    # the exact-P mode keeps the float32 loops: P's float32 weights have no two-term split
    _, dps_exact = _emulated_dps(lambda: call(False))
    assert dps_exact == 0
    want = ref.forward(q, k, v, scale=1 / np.sqrt(40), causal=True, round_to=np.float16)
    assert np.max(np.abs(got.astype(np.float64) - want)) <= 2.0 ** -9


@needs_tiles
@pytest.mark.parametrize("name", ["attention_flash_mixed", "attention_varlen"])
@pytest.mark.parametrize("where", ["q", "k", "v"])
@pytest.mark.parametrize("value", [np.inf, -np.inf, np.nan], ids=["inf", "-inf", "nan"])
def test_f16_inputs_holding_an_infinity_or_a_nan_keep_the_float32_loops(name, where, value):
    """inf - inf is NaN, so such an input has no two-term split: the call takes the float32 loops,
    whose bits the vdpbf16ps form's (the same loops for f16) give, and an infinity in V reaches
    the output as the float64 reference's does."""
    q, k, v, _ = attention_inputs(1, 2, 2, 70, 70, 32, np.float16, False, seed=12)
    arrays = {"q": q.copy(), "k": k.copy(), "v": v.copy()}
    arrays[where][0, 1, 5, 3] = value
    call = lambda: _f16_call(name, arrays["q"], arrays["k"], arrays["v"])(True)
    got, dps = _emulated_dps(call)
    assert dps == 0
    c = core()
    chosen = c._test_bf16_score_form()
    try:
        c._test_bf16_score_form("vdpbf16ps")
        loops = call()
    finally:
        c._test_bf16_score_form(chosen)
    assert bits(got) == bits(loops)
    if where == "v" and value == np.inf:
        # causal: the rows from key 5 on attend it (the rows before it multiply it by a weight of
        # 0 in a shared tile, NaN, as the contract states); the other columns never see it
        assert np.all(np.isposinf(got[0, 1, 5:, 3].astype(np.float64)))
        assert np.all(np.isfinite(np.delete(got[0, 1], 3, axis=-1).astype(np.float64)))


@needs_tiles
@pytest.mark.parametrize("name", ["attention_flash_mixed", "attention_varlen"])
def test_f16_tile_bits_do_not_depend_on_threads(name):
    q, k, v, _ = attention_inputs(1, 4, 2, 260, 260, 72, np.float16, False, seed=13)
    call = _f16_call(name, q, k, v)
    for form in each_bf16_score_form():
        if form == "vdpbf16ps":
            continue
        try:
            fuel_cy.set_num_threads(1)
            one = bits(call(True))
            fuel_cy.set_num_threads(2)
            two = bits(call(True))
        finally:
            fuel_cy.set_num_threads(0)
        assert one == two, form


def _one_bad_sequence(call, good, bad, n0):
    """call(keys) -> a tuple of row-major results; the first n0 rows belong to the sequence that
    `bad` spoils: those rows take the float32 loops' bits, the rest the tiles' bits of `good`."""
    got, dps = _emulated_dps(lambda: call(bad))
    assert dps > 0
    clean, _ = _emulated_dps(lambda: call(good))
    loops, loop_dps = _split_off(lambda: call(bad))
    loops_clean, _ = _split_off(lambda: call(good))
    assert loop_dps == 0
    head, tail = (lambda r: tuple(x[:n0] for x in r)), (lambda r: tuple(x[n0:] for x in r))
    assert bits(head(got)) == bits(head(loops))
    assert bits(tail(got)) == bits(tail(clean))
    assert bits(tail(clean)) != bits(tail(loops_clean))   # (so the tiles' bits are not the loops')


@needs_tiles
def test_a_nan_in_one_varlen_sequence_leaves_the_others_on_the_tiles():
    """attention_varlen checks each sequence's keys and values as it gathers them: the sequence
    holding the NaN gets the float32 loops' bits, the other the tiles' bits it gets without it."""
    rng = np.random.default_rng(14)
    cu = np.array([0, 100, 220], np.int32)
    q, k, v = (rng.standard_normal((220, 2, 32)).astype(np.float16) for _ in range(3))
    bad = k.copy()
    bad[7, 0, 3] = np.nan
    _one_bad_sequence(lambda kk: (fuel_cy.attention_varlen(q, kk, v, cu, cu, causal=True),), k, bad, 100)

# ---- the f16 backward with round_p: its five products from the same split words ------------------

BACKWARDS = ["attention_flash_backward_mixed", "attention_masked_backward", "attention_varlen_backward"]


@needs_tiles
@pytest.mark.parametrize("rows_per_step", [32, 64])
@pytest.mark.parametrize("name", BACKWARDS)
def test_the_f16_backward_with_round_p_runs_all_five_products_on_the_tiles(name, rows_per_step):
    """With every dimension a whole number of tiles, each of S = Q K^T, dP = dO V^T, dQ = dS K,
    dV = P^T dO and dK = dS^T Q runs two tdpbf16ps per 16 x 16 x 16 block (a value's two terms
    against the other's one term, then its other), so 10 per block of the (query, key, dim) grid
    and head, at both step heights the CPUs use; the exact-P mode keeps the float32 loops; the
    gradients are the rounded float64 reference's to f16's accuracy."""
    hq, s, d = 2, 128, 32
    q, k, v, do, _ = attention_inputs(1, hq, 1, s, s, d, np.float16, False, seed=21, with_do=True)
    c = core()
    saved = c._test_bwd_rows()
    try:
        c._test_bwd_rows(rows_per_step)
        got, dps = _emulated_dps(lambda: _backward_call(name, q, k, v, do, False, round_p=True))
        _, dps_exact = _emulated_dps(lambda: _backward_call(name, q, k, v, do, False, round_p=False))
    finally:
        c._test_bwd_rows(saved)
    assert dps == 10 * hq * (s // 16) * (s // 16) * (d // 16)
    assert dps_exact == 0
    want = ref.backward(q, k, v, do, scale=1 / np.sqrt(d), round_to=np.float16)
    for g, w in zip(got, want):
        assert np.max(np.abs(g.astype(np.float64) - w)) <= 2.0 ** -9 * max(1.0, float(np.abs(w).max()))


@needs_tiles
@pytest.mark.parametrize("name", ["attention_flash_backward_mixed", "attention_varlen_backward"])
@pytest.mark.parametrize("where", ["q", "k", "v", "do"])
@pytest.mark.parametrize("value", [np.inf, np.nan], ids=["inf", "nan"])
def test_f16_backward_inputs_holding_an_infinity_or_a_nan_keep_the_float32_loops(name, where, value):
    """As the forward: such a call runs no tile product and gives the float32 loops' bits."""
    q, k, v, do, _ = attention_inputs(1, 2, 1, 70, 70, 32, np.float16, False, seed=22, with_do=True)
    arrays = {"q": q.copy(), "k": k.copy(), "v": v.copy(), "do": do.copy()}
    arrays[where][0, 0, 5, 3] = value
    call = lambda: _backward_call(name, arrays["q"], arrays["k"], arrays["v"], arrays["do"], True, round_p=True)
    got, dps = _emulated_dps(call)
    assert dps == 0
    loops, _ = _split_off(call)
    assert bits(tuple(got)) == bits(tuple(loops))


@needs_tiles
def test_an_f16_step_whose_ds_overflows_keeps_the_float32_loops_for_dq_and_dk():
    """dS rounded to f16 can overflow to an infinity (large dO and V), which has no split: that
    step's dQ and dK take the float32 loops (dV, from P in [0, 1], stays on the tiles), so the
    infinities and NaNs land where the float32 loops put them and every finite gradient is theirs
    to the order of the sums."""
    q, k, v, do, _ = attention_inputs(1, 2, 1, 96, 96, 32, np.float16, False, seed=23, with_do=True)
    v = (v.astype(np.float32) * 300).astype(np.float16)
    do = (do.astype(np.float32) * 200).astype(np.float16)
    call = lambda: fuel_cy.attention_flash_backward_mixed(q, k, v, do, round_p=True)
    got, dps = _emulated_dps(call)
    loops, _ = _split_off(call)
    assert dps > 0
    dq, dk = (g.astype(np.float64) for g in got[:2])
    assert not np.all(np.isfinite(dq)) and not np.all(np.isfinite(dk))   # (the case is hit)
    for g, w in zip(got, loops):
        g, w = g.astype(np.float64), w.astype(np.float64)
        assert np.array_equal(np.isnan(g), np.isnan(w)) and np.array_equal(np.isinf(g), np.isinf(w))
        fin = np.isfinite(w)
        assert np.array_equal(np.sign(g[np.isinf(g)]), np.sign(w[np.isinf(w)]))
        assert np.max(np.abs(g[fin] - w[fin]), initial=0) <= 2.0 ** -8 * float(np.abs(w[fin]).max())


@needs_tiles
@pytest.mark.parametrize("name", ["attention_flash_backward_mixed", "attention_varlen_backward"])
def test_f16_backward_tile_bits_do_not_depend_on_threads(name):
    q, k, v, do, _ = attention_inputs(1, 4, 2, 200, 200, 48, np.float16, False, seed=24, with_do=True)
    for form in each_bf16_score_form():
        if form == "vdpbf16ps":
            continue
        try:
            fuel_cy.set_num_threads(1)
            one = bits(tuple(_backward_call(name, q, k, v, do, True, round_p=True)))
            fuel_cy.set_num_threads(2)
            two = bits(tuple(_backward_call(name, q, k, v, do, True, round_p=True)))
        finally:
            fuel_cy.set_num_threads(0)
        assert one == two, form


@needs_tiles
def test_a_nan_in_one_varlen_sequence_leaves_the_others_backward_on_the_tiles():
    """attention_varlen_backward checks each sequence's gathered q, k, v and dO: the sequence
    holding the NaN gets the float32 loops' gradients, the other the tiles' it gets without it."""
    rng = np.random.default_rng(25)
    cu = np.array([0, 100, 220], np.int32)
    q, k, v, do = (rng.standard_normal((220, 2, 32)).astype(np.float16) for _ in range(4))
    bad = k.copy()
    bad[7, 0, 3] = np.nan
    _one_bad_sequence(lambda kk: tuple(fuel_cy.attention_varlen_backward(q, kk, v, do, cu, cu, causal=True)),
                      k, bad, 100)
