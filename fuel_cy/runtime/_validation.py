"""Runtime helpers that the generated validators call (what to check is generated from the
contract; how a numpy array is inspected lives here, once)."""
from __future__ import annotations

import math
import numbers
from typing import Any, Optional, Sequence

import numpy as np

from ..dtypes import DTYPES
from ..errors import InputError

NUMPY_DTYPES: dict[str, np.dtype] = {code: d.numpy_dtype() for code, d in DTYPES.items()}
"""Contract dtype code -> numpy dtype (bfloat16 from ml_dtypes)."""
_CODES = {dtype: code for code, dtype in NUMPY_DTYPES.items()}


def dtype_code(dtype: Any) -> Optional[str]:
    try:
        return _CODES.get(np.dtype(dtype))
    except TypeError:
        return None


def require_array(kernel: str, name: str, x: Any, where: str) -> None:
    if isinstance(x, np.ndarray):
        return
    hint = ""
    if type(x).__module__.startswith("torch"):
        hint = (f" (call fuel_cy.torch.{kernel} for tensors, bf16 included; fuel_cy's numpy API takes numpy "
                "arrays only and never copies silently)")
    elif isinstance(x, (list, tuple)):
        hint = " (wrap it with numpy.asarray(..., dtype=...); fuel_cy does not guess dtypes)"
    raise InputError(kernel, f"input {name!r}", "accept.inputs", f"expected a numpy.ndarray, received {type(x).__name__}{hint}", where)


def check_dtype(kernel: str, name: str, x: np.ndarray, allowed: Sequence[str], clause: str, where: str) -> str:
    code = dtype_code(x.dtype)
    if code not in allowed:
        raise InputError(kernel, f"input {name!r}", f"{clause} {list(allowed)}", f"received dtype {x.dtype}", where)
    return code  # type: ignore[return-value]


def full_rank(x: Any, min_rank: int, rank: int) -> Any:
    """An array of rank min_rank .. rank - 1 as a view with leading dims of 1 up to `rank`
    (numpy's broadcasting; the contract's `min_rank`); anything else unchanged, for the checks."""
    if isinstance(x, np.ndarray) and min_rank <= x.ndim < rank:
        return x.reshape((1,) * (rank - x.ndim) + x.shape)
    return x


def given_ranks(result: Any, outputs: tuple[tuple[int, Any], ...]) -> Any:
    """`result` (one array or a bundle) with each output (index, given input) reshaped to the
    shape of the input as the caller passed it, before full_rank gave it leading dims of 1."""
    arrays = list(result) if isinstance(result, tuple) else [result]
    for n, given in outputs:
        arrays[n] = arrays[n].reshape(given.shape)
    return tuple(arrays) if isinstance(result, tuple) else arrays[0]


def check_caller_buffer(kernel: str, param: str, output: str, buf: Any, shape: tuple[int, ...], dtype: Any,
                        inputs: tuple[Any, ...], clause: str, where: str) -> None:
    """The array a caller gives to receive `output` (the contract's caller_buffer): a writeable
    C-contiguous numpy array of the output's dtype and shape that shares no memory with any
    input (the kernel reads its inputs while it writes, and inputs are never modified)."""
    name = f"param {param!r}"
    what = f"{clause}: the array that receives {output!r} must"
    if not isinstance(buf, np.ndarray):
        raise InputError(kernel, name, f"{what} be a numpy array", f"received {type(buf).__name__}", where)
    want = np.dtype(dtype)
    if buf.dtype != want:
        raise InputError(kernel, name, f"{what} have the output's dtype {want}", f"received dtype {buf.dtype}", where)
    if tuple(buf.shape) != tuple(shape):
        raise InputError(kernel, name, f"{what} have the output's shape {tuple(shape)}",
                         f"received shape {tuple(buf.shape)}", where)
    if not buf.flags.c_contiguous:
        raise InputError(kernel, name, f"{what} be C-contiguous", f"received strides {buf.strides}", where)
    if not buf.flags.writeable:
        raise InputError(kernel, name, f"{what} be writeable", "received a read-only array", where)
    for x in inputs:
        # (bounds first; then exactly, which is cheap with buf contiguous: a view interleaved
        # with an input, as two slices of one fused buffer, is fine)
        if isinstance(x, np.ndarray) and np.may_share_memory(buf, x):
            if np.shares_memory(buf, x):
                raise InputError(kernel, name, f"{what} share no memory with an input",
                                 f"received an array overlapping an input of shape {tuple(x.shape)}", where)


def write_into(result: Any, buffers: tuple[tuple[int, Any], ...]) -> Any:
    """`result` (one array or a tuple) with each output (index, given array) copied into the
    caller's array, which replaces it: the kernel returns the array the caller gave."""
    arrays = list(result) if isinstance(result, tuple) else [result]
    for n, buf in buffers:
        if buf is not None:
            np.copyto(buf, arrays[n], casting="no")
            arrays[n] = buf
    return tuple(arrays) if isinstance(result, tuple) else arrays[0]


def check_rank(kernel: str, name: str, x: np.ndarray, rank: int, clause: str, where: str) -> None:
    if x.ndim != rank:
        raise InputError(kernel, f"input {name!r}", f"{clause} {rank}", f"received rank {x.ndim} (shape {x.shape})", where)


def _root(x: np.ndarray) -> Any:
    base = x
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    return base


def has_start_offset(x: np.ndarray) -> bool:
    root = _root(x)
    if root is x or not isinstance(root, np.ndarray) or x.size == 0:
        return False
    return x.__array_interface__["data"][0] != root.__array_interface__["data"][0]


LAYOUT_PREDICATES = {
    "contiguous": lambda x: bool(x.flags.c_contiguous),
    "strided": lambda x: not x.flags.c_contiguous,
    # an empty array holds no data, so numpy's zero strides on it are not a broadcast
    "broadcast_stride0": lambda x: x.size > 0 and any(s == 0 and n > 1 for s, n in zip(x.strides, x.shape)),
    "reverse_strides": lambda x: x.size > 0 and any(s < 0 and n > 1 for s, n in zip(x.strides, x.shape)),
    "start_offset": has_start_offset,
}
_LAYOUT_WORDS = {
    "contiguous": ("is not C-contiguous", "is C-contiguous"),
    "strided": ("is not strided", "is a strided (non-C-contiguous) view"),
    "broadcast_stride0": ("has no zero stride", "has a zero (broadcast) stride on an extent > 1"),
    "reverse_strides": ("has no negative stride", "has a negative stride"),
    "start_offset": ("starts at its buffer's start", "is a view that starts past its buffer's start"),
}


def check_layout(kernel: str, name: str, x: np.ndarray, key: str, policy: str, clause: str, where: str) -> None:
    if policy == "accepted":
        return
    holds = LAYOUT_PREDICATES[key](x)
    if policy == "required" and not holds:
        received = _LAYOUT_WORDS[key][0]
    elif policy == "rejected" and holds:
        received = _LAYOUT_WORDS[key][1]
    else:
        return
    # numpy.ascontiguousarray returns an offset view that is already contiguous unchanged
    advice = ("pass a copy (x.copy()); numpy.ascontiguousarray would return this same view" if key == "start_offset"
              else "use numpy.ascontiguousarray (or x.copy())")
    raise InputError(kernel, f"input {name!r}", f"{clause}.{key}: {policy}",
                     f"array {received} (shape {x.shape}, strides {x.strides}); {advice}", where)


def bind_dim(kernel: str, dims: dict, symbol: str, name: str, axis: int, value: int, clause: str, where: str) -> None:
    if symbol in dims:
        bound, by = dims[symbol]
        if bound != value:
            raise InputError(kernel, f"input {name!r}", f"{clause}: dim {symbol} is shared",
                             f"{name}.shape[{axis}] = {value} but {by} = {bound}", where)
    else:
        dims[symbol] = (value, f"{name}.shape[{axis}]")


def same_element_type(kernel: str, pairs: Sequence[tuple[str, np.ndarray]], where: str) -> str:
    first_name, first = pairs[0]
    for name, arr in pairs[1:]:
        if arr.dtype != first.dtype:
            raise InputError(kernel, f"input {name!r}", "accept.inputs: all float inputs share one element type T",
                             f"{name} is {arr.dtype} but {first_name} is {first.dtype}", where)
    return dtype_code(first.dtype)  # type: ignore[return-value]


def constraint_failed(kernel: str, owner: str, clause: str, values: Sequence[tuple[str, Any]], where: str) -> InputError:
    shown = ", ".join(f"{label} = {value}" for label, value in values)
    return InputError(kernel, owner, clause, f"not satisfied: {shown}", where)


def divisible(a: int, b: int) -> bool:
    return b != 0 and a % b == 0


def broadcasts(shape: Sequence[int], target: Sequence[int]) -> bool:
    """Each dim of `shape` is 1 or the target's at that axis (same rank: the caller checked it)."""
    return len(shape) == len(target) and all(s == 1 or s == t for s, t in zip(shape, target))


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def _finite(value: Any) -> bool:
    """A real whose float is finite: an integer beyond float64's range (10**400) overflows float()
    itself, which must be the param's InputError, not an OverflowError."""
    if not _is_real(value):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def param_f32(kernel: str, name: str, value: Any, optional: bool, clause: str, where: str) -> Optional[float]:
    """An `f32` param: a finite real, rounded to float32 exactly as the contract's kind says."""
    if value is None and optional:
        return None
    if not _finite(value):
        raise InputError(kernel, f"param {name!r}", f"{clause} (kind f32: a finite real)", f"received {value!r}", where)
    with np.errstate(over="ignore"):   # a value beyond float32's range is the error below, not a warning
        rounded = float(np.float32(value))
    if not math.isfinite(rounded):
        raise InputError(kernel, f"param {name!r}", f"{clause} (kind f32: a finite real)", f"received {value!r}", where)
    return rounded


def param_f64(kernel: str, name: str, value: Any, optional: bool, clause: str, where: str) -> Optional[float]:
    if value is None and optional:
        return None
    if not _finite(value):
        raise InputError(kernel, f"param {name!r}", f"{clause} (kind f64: a finite real)", f"received {value!r}", where)
    return float(value)


def param_bool(kernel: str, name: str, value: Any, optional: bool, clause: str, where: str) -> Optional[bool]:
    if value is None and optional:
        return None
    if not isinstance(value, (bool, np.bool_)):
        raise InputError(kernel, f"param {name!r}", f"{clause} (kind bool)", f"received {value!r}", where)
    return bool(value)


USIZE_MAX = 2**64 - 1  # the contract's usize is the oracle's 64-bit unsigned integer


def param_usize(kernel: str, name: str, value: Any, optional: bool, clause: str, where: str) -> Optional[int]:
    """A `usize` param: an integer in [0, 2**64 - 1].  Every value of that range is safe: the core
    reads one at or above an extent it bounds as that extent (a window of 2**64 - 1 is no window)."""
    if value is None and optional:
        return None
    if (isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral)
            or not 0 <= int(value) <= USIZE_MAX):
        raise InputError(kernel, f"param {name!r}", f"{clause} (kind usize: an integer in [0, 2**64 - 1])",
                         f"received {value!r}", where)
    return int(value)


def work(x: Optional[np.ndarray], dtype: str) -> np.ndarray:
    """A flat contiguous copy-or-view in the core's work type (bf16/f16 widen exactly to f32)."""
    if x is None:
        return np.zeros(1, dtype=dtype)
    return np.ascontiguousarray(x, dtype=dtype).reshape(-1)


def from_work(arr: np.ndarray, code: str) -> np.ndarray:
    """Back to T; the core already rounded every value to T, so this cast is exact."""
    target = NUMPY_DTYPES[code]
    return arr if arr.dtype == target else arr.astype(target)


def _size(nbytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} B"


def out_of_memory(kernel: str, outputs: Sequence[tuple[str, tuple[int, ...], str]],
                  exc: MemoryError) -> MemoryError:
    """The MemoryError of a call whose outputs or workspace could not be allocated: it names the
    kernel and the bytes the outputs it returns alone need (name, shape and dtype code of each),
    and keeps the allocator's own words."""
    need = [(name, shape, code, math.prod(shape) * NUMPY_DTYPES[code].itemsize) for name, shape, code in outputs]
    parts = ", ".join(f"{name} {list(shape)} {code} = {_size(n)}" for name, shape, code, n in need)
    total = sum(n for *_, n in need)
    return MemoryError(f"{kernel}: not enough memory for the call: its outputs need {total} bytes "
                       f"({_size(total)}: {parts}) plus working space (numpy: {exc})")
