"""Flatten the contract model into plain data for the templates (all decisions made here, so the
templates hold nothing beyond loops and conditionals)."""
from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any, Optional

from ..contract import expr
from ..contract.checks import cost_symbols
from ..contract.model import ContractDoc, FusedOpInfo, InputSpec, Kernel
from .cores import BINDINGS, INT_WORK, policy
from .pydocs import python_api, python_view

# Layout checks run most specific first so the error names the clause that really failed.
LAYOUT_ORDER = ("broadcast_stride0", "reverse_strides", "start_offset", "strided", "contiguous")
PARAM_HELPERS = {"f32": "param_f32", "f64": "param_f64", "bool": "param_bool",
                 "usize": "param_usize", "DynScalar": "param_usize"}


def summary(description: str) -> str:
    first = description.split("\n\n")[0].replace("\n", " ").strip()
    m = re.match(r"(.+?\.)(\s|$)", first)
    return (m.group(1) if m else first).strip()


def revision_hash(doc: ContractDoc, kernel: Kernel, sources_digest: str) -> str:
    if kernel.kernel_revision_hash != "auto":
        return kernel.kernel_revision_hash
    h = hashlib.sha256()
    for part in (doc.provider.revision_base, kernel.block_text, sources_digest):
        h.update(part.encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()[:16]


def sources_digest(core_dir: Path, names: tuple[str, ...]) -> str:
    h = hashlib.sha256()
    for name in names:
        h.update(name.encode())
        h.update((core_dir / name).read_bytes())
    return h.hexdigest()


def _leaf_source(owner: str, params: set[str], kernel: Kernel):
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


def constraint_check(c: expr.Constraint, owner: str, kernel: Kernel, optional_inputs: set[str]) -> dict[str, Any]:
    leaf = _leaf_source(owner, set(), kernel)
    if isinstance(c, expr.SameAs):
        source = f"{owner}.shape == {c.other}.shape"
        values = [(f"{owner}.shape", f"{owner}.shape"), (f"{c.other}.shape", f"{c.other}.shape")]
        refs = {owner, c.other}
    else:
        if isinstance(c, expr.Divisible):
            source = f"_v.divisible({expr.to_source(c.numerator, leaf)}, {expr.to_source(c.denominator, leaf)})"
        else:
            source = " == ".join(expr.to_source(t, leaf) for t in c.terms)
        values = []
        refs = {owner}
        for n in _leaves(c):
            src = leaf(n)
            label = owner if isinstance(n, expr.SelfRef) else expr.node_str(n) if not isinstance(n, expr.DimRef) or n.tensor else f"{owner}.dim[{n.index}]"
            values.append((label, src))
            refs.add(src.split(".")[0])
    return {"source": source, "values": values, "guard": sorted(r for r in refs if r in optional_inputs)}


# What a C-contiguous array that starts at its buffer's start is, under each layout clause: the
# validators' typed fast path (fastcheck.pxi) accepts only such arrays, so it may serve an input
# only when every clause accepts them.
_FAST_LAYOUT_OK = {"contiguous": ("required", "accepted"), "strided": ("rejected", "accepted"),
                   "broadcast_stride0": ("rejected", "accepted"), "reverse_strides": ("rejected", "accepted"),
                   "start_offset": ("rejected", "accepted")}
_FAST_DTYPE_BITS = {"F32": "FC_F32", "F64": "FC_F64", "BF16": "FC_BF16", "F16": "FC_F16", "U32": "FC_U32"}


def _fast_view(spec: InputSpec, layout: list[tuple[str, str]], symbols: list[str]) -> Optional[dict[str, Any]]:
    """The typed fast check of one input (fastcheck.pxi), or None when only the full checks can serve it."""
    if any(policy not in _FAST_LAYOUT_OK.get(key, ()) for key, policy in layout):
        return None
    if any(d not in _FAST_DTYPE_BITS for d in spec.dtypes):
        return None
    return {"mask": " | ".join(_FAST_DTYPE_BITS[d] for d in spec.dtypes),
            "slots": [symbols.index(sym) for sym in spec.dims]}


def _input_view(kernel: Kernel, idx: int, spec: InputSpec, optional: set[str]) -> dict[str, Any]:
    layout = [(key, spec.layout_policy(key)) for key in LAYOUT_ORDER if key in dict(spec.layout)]
    view: dict[str, Any] = {
        "name": spec.name, "index": idx, "optional": spec.optional, "dtypes": list(spec.dtypes),
        "rank": spec.rank, "dims": list(enumerate(spec.dims)), "layout": layout,
        "is_float": spec.is_float, "line": spec.loc.line,
        "fast": _fast_view(spec, layout, _dim_symbols(kernel)),
        "int_ctype": INT_WORK[spec.dtypes[0]][0] if not spec.is_float and spec.dtypes[0] in INT_WORK else None,
        "int_np": INT_WORK[spec.dtypes[0]][1] if not spec.is_float and spec.dtypes[0] in INT_WORK else None,
        "constraint": None,
    }
    if spec.shape_constraint is not None:
        check = constraint_check(spec.shape_constraint, spec.name, kernel, optional)
        check["clause"] = f"accept.inputs[{idx}].shape_constraint {spec.shape_constraint_text!r}"
        view["constraint"] = check
    return view


def _dim_symbols(kernel: Kernel) -> list[str]:
    """Every dim symbol of the kernel's inputs, in order of first use."""
    out: list[str] = []
    for spec in kernel.inputs:
        out.extend(sym for sym in spec.dims if sym not in out)
    return out


def _pytype(base_kind: str, nullable: bool) -> str:
    base = {"f32": "float", "f64": "float", "bool": "bool"}.get(base_kind, "int")
    return f"Optional[{base}]" if nullable else base


def _param_default(kernel: Kernel, f) -> Optional[str]:
    """Python source of a param's default; None means the caller must pass it."""
    if f.optional or f.base_kind == "bool":
        return "None" if f.optional else "False"
    if f.name == "softmax_scale":
        return "None"  # documented: 1/sqrt(D), rounded to f32
    if isinstance(f.constraint, expr.Equal) and isinstance(f.constraint.terms[0], expr.SelfRef):
        return "None"  # defaults to the first term of its equality constraint (e.g. the pool's block_size)
    return None


def kernel_view(doc: ContractDoc, kernel: Kernel, fused: dict[str, FusedOpInfo], digest: str,
                contract_rel: str) -> dict[str, Any]:
    optional = {i.name for i in kernel.inputs if i.optional}
    inputs = [_input_view(kernel, i, spec, optional) for i, spec in enumerate(kernel.inputs)]
    params = []
    for f in kernel.op_params.fields:
        default = _param_default(kernel, f)
        p: dict[str, Any] = {
            "name": f.name, "kind": f.kind, "base_kind": f.base_kind, "optional": f.optional,
            "helper": PARAM_HELPERS[f.base_kind], "default": default, "note": f.note,
            "clause": f"op_params.fields.{f.name}", "constraint": None, "default_source": None,
            "pytype": _pytype(f.base_kind, default == "None"),
        }
        if f.name == "softmax_scale" and not f.optional:
            lead = kernel.inputs[0]
            p["default_source"] = f"_v.default_scale({lead.name}.shape[{lead.rank - 1}])"
        elif default == "None" and not f.optional and f.constraint is not None:
            term = f.constraint.terms[1]  # type: ignore[union-attr]
            p["default_source"] = expr.to_source(term, _leaf_source(f.name, set(), kernel))
        if f.constraint is not None:
            check = constraint_check(f.constraint, f.name, kernel, optional)
            check["clause"] = f"op_params.fields.{f.name}.constraint {f.constraint_text!r}"
            p["constraint"] = check
        params.append(p)

    sig_inputs = [i.name + ("=None" if i.optional else "") for i in kernel.inputs]
    sig_params = [p["name"] + ("" if p["default"] is None else "=" + p["default"]) for p in params]
    signature = ", ".join(sig_inputs + (["*"] + sig_params if sig_params else []))

    syms = sorted(cost_symbols(kernel))
    symbol_sources = []
    for s in syms:
        if s in kernel.symbols:
            inp, axis = kernel.symbols[s]
            symbol_sources.append((s, f"shapes[{inp!r}][{axis}]"))
        elif s == "dtype_bytes":
            symbol_sources.append((s, "dtype_bytes"))
        else:
            symbol_sources.append((s, f"params.get({s!r})"))

    def cost_src(formula: expr.Formula) -> str:
        def leaf(node: expr.Node) -> str:
            if isinstance(node, expr.Sym):
                return f"_s_{node.name}"
            if isinstance(node, expr.DimRef):
                return f"shapes[{node.tensor!r}][{node.index}]"
            raise ValueError(node)
        return expr.to_source(formula.ast, leaf)

    info = fused.get(kernel.fused_op)
    binding = BINDINGS.get(kernel.name)
    if binding is not None and not all(any(sym in spec.dims for spec in kernel.inputs) for sym in binding.dims):
        binding = None  # the contract no longer has the dims the driver takes: stub it
    dim_source: dict[str, tuple[str, int]] = {}  # each dim symbol -> a required input's axis that has it
    for spec in kernel.inputs:
        for axis, sym in enumerate(spec.dims):
            if not spec.optional:
                dim_source.setdefault(sym, (spec.name, axis))
    outputs = [{"name": o.name, "shape_src": o.shape_source, "dtype_src": o.dtype_source}
               for o in kernel.returns.items]
    return {
        "name": kernel.name, "blurb": kernel.blurb, "title": kernel.title,
        "summary": summary(kernel.description), "description": kernel.description,
        "contract": contract_rel, "contract_hash": doc.text_hash, "line": kernel.loc.line,
        "revision_hash": revision_hash(doc, kernel, digest),
        "fused_op": kernel.fused_op, "fused_op_id": kernel.fused_op_id if kernel.fused_op_id is not None else (info.id if info else None),
        "backend": kernel.backend, "kernel_source": kernel.kernel_source, "entry_point": kernel.entry_point,
        "inputs": inputs, "params": params, "signature": signature,
        "float_inputs": [i["name"] for i in inputs if i["is_float"]],
        "outputs": outputs, "bundle": kernel.returns.kind == "bundle",
        "dtypes": [{"code": d, "tag": pol[0], "ctype": pol[1], "npwork": pol[2]}
                   for d in kernel.float_dtypes
                   for pol in [policy(kernel.precision.compute, d)] if pol is not None],
        "compute": kernel.precision.compute,
        "driver": binding is not None,
        "driver_name": binding.driver if binding else None,
        "half_prepare": binding.half_prepare if binding else None,
        "half_driver": binding.half_driver if binding else None,
        "half_storage": list(binding.half_storage) if binding else [],
        "driver_dim_refs": [dim_source[s] for s in binding.dims if s in dim_source] if binding else [],
        "symbol_sources": symbol_sources,
        "cost": {
            "flops": cost_src(kernel.cost.flops), "bytes_moved": cost_src(kernel.cost.bytes_moved),
            "host_bytes": cost_src(kernel.cost.memory.host_bytes),
            "device_bytes": cost_src(kernel.cost.memory.device_bytes),
            "disk_bytes": cost_src(kernel.cost.memory.disk_bytes),
        },
        "cost_text": {
            "flops": str(kernel.cost.flops), "bytes_moved": str(kernel.cost.bytes_moved),
            "host_bytes": str(kernel.cost.memory.host_bytes),
            "device_bytes": str(kernel.cost.memory.device_bytes),
            "disk_bytes": str(kernel.cost.memory.disk_bytes),
        },
        "overhead_ns": kernel.cost.overhead_ns, "provenance": kernel.cost.provenance,
        "exec_arm": info.exec_arm if info else None,
        "exec_dtypes": list(info.exec_dtypes) if info else [],
        "precision": {
            "bit_stable_on_same_hardware": kernel.precision.bit_stable_on_same_hardware,
            "max_ulp": kernel.precision.max_ulp, "max_relative": kernel.precision.max_relative,
            "max_absolute": kernel.precision.max_absolute, "audited": kernel.precision.audited,
            "notes": kernel.precision.notes,
        },
        "determinism": kernel.determinism,
        "awkward_layout_strategy": kernel.caps.awkward_layout_strategy,
        "dims": {spec.name: list(spec.dims) for spec in kernel.inputs},
        "py": python_view(kernel, params, python_api(Path(doc.path).parent)),  # Python-facing docs
        "dim_symbols": _dim_symbols(kernel),
        "fast": all(i["fast"] is not None for i in inputs),
    }


def docstring(view: dict[str, Any]) -> str:
    """NumPy-style docstring for a dispatch stub: Python types and a description of every argument
    and returned array from contracts/python-api.yaml (``view["py"]``, built by
    `pydocs.python_view`), the errors, the contract's location last."""
    from .pydocs import docstring_text

    return docstring_text(view)
