# The typed fast path of the generated validators (included by _kernels.pyx).  Hand-written.
#
# A call whose inputs are exact numpy arrays of an accepted dtype, rank and layout, with agreeing
# dims, is accepted here in C, with no Python-level work.  Anything else returns "not sure" (0),
# and the generated validator runs the full checks of fuel_cy.runtime._validation, which accept it
# or raise the contract's error.  So this path only has to be sound (never accept what the full
# checks reject); every message still comes from one place.

cimport numpy as cnp
from cpython.ref cimport PyObject
from fuel_cy.runtime import _prose_checks as _fc_prose

cnp.import_array()

# generated from the dtype record (fuel_cy/dtypes.py): the FC_<code> bit of each contract dtype
# (the generated validators pass the mask of an input's dtypes), _FC_CODES (bit -> code) and
# _fc_typenum_bit (numpy type number -> bit)
include "_fastcheck_dtypes.pxi"


cdef inline int _fc_dtype_bit(cnp.ndarray a) noexcept:
    """The contract dtype of a native-byte-order array, as a bit; 0 for any other dtype."""
    if not cnp.PyArray_ISNOTSWAPPED(a):
        return 0
    return _fc_typenum_bit(cnp.PyArray_TYPE(a))


cdef inline bint _fc_starts_at_buffer(cnp.ndarray a) noexcept:
    """_validation.has_start_offset, negated, without Python calls: a view that starts where the
    root array of its base chain starts (or no view at all)."""
    cdef PyObject* root = <PyObject*>a
    cdef PyObject* base
    if cnp.PyArray_SIZE(a) == 0:
        return True
    while cnp.PyArray_Check(<object>root):
        base = cnp.PyArray_BASE(<cnp.ndarray>root)   # borrowed
        if base == NULL:
            break
        root = base
    if root == <PyObject*>a or not cnp.PyArray_Check(<object>root):
        return True
    return cnp.PyArray_DATA(a) == cnp.PyArray_DATA(<cnp.ndarray>root)


cdef inline int _fc_fast_input(object x, int rank, int mask, Py_ssize_t* dims, const int* slots) noexcept:
    """The dtype bit of `x` when it is an exact ndarray of that rank, of a dtype in `mask`,
    C-contiguous and starting at its buffer's start, with every axis agreeing with the dims
    bound so far (binding the unbound ones: slots[axis] indexes `dims`, -1 for a free axis);
    else 0.  Only for inputs whose layout clauses accept exactly such arrays (codegen decides)."""
    cdef cnp.ndarray a
    cdef int bit, axis, s
    cdef Py_ssize_t n
    if not cnp.PyArray_CheckExact(x):
        return 0
    a = <cnp.ndarray>x
    if cnp.PyArray_NDIM(a) != rank:
        return 0
    bit = _fc_dtype_bit(a)
    if not (bit & mask):
        return 0
    if not cnp.PyArray_IS_C_CONTIGUOUS(a) or not _fc_starts_at_buffer(a):
        return 0
    for axis in range(rank):
        s = slots[axis]
        if s < 0:
            continue
        n = cnp.PyArray_DIM(a, axis)
        if dims[s] < 0:
            dims[s] = n
        elif dims[s] != n:
            return 0
    return bit


# ---- Foreign memory as an exact ndarray (fuel_cy.torch's direct calls) ------------------------
# A bf16 torch tensor has no numpy view of its own (numpy has no bf16): `t.view(torch.int16)
# .numpy().view(bfloat16)` made two tensors' worth of Python objects per input, 1.3 us of a decode
# step's ~5 us.  This makes the view in one step, as an exact ndarray the fast path above accepts.

from cpython.ref cimport Py_INCREF

cdef extern from "numpy/arrayobject.h":
    object _fc_NewFromDescr "PyArray_NewFromDescr" (PyObject* subtype, PyObject* descr, int nd,
                                                    cnp.npy_intp* dims, cnp.npy_intp* strides, void* data,
                                                    int flags, PyObject* obj)


def array_view(size_t address, object shape, object strides, cnp.dtype dtype, object owner):
    """An ndarray of `dtype` over memory that `owner` keeps alive (writable, as `Tensor.numpy()`): `shape`, and `strides`
    in elements (a torch tensor's `data_ptr()`, `shape`, `stride()`).  The caller vouches for the
    memory (every element the shape and strides reach lies in `owner`'s buffer)."""
    cdef int nd = len(shape), a
    cdef cnp.npy_intp dims[32]
    cdef cnp.npy_intp steps[32]
    if nd > 32 or len(strides) != nd:
        raise ValueError(f"array_view: shape {shape} and strides {strides} of ranks up to 32 that agree")
    for a in range(nd):
        dims[a] = shape[a]
        steps[a] = <cnp.npy_intp>strides[a] * dtype.itemsize
    Py_INCREF(dtype)   # PyArray_NewFromDescr steals a reference to the descriptor
    arr = _fc_NewFromDescr(<PyObject*>cnp.ndarray, <PyObject*>dtype, nd, dims, steps, <void*>address, cnp.NPY_ARRAY_WRITEABLE, NULL)
    cnp.set_array_base(arr, owner)
    return arr


# ---- Shape constraints over the dims of arrays _fc_fast_input accepted (codegen/view.py
# _fast_constraint_source emits them; the same conditions as fuel_cy.runtime._validation's) ----

cdef inline bint _fc_divisible(Py_ssize_t a, Py_ssize_t b) noexcept:
    return b != 0 and a % b == 0


cdef inline bint _fc_same_shape(object a, object b) noexcept:
    cdef int axis, n = cnp.PyArray_NDIM(<cnp.ndarray>a)
    if cnp.PyArray_NDIM(<cnp.ndarray>b) != n:
        return False
    for axis in range(n):
        if cnp.PyArray_DIM(<cnp.ndarray>a, axis) != cnp.PyArray_DIM(<cnp.ndarray>b, axis):
            return False
    return True


cdef inline bint _fc_broadcast_dim(object x, int axis, Py_ssize_t target) noexcept:
    cdef Py_ssize_t d = cnp.PyArray_DIM(<cnp.ndarray>x, axis)
    return d == 1 or d == target


# ---- The prose rules (fuel_cy.runtime._prose_checks), typed ------------------------------------
# The same soundness contract: True only when the rules certainly hold; False sends the call to
# the Python rules, which accept it or raise the contract's error.  A driver is typed only while
# every rule its RULES list names has a typed copy here (checked at import), so a rule added in
# Python is never skipped.

cdef inline bint _fc_softcap_ok(dict params):
    cap = params.get("softcap")
    return cap is None or (type(cap) is float and <double>cap > 0)


cdef inline bint _fc_k_len_ok(dict arrays, dict params):
    k_len = params.get("k_len")
    if k_len is None:
        return True
    k = arrays["k"]
    return (type(k_len) is int and cnp.PyArray_Check(k) and cnp.PyArray_NDIM(<cnp.ndarray>k) == 4
            and k_len <= cnp.PyArray_DIM(<cnp.ndarray>k, 2))


cdef inline bint _fc_c_array(object x, int rank, int typenum) noexcept:
    """An exact, native-order, C-contiguous ndarray of that rank and numpy type."""
    return (cnp.PyArray_CheckExact(x) and cnp.PyArray_NDIM(<cnp.ndarray>x) == rank
            and cnp.PyArray_TYPE(<cnp.ndarray>x) == typenum and cnp.PyArray_ISNOTSWAPPED(<cnp.ndarray>x)
            and cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>x))


cdef inline bint _fc_u32_c(object x, int rank) noexcept:
    return _fc_c_array(x, rank, cnp.NPY_UINT32)


cdef inline bint _fc_table_row_ok(const unsigned int* row, unsigned int keys, Py_ssize_t bs, Py_ssize_t mb,
                                  Py_ssize_t nb, unsigned int limit) noexcept:
    """A block-table row of mb slots holds `keys` keys of bs per block (bs > 0), and every block
    they read is below nb and at most `limit` (_fc_index_limit); the slots past them may hold
    anything."""
    cdef Py_ssize_t live = (<Py_ssize_t>keys + bs - 1) // bs, s   # keys <= mb * bs without the product
    if live > mb:
        return False
    for s in range(live):
        if row[s] > limit or <Py_ssize_t>row[s] >= nb:
            return False
    return True


cdef bint _fc_paged_ok(dict arrays):
    """Every context fits its table row's capacity and every block id a live context reads is
    below num_blocks: one pass over context_lens and the live part of the table."""
    table, lens, pool = arrays["block_table"], arrays["context_lens"], arrays["k_cache"]
    if not (_fc_u32_c(table, 2) and _fc_u32_c(lens, 1) and cnp.PyArray_Check(pool)
            and cnp.PyArray_NDIM(<cnp.ndarray>pool) >= 2):
        return False
    cdef Py_ssize_t B = cnp.PyArray_DIM(<cnp.ndarray>lens, 0), mb = cnp.PyArray_DIM(<cnp.ndarray>table, 1)
    cdef Py_ssize_t nb = cnp.PyArray_DIM(<cnp.ndarray>pool, 0), bs = cnp.PyArray_DIM(<cnp.ndarray>pool, 1)
    cdef const unsigned int* t = <const unsigned int*>cnp.PyArray_DATA(<cnp.ndarray>table)
    cdef const unsigned int* n = <const unsigned int*>cnp.PyArray_DATA(<cnp.ndarray>lens)
    cdef Py_ssize_t b
    if cnp.PyArray_DIM(<cnp.ndarray>table, 0) != B or bs <= 0:
        return False
    for b in range(B):
        if not _fc_table_row_ok(t + b * mb, n[b], bs, mb, nb, 0xffffffffu):
            return False
    return True


cdef inline bint _fc_index_c(object x, int rank) noexcept:
    """A C-contiguous uint32 array, or an int32 one (the contract's I32), of that rank: the core
    reads either as uint32."""
    return _fc_u32_c(x, rank) or _fc_c_array(x, rank, cnp.NPY_INT32)


cdef inline unsigned int _fc_index_limit(object x) noexcept:
    """The largest value an index array may hold and pass: an int32 array's values must be >= 0,
    so read as uint32 they stay below 2**31 (what _prose_checks._nonnegative passes)."""
    return 0x7fffffffu if cnp.PyArray_TYPE(<cnp.ndarray>x) == cnp.NPY_INT32 else 0xffffffffu


cdef bint _fc_offsets_ok(object cu, Py_ssize_t rows) noexcept:
    """cu is B + 1 >= 1 offsets from 0, non-decreasing, ending at `rows` (rows < 0: anywhere),
    uint32 or int32 with no negative value: what _prose_checks._nonnegative and _offsets pass."""
    if not _fc_index_c(cu, 1):
        return False
    cdef Py_ssize_t n = cnp.PyArray_DIM(<cnp.ndarray>cu, 0), b
    cdef const unsigned int* c = <const unsigned int*>cnp.PyArray_DATA(<cnp.ndarray>cu)
    cdef unsigned int limit = _fc_index_limit(cu)
    if n == 0 or c[0] != 0 or (rows >= 0 and <Py_ssize_t>c[n - 1] != rows):
        return False
    for b in range(1, n):
        if c[b] < c[b - 1] or c[b] > limit:
            return False
    return True


cdef bint _fc_cu_seqlens_ok(dict arrays, dict params):
    """The typed copy of _prose_checks._cu_seqlens: the offsets, seqused_k at most each sequence's
    keys, a block_table row holding each sequence's keys with every block it reads below NB, and
    max_seqlen_q/_k at least every length.  One pass over the offsets and the live table slots;
    the uint32 and int32 index arrays the kernels take (another dtype or layout: the Python rule)."""
    q, k = arrays["q"], arrays["k"]
    table, used = arrays.get("block_table"), arrays.get("seqused_k")
    cu_q, cu_k = arrays["cu_seqlens_q"], arrays["cu_seqlens_k"]
    if not (cnp.PyArray_Check(q) and cnp.PyArray_NDIM(<cnp.ndarray>q) >= 1
            and cnp.PyArray_Check(k) and cnp.PyArray_NDIM(<cnp.ndarray>k) >= 2):
        return False
    cdef Py_ssize_t nb = cnp.PyArray_DIM(<cnp.ndarray>k, 0), bs = cnp.PyArray_DIM(<cnp.ndarray>k, 1)
    if not (_fc_offsets_ok(cu_q, cnp.PyArray_DIM(<cnp.ndarray>q, 0))
            and _fc_offsets_ok(cu_k, -1 if table is not None else nb * bs)):
        return False
    cdef Py_ssize_t B = cnp.PyArray_DIM(<cnp.ndarray>cu_q, 0) - 1, b, mb = 0
    if cnp.PyArray_DIM(<cnp.ndarray>cu_k, 0) != B + 1:
        return False
    cdef const unsigned int* cq = <const unsigned int*>cnp.PyArray_DATA(<cnp.ndarray>cu_q)
    cdef const unsigned int* ck = <const unsigned int*>cnp.PyArray_DATA(<cnp.ndarray>cu_k)
    cdef const unsigned int* u = NULL
    cdef const unsigned int* t = NULL
    cdef unsigned int ulimit = 0, tlimit = 0, lk, longest_q = 0, longest_k = 0
    if used is not None:
        if not (_fc_index_c(used, 1) and cnp.PyArray_DIM(<cnp.ndarray>used, 0) == B):
            return False
        u = <const unsigned int*>cnp.PyArray_DATA(<cnp.ndarray>used)
        ulimit = _fc_index_limit(used)
    if table is not None:
        if not (_fc_index_c(table, 2) and cnp.PyArray_DIM(<cnp.ndarray>table, 0) == B and bs > 0):
            return False
        t = <const unsigned int*>cnp.PyArray_DATA(<cnp.ndarray>table)
        tlimit = _fc_index_limit(table)
        mb = cnp.PyArray_DIM(<cnp.ndarray>table, 1)
    for b in range(B):
        lk = ck[b + 1] - ck[b]
        if u != NULL:
            if u[b] > lk or u[b] > ulimit:
                return False
            lk = u[b]
        if t != NULL and not _fc_table_row_ok(t + b * mb, lk, bs, mb, nb, tlimit):
            return False
        if cq[b + 1] - cq[b] > longest_q:
            longest_q = cq[b + 1] - cq[b]
        if lk > longest_k:
            longest_k = lk
    bound_q, bound_k = params.get("max_seqlen_q"), params.get("max_seqlen_k")
    return B == 0 or ((bound_q is None or bound_q >= longest_q) and (bound_k is None or bound_k >= longest_k))


# Each Python rule with a typed copy, by identity; a driver is typed when every rule RULES lists
# for it has one (so a rule added in Python without a typed copy turns its driver's typed path off)
cdef enum:
    _FC_RULE_SOFTCAP = 1
    _FC_RULE_K_LEN = 2
    _FC_RULE_PAGED = 3
    _FC_RULE_CU_SEQLENS = 4
    _FC_RULE_OUT_WITH_LSE = 5
_FC_RULE_COPIES = {_fc_prose._softcap: _FC_RULE_SOFTCAP, _fc_prose._k_len: _FC_RULE_K_LEN,
                   _fc_prose._paged: _FC_RULE_PAGED, _fc_prose._cu_seqlens: _FC_RULE_CU_SEQLENS,
                   _fc_prose._out_with_lse: _FC_RULE_OUT_WITH_LSE}
_FC_DRIVER_RULES = {d: tuple(_FC_RULE_COPIES[r] for r in rules) for d, rules in _fc_prose.RULES.items()
                    if all(r in _FC_RULE_COPIES for r in rules)}
_FC_TYPED = frozenset(_FC_DRIVER_RULES)


cdef bint _fc_prose_ok(str driver, dict arrays, dict params):
    """True when the prose rules of `driver` certainly hold (typed); False: run the Python rules."""
    rules = _FC_DRIVER_RULES.get(driver)
    if rules is None:
        return False
    for rule in rules:
        if rule == _FC_RULE_SOFTCAP:
            if not _fc_softcap_ok(params):
                return False
        elif rule == _FC_RULE_K_LEN:
            if not _fc_k_len_ok(arrays, params):
                return False
        elif rule == _FC_RULE_CU_SEQLENS:
            if not _fc_cu_seqlens_ok(arrays, params):
                return False
        elif rule == _FC_RULE_OUT_WITH_LSE:
            if (arrays.get("out") is None) != (arrays.get("lse") is None):
                return False
        elif not _fc_paged_ok(arrays):
            return False
    return True
