# The typed fast path of the generated validators (included by _kernels.pyx).  Hand-written.
#
# A call whose inputs are exact numpy arrays of an accepted dtype, rank and layout, with agreeing
# dims, is accepted here in C, with no Python-level work.  Anything else returns "not sure" (0),
# and the generated validator runs the full checks of fuel_cy.runtime._validation, which accept it
# or raise the contract's error.  So this path only has to be sound (never accept what the full
# checks reject); every message still comes from one place.

cimport numpy as cnp
from cpython.ref cimport PyObject
import ml_dtypes as _fc_ml_dtypes
import numpy as _fc_np

cnp.import_array()

# one bit per contract dtype: the generated validators pass the mask of an input's dtypes
cdef enum:
    FC_F32 = 1
    FC_F64 = 2
    FC_BF16 = 4
    FC_F16 = 8
    FC_U32 = 16

cdef int _FC_BF16_NUM = _fc_np.dtype(_fc_ml_dtypes.bfloat16).num
# the contract code of each bit (T is returned as this string, as the full checks return it)
_FC_CODES = {FC_F32: "F32", FC_F64: "F64", FC_BF16: "BF16", FC_F16: "F16", FC_U32: "U32"}


cdef inline int _fc_dtype_bit(cnp.ndarray a) noexcept:
    """The contract dtype of a native-byte-order array, as a bit; 0 for any other dtype."""
    cdef int num = cnp.PyArray_TYPE(a)
    if not cnp.PyArray_ISNOTSWAPPED(a):
        return 0
    if num == cnp.NPY_FLOAT32:
        return FC_F32
    if num == cnp.NPY_FLOAT64:
        return FC_F64
    if num == cnp.NPY_FLOAT16:
        return FC_F16
    if num == cnp.NPY_UINT32:
        return FC_U32
    if num == _FC_BF16_NUM:
        return FC_BF16
    return 0


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
