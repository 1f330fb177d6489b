"""The frozen contract model. Locations ride along but never take part in equality."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Union

from ..dtypes import FLOAT_CODES
from .expr import Constraint, Equal, Formula, SelfRef


@dataclass(frozen=True)
class Location:
    path: str
    line: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"


def _loc() -> Location:
    return field(default=Location("<unknown>", 0), compare=False, repr=False)


@dataclass(frozen=True)
class Gather:
    kind: str
    block_table: str
    context_lens: str


@dataclass(frozen=True)
class Fdx:
    requires_ext: Optional[bool] = None
    symbolic_extent: Optional[str] = None
    extent_kind: Optional[str] = None
    gather: Optional[Gather] = None


@dataclass(frozen=True)
class InputSpec:
    name: str
    dtypes: tuple[str, ...]
    layout: tuple[tuple[str, str], ...]  # ordered (layout key, required|rejected|accepted)
    rank: int
    dims: tuple[str, ...]
    shape_constraint: Optional[Constraint]
    shape_constraint_text: Optional[str]
    optional: bool
    fdx: Optional[Fdx]
    loc: Location = _loc()
    element_type: str = "T"  # schema.ELEMENT_TYPES: "own" keeps the input's dtype out of T
    # the lowest rank accepted: an array of rank min_rank .. rank is read with its missing leading
    # dims as 1 (numpy's broadcasting); rank itself when the contract does not say
    min_rank: Optional[int] = None

    @property
    def lowest_rank(self) -> int:
        return self.rank if self.min_rank is None else self.min_rank

    def layout_policy(self, key: str) -> str:
        return dict(self.layout).get(key, "accepted")

    @property
    def is_float(self) -> bool:
        return all(d in FLOAT_CODES for d in self.dtypes)

    @property
    def shares_t(self) -> bool:
        """A float input of the kernel's element type T (all such inputs of a call share one)."""
        return self.is_float and self.element_type == "T"


Literal = Union[bool, int, float, None]


@dataclass(frozen=True)
class Default:
    """A param's value when the caller leaves it out: a literal (a number, true/false, or ~ for
    None), or a formula over the inputs' dims that is computed at call time, rounded to the
    param's kind (e.g. ``1 / sqrt(max(d, 1))``; the caller may pass None for it)."""

    value: Literal = None
    formula: Optional[Formula] = None
    text: str = ""  # as written (or derived)

    @property
    def computed(self) -> bool:
        return self.formula is not None


@dataclass(frozen=True)
class ParamField:
    name: str
    kind: str  # as written, e.g. "f32", "Option<usize>"
    base_kind: str  # without Option<>
    optional: bool
    note: Optional[str]
    constraint: Optional[Constraint]
    constraint_text: Optional[str]
    loc: Location = _loc()
    default: Optional[Default] = None  # the contract's `default:`, when it states one

    @property
    def implied_default(self) -> Optional[Default]:
        """The default the contract implies when it states none: None for an ``Option<...>``
        kind; for a param constrained equal to other values (``== k_cache.dim[1] == ...``), the
        first of them."""
        if self.optional:
            return Default(None, text="~")
        if isinstance(self.constraint, Equal) and isinstance(self.constraint.terms[0], SelfRef):
            formula = Formula(self.constraint.terms[1])
            return Default(formula=formula, text=str(formula))
        return None


@dataclass(frozen=True)
class OpParams:
    variant: str
    fields: tuple[ParamField, ...]


@dataclass(frozen=True)
class Output:
    """One output.  dtype_rule: passthrough(input) (that input's dtype) or a dtype code (a fixed
    dtype, e.g. F32); shape_rule: same_as(input) (that input's shape) or dims(e, ...) (one
    extent per axis, formulas over the inputs' dims).  when: a bool op param; the output is
    returned only when it is true (then the kernel returns a tuple).  caller_buffer: the name of
    a keyword argument through which the caller may give the array the output is written into
    (validated: its dtype and shape, C-contiguous, writeable, sharing no memory with an input);
    None: always a new array."""

    name: str
    dtype_rule: str
    shape_rule: str
    layout_guarantee: str
    aliasing: Optional[str]
    loc: Location = _loc()
    when: Optional[str] = None
    shape_dims: Optional[tuple[Formula, ...]] = None  # the extents of a dims(...) rule
    caller_buffer: Optional[str] = None

    @property
    def dtype_fixed(self) -> Optional[str]:
        """The dtype code of a fixed-dtype rule, else None."""
        return None if "(" in self.dtype_rule else self.dtype_rule

    @property
    def dtype_source(self) -> str:
        """The input whose dtype the output takes ("" for a fixed dtype)."""
        return "" if self.dtype_fixed else _rule_arg(self.dtype_rule)

    @property
    def shape_source(self) -> str:
        """The input whose shape the output takes ("" for a dims(...) rule)."""
        return "" if self.shape_dims is not None else _rule_arg(self.shape_rule)


def _rule_arg(rule: str) -> str:
    return rule[rule.index("(") + 1: rule.rindex(")")].strip()


@dataclass(frozen=True)
class Returns:
    kind: str  # "outputs" or "bundle"
    items: tuple[Output, ...]


@dataclass(frozen=True)
class FastPath:
    when: str
    note: Optional[str]


@dataclass(frozen=True)
class Caps:
    awkward_layout_strategy: str
    fast_paths: tuple[FastPath, ...]
    in_place: bool
    alignment_bytes: Optional[int]
    access_granularity_bits: Optional[int]


@dataclass(frozen=True)
class Memory:
    device_bytes: Formula
    host_bytes: Formula
    disk_bytes: Formula


@dataclass(frozen=True)
class Cost:
    provenance: str
    cost_class: str
    flops: Formula
    bytes_moved: Formula
    overhead_ns: Optional[float]
    memory: Memory
    lines: tuple[tuple[str, int], ...] = field(default=(), compare=False, repr=False)

    def line_of(self, keypath: str, default: int) -> int:
        return dict(self.lines).get(keypath, default)


@dataclass(frozen=True)
class Precision:
    bit_stable_on_same_hardware: bool
    max_ulp: Optional[float]
    max_relative: Optional[float]
    max_absolute: Optional[float]
    audited: bool
    notes: Optional[str]
    compute: str = "T"  # "T": math in the element type; "f32": float32 math, outputs rounded once to T


@dataclass(frozen=True)
class FusedOpInfo:
    """What the small fused-op table states about an op (ids and exec wiring from prose)."""

    name: str
    id: int
    exec_arm: Optional[str]
    exec_dtypes: tuple[str, ...]
    bundle_output: Optional[str]
    bundle_of: Optional[str] = None


OFFSETS_PREFIX = "cu_seqlens_"
"""An input named cu_seqlens_<x> holds B + 1 offsets into the rows of input <x> (flash-attn's
name for packed variable-length sequences): the docs' examples and fuel_cy.dask read it so."""


def offsets_target(name: str) -> Optional[str]:
    """The input whose rows `name` cuts (cu_seqlens_q -> q), or None for any other input."""
    return name[len(OFFSETS_PREFIX):] if name.startswith(OFFSETS_PREFIX) else None


@dataclass(frozen=True)
class Kernel:
    name: str
    title: str
    description: str
    fused_op: str
    fused_op_id: Optional[int]
    blurb: str
    backend: str
    kernel_source: str
    entry_point: str
    kernel_revision_hash: str  # "auto" or an explicit value
    inputs: tuple[InputSpec, ...]
    op_params: OpParams
    returns: Returns
    caps: Caps
    cost: Cost
    precision: Precision
    determinism: str
    mask_alignment: str = "top_left"  # schema.MASK_ALIGNMENTS: where causal and windows put query i
    block_text: str = field(compare=False, repr=False, default="")
    loc: Location = _loc()

    def input(self, name: str) -> InputSpec:
        for spec in self.inputs:
            if spec.name == name:
                return spec
        raise KeyError(name)

    @property
    def float_dtypes(self) -> tuple[str, ...]:
        """Element types T accepted by every float input (they share one T), in contract order."""
        lists = [i.dtypes for i in self.inputs if i.shares_t and not i.optional]
        if not lists:
            return ()
        return tuple(d for d in lists[0] if all(d in other for other in lists[1:]))

    @property
    def symbols(self) -> dict[str, tuple[str, int]]:
        """Lower-case dim symbol -> (input name, axis) of its first occurrence."""
        out: dict[str, tuple[str, int]] = {}
        for spec in self.inputs:
            for axis, dim in enumerate(spec.dims):
                out.setdefault(dim.lower(), (spec.name, axis))
        return out


@dataclass(frozen=True)
class Provider:
    name: str
    backend: str
    kernel_source: str
    link_registry: str
    revision_base: str


@dataclass(frozen=True)
class ContractDoc:
    path: str = field(compare=False)
    fkc_version: int
    provider: Provider
    title: str
    intro: str
    kernels: tuple[Kernel, ...]
    text_hash: str = field(compare=False, default="")

    def kernel(self, name: str) -> Kernel:
        for k in self.kernels:
            if k.name == name:
                return k
        raise KeyError(name)
