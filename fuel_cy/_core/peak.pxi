# The level's arithmetic peak, measured (fc_peak.h): the ceiling `fuel-cy bench` judges its
# compute-bound rows against.  Hand-written; included by every `_core_<level>.pyx`.

import time as _time

cdef extern from "fc_peak.h" nogil:
    double FC_PEAK_FLOPS_F32
    double FC_PEAK_FLOPS_F64
    double FC_PEAK_FLOPS_BF16
    double FC_PEAK_FLOPS_F16R
    bint FC_PEAK_HAVE_BF16
    double fc_peak_loop_f32(long iters)
    double fc_peak_loop_f64(long iters)
    double fc_peak_loop_bf16(long iters)
    double fc_peak_loop_f16r(long iters)
    double fc_read_pass(const float* x, Py_ssize_t n)


cdef double _peak_run(int which, long iters, int nthreads) noexcept nogil:
    cdef int t
    cdef double s = 0
    for t in prange(nthreads, schedule='static', num_threads=nthreads):
        if which == 0:
            s += fc_peak_loop_f32(iters)
        elif which == 1:
            s += fc_peak_loop_f64(iters)
        elif which == 2:
            s += fc_peak_loop_bf16(iters)
        else:
            s += fc_peak_loop_f16r(iters)
    return s


def peak_gflops(str kind, int nthreads, double seconds=0.1, int reps=5):
    """GFLOP/s of `nthreads` threads each running this level's register-only multiply-add loop:
    kind "f32" or "f64" (fused multiply-adds where the level has them), "bf16" (vdpbf16ps; None at
    a level without AVX512-BF16), or "f16 rounded" (a float32 multiply and add, each rounded to
    binary16 as the f16 "math in T" kernels round them).  The best of `reps` runs of about
    `seconds` each: a ceiling, so noise must not lower it."""
    cdef int which = {"f32": 0, "f64": 1, "bf16": 2, "f16 rounded": 3}[kind]
    if nthreads < 1:
        raise ValueError(f"peak_gflops: nthreads must be >= 1, got {nthreads}")
    if which == 2 and not FC_PEAK_HAVE_BF16:
        return None
    cdef double flops = (FC_PEAK_FLOPS_F32, FC_PEAK_FLOPS_F64, FC_PEAK_FLOPS_BF16, FC_PEAK_FLOPS_F16R)[which]
    cdef long iters = 1 << 16
    cdef double t0, best = 0
    while True:   # iterations for about `seconds` on this machine
        t0 = _time.perf_counter()
        with nogil:
            _peak_run(which, iters, nthreads)
        if _time.perf_counter() - t0 >= seconds / 4 or iters > (1L << 40):
            break
        iters *= 4
    for _ in range(reps):
        t0 = _time.perf_counter()
        with nogil:
            _peak_run(which, iters, nthreads)
        best = max(best, flops * iters * nthreads / (_time.perf_counter() - t0) / 1e9)
    return best


def read_pass(const float[::1] buf, int nthreads):
    """One read of buf by `nthreads` threads, each its own contiguous share (fc_peak.h
    fc_read_pass); returns the sum of its values.  Timed beside a memory-bound call, the machine's
    read rate on the bench's threads (bytes read per second)."""
    if nthreads < 1:
        raise ValueError(f"read_pass: nthreads must be >= 1, got {nthreads}")
    cdef Py_ssize_t n = buf.shape[0], share = (n + nthreads - 1) // nthreads, lo, hi
    cdef int t
    cdef double s = 0
    if n == 0:
        return 0.0
    with nogil:
        for t in prange(nthreads, schedule='static', num_threads=nthreads):
            lo = t * share
            hi = lo + share if lo + share < n else n
            if hi > lo:
                s += fc_read_pass(&buf[lo], hi - lo)
    return s
