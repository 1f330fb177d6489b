"""attention_paged_naive against a gathered reference; attention_flash_backward against the
float64 closed form and central finite differences of the forward."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import fuel_cy
from measures import bound
from measures import rel as relative_error

import reference_impl as ref
from inputs import attention_inputs


def _paged_case(rng, b, hq, hkv, sq, d, bs, maxb, lens, dtype=np.float32, spare=7):
    nblocks = b * maxb + spare
    q = rng.standard_normal((b, hq, sq, d)).astype(dtype)
    kc = rng.standard_normal((nblocks, bs, hkv, d)).astype(dtype)
    vc = rng.standard_normal((nblocks, bs, hkv, d)).astype(dtype)
    table = rng.permutation(nblocks)[: b * maxb].reshape(b, maxb).astype(np.uint32)
    lens = np.asarray(lens, np.uint32)
    for i in range(b):  # unused slots hold garbage that must never be read
        used = -(-int(lens[i]) // bs)
        table[i, used:] = rng.integers(nblocks, 2**32 - 1, size=maxb - used)
    return q, kc, vc, table, lens


PAGED = [
    ("decode-gqa", 4, 8, 2, 1, 32, 16, 8, [1, 37, 128, 90], {}),
    ("prefill-saturating", 2, 4, 4, 20, 16, 4, 6, [7, 24], {}),  # Sq > context_len in row 0
    ("ragged-softcap-alibi", 3, 4, 1, 3, 8, 5, 9, [45, 0, 13], {"softcap": 2.5}),
    ("odd-d", 2, 2, 1, 2, 59, 16, 3, [33, 48], {"softmax_scale": 0.2}),
    # long contexts over several 128-key tiles, block sizes 1, 16 and 128, a head ratio of 3
    ("long-block1-gqa3", 2, 6, 2, 1, 16, 1, 700, [700, 333], {}),
    ("long-block16-softcap", 2, 4, 2, 2, 32, 16, 125, [2000, 301], {"softcap": 3.0}),
    ("long-block128-alibi", 2, 3, 1, 1, 24, 128, 8, [1000, 129], {}),
]


@pytest.mark.parametrize("case", PAGED, ids=[c[0] for c in PAGED])
def test_paged_matches_gathered_reference(case):
    _, b, hq, hkv, sq, d, bs, maxb, lens, params = case
    rng = np.random.default_rng(11)
    for dtype, tol in ((np.float32, 2e-5), (np.float64, 1e-12)):
        q, kc, vc, table, ln = _paged_case(rng, b, hq, hkv, sq, d, bs, maxb, lens, dtype)
        slopes = (rng.random(hq) * 0.3).astype(dtype) if "alibi" in case[0] else None
        out = fuel_cy.attention_paged_naive(q, kc, vc, table, ln, slopes, **params)
        expected = ref.paged(q, kc, vc, table, ln, slopes, params.get("softmax_scale"), params.get("softcap"))
        assert relative_error(out, expected) <= tol
        for i, n in enumerate(ln):
            if n == 0:
                assert np.all(out[i] == 0)


@pytest.mark.parametrize("code,dtype", [("BF16", ml_dtypes.bfloat16), ("F16", np.float16)])
@pytest.mark.parametrize("case", PAGED, ids=[c[0] for c in PAGED])
def test_paged_half_within_bound(code, dtype, case):
    _, b, hq, hkv, sq, d, bs, maxb, lens, params = case
    rng = np.random.default_rng(2)
    q, kc, vc, table, ln = _paged_case(rng, b, hq, hkv, sq, d, bs, maxb, lens, dtype)
    slopes = (rng.random(hq) * 0.3).astype(dtype) if "alibi" in case[0] else None
    out = fuel_cy.attention_paged_naive(q, kc, vc, table, ln, slopes, **params)
    expected = ref.paged(q, kc, vc, table, ln, slopes, params.get("softmax_scale"), params.get("softcap"))
    assert relative_error(out, expected) <= bound(code, d, int(max(ln)))


def test_paged_equals_contiguous_attention_with_implicit_causal():
    # a single full sequence laid out contiguously in the pool is plain causal attention
    # with queries at the end of the context
    rng = np.random.default_rng(4)
    bs, n, sq, d = 8, 40, 40, 16
    k = rng.standard_normal((1, 1, n, d)).astype(np.float32)
    v = rng.standard_normal((1, 1, n, d)).astype(np.float32)
    q = rng.standard_normal((1, 2, sq, d)).astype(np.float32)
    kc = k[0, 0].reshape(n // bs, bs, 1, d).copy()
    vc = v[0, 0].reshape(n // bs, bs, 1, d).copy()
    table = np.arange(n // bs, dtype=np.uint32)[None]
    out = fuel_cy.attention_paged_naive(q, kc, vc, table, np.array([n], np.uint32))
    expected = fuel_cy.attention_naive(q, k, v, causal=True)
    assert relative_error(out, expected) <= 2e-5


BWD = [
    ("mha", 1, 2, 2, 9, 13, 8, {}, False),
    ("gqa4-causal", 2, 8, 2, 33, 41, 16, {"causal": True}, False),
    ("mqa-window", 1, 4, 1, 50, 70, 24, {"window_size_left": 6, "window_size_right": 2}, False),
    ("softcap-alibi", 1, 4, 2, 20, 30, 16, {"softcap": 1.7}, True),
    ("all-combined", 1, 4, 2, 37, 150, 59, {"causal": True, "window_size_left": 9, "softcap": 4.0,
                                            "softmax_scale": 0.25}, True),
    ("diagonal-only", 1, 2, 1, 12, 12, 8, {"window_size_left": 0, "window_size_right": 0, "causal": True}, False),
    # causal with a left window of 2 over 4 keys: query rows 6..11 admit no key at all
    ("fully-masked", 1, 2, 1, 12, 4, 8, {"window_size_left": 2, "causal": True}, False),
    ("sk1", 1, 2, 1, 5, 1, 4, {}, False),
    ("d128", 1, 2, 1, 40, 140, 128, {"causal": True}, False),
    # 4 query tiles of 64 rows, the window skipping the first key tile from row 158, ratio 3
    ("rows-gt-64-window-gqa3", 1, 3, 1, 200, 400, 16, {"window_size_left": 30, "causal": True}, True),
    ("rows-gt-64-softcap", 1, 2, 2, 130, 150, 16, {"softcap": 4.0}, True),
]


def _bwd_inputs(case, dtype, seed=0):
    _, b, hq, hkv, sq, sk, d, params, alibi = case
    return (*attention_inputs(b, hq, hkv, sq, sk, d, dtype, alibi, seed, with_do=True), dict(params))


@pytest.mark.parametrize("case", BWD, ids=[c[0] for c in BWD])
def test_backward_matches_reference(case):
    for dtype, tol in ((np.float32, 1e-4), (np.float64, 1e-10)):
        q, k, v, do, slopes, params = _bwd_inputs(case, dtype)
        dq, dk, dv = fuel_cy.attention_flash_backward(q, k, v, do, slopes, **params)
        exp = ref.backward(q, k, v, do, slopes, params.get("softmax_scale"), params.get("causal", False),
                           params.get("window_size_left"), params.get("window_size_right"), params.get("softcap"))
        assert (dq.shape, dk.shape, dv.shape) == (q.shape, k.shape, v.shape)
        for got, want in zip((dq, dk, dv), exp):
            assert got.dtype == dtype
            assert relative_error(got, want) <= tol, (case[0], dtype)
        if case[0] == "fully-masked":  # a row with no admissible key has no gradient at all
            assert np.all(dq[:, :, 6:] == 0) and np.any(dq[:, :, :6] != 0)


@pytest.mark.parametrize("case", [c for c in BWD if c[0] in ("mha", "gqa4-causal", "softcap-alibi", "mqa-window")],
                         ids=lambda c: c[0])
def test_backward_matches_finite_differences_of_forward(case):
    q, k, v, do, slopes, params = _bwd_inputs(case, np.float64, seed=3)
    dq, dk, dv = fuel_cy.attention_flash_backward(q, k, v, do, slopes, **params)
    fwd = {k_: v_ for k_, v_ in params.items()}

    def loss(qq, kk, vv):
        return float(np.sum(fuel_cy.attention_flash(qq, kk, vv, slopes, **fwd) * do))

    rng = np.random.default_rng(9)
    eps = 1e-6
    for grad, which in ((dq, 0), (dk, 1), (dv, 2)):
        for _ in range(6):
            args = [q.copy(), k.copy(), v.copy()]
            idx = tuple(rng.integers(0, n) for n in args[which].shape)
            args[which][idx] += eps
            up = loss(*args)
            args[which][idx] -= 2 * eps
            down = loss(*args)
            numeric = (up - down) / (2 * eps)
            assert abs(numeric - grad[idx]) <= 1e-6 * max(1.0, abs(numeric)), (which, idx)


@pytest.mark.parametrize("code,dtype", [("BF16", ml_dtypes.bfloat16), ("F16", np.float16)])
def test_backward_half_within_bound(code, dtype):
    case = BWD[1]
    q, k, v, do, slopes, params = _bwd_inputs(case, dtype)
    grads = fuel_cy.attention_flash_backward(q, k, v, do, slopes, **params)
    exp = ref.backward(q, k, v, do, slopes, None, True)
    for got, want in zip(grads, exp):
        assert got.dtype == np.dtype(dtype)
        assert relative_error(got, want) <= bound(code, q.shape[-1], k.shape[2], backward=True)


def test_paged_random_layouts_match_reference_and_thread_counts():
    """Random decode/prefill shapes, block sizes, ragged contexts and pools larger than what is
    live (half-type pools are then gathered before widening): every result is within the
    dtype's bound of the float64 reference and bit-identical on 1 and 2 threads, whichever
    way the kv heads were grouped into tasks."""
    rng = np.random.default_rng(17)
    for trial in range(24):
        dtype = [np.float32, np.float64, ml_dtypes.bfloat16, np.float16][trial % 4]
        code = {np.float32: "F32", np.float64: "F64", ml_dtypes.bfloat16: "BF16", np.float16: "F16"}[dtype]
        hkv = int(rng.choice([1, 2, 3, 8]))
        hq = hkv * int(rng.choice([1, 2, 4]))
        b, sq, d, bs, maxb = int(rng.integers(1, 5)), int(rng.choice([1, 1, 2, 5])), int(rng.choice([8, 32, 40, 64])), \
            int(rng.choice([1, 4, 16])), int(rng.integers(1, 9))
        lens = rng.integers(0, maxb * bs + 1, size=b)
        q, kc, vc, table, lens = _paged_case(rng, b, hq, hkv, sq, d, bs, maxb, lens, dtype, spare=int(rng.integers(0, 3 * b * maxb)))
        outs = []
        try:
            for threads in (1, 2):
                fuel_cy.set_num_threads(threads)
                outs.append(fuel_cy.attention_paged_naive(q, kc, vc, table, lens))
        finally:
            fuel_cy.set_num_threads(0)
        assert outs[0].view(np.uint8).tobytes() == outs[1].view(np.uint8).tobytes(), trial
        expected = ref.paged(q, kc, vc, table, lens)
        assert relative_error(outs[0], expected) <= bound(code, d, maxb * bs), (trial, code)
