"""Cross-entry checks that run after every block has been built (a separate pass)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Optional

from . import expr
from .errors import Collector
from .model import Default, FusedOpInfo, InputSpec, Kernel, ParamField
from ..dtypes import FLOAT_CODES


def cost_symbols(kernel: Kernel) -> set[str]:
    """Names a cost formula may use: lower-case dims, dtype_bytes, numeric op params."""
    names = set(kernel.symbols) | {"dtype_bytes"}
    names |= {f.name for f in kernel.op_params.fields if f.base_kind in ("usize", "DynScalar", "f32", "f64")}
    return names


class _Failed:
    """Key paths (relative to the kernel) that already drew a problem or could not be read.

    A check that reads such a value is skipped: whatever it found would follow from the problem
    already reported (``rank: four`` is not also "rank 0" everywhere the rank is used)."""

    def __init__(self, keypaths: Iterable[str], kernel: str):
        self.paths = {p.removeprefix(kernel + ".") for p in keypaths}

    def __call__(self, keypath: str) -> bool:
        """True when ``keypath`` or a mapping or list around it failed."""
        return any(keypath == p or keypath.startswith((p + ".", p + "[")) for p in self.paths)


@dataclass(frozen=True)
class _Known:
    """What the cross-checks may rely on, given the problems already reported for a kernel."""

    ranks: Mapping[str, int]  # input name -> rank (a guess where the rank failed)
    trusted_ranks: frozenset[str]  # inputs whose rank was read without a problem
    names_complete: bool  # every input name was read: "names no input" is a real finding
    symbols_complete: bool  # every input's dims were read: "unknown symbol" is a real finding

    @staticmethod
    def of(k: Kernel, bad: _Failed) -> "_Known":
        items = [f"accept.inputs[{i}]" for i in range(len(k.inputs))]
        names = not bad("accept.inputs") and not any(bad(f"{kp}.name") for kp in items)
        return _Known(
            ranks={i.name: i.rank for i in k.inputs},
            trusted_ranks=frozenset(i.name for i, kp in zip(k.inputs, items, strict=True) if not bad(f"{kp}.rank")),
            names_complete=names,
            symbols_complete=names and not any(bad(f"{kp}.dims") for kp in items),
        )

    def rank(self, name: str) -> Optional[int]:
        """The input's rank when it can be trusted, else None."""
        return self.ranks[name] if name in self.trusted_ranks else None


AddFn = Callable[[int, str, str], None]


def check_kernel(k: Kernel, fused_ops: Mapping[str, FusedOpInfo], problems: Collector,
                 failed: Iterable[str] = ()) -> None:
    """Cross-field checks of one built kernel.  ``failed`` holds the key paths the builder
    already reported: checks that depend on them are skipped (one cause, one message)."""
    path = k.loc.path

    def add(line: int, keypath: str, message: str) -> None:
        problems.add(path, line, f"{k.name}.{keypath}" if keypath else k.name, message)

    bad = _Failed(failed, k.name)
    known = _Known.of(k, bad)
    _check_inputs(k, bad, known, add)
    _check_params(k, known, add)
    _check_costs(k, bad, known, add)
    _check_returns(k, bad, known, add)
    _check_fused_op(k, bad, fused_ops, add)


def _check_inputs(k: Kernel, bad: _Failed, known: _Known, add: AddFn) -> None:
    if not k.inputs and not bad("accept.inputs"):
        add(k.loc.line, "accept.inputs", "a kernel needs at least one input")
    seen: set[str] = set()
    seen_optional = None
    lowered: dict[str, str] = {}
    for idx, spec in enumerate(k.inputs):
        kp = f"accept.inputs[{idx}]"
        if spec.name in seen and not bad(kp + ".name"):
            add(spec.loc.line, kp + ".name", f"duplicate input name {spec.name!r}")
        seen.add(spec.name)
        if spec.optional:
            seen_optional = spec.name
        elif seen_optional and not bad(kp + ".optional"):
            add(spec.loc.line, kp, f"required input {spec.name!r} follows optional input {seen_optional!r}")
        if not bad(kp + ".dims"):
            for dim in spec.dims:
                prev = lowered.setdefault(dim.lower(), dim)
                if prev != dim:
                    add(spec.loc.line, kp + ".dims", f"dim symbols {prev!r} and {dim!r} collide in lower case")
        _check_shape_constraint(k, spec, kp, known, add)
        if spec.fdx and spec.fdx.gather and known.names_complete:
            for role in (spec.fdx.gather.block_table, spec.fdx.gather.context_lens):
                if role not in known.ranks:
                    add(spec.loc.line, kp + ".fdx.gather", f"gather role {role!r} names no input")
        if not spec.is_float and any(d in FLOAT_CODES for d in spec.dtypes) and not bad(kp + ".dtypes"):
            add(spec.loc.line, kp + ".dtypes", "an input mixes float and integer dtypes")
    # T is what every float input accepts, so it is only checkable when every dtypes list was read
    readable = not bad("accept.inputs") and not any(
        bad(f"accept.inputs[{i}].dtypes") or bad(f"accept.inputs[{i}].optional") for i in range(len(k.inputs)))
    if k.inputs and readable and not k.float_dtypes:
        add(k.loc.line, "accept.inputs", "no element type T is accepted by every float input")


def _check_shape_constraint(k: Kernel, spec: InputSpec, kp: str, known: _Known, add: AddFn) -> None:
    c = spec.shape_constraint
    keypath = kp + ".shape_constraint"
    if isinstance(c, expr.SameAs):
        if c.other == spec.name or (c.other not in known.ranks and known.names_complete):
            add(spec.loc.line, keypath, f"same_as names unknown input {c.other!r}")
        elif c.other in known.ranks:
            mine, theirs = known.rank(spec.name), known.rank(c.other)
            if mine is not None and theirs is not None and mine != theirs:
                add(spec.loc.line, keypath, f"same_as={c.other} but ranks differ ({mine} vs {theirs})")
    elif c is not None:
        if isinstance(c, expr.Broadcasts):
            rank = known.rank(spec.name)
            if rank is not None and rank != len(c.targets):
                add(spec.loc.line, keypath, f"broadcasts_to names {len(c.targets)} dims for an input of rank {rank}")
        for node in expr.constraint_nodes(c):
            _check_node(node, k, known, known.rank(spec.name), False, add, spec.loc.line, keypath)


def _check_params(k: Kernel, known: _Known, add: AddFn) -> None:
    for f in k.op_params.fields:
        if f.name in known.ranks:
            add(f.loc.line, f"op_params.fields.{f.name}", "a param may not share a name with an input")
        if f.constraint is not None:
            keypath = f"op_params.fields.{f.name}.constraint"
            if isinstance(f.constraint, expr.SameAs):
                add(f.loc.line, keypath, "same_as is for inputs, not params")
            for node in expr.constraint_nodes(f.constraint):
                _check_node(node, k, known, 0, True, add, f.loc.line, keypath)
        if f.default is not None:
            _check_default(k, f, f.default, known, lambda msg: add(f.loc.line, f"op_params.fields.{f.name}.default", msg))


_INTEGER_KINDS = ("usize", "DynScalar")


def check_default(k: Kernel, f: ParamField, default: Default, report: Callable[[str], None]) -> None:
    """Check a default for param ``f`` of the (fully read) kernel ``k``, wherever it is stated;
    ``report`` receives each problem's message."""
    _check_default(k, f, default, _Known.of(k, _Failed((), k.name)), report)


def _check_default(k: Kernel, f: ParamField, d: Default, known: _Known, report: Callable[[str], None]) -> None:
    kind = f.kind
    if not d.computed:
        v = d.value
        if v is None:
            if not f.optional:
                report(f"~ (None) is a default of an Option<...> param only, not of kind {kind!r}")
        elif f.base_kind == "bool":
            if not isinstance(v, bool):
                report(f"expected true or false for kind {kind!r}, found {v!r}")
        elif isinstance(v, bool) or not isinstance(v, (int, float)):
            report(f"expected a number for kind {kind!r}, found {v!r}")
        elif f.base_kind in _INTEGER_KINDS and (not isinstance(v, int) or v < 0):
            report(f"expected an integer >= 0 for kind {kind!r}, found {v!r}")
        elif not math.isfinite(v):
            report(f"expected a finite number for kind {kind!r}, found {v!r}")
        return
    assert d.formula is not None
    if f.optional:
        report(f"a computed default needs None to mean 'compute it', but None is a value of {kind!r}: "
               "state a literal")
    elif f.base_kind == "bool":
        report(f"expected true or false for kind {kind!r}, found the formula {d.text!r}")
    elif f.base_kind in _INTEGER_KINDS and any(
            (isinstance(n, expr.BinOp) and n.op == "/") or (isinstance(n, expr.Call) and n.fn == "sqrt")
            for n in expr.walk(d.formula.ast)):
        report(f"a {kind} default is an integer: no '/' or sqrt in {d.text!r}")
    _check_node(d.formula.ast, k, known, None, True, lambda line, keypath, msg: report(msg), 0, "")


def _check_costs(k: Kernel, bad: _Failed, known: _Known, add: AddFn) -> None:
    # the allowed symbols come from the inputs' dims and the params: if either was not fully
    # read, an "unknown symbol" would only echo that problem
    symbols_complete = known.symbols_complete and not bad("op_params.fields")
    allowed = cost_symbols(k)
    formulas = [("cost.flops", k.cost.flops), ("cost.bytes_moved", k.cost.bytes_moved),
                ("cost.memory.device_bytes", k.cost.memory.device_bytes),
                ("cost.memory.host_bytes", k.cost.memory.host_bytes),
                ("cost.memory.disk_bytes", k.cost.memory.disk_bytes)]
    for keypath, formula in formulas:
        line = k.cost.line_of(keypath, k.loc.line)
        if symbols_complete:
            for sym in sorted(formula.symbols - allowed):
                add(line, keypath, f"unknown symbol {sym!r} in {str(formula)!r} (known: {', '.join(sorted(allowed))})")
        for ref in formula.dimrefs:
            _check_dimref(ref, known, add, line, keypath)


def _check_returns(k: Kernel, bad: _Failed, known: _Known, add: AddFn) -> None:
    kind = k.returns.kind
    for j, o in enumerate(k.returns.items):
        # a malformed rule was reported and replaced by a placeholder: check only the readable ones
        sources = [src for key, src in (("dtype_rule", o.dtype_source), ("shape_rule", o.shape_source))
                   if src and not bad(f"return.{kind}[{j}].{key}")]
        for rule in dict.fromkeys(sources):  # both rules naming one unknown input: one message
            if rule not in known.ranks and known.names_complete:
                add(o.loc.line, f"return.{kind}.{o.name}", f"rule refers to unknown input {rule!r}")
        for formula in o.shape_dims or ():
            for node in (formula.ast,):
                _check_node(node, k, known, None, False, add, o.loc.line, f"return.{kind}.{o.name}.shape_rule")
        if o.when is not None:
            field = next((f for f in k.op_params.fields if f.name == o.when), None)
            if field is None or field.base_kind != "bool":
                add(o.loc.line, f"return.{kind}.{o.name}.when", f"when names no bool op param: {o.when!r}")
            elif j == 0:
                add(o.loc.line, f"return.{kind}.{o.name}.when", "the first output is always returned")
        if o.caller_buffer is not None:
            taken = {s.name for s in k.inputs} | {f.name for f in k.op_params.fields}
            if o.caller_buffer in taken:
                add(o.loc.line, f"return.{kind}.{o.name}.caller_buffer",
                    f"caller_buffer names an input or param of the kernel: {o.caller_buffer!r}")
            elif o.layout_guarantee != "contiguous":
                add(o.loc.line, f"return.{kind}.{o.name}.caller_buffer",
                    f"a caller's buffer is written C-contiguous: layout_guarantee must be contiguous, "
                    f"found {o.layout_guarantee!r}")
    buffers = [o.caller_buffer for o in k.returns.items if o.caller_buffer]
    if len(buffers) != len(set(buffers)):
        add(k.loc.line, f"return.{kind}", f"two outputs share a caller_buffer name: {buffers}")
    if not k.returns.items and not bad("return"):
        add(k.loc.line, "return", "a kernel must return at least one output")


def _check_fused_op(k: Kernel, bad: _Failed, fused_ops: Mapping[str, FusedOpInfo], add: AddFn) -> None:
    if bad("fused_op"):
        return  # an unreadable name was reported; looking it up would only repeat that
    info = fused_ops.get(k.fused_op)
    if info is None:
        add(k.loc.line, "fused_op", f"fused op {k.fused_op!r} is not in contracts/fused_ops.yaml")
    elif k.fused_op_id is not None and k.fused_op_id != info.id:
        add(k.loc.line, "fused_op", f"FusedOpId({k.fused_op_id}) disagrees with fused_ops.yaml id {info.id}")


def _check_node(node: expr.Node, k: Kernel, known: _Known, own_rank: Optional[int], allow_self: bool,
                add: AddFn, line: int, keypath: str) -> None:
    """``own_rank`` is None when the constrained input's rank could not be read."""
    for n in expr.walk(node):
        if isinstance(n, expr.SelfRef) and not allow_self:
            add(line, keypath, "a leading '==' (self) is only valid in op param constraints")
        elif isinstance(n, expr.Sym) and n.name not in k.symbols and known.symbols_complete:
            add(line, keypath, f"unknown symbol {n.name!r}")
        elif isinstance(n, expr.DimRef):
            if n.tensor is None:
                if allow_self:
                    add(line, keypath, "bare 'dim[i]' needs an input: write input.dim[i]")
                elif own_rank is not None and n.index >= own_rank:
                    add(line, keypath, f"dim[{n.index}] is out of range for rank {own_rank}")
            else:
                _check_dimref(n, known, add, line, keypath)


def _check_dimref(ref: expr.DimRef, known: _Known, add: AddFn, line: int, keypath: str) -> None:
    if ref.tensor is None or ref.tensor not in known.ranks:
        if known.names_complete:
            add(line, keypath, f"{ref.tensor}.dim[{ref.index}] names no input")
        return
    rank = known.rank(ref.tensor)
    if rank is not None and ref.index >= rank:
        add(line, keypath, f"{ref.tensor}.dim[{ref.index}] is out of range for rank {rank}")


def check_document(kernels: Iterable[Kernel], problems: Collector) -> None:
    names: dict[str, Kernel] = {}
    entries: dict[str, Kernel] = {}
    for k in kernels:
        if k.name in names:
            problems.add(k.loc.path, k.loc.line, k.name, f"duplicate kernel {k.name!r} (first at line {names[k.name].loc.line})")
        names.setdefault(k.name, k)
        if k.entry_point and k.entry_point in entries:  # "" is an unreadable one, reported already
            problems.add(k.loc.path, k.loc.line, f"{k.name}.entry_point", f"entry point {k.entry_point!r} already used by {entries[k.entry_point].name}")
        entries.setdefault(k.entry_point, k)
    # fused-op ids are one namespace across every contract: one id per op, one op per id
    op_ids: dict[str, tuple[int, Kernel]] = {}
    id_ops: dict[int, tuple[str, Kernel]] = {}
    for k in kernels:
        if k.fused_op_id is None or not k.fused_op:  # "": an unreadable op name, reported already
            continue
        if k.fused_op in op_ids and op_ids[k.fused_op][0] != k.fused_op_id:
            first = op_ids[k.fused_op][1]
            problems.add(k.loc.path, k.loc.line, f"{k.name}.fused_op_id",
                         f"fused op {k.fused_op} has id {k.fused_op_id} here but {op_ids[k.fused_op][0]} in "
                         f"{first.name} ({first.loc.path}:{first.loc.line})")
        if k.fused_op_id in id_ops and id_ops[k.fused_op_id][0] != k.fused_op:
            first = id_ops[k.fused_op_id][1]
            problems.add(k.loc.path, k.loc.line, f"{k.name}.fused_op_id",
                         f"FusedOpId({k.fused_op_id}) of {k.fused_op} is already {id_ops[k.fused_op_id][0]}'s, "
                         f"in {first.name} ({first.loc.path}:{first.loc.line})")
        op_ids.setdefault(k.fused_op, (k.fused_op_id, k))
        id_ops.setdefault(k.fused_op_id, (k.fused_op, k))
