"""Cross-entry checks that run after every block has been built (a separate pass)."""
from __future__ import annotations

from typing import Iterable, Mapping

from . import expr
from .errors import Collector
from .model import FusedOpInfo, Kernel


def cost_symbols(kernel: Kernel) -> set[str]:
    """Names a cost formula may use: lower-case dims, dtype_bytes, numeric op params."""
    names = set(kernel.symbols) | {"dtype_bytes"}
    names |= {f.name for f in kernel.op_params.fields if f.base_kind in ("usize", "DynScalar", "f32", "f64")}
    return names


def check_kernel(k: Kernel, fused_ops: Mapping[str, FusedOpInfo], problems: Collector) -> None:
    path = k.loc.path

    def add(line: int, keypath: str, message: str) -> None:
        problems.add(path, line, f"{k.name}.{keypath}" if keypath else k.name, message)

    ranks = {i.name: i.rank for i in k.inputs}
    if not k.inputs:
        add(k.loc.line, "accept.inputs", "a kernel needs at least one input")
    seen: set[str] = set()
    seen_optional = None
    lowered: dict[str, str] = {}
    for idx, spec in enumerate(k.inputs):
        kp = f"accept.inputs[{idx}]"
        if spec.name in seen:
            add(spec.loc.line, kp + ".name", f"duplicate input name {spec.name!r}")
        seen.add(spec.name)
        if spec.optional:
            seen_optional = spec.name
        elif seen_optional:
            add(spec.loc.line, kp, f"required input {spec.name!r} follows optional input {seen_optional!r}")
        for dim in spec.dims:
            prev = lowered.setdefault(dim.lower(), dim)
            if prev != dim:
                add(spec.loc.line, kp + ".dims", f"dim symbols {prev!r} and {dim!r} collide in lower case")
        c = spec.shape_constraint
        if isinstance(c, expr.SameAs):
            if c.other not in ranks or c.other == spec.name:
                add(spec.loc.line, kp + ".shape_constraint", f"same_as names unknown input {c.other!r}")
            elif ranks[c.other] != spec.rank:
                add(spec.loc.line, kp + ".shape_constraint",
                    f"same_as={c.other} but ranks differ ({spec.rank} vs {ranks[c.other]})")
        elif c is not None:
            for node in expr.constraint_nodes(c):
                _check_node(node, k, spec.rank, False, add, spec.loc.line, kp + ".shape_constraint")
        if spec.fdx and spec.fdx.gather:
            for role in (spec.fdx.gather.block_table, spec.fdx.gather.context_lens):
                if role not in ranks:
                    add(spec.loc.line, kp + ".fdx.gather", f"gather role {role!r} names no input")
        for d in spec.dtypes:
            if spec.is_float is False and d in ("F32", "F64", "BF16", "F16"):
                add(spec.loc.line, kp + ".dtypes", "an input mixes float and integer dtypes")
                break
    if k.inputs and not k.float_dtypes:
        add(k.loc.line, "accept.inputs", "no element type T is accepted by every float input")

    for f in k.op_params.fields:
        if f.name in ranks:
            add(f.loc.line, f"op_params.fields.{f.name}", "a param may not share a name with an input")
        if f.constraint is not None:
            if isinstance(f.constraint, expr.SameAs):
                add(f.loc.line, f"op_params.fields.{f.name}.constraint", "same_as is for inputs, not params")
            for node in expr.constraint_nodes(f.constraint):
                _check_node(node, k, 0, True, add, f.loc.line, f"op_params.fields.{f.name}.constraint")

    allowed = cost_symbols(k)
    formulas = [("cost.flops", k.cost.flops), ("cost.bytes_moved", k.cost.bytes_moved),
                ("cost.memory.device_bytes", k.cost.memory.device_bytes),
                ("cost.memory.host_bytes", k.cost.memory.host_bytes),
                ("cost.memory.disk_bytes", k.cost.memory.disk_bytes)]
    for keypath, formula in formulas:
        line = k.cost.line_of(keypath, k.loc.line)
        for sym in sorted(formula.symbols - allowed):
            add(line, keypath, f"unknown symbol {sym!r} in {str(formula)!r} (known: {', '.join(sorted(allowed))})")
        for ref in formula.dimrefs:
            _check_dimref(ref, k, add, line, keypath)

    for o in k.returns.items:
        for rule in (o.dtype_source, o.shape_source):
            if rule not in ranks:
                add(o.loc.line, f"return.{k.returns.kind}.{o.name}", f"rule refers to unknown input {rule!r}")
    if not k.returns.items:
        add(k.loc.line, "return", "a kernel must return at least one output")

    info = fused_ops.get(k.fused_op)
    if info is None:
        add(k.loc.line, "fused_op", f"fused op {k.fused_op!r} is not in contracts/fused_ops.yaml")
    elif k.fused_op_id is not None and k.fused_op_id != info.id:
        add(k.loc.line, "fused_op", f"FusedOpId({k.fused_op_id}) disagrees with fused_ops.yaml id {info.id}")


def _check_node(node: expr.Node, k: Kernel, own_rank: int, allow_self: bool, add, line: int, keypath: str) -> None:
    for n in expr.walk(node):
        if isinstance(n, expr.SelfRef) and not allow_self:
            add(line, keypath, "a leading '==' (self) is only valid in op param constraints")
        elif isinstance(n, expr.Sym) and n.name not in k.symbols:
            add(line, keypath, f"unknown symbol {n.name!r}")
        elif isinstance(n, expr.DimRef):
            if n.tensor is None:
                if allow_self:
                    add(line, keypath, "bare 'dim[i]' needs an input: write input.dim[i]")
                elif n.index >= own_rank:
                    add(line, keypath, f"dim[{n.index}] is out of range for rank {own_rank}")
            else:
                _check_dimref(n, k, add, line, keypath)


def _check_dimref(ref: expr.DimRef, k: Kernel, add, line: int, keypath: str) -> None:
    ranks = {i.name: i.rank for i in k.inputs}
    if ref.tensor not in ranks:
        add(line, keypath, f"{ref.tensor}.dim[{ref.index}] names no input")
    elif ref.index >= ranks[ref.tensor]:
        add(line, keypath, f"{ref.tensor}.dim[{ref.index}] is out of range for rank {ranks[ref.tensor]}")


def check_document(kernels: Iterable[Kernel], problems: Collector) -> None:
    names: dict[str, Kernel] = {}
    entries: dict[str, Kernel] = {}
    for k in kernels:
        if k.name in names:
            problems.add(k.loc.path, k.loc.line, k.name, f"duplicate kernel {k.name!r} (first at line {names[k.name].loc.line})")
        names.setdefault(k.name, k)
        if k.entry_point in entries:
            problems.add(k.loc.path, k.loc.line, f"{k.name}.entry_point", f"entry point {k.entry_point!r} already used by {entries[k.entry_point].name}")
        entries.setdefault(k.entry_point, k)
    # fused-op ids are one namespace across every contract: one id per op, one op per id
    op_ids: dict[str, tuple[int, Kernel]] = {}
    id_ops: dict[int, tuple[str, Kernel]] = {}
    for k in kernels:
        if k.fused_op_id is None:
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
