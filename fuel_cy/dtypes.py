"""The contract's dtype vocabulary, one record per dtype: everything else that names a dtype (the
contract schema and checks, the runtime validators, the code generator's element policies and C
types, the CLI's spellings, the accuracy bounds) is derived from `DTYPES`.

Standard library only, and no numpy at import: the contract layer reads this module and must not
load numpy; `DType.numpy_dtype()` imports numpy (and ml_dtypes, for bfloat16) when first called.
"""
from __future__ import annotations

from typing import Any, Mapping, NamedTuple, Optional


class DType(NamedTuple):
    """One contract dtype, with what each layer needs to know about it.  (An immutable record; a
    NamedTuple rather than a dataclass because `import fuel_cy` reads it: six times cheaper to
    define.)"""

    code: str  # the contract's spelling: F32, F64, BF16, F16, U32, I32, BOOL
    bytes: int  # storage bytes of one element (`dtype_bytes` in the cost formulas)
    is_float: bool
    numpy_name: str  # the numpy (or ml_dtypes) name: float32, bfloat16, ...
    numpy_module: str  # the module that defines it: "numpy", or "ml_dtypes" (numpy has no bfloat16)
    npy_typenum: Optional[str]  # numpy's C type number (Cython: cnp.<name>); None for ml_dtypes' types
    ctype: str  # the C type of one stored element (a half type's 16 bits: unsigned short)
    # the element policy under "math in T" (precision.compute: T): the compile-time rounding tag
    # of policy.pxi (None: not a float, no policy), the C type the core computes in, and the numpy
    # dtype of the core's work arrays (half types are widened exactly to float32 and every step is
    # rounded back to T)
    rounding: Optional[str]
    work_ctype: str
    work_numpy: str
    f32_compute: bool  # runs under the float32 policy (precision.compute: f32)
    significand_bits: Optional[int] = None  # precision p of a float: its unit roundoff is 2**-p
    half: Optional[int] = None  # a 16-bit float: the half drivers' `is_f16` argument (0 bf16, 1 f16)

    @property
    def aliases(self) -> tuple[str, ...]:
        """Spellings a user may type for it (case-insensitive): f32, float32, ..."""
        return (self.code.lower(), self.numpy_name)

    @property
    def python_spelling(self) -> str:
        """How Python code names its numpy type: np.float32, ml_dtypes.bfloat16."""
        return f"{'np' if self.numpy_module == 'numpy' else self.numpy_module}.{self.numpy_name}"

    @property
    def numpy_repr(self) -> str:
        """repr() of its numpy dtype: dtype('float32'), dtype(bfloat16)."""
        return f"dtype({self.numpy_name!r})" if self.numpy_module == "numpy" else f"dtype({self.numpy_name})"

    @property
    def unit_roundoff(self) -> Optional[float]:
        return 2.0 ** -self.significand_bits if self.significand_bits else None

    @property
    def narrow(self) -> bool:
        """Stored narrower than the core computes: widened exactly on the way in, each output
        element rounded to T on the way out."""
        return self.is_float and self.numpy_name != self.work_numpy   # (I32 is read as U32 bits: not narrower)

    @property
    def rounds_each_step(self) -> bool:
        """Under "math in T", every arithmetic result is rounded to T (T is narrower than its
        work type)."""
        return self.rounding is not None and self.narrow

    @property
    def policy(self) -> Optional[tuple[str, str, str]]:
        """(rounding tag, C work type, numpy work dtype) under "math in T"; None for integers."""
        return (self.rounding, self.work_ctype, self.work_numpy) if self.rounding else None

    def numpy_dtype(self) -> Any:
        """Its numpy.dtype (imports numpy, and ml_dtypes for bfloat16)."""
        import importlib

        import numpy

        return numpy.dtype(getattr(importlib.import_module(self.numpy_module), self.numpy_name))


DTYPES: Mapping[str, DType] = {d.code: d for d in (
    DType("F32", 4, True, "float32", "numpy", "NPY_FLOAT32", "float", "RoundNone", "float", "float32", True, 24),
    DType("F64", 8, True, "float64", "numpy", "NPY_FLOAT64", "double", "RoundNone", "double", "float64", False, 53),
    DType("BF16", 2, True, "bfloat16", "ml_dtypes", None, "unsigned short", "RoundBF16", "float", "float32", True, 8, 0),
    DType("F16", 2, True, "float16", "numpy", "NPY_FLOAT16", "unsigned short", "RoundF16", "float", "float32", True, 11, 1),
    DType("U32", 4, False, "uint32", "numpy", "NPY_UINT32", "unsigned int", None, "unsigned int", "uint32", False),
    # flash-attn's and torch's index dtype: where a contract lists it beside U32 its values must be
    # >= 0 (checked with the other index rules), and the core reads each as the uint32 it equals
    DType("I32", 4, False, "int32", "numpy", "NPY_INT32", "int", None, "unsigned int", "uint32", False),
    # a boolean mask: numpy's bool, one byte holding 0 or 1 (True: the pair takes part)
    DType("BOOL", 1, False, "bool", "numpy", "NPY_BOOL", "unsigned char", None, "unsigned char", "bool", False),
)}
"""Contract dtype code -> its record, in the vocabulary's order."""

FLOAT_CODES: tuple[str, ...] = tuple(code for code, d in DTYPES.items() if d.is_float)
INT_CODES: tuple[str, ...] = tuple(code for code, d in DTYPES.items() if not d.is_float)
COMPUTE_F32 = DTYPES["F32"]
"""The dtype whose policy the float32-compute kernels (precision.compute: f32) run under."""


def policy(compute: str, code: str) -> Optional[tuple[str, str, str]]:
    """The element policy (rounding tag, C work type, numpy work dtype) a dtype runs under.
    compute "T": every step rounded to the element type; "f32": no arithmetic narrower than
    float32: half inputs widened exactly and every step in float32 (the float32 policy), outputs
    rounded once to T when narrowed, and a dtype wider than float32 (float64) in its own type.
    None: no policy (an integer dtype)."""
    d = DTYPES[code]
    if compute == "f32" and d.f32_compute:
        return COMPUTE_F32.policy
    return d.policy


def from_alias(text: str) -> Optional[str]:
    """The code a user's spelling names (F32, f32, float32, ...), or None."""
    low = text.lower()
    for code, d in DTYPES.items():
        if low == code.lower() or low in d.aliases:
            return code
    return None
