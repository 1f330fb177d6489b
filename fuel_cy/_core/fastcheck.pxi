# The typed fast path of the generated validators (included by _kernels.pyx).  Hand-written.
#
# A call whose inputs are exact numpy arrays of an accepted dtype, rank and layout, with agreeing
# dims, is accepted here in C, with no Python-level work.  Anything else returns "not sure" (0),
# and the generated validator runs the full checks of fuel_cy.runtime._validation, which accept it
# or raise the contract's error.  So this path only has to be sound (never accept what the full
# checks reject); every message still comes from one place.

cimport numpy as cnp
from cpython.ref cimport PyObject

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
