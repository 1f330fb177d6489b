"""Contract cost formulas, evaluated for concrete shapes (plus a measured time, when calibrated)."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence, Union

import numpy as np

from .._generated import _kernels
from ..dtypes import DTYPES, FLOAT_CODES
from ..errors import InputError
from ._validation import NUMPY_DTYPES, dtype_code
from .registry import registry


@dataclass(frozen=True)
class CostReport:
    """What one call of a kernel costs, from its contract's cost formulas at the call's shapes
    (`fuel_cy.cost`): floating-point operations, bytes moved and the memory it allocates, and,
    when `fuel-cy calibrate` has fitted this machine, the predicted time in nanoseconds.

    Attributes
    ----------
    kernel : str
        The kernel costed, e.g. `"attention_flash"`.
    dtype : str
        The element type of the call, as the contract names it (`"F32"`, `"BF16"`, ...).
    flops : float
        Floating-point operations of the call (the contract's `cost.flops` formula).
    bytes_moved : float
        Bytes read and written (the contract's `cost.bytes_moved`).
    host_bytes : float
        Host memory the call allocates for what it returns (the contract's `memory.host_bytes`).
    device_bytes : float
        Accelerator memory (`memory.device_bytes`): 0 for every CPU kernel's contract.
    disk_bytes : float
        Disk bytes (`memory.disk_bytes`): 0 for every kernel's contract.
    predicted_ns : float or None
        The call's time in nanoseconds by this machine's fitted time model; None until
        `fuel-cy calibrate` has run.
    """

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
        raise InputError("cost", "dtype", "dtype vocabulary", f"unknown dtype {dtype!r} (use {', '.join(FLOAT_CODES)})")
    return code


def _require_inputs(entry: Any, shapes: Mapping[str, Any]) -> None:
    missing = [n for n in entry.inputs if n not in shapes and n not in entry.optional_inputs]
    if missing:
        raise InputError("cost", f"input {missing[0]!r}", "accept.inputs", "missing: pass an array or a shape for every required input")


def _input_dtypes(entry: Any) -> dict[str, tuple[str, ...]]:
    """Each input's contract dtypes, from the copy of the contract the extension was generated
    from (fuel_cy/_generated/contracts/), else the one in use."""
    from ..contract import load_contract
    from ..contract.loader import default_contracts_dir

    name = Path(entry.contract).name
    for folder in (Path(__file__).resolve().parents[1] / "_generated" / "contracts", default_contracts_dir()):
        if (folder / name).is_file():
            for k in load_contract(folder / name).kernels:
                if k.name == entry.name:
                    return {i.name: tuple(i.dtypes) for i in k.inputs}
    return {}


def _stand_in(shape: tuple[int, ...], dtype: np.dtype, fill: bool) -> np.ndarray:
    """An array of `shape` for the validators to inspect.  Float inputs are never read before the
    compute, so they are C-contiguous views of a single element (no memory, any size); inputs whose
    contents the checks read (block tables, lengths) are real zero-filled arrays."""
    if fill:
        return np.zeros(shape, dtype)
    strides = []
    step = dtype.itemsize
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return np.lib.stride_tricks.as_strided(np.zeros(1, dtype), shape, tuple(reversed(strides)), writeable=False)


def check_shapes(kernel: str, shapes: Mapping[str, Sequence[int]], dtype: Any = "F32", **params: Any) -> None:
    """Check a call of `kernel` on inputs of these shapes exactly as the kernel checks a call: its
    own generated validator runs on stand-in arrays (float inputs in `dtype`, index inputs in
    their contract type), so a shape the kernel would reject raises the kernel's InputError."""
    entry = registry.get(kernel)
    if entry is None:
        raise InputError("cost", "kernel", "registry", f"unknown kernel {kernel!r} (known: {', '.join(registry)})")
    _require_inputs(entry, shapes)
    T = NUMPY_DTYPES[_dtype_name(dtype)]
    declared = _input_dtypes(entry)
    arrays: list[Optional[np.ndarray]] = []
    for name in entry.inputs:
        if name not in shapes:
            arrays.append(None)
            continue
        allowed = declared.get(name, ())
        floats = [d for d in allowed if d in FLOAT_CODES]
        code = None if floats or not allowed else allowed[0]
        try:
            arrays.append(_stand_in(tuple(int(n) for n in shapes[name]),
                                    T if code is None else NUMPY_DTYPES[code], fill=code is not None))
        except (ValueError, MemoryError) as exc:
            raise InputError(kernel, f"input {name!r}", "shape", f"cannot stand for shape {tuple(shapes[name])}: {exc}") from None
    validate = getattr(_kernels, f"_validate_{kernel}")
    defaults = {k: v for k, v in (entry.fn.__kwdefaults__ or {}).items() if k in entry.params}
    validate(*arrays, **{**defaults, **{k: v for k, v in params.items() if k in entry.params}})


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
    _require_inputs(entry, shapes)
    for name, rank in entry.full_ranks.items():   # leading dims left out are 1, as the kernel reads them
        if name in shapes and len(shapes[name]) < rank:
            shapes[name] = (1,) * (rank - len(shapes[name])) + shapes[name]
    code = _dtype_name(dtype if dtype is not None else "F32")
    try:
        raw = getattr(_kernels, f"_cost_{kernel}")(shapes, DTYPES[code].bytes, params)
    except (IndexError, KeyError) as exc:
        raise InputError("cost", "shapes", "cost formulas", f"shapes {shapes} do not fit the contract's ranks ({exc})") from None
    report = CostReport(kernel=kernel, dtype=code, **raw)
    from .calibration import predict_ns  # local: calibration is optional

    predicted = predict_ns(kernel, code, report)
    if predicted is not None:
        report = CostReport(**{**report.as_dict(), "predicted_ns": predicted})
    return report
