"""What the registry knows of a kernel: one record type, shared by the code generator and the
runtime.  Codegen derives each kernel's KernelEntry from the contract model once
(codegen/view.py) and writes it into fuel_cy/_generated/_tables.py as this constructor call;
fuel_cy.registry links each to its compiled function.  Standard library only (it is read at
`import fuel_cy`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Mapping, Optional

from ..dtypes import DTYPES, DType


def _unlinked(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("this KernelEntry is not linked to its compiled function (use fuel_cy.registry's)")


@dataclass(frozen=True)
class KernelEntry:
    """What the contract says about a kernel, plus the compiled callable."""

    name: str
    contract: str  # the contract file, relative to the checkout (contracts/<file>.md)
    line: int  # of the kernel's fkc block in it
    fused_op: str
    fused_op_id: Optional[int]
    backend: str
    kernel_source: str
    entry_point: str
    revision_hash: str
    blurb: str
    dtypes: tuple[str, ...]  # element types T it runs for: codes of fuel_cy.dtypes.DTYPES
    exec_arm: Optional[str]
    exec_dtypes: tuple[str, ...]
    inputs: tuple[str, ...]
    optional_inputs: tuple[str, ...]
    dims: Mapping[str, tuple[str, ...]]  # input name -> the contract's dim symbols, e.g. q -> (B, Hq, Sq, D)
    params: tuple[str, ...]
    outputs: tuple[str, ...]
    bundle: bool
    awkward_layout_strategy: str
    precision: Mapping[str, Any]  # the contract's precision clause (compute apart)
    determinism: str
    compute: str  # "T": math in the element type; "f32": float32 math, outputs rounded once to T
    cost_formulas: Mapping[str, str]  # cost quantity -> the contract's formula, normalized
    provenance: str
    overhead_ns: Optional[float]
    implemented: bool  # a core driver serves it (else calling it raises NotImplementedError)
    # input name -> the dim symbols of the extents it broadcasts to, axis by axis (a
    # `broadcasts_to` shape constraint: each of its dims is 1 or that extent), e.g. attn_mask ->
    # (B, Hq, Sq, Sk)
    broadcasts: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # output name -> the bool param that asks for it (the contract's `when`); the others always come
    requested_outputs: Mapping[str, str] = field(default_factory=dict)
    # input name -> its rank, for an input that may leave out leading dims (the contract's
    # `min_rank`: read with them as 1), e.g. k -> 4 for attention_varlen's packed or paged k
    full_ranks: Mapping[str, int] = field(default_factory=dict)
    fn: Callable[..., Any] = field(default=_unlinked, compare=False, repr=False)

    def __post_init__(self) -> None:
        for name in ("dims", "precision", "cost_formulas", "broadcasts", "requested_outputs", "full_ranks"):  # read-only
            value = getattr(self, name)
            if not isinstance(value, MappingProxyType):
                object.__setattr__(self, name, MappingProxyType(dict(value)))

    @property
    def dtype_records(self) -> tuple[DType, ...]:
        """The dtype records of `dtypes`."""
        return tuple(DTYPES[code] for code in self.dtypes)

    @property
    def exec_wired(self) -> bool:
        """True when `fuel_cy.dispatch` of this kernel's fused op runs this kernel (the contract's wiring)."""
        return self.exec_arm == self.name
