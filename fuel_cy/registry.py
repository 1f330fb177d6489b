"""The kernel registry, built at import from the generated tables (one entry per kernel)."""
from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Callable, Mapping, Optional

from ._generated import _kernels, _tables


@dataclass(frozen=True)
class KernelEntry:
    """What the contract says about a kernel, plus the compiled callable."""

    name: str
    fused_op: str
    fused_op_id: Optional[int]
    backend: str
    kernel_source: str
    entry_point: str
    revision_hash: str
    dtypes: tuple[str, ...]
    exec_arm: Optional[str]
    exec_dtypes: tuple[str, ...]
    inputs: tuple[str, ...]
    optional_inputs: tuple[str, ...]
    dims: Mapping[str, tuple[str, ...]]  # input name -> the contract's dim symbols, e.g. q -> (B, Hq, Sq, D)
    params: tuple[str, ...]
    outputs: tuple[str, ...]
    bundle: bool
    awkward_layout_strategy: str
    precision: Mapping[str, Any]
    determinism: str
    compute: str  # "T": math in the element type; "f32": float32 math, outputs rounded once to T
    blurb: str
    contract: str
    implemented: bool
    fn: Callable[..., Any]

    @property
    def exec_wired(self) -> bool:
        """True when the oracle's executor routes this kernel's fused op to it."""
        return self.exec_arm == self.name


def _build() -> Mapping[str, KernelEntry]:
    out = {}
    for row in _tables.KERNELS:
        out[row["name"]] = KernelEntry(
            name=row["name"], fused_op=row["fused_op"], fused_op_id=row["fused_op_id"],
            backend=row["backend"], kernel_source=row["kernel_source"], entry_point=row["entry_point"],
            revision_hash=row["revision_hash"], dtypes=tuple(row["dtypes"]), exec_arm=row["exec_arm"],
            exec_dtypes=tuple(row["exec_dtypes"]), inputs=tuple(row["inputs"]),
            optional_inputs=tuple(row["optional_inputs"]),
            dims=MappingProxyType({name: tuple(d) for name, d in row["dims"].items()}),
            params=tuple(row["params"]),
            outputs=tuple(row["outputs"]), bundle=row["bundle"],
            awkward_layout_strategy=row["awkward_layout_strategy"],
            precision=MappingProxyType(dict(row["precision"])), determinism=row["determinism"],
            compute=row["compute"],
            blurb=row["blurb"], contract=row["contract"], implemented=row["implemented"],
            fn=getattr(_kernels, row["name"]),
        )
    return MappingProxyType(out)


registry: Mapping[str, KernelEntry] = _build()
"""Kernel name -> KernelEntry, in contract order."""

ENTRY_POINTS: Mapping[str, Callable[..., Any]] = MappingProxyType(
    {e.entry_point: e.fn for e in registry.values()})
"""The provider's ``link_registry``: contract ``entry_point`` string -> callable."""

FUSED_OPS: Mapping[str, Mapping[str, Any]] = MappingProxyType(
    {name: MappingProxyType(dict(info)) for name, info in _tables.FUSED_OPS.items()})
