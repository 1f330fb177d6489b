"""bf16/f16 "math in T": conversions bit-exact vs ml_dtypes/NumPy; kernels bit-exact vs emulation."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import fuel_cy
import fuel_cy.runtime.cpu
from fuel_cy.runtime.cpu import core

import emulation
from measures import peak_bytes_in_fresh_thread


def _each_half_form(code):
    """Run the loop body once per form of the math-in-T GEMMs this CPU level has for the dtype, then
    restore the CPU's choice: for BF16 the vaddps form and the vdpbf16ps one, for F16 the F16C
    conversions, the binary16 loops with emulated vmulph/vaddph and, where the CPU has
    AVX512-FP16, the native ones (the CPU picks one at load time, the tests check every one); once
    where the level has a single form."""
    hooks = {"BF16": (core()._test_bf16_forms, core()._test_bf16_form),
             "F16": (core()._test_f16_forms, core()._test_f16_form)}
    list_forms, switch = hooks[code]
    forms = list_forms()
    if len(forms) < 2:
        yield None
        return
    chosen = switch()
    try:
        for form in forms:
            assert switch(form) == form
            yield form
    finally:
        switch(chosen)


def _interesting_floats():
    rng = np.random.default_rng(0)
    bits = [rng.integers(0, 2**32, size=400_000, dtype=np.uint64).astype(np.uint32)]
    # every half value, and its float32 neighbours (ties and near-ties of both rounding modes)
    for half_bits, shift in ((np.arange(2**16, dtype=np.uint32), 16),):
        f = (half_bits << shift).astype(np.uint32)
        bits += [f, f + 1, f - 1, f + 0x8000, f + 0x7FFF, f + 0x8001]
    h = np.arange(2**16, dtype=np.uint16).view(np.float16).astype(np.float32).view(np.uint32)
    bits += [h, h + 1, h - 1, h + 0x1000, h + 0xFFF, h + 0x1001, h + 0x2000]
    out = np.concatenate(bits).view(np.float32)
    return out[~np.isnan(out)]


@pytest.mark.parametrize("code,target", [("BF16", ml_dtypes.bfloat16), ("F16", np.float16)])
def test_core_rounding_is_bitwise_ml_dtypes(code, target):
    x = _interesting_floats()
    ours = core()._test_round(x, code)
    with np.errstate(over="ignore"):
        theirs = x.astype(target).astype(np.float32)
    assert np.array_equal(ours.view(np.uint32), theirs.view(np.uint32))


def _bits(a):
    return np.asarray(a, np.float32).view(np.uint32)


@pytest.mark.parametrize("which,target", [("bf16-int", ml_dtypes.bfloat16), ("f16", np.float16),
                                          ("bf16-cvt-checked", ml_dtypes.bfloat16),
                                          ("bf16-cvt-checked-scalar", ml_dtypes.bfloat16)])
def test_vector_rounding_is_bitwise_ml_dtypes(which, target):
    """The rounding inside the half-type GEMMs and row passes (fc_half.h), NaN payloads included;
    the checked instruction forms on f32 subnormals too (they fall back to the integer rounding)."""
    x = np.concatenate([_interesting_floats(), np.array([np.nan, -np.nan], np.float32),
                        np.array([0x7FC12345, 0xFF812345, 0x7F800001], np.uint32).view(np.float32)])
    ours = core()._test_round_vec(x, which)
    if ours is None:
        pytest.skip(f"{which} needs AVX512-BF16, which this CPU level ({core().__name__}) has not")
    assert ((np.abs(x) < 2.0**-126) & (x != 0)).sum() > 1000  # subnormals are among the inputs
    with np.errstate(over="ignore", invalid="ignore"):
        theirs = x.astype(target).astype(np.float32)
    finite = ~np.isnan(x)
    assert np.array_equal(_bits(ours)[finite], _bits(theirs)[finite])
    assert np.array_equal(_bits(ours)[~finite], _bits(core()._test_round(x[~finite], "BF16" if "bf16" in which else "F16")))


@pytest.mark.parametrize("which", ["bf16-cvt", "bf16-cvt-pair"])
def test_bf16_instruction_rounding_differs_only_on_f32_subnormals(which):
    """vcvtneps2bf16 flushes f32 subnormals; everywhere else it is ml_dtypes' rounding.  The
    kernels use it only where the operands' exponents prove no subnormal can arise (next test)."""
    x = _interesting_floats()
    ours = core()._test_round_vec(x, which)
    if ours is None:  # a level without AVX512-BF16: the GEMMs use the integer rounding only
        assert "avx512_bf16" not in fuel_cy.build_info()["levels"][fuel_cy.runtime.cpu.capability()]["features"]
        return
    theirs = x.astype(ml_dtypes.bfloat16).astype(np.float32)
    sub = (np.abs(x) < np.float32(2.0**-126)) & (x != 0)
    assert sub.sum() > 1000
    assert np.array_equal(_bits(ours)[~sub], _bits(theirs)[~sub])
    assert not np.array_equal(_bits(ours)[sub], _bits(theirs)[sub])


def test_the_forwards_pairing_gives_vdpbf16ps_the_exactly_rounded_weights():
    """The mixed forward's round_p on vdpbf16ps leaves its weights unrounded and lets the pairing
    round them (fc_bf16_pair_exact, then vcvtne2ps2bf16, which reads f32 subnormals as zero).  What
    vdpbf16ps then reads must be the exactly rounded weight as it reads that (a bf16 subnormal as
    zero): for every non-negative weight, every f32 subnormal among them, and the edge where the
    exact rounding carries a subnormal up to 2^-126."""
    x = _interesting_floats()
    edge = np.arange(0x007F0000, 0x00800800, dtype=np.uint32).view(np.float32)   # around 2^-126
    x = np.concatenate([x[x >= 0], edge, np.float32([0, 2.0**-126, 1, 0.5])])
    ours = core()._test_round_vec(x, "bf16-pair-exact")
    if ours is None:
        assert "avx512_bf16" not in fuel_cy.build_info()["levels"][fuel_cy.runtime.cpu.capability()]["features"]
        return
    exact = x.astype(ml_dtypes.bfloat16).astype(np.float32)

    def as_read(v):   # vdpbf16ps reads a bf16 subnormal as zero
        v = v.copy()
        v[(v != 0) & (np.abs(v) < np.float32(2.0**-126))] = 0
        return v

    assert ((exact == np.float32(2.0**-126)) & (x < np.float32(2.0**-126))).sum() >= 0x8000   # the carried edge
    assert np.array_equal(_bits(as_read(ours)), _bits(as_read(exact)))


@pytest.mark.parametrize("code,dtype", [("BF16", ml_dtypes.bfloat16), ("F16", np.float16)])
def test_half_inputs_widen_and_outputs_narrow_exactly(code, dtype):
    """Every half bit pattern (NaNs aside) widens to the float32 that ml_dtypes/NumPy give, and
    narrows back to itself; non-contiguous inputs are read in logical order."""
    halves = np.arange(2**16, dtype=np.uint16).view(dtype)
    wide = core()._work(halves, np.float32, code)
    with np.errstate(invalid="ignore"):
        expected = halves.astype(np.float32)
    ok = ~np.isnan(expected)
    assert np.array_equal(wide.view(np.uint32)[ok], expected.view(np.uint32)[ok])
    assert np.isnan(wide[~ok]).all()
    back = core()._from_work(wide[ok], code)
    assert back.dtype == dtype and np.array_equal(back.view(np.uint16), halves.view(np.uint16)[ok])
    strided = halves[ok][::-3][:1001].reshape(7, 11, 13)[:, ::2, 1:]
    assert np.array_equal(core()._work(strided, np.float32, code), strided.astype(np.float32).reshape(-1))


@pytest.mark.parametrize("code", ["BF16", "F16"])
def test_core_rounding_keeps_nan(code):
    x = np.array([np.nan, -np.nan, np.inf, -np.inf], np.float32)
    r = core()._test_round(x, code)
    assert np.isnan(r[:2]).all() and r[2] == np.inf and r[3] == -np.inf


def test_fast_expf_accuracy_and_edges():
    x = np.linspace(-86.4, 88.7, 2_000_001, dtype=np.float32)
    ours = core()._test_expf(x).astype(np.float64)
    exact = np.exp(x.astype(np.float64))
    ulp = np.abs(ours - exact) / np.spacing(exact.astype(np.float32)).astype(np.float64)
    assert ulp.max() <= 4.0
    # below exp(-86.5) ~ 2.6e-38 results flush to zero (documented; probabilities that small vanish)
    tiny = np.linspace(-120, -86.6, 1001, dtype=np.float32)
    assert np.all(core()._test_expf(tiny) == 0)
    edge = core()._test_expf(np.array([-np.inf, -1000, 1000, np.inf, np.nan, 0], np.float32))
    assert edge[0] == 0 and edge[1] == 0 and edge[2] == np.inf and edge[3] == np.inf
    assert np.isnan(edge[4]) and edge[5] == 1



def test_flash_f32_softmax_exp_accuracy_edges_and_sum():
    """flash f32's fused exp(scale * s - m) + sum (AVX-512 range reduction and vscalefps)."""
    x = np.linspace(-103.0, 88.7, 2_000_003, dtype=np.float32)  # odd length: the masked tail
    e = x.copy()
    core()._test_exp_scaled_sum_f32(e, 1.0, 0.0)
    exact = np.exp(x.astype(np.float64))
    ulp = np.abs(e.astype(np.float64) - exact) / np.spacing(exact.astype(np.float32)).astype(np.float64)
    if core()._TEST_HAVE_AVX512_EXP:
        assert ulp.max() <= 2.0  # gradual underflow too: subnormal results are rounded, not flushed
    else:  # levels without AVX-512 (fc_expf_v): results below ~2e-38 (x < -86.98) flush to zero
        assert ulp[x > -86.98].max() <= 2.0 and np.all(e[x < -87.0] == 0)
        assert np.all(e[(x > -86.98) & (x < -86.5)] > 0)
    s = np.array([-np.inf, -1000, 1000, np.inf, np.nan, 0, 3.0], np.float32)
    scale, m = np.float32(0.5), np.float32(1.25)
    got = s.copy()
    core()._test_exp_scaled_sum_f32(got, scale, m)
    assert got[0] == 0 and got[1] == 0 and got[2] == np.inf and got[3] == np.inf
    assert np.isnan(got[4])
    assert got[5] == np.float32(np.exp(-1.25)) and abs(got[6] / np.exp(0.5 * 3.0 - 1.25) - 1) < 2e-7
    rng = np.random.default_rng(2)
    row = rng.standard_normal(77).astype(np.float32)
    got = row.copy()
    total = core()._test_exp_scaled_sum_f32(got, np.float32(0.3), np.float32(0.1))
    assert np.allclose(got, np.exp(0.3 * row.astype(np.float64) - 0.1), rtol=3e-7, atol=0)
    assert np.isclose(total, np.exp(0.3 * row.astype(np.float64) - 0.1).sum(), rtol=1e-6)

EMU_CASES = [
    ("plain", 1, 2, 1, 5, 19, 6, {}, False),
    ("causal-alibi", 1, 2, 2, 7, 7, 5, {"causal": True}, True),
    ("softcap-window", 2, 2, 1, 6, 21, 4, {"softcap": 2.0, "window_size_left": 3, "window_size_right": 1}, True),
    ("k-len", 1, 1, 1, 4, 40, 3, {"k_len": 33, "softmax_scale": 0.7}, False),
    # two key tiles and D = 32 + 8: the vector GEMM blocks and their scalar tail
    ("wide", 1, 2, 1, 9, 150, 40, {"causal": True}, False),
    # the same without the mask: every key of both tiles enters the vector P V blocks (causal, the
    # first rows attend a few keys and the blocks' last keys only meet p = 0)
    ("wide-all-keys", 1, 2, 1, 9, 150, 40, {}, False),
]


@pytest.mark.parametrize("code,dtype", [("BF16", ml_dtypes.bfloat16), ("F16", np.float16)])
@pytest.mark.parametrize("case", EMU_CASES, ids=[c[0] for c in EMU_CASES])
def test_naive_is_bitwise_the_emulation(code, dtype, case):
    _, b, hq, hkv, sq, sk, d, params, alibi = case
    rng = np.random.default_rng(3)
    q = rng.standard_normal((b, hq, sq, d)).astype(dtype)
    k = rng.standard_normal((b, hkv, sk, d)).astype(dtype)
    v = rng.standard_normal((b, hkv, sk, d)).astype(dtype)
    slopes = (rng.random(hq)).astype(dtype) if alibi else None
    scale = params.get("softmax_scale", 1 / np.sqrt(d))
    emu = emulation.naive(code, q, k, v, slopes, float(np.float32(scale)), params.get("causal", False),
                          params.get("window_size_left"), params.get("window_size_right"),
                          params.get("softcap"), params.get("k_len"))
    for form in _each_half_form(code):
        out = fuel_cy.attention_naive(q, k, v, slopes, **params)
        assert np.array_equal(out.astype(np.float32).view(np.uint32), emu.view(np.uint32)), form


def _half_inputs(case, dtype, seed, with_do=False):
    _, b, hq, hkv, sq, sk, d, params, alibi = case
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(shape).astype(dtype)
              for shape in ((b, hq, sq, d), (b, hkv, sk, d), (b, hkv, sk, d))]
    if with_do:
        arrays.append(rng.standard_normal((b, hq, sq, d)).astype(dtype))
    slopes = (rng.random(hq)).astype(dtype) if alibi else None
    return arrays, slopes, dict(params)


def _emu_params(params, d):
    return dict(scale=float(np.float32(params.get("softmax_scale", 1 / np.sqrt(d)))),
                causal=params.get("causal", False), left=params.get("window_size_left"),
                right=params.get("window_size_right"), softcap=params.get("softcap"))


# the naive set, plus shapes that cross tiles: several 64-row query tiles and 128-key tiles, a
# left window that skips leading key tiles, k_len inside the second tile, a head ratio of 3
FLASH_EMU_CASES = EMU_CASES + [
    ("long-window-alibi", 1, 2, 1, 300, 300, 16, {"window_size_left": 30, "window_size_right": 5}, True),
    ("k-len-tile2", 1, 3, 1, 70, 300, 8, {"k_len": 200, "causal": False}, False),
    ("gqa3-causal-softcap", 1, 6, 2, 130, 140, 24, {"causal": True, "softcap": 3.0}, False),
    # the fused scale-only path of rounded tiles: causal diagonal tiles after full ones (alpha < 1),
    # D = 32 + 8 (the vector GEMM blocks and their tail)
    ("causal-long", 1, 2, 1, 200, 200, 40, {"causal": True}, False),
    # D past a chunk of the binary16 GEMMs' operands (128): S's sums reloaded mid-contraction
    ("d-gt-128", 1, 1, 1, 6, 40, 136, {}, False),
]


@pytest.mark.parametrize("code,dtype", [("BF16", ml_dtypes.bfloat16), ("F16", np.float16)])
@pytest.mark.parametrize("case", FLASH_EMU_CASES, ids=[c[0] for c in FLASH_EMU_CASES])
def test_flash_is_bitwise_the_emulation(code, dtype, case):
    """attention_flash in T: the online softmax over 128-key tiles, every step rounded to T."""
    (q, k, v), slopes, params = _half_inputs(case, dtype, seed=4)
    emu = emulation.flash(code, q, k, v, slopes, k_len=params.get("k_len"), **_emu_params(params, q.shape[3]))
    for form in _each_half_form(code):
        out = fuel_cy.attention_flash(q, k, v, slopes, **params)
        assert np.array_equal(out.astype(np.float32).view(np.uint32), emu.view(np.uint32)), form


BWD_EMU_CASES = [
    ("plain", 1, 2, 1, 5, 19, 6, {}, False),
    ("causal-alibi", 1, 2, 2, 7, 7, 5, {"causal": True}, True),
    ("softcap-window-gqa", 1, 4, 2, 20, 30, 12, {"softcap": 2.0, "window_size_left": 3, "window_size_right": 1}, True),
    # query rows beyond the first 64-row tile, keys beyond the first 128-key tile, window skipping
    # leading key tiles, a head ratio of 3
    ("long-window", 1, 3, 1, 300, 300, 8, {"window_size_left": 30, "causal": True}, True),
    ("rows-gt-64", 1, 2, 1, 130, 150, 16, {"softcap": 4.0}, False),
]


@pytest.mark.parametrize("code,dtype", [("BF16", ml_dtypes.bfloat16), ("F16", np.float16)])
@pytest.mark.parametrize("case", BWD_EMU_CASES, ids=[c[0] for c in BWD_EMU_CASES])
def test_backward_is_bitwise_the_emulation(code, dtype, case):
    (q, k, v, do), slopes, params = _half_inputs(case, dtype, seed=5, with_do=True)
    emu = emulation.backward(code, q, k, v, do, slopes, **_emu_params(params, q.shape[3]))
    for form in _each_half_form(code):
        got = fuel_cy.attention_flash_backward(q, k, v, do, slopes, **params)
        for name, g, e in zip(("dq", "dk", "dv"), got, emu):
            assert np.array_equal(g.astype(np.float32).view(np.uint32), e.view(np.uint32)), (name, form)


@pytest.mark.parametrize("tiny", ["qk", "v"])
def test_bf16_gemms_stay_exact_where_f32_subnormals_arise(tiny):
    """Tiny operands make products and partial sums f32 subnormals, which the one-instruction bf16
    rounding would flush: the kernels must notice and round those tiles exactly."""
    rng = np.random.default_rng(11)
    b, hq, hkv, sq, sk, d = 1, 2, 1, 9, 140, 40
    q = rng.standard_normal((b, hq, sq, d))
    k = rng.standard_normal((b, hkv, sk, d))
    v = rng.standard_normal((b, hkv, sk, d))
    if tiny == "qk":
        q, k = q * 2.0**-60, k * 2.0**-62
    else:
        v = v * 2.0**-119
    q, k, v = (x.astype(ml_dtypes.bfloat16) for x in (q, k, v))
    scale = 2.0**123 if tiny == "qk" else 1 / np.sqrt(d)  # so that tiny scores still matter
    emu = emulation.naive("BF16", q, k, v, None, float(np.float32(scale)))
    for form in _each_half_form("BF16"):
        out = fuel_cy.attention_naive(q, k, v, softmax_scale=scale)
        assert np.array_equal(out.astype(np.float32).view(np.uint32), emu.view(np.uint32)), form
    products = (q.astype(np.float64)[..., :, None, :] * k.astype(np.float64)[..., None, :, :]) if tiny == "qk" \
        else v.astype(np.float64) / sk
    assert ((np.abs(products) < 2.0**-126) & (products != 0)).any()  # the case really arises


@pytest.mark.parametrize("code,dtype,big", [("BF16", ml_dtypes.bfloat16, 3e38), ("F16", np.float16, 6e4)])
def test_half_forms_agree_on_infinities_and_nans(code, dtype, big):
    """The vdpbf16ps form adds by a dot product and the binary16 form by vaddph, where infinities,
    inf - inf and NaN operands could come out otherwise than from vaddps: every form must give the
    same bits on such inputs too, except the sign of a NaN (which NaN an addition of two NaNs
    returns follows operand order)."""
    forms = list(_each_half_form(code))
    if len(forms) < 2:
        pytest.skip(f"this CPU level ({core().__name__}) has one {code} GEMM form")
    rng = np.random.default_rng(12)
    q, k, v, do = (rng.standard_normal((1, 2, 70, 40)) for _ in range(4))
    q[0, 0, 3, 5], k[0, 0, 9, 1], v[0, 1, 4, 33], v[0, 1, 7, 33] = np.inf, -np.inf, np.inf, -np.inf
    v[0, 0, 11, 2], q[0, 1, 20, 7], do[0, 0, 5, 38] = np.nan, -np.nan, np.nan
    v[0, 0, :, 20] = big  # sums that overflow
    q, k, v, do = (x.astype(dtype) for x in (q, k, v, do))
    quiet_nan = np.uint16(0x7FC0 if code == "BF16" else 0x7E00)
    results = {}
    for form in _each_half_form(code):
        outs = [fuel_cy.attention_naive(q, k, v), fuel_cy.attention_flash(q, k, v, causal=True),
                *fuel_cy.attention_flash_backward(q, k, v, do)]
        floats = [o.astype(np.float32) for o in outs]
        # a NaN's sign bit aside, every bit (signs of zeros and infinities included)
        results[form] = [np.where(np.isnan(f), quiet_nan, o.view(np.uint16)) for o, f in zip(outs, floats)]
        assert all(any(test(f).any() for f in floats) for test in (np.isnan, np.isinf, np.isfinite))
    first, *others = results.values()
    for other in others:
        for a, b, name in zip(first, other, ("naive", "flash", "dq", "dk", "dv")):
            assert np.array_equal(a, b), name


@pytest.mark.parametrize("code,dtype", [("BF16", ml_dtypes.bfloat16), ("F16", np.float16)])
def test_paged_is_bitwise_the_emulation(code, dtype):
    rng = np.random.default_rng(5)
    b, hq, hkv, sq, d, bs, nblocks, maxb = 3, 4, 2, 2, 5, 4, 12, 4
    q = rng.standard_normal((b, hq, sq, d)).astype(dtype)
    kc = rng.standard_normal((nblocks, bs, hkv, d)).astype(dtype)
    vc = rng.standard_normal((nblocks, bs, hkv, d)).astype(dtype)
    table = rng.permutation(nblocks)[: b * maxb].reshape(b, maxb).astype(np.uint32)
    lens = np.array([13, 1, 16], np.uint32)
    slopes = rng.random(hq).astype(dtype)
    emu = emulation.paged(code, q, kc, vc, table, lens, slopes, float(np.float32(1 / np.sqrt(d))), 3.0)
    for form in _each_half_form(code):
        out = fuel_cy.attention_paged_naive(q, kc, vc, table, lens, slopes, softcap=3.0)
        assert np.array_equal(out.astype(np.float32).view(np.uint32), emu.view(np.uint32)), form


@pytest.mark.parametrize("target", [ml_dtypes.bfloat16, np.float16])
def test_rounded_softmax_exp_is_fc_expf_on_every_value_of_t(target):
    """The rounded softmax passes (fc_exp.h fc_exp_scaled_sum16_<T>) take exp on whole vectors;
    their inputs are values of T, so comparing with the scalar exp the emulation uses on all 2^16
    of them (and the edges) proves the vector form gives its bits."""
    x = np.arange(2**16, dtype=np.uint16).view(target).astype(np.float32)
    x = np.concatenate([x, np.array([88.7228, 88.8, -86.5, -86.6, -87.5, 1e-45, -1e-45], np.float32),
                        np.array([0x7FC12345, 0xFFC00001, 0x7F800000, 0xFF800000], np.uint32).view(np.float32)])
    vec, scalar = core()._test_expf_tv(x), core()._test_expf(x)
    assert np.array_equal(vec.view(np.uint32), scalar.view(np.uint32))


def test_vector_exp_is_fc_expf_across_the_float_range():
    """flash's rescaling factors exp(m_old - m_new) take fc_expf_tv on whole vectors
    (fc_rescale_factors_f32) where they took the scalar fc_expf; their inputs are any float, so
    the two are compared bit for bit on 2^22 floats spread over all 2^32 bit patterns (every
    1024th, from a random offset: both signs, every exponent, subnormals, infinities, NaNs) and
    the clamps' edges.  (All 2^32 were compared at every level when this was written.)"""
    offset = int(np.random.default_rng(3).integers(1024))
    x = (np.arange(offset, 2**32, 1024, dtype=np.uint64).astype(np.uint32)).view(np.float32)
    edges = np.array([88.7228, 88.72281, 88.72283, -86.5, -86.50001, -87.3, -103.97, 0.0, -0.0], np.float32)
    x = np.concatenate([x, edges, np.nextafter(edges, np.float32(np.inf)), np.nextafter(edges, np.float32(-np.inf))])
    vec, scalar = core()._test_expf_tv(x), core()._test_expf(x)
    assert np.array_equal(vec.view(np.uint32), scalar.view(np.uint32))


@pytest.mark.parametrize("n", [1, 5, 16, 17, 64])
def test_rescaling_factors_are_the_scalar_rules_on_whole_vectors(n):
    """fc_rescale_factors_f32 (all of a tile's rows at once): 1 where the running max stayed put
    (including -inf and +inf kept), 0 where the row had no max yet, else fc_expf(m_old - m_new),
    NaN where either max is NaN; any count of rows (vector tails)."""
    rng = np.random.default_rng(n)
    special = np.array([-np.inf, np.inf, np.nan, 0.0, -3.0, 1e30, -1e30, 90.0], np.float32)
    m_old = np.concatenate([rng.standard_normal(n) * 20, special]).astype(np.float32)[:n]
    m_new = m_old.copy()
    moved = rng.random(n) < 0.6
    m_new[moved] = (m_old[moved] + np.abs(rng.standard_normal(moved.sum()) * 30)).astype(np.float32)
    m_new[rng.random(n) < 0.2] = np.float32(np.nan)
    m_old[: n // 3][rng.random(n // 3) < 0.5] = -np.inf
    got = core()._test_rescale_factors(m_old, m_new)
    with np.errstate(invalid="ignore"):
        want = core()._test_expf((m_old - m_new).astype(np.float32))
    want[m_new == m_old] = 1
    want[(m_old == -np.inf) & (m_new > m_old)] = 0
    assert np.array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    assert np.array_equal(got[ok].view(np.uint32), want[ok].view(np.uint32))


@pytest.mark.parametrize("n", [1, 7, 16, 17, 64])
def test_row_sums_run_the_pairwise_tree_of_each_row(n):
    """fc_sum16_rows (a tile's rows side by side) adds each row's 16 lane partials as the per-row
    tree does, l[i] + l[i + h] for h = 8, 4, 2, 1, in float32: values of mixed magnitudes, where
    another order would round differently."""
    rng = np.random.default_rng(n)
    lanes = (rng.standard_normal((n, 16)) * 10.0 ** rng.integers(-4, 5, (n, 16))).astype(np.float32)
    want = lanes.copy()
    for h in (8, 4, 2, 1):
        want[:, :h] = want[:, :h] + want[:, h:2 * h]
    got = core()._test_sum16_rows(lanes)
    assert np.array_equal(got.view(np.uint32), want[:, 0].view(np.uint32))
    in_turn = lanes[:, 0].copy()   # another order (left to right), which these values tell apart
    for i in range(1, 16):
        in_turn = in_turn + lanes[:, i]
    if n >= 16:
        assert not np.array_equal(in_turn.view(np.uint32), want[:, 0].view(np.uint32))


def test_the_exp_pass_for_masked_rows_gives_the_plain_passs_bits():
    """Rows holding masked scores take an exp pass that skips the final scaling of the lanes at or
    below -110 (an underflow there costs a microcode assist per lane on Intel cores): the same
    stored weights and the same row sum as the plain pass, bit for bit, on -inf, the whole range
    where exp underflows or goes subnormal, both sides of -110, NaN, +inf, and ordinary scores,
    fused shift (|m| small) and not."""
    rng = np.random.default_rng(5)
    edges = np.array([-np.inf, -160.0, -115.0, -110.0001, -110.0, -109.9999, -104.0, -103.97, -103.9, -95.0,
                      -87.4, -87.3, -86.0, -1e-30, 0.0, 3.0, np.inf, np.nan], np.float32)
    for n in (1, 15, 16, 17, 128, 300):
        for m in (0.0, 2.5, -7.0, 1e6):
            s = rng.choice(np.concatenate([edges, rng.uniform(-200, 5, 64).astype(np.float32)]), n)
            s = s.astype(np.float32) + np.float32(m)
            for scale in (1.0, 0.125):
                plain = core()._test_exp_row(s, scale, m, False)
                sparse = core()._test_exp_row(s, scale, m, True)
                assert np.array_equal(plain[0].view(np.uint32), sparse[0].view(np.uint32)), (n, m, scale)
                assert np.float32(plain[1]).view(np.uint32) == np.float32(sparse[1]).view(np.uint32) or (
                    np.isnan(plain[1]) and np.isnan(sparse[1])), (n, m, scale)


def test_fast_exp_f64_accuracy_and_edges():
    x = np.linspace(-707.0, 709.0, 2_000_001)
    ours = core()._test_exp_f64(x)
    exact = np.exp(x)
    ulp = np.abs(ours - exact) / np.spacing(exact)
    assert ulp.max() <= 4.0
    small = np.linspace(-3, 3, 100_001)
    assert np.max(np.abs(core()._test_exp_f64(small) - np.exp(small)) / np.spacing(np.exp(small))) <= 2.0
    edge = core()._test_exp_f64(np.array([-np.inf, -1e4, 1e4, np.inf, np.nan, 0.0]))
    assert edge[0] == 0 and edge[1] == 0 and edge[2] == np.inf and edge[3] == np.inf
    assert np.isnan(edge[4]) and edge[5] == 1


@pytest.mark.parametrize("code,dtype", [("BF16", ml_dtypes.bfloat16), ("F16", np.float16)])
def test_paged_half_reads_a_live_pool_in_place(code, dtype):
    """Every block live (a full decode batch): the pool is still read where it is, at two bytes
    an element (widening it, as this kernel once did, took 4x the pool's bytes), read-only."""
    rng = np.random.default_rng(10)
    b, hq, hkv, d, bs, nblocks = 8, 4, 2, 32, 16, 256
    kc = rng.standard_normal((nblocks, bs, hkv, d)).astype(dtype)
    vc = rng.standard_normal((nblocks, bs, hkv, d)).astype(dtype)
    for x in (kc, vc):
        x.flags.writeable = False
    table = rng.permutation(nblocks).reshape(b, nblocks // b).astype(np.uint32)
    lens = np.array([512, 500, 1, 17, 512, 256, 300, 511], np.uint32)
    q = rng.standard_normal((b, hq, 1, d)).astype(dtype)
    out, peak = peak_bytes_in_fresh_thread(lambda: fuel_cy.attention_paged_naive(q, kc, vc, table, lens))
    assert peak < kc.nbytes // 2, (peak, kc.nbytes)
    emu = emulation.paged(code, q, kc, vc, table, lens, None, float(np.float32(1 / np.sqrt(d))))
    assert np.array_equal(out.astype(np.float32).view(np.uint32), emu.view(np.uint32))


@pytest.mark.parametrize("code,dtype", [("BF16", ml_dtypes.bfloat16), ("F16", np.float16)])
def test_paged_half_reads_only_the_live_blocks_in_place(code, dtype):
    """A half-type cache is read in its 16-bit storage, never widened or copied: a large pool
    costs no memory, and blocks the table does not reference for the live contexts (here
    NaN-filled) are never read."""
    import tracemalloc

    rng = np.random.default_rng(9)
    b, hq, hkv, sq, d, bs, nblocks = 2, 4, 2, 1, 32, 16, 4096  # an 8 MB pool of 2-byte values
    kc = np.full((nblocks, bs, hkv, d), np.nan, dtype=dtype)
    vc = np.full((nblocks, bs, hkv, d), np.nan, dtype=dtype)
    table = rng.permutation(nblocks)[: b * 6].reshape(b, 6).astype(np.uint32)
    lens = np.array([70, 33], np.uint32)
    live = [table[i, : -(-int(n) // bs)] for i, n in enumerate(lens)]
    for ids in live:
        kc[ids] = rng.standard_normal((len(ids), bs, hkv, d)).astype(dtype)
        vc[ids] = rng.standard_normal((len(ids), bs, hkv, d)).astype(dtype)
    table[1, 3:] = 0xFFFFFFFF  # slots past a context are never looked at
    q = rng.standard_normal((b, hq, sq, d)).astype(dtype)
    out, peak = peak_bytes_in_fresh_thread(lambda: fuel_cy.attention_paged_naive(q, kc, vc, table, lens))
    assert peak < 1024 * 1024, peak  # widening the whole pool would take 16 MB, its live blocks 0.7 MB
    assert np.isfinite(out.astype(np.float32)).all()
    emu = emulation.paged(code, q, kc, vc, np.where(table == 0xFFFFFFFF, 0, table).astype(np.uint32), lens, None,
                          float(np.float32(1 / np.sqrt(d))))
    assert np.array_equal(out.astype(np.float32).view(np.uint32), emu.view(np.uint32))


def _rounded_gemms_f16(q, kt, p, v, o):
    """S = q kt and O = o + p v in binary16, every product and every sum rounded (NumPy's float16
    arithmetic rounds each operation), summed in order of the contraction index."""
    s = np.zeros((q.shape[0], kt.shape[1]), dtype=np.float16)
    acc = o.copy()
    with np.errstate(over="ignore"):
        for d in range(q.shape[1]):
            s = s + q[:, d, None] * kt[None, d, :]
        for j in range(p.shape[1]):
            acc = acc + p[:, j, None] * v[None, j, :]
    return s, acc


@pytest.mark.parametrize("rows,d,keys,d2", [(4, 1, 1, 32), (8, 31, 33, 40), (12, 129, 128, 67),
                                             (16, 300, 129, 96), (24, 128, 300, 33)])
def test_f16_gemm_forms_are_the_rounded_sums(rows, d, keys, d2):
    """Each form of the f16 GEMMs (the F16C conversions; the binary16 loops, emulated here and
    native on AVX512-FP16) against NumPy's float16 arithmetic: contractions longer than a chunk of
    binary16 operands (128), row counts that leave blocks of 4 and 2, columns past the 32-lane
    blocks, values that underflow to subnormals and sums that overflow to inf."""
    rng = np.random.default_rng(rows + d + keys)
    q = rng.standard_normal((rows, d)).astype(np.float16)
    kt = rng.standard_normal((d, 128)).astype(np.float16)
    p = rng.random((rows, keys)).astype(np.float16)
    v = rng.standard_normal((keys, d2)).astype(np.float16)
    o = rng.standard_normal((rows, d2)).astype(np.float16)
    kt[:, 5] *= np.float16(2.0**-20)                  # products and sums below 2^-14: subnormals
    v[:, 1] = o[:, 1] = np.float16(65504)              # sums past the largest binary16: inf
    want_s, want_o = _rounded_gemms_f16(q, kt, p, v, o)
    assert np.isinf(want_o).any() and (np.abs(want_s[:, 5]) < 2.0**-14).any()
    forms = core()._test_f16_forms()
    chosen = core()._test_f16_form()
    try:
        for form in forms:
            core()._test_f16_form(form)
            s, out = core()._test_gemm_f16(*(np.ascontiguousarray(x, dtype=np.float32) for x in (q, kt, p, v, o)))
            assert np.array_equal(s.astype(np.float16).view(np.uint16), want_s.view(np.uint16)), (form, "S")
            assert np.array_equal(out.astype(np.float16).view(np.uint16), want_o.view(np.uint16)), (form, "O")
    finally:
        core()._test_f16_form(chosen)
