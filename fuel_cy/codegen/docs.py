"""Render the kernel reference pages from the contract model (used by the mkdocs hook).

A kernel page is written for a Python reader first: the signature, one table of every argument
in Python types with what it does, its default and an example (contracts/python-api.yaml, read
through codegen.pydocs, the same text as the kernel's docstring), the masks as pictures, the
returned arrays, a runnable example, which kernel to use, precision and cost. What the contract
declares in its own terms (entry point, fused-op id, layout clauses, FDX notes, the prose) is kept
in a collapsed "Contract" box at the end; where fuel_cy differs from that prose, the page says so
from python-api.yaml's `differs` notes."""
from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any, Optional

from ..contract import expr, load_contracts
from ..contract.loader import FUSED_OPS_FILE, parse_fused_ops
from ..contract.schema import DTYPE_BYTES
from .cores import CORE_SOURCES
from .generate import Layout, environment
from .pydocs import NUMPY_NAMES, dtype_words, signature_lines
from .view import LAYOUT_ORDER, kernel_view, sources_digest

# the example of every kernel page (its code runs in tests/test_docs_examples.py, so keep it fast)
EXAMPLE_DIMS = {"B": 1, "Hq": 8, "Hkv": 2, "Sq": 512, "Sk": 512, "D": 64,
                "num_blocks": 256, "block_size": 16, "max_blocks_per_seq": 64}
PAGED_EXAMPLE = {"B": 4, "Sq": 1}
NUMPY_REPR = {"F32": "dtype('float32')", "F64": "dtype('float64')", "BF16": "dtype(bfloat16)", "F16": "dtype('float16')"}


def md_inline(text: Any) -> str:
    """Make contract text safe inside Markdown (tables included): raw HTML is escaped outside
    code spans, so a contract can never inject markup or script into the site."""
    parts = str(text).replace("\n", " ").split("`")
    for i in range(0, len(parts), 2):
        # a pipe inside a code span does not split a table cell; outside one it must be escaped
        parts[i] = html.escape(parts[i], quote=False).replace("|", "\\|")
    return "`".join(parts)


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
        return f"the executor arm of its op ({'/'.join(exec_dtypes)})"
    if exec_arm:
        return f"a sibling of `{exec_arm}` (not the executor arm)"
    return "not wired in the executor (oracle only)"


# ---- masks as pictures -----------------------------------------------------------------------

def admissible(i: int, j: int, causal: bool = False, left: Optional[int] = None, right: Optional[int] = None,
               k_len: Optional[int] = None) -> bool:
    """The contract's position_admissible, as site/semantics.md states it (top-left causal)."""
    return not ((causal and j > i) or (left is not None and j + left < i)
                or (right is not None and j > i + right) or (k_len is not None and j >= k_len))


def _mask_svg(rows: list[list[str]], title: str, block: int = 0) -> str:  # title: plain text
    """A grid of cells: "on" (attended), "off" (masked), "none" (no key there). `block` draws
    the pool's block boundaries every `block` keys."""
    cell, pad_left, pad_top = 18, 24, 22
    nq, nk = len(rows), len(rows[0])
    w, h = pad_left + nk * cell + 2, pad_top + nq * cell + 2
    out = [f'<svg class="fc-mask" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" '
           f'aria-label="{html.escape(title)}">',
           f'<text x="{pad_left}" y="14" class="fc-axis">key j →</text>']
    for i, row in enumerate(rows):
        y = pad_top + i * cell
        out.append(f'<text x="{pad_left - 5}" y="{y + 13}" text-anchor="end" class="fc-axis">{i}</text>')
        for j, state in enumerate(row):
            out.append(f'<rect class="fc-{state}" x="{pad_left + j * cell + 1}" y="{y + 1}" '
                       f'width="{cell - 2}" height="{cell - 2}" rx="2"/>')
    if block:
        for b in range(block, nk, block):
            x = pad_left + b * cell
            out.append(f'<line class="fc-block" x1="{x}" y1="{pad_top - 3}" x2="{x}" y2="{h}"/>')
    out.append("</svg>")
    return "".join(out)


def _figure(rows: list[list[str]], caption: str, block: int = 0) -> str:
    plain = re.sub(r"<[^>]+>", "", caption)
    return f'<figure class="fc-mask-figure">{_mask_svg(rows, plain, block)}<figcaption>{caption}</figcaption></figure>'


def mask_figures(kernel) -> list[str]:
    fields = {f.name for f in kernel.op_params.fields}
    if any(s.fdx and s.fdx.gather for s in kernel.inputs):
        # paged: Sq = 3 queries against context_lens[b] = 10, blocks of 4; slots 10, 11 unused
        sq, ctx, bs, nk = 3, 10, 4, 12
        rows = [["none" if j >= ctx else "on" if j <= max(ctx - sq, 0) + q else "off" for j in range(nk)]
                for q in range(sq)]
        return [_figure(rows, "<code>context_lens[b]=10</code>, <code>Sq=3</code>, blocks of 4", block=bs)]
    cases: list[tuple[str, dict[str, Any], set[str]]] = [("causal=True", dict(causal=True), {"causal"}),
             ("window_size_left=2", dict(left=2), {"window_size_left"}),
             ("causal=True, window_size_left=2", dict(causal=True, left=2), {"causal", "window_size_left"}),
             ("window_size_left=1, window_size_right=1", dict(left=1, right=1), {"window_size_left", "window_size_right"}),
             ("k_len=5", dict(k_len=5), {"k_len"})]
    figures = []
    for caption, kw, needs in cases:
        if needs <= fields:
            rows = [["on" if admissible(i, j, **kw) else "off" for j in range(8)] for i in range(6)]
            figures.append(_figure(rows, " ".join(f"<code>{c.strip()}</code>" for c in caption.split(","))))
    return figures


# ---- the example -----------------------------------------------------------------------------

def _example(kernel, dims: dict[str, int], flops: float) -> tuple[str, str]:
    """A doctest that runs the kernel on the example shapes and prints what is true of every run:
    the output shapes and dtype, and the contract's flop count."""
    roles = {}
    for spec in kernel.inputs:
        if spec.fdx and spec.fdx.gather:
            roles[spec.fdx.gather.block_table] = "table"
            roles[spec.fdx.gather.context_lens] = "lens"
    first = next(s for s in kernel.inputs if s.is_float)
    code = "F32" if "F32" in first.dtypes else first.dtypes[0]
    cast = {"F32": "", "F64": ".astype(np.float64)", "BF16": ".astype(ml_dtypes.bfloat16)",
            "F16": ".astype(np.float16)"}[code]
    lines = [">>> import numpy as np, fuel_cy" + (", ml_dtypes" if code == "BF16" else ""),
             ">>> rng = np.random.default_rng(0)"]
    args = []
    for spec in kernel.inputs:
        if spec.optional:
            continue
        shape = tuple(dims.get(d, 4) for d in spec.dims)
        if spec.is_float:
            lines.append(f">>> {spec.name} = rng.standard_normal({shape}, dtype=np.float32){cast}")
        elif roles.get(spec.name) == "table":
            lines.append(f">>> {spec.name} = rng.permutation({dims['num_blocks']})[:{shape[0] * shape[1]}]"
                         f".reshape{shape}.astype(np.uint32)")
        elif roles.get(spec.name) == "lens":
            cap = dims["max_blocks_per_seq"] * dims["block_size"]
            lines.append(f">>> {spec.name} = rng.integers(1, {cap} + 1, size={shape}).astype(np.uint32)")
        else:
            lines.append(f">>> {spec.name} = np.zeros({shape}, dtype=np.uint32)")
        args.append(spec.name)
    kw = ", causal=True" if any(f.name == "causal" for f in kernel.op_params.fields) else ""
    outs = [o.name for o in kernel.returns.items]
    lines.append(f">>> {', '.join(outs)} = fuel_cy.{kernel.name}({', '.join(args)}{kw})")
    shapes = {s.name: tuple(dims.get(d, 4) for d in s.dims) for s in kernel.inputs}
    shown = [f"({', '.join(str(n) for n in shapes[o.shape_source])})" for o in kernel.returns.items]
    lines.append(f">>> {', '.join(o + '.shape' for o in outs)}, {outs[0]}.dtype")
    lines.append(f"({', '.join(shown)}, {NUMPY_REPR[code]})")
    lines.append(f'>>> fuel_cy.cost("{kernel.name}", {", ".join(args)}).flops')
    lines.append(f"{flops:.0f}")
    return "\n".join(_fit(line) for line in lines), code


def _fit(line: str, width: int = 76) -> str:
    """Break a long `>>> call(a, b, ...)` line at its arguments, doctest style, so the example
    fits the text column without scrolling."""
    if len(line) <= width or not line.startswith(">>> ") or "(" not in line or not line.endswith(")"):
        return line
    head, args = line[:-1].split("(", 1)
    pad = "... " + " " * (len(head) + 1 - 4)
    out, cur = [], head + "("
    for i, arg in enumerate(a.strip() for a in args.split(", ")):
        piece = arg + (", " if i < args.count(", ") else ")")
        if len(cur) + len(piece.rstrip()) > width and cur.strip() not in ("", "...") and not cur.endswith("("):
            out.append(cur.rstrip())
            cur = pad
        cur += piece
    return "\n".join(out + [cur])


# ---- precision -------------------------------------------------------------------------------

def _bound_text(dtype: str, backward: bool, compute: str) -> str:
    from ..tolerance import MIXED_BOUNDS

    if compute == "f32" and dtype in MIXED_BOUNDS:
        return f"{MIXED_BOUNDS[dtype]:g}"
    if dtype == "F64":
        return "1e-10" if backward else "1e-12"
    if dtype == "F32":
        return "1e-4" if backward else "2e-5"
    u = {"BF16": "2⁻⁸", "F16": "2⁻¹¹"}[dtype]
    return f"{4 if backward else 8} · {u} · √(D + Sk)"


def _precision_rows(kernel, measured: dict[tuple[str, str], dict]) -> list[dict[str, str]]:
    backward = kernel.returns.kind == "bundle"
    rows = []
    for d in kernel.float_dtypes:
        if kernel.precision.compute == "f32" or d in ("F32", "F64"):
            math = "float32" if d in ("BF16", "F16", "F32") else "float64"
        else:
            math = f"{NUMPY_NAMES[d]} (every step rounded)"
        m = measured.get((kernel.name, d))
        rows.append({"dtype": NUMPY_NAMES[d], "math": math, "bound": _bound_text(d, backward, kernel.precision.compute),
                     "measured": f"{m['error']:.1e} (bound there {m['bound']:.2g})" if m else "—"})
    return rows


def _measured(root: Path) -> dict[tuple[str, str], dict]:
    try:
        data = json.loads((root / "benchmarks" / "results" / "precision.json").read_text())
    except (OSError, ValueError):
        return {}
    return {(r["kernel"], r["dtype"]): r for r in data.get("rows", [])}


# ---- the Contract box ------------------------------------------------------------------------

def _contract_inputs(kernel) -> list[str]:
    out = []
    for spec in kernel.inputs:
        by_policy = {p: [key for key in LAYOUT_ORDER if key in dict(spec.layout) and spec.layout_policy(key) == p]
                     for p in ("required", "rejected", "accepted")}
        layout = "; ".join(f"{p}: {', '.join(keys)}" for p, keys in by_policy.items() if keys) or "any"
        bits = [f"`{spec.name}`{' (optional)' if spec.optional else ''}: dtypes {', '.join(spec.dtypes)}",
                f"rank {spec.rank} `[{', '.join(spec.dims)}]`", f"layout {layout}"]
        if spec.shape_constraint_text:
            bits.append(f"shape constraint `{spec.shape_constraint_text}`")
        if spec.fdx:
            f = spec.fdx
            fdx = [f"requires_ext {f.requires_ext}" if f.requires_ext is not None else "",
                   f"symbolic_extent {f.symbolic_extent}" if f.symbolic_extent else "",
                   f"extent_kind {f.extent_kind}" if f.extent_kind else "",
                   (f"gather {f.gather.kind} (block table `{f.gather.block_table}`, context lengths "
                    f"`{f.gather.context_lens}`)") if f.gather else ""]
            bits.append("FDX: " + ", ".join(x for x in fdx if x))
        out.append("; ".join(bits))
    return out


def _page_view(doc, kernel, fused, digest, rel, measured) -> dict[str, Any]:
    v = kernel_view(doc, kernel, fused, digest, rel)
    py = v["py"]
    v["wiring"] = _wiring(kernel.name, v["exec_arm"], v["exec_dtypes"])
    v["provider"] = doc.provider.name
    v["variant"] = kernel.op_params.variant
    v["signature"] = "\n".join(signature_lines(kernel.name, py))
    for a in py["inputs"] + py["params"]:
        a["default_text"] = "required" if a["default"] is None else f"`{a['default']}`"
        detail = "" if a["kind"] == "param" else "<br>" + md_inline(a["detail"])
        a["cell"] = md_inline(a["doc"]) + detail + (
            f"<br>Example: `{a['example']}`" if a["example"] else "")
        a["type_cell"] = f"`{a['type']}`"
    for o in py["outputs"]:
        o["cell"] = md_inline(o["doc"]) + "<br>" + md_inline(o["detail"])
    v["contract_inputs"] = _contract_inputs(kernel)
    v["contract_params"] = [
        f"`{f.name}`: kind `{f.kind}`" + (f"; constraint `{f.constraint_text}`" if f.constraint_text else "")
        + (f"; note: {md_inline(f.note)}" if f.note else "") for f in kernel.op_params.fields]
    v["contract_returns"] = [
        f"`{o.name}`: dtype `{o.dtype_rule}`, shape `{o.shape_rule}`, layout {o.layout_guarantee}, aliasing {o.aliasing or 'none'}"
        for o in kernel.returns.items]
    v["caps"] = kernel.caps
    dims = dict(EXAMPLE_DIMS)
    if any(s.fdx and s.fdx.gather for s in kernel.inputs):
        dims.update(PAGED_EXAMPLE)
    shapes = {s.name: tuple(dims.get(d, 4) for d in s.dims) for s in kernel.inputs}
    symbols = {sym: shapes[inp][axis] for sym, (inp, axis) in kernel.symbols.items()}
    first = next(s for s in kernel.inputs if s.is_float)
    dtype = "F32" if "F32" in first.dtypes else first.dtypes[0]
    symbols["dtype_bytes"] = DTYPE_BYTES[dtype]
    rows = []
    for name, f in (("flops", kernel.cost.flops), ("bytes moved", kernel.cost.bytes_moved),
                    ("host memory (bytes)", kernel.cost.memory.host_bytes),
                    ("device memory (bytes)", kernel.cost.memory.device_bytes),
                    ("disk (bytes)", kernel.cost.memory.disk_bytes)):
        rows.append({"name": name, "math": math_html(f), "value": f"{f.evaluate(symbols, shapes):,.0f}"})
    v["cost_rows"] = rows
    v["example_shapes"] = ", ".join(f"`{s.name}` `{list(shapes[s.name])}`" for s in kernel.inputs if not s.optional)
    v["example_dtype"] = NUMPY_NAMES[dtype]
    code, _ = _example(kernel, dims, kernel.cost.flops.evaluate(symbols, shapes))
    v["example"] = code
    v["symbols"] = sorted(kernel.symbols)
    v["description"] = "\n".join("    " + line if line else "" for line in md_block(kernel.description).splitlines())
    v["masks"] = mask_figures(kernel)
    v["paged"] = any(s.fdx and s.fdx.gather for s in kernel.inputs)
    v["precision_rows"] = _precision_rows(kernel, measured)
    v["dtype_words"] = dtype_words(list(kernel.float_dtypes))
    v["use_when"] = md_inline(py["use_when"]) if py["use_when"] else ""
    return v


def render_pages(root: Path) -> dict[str, str]:
    """Site-relative path -> Markdown for the kernel index and one page per kernel."""
    layout = Layout(root)
    docs = load_contracts(layout.contracts)
    fused = parse_fused_ops((layout.contracts / FUSED_OPS_FILE).read_text(encoding="utf-8"))
    digest = sources_digest(layout.core, CORE_SOURCES)
    env = environment(layout.templates / "docs")
    env.filters["md"] = md_inline
    measured = _measured(root)
    views: list[dict[str, Any]] = []
    contracts: list[dict[str, Any]] = []
    for doc in docs:
        rel = Path(doc.path).resolve().relative_to(layout.root.resolve()).as_posix()
        mine = [_page_view(doc, kernel, fused, digest, rel, measured) for kernel in doc.kernels]
        views += mine
        contracts.append({"file": rel, "provider": doc.provider.name, "title": doc.title, "kernels": mine})
    views = sorted(views, key=kernel_order)
    contracts.sort(key=lambda c: min((kernel_order(v) for v in c["kernels"]), default=(1 << 30,)))
    pages = {"kernels/index.md": env.get_template("index.md.j2").render(contracts=contracts, kernels=views,
                                                                         fused_ops=list(fused.values()))}
    for v in views:
        pages[f"kernels/{v['name']}.md"] = env.get_template("kernel.md.j2").render(k=v)
    return pages


def kernel_order(v: dict[str, Any]) -> tuple:
    """Kernels in the order of their fused-op ids: the founding contract's first (ids 12, 13, 22),
    then those of later contracts."""
    return (v["fused_op_id"] if v["fused_op_id"] is not None else 1 << 30,)


def api_entries(root: Path, module: str) -> str:
    """The mkdocstrings directives of site/api.md for every contract kernel in `module`
    (`fuel_cy`, `fuel_cy.torch` or `fuel_cy.dask`); their objects come from griffe_kernels."""
    from .stubs import kernel_views

    names = [v["name"] for v in sorted(kernel_views(root), key=kernel_order)]
    return "\n\n".join(f"::: {module}.{name}\n    options:\n      heading_level: 3" for name in names)


def render_results(root: Path) -> dict[str, Any]:
    """Performance / precision pages from result files, when they exist (plots included)."""
    from .results import render_results_pages

    return render_results_pages(root)
