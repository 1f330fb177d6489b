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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from ..contract import expr
from ..contract.model import Kernel, offsets_target
from ..dtypes import DTYPES
from ..codegen.generate import Layout, environment, views
from ..codegen.pydocs import NUMPY_NAMES, contract_title, dtype_words, python_api, signature_lines
from ..codegen.view import LAYOUT_ORDER, KernelView

# the example of every kernel page (its code runs in tests/test_docs_examples.py, so keep it fast)
EXAMPLE_DIMS = {"B": 1, "Hq": 8, "Hkv": 2, "Sq": 512, "Sk": 512, "D": 64,
                "num_blocks": 256, "block_size": 16, "max_blocks_per_seq": 64}
PAGED_EXAMPLE = {"B": 4, "Sq": 1}


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
               k_len: Optional[int] = None, shift: int = 0) -> bool:
    """The contract's position_admissible, as site/semantics.md states it: query i at key position
    i + shift (0: top-left, the seed's; Sk - Sq: bottom-right)."""
    p = i + shift
    return not ((causal and j > p) or (left is not None and j + left < p)
                or (right is not None and j > p + right) or (k_len is not None and j >= k_len))


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
    shift = 8 - 6 if kernel.mask_alignment == "bottom_right" else 0   # Sk - Sq of the pictures
    for caption, kw, needs in cases:
        if needs <= fields:
            rows = [["on" if admissible(i, j, shift=shift, **kw) else "off" for j in range(8)] for i in range(6)]
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
    T = DTYPES[code]
    cast = "" if T.numpy_name == "float32" else f".astype({T.python_spelling})"  # the draws are float32
    lines = [">>> import numpy as np, fuel_cy" + ("" if T.numpy_module == "numpy" else f", {T.numpy_module}"),
             ">>> rng = np.random.default_rng(0)"]
    args = []
    def shown(spec) -> tuple[int, ...]:   # (the lowest rank's form: no leading dims of 1)
        return tuple(dims.get(d, 4) for d in spec.dims[spec.rank - spec.lowest_rank:])

    rows_of = {s.name: shown(s)[0] for s in kernel.inputs if s.is_float and s.dims}
    for spec in kernel.inputs:
        if spec.optional:
            continue
        shape = shown(spec)
        if spec.is_float:
            lines.append(f">>> {spec.name} = rng.standard_normal({shape}, dtype=np.float32){cast}")
        elif roles.get(spec.name) == "table":
            lines.append(f">>> {spec.name} = rng.permutation({dims['num_blocks']})[:{shape[0] * shape[1]}]"
                         f".reshape{shape}.astype({DTYPES[spec.dtypes[0]].python_spelling})")
        elif roles.get(spec.name) == "lens":
            cap = dims["max_blocks_per_seq"] * dims["block_size"]
            lines.append(f">>> {spec.name} = rng.integers(1, {cap} + 1, size={shape})"
                         f".astype({DTYPES[spec.dtypes[0]].python_spelling})")
        elif offsets_target(spec.name) in rows_of:
            # packed sequences: B + 1 offsets into the rows of the input the name ends in, spread evenly
            total = rows_of[offsets_target(spec.name)]
            cuts = [round(total * b / (shape[0] - 1)) for b in range(shape[0])] if shape[0] > 1 else [0]
            lines.append(f">>> {spec.name} = np.array({cuts}, dtype={DTYPES[spec.dtypes[0]].python_spelling})")
        else:
            lines.append(f">>> {spec.name} = np.zeros({shape}, dtype={DTYPES[spec.dtypes[0]].python_spelling})")
        args.append(spec.name)
    kw = ", causal=True" if any(f.name == "causal" for f in kernel.op_params.fields) else ""
    always = [o for o in kernel.returns.items if not o.when]   # (outputs returned on request: not shown)
    outs = [o.name for o in always]
    lines.append(f">>> {', '.join(outs)} = fuel_cy.{kernel.name}({', '.join(args)}{kw})")
    # an output shaped like an input comes back at the rank the input was given (given_ranks)
    shapes = {s.name: shown(s) for s in kernel.inputs}
    out_shapes = [f"({', '.join(str(n) for n in shapes[o.shape_source])})" for o in always]
    lines.append(f">>> {', '.join(o + '.shape' for o in outs)}, {outs[0]}.dtype")
    lines.append(f"({', '.join(out_shapes)}, {T.numpy_repr})")
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

_SUPERSCRIPT = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")


def _bound_text(dtype: str, backward: bool, compute: str) -> str:
    from ..harness.tolerance import MIXED_BOUNDS

    if compute == "f32" and dtype in MIXED_BOUNDS:
        return f"{MIXED_BOUNDS[dtype]:g}"
    if dtype == "F64":
        return "1e-10" if backward else "1e-12"
    if dtype == "F32":
        return "1e-4" if backward else "2e-5"
    u = "2⁻" + str(DTYPES[dtype].significand_bits).translate(_SUPERSCRIPT)  # the unit roundoff of T
    return f"{4 if backward else 8} · {u} · √(D + Sk)"


@dataclass(frozen=True)
class PrecisionRow:
    dtype: str
    math: str
    bound: str
    measured: str


def _precision_rows(kernel: Kernel, measured: dict[tuple[str, str], dict]) -> tuple[PrecisionRow, ...]:
    backward = kernel.returns.kind == "bundle"
    rows = []
    for d in kernel.float_dtypes:
        T = DTYPES[d]
        if kernel.precision.compute == "f32" or not T.rounds_each_step:
            math = T.work_numpy
        else:
            math = f"{T.numpy_name} (every step rounded)"
        m = measured.get((kernel.name, d))
        rows.append(PrecisionRow(NUMPY_NAMES[d], math, _bound_text(d, backward, kernel.precision.compute),
                                 f"{m['error']:.1e} (bound there {m['bound']:.2g})" if m else "—"))
    return tuple(rows)


@dataclass(frozen=True)
class SpeedRow:
    cpu: str
    dtype: str
    shape: str
    ms: str
    peer: str
    peer_ms: str
    ratio: str


# the kernel a benchmark row measured, where its name is an entry point's (the SDPA entry runs
# attention_masked)
BENCH_KERNEL = {"scaled_dot_product_attention": "attention_masked"}
# bf16/f16 users of a math-in-T kernel are pointed at the float32-math kernel that does its job
FLOAT32_MATH_KERNEL = {"attention_naive": "attention_flash_mixed", "attention_flash": "attention_flash_mixed",
                       "attention_paged_naive": "attention_paged_mixed",
                       "attention_flash_backward": "attention_flash_backward_mixed"}


def _recorded_speed(root: Path) -> list[tuple[str, dict]]:
    """(CPU label, row) of every recorded `fuel-cy bench` row measured against torch."""
    out = []
    for path in sorted((root / "benchmarks" / "results").glob("*/bench.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        m = data.get("machine", {})
        cpu = (f"{m.get('cpu', '?')}, {m.get('threads', '?')} threads, torch {data.get('torch') or '?'}, "
               f"{str(data.get('date', '?'))[:10]}")
        out += [(cpu, r) for r in data.get("rows", []) if str(r.get("peer") or "").startswith("torch")
                and r.get("ratio") is not None]
    return out


def _speed_rows(name: str, recorded: list[tuple[str, dict]]) -> tuple[SpeedRow, ...]:
    """Per CPU, per (dtype, P V mode) of float32 or bf16 and per torch peer: the smallest and the
    largest shape measured for this kernel against that peer (two shapes against one peer, so
    the pair reads as a trend)."""
    groups: dict[tuple[str, str, Any, str], list[dict]] = {}
    for cpu, r in recorded:
        if (BENCH_KERNEL.get(r["kernel"], r["kernel"]) == name and r["dtype"] in ("F32", "BF16")
                and not str(r["shape"]).startswith("per call")):
            groups.setdefault((cpu, r["dtype"], r.get("mode"), str(r["peer"])), []).append(r)
    rows = []
    for (cpu, dtype, mode, _peer), rs in groups.items():
        picked = [rs[0]] if len(rs) == 1 else [rs[0], rs[-1]]
        rows += [SpeedRow(cpu, dtype.lower() + (f" ({mode})" if mode else ""), r["shape"], f"{r['ms']:.2f}",
                          str(r["peer"]), f"{r['peer_ms']:.2f}", f"{r['ratio']:.2f}×") for r in picked]
    return tuple(rows)


def _measured(root: Path) -> dict[tuple[str, str], dict]:
    try:
        data = json.loads((root / "benchmarks" / "results" / "precision.json").read_text())
    except (OSError, ValueError):
        return {}
    return {(r["kernel"], r["dtype"]): r for r in data.get("rows", []) if r.get("default", True)}


# ---- the Contract box ------------------------------------------------------------------------

def _contract_inputs(kernel) -> list[str]:
    out = []
    for spec in kernel.inputs:
        by_policy = {p: [key for key in LAYOUT_ORDER if key in dict(spec.layout) and spec.layout_policy(key) == p]
                     for p in ("required", "rejected", "accepted")}
        layout = "; ".join(f"{p}: {', '.join(keys)}" for p, keys in by_policy.items() if keys) or "any"
        bits = [f"`{spec.name}`{' (optional)' if spec.optional else ''}: dtypes {', '.join(spec.dtypes)}",
                f"rank {spec.rank} `[{', '.join(spec.dims)}]`" if spec.lowest_rank == spec.rank else
                f"rank {spec.lowest_rank}–{spec.rank} `[{', '.join(spec.dims)}]` (missing leading dims read as 1)",
                f"layout {layout}"]
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


@dataclass(frozen=True)
class ArgRow:
    """A row of the Parameters table."""

    name: str
    type_cell: str
    default_text: str
    cell: str


@dataclass(frozen=True)
class OutputRow:
    name: str
    type: str
    cell: str


@dataclass(frozen=True)
class CostRow:
    name: str
    math: str
    value: str


@dataclass(frozen=True)
class KernelPage:
    """What a kernel's page shows beyond its KernelView (`view`; the contract model: `view.kernel`)."""

    view: KernelView
    signature: str  # one argument a line
    wiring: str
    args: tuple[ArgRow, ...]
    outputs: tuple[OutputRow, ...]
    use_when: str
    dtype_words: str
    masks: tuple[str, ...]
    paged: bool
    bottom_right: bool  # mask_alignment: bottom_right (the pictures and their text say so)
    example: str
    example_shapes: str
    example_dtype: str
    precision_rows: tuple[PrecisionRow, ...]
    speed_rows: tuple[SpeedRow, ...]
    float32_math_kernel: str  # for bf16/f16 users of a math-in-T kernel, or ""
    cost_rows: tuple[CostRow, ...]
    symbols: tuple[str, ...]
    contract_inputs: tuple[str, ...]
    contract_params: tuple[str, ...]
    contract_returns: tuple[str, ...]
    description: str  # the contract's prose, as Markdown indented into the Contract box


@dataclass(frozen=True)
class ContractSection:
    """A contract on the kernel index."""

    file: str
    provider: str
    title: str
    kernels: tuple[KernelPage, ...]


def kernel_page(v: KernelView, measured: dict[tuple[str, str], dict],
                recorded: Optional[list[tuple[str, dict]]] = None) -> KernelPage:
    kernel, py, entry = v.kernel, v.py, v.entry
    args = tuple(ArgRow(
        name=a.name, type_cell=f"`{a.type}`", default_text="required" if a.default is None else f"`{a.default}`",
        cell=md_inline(a.doc) + ("" if a.kind == "param" else "<br>" + md_inline(a.detail))
        + (f"<br>Example: `{a.example}`" if a.example else ""),
    ) for a in py.inputs + py.params)
    outputs = tuple(OutputRow(o.name, o.type, md_inline(o.doc) + "<br>" + md_inline(o.detail)) for o in py.outputs)
    dims = dict(EXAMPLE_DIMS)
    paged = any(s.fdx and s.fdx.gather for s in kernel.inputs)
    if paged:
        dims.update(PAGED_EXAMPLE)
    # an input that may leave out leading dims is shown without them (its simplest form: packed
    # k, [Hq] slopes), so those dims are 1 in the example and its costs
    dims.update({d: 1 for s in kernel.inputs if s.lowest_rank < s.rank for d in s.dims[:s.rank - s.lowest_rank]
                 if d not in EXAMPLE_DIMS})
    shapes = {s.name: tuple(dims.get(d, 4) for d in s.dims) for s in kernel.inputs}
    symbols: dict[str, Any] = {sym: shapes[inp][axis] for sym, (inp, axis) in kernel.symbols.items()}
    first = next(s for s in kernel.inputs if s.is_float)
    dtype = "F32" if "F32" in first.dtypes else first.dtypes[0]
    symbols["dtype_bytes"] = DTYPES[dtype].bytes
    cost_rows = tuple(
        CostRow(name, math_html(f), f"{f.evaluate(symbols, shapes):,.0f}")
        for name, f in (("flops", kernel.cost.flops), ("bytes moved", kernel.cost.bytes_moved),
                        ("host memory (bytes)", kernel.cost.memory.host_bytes),
                        ("device memory (bytes)", kernel.cost.memory.device_bytes),
                        ("disk (bytes)", kernel.cost.memory.disk_bytes)))
    code, _ = _example(kernel, dims, kernel.cost.flops.evaluate(symbols, shapes))
    return KernelPage(
        view=v, signature="\n".join(signature_lines(v.name, py)),
        wiring=_wiring(v.name, entry.exec_arm, list(entry.exec_dtypes)),
        args=args, outputs=outputs, use_when=md_inline(py.use_when) if py.use_when else "",
        dtype_words=dtype_words(list(kernel.float_dtypes)), masks=tuple(mask_figures(kernel)), paged=paged,
        bottom_right=kernel.mask_alignment == "bottom_right",
        example=code, example_shapes=", ".join(f"`{s.name}` `{list(shapes[s.name])}`" for s in kernel.inputs if not s.optional),
        example_dtype=NUMPY_NAMES[dtype], precision_rows=_precision_rows(kernel, measured),
        speed_rows=_speed_rows(v.name, recorded or []),
        float32_math_kernel=FLOAT32_MATH_KERNEL.get(v.name, "") if "BF16" in kernel.float_dtypes else "",
        cost_rows=cost_rows,
        symbols=tuple(sorted(kernel.symbols)), contract_inputs=tuple(_contract_inputs(kernel)),
        contract_params=tuple(
            f"`{f.name}`: kind `{f.kind}`" + (f"; constraint `{f.constraint_text}`" if f.constraint_text else "")
            + (f"; note: {md_inline(f.note)}" if f.note else "") for f in kernel.op_params.fields),
        contract_returns=tuple(
            f"`{o.name}`: dtype `{o.dtype_rule}`, shape `{o.shape_rule}`, layout {o.layout_guarantee}, aliasing {o.aliasing or 'none'}"
            + (f"; when `{o.when}`" if o.when else "")
            for o in kernel.returns.items),
        description="\n".join("    " + line if line else "" for line in md_block(kernel.description).splitlines()),
    )


FEATURES = ("causal", "window", "softcap", "ALiBi", "masks", "GQA", "varlen", "paged", "lse", "gradients", "out=",
            "round_p")


def _gradient_kernel(name: str, names: set[str]) -> str:
    """The kernel that gives `name`'s gradients, by the contracts' naming (X_backward, or
    X_backward_mixed for X_mixed), or ""."""
    for candidate in (f"{name}_backward", name.replace("_mixed", "_backward_mixed")):
        if candidate != name and candidate in names:
            return candidate
    return ""


def feature_row(kernel: Kernel, names: set[str]) -> dict[str, str]:
    """What a kernel takes, read from its contract: feature -> a cell ("yes", "—" or a detail)."""
    params = {f.name for f in kernel.op_params.fields}
    inputs = {i.name: i for i in kernel.inputs}
    outputs = {o.name: o for o in kernel.returns.items}
    # distinct query and kv head counts in the dims (Hq, Hkv): grouped-query attention
    gqa = "q" in inputs and "Hq" in inputs["q"].dims and any("Hkv" in i.dims for i in kernel.inputs)
    grad = _gradient_kernel(kernel.name, names)
    yes = lambda flag: "yes" if flag else "—"   # noqa: E731
    return {
        "causal": yes("causal" in params or kernel.name.startswith("attention_paged")),
        "window": yes("window_size_left" in params),
        "softcap": yes("softcap" in params),
        "ALiBi": yes("alibi_slopes" in inputs),
        "masks": yes("attn_mask" in inputs),
        "GQA": yes(gqa),
        "varlen": yes("cu_seqlens_q" in inputs),
        "paged": yes("block_table" in inputs),
        "lse": yes("lse" in outputs),
        # (a link named for what it is: the kernels' names are too long for fifteen columns)
        "gradients": f"[backward]({grad}.md)" if grad else ("this is one" if kernel.name.endswith(("_backward", "_backward_mixed")) else "—"),
        "out=": yes(any(o.caller_buffer for o in kernel.returns.items)),
        "round_p": yes("round_p" in params),
    }


def math_words(kernel: Kernel) -> str:
    """The feature matrix's arithmetic cell."""
    if kernel.precision.compute != "f32":
        return "in T"
    return "T; bf16/f16 in f32" if "F64" in kernel.float_dtypes else "f32"


def render_pages(root: Path) -> dict[str, str]:
    """Site-relative path -> Markdown for the kernel index and one page per kernel."""
    layout = Layout(root)
    v = views(layout, check_core=False)  # the pages describe the contracts, built or not
    env = environment(layout.templates / "docs")
    env.filters["md"] = md_inline
    measured = _measured(root)
    recorded = _recorded_speed(root)
    contracts = []
    api = python_api(layout.root / "contracts")
    for doc in v.docs:
        file = Path(doc.path).resolve().relative_to(layout.root.resolve()).as_posix()
        title = contract_title(api, Path(doc.path).name) or doc.title
        contracts.append(ContractSection(file, doc.provider.name, title, tuple(
            kernel_page(k, measured, recorded) for k in v.kernels if k.contract == file)))
    kernels = sorted((p for c in contracts for p in c.kernels), key=lambda p: kernel_order(p.view))
    contracts.sort(key=lambda c: min((kernel_order(p.view) for p in c.kernels), default=(1 << 30,)))
    names = {p.view.name for p in kernels}
    features = [(p, feature_row(p.view.kernel, names), math_words(p.view.kernel)) for p in kernels]
    pages = {"kernels/index.md": env.get_template("index.md.j2").render(contracts=contracts, kernels=kernels,
                                                                         fused_ops=list(v.fused_ops.values()),
                                                                         features=features, feature_names=FEATURES)}
    for page in kernels:
        pages[f"kernels/{page.view.name}.md"] = env.get_template("kernel.md.j2").render(k=page)
    return pages


def kernel_order(v: KernelView) -> tuple:
    """Kernels in the order of their fused-op ids: the founding contract's first (ids 12, 13, 22),
    then those of later contracts."""
    return (v.entry.fused_op_id if v.entry.fused_op_id is not None else 1 << 30,)


def api_entries(root: Path, module: str) -> str:
    """The mkdocstrings directives of site/api.md for every contract kernel in `module`
    (`fuel_cy`, `fuel_cy.torch` or `fuel_cy.dask`); their objects come from griffe_kernels."""
    names = [v.name for v in sorted(views(Layout(root), check_core=False).kernels, key=kernel_order)]
    return "\n\n".join(f"::: {module}.{name}\n    options:\n      heading_level: 3" for name in names)


def render_results(root: Path) -> dict[str, Any]:
    """Performance / precision pages from result files, when they exist (plots included)."""
    from .results import render_results_pages

    return render_results_pages(root)
