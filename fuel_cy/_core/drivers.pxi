# GIL-side drivers: take validated contiguous work arrays (float for f32/bf16/f16, double for
# f64), allocate packed operands and per-thread scratch as numpy arrays (so a failed allocation is
# a MemoryError, not a crash), then release the GIL for the cores.  Hand-written; included by the
# generated extension.  Inputs are only read (const views, so read-only arrays are accepted; the
# casts to the cores' plain pointers drop a const the cores honour); outputs are fully written.

import threading as _threading

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


# Temporaries that a call overwrites in full and never returns (a half-type call's widened inputs
# and float32 output) are kept between calls, per Python thread: a fresh multi-megabyte array pays
# its page faults on every call (0.5 ms per 2 MB measured on Zen 4 under KVM, 17% of a bf16 flash
# call at B=1 H=8 S=1024 D=64).  Only temporaries up to TEMP_CACHE_BYTES are kept.
TEMP_CACHE_BYTES = 64 * 1024 * 1024
_temps = _threading.local()


def _temp(str slot, object shape, object dtype):
    """An uninitialized array of `shape`, reused by the next call on this thread with the same
    slot: the caller must overwrite it and must not return it."""
    dt = _np.dtype(dtype)
    cdef Py_ssize_t n = 1, s
    for s in shape:
        n *= s
    cdef Py_ssize_t nbytes = n * dt.itemsize
    if nbytes > TEMP_CACHE_BYTES:
        return _np.empty(shape, dtype=dt)
    cache = getattr(_temps, "bufs", None)
    if cache is None:
        cache = _temps.bufs = {}
    buf = cache.get(slot)
    if buf is None or buf.shape[0] < nbytes:
        buf = cache[slot] = _np.empty(max(nbytes, 64), dtype=_np.uint8)
    return buf[:nbytes].view(dt).reshape(shape)


def _work(object x, object npwork, str code, int nthreads=1, str slot=None):
    """The core's flat work array for a float input: bf16/f16 widened to float32 in C (exact),
    into the reused temporary `slot`; other dtypes through _validation.work."""
    if x is None or code not in ("BF16", "F16"):
        return _v.work(x, npwork)
    cdef const unsigned short[::1] bits = _bits(x)
    out = _temp(slot, (bits.shape[0],), _np.float32) if slot is not None else _np.empty(bits.shape[0], dtype=_np.float32)
    cdef float[::1] o = out
    cdef int is_f16 = code == "F16"
    if bits.shape[0]:
        with nogil:
            _convert_par(<unsigned short*>&bits[0], &o[0], bits.shape[0], is_f16, True, nthreads)  # read only
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


from cpython.pythread cimport PyThread_get_thread_ident
import threading as _threading
# Python runs signal handlers only in its main thread, so only calls made there poll for them
cdef unsigned long _MAIN_THREAD = _threading.main_thread().ident


cdef inline int _on_main_thread() noexcept:
    return PyThread_get_thread_ident() == _MAIN_THREAD


cdef AttnOpts _opts(dict params, Py_ssize_t Sk):
    cdef AttnOpts o
    o.scale = params["softmax_scale"]
    o.softcap = params.get("softcap") or 0.0
    o.causal = bool(params.get("causal", False))
    o.wl = -1 if params.get("window_size_left") is None else params["window_size_left"]
    o.wr = -1 if params.get("window_size_right") is None else params["window_size_right"]
    o.k_len = Sk if params.get("k_len") is None else min(<Py_ssize_t>params["k_len"], Sk)
    o.it = NULL   # set by the driver that owns the call
    return o


PACKED_BUDGET_BYTES = 32 * 1024 * 1024


cdef Py_ssize_t _kv_chunk(Py_ssize_t per_head, Py_ssize_t itemsize, Py_ssize_t nkv_total):
    """How many kv heads' packed operands to hold at once (at least one, at most all)."""
    cdef Py_ssize_t fit = PACKED_BUDGET_BYTES // max(per_head * itemsize, 1)
    return max(1, min(nkv_total, fit))


cdef object _forward(rnd_t tag, const real_t[::1] q, const real_t[::1] k, const real_t[::1] v, const real_t[::1] slopes,
                     bint has_slopes, real_t[::1] out, tuple dims, dict params, int nthreads, bint naive,
                     bint bf16_pairs=False):
    """bf16_pairs: q and k hold bf16 values and the flash scores come from vdpbf16ps."""
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
    cdef Py_ssize_t D2 = (sh.D + 1) // 2
    cdef real_t[::1] ktp = _np.empty(1 if bf16_pairs else chunk * per_head, dtype=dt)
    cdef unsigned int[::1] kpp = _np.empty(chunk * ntiles * D2 * BC if bf16_pairs else 1, dtype=_np.uint32)
    cdef unsigned int* kpp_p = &kpp[0] if bf16_pairs else NULL
    cdef Py_ssize_t ntasks, per_thread, kv0, nkv
    if naive:
        ntasks = chunk * (sh.Hq // sh.Hkv) * ceil_div(sh.Sq, BR_NAIVE)
        per_thread = 2 * BR_NAIVE * sh.D + BR_NAIVE * ntiles * BC
    else:
        ntasks = chunk * (sh.Hq // sh.Hkv) * ceil_div(sh.Sq, BR_FLASH)
        per_thread = 2 * BR_FLASH * sh.D + BR_FLASH * BC + 2 * BR_FLASH + BR_FLASH * D2
    cdef int nt = <int>min(nthreads, ntasks)
    cdef real_t[::1] scratch = _np.empty(nt * per_thread, dtype=dt)
    cdef real_t* sp = <real_t*>&slopes[0] if has_slopes else NULL
    cdef fc_interrupt it
    fc_interrupt_init(&it, _on_main_thread())
    o.it = &it
    with nogil:
        # kv heads in chunks, so the packed copy of K stays small however long the sequence
        kv0 = 0
        while kv0 < nkv_total and not fc_stopped(&it):
            nkv = min(chunk, nkv_total - kv0)
            if real_t is float:
                if bf16_pairs:
                    pack_heads_pairs(<float*>&k[kv0 * sh.Sk * sh.D], nkv, sh.Sk, sh.D, kpp_p, nt)
            if not bf16_pairs:
                pack_heads(<real_t*>&k[kv0 * sh.Sk * sh.D], nkv, sh.Sk, sh.D, &ktp[0], nt)
            if naive:
                naive_forward_core(tag, kv0, nkv, <real_t*>&q[0], &ktp[0], <real_t*>&v[0], sp, &out[0], &sh, &o,
                                   &scratch[0], per_thread, nt)
            else:
                flash_forward_core(tag, kv0, nkv, <real_t*>&q[0], &ktp[0], kpp_p, <real_t*>&v[0], sp, &out[0], &sh, &o,
                                   &scratch[0], per_thread, nt)
            kv0 += nkv
    fc_interrupt_raise(&it)


cdef object drive_attention_flash(rnd_t tag, const real_t[::1] q, const real_t[::1] k, const real_t[::1] v, const real_t[::1] slopes,
                                  bint has_slopes, real_t[::1] out, tuple dims, dict params, int nthreads):
    _forward(tag, q, k, v, slopes, has_slopes, out, dims, params, nthreads, False)


cdef object drive_attention_flash_half(RoundNone tag, const float[::1] q, const float[::1] k, const float[::1] v,
                                       const float[::1] slopes, bint has_slopes, float[::1] out, tuple dims,
                                       dict params, int nthreads, int is_f16):
    """Flash attention on bf16/f16 inputs (widened exactly) under float32 compute.  Where the CPU
    level has AVX512-BF16, bf16 scores are vdpbf16ps dot products of the bf16 values (fc_qk_dpbf16);
    otherwise, and for f16, the float32 loops."""
    _forward(tag, q, k, v, slopes, has_slopes, out, dims, params, nthreads, False,
             bool(FC_HAVE_DPBF16) and not is_f16)


cdef object drive_attention_naive(rnd_t tag, const real_t[::1] q, const real_t[::1] k, const real_t[::1] v, const real_t[::1] slopes,
                                  bint has_slopes, real_t[::1] out, tuple dims, dict params, int nthreads):
    _forward(tag, q, k, v, slopes, has_slopes, out, dims, params, nthreads, True)


cdef object _paged(rnd_t tag, const real_t[::1] q, const real_t[::1] kc, const real_t[::1] vc,
                   const unsigned short[::1] kc16, const unsigned short[::1] vc16, int is_f16,
                   const unsigned int[::1] table, const unsigned int[::1] ctx_lens, const real_t[::1] slopes,
                   bint has_slopes, real_t[::1] out, tuple dims, dict params, int nthreads):
    """Paged decode over a pool in the work type (kc, vc) or, under float32 compute, over a
    bf16/f16 pool read in place (kc16, vc16; kc and vc are then None)."""
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
    cdef real_t* sp = <real_t*>&slopes[0] if has_slopes else NULL
    cdef real_t* kcp = <real_t*>&kc[0] if kc is not None else NULL
    cdef real_t* vcp = <real_t*>&vc[0] if vc is not None else NULL
    cdef const unsigned short* kc16p = &kc16[0] if kc16 is not None else NULL
    cdef const unsigned short* vc16p = &vc16[0] if vc16 is not None else NULL
    cdef double scale = params["softmax_scale"]
    cdef double cap = params.get("softcap") or 0.0
    cdef fc_interrupt it
    fc_interrupt_init(&it, _on_main_thread())
    sh.it = &it
    with nogil:
        paged_forward_core(tag, <real_t*>&q[0], kcp, vcp, kc16p, vc16p, is_f16, <unsigned int*>&table[0],
                           <unsigned int*>&ctx_lens[0], sp, &out[0], &sh, scale, cap, &scratch[0], per_thread, nt)
    fc_interrupt_raise(&it)


cdef object drive_attention_paged_naive(rnd_t tag, const real_t[::1] q, const real_t[::1] kc, const real_t[::1] vc,
                                        const unsigned int[::1] table, const unsigned int[::1] ctx_lens,
                                        const real_t[::1] slopes, bint has_slopes, real_t[::1] out,
                                        tuple dims, dict params, int nthreads):
    cdef const unsigned short[::1] no_half_pool = None
    _paged(tag, q, kc, vc, no_half_pool, no_half_pool, 0, table, ctx_lens, slopes, has_slopes, out, dims, params,
           nthreads)


cdef object drive_attention_paged_half(RoundNone tag, const float[::1] q, const unsigned short[::1] kc,
                                       const unsigned short[::1] vc, const unsigned int[::1] table,
                                       const unsigned int[::1] ctx_lens, const float[::1] slopes, bint has_slopes,
                                       float[::1] out, tuple dims, dict params, int nthreads, int is_f16):
    """Paged decode over a bf16/f16 pool under float32 compute, read in place: no widened copy of
    the pool (the cores widen each group of keys as they go, exactly), so a decode step reads the
    cache at two bytes an element.  Same bits as drive_attention_paged_naive on the widened pool."""
    cdef const float[::1] no_pool = None
    _paged(tag, q, no_pool, no_pool, kc, vc, is_f16, table, ctx_lens, slopes, has_slopes, out, dims, params,
           nthreads)


def _bits(object x):
    """A bf16/f16 input's storage as a flat uint16 view (no copy of a contiguous input)."""
    return _np.ascontiguousarray(x).reshape(-1).view(_np.uint16)


cdef object _backward(rnd_t tag, const real_t[::1] q, const real_t[::1] k, const real_t[::1] v, const real_t[::1] dout,
                      const real_t[::1] slopes, bint has_slopes, real_t[::1] dq, real_t[::1] dk, real_t[::1] dv,
                      tuple dims, dict params, int nthreads, bint bf16_pairs):
    """bf16_pairs: q, k, v and dout hold bf16 values; S and dP come from vdpbf16ps."""
    cdef Shape sh
    sh.B, sh.Hq, sh.Hkv, sh.Sq, sh.Sk, sh.D = dims
    if sh.B * sh.Hq * sh.Sq * sh.Sk * sh.D == 0:
        dq[:] = 0
        dk[:] = 0
        dv[:] = 0
        return
    cdef AttnOpts o = _opts(params, sh.Sk)
    cdef Py_ssize_t ntiles = ceil_div(sh.Sk, BC), Skp = ntiles * BC
    cdef Py_ssize_t per_head = ntiles * sh.D * BC, D2 = (sh.D + 1) // 2
    cdef Py_ssize_t nkv_total = sh.B * sh.Hkv
    cdef Py_ssize_t chunk = _kv_chunk(2 * per_head, sizeof(real_t), nkv_total)
    dt = _work_dtype(<real_t*>NULL)
    cdef Py_ssize_t packed = 1 if bf16_pairs else chunk * per_head
    cdef real_t[::1] ktp = _np.empty(packed, dtype=dt)
    cdef real_t[::1] vtp = _np.empty(packed, dtype=dt)
    cdef Py_ssize_t pairs = chunk * ntiles * D2 * BC if bf16_pairs else 1
    cdef unsigned int[::1] kpp = _np.empty(pairs, dtype=_np.uint32)
    cdef unsigned int[::1] vpp = _np.empty(pairs, dtype=_np.uint32)
    cdef unsigned int* kpp_p = &kpp[0] if bf16_pairs else NULL
    cdef unsigned int* vpp_p = &vpp[0] if bf16_pairs else NULL
    cdef Py_ssize_t per_thread = 3 * BR_BWD * sh.D + 5 * BR_BWD * Skp + 2 * Skp * sh.D + 2 * BR_BWD * D2
    cdef int nt = <int>min(nthreads, chunk)
    cdef real_t[::1] scratch = _np.empty(nt * per_thread, dtype=dt)
    cdef real_t* sp = <real_t*>&slopes[0] if has_slopes else NULL
    cdef Py_ssize_t kv0, nkv
    cdef fc_interrupt it
    fc_interrupt_init(&it, _on_main_thread())
    o.it = &it
    with nogil:
        kv0 = 0
        while kv0 < nkv_total and not fc_stopped(&it):
            nkv = min(chunk, nkv_total - kv0)
            if real_t is float:
                if bf16_pairs:
                    pack_heads_pairs(<float*>&k[kv0 * sh.Sk * sh.D], nkv, sh.Sk, sh.D, kpp_p, nt)
                    pack_heads_pairs(<float*>&v[kv0 * sh.Sk * sh.D], nkv, sh.Sk, sh.D, vpp_p, nt)
            if not bf16_pairs:
                pack_heads(<real_t*>&k[kv0 * sh.Sk * sh.D], nkv, sh.Sk, sh.D, &ktp[0], nt)
                pack_heads(<real_t*>&v[kv0 * sh.Sk * sh.D], nkv, sh.Sk, sh.D, &vtp[0], nt)
            backward_core(tag, kv0, nkv, <real_t*>&q[0], <real_t*>&k[0], &ktp[0], &vtp[0], kpp_p, vpp_p,
                          <real_t*>&dout[0], sp,
                          &dq[0], &dk[0], &dv[0], &sh, &o, &scratch[0], per_thread, nt)
            kv0 += nkv
    fc_interrupt_raise(&it)


cdef object drive_attention_flash_backward(rnd_t tag, const real_t[::1] q, const real_t[::1] k, const real_t[::1] v,
                                           const real_t[::1] dout, const real_t[::1] slopes, bint has_slopes,
                                           real_t[::1] dq, real_t[::1] dk, real_t[::1] dv,
                                           tuple dims, dict params, int nthreads):
    _backward(tag, q, k, v, dout, slopes, has_slopes, dq, dk, dv, dims, params, nthreads, False)


cdef object drive_attention_flash_backward_half(RoundNone tag, const float[::1] q, const float[::1] k, const float[::1] v,
                                                const float[::1] dout, const float[::1] slopes, bint has_slopes,
                                                float[::1] dq, float[::1] dk, float[::1] dv,
                                                tuple dims, dict params, int nthreads, int is_f16):
    """The backward on bf16/f16 inputs (widened exactly) under float32 compute: with AVX512-BF16,
    bf16 S = Q K^T and dP = dO V^T are vdpbf16ps dot products; the three products with P and dS
    (float32 values) stay float32 FMAs."""
    _backward(tag, q, k, v, dout, slopes, has_slopes, dq, dk, dv, dims, params, nthreads,
              bool(FC_HAVE_DPBF16) and not is_f16)


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


# whether bf16 flash scores under float32 compute come from vdpbf16ps (fc_qk_dpbf16)
_HAVE_DPBF16 = bool(FC_HAVE_DPBF16)


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


def _core_qk_dpbf16(float[:, ::1] q, float[:, ::1] k):
    """Testing hook: fc_qk_dpbf16's scores S [rows, keys] for bf16-valued q [rows, D] and k
    [keys <= 128, D].  None when this level has no AVX512-BF16."""
    if not FC_HAVE_DPBF16:
        return None
    cdef Py_ssize_t nr = q.shape[0], D = q.shape[1], n = k.shape[0], j
    cdef Py_ssize_t nr4 = (nr + NR - 1) // NR * NR, D2 = (D + 1) // 2
    if n > BC or k.shape[1] != D or D == 0:
        raise ValueError("k must be [<= 128, D], D > 0")
    qpad = _np.zeros((max(nr4, 1), max(D, 1)), dtype=_np.float32)
    qpad[:nr, :D] = q
    cdef float[:, ::1] qp = qpad
    cdef unsigned int[::1] qpairs = _np.zeros(max(nr4, 1) * D2 + 1, dtype=_np.uint32)
    cdef unsigned int[::1] kpairs = _np.zeros(D2 * BC + 1, dtype=_np.uint32)
    s = _np.zeros((max(nr4, 1), BC), dtype=_np.float32)
    cdef float[:, ::1] sv = s
    cdef float* rows[BC]
    for j in range(n):
        rows[j] = &k[j, 0]
    fc_pair_rows_bf16(&qp[0, 0], nr4, D, &qpairs[0], D2)
    fc_pack_k_pairs_bf16(rows, n, D, &kpairs[0])
    fc_qk_dpbf16(&qpairs[0], nr4, D2, &kpairs[0], &sv[0, 0], BC, n)
    return s[:nr, :n].copy()
