"""Contract cost formulas, evaluated for concrete shapes (plus a measured time, when calibrated)."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Optional, Sequence, Union

import numpy as np

from ._generated import _kernels
from ._validation import NUMPY_DTYPES, dtype_code
from .contract.schema import DTYPE_BYTES
from .errors import InputError
from .registry import registry


@dataclass(frozen=True)
class CostReport:
    kernel: str
    dtype: str
    flops: float
    bytes_moved: float
    host_bytes: float
    device_bytes: float
    disk_bytes: float
    predicted_ns: Optional[float] = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _dtype_name(dtype: Any) -> str:
    if isinstance(dtype, str) and dtype.upper() in NUMPY_DTYPES:
        return dtype.upper()
    code = dtype_code(dtype) if dtype is not None else None
    if code is None:
        raise InputError("cost", "dtype", "dtype vocabulary", f"unknown dtype {dtype!r} (use F32, F64, BF16, F16)")
    return code


def cost(kernel: str, *inputs_or_shapes: Union[np.ndarray, Sequence[int], None], dtype: Any = None,
         **params: Any) -> CostReport:
    """Evaluate ``kernel``'s cost formulas.

    Pass the kernel's inputs in contract order, each as an array or a shape tuple (``None`` for an
    absent optional input).  The element type comes from ``dtype`` or the first float array
    (default F32).  Shapes are bound to the contract's dim symbols (``b, hq, sq, sk, d, hkv``...).
    """
    entry = registry.get(kernel)
    if entry is None:
        raise InputError("cost", "kernel", "registry", f"unknown kernel {kernel!r} (known: {', '.join(registry)})")
    shapes: dict[str, tuple[int, ...]] = {}
    for name, value in zip(entry.inputs, inputs_or_shapes):
        if value is None:
            continue
        if isinstance(value, np.ndarray):
            shapes[name] = tuple(value.shape)
            if dtype is None and value.dtype.kind == "f" or (dtype is None and dtype_code(value.dtype) == "BF16"):
                dtype = value.dtype
        else:
            try:
                shapes[name] = tuple(int(v) for v in value)  # type: ignore[union-attr]
            except (TypeError, ValueError):
                raise InputError("cost", f"input {name!r}", "shape", f"expected an array or a shape tuple, received {value!r}") from None
    missing = [n for n in entry.inputs if n not in shapes and n not in entry.optional_inputs]
    if missing:
        raise InputError("cost", f"input {missing[0]!r}", "accept.inputs", "missing: pass an array or a shape for every required input")
    code = _dtype_name(dtype if dtype is not None else "F32")
    try:
        raw = getattr(_kernels, f"_cost_{kernel}")(shapes, DTYPE_BYTES[code], params)
    except (IndexError, KeyError) as exc:
        raise InputError("cost", "shapes", "cost formulas", f"shapes {shapes} do not fit the contract's ranks ({exc})") from None
    report = CostReport(kernel=kernel, dtype=code, **raw)
    from .calibration import predict_ns  # local: calibration is optional

    predicted = predict_ns(kernel, code, report)
    if predicted is not None:
        report = CostReport(**{**report.as_dict(), "predicted_ns": predicted})
    return report
