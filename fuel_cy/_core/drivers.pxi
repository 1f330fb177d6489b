# GIL-side drivers: take validated contiguous work arrays (float for f32/bf16/f16, double for
# f64), allocate packed operands and per-thread scratch as numpy arrays (so a failed allocation is
# a MemoryError, not a crash), then release the GIL for the cores.  Hand-written; included by the
# generated extension.  Inputs are only read; outputs are fully written.

import numpy as _np


cdef inline object _work_dtype(real_t* dummy):
    if real_t is float:
        return _np.float32
    else:
        return _np.float64


def _paged_live_blocks(q, k_cache, v_cache, block_table, context_lens, alibi_slopes, dict params):
    """A half-type pool is widened to float32 for the core: widen only the blocks that the
    table references for the live contexts (a decode step's blocks), renumbered in order, not
    the whole cache, which may be far larger than one batch reads.  The kernel never reads
    another block, so the result is the same bits."""
    bs = k_cache.shape[1]
    lens = _np.asarray(context_lens, dtype=_np.int64)
    live = _np.arange(block_table.shape[1])[None, :] < (-(-lens // bs) if bs else _np.zeros_like(lens))[:, None]
    ids = _np.where(live, block_table, 0).astype(_np.int64)
    used = _np.unique(ids[live])
    if used.shape[0] == 0:  # nothing live: keep one block so the core's buffers are not empty
        used = _np.zeros(1, dtype=_np.int64)
    if k_cache.shape[0] == 0 or used.shape[0] * 2 > k_cache.shape[0]:  # most of it is live: keep it
        return q, k_cache, v_cache, block_table, context_lens, alibi_slopes
    remap = _np.zeros(k_cache.shape[0], dtype=_np.uint32)
    remap[used] = _np.arange(used.shape[0], dtype=_np.uint32)
    table = _np.where(live, remap[ids], 0).astype(_np.uint32)
    return q, k_cache[used], v_cache[used], table, context_lens, alibi_slopes


cdef enum:
    CONVERT_CHUNK = 65536   # elements per task of the parallel half <-> float32 conversions


cdef void _convert_par(unsigned short* h, float* f, Py_ssize_t n, int is_f16, bint widen, int nthreads) noexcept nogil:
    """Elementwise, so the bits do not depend on the split; large pools and outputs convert on
    every thread (a decode step's pool conversion took most of its time on one)."""
    cdef Py_ssize_t nchunks = ceil_div(n, CONVERT_CHUNK), c, lo, m
    cdef int nt = <int>min(<Py_ssize_t>nthreads, nchunks)
    for c in prange(nchunks, schedule='static', num_threads=nt):
        lo = c * CONVERT_CHUNK
        m = n - lo
        if m > CONVERT_CHUNK:
            m = CONVERT_CHUNK
        if widen:
            fc_widen_half(h + lo, f + lo, m, is_f16)
        else:
            fc_narrow_half(f + lo, h + lo, m, is_f16)


def _work(object x, object npwork, str code, int nthreads=1):
    """The core's flat work array for a float input: bf16/f16 widened to float32 in C (exact),
    other dtypes through _validation.work."""
    if x is None or code not in ("BF16", "F16"):
        return _v.work(x, npwork)
    cdef unsigned short[::1] bits = _np.ascontiguousarray(x).reshape(-1).view(_np.uint16)
    out = _np.empty(bits.shape[0], dtype=_np.float32)
    cdef float[::1] o = out
    cdef int is_f16 = code == "F16"
    if bits.shape[0]:
        with nogil:
            _convert_par(&bits[0], &o[0], bits.shape[0], is_f16, True, nthreads)
    return out


def _from_work(object arr, str code, int nthreads=1):
    """Back to T, rounding to nearest even: exact for the "math in T" kernels (every result is a
    value of T already), the one rounding of the float32-compute kernels' outputs."""
    if code not in ("BF16", "F16"):
        return _v.from_work(arr, code)
    cdef float[::1] a = arr.reshape(-1)
    res = _np.empty(arr.shape, dtype=_v.NUMPY_DTYPES[code])
    cdef unsigned short[::1] r = res.reshape(-1).view(_np.uint16)
    cdef int is_f16 = code == "F16"
    if a.shape[0]:
        with nogil:
            _convert_par(&r[0], &a[0], a.shape[0], is_f16, False, nthreads)
    return res


cdef AttnOpts _opts(dict params, Py_ssize_t Sk):
    cdef AttnOpts o
    o.scale = params["softmax_scale"]
    o.softcap = params.get("softcap") or 0.0
    o.causal = bool(params.get("causal", False))
    o.wl = -1 if params.get("window_size_left") is None else params["window_size_left"]
    o.wr = -1 if params.get("window_size_right") is None else params["window_size_right"]
    o.k_len = Sk if params.get("k_len") is None else min(<Py_ssize_t>params["k_len"], Sk)
    return o


PACKED_BUDGET_BYTES = 32 * 1024 * 1024


cdef Py_ssize_t _kv_chunk(Py_ssize_t per_head, Py_ssize_t itemsize, Py_ssize_t nkv_total):
    """How many kv heads' packed operands to hold at once (at least one, at most all)."""
    cdef Py_ssize_t fit = PACKED_BUDGET_BYTES // max(per_head * itemsize, 1)
    return max(1, min(nkv_total, fit))


cdef object _forward(rnd_t tag, real_t[::1] q, real_t[::1] k, real_t[::1] v, real_t[::1] slopes,
                     bint has_slopes, real_t[::1] out, tuple dims, dict params, int nthreads, bint naive):
    cdef Shape sh
    sh.B, sh.Hq, sh.Hkv, sh.Sq, sh.Sk, sh.D = dims
    if out.shape[0] == 0:
        return
    if sh.Sk == 0 or sh.D == 0:
        out[:] = 0
        return
    cdef AttnOpts o = _opts(params, sh.Sk)
    cdef Py_ssize_t ntiles = ceil_div(sh.Sk, BC)
    cdef Py_ssize_t per_head = ntiles * sh.D * BC
    cdef Py_ssize_t nkv_total = sh.B * sh.Hkv
    cdef Py_ssize_t chunk = _kv_chunk(per_head, sizeof(real_t), nkv_total)
    dt = _work_dtype(<real_t*>NULL)
    cdef real_t[::1] ktp = _np.empty(chunk * per_head, dtype=dt)
    cdef Py_ssize_t ntasks, per_thread, kv0, nkv
    if naive:
        ntasks = chunk * (sh.Hq // sh.Hkv) * ceil_div(sh.Sq, BR_NAIVE)
        per_thread = 2 * BR_NAIVE * sh.D + BR_NAIVE * ntiles * BC
    else:
        ntasks = chunk * (sh.Hq // sh.Hkv) * ceil_div(sh.Sq, BR_FLASH)
        per_thread = 2 * BR_FLASH * sh.D + BR_FLASH * BC + 2 * BR_FLASH
    cdef int nt = <int>min(nthreads, ntasks)
    cdef real_t[::1] scratch = _np.empty(nt * per_thread, dtype=dt)
    cdef real_t* sp = &slopes[0] if has_slopes else NULL
    with nogil:
        # kv heads in chunks, so the packed copy of K stays small however long the sequence
        kv0 = 0
        while kv0 < nkv_total:
            nkv = min(chunk, nkv_total - kv0)
            pack_heads(&k[kv0 * sh.Sk * sh.D], nkv, sh.Sk, sh.D, &ktp[0], nt)
            if naive:
                naive_forward_core(tag, kv0, nkv, &q[0], &ktp[0], &v[0], sp, &out[0], &sh, &o,
                                   &scratch[0], per_thread, nt)
            else:
                flash_forward_core(tag, kv0, nkv, &q[0], &ktp[0], &v[0], sp, &out[0], &sh, &o,
                                   &scratch[0], per_thread, nt)
            kv0 += nkv


cdef object drive_attention_flash(rnd_t tag, real_t[::1] q, real_t[::1] k, real_t[::1] v, real_t[::1] slopes,
                                  bint has_slopes, real_t[::1] out, tuple dims, dict params, int nthreads):
    _forward(tag, q, k, v, slopes, has_slopes, out, dims, params, nthreads, False)


cdef object drive_attention_naive(rnd_t tag, real_t[::1] q, real_t[::1] k, real_t[::1] v, real_t[::1] slopes,
                                  bint has_slopes, real_t[::1] out, tuple dims, dict params, int nthreads):
    _forward(tag, q, k, v, slopes, has_slopes, out, dims, params, nthreads, True)


cdef object drive_attention_paged_naive(rnd_t tag, real_t[::1] q, real_t[::1] kc, real_t[::1] vc,
                                        unsigned int[::1] table, unsigned int[::1] ctx_lens,
                                        real_t[::1] slopes, bint has_slopes, real_t[::1] out,
                                        tuple dims, dict params, int nthreads):
    cdef PagedShape sh
    sh.B, sh.Hq, sh.Hkv, sh.Sq, sh.D, sh.block_size, sh.max_blocks, sh.num_blocks = dims
    if out.shape[0] == 0:
        return
    if sh.D == 0 or sh.max_blocks * sh.block_size == 0:
        out[:] = 0
        return
    paged_split(&sh, nthreads)
    cdef Py_ssize_t ntasks = paged_tasks(&sh)
    cdef Py_ssize_t per_thread = paged_scratch(&sh)
    cdef int nt = <int>min(nthreads, ntasks)
    dt = _work_dtype(<real_t*>NULL)
    cdef real_t[::1] scratch = _np.empty(nt * per_thread, dtype=dt)
    cdef real_t* sp = &slopes[0] if has_slopes else NULL
    cdef double scale = params["softmax_scale"]
    cdef double cap = params.get("softcap") or 0.0
    with nogil:
        paged_forward_core(tag, &q[0], &kc[0], &vc[0], &table[0], &ctx_lens[0], sp, &out[0], &sh,
                           scale, cap, &scratch[0], per_thread, nt)


cdef object drive_attention_flash_backward(rnd_t tag, real_t[::1] q, real_t[::1] k, real_t[::1] v,
                                           real_t[::1] dout, real_t[::1] slopes, bint has_slopes,
                                           real_t[::1] dq, real_t[::1] dk, real_t[::1] dv,
                                           tuple dims, dict params, int nthreads):
    cdef Shape sh
    sh.B, sh.Hq, sh.Hkv, sh.Sq, sh.Sk, sh.D = dims
    if sh.B * sh.Hq * sh.Sq * sh.Sk * sh.D == 0:
        dq[:] = 0
        dk[:] = 0
        dv[:] = 0
        return
    cdef AttnOpts o = _opts(params, sh.Sk)
    cdef Py_ssize_t ntiles = ceil_div(sh.Sk, BC), Skp = ntiles * BC
    cdef Py_ssize_t per_head = ntiles * sh.D * BC
    cdef Py_ssize_t nkv_total = sh.B * sh.Hkv
    cdef Py_ssize_t chunk = _kv_chunk(2 * per_head, sizeof(real_t), nkv_total)
    dt = _work_dtype(<real_t*>NULL)
    cdef real_t[::1] ktp = _np.empty(chunk * per_head, dtype=dt)
    cdef real_t[::1] vtp = _np.empty(chunk * per_head, dtype=dt)
    cdef Py_ssize_t per_thread = 3 * BR_BWD * sh.D + 5 * BR_BWD * Skp + 2 * Skp * sh.D
    cdef int nt = <int>min(nthreads, chunk)
    cdef real_t[::1] scratch = _np.empty(nt * per_thread, dtype=dt)
    cdef real_t* sp = &slopes[0] if has_slopes else NULL
    cdef Py_ssize_t kv0, nkv
    with nogil:
        kv0 = 0
        while kv0 < nkv_total:
            nkv = min(chunk, nkv_total - kv0)
            pack_heads(&k[kv0 * sh.Sk * sh.D], nkv, sh.Sk, sh.D, &ktp[0], nt)
            pack_heads(&v[kv0 * sh.Sk * sh.D], nkv, sh.Sk, sh.D, &vtp[0], nt)
            backward_core(tag, kv0, nkv, &q[0], &k[0], &ktp[0], &vtp[0], &dout[0], sp, &dq[0], &dk[0],
                          &dv[0], &sh, &o, &scratch[0], per_thread, nt)
            kv0 += nkv


def _core_round(float[::1] x, str code):
    """Testing hook: the core's round-to-nearest-even of f32 values to BF16 or F16 (as f32)."""
    out = _np.empty(x.shape[0], dtype=_np.float32)
    cdef float[::1] o = out
    cdef Py_ssize_t i
    if code == "BF16":
        for i in range(x.shape[0]):
            o[i] = fc_round_bf16(x[i])
    elif code == "F16":
        for i in range(x.shape[0]):
            o[i] = fc_round_f16(x[i])
    else:
        raise ValueError(code)
    return out


def _core_round_vec(float[::1] x, str which):
    """Testing hook: the vector roundings of the half-type GEMMs ("bf16-int", "bf16-cvt",
    "bf16-cvt-pair", "f16").  Returns None for the bf16 instruction forms when this build has no
    AVX512-BF16."""
    cdef int w = {"bf16-int": 0, "bf16-cvt": 1, "f16": 2, "bf16-cvt-pair": 3}[which]
    if (w == 1 or w == 3) and not FC_HAVE_BF16_CVT:
        return None
    out = _np.empty(x.shape[0], dtype=_np.float32)
    cdef float[::1] o = out
    if x.shape[0]:
        fc_round_vec_array(&x[0], &o[0], x.shape[0], w)
    return out


# whether the f32 softmax uses the AVX-512 exp (else fc_expf, which flushes below exp(-86.5))
_HAVE_AVX512_EXP = bool(FC_HAVE_EXP16)


def _core_exp_scaled_sum_f32(float[::1] s, float scale, float m):
    """Testing hook: flash f32's in-place s = exp(scale * s - m) and its sum (fc_simd.h)."""
    if s.shape[0] == 0:
        return 0.0
    return fc_exp_scaled_sum_f32(&s[0], s.shape[0], scale, m)


def _core_exp_f64(double[::1] x):
    """Testing hook: the vectorizable exp used by the f64 kernels."""
    out = _np.empty(x.shape[0], dtype=_np.float64)
    cdef double[::1] o = out
    cdef Py_ssize_t i
    for i in range(x.shape[0]):
        o[i] = fc_exp_f64(x[i])
    return out


def _core_expf(float[::1] x):
    """Testing hook: the vectorizable expf used by the f32 kernels."""
    out = _np.empty(x.shape[0], dtype=_np.float32)
    cdef float[::1] o = out
    cdef Py_ssize_t i
    for i in range(x.shape[0]):
        o[i] = fc_expf(x[i])
    return out
