"""fuel_cy's mixed-precision kernels (contracts/fuel-cy-mixed.md): bf16/f16 in, float32 math, each
output rounded once to T.  Checked against the suite's own float64 reference on the same
(T-valued) inputs, and bit for bit against the contract's identity: the float32 kernel on the
exactly widened inputs, rounded to T."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import fuel_cy
import reference_impl as ref
from inputs import attention_inputs
from measures import bits as _bits
from measures import rel as _rel
from measures import near_in_another_f32_order, peak_bytes_in_fresh_thread
from conftest import each_bf16_score_form

from fuel_cy.runtime.cpu import core

HALF = [("BF16", ml_dtypes.bfloat16, 1e-2), ("F16", np.float16, 2e-3)]
IDS = [h[0] for h in HALF]

# (b, hq, hkv, sq, sk, d, params, alibi): odd head dims, Sq != Sk, windows, softcap, ALiBi, k_len,
# a tile edge (Sk > 128) and rows with no admissible key
CASES = [
    ("plain", 1, 2, 2, 64, 64, 64, {}, False),
    ("odd-59 gqa", 2, 6, 2, 33, 70, 59, {"causal": True}, False),
    ("ragged 113x203 d111", 1, 2, 1, 113, 203, 111, {}, True),
    ("window+softcap", 1, 4, 2, 50, 150, 32, {"window_size_left": 17, "window_size_right": 3, "softcap": 6.0}, True),
    ("k_len", 1, 2, 2, 40, 140, 16, {"k_len": 129, "causal": True}, False),
    ("fully masked rows", 1, 2, 1, 20, 30, 8, {"window_size_left": 0, "window_size_right": 0, "k_len": 10}, False),
]


def _f32(*xs):
    return [None if x is None else np.asarray(x, np.float32) for x in xs]


@pytest.mark.parametrize("code,dtype,bound", HALF, ids=IDS)
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_flash_mixed_matches_float64_reference_and_the_rounded_f32_kernel(case, code, dtype, bound):
    _, b, hq, hkv, sq, sk, d, params, alibi = case
    q, k, v, slopes = attention_inputs(b, hq, hkv, sq, sk, d, dtype, alibi, seed=3)
    out = fuel_cy.attention_flash_mixed(q, k, v, slopes, **params)
    assert out.dtype == dtype and out.shape == q.shape
    expected = ref.forward(q, k, v, slopes, causal=params.get("causal", False), left=params.get("window_size_left"),
                           right=params.get("window_size_right"), softcap=params.get("softcap"), k_len=params.get("k_len"))
    assert _rel(out, expected) <= bound
    # the contract's identity: float32 math on the widened inputs, rounded once to T.  Where bf16
    # scores come from vdpbf16ps, or scores and P.V from AMX tiles (float32 sums in another order,
    # pinned bit for bit in tests/test_bf16_scores.py), the result may sit one bf16 ulp away, more
    # where P.V cancels to far below max |v| (seen on a Sapphire Rapids: 3 ulps at 8e-7).
    f32 = fuel_cy.attention_flash(*_f32(q, k, v, slopes), **params)
    if code == "BF16" and core()._TEST_HAVE_DPBF16:
        assert near_in_another_f32_order(out, f32, sk + d, float(np.max(np.abs(np.asarray(v, np.float32)))))
    else:
        assert _bits(out) == _bits(f32.astype(dtype))


def _fold(lanes):
    """fc_hsum_f32's order: halves added (lane l + lane l + W/2, ...) until one lane is left."""
    while lanes.shape[-1] > 1:
        h = lanes.shape[-1] // 2
        lanes = (lanes[..., :h] + lanes[..., h:]).astype(np.float32)
    return lanes[..., 0]


def _paged_dots_emulated(q, k, lanes_n):
    """The paged decode's dots as its loops define them, in numpy float32 (every product of two
    T values is exact in float32, so a fused multiply-add is an add of the exact product): lane l
    sums d = l, l + W, ... in order, then the lanes fold."""
    lanes = np.zeros((q.shape[0], k.shape[0], lanes_n), np.float32)
    for e in range(q.shape[1]):
        lane = e % lanes_n
        lanes[:, :, lane] = (lanes[:, :, lane] + np.outer(q[:, e], k[:, e]).astype(np.float32)).astype(np.float32)
    return _fold(lanes)


@pytest.mark.parametrize("code,dtype,bound", HALF, ids=IDS)
@pytest.mark.parametrize("rows,keys,d", [(4, 13, 128), (8, 8, 64), (4, 3, 32), (3, 9, 40), (4, 5, 7)])
def test_paged_mixed_dots_are_the_lane_sums_their_loops_define(code, dtype, bound, rows, keys, d):
    """The decode's dots from a bf16/f16 pool, bit for bit: per-lane float32 sums folded in
    fc_hsum's order, whether four keys x four rows share one shuffle tree or a key is left over
    (so no grouping, and no thread count, changes a score); the same sums as the float32 kernel's."""
    rng = np.random.default_rng(rows * keys + d)
    q = rng.standard_normal((rows, d)).astype(dtype)
    k = rng.standard_normal((keys, d)).astype(dtype)
    s, lanes_n = core()._test_paged_dots_h16(q.astype(np.float32), k.view(np.uint16), code == "F16")
    assert _bits(s) == _bits(_paged_dots_emulated(q.astype(np.float32), k.astype(np.float32), lanes_n))
    assert _rel(s, q.astype(np.float64) @ k.astype(np.float64).T) < 1e-5


@pytest.mark.parametrize("code,dtype,bound", HALF, ids=IDS)
@pytest.mark.parametrize("case", CASES[:4], ids=[c[0] for c in CASES[:4]])
def test_backward_mixed_matches_float64_reference_and_the_rounded_f32_kernel(case, code, dtype, bound):
    _, b, hq, hkv, sq, sk, d, params, alibi = case
    params = {key: val for key, val in params.items() if key != "k_len"}
    q, k, v, do, slopes = attention_inputs(b, hq, hkv, sq, sk, d, dtype, alibi, seed=4, with_do=True)
    grads = fuel_cy.attention_flash_backward_mixed(q, k, v, do, slopes, **params)
    expected = ref.backward(q, k, v, do, slopes, causal=params.get("causal", False), left=params.get("window_size_left"),
                            right=params.get("window_size_right"), softcap=params.get("softcap"))
    for got, exp, like in zip(grads, expected, (q, k, v)):
        assert got.dtype == dtype and got.shape == like.shape
        assert _rel(got, exp) <= bound
    f32 = fuel_cy.attention_flash_backward(*_f32(q, k, v, do, slopes), **params)
    if code == "BF16" and core()._TEST_HAVE_DPBF16:
        # S and dP by vdpbf16ps (float32 sums in another order): within one bf16 ulp of each
        # gradient's largest element of the float32 kernel's result (dS = P (dP - delta) cancels,
        # so small elements may move further than their own ulp)
        for got, ref32 in zip(grads, f32):
            assert np.max(np.abs(np.asarray(got, np.float64) - ref32)) <= 2.0 ** -7 * np.max(np.abs(ref32))
    else:
        assert _bits(grads) == _bits(tuple(g.astype(dtype) for g in f32))


# the forward's lse: float32 rounding of scores the size of these (|s| < ~40), and +inf exactly
LSE_ABS = 2e-4


def _ref_kw(params):
    return dict(causal=params.get("causal", False), left=params.get("window_size_left"),
                right=params.get("window_size_right"), softcap=params.get("softcap"))


@pytest.mark.parametrize("code,dtype,bound", HALF, ids=IDS)
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_flash_mixed_returns_the_float64_lse_and_the_same_out(case, code, dtype, bound):
    """return_lse: lse [B, Hq, Sq] float32 is each row's log-sum-exp of its admissible scores
    (softcap, ALiBi in the founding form, windows, k_len), +inf for a row with none, in both
    round_p modes and every form of the bf16 products; the output keeps its bits."""
    _, b, hq, hkv, sq, sk, d, params, alibi = case
    q, k, v, slopes = attention_inputs(b, hq, hkv, sq, sk, d, dtype, alibi, seed=3)
    want = ref.lse(q, k, slopes, k_len=params.get("k_len"), **_ref_kw(params))
    for form in (each_bf16_score_form() if code == "BF16" else [None]):
        for rp in (False, True):
            out, lse = fuel_cy.attention_flash_mixed(q, k, v, slopes, round_p=rp, return_lse=True, **params)
            assert lse.dtype == np.float32 and lse.shape == (b, hq, sq) and lse.flags.c_contiguous
            assert _bits(out) == _bits(fuel_cy.attention_flash_mixed(q, k, v, slopes, round_p=rp, **params))
            assert np.array_equal(np.isinf(lse), np.isinf(want)) and np.all(lse[np.isinf(lse)] > 0), (form, rp)
            finite = np.isfinite(want)
            assert np.max(np.abs(lse[finite] - want[finite]), initial=0.0) <= LSE_ABS, (form, rp)


def test_flash_mixed_lse_of_a_decode_step_reads_k_and_v_in_place():
    """A decode step (Sq = 1, K and V read in their 16-bit storage) returns its lse too."""
    for dtype in (ml_dtypes.bfloat16, np.float16):
        q, k, v, slopes = attention_inputs(3, 8, 2, 1, 300, 64, dtype, True, seed=8)
        out, lse = fuel_cy.attention_flash_mixed(q, k, v, slopes, return_lse=True)
        assert _bits(out) == _bits(fuel_cy.attention_flash_mixed(q, k, v, slopes))
        assert np.max(np.abs(lse - ref.lse(q, k, slopes))) <= LSE_ABS


# the backward's cases: no k_len (the backward takes the sliced keys), and rows no key admits
SAVED_CASES = [c for c in CASES[:4]] + [("masked rows", 1, 2, 1, 40, 30, 8,
                                          {"window_size_left": 0, "window_size_right": 0}, False)]


@pytest.mark.parametrize("code,dtype,bound", HALF, ids=IDS)
@pytest.mark.parametrize("case", SAVED_CASES, ids=[c[0] for c in SAVED_CASES])
def test_backward_mixed_given_the_forwards_out_and_lse_matches_float64(case, code, dtype, bound):
    """Given attention_flash_mixed's out and lse (return_lse=True, same round_p): key tiles outer
    where the contract says, the same float64 bound as the recomputing backward in every form of
    the bf16 products, with and without dlse; a row no key admits gets a zero dq row; no input
    is modified."""
    _, b, hq, hkv, sq, sk, d, params, alibi = case
    q, k, v, do, slopes = attention_inputs(b, hq, hkv, sq, sk, d, dtype, alibi, seed=4, with_do=True)
    dlse = np.random.default_rng(2).standard_normal((b, hq, 1)).astype(np.float32)
    for form in (each_bf16_score_form() if code == "BF16" else [None]):
        for rp in (False, True):
            out, lse = fuel_cy.attention_flash_mixed(q, k, v, slopes, round_p=rp, return_lse=True, **params)
            inputs = [x for x in (q, k, v, do, slopes, out, lse, dlse) if x is not None]
            before = [_bits(x) for x in inputs]
            for g_lse in (None, dlse):
                got = fuel_cy.attention_flash_backward_mixed(q, k, v, do, slopes, dlse=g_lse, out=out, lse=lse,
                                                             round_p=rp, **params)
                want = ref.backward(q, k, v, do, slopes, round_to=dtype if rp else None, dlse=g_lse,
                                    **_ref_kw(params))
                for name, g, w, like in zip(("dq", "dk", "dv"), got, want, (q, k, v)):
                    assert g.dtype == dtype and g.shape == like.shape
                    assert _rel(g, w) <= bound, (form, rp, g_lse is not None, name)
                if case[0] == "masked rows":   # rows 30..39 see no key
                    assert not np.any(np.asarray(got[0][:, :, 30:], np.float64))
            assert [_bits(x) for x in inputs] == before


def test_backward_mixed_given_out_and_lse_runs_its_own_order_at_every_thread_count():
    """bf16 given the forward's statistics runs key tiles outer in every form of its products
    and both round_p modes: the same bits at 1 and 2 threads, and not the recomputing order's
    (dQ summed over three key tiles in another order)."""
    q, k, v, do, slopes = attention_inputs(1, 4, 2, 96, 300, 64, ml_dtypes.bfloat16, True, seed=12, with_do=True)
    for form in each_bf16_score_form():
        for rp in (True, False):
            out, lse = fuel_cy.attention_flash_mixed(q, k, v, slopes, round_p=rp, return_lse=True)
            runs = []
            try:
                for threads in (1, 2):
                    fuel_cy.set_num_threads(threads)
                    runs.append(fuel_cy.attention_flash_backward_mixed(q, k, v, do, slopes, out=out, lse=lse,
                                                                       round_p=rp))
            finally:
                fuel_cy.set_num_threads(0)
            recomputed = fuel_cy.attention_flash_backward_mixed(q, k, v, do, slopes, round_p=rp)
            assert _bits(runs[0]) == _bits(runs[1]), (form, rp)
            assert any(_bits(a) != _bits(r) for a, r in zip(runs[0], recomputed)), (form, rp)


def test_backward_mixed_refuses_out_without_lse_and_a_wrong_lse():
    q, k, v, do, _ = attention_inputs(1, 4, 2, 16, 16, 8, np.float16, False, seed=1, with_do=True)
    out, lse = fuel_cy.attention_flash_mixed(q, k, v, return_lse=True)
    with pytest.raises(fuel_cy.InputError) as e:
        fuel_cy.attention_flash_backward_mixed(q, k, v, do, out=out)
    assert "attention_flash_backward_mixed" in str(e.value) and "both or neither" in str(e.value)
    with pytest.raises(fuel_cy.InputError) as e:
        fuel_cy.attention_flash_backward_mixed(q, k, v, do, out=out, lse=lse[:, :3])
    assert "attention_flash_backward_mixed: input 'lse'" in str(e.value)
    with pytest.raises(fuel_cy.InputError):
        fuel_cy.attention_flash_backward_mixed(q, k, v, do, out=out.astype(np.float32), lse=lse)


def _paged_problem(dtype, seed=5, b=3, hq=8, hkv=2, sq=1, d=40, bs=16, nblocks=40, lens=(200, 1, 77), alibi=True):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((b, hq, sq, d)).astype(dtype)
    kc = rng.standard_normal((nblocks, bs, hkv, d)).astype(dtype)
    vc = rng.standard_normal((nblocks, bs, hkv, d)).astype(dtype)
    table = rng.permutation(nblocks)[: b * 13].reshape(b, 13).astype(np.uint32)
    slopes = (rng.random(hq) * 0.3).astype(dtype) if alibi else None
    return q, kc, vc, table, np.array(lens, np.uint32), slopes


@pytest.mark.parametrize("code,dtype,bound", HALF, ids=IDS)
@pytest.mark.parametrize("sq,softcap,d", [(1, None, 40), (3, 5.0, 40), (1, None, 64), (4, 5.0, 128)])
def test_paged_mixed_matches_float64_reference_and_the_rounded_f32_kernel(code, dtype, bound, sq, softcap, d):
    q, kc, vc, table, lens, slopes = _paged_problem(dtype, sq=sq, d=d)
    out = fuel_cy.attention_paged_mixed(q, kc, vc, table, lens, slopes, softcap=softcap)
    assert out.dtype == dtype
    assert _rel(out, ref.paged(q, kc, vc, table, lens, slopes, softcap=softcap)) <= bound
    f32 = fuel_cy.attention_paged_naive(*_f32(q, kc, vc), table, lens, *_f32(slopes), softcap=softcap)
    assert _bits(out) == _bits(f32.astype(dtype))


def test_mixed_is_more_accurate_than_math_in_t():
    """The point of the second contract: one rounding instead of one per step."""
    q, k, v, _ = attention_inputs(1, 4, 2, 64, 300, 64, ml_dtypes.bfloat16, False, seed=9)
    expected = ref.forward(q, k, v)
    mixed = _rel(fuel_cy.attention_flash_mixed(q, k, v), expected)
    in_t = _rel(fuel_cy.attention_flash(q, k, v), expected)
    assert mixed < in_t / 2, (mixed, in_t)


def test_rounding_to_t_is_to_nearest_even_including_specials():
    """Outputs are rounded, not truncated: values of the float32 result that lie between two bf16
    values go to the nearest one (a truncating narrow would fail half of these)."""
    q, k, v, _ = attention_inputs(1, 2, 2, 16, 48, 16, ml_dtypes.bfloat16, False, seed=11)
    out = fuel_cy.attention_flash_mixed(q, k, v)
    f32 = fuel_cy.attention_flash(*_f32(q, k, v))
    truncated = (f32.view(np.uint32) >> 16).astype(np.uint16)
    assert np.any(out.view(np.uint16) != truncated)
    assert np.array_equal(out.view(np.uint16), f32.astype(ml_dtypes.bfloat16).view(np.uint16))
    nan = q.copy()
    nan[0, 0, 3, 0] = np.nan
    assert np.isnan(np.asarray(fuel_cy.attention_flash_mixed(nan, k, v)[0, 0, 3], np.float32)).all()


@pytest.mark.parametrize("threads", [1, 2])
def test_mixed_kernels_are_deterministic_across_thread_counts(threads):
    q, k, v, do, slopes = attention_inputs(2, 8, 2, 70, 160, 48, ml_dtypes.bfloat16, True, seed=6, with_do=True)
    pq, kc, vc, table, lens, ps = _paged_problem(np.float16)
    calls = [lambda: fuel_cy.attention_flash_mixed(q, k, v, slopes, causal=True),
             lambda: fuel_cy.attention_flash_backward_mixed(q, k, v, do, slopes, softcap=4.0),
             lambda: fuel_cy.attention_paged_mixed(pq, kc, vc, table, lens, ps)]
    fuel_cy.set_num_threads(0)
    baseline = [_bits(c()) for c in calls]
    try:
        fuel_cy.set_num_threads(threads)
        assert [_bits(c()) for c in calls] == baseline
    finally:
        fuel_cy.set_num_threads(0)


def test_mixed_kernels_refuse_float32_and_mixed_types_citing_their_contract():
    x32 = np.zeros((1, 2, 4, 8), np.float32)
    with pytest.raises(fuel_cy.InputError) as e:
        fuel_cy.attention_flash_mixed(x32, x32, x32)
    assert "attention_flash_mixed: input 'q': accept.inputs[0].dtypes ['BF16', 'F16']" in str(e.value)
    assert "fuel-cy-mixed.md" in str(e.value)
    bf, h = x32.astype(ml_dtypes.bfloat16), x32.astype(np.float16)
    with pytest.raises(fuel_cy.InputError):
        fuel_cy.attention_flash_mixed(bf, h, h)


def test_paged_mixed_bounds_checks_block_ids_before_the_core():
    q, kc, vc, table, lens, _ = _paged_problem(ml_dtypes.bfloat16, alibi=False)
    table[0, 0] = 40  # == num_blocks
    with pytest.raises(fuel_cy.InputError) as e:
        fuel_cy.attention_paged_mixed(q, kc, vc, table, lens)
    assert "block_table[0, 0] = 40 but num_blocks = 40" in str(e.value)


def test_dispatch_routes_the_mixed_fused_ops():
    q, k, v, _ = attention_inputs(1, 2, 1, 8, 8, 8, np.float16, False, seed=1)
    out, plan = fuel_cy.dispatch(40, q, k, v, causal=True, return_plan=True)
    assert plan.kernel == "attention_flash_mixed" and plan.fused_op == "FLASH_ATTN_MIXED"
    assert np.array_equal(out.view(np.uint16), fuel_cy.attention_flash_mixed(q, k, v, causal=True).view(np.uint16))
    with pytest.raises(fuel_cy.InputError):
        fuel_cy.dispatch("FLASH_ATTN_MIXED", q.astype(np.float32), k, v)


def test_paged_mixed_reads_a_read_only_pool_in_place():
    """Decode is bound by the pool's bytes: the bf16/f16 pool is read where it is, at two bytes an
    element, never widened or copied (a widened copy of the pool is 2x its bytes)."""
    q, kc, vc, table, lens, slopes = _paged_problem(ml_dtypes.bfloat16, b=2, hq=8, hkv=4, d=128, bs=16,
                                                    nblocks=64, lens=(500, 512))
    table = np.arange(64, dtype=np.uint32).reshape(2, 32)  # every block live
    expected = fuel_cy.attention_paged_naive(*_f32(q, kc, vc), table, lens, *_f32(slopes)).astype(ml_dtypes.bfloat16)
    for x in (kc, vc):
        x.flags.writeable = False
    out, peak = peak_bytes_in_fresh_thread(lambda: fuel_cy.attention_paged_mixed(q, kc, vc, table, lens, slopes))
    assert _bits(out) == _bits(expected)
    assert peak < kc.nbytes // 4, (peak, kc.nbytes)
    # the instrument sees a widened pool
    _, widening_peak = peak_bytes_in_fresh_thread(lambda: kc.astype(np.float32))
    assert widening_peak > 2 * kc.nbytes


def test_reused_temporaries_never_reach_a_result():
    """Half-type calls keep their float32 temporaries between calls: a later call must not change
    an earlier result, in any output of any kernel."""
    q, k, v, do, _ = attention_inputs(1, 2, 2, 40, 70, 24, ml_dtypes.bfloat16, False, seed=12, with_do=True)
    q2, k2, v2, do2, _ = attention_inputs(1, 2, 2, 40, 70, 24, ml_dtypes.bfloat16, False, seed=13, with_do=True)
    for call in (lambda *a: fuel_cy.attention_flash_mixed(*a[:3]), lambda *a: fuel_cy.attention_flash(*a[:3]),
                 fuel_cy.attention_flash_backward_mixed, fuel_cy.attention_flash_backward):
        first = call(q, k, v, do)
        kept = _bits(first)
        second = call(q2, k2, v2, do2)
        assert _bits(first) == kept
        assert _bits(second) != kept
