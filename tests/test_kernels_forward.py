"""attention_naive / attention_flash against the tests' own float64 reference."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import fuel_cy
from measures import bound
from measures import rel as relative_error

import reference_impl as ref
from inputs import attention_inputs

# (id, B, Hq, Hkv, Sq, Sk, D, params, alibi)
CASES = [
    ("mha", 1, 2, 2, 17, 23, 8, {}, False),
    ("gqa2", 2, 4, 2, 33, 47, 16, {}, False),
    ("gqa4-causal", 1, 8, 2, 64, 64, 32, {"causal": True}, False),
    ("mqa", 1, 4, 1, 19, 130, 24, {}, False),
    ("sq-gt-sk-causal", 1, 2, 1, 150, 40, 16, {"causal": True}, False),
    ("sq-lt-sk-causal", 1, 2, 2, 20, 300, 16, {"causal": True}, False),
    ("left-window", 1, 2, 1, 70, 90, 8, {"window_size_left": 5}, False),
    ("right-window", 1, 2, 1, 70, 90, 8, {"window_size_right": 7}, False),
    ("two-sided-window", 2, 2, 2, 129, 129, 16, {"window_size_left": 3, "window_size_right": 2}, False),
    ("window-zero", 1, 2, 2, 40, 40, 8, {"window_size_left": 0, "window_size_right": 0}, False),
    ("softcap", 1, 4, 2, 33, 65, 32, {"softcap": 1.5}, False),
    ("alibi", 1, 4, 4, 31, 77, 16, {}, True),
    ("all-combined", 2, 8, 2, 45, 200, 64, {"causal": True, "window_size_left": 17, "window_size_right": 3,
                                             "softcap": 5.0, "k_len": 150, "softmax_scale": 0.3}, True),
    ("k-len", 1, 2, 1, 30, 100, 16, {"k_len": 37}, False),
    ("fully-masked-rows", 1, 2, 1, 30, 60, 8, {"k_len": 5, "window_size_left": 0, "window_size_right": 0}, False),
    ("k-len-zero", 1, 2, 1, 4, 9, 8, {"k_len": 0}, False),
    ("d1", 1, 2, 1, 9, 11, 1, {"causal": True}, False),
    ("d3", 2, 2, 2, 13, 29, 3, {}, True),
    ("d64", 1, 2, 1, 70, 257, 64, {"causal": True}, False),
    ("d128", 1, 2, 2, 65, 131, 128, {}, False),
    ("d256", 1, 2, 1, 33, 140, 256, {"window_size_left": 20}, False),
    ("sq1", 3, 4, 2, 1, 300, 64, {}, True),
    ("sk1", 2, 2, 1, 17, 1, 16, {}, False),
    ("odd-59", 1, 3, 1, 113, 203, 59, {"causal": True}, False),
    # across tiles: 7 query tiles x 4 key tiles, a left window that skips leading key tiles
    # (rows >= 158), ALiBi; k_len cutting inside the third key tile with a head ratio of 3
    ("long-window-alibi", 1, 2, 1, 400, 400, 16, {"window_size_left": 30, "window_size_right": 5}, True),
    ("k-len-tile3-gqa3", 1, 6, 2, 50, 400, 8, {"k_len": 300}, False),
]


def _make(case, dtype, seed=0):
    _, b, hq, hkv, sq, sk, d, params, alibi = case
    return (*attention_inputs(b, hq, hkv, sq, sk, d, dtype, alibi, seed), dict(params))


def _reference(q, k, v, slopes, params):
    return ref.forward(q, k, v, None if slopes is None else np.asarray(slopes, np.float64),
                       params.get("softmax_scale"), params.get("causal", False),
                       params.get("window_size_left"), params.get("window_size_right"),
                       params.get("softcap"), params.get("k_len"))


@pytest.mark.parametrize("kernel", ["attention_naive", "attention_flash"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_f32_and_f64_match_reference(kernel, case):
    fn = getattr(fuel_cy, kernel)
    for dtype, tol in ((np.float32, 2e-5), (np.float64, 1e-12)):
        q, k, v, slopes, params = _make(case, dtype)
        out = fn(q, k, v, slopes, **params)
        expected = _reference(q, k, v, slopes, params)
        assert out.dtype == dtype and out.shape == q.shape and out.flags.c_contiguous
        assert relative_error(out, expected) <= tol, (kernel, case[0], dtype)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_flash_equals_naive_up_to_reassociation(case):
    q, k, v, slopes, params = _make(case, np.float32, seed=1)
    a = fuel_cy.attention_flash(q, k, v, slopes, **params)
    b = fuel_cy.attention_naive(q, k, v, slopes, **params)
    assert relative_error(a, b) <= 2e-5


def test_fully_masked_rows_are_exact_zeros():
    case = next(c for c in CASES if c[0] == "fully-masked-rows")
    q, k, v, slopes, params = _make(case, np.float32)
    for fn in (fuel_cy.attention_flash, fuel_cy.attention_naive):
        out = fn(q, k, v, **params)
        assert np.all(out[:, :, 5:] == 0) and np.all(np.abs(out[:, :, :5]).sum(-1) > 0)
        assert not np.isnan(out).any()


HALF_CASES = [c for c in CASES if c[0] in ("gqa2", "all-combined", "softcap", "d3", "odd-59", "sq1", "fully-masked-rows",
                                            "long-window-alibi", "k-len-tile3-gqa3")]


@pytest.mark.parametrize("kernel", ["attention_naive", "attention_flash"])
@pytest.mark.parametrize("code,dtype", [("BF16", ml_dtypes.bfloat16), ("F16", np.float16)])
@pytest.mark.parametrize("case", HALF_CASES, ids=[c[0] for c in HALF_CASES])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_half_types_within_documented_bound(kernel, code, dtype, case, seed):
    q, k, v, slopes, params = _make(case, dtype, seed)
    out = getattr(fuel_cy, kernel)(q, k, v, slopes, **params)
    assert out.dtype == np.dtype(dtype)
    expected = _reference(q, k, v, slopes, params)
    sk = params.get("k_len") or k.shape[2]
    assert relative_error(out, expected) <= bound(code, q.shape[-1], sk), (code, case[0])


def test_softmax_scale_default_and_explicit_agree():
    q, k, v, _, _ = _make(CASES[1], np.float32)
    d = q.shape[-1]
    a = fuel_cy.attention_flash(q, k, v)
    b = fuel_cy.attention_flash(q, k, v, softmax_scale=1 / np.sqrt(d))
    assert np.array_equal(a, b)
    c = fuel_cy.attention_flash(q, k, v, softmax_scale=0.5)
    assert not np.array_equal(a, c)
