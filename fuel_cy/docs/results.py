"""Pages fed by measured result files (benchmarks/results/), stamped with machine, date and commit.

The Performance page is drawn from the result files at docs-build time: a summary per CPU measured
(ours against each peer), then one plot per kernel family. In every plot the ratio axis is
logarithmic with a line at 1.0, and colour means one thing only: against a peer (PyTorch, NumPy),
green where fuel_cy is faster and orange where it is slower; ratios of our kernels against each
other (bf16 against f32, naive against flash, threads) are grey, being neither.

Result files, one per CPU model so that a run on one CPU never replaces another's: `<cpu>/bench.json`
(`fuel-cy bench`, the full grid), `levels/<cpu>.json` (`fuel-cy bench --cpu-capability all`), where
<cpu> is the CPU model in lower case with dashes (`amd-epyc`; a second CPU of the same model name
adds its core, `amd-epyc-zen5`, and the page adds its cpuid family and model), and beside each
`<cpu>/bench.json` a hand-written `notes.md` with the conclusions behind that CPU's unmet targets
(the measurements behind them, for developers, in `profiles.md` beside it, not rendered).
"""
from __future__ import annotations

import io
import json
import math
import re
import subprocess
from pathlib import Path
from typing import Any, Optional

RESULTS = Path("benchmarks") / "results"
LEVELS = RESULTS / "levels"

WIN, LOSS, OURS = "#1b9e77", "#d95f02", "#8c8c8c"
FONT_PT = 11.0   # every label of every plot; the page states it and tests/test_site.py checks it
DPI = 150
WIDTH_IN = 7.5
DTYPE_MARKERS = {"F32": ("o", "float32"), "F64": ("s", "float64"), "BF16": ("^", "bfloat16"), "F16": ("v", "float16")}


def _load(root: Path, name: str) -> Any:
    path = root / RESULTS / name
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    out = ["| " + " | ".join(headers) + " |", "| " + " | ".join("---" for _ in headers) + " |"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def _commit(root: Path, data: dict, path: Path) -> Optional[str]:
    """The commit the numbers belong to: the result file's own `commit` field, else the last
    commit that changed the file."""
    if data.get("commit"):
        return str(data["commit"])[:10]
    try:
        out = subprocess.run(["git", "log", "-1", "--format=%h", "--", str(path)], cwd=root,
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def _stamp(data: dict, commit: Optional[str] = None, cpu: Optional[str] = None) -> str:
    """The line under a section: machine, date, versions, commit; `cpu` (cpu_labels) in place of
    the model name where given."""
    m = data.get("machine", {})
    level = f"CPU level `{m['cpu_capability']}`, " if m.get("cpu_capability") else ""
    flags = f"build flags `{' '.join(m['flags'])}`" if m.get("flags") else ""
    torch = f"torch {data['torch']}, " if data.get("torch") else ""
    where = f"; results of commit `{commit}`" if commit else ""
    return (f"Measured on {str(data.get('date', '?'))[:10]} — {cpu or m.get('cpu', '?')}, {m.get('cores', '?')} cores, "
            f"{m.get('threads', '?')} threads; {level}{torch}{flags}{where}.").replace(", .", ".").replace("; .", ".")


def _plot_stamp(data: dict, commit: Optional[str], cpu: Optional[str] = None) -> str:
    """The stamp drawn in a plot, so that an image taken out of the page still says which CPU (the
    page's label for it, cpu_labels, where given) and which commit it shows."""
    m = data.get("machine", {})
    parts = [cpu or m.get("cpu", "?"), f"{m.get('cores', '?')} cores", m.get("cpu_capability"), str(data.get("date", "?"))[:10],
             f"commit {commit}" if commit else None]
    return " · ".join(p for p in parts if p)


# ---- sorting the rows ------------------------------------------------------------------------

def peer_kind(peer: Optional[str]) -> Optional[str]:
    """'peer' (another library), 'ours' (fuel_cy against itself) or None."""
    if not peer:
        return None
    return "ours" if str(peer).startswith("fuel_cy") else "peer"


def _peer_label(peer: str) -> str:
    p = re.sub(r"\b(f32|f64|bf16|f16)\b", "", peer).replace("torch ", "PyTorch ").replace("  ", " ").strip()
    return p.replace("SDPA autograd bwd", "SDPA backward (autograd)").replace("( ", "(").replace(" )", ")")


def _shape_label(shape: str) -> str:
    return shape.replace("decode ", "").replace(", 2 threads", "")


def _compact_note(shapes: list[str]) -> str:
    """What `_compact` left out of these labels, for the text under the plot."""
    decode = next((_shape_label(s) for s in shapes if "ctx=" in s), None)
    note = "Labels leave out `B=1` and `H=8`."
    if decode:
        rest = " ".join(tok for tok in decode.split() if not tok.startswith("ctx="))
        note += f" Decode: `{rest}`."
    return note


def _compact(shape: str) -> str:
    """A short label for plots that mix kernels: B=1 and H=8 left out, and the paged decode shape
    reduced to its context length (the page states the rest)."""
    toks = _shape_label(shape).split()
    ctx = [t for t in toks if t.startswith("ctx=")]
    if ctx:
        return "decode " + ctx[0]
    return " ".join(t for t in toks if t not in ("B=1", "H=8", "Hq=8"))


FAMILIES = [
    ("forward", "Forward attention", ("attention_flash", "attention_flash_mixed")),
    ("backward", "Backward", ("attention_flash_backward", "attention_flash_backward_mixed")),
    ("paged", "Paged decode", ("attention_paged_naive", "attention_paged_mixed")),
]


def _family(kernel: str) -> Optional[str]:
    for key, _, kernels in FAMILIES:
        if kernel in kernels:
            return key
    return None


def _fmt_ratio(lo: float, hi: float) -> str:
    return f"{lo:.2f}×" if abs(hi - lo) < 0.005 else f"{lo:.2f}–{hi:.2f}×"


def summary_rows(rows: list[dict]) -> list[list[str]]:
    """One row per (kernel, dtype, P V mode, peer): in how many points we are faster, the range and
    mean of the speed ratio, and the milliseconds at the largest point (ours, the peer's)."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        if peer_kind(r.get("peer")) != "peer" or r.get("ratio") is None:
            continue
        groups.setdefault((r["kernel"], r.get("dtype", "F32"), r.get("mode"), _peer_label(r["peer"])), []).append(r)
    out = []
    for (kernel, dtype, mode, peer), rs in groups.items():
        ratios = [r["ratio"] for r in rs]
        wins = sum(x > 1.0 for x in ratios)
        big = max(rs, key=lambda r: r["peer_ms"] or 0)
        at = f"{big['ms']:.2f} / {big['peer_ms']:.2f} ({_compact(big['shape'])})" if big.get("peer_ms") else "—"
        out.append([f"`{kernel}` {DTYPE_MARKERS.get(dtype, ('', dtype.lower()))[1]}" + (f" ({mode})" if mode else ""),
                    peer, f"{wins} of {len(ratios)}", _ratio_cell(ratios), at])
    return out


def _ratio_cell(ratios: list[float]) -> str:
    geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
    text = _fmt_ratio(min(ratios), max(ratios))
    return text if len(ratios) == 1 else f"{text} (mean {geo:.2f}×)"


def level_summary(data: dict) -> str:
    """Per CPU level, each kernel's speed ratios against PyTorch at the same level."""
    kernels = list(dict.fromkeys(r["kernel"] for lv in data.get("levels", []) for r in lv["rows"]))
    rows = []
    for lv in data.get("levels", []):
        cells = []
        for k in kernels:
            ratios = [r["ratio"] for r in lv["rows"] if r["kernel"] == k]
            cells.append(_fmt_ratio(min(ratios), max(ratios)) if ratios else "—")
        rows.append([f"`{lv['level']}`", *cells])
    return _table(["level", *[f"`{k}`" for k in kernels]], rows)


# ---- plots -----------------------------------------------------------------------------------

def _pyplot():
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": FONT_PT, "axes.titlesize": FONT_PT + 1, "axes.labelsize": FONT_PT,
                         "xtick.labelsize": FONT_PT, "ytick.labelsize": FONT_PT, "legend.fontsize": FONT_PT,
                         "figure.titlesize": FONT_PT + 1, "svg.hashsalt": "fuel_cy", "path.simplify": True})
    return plt


def _ticks(lo: float, hi: float) -> list[float]:
    fine = [0.5, 0.6, 0.7, 0.8, 0.9, 1, 1.2, 1.5, 2, 2.5, 3]
    coarse = [0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50]
    inside = [t for t in (fine if hi / lo <= 4.5 else coarse) if lo <= t <= hi]
    return inside


def _common_tokens(labels: list[str]) -> list[str]:
    """Tokens every label has (e.g. "B=1 H=8"): said once in the subtitle, not on every line."""
    sets = [set(lab.split()) for lab in labels]
    common = set.intersection(*sets) if sets and len(labels) > 1 else set()
    return [tok for tok in labels[0].split() if tok in common] if common else []


def dot_plot(plt, rows: list[dict[str, Any]], title: str, stamp: str, xlabel: str) -> bytes:
    """rows: {"label": y label, "ratio": float, "marker": str, "series": legend name,
    "kind": "peer" | "ours"}; one line of the plot per distinct label, in order of appearance.
    Marker shape tells the series; colour tells only win or loss against a peer (grey: ours)."""
    from matplotlib.lines import Line2D

    labels = list(dict.fromkeys(r["label"] for r in rows))
    common = _common_tokens(labels)
    shown = {lab: " ".join(tok for tok in lab.split() if tok not in common) or lab for lab in labels}
    kinds = {r["kind"] for r in rows}
    handles = [Line2D([], [], ls="", marker=m, mfc="white", mec="black", ms=8, label=s)
               for s, m in dict.fromkeys((r["series"], r["marker"]) for r in rows)]
    if "peer" in kinds:
        handles += [Line2D([], [], ls="", marker="s", mfc=WIN, mec="black", ms=8, label="fuel_cy faster"),
                    Line2D([], [], ls="", marker="s", mfc=LOSS, mec="black", ms=8, label="fuel_cy slower")]
    else:
        handles += [Line2D([], [], ls="", marker="s", mfc=OURS, mec="black", ms=8, label="fuel_cy against itself")]
    ncol = 2 if len(handles) > 2 else 1
    # a fixed width (the page's column, so labels keep their size); constrained layout fits the
    # y labels, titles and legend inside it
    timed = any(r.get("ms") is not None for r in rows)
    height = 1.75 + (0.62 if timed else 0.34) * len(labels) + 0.3 * math.ceil(len(handles) / ncol)
    fig, ax = plt.subplots(figsize=(WIDTH_IN, height), dpi=DPI, layout="constrained")
    ys = {lab: i for i, lab in enumerate(labels)}
    for r in rows:
        colour = OURS if r["kind"] == "ours" else (WIN if r["ratio"] >= 1.0 else LOSS)
        ax.scatter(r["ratio"], ys[r["label"]], marker=r["marker"], s=70, c=colour, edgecolors="black",
                   linewidths=0.6, zorder=3)
    for r, above in _ms_placement(rows):
        # the milliseconds beside each marker, so a reader sees the time a ratio stands for
        ax.annotate(_fmt_ms(r["ms"]), (r["ratio"], ys[r["label"]]), xytext=(0, 7 if above else -7),
                    textcoords="offset points", ha="center", va="bottom" if above else "top",
                    fontsize=FONT_PT, color="#333333", zorder=4)
    ratios = [r["ratio"] for r in rows]
    lo, hi = min(ratios + [1.0]) / 1.25, max(ratios + [1.0]) * 1.25
    ax.set_xscale("log")
    ax.set_xlim(lo, hi)
    ticks = _ticks(lo, hi)
    ax.set_xticks(ticks, [f"{t:g}×" for t in ticks])
    ax.xaxis.set_minor_locator(plt.NullLocator())
    ax.axvline(1.0, color="black", lw=1.3, zorder=2)
    ax.set_yticks(range(len(labels)), [shown[lab] for lab in labels])
    ax.set_ylim(len(labels) - 0.5, -0.5)
    ax.grid(axis="x", color="#dddddd", lw=0.8, zorder=0)
    ax.grid(axis="y", color="#f0f0f0", lw=0.8, zorder=0)
    # right-aligned under the axis: centred, a long label ran past the figure's right edge when
    # long y labels pushed the axis right
    ax.set_xlabel(xlabel, loc="right", multialignment="right")
    fig.suptitle(f"{title}\n{stamp}" + (f" · {' '.join(common)}" if common else ""), x=0.01, ha="left",
                 fontsize=FONT_PT, linespacing=1.5)
    fig.legend(handles=handles, loc="outside lower left", ncol=ncol, frameon=False, handletextpad=0.3,
               columnspacing=1.5)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def _fmt_ms(ms: float) -> str:
    if ms < 0.1:
        return f"{ms * 1000:.0f} µs"
    return f"{ms:.3g} ms" if ms < 1000 else f"{ms / 1000:.2f} s"


def _ms_placement(rows: list[dict[str, Any]]) -> list[tuple[dict[str, Any], bool]]:
    """Each timed point with whether its label goes above the marker: on one line, labels of
    neighbouring points alternate sides so close ratios do not print over each other."""
    out = []
    by_line: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if r.get("ms") is not None:
            by_line.setdefault(r["label"], []).append(r)
    for line in by_line.values():
        for i, r in enumerate(sorted(line, key=lambda r: r["ratio"])):
            out.append((r, i % 2 == 0))
    return out


def _image(name: str, alt: str) -> str:
    return f'![{alt}](perf/{name}){{ .fc-plot-img data-font-pt="{FONT_PT:g}" data-dpi="{DPI}" loading="lazy" }}'


def _family_points(rows: list[dict], family: str) -> list[dict[str, Any]]:
    points = []
    for r in rows:
        if _family(r["kernel"]) != family or peer_kind(r.get("peer")) != "peer" or r.get("ratio") is None:
            continue
        if r["peer"].startswith("NumPy"):
            continue  # one point, in the summary and the table
        dtype = r.get("dtype", "F32")
        marker, dname = DTYPE_MARKERS.get(dtype, ("o", dtype.lower()))
        series = f"{dname} vs {_peer_label(r['peer'])}" if family == "paged" else dname
        if r.get("mode"):   # round_p's rows: their own series, filled-in marker shape
            series, marker = f"{dname}, {r['mode']}", {"^": "<", "v": ">"}.get(marker, "X")
        if family == "paged":
            marker = {"PyTorch gather + SDPA": "D"}.get(_peer_label(r["peer"]), marker)
        half = dtype in ("BF16", "F16")
        # half types on lines of their own (shape and dtype): at most two timed points per line
        label = _shape_label(r["shape"]) + (f" {dname}" if half else "")
        points.append({"label": label, "ratio": r["ratio"], "marker": marker, "series": series,
                       "kind": "peer", "ms": r.get("ms"), "half": half, "dtype": dname})
    return sorted(points, key=lambda p: _shape_key(p["label"]))


def _dtype_parts(points: list[dict[str, Any]]) -> list[tuple[list[dict[str, Any]], str, str]]:
    """A family's points as one figure, or two (float32/float64, then the half types) when it has
    both: one figure with every dtype's line would run past a screen."""
    full = [p for p in points if not p["half"]]
    half = [p for p in points if p["half"]]
    if not (full and half):
        return [(points, "", "")]
    def named(part: list[dict[str, Any]]) -> str:
        return ", " + " and ".join(dict.fromkeys(p["dtype"] for p in part))
    return [(full, "", named(full)), (half, "-half", named(half))]


def _shape_key(label: str) -> tuple:
    nums = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", label)}
    return (nums.get("ctx", 0), nums.get("S", 0), nums.get("D", 0), -nums.get("Hkv", 0), "causal" in label, label.split()[-1] == "float16")


def _ours_points(rows: list[dict]) -> list[dict[str, Any]]:
    points = []
    for r in rows:
        if peer_kind(r.get("peer")) != "ours" or r.get("ratio") is None:
            continue
        dtype = r.get("dtype", "F32")
        short = r["kernel"].replace("attention_", "")
        if r["peer"] == "fuel_cy 1 thread":
            label, series, marker = f"{short} {_compact(r['shape'])}", "2 threads vs 1", "P"
        elif dtype in ("BF16", "F16") and r.get("mode"):   # the mixed kernel's P-in-T mode vs attention_flash f32
            marker, dname = DTYPE_MARKERS[dtype]
            marker = {"^": "<", "v": ">"}.get(marker, "X")   # not the math-in-T rows' shape
            label, series = f"{short} {_compact(r['shape'])}", f"{dname} {r['mode']} vs attention_flash float32"
        elif dtype in ("BF16", "F16"):
            marker, dname = DTYPE_MARKERS[dtype]
            label, series = f"{short} {_compact(r['shape'])}", f"{dname} vs float32 (same kernel)"
        else:
            label, series, marker = f"{short} {_compact(r['shape'])}", "naive vs flash (float32)", "o"
        points.append({"label": label, "ratio": r["ratio"], "marker": marker, "series": series, "kind": "ours",
                       "ms": r.get("ms")})
    order = {"naive vs flash (float32)": 0, "bfloat16 vs float32 (same kernel)": 1,
             "float16 vs float32 (same kernel)": 1, "bfloat16 P in T vs attention_flash float32": 2,
             "float16 P in T vs attention_flash float32": 2, "2 threads vs 1": 3}
    return sorted(points, key=lambda p: (order.get(p["series"], 3), _shape_key(p["label"])))


def _level_points(data: dict) -> list[dict[str, Any]]:
    markers = ["D", "o", "s", "^", "v", "P"]
    points = []
    for i, lv in enumerate(data.get("levels", [])):
        for r in lv["rows"]:
            # a line per level and shape, so each point's milliseconds print clear of the others
            points.append({"label": f"{lv['level']}: {r['kernel'].replace('attention_', '')} {_compact(r['shape'])}",
                           "ratio": r["ratio"], "marker": markers[i % len(markers)],
                           "series": f"{lv['level']} vs torch {str(lv.get('torch_capability', '')).lower()}",
                           "kind": "peer", "ms": r.get("ms")})
    return points


# ---- the pages -------------------------------------------------------------------------------

def _runs(root: Path) -> list[tuple[str, dict, Path]]:
    """Full-grid runs: every <cpu>/bench.json."""
    runs = []
    for path in sorted((root / RESULTS).glob("*/bench.json")):
        try:
            runs.append((path.parent.name, json.loads(path.read_text()), path))
        except (OSError, ValueError):
            continue
    return runs


def _level_runs(root: Path) -> list[tuple[str, dict, Path]]:
    out = []
    for path in sorted((root / LEVELS).glob("*.json")):
        try:
            out.append((path.stem, json.loads(path.read_text()), path))
        except (OSError, ValueError):
            continue
    return out


def cpu_labels(results: list[tuple[str, dict, Path]]) -> dict[Path, str]:
    """The name each result file is shown under: lscpu's model name, with the cpuid family and
    model added where CPUs measured share that name ("AMD EPYC" is a Zen 4 of family 25 and a Zen 5
    of family 26), so that one CPU's section, plots and notes never land in another's."""
    def name_of(name: str, data: dict) -> str:
        return str(data.get("machine", {}).get("cpu", name))

    def core_of(data: dict) -> str:
        words = str(data.get("machine", {}).get("cpu_id", "")).split()
        return " ".join(words[1:]) if len(words) > 1 else ""   # drop the vendor string

    cores: dict[str, set[str]] = {}
    for name, data, _ in results:
        cores.setdefault(name_of(name, data), set()).add(core_of(data))
    labels: dict[Path, str] = {}
    for name, data, path in results:
        cpu, core = name_of(name, data), core_of(data)
        labels[path] = f"{cpu} ({core})" if len(cores[cpu]) > 1 and core else cpu
    return labels


def performance_page(root: Path) -> tuple[str, dict[str, bytes]]:
    from ..harness.targets import targets

    runs, level_runs = _runs(root), _level_runs(root)
    labels = cpu_labels(runs + level_runs)
    # sections in the order of the CPUs' labels (family 25 before 26), not of the file names, where
    # "amd-epyc-zen5" sorts before "amd-epyc"
    runs.sort(key=lambda run: labels[run[2]])
    level_runs.sort(key=lambda run: labels[run[2]])
    lines = ["---", "title: Performance", "---", "# Performance", ""]
    images: dict[str, bytes] = {}
    if not runs and not level_runs:
        lines.append("No benchmark results yet: run `fuel-cy bench --json benchmarks/results/<cpu>/bench.json` "
                     "and rebuild the site.")
        return "\n".join(lines) + "\n", images
    plt = _pyplot()
    lines += ["How fast fuel_cy runs against PyTorch (and NumPy) on the CPUs measured. Ours and the peer run "
              "in one process, interleaved, median of the repetitions after warm-up. A **speed ratio** is the "
              "peer's time divided by ours: above 1, fuel_cy is faster. *P in T* marks the bf16/f16 rows of the "
              "`round_p` mode (the softmax weights rounded to the input's type before `P · V`, torch's order).", "",
              "To reproduce on the machine at hand: `fuel-cy bench` runs this grid and prints every row and the "
              "targets table (`--quick`: a smaller grid in about a minute); `fuel-cy bench --json "
              "benchmarks/results/<cpu>/bench.json --plot benchmarks/results/<cpu>/bench.png` records a run for "
              "this page, one file per CPU model. Run it on a quiet machine: a build or test run on the same "
              "cores changes the ratios.", ""]

    # summary: per CPU measured, ours against each peer
    lines += ["## Summary", "",
              "For each CPU measured: each of our kernels against each peer, in how many of the measured shapes "
              "fuel_cy is faster, and the range of the speed ratio (with its geometric mean). The plots and "
              "tables further down show every point.", ""]
    cpus: dict[str, list[str]] = {}
    for name, data, path in runs:
        m = data.get("machine", {})
        level = f" at CPU level `{m['cpu_capability']}`" if m.get("cpu_capability") else ""
        cpus.setdefault(labels[path], []).extend(
            [f"The full grid{level}, {str(data.get('date', '?'))[:10]}:", "",
             _table(["kernel", "against", "faster in", "speed ratio", "ms, ours / peer, at the largest"],
                    summary_rows(data["rows"])), ""])
    for name, data, path in level_runs:
        cpus.setdefault(labels[path], []).extend(
            [f"Each CPU level against PyTorch at the same level, {str(data.get('date', '?'))[:10]} (range of the "
             "speed ratio over the shapes measured):", "", level_summary(data), ""])
    for cpu, block in cpus.items():
        lines += [f"### {cpu}", "", *block]

    for name, data, path in runs:
        commit = _commit(root, data, path)
        cpu = labels[path]
        stamp = _plot_stamp(data, commit, cpu)
        slug = re.sub(r"[^a-z0-9]+", "-", cpu.lower()).strip("-") or name
        lines += [f"## {cpu}: the full grid", "", _stamp(data, commit, cpu), ""]
        if data.get("gemm_gflops"):
            peaks = "".join(f", {kind} peak **{v:.1f} GFLOP/s**" for kind, v in (data.get("peak_gflops") or {}).items())
            lines += [f"Reference rates in the same run: f32 GEMM **{data['gemm_gflops']:.1f} GFLOP/s**, large copy "
                      f"**{data.get('copy_gbps', 0):.1f} GB/s** (read + write){peaks}.", ""]
        if plt is None:
            lines += ["*The plots need matplotlib (`pip install matplotlib`) when the site is built.*", ""]
        for key, title, kernels in FAMILIES:
            points = _family_points(data["rows"], key)
            if not points:
                continue
            lines += [f"### {title}", ""]
            if plt is not None:
                peer = "PyTorch" if key != "backward" else "PyTorch autograd"
                names = " and ".join(k.replace("attention_", "") for k in kernels)
                for part, suffix, what in _dtype_parts(points):
                    img = f"{slug}-{key}{suffix}.png"
                    images[img] = dot_plot(plt, part, f"{title}: {names}{what}", stamp,
                                           f"speed ratio = {peer} time / fuel_cy time\n(beside each point: fuel_cy's time)")
                    lines += [_image(img, f"{title}{what}: speed ratios of fuel_cy against PyTorch on {cpu}"), ""]
        ours = _ours_points(data["rows"])
        if ours:
            lines += ["### fuel_cy against itself", "",
                      "Not a race against a peer (grey): what a half-precision dtype costs against float32 in the same "
                      "kernel (\"math in T\" rounds every step), `attention_naive` against `attention_flash`, and two "
                      "threads against one.", ""]
            if plt is not None:
                img = f"{slug}-ours.png"
                images[img] = dot_plot(plt, ours, "fuel_cy against fuel_cy", stamp,
                                       "speed ratio = reference time / this kernel's time\n"
                                       "(beside each point: this kernel's time)")
                lines += [_image(img, f"fuel_cy kernels against each other on {cpu}"), "",
                          _compact_note([r["shape"] for r in data["rows"] if peer_kind(r.get("peer")) == "ours"]), ""]
        judged = targets(data)
        lines += _targets(judged)
        lines += _gap_notes(root, judged, path)
        lines += _all_rows(data)

    for name, data, path in level_runs:
        commit = _commit(root, data, path)
        lines += _levels(data, commit, plt, images, labels[path])
    return "\n".join(lines) + "\n", images


def gap_notes_path(run: Path) -> Path:
    """Where the hand-written profiles behind a run's unmet targets live: beside its bench.json."""
    return run.parent / "notes.md"


def _gap_notes(root: Path, judged: list[dict], run: Path) -> list[str]:
    notes = gap_notes_path(run)
    if notes.exists():
        return [notes.read_text().strip(), ""]
    if any(t["met"] is False for t in judged):
        # a run whose gaps nobody has explained says so, rather than leaving the table bare
        return [f"*What limits the targets not met on this CPU is not written up yet "
                f"(`{notes.relative_to(root).as_posix()}`).*", ""]
    return []


def _targets(judged: list[dict]) -> list[str]:
    rows = [[t["target"], t["measured"], {True: "yes", False: "**no**", None: "—"}[t["met"]],
             t.get("limit") or "" if t["met"] is False else ""] for t in judged]
    return ["### Targets", "", "The project's performance goals, judged on this run. For a miss the last column "
            "sets its worst point against a limit the same run measured: a compute-bound kernel against the "
            "arithmetic peak (a register-only multiply-add loop on the same threads; for bf16 with exact P, the "
            "rate its products allow with each kind at its own peak) or the f32 GEMM rate, a "
            "memory-bound one against a large copy timed beside it; how much of it we reach and how much the goal would "
            "need. What limits the misses follows the table.", "",
            _table(["target", "measured", "met", "against the machine (measured)"], rows), ""]


def _all_rows(data: dict) -> list[str]:
    lines = ["### All measurements", ""]
    for r in data["rows"]:
        if r.get("pct_copy") is not None:
            beside = f" ({r['copy_gbps']:.1f} GB/s, timed beside it)" if r.get("copy_gbps") else ""
            lines.append(f"- `{r['kernel']}` {r['shape']}: K+V read at {r['kv_gbps']:.1f} GB/s, "
                         f"{r['pct_copy']:.0f}% of the copy rate{beside}")
    if data.get("flash_32k_rss"):
        x = data["flash_32k_rss"]
        lines.append(f"- `attention_flash` at S=32768, D=64, f32, causal: peak RSS {x['rss_peak_mb']:.0f} MB, "
                     f"{x['extra_mb']:.0f} MB beyond inputs + output")
    lines.append("")
    rows = [[f"`{r['kernel']}`", r["dtype"].lower() + (f" ({r['mode']})" if r.get("mode") else ""), r["shape"],
             f"{r['ms']:.2f}", f"{r['gflops']:.1f}",
             r.get("peer", "—"), "—" if r.get("peer_ms") is None else f"{r['peer_ms']:.2f}",
             "—" if r.get("ratio") is None else f"{r['ratio']:.2f}×",
             "—" if r.get("pct_gemm") is None else f"{r['pct_gemm']:.0f}%"] for r in data["rows"]]
    lines += ['??? note "Every row of the run"',
              "    `ratio` is peer time / our time; `% GEMM` compares our GFLOP/s with the f32 GEMM rate "
              "measured in the same run.", ""]
    lines += ["    " + line for line in
              _table(["kernel", "dtype", "shape", "ms", "GFLOP/s", "peer", "peer ms", "ratio", "% GEMM"], rows).splitlines()]
    return lines + [""]


def _levels(data: dict, commit: Optional[str], plt, images: dict[str, bytes], cpu: str) -> list[str]:
    """The per-level section of one CPU, shown under `cpu` (cpu_labels)."""
    from ..harness.bench_levels import level_targets

    m = data.get("machine", {})
    lines = [f"## {cpu}: each CPU level", "",
             "The same build at each CPU level it contains, against PyTorch forced to the same instruction set "
             "(`fuel-cy bench --cpu-capability all`; ours and torch in one child process per level, interleaved, "
             "medians).", "", _stamp({**data, "machine": {k: v for k, v in m.items() if k != "cpu_capability"}}, commit, cpu), ""]
    points = _level_points(data)
    if plt is not None and points:
        slug = re.sub(r"[^a-z0-9]+", "-", cpu.lower()).strip("-") or "cpu"
        img = f"{slug}-levels.png"
        images[img] = dot_plot(plt, points, "Each CPU level against PyTorch at the same level",
                               _plot_stamp({**data, "machine": {k: v for k, v in m.items() if k != "cpu_capability"}}, commit, cpu),
                               "speed ratio = PyTorch time / fuel_cy time\n(beside each point: fuel_cy's time)")
        lines += [_image(img, f"fuel_cy against PyTorch at each CPU level on {cpu}"), "",
                  _compact_note([r["shape"] for lv in data["levels"] for r in lv["rows"]]), ""]
    rows = []
    for lv in data["levels"]:
        for r in lv["rows"]:
            rows.append([f"`{lv['level']}`", f"`{r['kernel']}`", r["shape"], f"{r['ms']:.2f}",
                         f"{r['peer_ms']:.2f}", f"{r['ratio']:.2f}×"])
    lines += [_table(["level", "kernel", "shape", "ms", "torch ms", "ratio"], rows), ""]
    envs = {lv["level"]: " ".join(f"{k}={v}" for k, v in lv.get("torch_env", {}).items()) for lv in data["levels"]}
    lines += ["Torch ran with " + "; ".join(f"`{k}`: `{v}`" for k, v in envs.items() if v) + ".", ""]
    lines += [_table(["target", "measured", "met"],
                     [[t["target"], t["measured"], {True: "yes", False: "**no**", None: "—"}[t["met"]]]
                      for t in level_targets(data)]), ""]
    flags = {lv["level"]: " ".join(lv.get("compile_args", [])) for lv in data["levels"]}
    lines += ["Flags per level:", ""] + [f"- `{k}`: `{v}`" for k, v in flags.items()] + [""]
    return lines


def _mode(row: dict) -> str:
    return {None: "—", True: "P in T", False: "P in f32"}[row.get("round_p")]


def precision_page(root: Path) -> str:
    from ..harness.tolerance import __doc__ as bounds_doc

    data = _load(root, "precision.json")
    lines = ["---", "title: Precision", "hide:", "  - toc", "---", "# Precision", "",
             "Every kernel is checked against an independent float64 reference. The documented bounds:", "",
             "```text", (bounds_doc or "").strip(), "```", ""]
    if data:
        commit = _commit(root, data, root / RESULTS / "precision.json")
        lines += [_stamp(data, commit), "",
                  "Kernels with a P · V mode (`round_p`) are audited in both for bf16 and f16: *P in T* "
                  "(the weights rounded to the input's type before they multiply V, torch's and flash-attn's "
                  "order) and *P in f32* (the exact-P mode).", "",
                  _table(["kernel", "dtype", "P · V", "shape", "max rel. error", "bound", "within"],
                         [[f"`{r['kernel']}`", r["dtype"].lower(), _mode(r), r["shape"], f"{r['error']:.2e}",
                           f"{r['bound']:.1e}", "yes" if r["ok"] else "**no**"] for r in data["rows"]])]
        if data.get("peer"):
            lines += ["", "## Against torch in the same dtype", "",
                      "flash-attn's rule for its own kernels: the max absolute error against the float64 "
                      "reference at most twice PyTorch's in the same dtype (here torch's "
                      "`scaled_dot_product_attention`), on flash-attn's test shapes. `attention_masked` in both "
                      "P · V modes; random normal inputs.", "",
                      _table(["dtype", "shape", "causal", "torch error", "P in T", "P in f32"],
                             [[r["dtype"].lower(), r["shape"], "yes" if r["causal"] else "no", f"{r['torch_error']:.2e}",
                               f"{r['p_in_t_error']:.2e} ({r['p_in_t_error'] / r['torch_error']:.2f}×)"
                               + ("" if r["p_in_t_ok"] else " **over**"),
                               f"{r['p_in_f32_error']:.2e} ({r['p_in_f32_error'] / r['torch_error']:.2f}×)"
                               + ("" if r["p_in_f32_ok"] else " **over**")] for r in data["peer"]])]
        lines += ["", "Regenerate on the machine at hand: `fuel-cy demo --json benchmarks/results/precision.json` "
                  "(a test fails when the kernels changed after the audit's commit)."]
    else:
        lines.append("No audit file yet: `fuel-cy demo --json benchmarks/results/precision.json` writes one.")
    return "\n".join(lines) + "\n"


def render_results_pages(root: Path) -> dict[str, Any]:
    page, images = performance_page(root)
    pages: dict[str, Any] = {"performance.md": page, "precision.md": precision_page(root)}
    for name, data in images.items():
        pages[f"perf/{name}"] = data
    return pages
