# GIL-side drivers: take the data of validated contiguous work arrays (float for f32/bf16/f16,
# double for f64) as pointers, take packed operands and per-thread scratch from one buffer (a
# numpy array, so a failed allocation is a MemoryError, not a crash), then release the GIL for the
# cores.  Hand-written; included by the generated extension after kernels.pxi; the drive_*
# functions that the generated entries call are in drivers_api.pxi.  Inputs are only read (const
# pointers, so read-only arrays are accepted; the casts to the cores' plain pointers drop a const
# the cores honour); outputs are fully written.  Every size the cores touch follows from `dims`,
# which the generated entries read from the arrays the validators checked.

import threading as _threading

import numpy as _np
cimport numpy as cnp
from cpython.pythread cimport PyThread_get_thread_ident
from cython.parallel cimport prange
from libc.string cimport memcpy, memset
from libc.stdlib cimport qsort

from fuel_cy.runtime import _validation as _v

cnp.import_array()


cdef inline void* _data(object x, int typenum, int typenum2=-1) except NULL:
    """The data of an input the entry hands to a driver: a C-contiguous, native-order ndarray of
    the work type.  The validators guarantee it; the check keeps the core memory-safe when an
    entry is called directly, and costs a few compares."""
    cdef int t
    if not cnp.PyArray_Check(x):
        raise ValueError("fuel_cy core: an input reached the core unvalidated (not a numpy array)")
    t = cnp.PyArray_TYPE(<cnp.ndarray>x)
    if ((t != typenum and t != typenum2) or not cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>x)
            or not cnp.PyArray_ISNOTSWAPPED(<cnp.ndarray>x)):
        raise ValueError("fuel_cy core: an input reached the core unvalidated (not a C-contiguous "
                         "array of its work type)")
    return cnp.PyArray_DATA(<cnp.ndarray>x)


cdef bint _element_strides(object x, int nd, Py_ssize_t* out) noexcept:
    """out[0:nd] = the element strides of a validated nd-dim work array whose last axis is
    unit-stride and whose strides are non-negative multiples of its itemsize (0 along an axis of
    extent <= 1, never stepped along; all 0 for an empty array, which nothing reads); False when x
    is not such an array (the entry then passes a C-contiguous copy).  Written into C, not a tuple:
    a decode call's glue built and compared tuples for a third of its time."""
    if not cnp.PyArray_Check(x) or cnp.PyArray_NDIM(<cnp.ndarray>x) != nd or not cnp.PyArray_ISNOTSWAPPED(<cnp.ndarray>x):
        return False
    cdef Py_ssize_t item = cnp.PyArray_ITEMSIZE(<cnp.ndarray>x), st
    cdef int a
    cdef bint empty = cnp.PyArray_SIZE(<cnp.ndarray>x) == 0
    for a in range(nd):
        st = cnp.PyArray_STRIDE(<cnp.ndarray>x, a)
        if empty or cnp.PyArray_DIM(<cnp.ndarray>x, a) <= 1:
            st = 0
        elif st < 0 or st % item or (a == nd - 1 and st != item):
            return False
        out[a] = st // item
    return True


cdef bint _row_strides(object x, Py_ssize_t* out) noexcept:
    """out[0:3] = the (batch, head, row) element strides of a 4-D work array (_element_strides)."""
    cdef Py_ssize_t st[4]
    if not _element_strides(x, 4, st):
        return False
    out[0], out[1], out[2] = st[0], st[1], st[2]
    return True


cdef inline void* _data_rows(object x, int typenum) except NULL:
    """The data of a validated input the entry hands to a strided driver: a native-order ndarray
    of the work type with unit-stride rows (_row_strides); the check keeps the core memory-safe."""
    cdef Py_ssize_t st[3]
    if not cnp.PyArray_Check(x) or cnp.PyArray_TYPE(<cnp.ndarray>x) != typenum or not _row_strides(x, st):
        raise ValueError("fuel_cy core: an input reached the core unvalidated (not an array of its work "
                         "type with unit-stride rows)")
    return cnp.PyArray_DATA(<cnp.ndarray>x)


cdef bint _rows_heads(object x, Py_ssize_t* sr, Py_ssize_t* sh) noexcept:
    """sr, sh = the element strides of a row and of a head of a validated [T, H, D] work array, or
    of a [NB, BS, H, D] one whose NB * BS rows are evenly spaced (_element_strides); False when x
    is not such an array (the entry then passes a C-contiguous copy)."""
    cdef Py_ssize_t st[4]
    cdef int nd = cnp.PyArray_NDIM(<cnp.ndarray>x) if cnp.PyArray_Check(x) else 0
    if (nd != 3 and nd != 4) or not _element_strides(x, nd, st):
        return False
    sh[0] = st[nd - 2]
    if nd == 3 or cnp.PyArray_DIM(<cnp.ndarray>x, 0) <= 1 or cnp.PyArray_SIZE(<cnp.ndarray>x) == 0:
        sr[0] = st[nd - 3]           # one row axis, or one block (or nothing to read)
    elif cnp.PyArray_DIM(<cnp.ndarray>x, 1) <= 1:
        sr[0] = st[0]                # blocks of one row
    elif st[0] == cnp.PyArray_DIM(<cnp.ndarray>x, 1) * st[1]:
        sr[0] = st[1]
    else:
        return False
    return True


cdef inline void* _data_strided(object x, int typenum) except NULL:
    """The data of a validated input that a driver reads through the strides the entry found
    (_rows_heads); the check keeps the core memory-safe."""
    if (not cnp.PyArray_Check(x) or cnp.PyArray_TYPE(<cnp.ndarray>x) != typenum
            or not cnp.PyArray_ISNOTSWAPPED(<cnp.ndarray>x)):
        raise ValueError("fuel_cy core: an input reached the core unvalidated (not an array of its work type)")
    return cnp.PyArray_DATA(<cnp.ndarray>x)


cdef inline Py_ssize_t _dim(object x, int axis):
    return cnp.PyArray_DIM(<cnp.ndarray>x, axis)


cdef inline object _empty_as(object src, int typenum):
    """A fresh C-contiguous array of src's shape (src is a validated ndarray)."""
    return cnp.PyArray_EMPTY(cnp.PyArray_NDIM(<cnp.ndarray>src), cnp.PyArray_DIMS(<cnp.ndarray>src), typenum, 0)


cdef inline Py_ssize_t _up64(Py_ssize_t nbytes) noexcept nogil:
    return (nbytes + 63) // 64 * 64


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


cdef object _cached(str slot, Py_ssize_t nbytes):
    """A byte buffer of at least `nbytes`, kept for the next call on this Python thread under
    `slot` while it is at most TEMP_CACHE_BYTES (fresh above that).  Its user overwrites what it
    reads and never returns the buffer itself."""
    if nbytes > TEMP_CACHE_BYTES:
        return _np.empty(nbytes, dtype=_np.uint8)
    cache = getattr(_temps, "bufs", None)
    if cache is None:
        cache = _temps.bufs = {}
    buf = cache.get(slot)
    if buf is None or cnp.PyArray_DIM(<cnp.ndarray>buf, 0) < nbytes:
        buf = cache[slot] = _np.empty(max(nbytes, 4096), dtype=_np.uint8)
    return buf


def _temp(str slot, object shape, object dtype):
    """An uninitialized array of `shape`, reused by the next call on this thread with the same
    slot: the caller must overwrite it and must not return it."""
    dt = _np.dtype(dtype)
    cdef cnp.npy_intp dims[8]
    cdef int nd = len(shape), a
    if nd > 8:
        raise ValueError("fuel_cy core: a temporary of rank > 8")
    for a in range(nd):
        dims[a] = shape[a]
    return _temp_c(slot, nd, dims, dt.num)


cdef object _temp_c(str slot, int nd, const cnp.npy_intp* dims, int typenum):
    """_temp in C: the array of the last call with this slot when it has this dtype and shape (a
    decode step asks for the same ones every step), else a view of the slot's cached buffer.  Its
    user overwrites it and never returns it."""
    cache = getattr(_temps, "arrays", None)
    if cache is None:
        cache = _temps.arrays = {}
    last = cache.get(slot)
    cdef int a
    cdef bint same = last is not None and cnp.PyArray_TYPE(<cnp.ndarray>last) == typenum and cnp.PyArray_NDIM(<cnp.ndarray>last) == nd
    if same:
        for a in range(nd):
            if cnp.PyArray_DIM(<cnp.ndarray>last, a) != dims[a]:
                same = False
                break
    if same:
        return last
    cdef Py_ssize_t n = 1
    for a in range(nd):
        n *= dims[a]
    dt = _np.dtype(cnp.PyArray_TypeObjectFromType(typenum))
    cdef Py_ssize_t nbytes = n * dt.itemsize
    arr = _cached(slot, nbytes)[:nbytes].view(dt).reshape(tuple(dims[a] for a in range(nd)))
    if nbytes <= TEMP_CACHE_BYTES:
        cache[slot] = arr
    return arr


cdef object _scratch(str slot, Py_ssize_t nbytes):
    """One call's packed operands and per-thread scratch: `nbytes` plus room to align them to 64
    bytes (_aligned)."""
    return _cached(slot, nbytes + 64)


cdef inline char* _aligned(object buf):
    cdef size_t p = <size_t>cnp.PyArray_DATA(<cnp.ndarray>buf)
    return <char*>((p + 63) // 64 * 64)


def _work(object x, object npwork, str code, int nthreads=1, str slot=None):
    """The core's flat work array for a float input: bf16/f16 widened to float32 in C (exact),
    into the reused temporary `slot`; other dtypes through _validation.work."""
    cdef int is_f16 = half_flag(code) if x is not None else -1  # _core_dtypes.pxi: -1 unless 16-bit
    if is_f16 < 0:
        return _v.work(x, npwork)
    if not (cnp.PyArray_Check(x) and cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>x) and cnp.PyArray_ITEMSIZE(<cnp.ndarray>x) == 2):
        x = _np.ascontiguousarray(x)   # (a strided view of a 16-bit input: one copy of its bits)
    cdef cnp.npy_intp n = cnp.PyArray_SIZE(<cnp.ndarray>x)
    out = _temp_c(slot, 1, &n, cnp.NPY_FLOAT32) if slot is not None else cnp.PyArray_EMPTY(1, &n, cnp.NPY_FLOAT32, 0)
    cdef unsigned short* h = <unsigned short*>cnp.PyArray_DATA(<cnp.ndarray>x)
    cdef float* f = <float*>cnp.PyArray_DATA(<cnp.ndarray>out)
    if n:
        with nogil:
            _convert_par(h, f, n, is_f16, True, nthreads)  # read only
    return out


def _from_work(object arr, str code, int nthreads=1):
    """Back to T, rounding to nearest even: exact for the "math in T" kernels (every result is a
    value of T already), the one rounding of the float32-compute kernels' outputs."""
    cdef int is_f16 = half_flag(code)
    if is_f16 < 0:
        return _v.from_work(arr, code)
    if not (cnp.PyArray_Check(arr) and cnp.PyArray_TYPE(<cnp.ndarray>arr) == cnp.NPY_FLOAT32
            and cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>arr)):
        arr = _np.ascontiguousarray(arr, dtype=_np.float32)
    res = cnp.PyArray_EMPTY(cnp.PyArray_NDIM(<cnp.ndarray>arr), cnp.PyArray_DIMS(<cnp.ndarray>arr),
                            _half_typenum(code), 0)
    cdef Py_ssize_t n = cnp.PyArray_SIZE(<cnp.ndarray>arr)
    cdef float* a = <float*>cnp.PyArray_DATA(<cnp.ndarray>arr)
    cdef unsigned short* r = <unsigned short*>cnp.PyArray_DATA(<cnp.ndarray>res)
    if n:
        with nogil:
            _convert_par(r, a, n, is_f16, False, nthreads)
    return res


cdef dict _HALF_TYPENUMS = {}


cdef int _half_typenum(str code) except -1:
    """The numpy type number of a 16-bit contract dtype (ml_dtypes' bfloat16 has no constant)."""
    num = _HALF_TYPENUMS.get(code)
    if num is None:
        num = _HALF_TYPENUMS[code] = _np.dtype(_v.NUMPY_DTYPES[code]).num
    return num


# Python runs signal handlers only in its main thread, so only calls made there poll for them
cdef unsigned long _MAIN_THREAD = _threading.main_thread().ident


cdef inline int _on_main_thread() noexcept:
    return PyThread_get_thread_ident() == _MAIN_THREAD


cdef Py_ssize_t _window(object w, Py_ssize_t extent):
    """A window as the core holds it: -1 for none, and for one that reaches past every position
    it could mask (a usize up to 2**64 - 1, validated), so that no index sum near 2**63 wraps."""
    if w is None or w >= extent:
        return -1
    return <Py_ssize_t>w


cdef AttnOpts _opts(dict params, Py_ssize_t Sq, Py_ssize_t Sk, Py_ssize_t shift=0):
    """shift: query row i sits at key position p = i + shift (0: top-left; Sk - Sq: bottom-right)."""
    cdef AttnOpts o
    o.scale = params["softmax_scale"]
    o.softcap = params.get("softcap") or 0.0
    o.causal = bool(params.get("causal", False))
    o.shift = shift
    # key j is masked for the position p when j + left < p (p < shift + Sq) or j > p + right
    # (j < Sk, p >= shift): a window past every such position masks nothing
    o.wl = _window(params.get("window_size_left"), max(shift + Sq, 0))
    o.wr = _window(params.get("window_size_right"), max(Sk - shift, 0))
    o.k_len = Sk if params.get("k_len") is None else min(params["k_len"], Sk)
    o.it = NULL   # set by the driver that owns the call
    o.alibi_abs = 0
    o.k_rows = 0
    o.k_tiles = 0
    o.k16 = o.v16 = NULL
    o.kp16 = o.vp16 = NULL
    o.vt16 = NULL
    o.is_f16 = 0
    o.ktable = NULL
    o.kbs = 0
    o.lse = NULL
    o.lse_ld = 0
    o.mask = NULL
    o.bias = NULL
    o.m_sb = o.m_sh = o.m_si = o.a_sb = o.a_sh = o.a_si = 0
    o.round_p = 0   # set by the half-type drivers (_round_p)
    o.f16s = 0      # set by _forward
    o.bwd_rows = 0  # set by _backward
    o.q16 = NULL
    o.out16 = NULL
    return o


cdef bint _pairs16_v(int round_p) noexcept:
    """Whether the bf16 flash's P V reads V in its storage: its pairs only (round_p to bf16 on
    vdpbf16ps), or on the tiles its pairs and, at the tiles' edges, its rows (AttnOpts.vt16), so
    V is paired straight from its storage and never widened into a copy."""
    return bool(FC_HAVE_DPBF16) and (round_p == 1 or fc_bf16_on_tiles())


# the f16 split words on the tiles (_test_f16_split turns them off: the float32 loops)
cdef bint _f16_split_allowed = True


cdef bint _f16_split(int round_p) noexcept:
    """Whether the f16 flash's products run on the tiles from each value's two exact bf16 terms
    (fc_f16_tiles.h): round_p's f16 weights (2) where the bf16 products take the tiles.  The entry
    also needs q, k and v finite (fc_f16_all_finite: an infinity does not split)."""
    return _f16_split_allowed and bool(FC_HAVE_DPBF16) and round_p == 2 and fc_bf16_on_tiles()


cdef int _round_p(dict params, int is_f16):
    """AttnOpts.round_p for a half-type call: the contract's `round_p`, in T's terms."""
    return (2 if is_f16 else 1) if params.get("round_p") else 0


cdef void _layouts(Shape* sh, const Py_ssize_t* strides) noexcept:
    """sh's operand layouts: C-contiguous, or the (batch, head, row) element strides of q, k, v
    and out, in that order.  (No stacked query rows unless the driver says so: Shape.stack.)"""
    sh.stack = 0
    sh.hpt = 1
    sh.lq = contiguous_layout(sh.Hq, sh.Sq, sh.D)
    sh.lo = sh.lq
    sh.lk = contiguous_layout(sh.Hkv, sh.Sk, sh.D)
    sh.lv = sh.lk
    if strides == NULL:
        return
    sh.lq.sb, sh.lq.sh, sh.lq.ss = strides[0], strides[1], strides[2]
    sh.lk.sb, sh.lk.sh, sh.lk.ss = strides[3], strides[4], strides[5]
    sh.lv.sb, sh.lv.sh, sh.lv.ss = strides[6], strides[7], strides[8]
    sh.lo.sb, sh.lo.sh, sh.lo.ss = strides[9], strides[10], strides[11]


cdef void _zero_rows(char* out, size_t itemsize, Shape* sh) noexcept nogil:
    """Every row of out (elements of itemsize bytes, laid out as sh.lo says) set to zero: no key
    to attend (+0 is all zero bits in every float type, bf16 and f16 included)."""
    cdef Py_ssize_t head, i
    if sh.lo.ss == sh.D and sh.lo.sh == sh.Sq * sh.D and sh.lo.sb == sh.Hq * sh.Sq * sh.D:
        memset(out, 0, sh.B * sh.Hq * sh.Sq * sh.D * itemsize)
        return
    for head in range(sh.B * sh.Hq):
        for i in range(sh.Sq):
            memset(out + row_offset(&sh.lo, head, i) * itemsize, 0, sh.D * itemsize)


cdef inline void _mask_strides(tuple mdims, Shape* sh, Py_ssize_t* sb, Py_ssize_t* shd, Py_ssize_t* si):
    """The element strides of a [MB, MH, MQ, Sk] mask broadcast to [B, Hq, Sq, Sk] (validated:
    each dim is 1 or the extent), 0 along a broadcast dim."""
    cdef Py_ssize_t MB, MH, MQ
    MB, MH, MQ = mdims
    si[0] = sh.Sk if MQ != 1 else 0
    shd[0] = MQ * sh.Sk if MH != 1 else 0
    sb[0] = MH * MQ * sh.Sk if MB != 1 else 0


PACKED_BUDGET_BYTES = 32 * 1024 * 1024


cdef Py_ssize_t _kv_chunk(Py_ssize_t per_head, Py_ssize_t itemsize, Py_ssize_t nkv_total):
    """How many kv heads' packed operands to hold at once (at least one, at most all)."""
    cdef Py_ssize_t fit = PACKED_BUDGET_BYTES // max(per_head * itemsize, 1)
    return max(1, min(nkv_total, fit))


cdef enum:
    SMALL_WORK = 1 << 18   # multiply-adds below which a call runs on the calling thread alone


cdef extern from "Python.h":
    Py_ssize_t PY_SSIZE_T_MAX


cdef inline Py_ssize_t _sat_mul(Py_ssize_t a, Py_ssize_t b) noexcept nogil:
    """a * b (both >= 0), saturating at PY_SSIZE_T_MAX: work estimates multiply the dims of
    several arrays, whose product can pass 2**63 though each array's own size cannot."""
    if a == 0 or b == 0:
        return 0
    return PY_SSIZE_T_MAX if a > PY_SSIZE_T_MAX // b else a * b


cdef inline int _threads_for(int nthreads, Py_ssize_t macs) noexcept nogil:
    """Waking the OpenMP team costs more than a decode-sized call's math; results never depend
    on the thread count, so small calls run on one thread."""
    return 1 if macs < SMALL_WORK else nthreads


# a paged chunk's tasks pack their own K^T tiles (AttnOpts.k_tiles; _test_chunk_k_tiles turns it
# off: a packing pass first, the same bits)
cdef bint _k_tiles_allowed = True


cdef inline bint _pairs_in_task(bint bf16_pairs, const unsigned short* k_h16, const unsigned short* v_h16) noexcept:
    """Whether a bf16-pairs flash whose K and V are in their 16-bit storage may pair each tile in
    its task (AttnOpts.kp16): its P V runs on V's pairs alone (v_h16), on vdpbf16ps, not on AMX
    tiles."""
    return bf16_pairs and k_h16 != NULL and v_h16 != NULL and FC_HAVE_DPBF16 and not fc_bf16_on_tiles()


cdef object _forward(rnd_t tag, const real_t* q, const real_t* k, const real_t* v, const real_t* slopes,
                     real_t* out, tuple dims, dict params, int nthreads, bint naive,
                     bint bf16_pairs=False, Py_ssize_t shift=0, const unsigned char* mask=NULL,
                     const real_t* bias=NULL, tuple mask_dims=None, bint alibi_abs=False, const Py_ssize_t* strides=NULL,
                     float* lse=NULL, Py_ssize_t lse_ld=0, const unsigned short* k16=NULL,
                     const unsigned short* v16=NULL, int is_f16=0, const unsigned int* ktable=NULL,
                     Py_ssize_t kbs=0, int round_p=0, const unsigned short* q_h16=NULL,
                     const unsigned short* k_h16=NULL, const unsigned short* v_h16=NULL,
                     unsigned short* out_h16=NULL):
    """bf16_pairs: q and k hold bf16 values and the flash scores come from vdpbf16ps (or AMX tiles:
    fc_amx.h).  shift: the masks' alignment (_opts).  mask, bias: attention_masked's [MB, MH, MQ,
    Sk] boolean mask and additive bias (flash only), mask_dims (MB, MH, MQ, AB, AH, AQ) their
    leading dims.  strides: the element strides (batch, head, row) of q, k, v and out, 12 in
    all (flash only; the rows' D elements adjacent); None: C-contiguous.  lse: where the flash
    forward writes each row's log-sum-exp (AttnOpts.lse, lse_ld), or NULL.  k16, v16: a decode
    step (Sq == 1) under float32 compute reads K and V in their bf16/f16 storage (is_f16) where
    they lie, laid out as `strides` says (k and v are then NULL; AttnOpts.k16).  ktable, kbs: a
    paged pool's table row (the rows `strides` steps by are the pool's): a decode step reads its
    keys through it (AttnOpts.ktable); with more query rows (a varlen chunk) K (or its pairs from
    k_h16) is packed through it and V's rows are read (float32/float64) or paired (v_h16) through
    it, so no gathered copy is made.  round_p: AttnOpts.round_p (_round_p; float32 compute only).  q_h16,
    k_h16, v_h16, out_h16 (the float32-compute flash on bf16/f16 inputs, is_f16, Sq > 1): q and
    k read in their 16-bit storage (paired, or widened as K is packed) and the output written
    rounded to T (q, k, out then NULL; each laid out as `strides` says, as varlen's sequences):
    no widened copies; k_h16 alone (k NULL) with a float32 q and out; v_h16 (v then NULL)
    only where V's bf16 pairs are all the P V reads (round_p on vdpbf16ps, _pairs16_v)."""
    cdef Shape sh
    sh.B, sh.Hq, sh.Hkv, sh.Sq, sh.Sk, sh.D = dims
    # f16 with V in its storage under round_p on the tiles: the split words (fc_f16_tiles.h), which
    # take the bf16 pairs' buffers and paths with 2D words per key for K and BC rows for V per key tile
    cdef bint f16s = is_f16 == 1 and v_h16 != NULL and not bf16_pairs and _f16_split(round_p)
    if k16 != NULL and (naive or bf16_pairs or sh.Sq != 1 or real_t is not float or rnd_t is not RoundNone):
        raise ValueError("fuel_cy core: 16-bit K and V are read in place by the float32-compute decode only")
    # a paged pool: a decode step reads its rows where they lie; more query rows (a varlen chunk)
    # pack K (or its pairs) through the table and read V's rows (or pair them) through it
    if ktable != NULL and (naive or rnd_t is not RoundNone or kbs <= 0 or (sh.Sq == 1 and bf16_pairs)
                           or (bf16_pairs and (k_h16 == NULL or v_h16 == NULL))
                           or (sh.Sq != 1 and not bf16_pairs and (k16 != NULL or k_h16 != NULL))):
        raise ValueError("fuel_cy core: a paged pool is read by the float32/float64-policy decode, "
                         "or packed from by the flash with float32/float64 or bf16-pair rows")
    if naive and strides != NULL:
        raise ValueError("fuel_cy core: the naive forward reads C-contiguous operands only")
    if ((q_h16 != NULL and k_h16 == NULL) or (q_h16 != NULL) != (out_h16 != NULL)
            or (k_h16 != NULL and (real_t is not float or rnd_t is not RoundNone or naive or sh.Sq == 1
                                   or k16 != NULL or k != NULL))
            or (q_h16 != NULL and (q != NULL or out != NULL))
            or (v_h16 != NULL and (k_h16 == NULL or v != NULL
                                   or not ((bf16_pairs and _pairs16_v(round_p)) or f16s)))
            or (k_h16 != NULL and v_h16 == NULL and v == NULL)):
        raise ValueError("fuel_cy core: bf16 storage is read in place by the bf16-pairs flash forward only")
    if f16s and (ktable != NULL or naive or sh.Sq == 1):
        raise ValueError("fuel_cy core: the f16 split words are the flash forward's with more than one query row")
    bf16_pairs = bf16_pairs or f16s
    _layouts(&sh, strides)
    cdef Py_ssize_t nout = sh.B * sh.Hq * sh.Sq * sh.D
    if nout == 0:
        return
    if sh.Sk == 0 or sh.D == 0:
        if out_h16 != NULL:
            _zero_rows(<char*>out_h16, sizeof(unsigned short), &sh)
        else:
            _zero_rows(<char*>out, sizeof(real_t), &sh)
        return
    nthreads = _threads_for(nthreads, _sat_mul(nout, sh.Sk))
    cdef AttnOpts o = _opts(params, sh.Sq, sh.Sk, shift)
    # few query rows with GQA: a kv head's query heads share its tiles (K and V read once for them);
    # not with masks (their rows are addressed by one step) nor under math in T
    sh.stack = rnd_t is RoundNone and not naive and mask == NULL and bias == NULL
    o.alibi_abs = alibi_abs
    o.k16 = k16
    o.v16 = v16
    o.is_f16 = is_f16
    o.ktable = ktable
    o.kbs = kbs
    if round_p and (real_t is not float or rnd_t is not RoundNone or naive):
        raise ValueError("fuel_cy core: round_p is a float32-compute flash mode")
    o.round_p = round_p
    o.f16s = f16s
    o.q16 = q_h16
    o.out16 = out_h16
    if lse != NULL:
        if naive:
            raise ValueError("fuel_cy core: the naive forward has no log-sum-exp output")
        o.lse = lse
        o.lse_ld = lse_ld
    if mask != NULL:
        o.mask = mask
        _mask_strides(mask_dims[:3], &sh, &o.m_sb, &o.m_sh, &o.m_si)
    if bias != NULL:
        o.bias = bias
        _mask_strides(mask_dims[3:], &sh, &o.a_sb, &o.a_sh, &o.a_si)
    cdef Py_ssize_t ntiles = ceil_div(sh.Sk, BC)
    cdef Py_ssize_t per_head = ntiles * sh.D * BC
    cdef Py_ssize_t nkv_total = sh.B * sh.Hkv
    # (f16s: K's split words are twice the float32 K^T's size, V's once)
    cdef Py_ssize_t chunk = _kv_chunk(per_head * (3 if f16s else 1), sizeof(real_t), nkv_total)
    cdef Py_ssize_t D2 = 2 * sh.D if f16s else (sh.D + 1) // 2
    cdef Py_ssize_t ntasks, per_thread, kv0, nkv
    if naive:
        ntasks = chunk * (sh.Hq // sh.Hkv) * ceil_div(sh.Sq, BR_NAIVE)
        per_thread = 2 * BR_NAIVE * sh.D + BR_NAIVE * ntiles * BC
    else:
        ntasks = flash_tasks(&sh, chunk)
        per_thread = flash_scratch(sh.D, False, f16s)
    cdef int nt = <int>min(nthreads, ntasks)
    # V's keys paired once per kv head where P V takes the tiles (fc_amx.h), not per query tile
    cdef bint vpairs = bf16_pairs and not naive and (fc_bf16_on_tiles() or round_p == 1)
    # a decode step under the float32/float64 policies: the scores are row dots with K's rows,
    # no packed K^T (one query row per head reads each key once either way)
    cdef bint krows = rnd_t is RoundNone and not naive and not bf16_pairs and sh.Sq == 1 and k16 == NULL
    o.k_rows = krows
    # a paged sequence whose kv heads each take one task (a varlen chunk: its G * Sq rows in one
    # tile): each task packs its K^T tiles itself, the next tile's rows asked for while it
    # computes, instead of a packing pass before the tasks that reads the pool with no math
    # beside it (AttnOpts.k_tiles)
    # beside the vdpbf16ps products (bf16 storage, P V on V's pairs alone), each task pairs its
    # tiles' K and V rows the same way (AttnOpts.kp16); not where the products run on AMX tiles
    cdef bint k_tiles = (_k_tiles_allowed and ktable != NULL and rnd_t is RoundNone and not naive
                         and not krows and k16 == NULL and sh.hpt <= 1 and flash_tasks(&sh, 1) == 1
                         and (_pairs_in_task(bf16_pairs, k_h16, v_h16) if bf16_pairs else k_h16 == NULL))
    o.k_tiles = k_tiles
    if v_h16 != NULL and fc_bf16_on_tiles():
        o.vt16 = v_h16
    if k_tiles:
        per_thread = flash_scratch(sh.D, True)
        if bf16_pairs:
            o.kp16, o.vp16 = k_h16, v_h16
            vpairs = False
    # one buffer: packed K (or its bf16 pairs), V's pairs, then every thread's scratch, each 64-byte aligned
    cdef Py_ssize_t n_ktp = 0 if bf16_pairs or krows or k_tiles or k16 != NULL else chunk * per_head * sizeof(real_t)
    cdef Py_ssize_t n_kpp = chunk * ntiles * D2 * BC * sizeof(unsigned int) if bf16_pairs and not k_tiles else 0
    cdef Py_ssize_t n_vpp = chunk * ntiles * (BC if f16s else (BC // 2)) * sh.D * sizeof(unsigned int) if vpairs else 0
    buf = _scratch("forward", _up64(n_ktp) + _up64(n_kpp) + _up64(n_vpp) + nt * per_thread * sizeof(real_t))
    cdef char* base = _aligned(buf)
    cdef real_t* ktp = <real_t*>base
    cdef unsigned int* kpp_p = <unsigned int*>(base + _up64(n_ktp)) if bf16_pairs and not k_tiles else NULL
    cdef unsigned int* vpp_p = <unsigned int*>(base + _up64(n_ktp) + _up64(n_kpp)) if vpairs else NULL
    cdef real_t* scratch = <real_t*>(base + _up64(n_ktp) + _up64(n_kpp) + _up64(n_vpp))
    cdef fc_interrupt it
    fc_interrupt_init(&it, _on_main_thread())
    o.it = &it
    with nogil:
        # kv heads in chunks, so the packed copy of K stays small however long the sequence
        kv0 = 0
        while kv0 < nkv_total and not fc_stopped(&it):
            nkv = min(chunk, nkv_total - kv0)
            if real_t is float and f16s:
                pack_heads_split16(k_h16, &sh.lk, kv0, nkv, sh.Sk, sh.D, kpp_p, nt, False)
                pack_heads_split16(v_h16, &sh.lv, kv0, nkv, sh.Sk, sh.D, vpp_p, nt, True)
            elif real_t is float and not k_tiles:
                if bf16_pairs and k_h16 != NULL:
                    pack_heads_pairs16(k_h16, &sh.lk, kv0, nkv, sh.Sk, sh.D, kpp_p, nt, False, ktable, kbs)
                elif bf16_pairs:
                    pack_heads_pairs(<float*>k, &sh.lk, kv0, nkv, sh.Sk, sh.D, kpp_p, nt)
                if v_h16 != NULL:
                    pack_heads_pairs16(v_h16, &sh.lv, kv0, nkv, sh.Sk, sh.D, vpp_p, nt, True, ktable, kbs)
                elif vpairs:
                    pack_heads_pairs(<float*>v, &sh.lv, kv0, nkv, sh.Sk, sh.D, vpp_p, nt, True)
            if not bf16_pairs and not krows and not k_tiles and k16 == NULL:
                if real_t is float and k_h16 != NULL:
                    pack_heads16(k_h16, &sh.lk, kv0, nkv, sh.Sk, sh.D, <float*>ktp, nt, is_f16)
                else:
                    pack_heads(<real_t*>k, &sh.lk, kv0, nkv, sh.Sk, sh.D, ktp, nt, ktable, kbs)
            if naive:
                naive_forward_core(tag, kv0, nkv, <real_t*>q, ktp, <real_t*>v, <real_t*>slopes, out, &sh, &o,
                                   scratch, per_thread, nt)
            else:
                flash_forward_core(tag, kv0, nkv, <real_t*>q, <real_t*>k if krows or k_tiles else ktp, kpp_p,
                                   vpp_p, <real_t*>v, <real_t*>slopes, out, &sh, &o, scratch, per_thread, nt)
            kv0 += nkv
    fc_interrupt_raise(&it)


cdef object _paged(rnd_t tag, const real_t* q, const real_t* kc, const real_t* vc,
                   const unsigned short* kc16, const unsigned short* vc16, int is_f16,
                   const unsigned int* table, const unsigned int* ctx_lens, const real_t* slopes,
                   real_t* out, tuple dims, dict params, int nthreads):
    """Paged decode over a pool in the work type (kc, vc) or, under float32 compute, over a
    bf16/f16 pool read in place (kc16, vc16; kc and vc are then NULL)."""
    cdef PagedShape sh
    sh.B, sh.Hq, sh.Hkv, sh.Sq, sh.D, sh.block_size, sh.max_blocks, sh.num_blocks = dims
    cdef Py_ssize_t nout = sh.B * sh.Hq * sh.Sq * sh.D
    if nout == 0:
        return
    cdef Py_ssize_t b
    sh.max_keys = 0
    for b in range(sh.B):   # validated: each <= max_blocks * block_size
        if ctx_lens[b] > sh.max_keys:
            sh.max_keys = ctx_lens[b]
    if sh.D == 0 or sh.max_keys == 0:   # every row fully masked: zero
        memset(out, 0, nout * sizeof(real_t))
        return
    nthreads = _threads_for(nthreads, _sat_mul(nout, sh.max_keys))
    paged_split(&sh, nthreads)
    cdef Py_ssize_t ntasks = paged_tasks(&sh)
    cdef Py_ssize_t per_thread = paged_scratch(&sh, kc16 != NULL and rnd_t is not RoundNone)
    cdef int nt = <int>min(nthreads, ntasks)
    buf = _scratch("paged", nt * per_thread * sizeof(real_t))
    cdef real_t* scratch = <real_t*>_aligned(buf)
    cdef double scale = params["softmax_scale"]
    cdef double cap = params.get("softcap") or 0.0
    cdef fc_interrupt it
    fc_interrupt_init(&it, _on_main_thread())
    sh.it = &it
    with nogil:
        paged_forward_core(tag, <real_t*>q, <real_t*>kc, <real_t*>vc, kc16, vc16, is_f16, <unsigned int*>table,
                           <unsigned int*>ctx_lens, <real_t*>slopes, out, &sh, scale, cap, scratch, per_thread, nt)
    fc_interrupt_raise(&it)


cdef inline bint _saved_stats(rnd_t tag, const real_t* fwd_out, const float* fwd_lse) noexcept:
    """Whether a backward given the forward's out and lse runs backward_task_saved: float32
    compute (float32 inputs, bf16 in every form of its products, f16 on the float32 loops);
    float64 recomputes, as does f16 on its split words (_backward: f16s)."""
    return fwd_out != NULL and fwd_lse != NULL and rnd_t is RoundNone and real_t is float


cdef object _backward(rnd_t tag, const real_t* q, const real_t* k, const real_t* v, const real_t* dout,
                      const real_t* slopes, real_t* dq, real_t* dk, real_t* dv,
                      tuple dims, dict params, int nthreads, bint bf16_pairs, Py_ssize_t shift=0,
                      bint alibi_abs=False, const unsigned char* mask=NULL, const real_t* bias=NULL,
                      tuple mask_dims=None, const float* dlse=NULL, Py_ssize_t dlse_ld=0, int round_p=0,
                      const real_t* fwd_out=NULL, const float* fwd_lse=NULL, Py_ssize_t fwd_lse_ld=0):
    """bf16_pairs: q, k, v and dout hold bf16 values; S and dP come from vdpbf16ps.  shift,
    alibi_abs, mask, bias, mask_dims: as _forward's (the masks' alignment, flash-attn's ALiBi
    form, attention_masked's boolean mask and additive bias), so each forward's scores are
    recomputed as it made them.  dlse: the gradient of the forward's log-sum-exp, row i of the
    flattened head bh at dlse[bh * dlse_ld + i] (AttnOpts.lse), or NULL.  round_p: AttnOpts.round_p
    (_round_p; float32 compute only).  f16 with round_p where the bf16 products take the tiles
    (_f16_split) runs all five products from split words (fc_f16_tiles.h) when q, k, v and dout are
    finite (an infinity has no split; else the float32 loops).  fwd_out, fwd_lse: the forward's
    output (laid out as dout) and its lse (row i of the flattened head bh at fwd_lse[bh *
    fwd_lse_ld + i]), or NULL: given both, the calls _saved_stats names run
    backward_task_saved, key tiles outer; every other call recomputes the statistics."""
    cdef Shape sh
    sh.B, sh.Hq, sh.Hkv, sh.Sq, sh.Sk, sh.D = dims
    _layouts(&sh, NULL)
    if sh.B == 0 or sh.Hq == 0 or sh.Sq == 0 or sh.Sk == 0 or sh.D == 0:  # (each memset is one array's size)
        memset(dq, 0, sh.B * sh.Hq * sh.Sq * sh.D * sizeof(real_t))
        memset(dk, 0, sh.B * sh.Hkv * sh.Sk * sh.D * sizeof(real_t))
        memset(dv, 0, sh.B * sh.Hkv * sh.Sk * sh.D * sizeof(real_t))
        return
    nthreads = _threads_for(nthreads, _sat_mul(sh.B * sh.Hq * sh.Sq * sh.D, sh.Sk))
    cdef AttnOpts o = _opts(params, sh.Sq, sh.Sk, shift)
    o.alibi_abs = alibi_abs
    if mask != NULL:
        o.mask = mask
        _mask_strides(mask_dims[:3], &sh, &o.m_sb, &o.m_sh, &o.m_si)
    if bias != NULL:
        o.bias = bias
        _mask_strides(mask_dims[3:], &sh, &o.a_sb, &o.a_sh, &o.a_si)
    o.lse = <float*>dlse   # (read, never written, by the backward)
    o.lse_ld = dlse_ld
    if round_p and (real_t is not float or rnd_t is not RoundNone):
        raise ValueError("fuel_cy core: round_p is a float32-compute mode")
    o.round_p = round_p
    # round_p's vdpbf16ps products need K's keys paired per column (for dQ = dS K) and an even D
    # (dV^T and dK^T take D as rows in pairs); else P and dS are rounded for the other forms
    cdef bint kv_pairs = bf16_pairs and round_p == 1 and not fc_bf16_on_tiles() and sh.D % 2 == 0
    # on the tiles dQ = dS K takes K's keys paired per column too, packed once per kv head instead
    # of per step and column chunk (the same pairs, so the same sums)
    cdef bint k_keys = kv_pairs or (bf16_pairs and fc_bf16_on_tiles())
    cdef Py_ssize_t nq = sh.B * sh.Hq * sh.Sq * sh.D, nk = sh.B * sh.Hkv * sh.Sk * sh.D
    cdef bint f16s = False
    if real_t is float and rnd_t is RoundNone and not bf16_pairs and _f16_split(round_p):
        with nogil:
            f16s = (fc_f32_all_finite(<const float*>q, nq) and fc_f32_all_finite(<const float*>dout, nq)
                    and fc_f32_all_finite(<const float*>k, nk) and fc_f32_all_finite(<const float*>v, nk))
    o.f16s = f16s
    cdef bint saved = _saved_stats(tag, fwd_out, fwd_lse) and not f16s
    # f16s: K's and V's split words for the scores (2D words per key), and K's again per key for
    # dQ = dS K, in place of the pairs (kv_pairs' buffer holds the latter)
    cdef bint words = bf16_pairs or f16s
    cdef Py_ssize_t ntiles = ceil_div(sh.Sk, BC), Skp = ntiles * BC
    cdef Py_ssize_t per_head = ntiles * sh.D * BC, D2 = 2 * sh.D if f16s else (sh.D + 1) // 2
    cdef Py_ssize_t nkv_total = sh.B * sh.Hkv
    cdef Py_ssize_t chunk = _kv_chunk((5 if f16s else 2) * per_head, sizeof(real_t), nkv_total)
    # (the saved order's steps touch one key tile's S and dP, not whole rows: its rvec steps
    # measured fastest at fc_bwd_rows, 1.13-1.30x the recomputing order's at 128 on Zen 4)
    o.bwd_rows = fc_bwd_rows_pairs if kv_pairs and not saved else fc_bwd_rows
    cdef Py_ssize_t br = o.bwd_rows   # backward_task's scratch, carved for br rows per step
    cdef Py_ssize_t per_thread = 3 * br * sh.D + 5 * br * Skp + 2 * Skp * sh.D + 2 * br * D2
    if saved:   # backward_task_saved's: one key tile's S, dP, tanh and dK, dV accumulators, each row's
        # delta, the step's Q and dO pairs (and, kv_pairs, its P and dS pairs)
        per_thread = (3 * br * sh.D + 3 * br * BC + 2 * BC * sh.D + (sh.Hq // sh.Hkv) * sh.Sq
                      + 2 * br * ((sh.D + 1) // 2) + (br * BC if kv_pairs else 0))
    cdef int nt = <int>min(nthreads, chunk)
    # one buffer: packed K and V (or their bf16 pairs), then every thread's scratch, 64-byte aligned
    cdef Py_ssize_t packed = 0 if words else _up64(chunk * per_head * sizeof(real_t))
    cdef Py_ssize_t pairs = _up64(chunk * ntiles * D2 * BC * sizeof(unsigned int)) if words else 0
    cdef Py_ssize_t kvpairs = (_up64(chunk * ntiles * (BC if f16s else BC // 2) * sh.D * sizeof(unsigned int))
                               if k_keys or f16s else 0)
    buf = _scratch("backward", 2 * packed + 2 * pairs + kvpairs + nt * per_thread * sizeof(real_t))
    cdef char* base = _aligned(buf)
    cdef real_t* ktp = <real_t*>base
    cdef real_t* vtp = <real_t*>(base + packed)
    cdef unsigned int* kpp_p = <unsigned int*>(base + 2 * packed) if words else NULL
    cdef unsigned int* vpp_p = <unsigned int*>(base + 2 * packed + pairs) if words else NULL
    cdef unsigned int* kvp_p = <unsigned int*>(base + 2 * packed + 2 * pairs) if k_keys or f16s else NULL
    cdef real_t* scratch = <real_t*>(base + 2 * packed + 2 * pairs + kvpairs)
    cdef Py_ssize_t kv0, nkv
    cdef fc_interrupt it
    fc_interrupt_init(&it, _on_main_thread())
    o.it = &it
    with nogil:
        kv0 = 0
        while kv0 < nkv_total and not fc_stopped(&it):
            nkv = min(chunk, nkv_total - kv0)
            if real_t is float:
                if words:
                    pack_heads_pairs(<float*>k, &sh.lk, kv0, nkv, sh.Sk, sh.D, kpp_p, nt, False, f16s)
                    pack_heads_pairs(<float*>v, &sh.lv, kv0, nkv, sh.Sk, sh.D, vpp_p, nt, False, f16s)
                if k_keys or f16s:
                    pack_heads_pairs(<float*>k, &sh.lk, kv0, nkv, sh.Sk, sh.D, kvp_p, nt, True, f16s)
            if not words:
                pack_heads(<real_t*>k, &sh.lk, kv0, nkv, sh.Sk, sh.D, ktp, nt)
                pack_heads(<real_t*>v, &sh.lv, kv0, nkv, sh.Sk, sh.D, vtp, nt)
            if saved:
                backward_core_saved(tag, kv0, nkv, <real_t*>q, <real_t*>k, ktp, vtp, kpp_p, vpp_p, kvp_p,
                                    <real_t*>dout, <real_t*>fwd_out, fwd_lse, fwd_lse_ld, <real_t*>slopes, dq, dk, dv,
                                    &sh, &o, scratch, per_thread, nt)
            else:
                backward_core(tag, kv0, nkv, <real_t*>q, <real_t*>k, ktp, vtp, kpp_p, vpp_p, kvp_p,
                              <real_t*>dout, <real_t*>slopes, dq, dk, dv, &sh, &o, scratch, per_thread, nt)
            kv0 += nkv
    fc_interrupt_raise(&it)


cdef void _gather_rows(const real_t* x, const unsigned short* x16, int is_f16, const unsigned int* table,
                       Py_ssize_t bs, Py_ssize_t row0, Py_ssize_t n, Py_ssize_t H, Py_ssize_t D, Py_ssize_t sr,
                       Py_ssize_t sh, real_t* out, int nthreads) noexcept nogil:
    """A sequence's n key rows as [H, n, D]: rows row0 .. row0 + n of a packed [rows, H, D] array,
    or (table, bs > 0) key i at row i % bs of block table[i // bs] of a [NB, bs, H, D] pool, row r
    head h at r * sr + h * sh; read front to back (H write streams), on every thread.  x16 (x NULL): 16-bit storage, widened
    exactly on the way (float work type only)."""
    cdef Py_ssize_t h, i, r
    for i in prange(n, schedule='static', num_threads=nthreads):
        r = table_row(table, bs, i) if table != NULL else row0 + i
        for h in range(H):
            if x16 != NULL:
                if real_t is float:
                    fc_widen_half(x16 + r * sr + h * sh, out + (h * n + i) * D, D, is_f16)
            else:
                memcpy(out + (h * n + i) * D, x + r * sr + h * sh, D * sizeof(real_t))


cdef void _gather_rows16(const unsigned short* x16, const unsigned int* table, Py_ssize_t bs, Py_ssize_t row0,
                         Py_ssize_t n, Py_ssize_t H, Py_ssize_t D, Py_ssize_t sr, Py_ssize_t sh,
                         unsigned short* out, int nthreads) noexcept nogil:
    """_gather_rows of 16-bit storage into 16-bit [H, n, D], not widened: half the bytes written,
    and the flash packs K (and V's bf16 pairs) from it as from any bf16/f16 array."""
    cdef Py_ssize_t h, i, r
    for i in prange(n, schedule='static', num_threads=nthreads):
        r = table_row(table, bs, i) if table != NULL else row0 + i
        for h in range(H):
            memcpy(out + (h * n + i) * D, x16 + r * sr + h * sh, D * sizeof(unsigned short))


cdef void _scatter_rows(const real_t* x, Py_ssize_t row0, Py_ssize_t n, Py_ssize_t H, Py_ssize_t D,
                        real_t* out, int nthreads) noexcept nogil:
    """_gather_rows undone for a packed C-contiguous [rows, H, D] array: x [H, n, D] written to
    rows row0 .. row0 + n of out."""
    cdef Py_ssize_t h, i
    for i in prange(n, schedule='static', num_threads=nthreads):
        for h in range(H):
            memcpy(out + ((row0 + i) * H + h) * D, x + (h * n + i) * D, D * sizeof(real_t))


cdef inline void _zero_span(char* x, Py_ssize_t r0, Py_ssize_t r1, Py_ssize_t row_bytes) noexcept:
    """Rows r0 .. r1 of x (row_bytes each) set to zero; none where r1 <= r0."""
    if r1 > r0:
        memset(x + r0 * row_bytes, 0, (r1 - r0) * row_bytes)


cdef inline void _zero_grad_spans(real_t* dq, real_t* dk, real_t* dv, Py_ssize_t q0, Py_ssize_t q1,
                                  Py_ssize_t k0, Py_ssize_t k1, Py_ssize_t Hq, Py_ssize_t Hkv,
                                  Py_ssize_t D) noexcept:
    """_varlen_backward's rows that no sequence reads: dq's q0 .. q1 ([T, Hq, D] rows), dk's and
    dv's k0 .. k1 ([T, Hkv, D] rows)."""
    _zero_span(<char*>dq, q0, q1, Hq * D * sizeof(real_t))
    _zero_span(<char*>dk, k0, k1, Hkv * D * sizeof(real_t))
    _zero_span(<char*>dv, k0, k1, Hkv * D * sizeof(real_t))


cdef object _varlen_backward(rnd_t tag, const real_t* q, const real_t* k, const real_t* v, const real_t* dout,
                             const unsigned int* cu_q, const unsigned int* cu_k, const unsigned int* used,
                             const real_t* slopes, Py_ssize_t slopes_ld, const float* dlse, real_t* dq,
                             real_t* dk, real_t* dv, tuple dims, dict params, int nthreads, bint bf16_pairs,
                             int round_p=0, const real_t* fout=NULL, const float* flse=NULL):
    """The gradients of _varlen for packed keys: q, dout [Tq, Hq, D], k, v [NB * BS, Hkv, D], all
    C-contiguous (the validators checked the offsets and lengths: every row read lies in the
    arrays).  Each sequence's rows are gathered into [1, H, l, D] operands and run through
    _backward with its bottom-right shift and flash-attn's ALiBi form; its gradients are scattered
    back.  Rows no sequence reads (past seqused_k, or a sequence without queries or keys) get
    zero gradients; the others are written by the scatter alone (the validators checked that the
    offsets never decrease, so no two sequences share a row).  dlse: the gradient of the
    forward's lse, [Hq, Tq] float32, or NULL.  fout, flse: the forward's out (as dout) and lse
    ([Hq, Tq] float32), or NULL: gathered and passed as _backward's fwd_out and fwd_lse where it
    takes them (_saved_stats), else not read."""
    cdef Py_ssize_t Tq, NB, BS, B1, Hq, Hkv, D
    Tq, NB, BS, B1, Hq, Hkv, D = dims
    cdef Py_ssize_t Tk = NB * BS, b, q0, k0, lq, lk
    # rows below zq (of dq) and zk (of dk and dv) are written or zeroed
    cdef Py_ssize_t zq = 0, zk = 0
    if Hq * D == 0:   # (no query head: dk and dv, if any, are zero)
        _zero_grad_spans(dq, dk, dv, 0, Tq, 0, Tk, Hq, Hkv, D)
        return
    dt = _np.float32 if real_t is float else _np.float64
    cdef int nt
    cdef real_t* qg
    cdef real_t* dog
    cdef real_t* kg
    cdef real_t* vg
    cdef real_t* dqg
    cdef real_t* dkg
    cdef real_t* dvg
    cdef real_t* fog
    cdef bint saved = _saved_stats(tag, fout, flse)
    for b in range(B1 - 1):
        q0, lq = cu_q[b], <Py_ssize_t>cu_q[b + 1] - <Py_ssize_t>cu_q[b]
        k0, lk = cu_k[b], <Py_ssize_t>cu_k[b + 1] - <Py_ssize_t>cu_k[b]
        if used != NULL:
            lk = used[b]
        if lq == 0 or lk == 0:
            continue
        _zero_grad_spans(dq, dk, dv, zq, q0, zk, k0, Hq, Hkv, D)
        zq = q0 + lq
        zk = k0 + lk
        # one buffer per sequence: q, dout, dq [Hq, lq, D], then k, v, dk, dv [Hkv, lk, D]
        buf = _temp("varlen_bwd", ((4 if saved else 3) * Hq * lq * D + 4 * Hkv * lk * D,), dt)
        qg = <real_t*>cnp.PyArray_DATA(<cnp.ndarray>buf)
        dog = qg + Hq * lq * D
        dqg = dog + Hq * lq * D
        kg = dqg + Hq * lq * D
        vg = kg + Hkv * lk * D
        dkg = vg + Hkv * lk * D
        dvg = dkg + Hkv * lk * D
        fog = dvg + Hkv * lk * D   # (saved: the forward's out, [Hq, lq, D])
        nt = _threads_for(nthreads, _sat_mul(lq + lk, Hq * D * 16))   # copies: a team only when large
        with nogil:
            _gather_rows(q, NULL, 0, NULL, 1, q0, lq, Hq, D, Hq * D, D, qg, nt)
            _gather_rows(dout, NULL, 0, NULL, 1, q0, lq, Hq, D, Hq * D, D, dog, nt)
            _gather_rows(k, NULL, 0, NULL, 1, k0, lk, Hkv, D, Hkv * D, D, kg, nt)
            _gather_rows(v, NULL, 0, NULL, 1, k0, lk, Hkv, D, Hkv * D, D, vg, nt)
            if saved:
                _gather_rows(fout, NULL, 0, NULL, 1, q0, lq, Hq, D, Hq * D, D, fog, nt)
        _backward(tag, qg, kg, vg, dog, slopes + b * slopes_ld if slopes != NULL else NULL, dqg, dkg, dvg,
                  (1, Hq, Hkv, lq, lk, D), params, nthreads, bf16_pairs, lk - lq, True, NULL, NULL, None,
                  dlse + q0 if dlse != NULL else NULL, Tq, round_p, fog if saved else NULL,
                  flse + q0 if saved else NULL, Tq)
        with nogil:
            _scatter_rows(dqg, q0, lq, Hq, D, dq, nt)
            _scatter_rows(dkg, k0, lk, Hkv, D, dk, nt)
            _scatter_rows(dvg, k0, lk, Hkv, D, dv, nt)
    _zero_grad_spans(dq, dk, dv, zq, Tq, zk, Tk, Hq, Hkv, D)


cdef object _varlen(rnd_t tag, const real_t* q, const real_t* k, const real_t* v, const unsigned short* k16,
                    const unsigned short* v16, int is_f16, const unsigned int* cu_q, const unsigned int* cu_k,
                    const unsigned int* table, Py_ssize_t mbs, const unsigned int* used, const real_t* slopes,
                    Py_ssize_t slopes_ld, real_t* out, float* lse, tuple dims, dict params, int nthreads,
                    bint bf16_pairs, const Py_ssize_t* rs, int round_p=0, bint f16_split=False,
                    const unsigned short* q16=NULL, unsigned short* out16=NULL):
    """Packed variable-length sequences (flash-attn's varlen layout): sequence b is rows
    cu_q[b] .. cu_q[b + 1] of q [Tq, Hq, D] and its keys rows cu_k[b] .. cu_k[b + 1] of k, v
    [NB * BS, Hkv, D], or (table, mbs per sequence) key j at row j % BS of block table[b, j // BS]
    of the [NB, BS, Hkv, D] pool; with used, only its first used[b] keys.  Its masks aligned to
    the bottom-right of its own block (query i at key position i + lk - lq), ALiBi in flash-attn's
    form (slopes: Hq per sequence, slopes_ld apart (0: one set for all), in the work type, or
    NULL); lse, when not NULL, [Hq, Tq] float32 set to +inf, gets each row's log-sum-exp.  k16,
    v16 (k, v NULL): bf16/f16 storage (is_f16).  Each sequence runs the flash forward on its q
    and out rows where they lie, as [1, H, l, D] operands whose heads are D elements apart and rows
    H * D; float packed k rows too, and bf16 k and v rows where the flash pairs them (packed or
    paged); other v (and paged or 16-bit k) rows gathered, 16-bit ones kept in their storage
    where the flash packs them from it (the validators checked
    the offsets, lengths and block ids: every row read lies in the arrays).  rs: the element strides
    of a row and of a head of q, k and v (q's rows are its first axis, k's and v's their rows of
    blocks, found affine by the entry); out is C-contiguous.  f16_split: f16 (round_p, on the tiles)
    whose q the entry found finite: sequences of more than one query whose gathered keys and values
    are finite too run their products on the split words (fc_f16_tiles.h), V gathered in its
    storage.  q16, out16 (q, out NULL; float32 compute): q read in its 16-bit storage and out [Tq,
    Hq, D] written rounded to T, as the half flash's (no widened q, no float32 output to narrow)."""
    cdef Py_ssize_t Tq, NB, BS, B1, Hq, Hkv, D
    Tq, NB, BS, B1, Hq, Hkv, D = dims
    cdef Py_ssize_t b, q0, k0, lq, lk
    if Tq * Hq * D == 0:
        return
    # q and out: heads D apart, rows Hq * D; packed k in place: rows Hkv * D (one batch item: its
    # stride unused); v gathered per sequence into [Hkv, lk, D]: P V streams V's rows, and rows
    # Hkv * D apart fold onto a fraction of L1's sets (measured 3% slower at Hkv * D = 128 floats)
    cdef Py_ssize_t strides[12]
    cdef int nt
    cdef bint k_in_place = table == NULL and k16 == NULL
    cdef const unsigned int* trow
    cdef real_t* kg
    cdef const unsigned short* k_h
    cdef const unsigned short* v_h
    dt = _np.float32 if real_t is float else _np.float64
    cdef Py_ssize_t qr = rs[0], qh = rs[1], kr = rs[2], kh = rs[3], vr = rs[4], vh = rs[5]
    # the decode steps (sequences of one query) and the chunks whose kv heads take one task each
    # first, all in one task list
    cdef bint chunks_in_list = _chunks_join_list(tag, table, k16, v16, bf16_pairs, round_p)
    _varlen_task_list(tag, q, k, v, k16, v16, is_f16, cu_q, cu_k, table, mbs, used, slopes, slopes_ld, out, lse,
                      dims, params, nthreads, rs, round_p, chunks_in_list, q16, out16)
    cdef real_t* qb
    cdef real_t* ob
    cdef const unsigned short* qb16
    cdef unsigned short* ob16
    for b in range(B1 - 1):
        q0, lq = cu_q[b], <Py_ssize_t>cu_q[b + 1] - <Py_ssize_t>cu_q[b]
        k0, lk = cu_k[b], <Py_ssize_t>cu_k[b + 1] - <Py_ssize_t>cu_k[b]
        if used != NULL:
            lk = used[b]
        if lq == 0 or (lk > 0 and (lq == 1 or (chunks_in_list and _chunk_in_list(lq, Hq, Hkv)))):
            continue   # (a decode step or a chunk of the task list: done above)
        if lk == 0:   # no key: the sequence's rows are zero (fully masked; +0 is 0x0000 in bf16 and f16)
            if out16 != NULL:
                memset(out16 + q0 * Hq * D, 0, lq * Hq * D * sizeof(unsigned short))
            else:
                memset(out + q0 * Hq * D, 0, lq * Hq * D * sizeof(real_t))
            continue
        # the sequence's rows, in the work type or (q16, out16) in their 16-bit storage
        qb, ob, qb16, ob16 = NULL, NULL, NULL, NULL
        if q16 != NULL:
            qb16, ob16 = q16 + q0 * qr, out16 + q0 * Hq * D
        else:
            qb, ob = <real_t*>(q + q0 * qr), out + q0 * Hq * D
        trow = table + b * mbs if table != NULL else NULL
        strides[0:3] = [0, qh, qr]
        strides[9:12] = [0, D, Hq * D]
        if rnd_t is RoundNone and ((trow != NULL and k16 == NULL) or (k16 != NULL and bf16_pairs and _pairs16_v(round_p))):
            # rows the flash packs from as they lie (K, or K's and V's bf16 pairs), packed or in a
            # paged pool through its table, and float32/float64 V rows that its P V reads through
            # the table: no gather
            strides[3:6] = [0, kh, kr]
            strides[6:9] = [0, vh, vr]
            _forward(tag, qb, k, v, slopes + b * slopes_ld if slopes != NULL else NULL,
                     ob, (1, Hq, Hkv, lq, lk, D), params, nthreads, False, bf16_pairs, lk - lq,
                     NULL, <const real_t*>NULL, None, True, strides, lse + q0 if lse != NULL else NULL, Tq,
                     NULL, NULL, is_f16, trow, BS, round_p, qb16,
                     k16 + (0 if trow != NULL else k0 * kr) if k16 != NULL else NULL,
                     v16 + (0 if trow != NULL else k0 * vr) if k16 != NULL else NULL, ob16)
            continue
        nt = _threads_for(nthreads, _sat_mul(lk, Hkv * D * 16))   # a copy: worth a team only when large
        # bf16/f16 keys gathered in their storage, and V too where the P V reads its bf16 pairs
        # only: the flash packs Kᵀ (or K's pairs) from them as from any 16-bit array, the same
        # values as from a widened copy, without writing and reading one
        k_h = v_h = NULL
        vb = None
        if k16 != NULL and real_t is float and rnd_t is RoundNone:
            kb16 = _temp("varlen:k16", (Hkv * lk * D,), _np.uint16)
            k_h = <const unsigned short*>cnp.PyArray_DATA(<cnp.ndarray>kb16)
            with nogil:
                _gather_rows16(k16, trow, BS, k0, lk, Hkv, D, kr, kh, <unsigned short*>k_h, nt)
            if (bf16_pairs and _pairs16_v(round_p)) or f16_split:
                vb16 = _temp("varlen:v16", (Hkv * lk * D,), _np.uint16)
                v_h = <const unsigned short*>cnp.PyArray_DATA(<cnp.ndarray>vb16)
                with nogil:
                    _gather_rows16(v16, trow, BS, k0, lk, Hkv, D, vr, vh, <unsigned short*>v_h, nt)
                    # (f16's split: the keys this sequence reads must be finite, else the float32 loops)
                    if (f16_split and not bf16_pairs
                            and not (fc_f16_all_finite(k_h, Hkv * lk * D) and fc_f16_all_finite(v_h, Hkv * lk * D))):
                        v_h = NULL
        if v_h == NULL:
            vb = _temp("varlen:v", (Hkv * lk * D,), dt)
            with nogil:
                _gather_rows(v, v16, is_f16, trow, BS, k0, lk, Hkv, D, vr, vh,
                             <real_t*>cnp.PyArray_DATA(<cnp.ndarray>vb), nt)
        if k_h != NULL:
            kg = NULL
            strides[3:6] = [0, lk * D, D]
        elif k_in_place:
            kg = <real_t*>(k + k0 * kr)
            strides[3:6] = [0, kh, kr]
        else:
            kb = _temp("varlen:k", (Hkv * lk * D,), dt)
            kg = <real_t*>cnp.PyArray_DATA(<cnp.ndarray>kb)
            with nogil:
                _gather_rows(k, k16, is_f16, trow, BS, k0, lk, Hkv, D, kr, kh, kg, nt)
            strides[3:6] = [0, lk * D, D]
        strides[6:9] = [0, lk * D, D]
        _forward(tag, qb, kg, <const real_t*>cnp.PyArray_DATA(<cnp.ndarray>vb) if vb is not None else NULL,
                 slopes + b * slopes_ld if slopes != NULL else NULL,
                 ob, (1, Hq, Hkv, lq, lk, D), params, nthreads, False, bf16_pairs, lk - lq, NULL,
                 <const real_t*>NULL, None, True, strides, lse + q0 if lse != NULL else NULL, Tq,
                 NULL, NULL, is_f16, NULL, 0, round_p, qb16, k_h, v_h, ob16)


# kv heads per decode task forced by the tests (_test_decode_heads_per_task); 0: chosen per call
cdef Py_ssize_t _decode_hpt_forced = 0
# the task list handed out costliest first (_test_decode_longest_first turns it off: the same bits)
cdef bint _decode_longest_first = True
# chunks that pack their own tiles join the decode steps' task list (_test_chunks_in_list
# turns it off: each then runs as its own call of _forward, with the same bits)
cdef bint _chunks_in_list_allowed = True


cdef bint _chunks_join_list(rnd_t tag, const unsigned int* table, const unsigned short* k16,
                            const unsigned short* v16, bint bf16_pairs, int round_p) noexcept:
    """Whether _varlen's chunks may run in its task list, each task packing its own tiles from the
    rows where they lie (AttnOpts.k_tiles: K^T from float32/float64 rows or K's and V's pairs from
    bf16 ones, through the table of a paged pool), no packing pass or gathered copy before the
    tasks."""
    if not (_chunks_in_list_allowed and _k_tiles_allowed and rnd_t is RoundNone):
        return False
    if k16 == NULL:
        return not bf16_pairs
    return _pairs16_v(round_p) and _pairs_in_task(bf16_pairs, k16, v16)


cdef inline bint _chunk_in_list(Py_ssize_t lq, Py_ssize_t Hq, Py_ssize_t Hkv) noexcept nogil:
    """A chunk of lq > 1 queries whose kv heads take one task each (flash_tasks: its G * lq rows
    in one tile, stacked head after head)."""
    return lq > 1 and (Hq // Hkv) * lq <= BR_FLASH


cdef struct TaskCost:
    bint chunk        # a chunk (more than one query), whose tasks go before the decode steps'
    Py_ssize_t cost   # the keys each of its tasks reads, times its kv heads or its rows
    Py_ssize_t s      # its index among the list's sequences


cdef int _costliest_first(const void* a, const void* b) noexcept nogil:
    cdef const TaskCost* x = <const TaskCost*>a
    cdef const TaskCost* y = <const TaskCost*>b
    if x.chunk != y.chunk:
        return -1 if x.chunk else 1
    if x.cost != y.cost:
        return -1 if x.cost > y.cost else 1
    return -1 if x.s < y.s else (1 if x.s > y.s else 0)


cdef void _rows16_list(const Shape* shapes, const Py_ssize_t* q0s, const unsigned short* q16, Py_ssize_t qr,
                       Py_ssize_t qh, float** qs, unsigned short* out16, float** outs, Py_ssize_t n, int is_f16,
                       int nt, bint widen) noexcept nogil:
    """The task list's sequences with q and out in 16-bit storage (_varlen_task_list): widen: each
    one's q rows (row q0s[s] + i, heads qh apart, rows qr) into its float32 rows qs[s] ([Sq, Hq,
    D]); else its float32 output outs[s] rounded into out16's rows (C-contiguous [Tq, Hq, D]).
    Elementwise, so the bits do not depend on the split."""
    cdef Py_ssize_t s, i, h, Hq, D
    for s in prange(n, schedule='dynamic', num_threads=nt):
        Hq, D = shapes[s].Hq, shapes[s].D
        if widen:
            for i in range(shapes[s].Sq):
                for h in range(Hq):
                    fc_widen_half(q16 + (q0s[s] + i) * qr + h * qh, qs[s] + (i * Hq + h) * D, D, is_f16)
        else:
            fc_narrow_half(outs[s], out16 + q0s[s] * Hq * D, shapes[s].Sq * Hq * D, is_f16)


cdef object _varlen_task_list(rnd_t tag, const real_t* q, const real_t* k, const real_t* v,
                              const unsigned short* k16, const unsigned short* v16, int is_f16,
                              const unsigned int* cu_q, const unsigned int* cu_k, const unsigned int* table,
                              Py_ssize_t mbs, const unsigned int* used, const real_t* slopes,
                              Py_ssize_t slopes_ld, real_t* out, float* lse, tuple dims, dict params,
                              int nthreads, const Py_ssize_t* rs, int round_p, bint chunks,
                              const unsigned short* q16=NULL, unsigned short* out16=NULL):
    """Every sequence of _varlen with one query and at least one key (a decode step) and, with
    chunks (_chunks_join_list), every chunk whose kv heads take one task each
    (_chunk_in_list), as one task list (kernels.pxi decodes_core): a team per sequence cost more
    than a short sequence's math, and a chunk's math beside the steps' reads keeps both cores
    busy where a chunk run after them left the reads' tail and its own to one core.  K and V are
    read where they lie, packed rows or a paged pool's rows through the sequence's table row,
    bf16/f16 ones in their 16-bit storage (k16, v16; k and v NULL); a decode step's arithmetic
    is the flash forward's decode step (scores as row dots, no packed K^T), a chunk's is its
    flash forward's, each task packing its K^T tiles (or K's and V's bf16 pairs) from the rows
    where they lie (AttnOpts.k_tiles), no gathered copy.  q16, out16 (q, out NULL; float32
    compute): q and out in 16-bit storage (_varlen), the listed sequences' rows widened into a
    float32 copy and their outputs rounded back (a decode step's task reads a float32 q)."""
    cdef Py_ssize_t Tq, NB, BS, B1, Hq, Hkv, D
    Tq, NB, BS, B1, Hq, Hkv, D = dims
    cdef Py_ssize_t b, n = 0, ndec = 0, lk, lq, k0, q0, s, t, ntasks = 0, macs = 0, j, jj, keys, nrows = 0
    cdef bint any_chunk = False
    cdef AttnOpts* o
    for b in range(B1 - 1):
        lk = (used[b] if used != NULL else <Py_ssize_t>cu_k[b + 1] - <Py_ssize_t>cu_k[b])
        lq = <Py_ssize_t>cu_q[b + 1] - <Py_ssize_t>cu_q[b]
        if lk > 0 and lq == 1:
            ndec += 1
        elif lk > 0 and chunks and _chunk_in_list(lq, Hq, Hkv):
            any_chunk = True
        else:
            continue
        n += 1
        nrows += lq
    if n == 0:
        return
    # q16: the listed rows' float32 q and out, packed in list order ([nrows, Hq, D] each)
    cdef real_t* qw = NULL
    cdef real_t* ow = NULL
    cdef Py_ssize_t r0 = 0
    if q16 != NULL:
        if real_t is not float or rnd_t is not RoundNone:
            raise ValueError("fuel_cy core: a 16-bit q is read by the float32-compute varlen only")
        wbuf = _temp("varlen:rows", (2 * nrows * Hq * D,), _np.float32)
        qw = <real_t*>cnp.PyArray_DATA(<cnp.ndarray>wbuf)
        ow = qw + nrows * Hq * D
    # kv heads per decode task (Shape.hpt): as many as 32 rows hold (G rounded up to NR per head),
    # where K's and V's heads are adjacent in their rows, halved while the steps would make fewer
    # than 4 tasks per thread
    cdef Py_ssize_t G = Hq // Hkv if Hkv > 0 else 1, hpt = 1
    cdef Py_ssize_t rph = (G + NR - 1) // NR * NR
    if Hkv > 1 and rph <= 16 and rs[3] == D and rs[5] == D:
        hpt = min(32 // rph, Hkv)
        while hpt > 1 and ndec * ceil_div(Hkv, hpt) < 4 * nthreads:
            hpt = (hpt + 1) // 2
        if _decode_hpt_forced > 0:   # (the tests: every split gives the same bits)
            hpt = min(_decode_hpt_forced, 32 // rph, Hkv)
    # per sequence: its Shape, AttnOpts and operand pointers, in buffers numpy owns (a failed
    # allocation is a MemoryError)
    cdef AttnOpts base = _opts(params, 1, 1, 0)
    base.round_p = round_p
    base.alibi_abs = 1
    wl_param, wr_param = params.get("window_size_left"), params.get("window_size_right")
    shapes_buf = _np.empty(n * sizeof(Shape), _np.uint8)
    opts_buf = _np.empty(n * sizeof(AttnOpts), _np.uint8)
    ptrs_buf = _np.empty(5 * n * sizeof(real_t*), _np.uint8)
    order_buf = _np.empty(n * sizeof(TaskCost), _np.uint8)
    cdef Shape* shapes = <Shape*>cnp.PyArray_DATA(<cnp.ndarray>shapes_buf)
    cdef AttnOpts* opts = <AttnOpts*>cnp.PyArray_DATA(<cnp.ndarray>opts_buf)
    cdef TaskCost* order = <TaskCost*>cnp.PyArray_DATA(<cnp.ndarray>order_buf)
    q0s_buf = _np.empty(n, _np.intp)   # each listed sequence's first row of q and out
    cdef Py_ssize_t* q0s = <Py_ssize_t*>cnp.PyArray_DATA(<cnp.ndarray>q0s_buf)
    cdef real_t** qs = <real_t**>cnp.PyArray_DATA(<cnp.ndarray>ptrs_buf)
    cdef real_t** ks = qs + n
    cdef real_t** vs = qs + 2 * n
    cdef real_t** ss = qs + 3 * n
    cdef real_t** outs = qs + 4 * n
    cdef Layout lq_, lo, lk_, lv
    lq_.sb, lq_.sh, lq_.ss, lq_.H = 0, rs[1], rs[0], Hq      # q: rows of Hq heads where they lie
    if q16 != NULL:
        lq_.sh, lq_.ss = D, Hq * D                             # (or their float32 copy)
    lo.sb, lo.sh, lo.ss, lo.H = 0, D, Hq * D, Hq             # out: C-contiguous
    lk_.sb, lk_.sh, lk_.ss, lk_.H = 0, rs[3], rs[2], Hkv     # k and v rows where they lie
    lv.sb, lv.sh, lv.ss, lv.H = 0, rs[5], rs[4], Hkv
    cdef Py_ssize_t jk, jv
    cdef fc_interrupt it
    fc_interrupt_init(&it, _on_main_thread())
    s = 0
    for b in range(B1 - 1):
        q0, k0 = cu_q[b], cu_k[b]
        lq = <Py_ssize_t>cu_q[b + 1] - <Py_ssize_t>q0
        lk = (used[b] if used != NULL else <Py_ssize_t>cu_k[b + 1] - <Py_ssize_t>cu_k[b])
        if lk == 0 or not (lq == 1 or (chunks and _chunk_in_list(lq, Hq, Hkv))):
            continue
        shapes[s].B, shapes[s].Hq, shapes[s].Hkv, shapes[s].Sq, shapes[s].Sk, shapes[s].D = 1, Hq, Hkv, lq, lk, D
        shapes[s].lq, shapes[s].lo, shapes[s].lk, shapes[s].lv = lq_, lo, lk_, lv
        # a chunk: its rows stacked head after head in one tile per kv head (as _forward's)
        shapes[s].stack = lq > 1
        shapes[s].hpt = hpt if lq == 1 else 1
        opts[s] = base
        o = &opts[s]
        o.shift = lk - lq   # the queries sit at the sequence's last keys (bottom-right)
        o.k_len = lk
        o.wl = _window(wl_param, lk)
        o.wr = _window(wr_param, lq)
        o.it = &it
        # the sequence's first row, packed; a pool's base, paged
        jk = 0 if table != NULL else k0 * rs[2]
        jv = 0 if table != NULL else k0 * rs[4]
        o.k_tiles = lq > 1
        if k16 != NULL and lq > 1:   # (a chunk: its tiles' bf16 pairs)
            o.kp16, o.vp16, o.is_f16 = k16 + jk, v16 + jv, is_f16
            ks[s] = vs[s] = NULL
        elif k16 != NULL:
            o.k16, o.v16, o.is_f16 = k16 + jk, v16 + jv, is_f16
            ks[s] = vs[s] = NULL
        else:
            o.k_rows = lq == 1
            ks[s], vs[s] = <real_t*>(k + jk), <real_t*>(v + jv)
        if table != NULL:
            o.ktable, o.kbs = table + b * mbs, BS
        if lse != NULL:
            o.lse, o.lse_ld = lse + q0, Tq
        q0s[s] = q0
        if q16 != NULL:
            qs[s], outs[s] = qw + r0 * Hq * D, ow + r0 * Hq * D
            r0 += lq
        else:
            qs[s], outs[s] = <real_t*>(q + q0 * rs[0]), out + q0 * Hq * D
        ss[s] = <real_t*>(slopes + b * slopes_ld) if slopes != NULL else NULL
        ntasks += flash_tasks(&shapes[s], Hkv)
        jj = _sat_mul(_sat_mul(Hq * lq, lk), D)
        macs = macs + jj if macs < PY_SSIZE_T_MAX - jj else PY_SSIZE_T_MAX
        # a task's size: the keys it reads (a window's, at most) times its kv heads (a decode
        # step's reads) or its rows (a chunk's multiply-adds)
        keys = lk if o.wl < 0 else min(lk, o.wl + lq)
        order[s].chunk = lq > 1
        order[s].cost = _sat_mul(keys, G * lq if lq > 1 else shapes[s].hpt)
        order[s].s = s
        s += 1
    # The chunks' tasks first, then the decode steps', each largest first (ties in batch order):
    # the threads take tasks in list order, and a long one taken last kept one thread working
    # alone while the others waited (a batch's lengths vary: 512-4096 keys in the bench's decode
    # mix).  The chunks' math first, the steps' short reads filling the tail after it, measured
    # 0.86-0.89x the time of the bench's mix against chunks after the steps, where an order by
    # estimated time that put chunks among the steps measured 0.91-0.97x.  Each task computes
    # the same in any order, so the order changes no bits.
    if _decode_longest_first:
        qsort(order, n, sizeof(TaskCost), _costliest_first)
    tasks_buf = _np.empty(2 * ntasks, _np.intp)
    cdef Py_ssize_t* task_seq = <Py_ssize_t*>cnp.PyArray_DATA(<cnp.ndarray>tasks_buf)
    cdef Py_ssize_t* task_local = task_seq + ntasks
    t = 0
    for j in range(n):
        s = order[j].s
        for jj in range(flash_tasks(&shapes[s], Hkv)):
            task_seq[t], task_local[t] = s, jj
            t += 1
    cdef int nt = <int>min(_threads_for(nthreads, macs), ntasks)
    # (the q16 rows' conversions: a team only where they are large, as _convert_par's)
    cdef int cnt = <int>min(<Py_ssize_t>nt, ceil_div(nrows * Hq * D, CONVERT_CHUNK))
    cdef Py_ssize_t per_thread = flash_scratch(D, any_chunk)
    buf = _scratch("varlen:decodes", nt * per_thread * sizeof(real_t))
    cdef real_t* scratch = <real_t*>_aligned(buf)
    with nogil:
        if real_t is float and q16 != NULL:
            _rows16_list(shapes, q0s, q16, rs[0], rs[1], qs, out16, outs, n, is_f16, cnt, True)
        decodes_core(tag, ntasks, task_seq, task_local, qs, ks, vs, ss, outs, shapes, opts, scratch, per_thread, nt)
        if real_t is float and q16 != NULL and not fc_stopped(&it):
            _rows16_list(shapes, q0s, q16, rs[0], rs[1], qs, out16, outs, n, is_f16, cnt, False)
    fc_interrupt_raise(&it)
