"""Every accepted parameter value, however extreme, gives the right answer: windows up to 2**64 - 1,
scores as large as float32 holds, paged capacities past 2**63, and a forked child's first call.

Run at every compiled level (tests/test_cpu_levels.py LEVEL_SUITES) and under the sanitizer build
(tests/test_robustness.py), so each fault these pin is looked for in every vector width's code.
"""
from __future__ import annotations

import multiprocessing
import os
import select
import sys

import ml_dtypes
import numpy as np
import pytest

import fuel_cy
import reference_impl as ref
from fuel_cy.runtime.cpu import core
from measures import bits, bound, rel

HUGE_WINDOWS = [2**63 - 1, 2**62, 2**64 - 1]   # and 2**63 - S, which depends on the shape


def _rng_inputs(shape_q, shape_kv, dtype=np.float32, seed=0, scale=1.0):
    rng = np.random.default_rng(seed)
    q = (rng.standard_normal(shape_q) * scale).astype(dtype)
    k = (rng.standard_normal(shape_kv) * scale).astype(dtype)
    v = rng.standard_normal(shape_kv).astype(dtype)
    return q, k, v


FORWARD = ["attention_naive", "attention_flash"]
FORWARD_DTYPES = [np.float32, np.float64, ml_dtypes.bfloat16, np.float16]
MIXED_DTYPES = [ml_dtypes.bfloat16, np.float16]


CODES = {np.dtype(np.float32): "F32", np.dtype(np.float64): "F64", np.dtype(ml_dtypes.bfloat16): "BF16",
         np.dtype(np.float16): "F16"}


def _windows(s):
    return HUGE_WINDOWS + [2**63 - s]


# ---- windows near and past 2**63 -------------------------------------------------------------------

@pytest.mark.parametrize("kernel", FORWARD + ["attention_flash_mixed"])
@pytest.mark.parametrize("shape", [(1, 1, 4, 8), (1, 2, 200, 16)])
@pytest.mark.parametrize("side", ["window_size_left", "window_size_right", "both"])
@pytest.mark.parametrize("causal", [False, True])
def test_huge_windows_are_no_window(kernel, shape, side, causal):
    """A window at or past the extents it limits masks nothing: the same bits as no window (it once
    read outside the buffers: the sum i + right + 1 wrapped past 2**63)."""
    dtypes = MIXED_DTYPES if kernel.endswith("_mixed") else FORWARD_DTYPES
    fn = getattr(fuel_cy, kernel)
    for dtype in dtypes:
        q, k, v = _rng_inputs(shape, shape, dtype, seed=shape[2])
        plain = fn(q, k, v, causal=causal)
        for w in _windows(shape[2]):
            kw = {"window_size_left": w, "window_size_right": w} if side == "both" else {side: w}
            out = fn(q, k, v, causal=causal, **kw)
            assert bits(out) == bits(plain), (dtype, w)
        expected = ref.forward(q, k, v, causal=causal)
        code = CODES[np.dtype(dtype)]
        assert rel(plain, expected) <= bound(code, shape[3], shape[2], compute="f32" if kernel.endswith("_mixed") else "T")


@pytest.mark.parametrize("kernel", ["attention_flash_backward", "attention_flash_backward_mixed"])
@pytest.mark.parametrize("shape", [(1, 1, 4, 8), (1, 2, 200, 16)])
def test_huge_windows_in_the_backward(kernel, shape):
    dtypes = MIXED_DTYPES if kernel.endswith("_mixed") else FORWARD_DTYPES
    fn = getattr(fuel_cy, kernel)
    for dtype in dtypes:
        q, k, v = _rng_inputs(shape, shape, dtype, seed=3)
        do = _rng_inputs(shape, shape, dtype, seed=4)[0]
        for causal in (False, True):
            plain = fn(q, k, v, do, causal=causal)
            for w in _windows(shape[2]):
                out = fn(q, k, v, do, causal=causal, window_size_left=w, window_size_right=w)
                assert bits(out) == bits(plain), (dtype, causal, w)


def test_a_large_window_that_still_masks():
    """Past every row's reach only; a window inside the extents still masks as the prose says."""
    q, k, v = _rng_inputs((1, 1, 300, 16), (1, 1, 300, 16), np.float64, seed=5)
    for left, right in [(299, None), (None, 299), (298, 0), (0, 298), (150, 149)]:
        for kernel in FORWARD:
            out = getattr(fuel_cy, kernel)(q, k, v, window_size_left=left, window_size_right=right)
            assert rel(out, ref.forward(q, k, v, left=left, right=right)) <= 1e-12, (kernel, left, right)


@pytest.mark.parametrize("kernel", FORWARD + ["attention_flash_backward", "attention_flash_mixed"])
@pytest.mark.parametrize("name", ["window_size_left", "window_size_right"])
@pytest.mark.parametrize("value", [2**64, 2**100, -1])
def test_a_window_outside_usize_is_an_input_error(kernel, name, value):
    dtype = ml_dtypes.bfloat16 if kernel.endswith("_mixed") else np.float32
    q, k, v = _rng_inputs((1, 1, 4, 8), (1, 1, 4, 8), dtype)
    args = (q, k, v, q) if "backward" in kernel else (q, k, v)
    with pytest.raises(fuel_cy.InputError) as e:
        getattr(fuel_cy, kernel)(*args, **{name: value})
    msg = str(e.value)
    assert kernel in msg and repr(name) in msg and "2**64 - 1" in msg and str(value) in msg


@pytest.mark.parametrize("value", [2**63, 2**64 - 1, 2**64])
def test_a_huge_k_len_is_an_input_error(value):
    q, k, v = _rng_inputs((1, 1, 4, 8), (1, 1, 4, 8))
    with pytest.raises(fuel_cy.InputError) as e:
        fuel_cy.attention_flash(q, k, v, k_len=value)
    assert "'k_len'" in str(e.value) and str(value) in str(e.value)


@pytest.mark.parametrize("kernel", ["attention_paged_naive", "attention_paged_mixed"])
def test_a_table_capacity_past_2_63(kernel):
    """max_blocks_per_seq * block_size may pass 2**63 (an empty pool with a huge block_size): the
    capacity check and the score rows' extent never form that product."""
    dtype = ml_dtypes.bfloat16 if kernel.endswith("_mixed") else np.float32
    bs, mb = 2**41, 2**22 + 1                       # mb * bs = 2**63 + 2**41
    pool = np.zeros((0, bs, 1, 1), dtype)
    table = np.zeros((1, mb), np.uint32)
    q = np.ones((1, 1, 1, 1), dtype)
    fn = getattr(fuel_cy, kernel)
    kw = {} if kernel.endswith("_mixed") else {"block_size": bs}   # the mixed contract reads it off the pool
    out = fn(q, pool, pool, table, np.zeros(1, np.uint32), **kw)
    assert out.shape == q.shape and not np.asarray(out, np.float64).any()
    with pytest.raises(fuel_cy.InputError) as e:            # one live key: block 0 of an empty pool
        fn(q, pool, pool, table, np.ones(1, np.uint32), **kw)
    assert "num_blocks" in str(e.value)


# ---- scores as large as the work type holds ---------------------------------------------------------

def _resolved_rows(q, k, scale, resolve):
    """Rows whose largest and second-largest float64 scores are apart by more than `resolve` times
    the largest's magnitude: the softmax there is the same one-hot (or near it) in any precision
    that can tell them apart."""
    s = np.einsum("bhqd,bhkd->bhqk", np.asarray(q, np.float64), np.asarray(k, np.float64)) * scale
    top = np.sort(s, axis=-1)
    return (top[..., -1] - top[..., -2]) > resolve * np.maximum(np.abs(top[..., -1]), 1e-300)


def _check_large_scores(out, naive, q, k, v, scale, bound, resolve):
    out64, naive64 = np.asarray(out, np.float64), np.asarray(naive, np.float64)
    assert np.isfinite(naive64).all() and np.isfinite(out64).all(), f"{np.isnan(out64).sum()} NaN"
    rows = _resolved_rows(q, k, scale, resolve)
    assert rows.mean() > 0.5, "the inputs should resolve most rows"
    expected = ref.forward(q, k, v, scale=scale)
    for got in (out64, naive64):
        err = np.abs(got - expected)[rows]
        assert err.max() <= bound * np.abs(expected).max(), err.max()


def _score_forms():
    """Every form of the bf16 scores this level runs (the float32 loops alone where it has none)."""
    return core()._test_bf16_score_forms() or [None]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("scale", [1e9, 1e18, 1e30])
@pytest.mark.parametrize("shape", [(1, 1, 64, 8), (1, 2, 300, 64)])
def test_flash_is_as_right_as_naive_at_huge_scales(dtype, scale, shape):
    """Scores of ~1e10 and more once gave NaN rows in flash at the FMA levels: gcc fused
    scale * s - m, whose one rounding moved exp's argument by hundreds."""
    q = _rng_inputs(shape, shape, dtype, seed=int(np.log10(scale)))[0]
    k, v = q, q                                  # the probe: q = k = v
    naive = fuel_cy.attention_naive(q, k, v, softmax_scale=scale)
    flash = fuel_cy.attention_flash(q, k, v, softmax_scale=scale)
    bound = 2e-5 if dtype == np.float32 else 1e-12
    _check_large_scores(flash, naive, q, k, v, float(np.float32(scale)), bound, 1e-4)
    for causal in (False, True):
        dq, dk, dv = fuel_cy.attention_flash_backward(q, k, v, q, softmax_scale=scale, causal=causal)
        assert all(np.isfinite(g).all() for g in (dq, dk, dv))


@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, np.float16])
@pytest.mark.parametrize("scale", [1e2, 1e9, 1e30])
def test_math_in_t_flash_matches_naive_at_huge_scales(dtype, scale):
    """Math in T rounds the scale to T as well: float16 holds no 1e9, so the scale is inf there and
    every row NaN, in flash as in naive (and in the oracle); bfloat16 holds it."""
    q = _rng_inputs((1, 2, 300, 64), (1, 2, 300, 64), dtype, seed=7)[0]
    flash = np.asarray(fuel_cy.attention_flash(q, q, q, softmax_scale=scale), np.float64)
    naive = np.asarray(fuel_cy.attention_naive(q, q, q, softmax_scale=scale), np.float64)
    assert np.array_equal(np.isnan(flash), np.isnan(naive))
    with np.errstate(over="ignore"):
        in_t = float(np.asarray(np.float32(scale)).astype(dtype))   # inf where T cannot hold it
    if np.isfinite(in_t) and dtype == ml_dtypes.bfloat16:   # bf16 holds these scores too
        assert not np.isnan(naive).any()
    if not np.isfinite(in_t):
        assert np.isnan(naive).all()
    finite = ~np.isnan(naive)
    assert np.abs(flash - naive)[finite].max(initial=0.0) <= 2 * float(ml_dtypes.finfo(dtype).eps)


@pytest.mark.parametrize("d", [8, 128])
def test_f16_range_inputs_at_the_default_scale(d):
    """|x| up to 6e4 (what float16 holds), D = 128: scores near 4e10.  Flash f32, naive and both
    mixed kernels (every score form) give the float64 answer on the rows any of them can resolve."""
    rng = np.random.default_rng(d)
    shape = (1, 2, 160, d)
    x = rng.uniform(-6e4, 6e4, size=(3,) + shape)
    q32, k32, v32 = (a.astype(np.float32) for a in x)
    scale = float(np.float32(1 / np.sqrt(d)))
    naive = fuel_cy.attention_naive(q32, k32, v32)
    flash = fuel_cy.attention_flash(q32, k32, v32)
    _check_large_scores(flash, naive, q32, k32, v32, scale, 2e-5, 1e-4)
    c = core()
    chosen = c._test_bf16_score_form() if c._test_bf16_score_forms() else None
    try:
        for dtype in MIXED_DTYPES:
            q, k, v = (a.astype(dtype) for a in x)
            for form in _score_forms():
                if form is not None:
                    c._test_bf16_score_form(form)
                out = fuel_cy.attention_flash_mixed(q, k, v)
                _check_large_scores(out, fuel_cy.attention_naive(*(a.astype(np.float32) for a in (q, k, v))),
                                    q, k, v, scale, 1e-2 if dtype == ml_dtypes.bfloat16 else 2e-3, 1e-4)
    finally:
        if chosen is not None:
            c._test_bf16_score_form(chosen)


# ---- fork: a child's first call works and gives the parent's bits -----------------------------------

def _fork_inputs():
    # large enough that a call runs on every thread (over the driver's SMALL_WORK)
    return _rng_inputs((1, 4, 256, 64), (1, 2, 256, 64), seed=11)


def _child_digest(_=None) -> bytes:
    q, k, v = _fork_inputs()
    return bits(fuel_cy.attention_flash(q, k, v, causal=True))


def _parent_digest() -> bytes:
    fuel_cy.set_num_threads(2)
    try:
        return _child_digest()   # runs the OpenMP team in this process before any fork
    finally:
        fuel_cy.set_num_threads(0)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX")
def test_a_forked_child_after_a_threaded_call():
    expected = _parent_digest()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: one call, its bits down the pipe, and out without Python's cleanup
        try:
            fuel_cy.set_num_threads(2)   # asked for threads: it must still not wait on the lost team
            os.write(w, _child_digest())
            os._exit(0)
        finally:
            os._exit(1)
    os.close(w)
    got = b""
    try:
        while True:
            ready, _, _ = select.select([r], [], [], 120)
            assert ready, "the forked child hung"
            chunk = os.read(r, 1 << 20)
            if not chunk:
                break
            got += chunk
    finally:
        os.close(r)
        done, status = os.waitpid(pid, os.WNOHANG)
        if not done:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
    assert got == expected
    assert os.waitstatus_to_exitcode(status) == 0


@pytest.mark.skipif(sys.platform != "linux", reason="the fork start method")
def test_a_multiprocessing_fork_pool():
    expected = _parent_digest()
    with multiprocessing.get_context("fork").Pool(2) as pool:
        result = pool.map_async(_child_digest, range(4))
        got = result.get(timeout=300)
    assert got == [expected] * 4


@pytest.mark.skipif(sys.platform != "linux", reason="the fork start method")
def test_dask_processes_scheduler_with_fork():
    import dask   # the test extra installs it
    expected = _parent_digest()
    tasks = [dask.delayed(_child_digest)(i) for i in range(3)]
    with dask.config.set({"multiprocessing.context": "fork"}):
        got = dask.compute(*tasks, scheduler="processes", num_workers=2)
    assert list(got) == [expected] * 3


def test_threads_in_a_forked_child_are_one():
    """The thread count a child reports is the one it runs: 1 after a threaded call in the parent."""
    _parent_digest()
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(1) as pool:
        assert pool.apply_async(fuel_cy.get_num_threads).get(timeout=120) == 1
