"""The contract model as the templates see it: typed, frozen views derived once from the model
(all decisions made here, so the templates hold nothing beyond loops and conditionals).

`build_views` is the one way from a contracts folder to views: the generator (generate.py), the
kernel pages (docs.py) and the documentation stubs (stubs.py) all start from it.  What the
registry serves at runtime is part of each view (`KernelView.entry`, a fuel_cy.KernelEntry),
written into _generated/_tables.py as is."""
from __future__ import annotations

import ast
import hashlib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping, Optional

from ..contract import expr
from ..contract.build import parse_default
from ..contract.checks import check_default, cost_symbols
from ..contract.errors import Collector
from ..contract.loader import FUSED_OPS_FILE, load_contracts, parse_fused_ops
from ..contract.model import ContractDoc, Default, FusedOpInfo, InputSpec, Kernel, ParamField, Provider
from ..dtypes import DTYPES, policy
from ..runtime.kernel_entry import KernelEntry
from .core_dtypes import dtypes_source, fast_bit, typenum
from .cores import BINDINGS, CORE_SOURCES, CORES_FILE, INT_WORK, check_binding
from .pydocs import PYTHON_API_FILE, PythonView, api_default, docstring_text, python_api, python_view

# Layout checks run most specific first so the error names the clause that really failed.
LAYOUT_ORDER = ("broadcast_stride0", "reverse_strides", "start_offset", "strided", "contiguous")
PROSE_CHECKS_FILE = "fuel_cy/runtime/_prose_checks.py"  # its RULES are keyed by driver (checked: check_bindings)
PARAM_HELPERS = {"f32": "param_f32", "f64": "param_f64", "bool": "param_bool",
                 "usize": "param_usize", "DynScalar": "param_usize"}


@dataclass(frozen=True)
class ConstraintCheck:
    """A shape or param constraint as the validator checks it."""

    source: str  # the condition, in Cython
    fast_source: str  # the same condition for the typed fast path (C over the arrays' dims where it can)
    values: tuple[tuple[str, str], ...]  # (label, source) of each value the error message shows
    guard: tuple[str, ...]  # the optional inputs it reads: it applies only when they are given
    clause: str  # the contract clause, for the message


@dataclass(frozen=True)
class FastCheck:
    """An input's typed fast check (fastcheck.pxi)."""

    mask: str  # the FC_<dtype> bits it accepts
    slots: tuple[int, ...]  # the dim-symbol slot of each axis


@dataclass(frozen=True)
class InputView:
    name: str
    index: int
    optional: bool
    dtypes: tuple[str, ...]
    rank: int
    min_rank: int  # the lowest rank accepted (missing leading dims read as 1); rank when the contract says none
    dims: tuple[tuple[int, str], ...]  # (axis, dim symbol)
    layout: tuple[tuple[str, str], ...]  # (layout key, policy) of each stated clause, most specific first
    is_float: bool
    shares_t: bool  # of the kernel's element type T (an own-typed float input is not)
    line: int
    fast: Optional[FastCheck]  # None: only the full checks can serve it
    int_ctype: Optional[str]  # an integer input: the C and numpy types the driver reads it as
    int_np: Optional[str]
    constraint: Optional[ConstraintCheck]


@dataclass(frozen=True)
class ParamView:
    name: str
    kind: str
    base_kind: str
    optional: bool
    helper: str  # the _validation function that checks its kind
    default: Optional[str]  # Python source of its default in the signature; None: required
    default_source: Optional[str]  # Cython source of a computed default (the caller passed None)
    note: Optional[str]
    clause: str
    constraint: Optional[ConstraintCheck]
    pytype: str  # its annotation in the .pyi stub


@dataclass(frozen=True)
class OutputView:
    name: str
    shape_src: str  # the input whose shape it has ("" for a dims(...) rule)
    dtype_src: str  # the input whose dtype it has ("" for a fixed dtype)
    shape_expr: str  # Cython source of its shape, from the validated inputs
    when: Optional[str] = None  # the bool param that asks for it (None: always returned)
    dtype_fixed: str = ""  # its fixed dtype's code (lse: F32), "" where it has T's


@dataclass(frozen=True)
class CallerBufferView:
    """An output the caller may have written into an array it gives (Output.caller_buffer)."""

    index: int  # the output's place in what the kernel returns
    output: str
    param: str  # the keyword argument
    shape_expr: str  # Cython source of the shape the array must have
    dtype_expr: str  # Cython source of its numpy dtype (T's, or the fixed one)
    clause: str  # the contract key path


@dataclass(frozen=True)
class DTypeView:
    """An element type T of a kernel, with the element policy its core entry runs under."""

    code: str
    tag: str  # the element policy's rounding tag (rnd_t, _core_dtypes.pxi)
    ctype: str  # C work type
    npwork: str  # numpy work dtype
    narrow: bool  # stored narrower than it is computed: widened in, rounded out
    half: Optional[int]  # a 16-bit float: the half drivers' is_f16 argument
    typenum: str  # Cython expression of its own numpy type number (its 16-bit storage, for a half type)
    f32_compute: bool = False  # runs under the float32 policy instead of its own (precision.compute: f32)


@dataclass(frozen=True)
class CostView:
    """The cost formulas as Python source over `_s_<symbol>` locals and `shapes`."""

    flops: str
    bytes_moved: str
    host_bytes: str
    device_bytes: str
    disk_bytes: str


@dataclass(frozen=True)
class KernelView:
    """One contract kernel, everything the templates need decided."""

    name: str
    contract: str  # the contract file, relative to the checkout
    line: int
    revision_hash: str
    provider: str
    contract_title: str
    inputs: tuple[InputView, ...]
    params: tuple[ParamView, ...]
    signature: str  # the dispatch stub's Python parameter list
    float_inputs: tuple[str, ...]
    outputs: tuple[OutputView, ...]
    bundle: bool
    dtypes: tuple[DTypeView, ...]  # the element types its core entries run for
    driver: bool  # a core driver implements it (else its stub raises NotImplementedError)
    driver_name: Optional[str]
    half_driver: Optional[str]
    half_storage: tuple[str, ...]
    driver_dim_refs: tuple[tuple[str, int], ...]  # (input, axis) of each dim the driver takes
    # (output index, input): an output shaped like an input the entry reads at full rank (its
    # min_rank), given back at the rank the caller passed
    rank_restored: tuple[tuple[int, str], ...]
    caller_buffers: tuple[CallerBufferView, ...]  # the outputs a caller may have written into a given array
    dim_symbols: tuple[str, ...]  # every dim symbol of its inputs, in order of first use
    fast: bool  # every input has a typed fast check
    symbol_sources: tuple[tuple[str, str], ...]  # cost symbol -> Python source of its value
    cost: CostView
    py: PythonView  # in Python terms (python-api.yaml joined with the contract's facts)
    docstring: str
    entry: KernelEntry  # what the registry serves (fuel_cy/_generated/_tables.py)
    kernel: Kernel = field(repr=False, compare=False)  # the model it was derived from


@dataclass(frozen=True)
class ProviderView:
    contract: str  # the contract's file name
    provider: Provider  # the model's record, as parsed


@dataclass(frozen=True)
class Views:
    """Every contract of a folder, as views."""

    docs: tuple[ContractDoc, ...]
    fused_ops: Mapping[str, FusedOpInfo]
    kernels: tuple[KernelView, ...]  # in contract order
    providers: tuple[ProviderView, ...]


def revision_hash(doc: ContractDoc, kernel: Kernel, sources_digest: str) -> str:
    if kernel.kernel_revision_hash != "auto":
        return kernel.kernel_revision_hash
    h = hashlib.sha256()
    for part in (doc.provider.revision_base, kernel.block_text, sources_digest):
        h.update(part.encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()[:16]


def sources_digest(core_dir: Path, names: tuple[str, ...], *extra: str) -> str:
    """sha256 over the core files `names` of `core_dir` (name and content) and the `extra` digests."""
    h = hashlib.sha256()
    for name in names:
        h.update(name.encode())
        h.update((core_dir / name).read_bytes())
    for digest in extra:
        h.update(digest.encode())
    return h.hexdigest()


def _leaf_source(owner: str, kernel: Kernel):
    symbols = kernel.symbols

    def leaf(node: expr.Node) -> str:
        if isinstance(node, expr.DimRef):
            return f"{node.tensor or owner}.shape[{node.index}]"
        if isinstance(node, expr.Sym):
            inp, axis = symbols[node.name.lower()] if node.name.lower() in symbols else (None, None)
            if inp is None:
                raise ValueError(f"unknown symbol {node.name}")
            return f"{inp}.shape[{axis}]"
        if isinstance(node, expr.SelfRef):
            return owner
        raise ValueError(node)

    return leaf


def _leaves(c: expr.Constraint) -> list[expr.Node]:
    out: list[expr.Node] = []
    for node in expr.constraint_nodes(c):
        for n in expr.walk(node):
            if isinstance(n, (expr.DimRef, expr.Sym, expr.SelfRef)) and n not in out:
                out.append(n)
    return out


def _fast_constraint_source(c: expr.Constraint, owner: str, kernel: Kernel) -> Optional[str]:
    """The constraint in C over the dims of the exact, rank-checked arrays the typed fast path has
    accepted (fastcheck.pxi helpers), or None when it is not only dims and numbers (arithmetic
    keeps Python's exact integers: the full checks' source serves it)."""
    symbols = kernel.symbols
    ranks = {spec.name: spec.rank for spec in kernel.inputs}

    def dim(node: expr.Node) -> str:
        if isinstance(node, expr.Num) and isinstance(node.value, int):
            return repr(node.value)
        if isinstance(node, expr.DimRef):
            tensor, axis = node.tensor or owner, node.index
        elif isinstance(node, expr.Sym) and node.name.lower() in symbols:
            tensor, axis = symbols[node.name.lower()]
        else:
            raise LookupError(node)
        if not 0 <= axis < ranks.get(tensor, 0):   # an axis the fast path's rank check does not cover
            raise LookupError(node)
        return f"cnp.PyArray_DIM(<cnp.ndarray>{tensor}, {axis})"

    try:
        if isinstance(c, expr.SameAs):
            return f"_fc_same_shape({owner}, {c.other})"
        if isinstance(c, expr.Divisible):
            return f"_fc_divisible({dim(c.numerator)}, {dim(c.denominator)})"
        if isinstance(c, expr.Broadcasts):
            axes = "".join(f" and _fc_broadcast_dim({owner}, {a}, {dim(t)})" for a, t in enumerate(c.targets))
            return f"(cnp.PyArray_NDIM(<cnp.ndarray>{owner}) == {len(c.targets)}{axes})"
        return " == ".join(dim(t) for t in c.terms)
    except LookupError:
        return None


def constraint_check(c: expr.Constraint, owner: str, kernel: Kernel, optional_inputs: set[str],
                     clause: str) -> ConstraintCheck:
    leaf = _leaf_source(owner, kernel)
    if isinstance(c, expr.SameAs):
        source = f"{owner}.shape == {c.other}.shape"
        values = [(f"{owner}.shape", f"{owner}.shape"), (f"{c.other}.shape", f"{c.other}.shape")]
        refs = {owner, c.other}
    else:
        if isinstance(c, expr.Divisible):
            source = f"_v.divisible({expr.to_source(c.numerator, leaf)}, {expr.to_source(c.denominator, leaf)})"
        elif isinstance(c, expr.Broadcasts):
            targets = "".join(f"{expr.to_source(t, leaf)}, " for t in c.targets)
            source = f"_v.broadcasts({owner}.shape, ({targets}))"
        else:
            source = " == ".join(expr.to_source(t, leaf) for t in c.terms)
        values = [(f"{owner}.shape", f"{owner}.shape")] if isinstance(c, expr.Broadcasts) else []
        refs = {owner}
        for n in _leaves(c):
            src = leaf(n)
            label = owner if isinstance(n, expr.SelfRef) else expr.node_str(n) if not isinstance(n, expr.DimRef) or n.tensor else f"{owner}.dim[{n.index}]"
            values.append((label, src))
            refs.add(src.split(".")[0])
    fast = _fast_constraint_source(c, owner, kernel) or source
    return ConstraintCheck(source, fast, tuple(values), tuple(sorted(r for r in refs if r in optional_inputs)), clause)


# What a C-contiguous array that starts at its buffer's start is, under each layout clause: the
# validators' typed fast path (fastcheck.pxi) accepts only such arrays, so it may serve an input
# only when every clause accepts them.
_FAST_LAYOUT_OK = {"contiguous": ("required", "accepted"), "strided": ("rejected", "accepted"),
                   "broadcast_stride0": ("rejected", "accepted"), "reverse_strides": ("rejected", "accepted"),
                   "start_offset": ("rejected", "accepted")}


def _fast_check(spec: InputSpec, layout: tuple[tuple[str, str], ...], symbols: tuple[str, ...]) -> Optional[FastCheck]:
    """The typed fast check of one input (fastcheck.pxi), or None when only the full checks can serve it."""
    if any(policy not in _FAST_LAYOUT_OK.get(key, ()) for key, policy in layout):
        return None
    if any(d not in DTYPES for d in spec.dtypes):
        return None
    return FastCheck(" | ".join(fast_bit(d) for d in spec.dtypes), tuple(symbols.index(sym) for sym in spec.dims))


def _input_view(kernel: Kernel, idx: int, spec: InputSpec, optional: set[str], symbols: tuple[str, ...]) -> InputView:
    layout = tuple((key, spec.layout_policy(key)) for key in LAYOUT_ORDER if key in dict(spec.layout))
    integer = None if spec.is_float else INT_WORK.get(spec.dtypes[0])
    constraint = None
    if spec.shape_constraint is not None:
        constraint = constraint_check(spec.shape_constraint, spec.name, kernel, optional,
                                      f"accept.inputs[{idx}].shape_constraint {spec.shape_constraint_text!r}")
    return InputView(
        name=spec.name, index=idx, optional=spec.optional, dtypes=spec.dtypes, rank=spec.rank,
        min_rank=spec.lowest_rank,
        dims=tuple(enumerate(spec.dims)), layout=layout, is_float=spec.is_float, shares_t=spec.shares_t, line=spec.loc.line,
        fast=_fast_check(spec, layout, symbols),
        int_ctype=integer[0] if integer else None, int_np=integer[1] if integer else None,
        constraint=constraint,
    )


def _dim_symbols(kernel: Kernel) -> tuple[str, ...]:
    """Every dim symbol of the kernel's inputs, in order of first use."""
    out: list[str] = []
    for spec in kernel.inputs:
        out.extend(sym for sym in spec.dims if sym not in out)
    return tuple(out)


def _pytype(base_kind: str, nullable: bool) -> str:
    base = {"f32": "float", "f64": "float", "bool": "bool"}.get(base_kind, "int")
    return f"Optional[{base}]" if nullable else base


def param_default(kernel: Kernel, f: ParamField, api: dict[str, Any], api_path: str) -> Optional[Default]:
    """A param's default: the contract's `default:`, else fuel_cy's (python-api.yaml `default`,
    checked here as the contract's own would be), else what the contract implies
    (ParamField.implied_default); None: the caller must pass it."""
    if f.default is not None:
        return f.default
    stated = api_default(api, kernel.name, f.name)
    if stated is None:
        return f.implied_default
    value, line = stated
    default, problem = parse_default(value)
    problems = Collector()
    keypath = f"params.{f.name}.default"
    if problem:
        problems.add(api_path, line, keypath, problem)
    else:
        assert default is not None
        check_default(kernel, f, default, lambda msg: problems.add(api_path, line, keypath, f"for {kernel.name}: {msg}"))
    problems.raise_if_any()
    return default


# a computed default in Cython: the functions it may call, and the rounding to the param's kind
_FUNCTION_SOURCES = {"sqrt": "_fc_sqrt", "max": "max"}  # _fc_sqrt: libc's, cimported by _kernels.pyx
_KIND_CASTS = {"f32": "<float>", "f64": "<double>", "usize": "", "DynScalar": ""}


def _default_source(kernel: Kernel, f: ParamField, default: Default) -> str:
    """Cython source that computes a computed default from the validated inputs."""
    assert default.formula is not None
    src = expr.to_source(default.formula.ast, _leaf_source(f.name, kernel), _FUNCTION_SOURCES.__getitem__)
    cast = _KIND_CASTS[f.base_kind]
    # to_source parenthesizes every operation, so a source that starts with "(" is one group
    return f"{cast}{src}" if not cast or src.startswith("(") else f"{cast}({src})"


def _param_view(kernel: Kernel, f: ParamField, optional: set[str], api: dict[str, Any], api_path: str) -> ParamView:
    stated = param_default(kernel, f, api, api_path)
    # a computed default is None in the signature: the validator computes it
    default = None if stated is None else "None" if stated.computed else repr(stated.value)
    constraint = None
    if f.constraint is not None:
        constraint = constraint_check(f.constraint, f.name, kernel, optional,
                                      f"op_params.fields.{f.name}.constraint {f.constraint_text!r}")
    return ParamView(
        name=f.name, kind=f.kind, base_kind=f.base_kind, optional=f.optional,
        helper=PARAM_HELPERS[f.base_kind], default=default,
        default_source=_default_source(kernel, f, stated) if stated is not None and stated.computed else None,
        note=f.note, clause=f"op_params.fields.{f.name}", constraint=constraint,
        pytype=_pytype(f.base_kind, default == "None"),
    )


def _cost_source(formula: expr.Formula) -> str:
    def leaf(node: expr.Node) -> str:
        if isinstance(node, expr.Sym):
            return f"_s_{node.name}"
        if isinstance(node, expr.DimRef):
            return f"shapes[{node.tensor!r}][{node.index}]"
        raise ValueError(node)

    return expr.to_source(formula.ast, leaf)


def _shape_expr(kernel: Kernel, o: Any) -> str:
    if o.shape_dims is None:
        return f"{o.shape_source}.shape"
    leaf = _leaf_source(o.name, kernel)
    return "(" + "".join(f"{expr.to_source(f.ast, leaf)}, " for f in o.shape_dims) + ")"


def _symbol_sources(kernel: Kernel) -> tuple[tuple[str, str], ...]:
    """The symbols the cost formulas use (only those: an absent optional input's dims are not in
    `shapes`), each with the source of its value."""
    used: set[str] = set()
    for formula in _formulas(kernel).values():
        if formula is not None:
            used |= formula.symbols
    out = []
    for s in sorted(cost_symbols(kernel) & used):
        if s in kernel.symbols:
            inp, axis = kernel.symbols[s]
            out.append((s, f"shapes[{inp!r}][{axis}]"))
        elif s == "dtype_bytes":
            out.append((s, "dtype_bytes"))
        else:
            out.append((s, f"params.get({s!r})"))
    return tuple(out)


def _formulas(kernel: Kernel) -> dict[str, expr.Formula]:
    c = kernel.cost
    return {"flops": c.flops, "bytes_moved": c.bytes_moved, "host_bytes": c.memory.host_bytes,
            "device_bytes": c.memory.device_bytes, "disk_bytes": c.memory.disk_bytes}


def kernel_view(doc: ContractDoc, kernel: Kernel, fused: Mapping[str, FusedOpInfo], digest: str,
                contract_rel: str, api: Optional[dict[str, Any]] = None) -> KernelView:
    """The view of one kernel of `doc` (`contract_rel`: the contract's path in the checkout;
    `api`: contracts/python-api.yaml, read from the contract's folder when not given)."""
    api_dir = Path(doc.path).parent
    if api is None:
        api = python_api(api_dir)
    api_path = str(api_dir / PYTHON_API_FILE)
    optional = {i.name for i in kernel.inputs if i.optional}
    symbols = _dim_symbols(kernel)
    inputs = tuple(_input_view(kernel, i, spec, optional, symbols) for i, spec in enumerate(kernel.inputs))
    params = tuple(_param_view(kernel, f, optional, api, api_path) for f in kernel.op_params.fields)
    sig_inputs = [i.name + ("=None" if i.optional else "") for i in kernel.inputs]
    sig_params = [p.name + ("" if p.default is None else "=" + p.default) for p in params]
    sig_params += [o.caller_buffer + "=None" for o in kernel.returns.items if o.caller_buffer]
    signature = ", ".join(sig_inputs + (["*"] + sig_params if sig_params else []))

    info = fused.get(kernel.fused_op)
    binding = BINDINGS.get(kernel.name)
    dim_source: dict[str, tuple[str, int]] = {}  # each dim symbol -> a required input's axis that has it
    for spec in kernel.inputs:
        for axis, sym in enumerate(spec.dims):
            if not spec.optional:
                dim_source.setdefault(sym, (spec.name, axis))
    outputs = tuple(OutputView(o.name, o.shape_source, o.dtype_source, _shape_expr(kernel, o), o.when,
                               o.dtype_fixed or "")
                    for o in kernel.returns.items)
    dtypes = tuple(DTypeView(d, pol[0], pol[1], pol[2], DTYPES[d].narrow, DTYPES[d].half, typenum(DTYPES[d]),
                             pol != DTYPES[d].policy)
                   for d in kernel.float_dtypes for pol in [policy(kernel.precision.compute, d)] if pol is not None)
    revision = revision_hash(doc, kernel, digest)
    formulas = _formulas(kernel)
    p = kernel.precision
    entry = KernelEntry(
        name=kernel.name, contract=contract_rel, line=kernel.loc.line, fused_op=kernel.fused_op,
        fused_op_id=kernel.fused_op_id if kernel.fused_op_id is not None else (info.id if info else None),
        backend=kernel.backend, kernel_source=kernel.kernel_source, entry_point=kernel.entry_point,
        revision_hash=revision, blurb=kernel.blurb, dtypes=tuple(d.code for d in dtypes),
        exec_arm=info.exec_arm if info else None, exec_dtypes=info.exec_dtypes if info else (),
        inputs=tuple(i.name for i in inputs), optional_inputs=tuple(i.name for i in inputs if i.optional),
        dims={spec.name: spec.dims for spec in kernel.inputs}, params=tuple(f.name for f in params),
        outputs=tuple(o.name for o in outputs), bundle=kernel.returns.kind == "bundle",
        awkward_layout_strategy=kernel.caps.awkward_layout_strategy,
        precision={f.name: getattr(p, f.name) for f in fields(p) if f.name != "compute"},  # the model's clause
        determinism=kernel.determinism, compute=p.compute,
        cost_formulas={key: str(f) for key, f in formulas.items()},
        provenance=kernel.cost.provenance, overhead_ns=kernel.cost.overhead_ns, implemented=binding is not None,
        broadcasts={spec.name: tuple(kernel.input(t.tensor).dims[t.index] if isinstance(t, expr.DimRef) and t.tensor
                                     else expr.node_str(t) for t in spec.shape_constraint.targets)
                    for spec in kernel.inputs if isinstance(spec.shape_constraint, expr.Broadcasts)},
        requested_outputs={o.name: o.when for o in kernel.returns.items if o.when},
        full_ranks={spec.name: spec.rank for spec in kernel.inputs if spec.lowest_rank < spec.rank},
    )
    py = python_view(kernel, params, api)
    restored = tuple((n, o.shape_src) for n, o in enumerate(outputs)
                     if o.shape_src and kernel.input(o.shape_src).lowest_rank < kernel.input(o.shape_src).rank)
    return KernelView(
        name=kernel.name, contract=contract_rel, line=kernel.loc.line, revision_hash=revision,
        provider=doc.provider.name, contract_title=doc.title,
        inputs=inputs, params=params, signature=signature, float_inputs=tuple(i.name for i in inputs if i.shares_t),
        outputs=outputs, bundle=entry.bundle, dtypes=dtypes,
        driver=binding is not None,
        driver_name=binding.driver.name if binding else None,
        half_driver=binding.half_driver if binding else None,
        half_storage=binding.half_storage if binding else (),
        # (a dim on no required input: check_bindings refuses to generate; the docs do not need it)
        driver_dim_refs=tuple(dim_source[s] for s in binding.dims if s in dim_source) if binding else (),
        rank_restored=restored,
        caller_buffers=tuple(
            CallerBufferView(n, o.name, o.caller_buffer,
                             f"_given_{o.shape_source}.shape" if any(r[0] == n for r in restored) else _shape_expr(kernel, o),
                             f"_v.NUMPY_DTYPES[{o.dtype_fixed!r}]" if o.dtype_fixed else "_v.NUMPY_DTYPES[T]",
                             f"return.{kernel.returns.kind}[{n}].caller_buffer")
            for n, o in enumerate(kernel.returns.items) if o.caller_buffer),
        dim_symbols=symbols, fast=all(i.fast is not None for i in inputs),
        symbol_sources=_symbol_sources(kernel),
        cost=CostView(**{key: _cost_source(f) for key, f in formulas.items()}),
        py=py, docstring=docstring_text(py, contract_rel, kernel.loc.line, revision),
        entry=entry, kernel=kernel,
    )


def build_views(contracts: Path, core: Path, root: Path, check_core: bool = True) -> Views:
    """Every kernel of the contracts in `contracts` (with their fused-op table and
    python-api.yaml) as views; `core` is the hand-written core (its sources are part of each
    revision hash) and `root` the checkout, that contract paths are shown relative to.
    `check_core`: check that each bound kernel's contract still fits its driver (check_bindings),
    as generating code needs; the documentation describes the contracts alone.
    Raises ContractError, listing every problem, before anything is derived from a bad contract."""
    docs = load_contracts(contracts)
    if check_core:
        check_bindings([k for d in docs for k in d.kernels], root / PROSE_CHECKS_FILE)
    table = contracts / FUSED_OPS_FILE
    fused = parse_fused_ops(table.read_text(encoding="utf-8"), str(table))
    # the core is compiled from its hand-written sources and the lists generated from the dtype
    # record, so both are part of every kernel's revision
    digest = sources_digest(core, CORE_SOURCES, dtypes_source()[1])
    api = python_api(contracts)
    kernels = []
    for doc in docs:
        rel = Path(doc.path).resolve().relative_to(root.resolve()).as_posix()
        kernels += [kernel_view(doc, kernel, fused, digest, rel, api) for kernel in doc.kernels]
    providers = tuple(ProviderView(Path(d.path).name, d.provider) for d in docs)
    return Views(tuple(docs), fused, tuple(kernels), providers)



def check_bindings(kernels: list[Kernel], prose_checks: Path) -> None:
    """The contract of each kernel BINDINGS binds to a driver still fits that driver
    (cores.check_binding), and every key of `prose_checks`' RULES (read, not imported: it needs
    numpy) names a bound driver.  Raises ContractError listing every misfit."""
    problems = Collector()
    for k in kernels:
        binding = BINDINGS.get(k.name)
        if binding is None:
            continue
        lines = {"accept.inputs": k.inputs[0].loc.line if k.inputs else k.loc.line,
                 "return": k.returns.items[0].loc.line if k.returns.items else k.loc.line,
                 "op_params.fields": k.op_params.fields[0].loc.line if k.op_params.fields else k.loc.line}

        def report(keypath: str, message: str, k: Kernel = k, lines: dict[str, int] = lines) -> None:
            problems.add(k.loc.path, lines.get(keypath, k.loc.line), f"{k.name}.{keypath}", message)

        check_binding(k, binding, report)
    drivers = sorted({b.driver.name for b in BINDINGS.values()})
    for key, line in _rule_keys(prose_checks):
        if key not in drivers:
            problems.add(str(prose_checks), line, f"RULES[{key!r}]",
                         f"keys are driver names of {CORES_FILE} BINDINGS ({', '.join(drivers)}); {key!r} is none")
    problems.raise_if_any()


def _rule_keys(path: Path) -> list[tuple[str, int]]:
    """The string keys of the module-level `RULES = {...}` in `path`, with their lines ([] when the
    file is absent, as in a bare contracts checkout)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    except OSError:
        return []
    for node in tree.body:
        targets: list[ast.expr]
        if isinstance(node, ast.AnnAssign):
            targets, value = [node.target], node.value
        elif isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        else:
            continue
        if any(isinstance(t, ast.Name) and t.id == "RULES" for t in targets) and isinstance(value, ast.Dict):
            return [(k.value, k.lineno) for k in value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
    return []
