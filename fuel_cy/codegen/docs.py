"""Render the kernel reference pages from the contract model (used by the mkdocs hook)."""
from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

from ..contract import expr, load_contracts
from ..contract.loader import FUSED_OPS_FILE, parse_fused_ops
from ..contract.schema import DTYPE_BYTES
from .cores import CORE_SOURCES
from .generate import Layout, environment
from .view import LAYOUT_ORDER, kernel_view, sources_digest

EXAMPLE_DIMS = {"B": 1, "Hq": 8, "Hkv": 2, "Sq": 1024, "Sk": 1024, "D": 64,
                "num_blocks": 256, "block_size": 16, "max_blocks_per_seq": 64}
PAGED_EXAMPLE = {"B": 4, "Sq": 1}


def md_inline(text: Any) -> str:
    """Make contract text safe inside Markdown (tables included): raw HTML is escaped outside
    code spans, so a contract can never inject markup or script into the site."""
    parts = str(text).replace("\n", " ").split("`")
    for i in range(0, len(parts), 2):
        parts[i] = html.escape(parts[i], quote=False)
    return "`".join(parts).replace("|", "\\|")


def md_block(text: str) -> str:
    return "\n".join(md_inline(line).replace("\\|", "|") if line.strip() else "" for line in text.splitlines())


def math_html(formula: expr.Formula) -> str:
    """A formula as typeset HTML: italic symbols, a centred dot for products."""
    text = expr.node_str(formula.ast)
    text = re.sub(r"[A-Za-z_][A-Za-z0-9_]*(\.dim\[\d+\])?", lambda m: (
        f"<var>{m.group(0).split('.')[0]}</var>.dim[{m.group(0).split('[')[1]}" if m.group(1) else f"<var>{m.group(0)}</var>"), text)
    return text.replace(" * ", " · ")


def _wiring(kernel_name: str, exec_arm: Any, exec_dtypes: list) -> str:
    if exec_arm == kernel_name:
        return f"executor arm ({'/'.join(exec_dtypes)})"
    if exec_arm:
        return f"sibling of `{exec_arm}` (not the exec arm)"
    return "not exec-wired (oracle only)"


def _example(kernel, dims: dict[str, int]) -> tuple[str, dict[str, int]]:
    roles = {}
    for spec in kernel.inputs:
        if spec.fdx and spec.fdx.gather:
            roles[spec.fdx.gather.block_table] = "table"
            roles[spec.fdx.gather.context_lens] = "lens"
    # the example's element type: float32 where the kernel takes it, else its first float dtype
    first = next(s for s in kernel.inputs if s.is_float)
    code = "F32" if "F32" in first.dtypes else first.dtypes[0]
    imports = ["import ml_dtypes"] if code == "BF16" else []
    cast = {"F32": "", "F64": ".astype(np.float64)", "BF16": ".astype(ml_dtypes.bfloat16)", "F16": ".astype(np.float16)"}[code]
    lines = ["import numpy as np", *imports, "import fuel_cy", "", "rng = np.random.default_rng(0)"]
    args = []
    for spec in kernel.inputs:
        if spec.optional:
            continue
        shape = tuple(dims.get(d, 4) for d in spec.dims)
        if spec.is_float:
            lines.append(f"{spec.name} = rng.standard_normal({shape}, dtype=np.float32){cast}")
        elif roles.get(spec.name) == "table":
            lines.append(f"{spec.name} = rng.permutation({dims['num_blocks']})[:{shape[0] * shape[1]}]"
                         f".reshape{shape}.astype(np.uint32)")
        elif roles.get(spec.name) == "lens":
            cap = dims["max_blocks_per_seq"] * dims["block_size"]
            lines.append(f"{spec.name} = rng.integers(1, {cap} + 1, size={shape}).astype(np.uint32)")
        else:
            lines.append(f"{spec.name} = np.zeros({shape}, dtype=np.uint32)")
        args.append(spec.name)
    kw = ", causal=True" if any(f.name == "causal" for f in kernel.op_params.fields) else ""
    result = ", ".join(o.name for o in kernel.returns.items)
    lines.append(f"{result} = fuel_cy.{kernel.name}({', '.join(args)}{kw})")
    lines.append(f"print(fuel_cy.cost({kernel.name!r}, {', '.join(args)}))")
    return "\n".join(lines), dims, code


def _page_view(doc, kernel, fused, digest, rel) -> dict[str, Any]:
    v = kernel_view(doc, kernel, fused, digest, rel)
    v["wiring"] = _wiring(kernel.name, v["exec_arm"], v["exec_dtypes"])
    v["variant"] = kernel.op_params.variant
    for i, spec in zip(v["inputs"], kernel.inputs):
        by_policy = {p: [key for key in LAYOUT_ORDER if key in dict(spec.layout) and spec.layout_policy(key) == p]
                     for p in ("required", "rejected", "accepted")}
        i["layout_text"] = "<br>".join(f"{p}: {', '.join(keys)}" for p, keys in by_policy.items() if keys) or "any"
        i["constraint_text"] = f"`{spec.shape_constraint}`" if spec.shape_constraint else ""
    for p, f in zip(v["params"], kernel.op_params.fields):
        p["constraint_text"] = str(f.constraint) if f.constraint else ""
        if p["default"] is None:
            p["default_text"] = "required"
        elif f.name == "softmax_scale":
            p["default_text"] = "`1/sqrt(D)` (as f32)"
        elif p["default_source"]:
            p["default_text"] = f"`{f.constraint.terms[1] if isinstance(f.constraint, expr.Equal) else p['default']}`"
        else:
            p["default_text"] = f"`{p['default']}`"
    v["returns"] = [vars(o) | {"name": o.name} for o in kernel.returns.items]
    v["caps"] = kernel.caps
    dims = dict(EXAMPLE_DIMS)
    if any(s.fdx and s.fdx.gather for s in kernel.inputs):
        dims.update(PAGED_EXAMPLE)
    code, dims, dtype = _example(kernel, dims)
    shapes = {s.name: tuple(dims.get(d, 4) for d in s.dims) for s in kernel.inputs}
    symbols = {sym: shapes[inp][axis] for sym, (inp, axis) in kernel.symbols.items()}
    symbols["dtype_bytes"] = DTYPE_BYTES[dtype]
    label = ("example: " + ", ".join(f"{s.lower()}={dims[s]}" for s in dims if s.lower() in kernel.symbols)
             + f", {dtype.lower()}")
    rows = []
    for name, f in (("flops", kernel.cost.flops), ("bytes moved", kernel.cost.bytes_moved),
                    ("host memory", kernel.cost.memory.host_bytes), ("device memory", kernel.cost.memory.device_bytes),
                    ("disk", kernel.cost.memory.disk_bytes)):
        value = f.evaluate(symbols, shapes)
        rows.append({"name": name, "math": math_html(f), "value": f"{value:,.0f}"})
    v["cost_rows"] = rows
    v["example"] = {"code": code, "label": label}
    v["symbols"] = sorted(kernel.symbols)
    v["description"] = md_block(kernel.description)
    return v


def render_pages(root: Path) -> dict[str, str]:
    """Site-relative path -> Markdown for the kernel index and one page per kernel."""
    layout = Layout(root)
    docs = load_contracts(layout.contracts)
    fused = parse_fused_ops((layout.contracts / FUSED_OPS_FILE).read_text(encoding="utf-8"))
    digest = sources_digest(layout.core, CORE_SOURCES)
    env = environment(layout.templates / "docs")
    env.filters["md"] = md_inline
    views, contracts = [], []
    for doc in docs:
        rel = Path(doc.path).resolve().relative_to(layout.root.resolve()).as_posix()
        mine = [_page_view(doc, kernel, fused, digest, rel) for kernel in doc.kernels]
        views += mine
        contracts.append({"file": rel, "provider": doc.provider.name, "title": doc.title, "kernels": mine})
    pages = {"kernels/index.md": env.get_template("index.md.j2").render(contracts=contracts,
                                                                         fused_ops=list(fused.values()))}
    for v in views:
        pages[f"kernels/{v['name']}.md"] = env.get_template("kernel.md.j2").render(k=v)
    return pages


def render_results(root: Path) -> dict[str, str]:
    """Performance / precision / robustness pages from result files, when they exist."""
    from .results import render_results_pages

    return render_results_pages(root)
