"""Pages fed by measured result files (benchmarks/results/*.json), stamped with machine and date."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RESULTS = Path("benchmarks") / "results"


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


def _stamp(data: dict) -> str:
    m = data.get("machine", {})
    level = f"CPU level `{m['cpu_capability']}`, " if m.get("cpu_capability") else ""
    return (f"Measured on {data.get('date', '?')} — {m.get('cpu', '?')}, {m.get('cores', '?')} cores, "
            f"{m.get('threads', '?')} threads; {level}build flags `{' '.join(m.get('flags', []))}`.")


def performance_page(root: Path) -> str:
    data = _load(root, "bench.json")
    lines = ["---", "title: Performance", "hide:", "  - toc", "---", "# Performance", ""]
    if not data:
        lines.append("No benchmark results yet: run `fuel-cy bench --json benchmarks/results/bench.json "
                     "--plot benchmarks/results/bench.png` and rebuild the site.")
        return "\n".join(lines) + "\n"
    lines += [_stamp(data), "",
              "Ours and the peers run in one process, interleaved, median of the repetitions after warm-up. "
              "`ratio` is peer time / our time (above 1: we are faster). `% GEMM` compares our GFLOP/s with "
              "the f32 GEMM rate measured in the same run.", ""]
    if data.get("gemm_gflops"):
        lines.append(f"Measured f32 GEMM rate: **{data['gemm_gflops']:.1f} GFLOP/s**; large-copy bandwidth "
                     f"**{data.get('copy_gbps', 0):.1f} GB/s** (read + write).\n")
    if (root / RESULTS / "bench.png").exists():
        lines += ["![speed ratios of fuel_cy against its peers](bench.png)", ""]
    from ..targets import targets

    lines += ["## Targets", "", "Issue #5's targets against this run; what limits the ones not met follows the table.", "",
              _table(["target", "measured", "met"],
                     [[t["target"], t["measured"], {True: "yes", False: "**no**", None: "—"}[t["met"]]]
                      for t in targets(data)]), ""]
    notes = root / "benchmarks" / "notes.md"  # hand-written: the profiles behind the gaps
    if notes.exists():
        lines += [notes.read_text().strip(), ""]
    lines += levels_section(root)
    lines += ["## All measurements", ""]
    extras = [r for r in data["rows"] if r.get("pct_copy") is not None]
    for r in extras:
        lines.append(f"- paged {r['shape']}: K+V read at {r['kv_gbps']:.1f} GB/s, {r['pct_copy']:.0f}% of the copy rate")
    if data.get("flash_32k_rss"):
        x = data["flash_32k_rss"]
        lines.append(f"- attention_flash at S=32768, D=64, f32, causal: peak RSS {x['rss_peak_mb']:.0f} MB, "
                     f"{x['extra_mb']:.0f} MB beyond inputs + output")
    lines.append("")
    rows = [[r["kernel"], r["dtype"], r["shape"], f"{r['ms']:.2f}", f"{r['gflops']:.1f}",
             r.get("peer", "—"), "—" if r.get("peer_ms") is None else f"{r['peer_ms']:.2f}",
             "—" if r.get("ratio") is None else f"{r['ratio']:.2f}×",
             "—" if r.get("pct_gemm") is None else f"{r['pct_gemm']:.0f}%"] for r in data["rows"]]
    lines.append(_table(["kernel", "dtype", "shape", "ms", "GFLOP/s", "peer", "peer ms", "ratio", "% GEMM"], rows))
    return "\n".join(lines) + "\n"


def levels_section(root: Path) -> list[str]:
    """One block per CPU model measured with `fuel-cy bench --cpu-capability all` (its own file,
    so one machine's numbers never replace another's)."""
    from ..bench_levels import RESULTS_DIR, level_targets

    files = sorted((root / RESULTS_DIR).glob("*.json"))
    if not files:
        return []
    lines = ["## CPU levels", "",
             "The same build at each CPU level it contains, against PyTorch forced to the same instruction set "
             "(`fuel-cy bench --cpu-capability all`; ours and torch in one child process per level, interleaved, "
             "medians). `ratio` is torch time / our time.", ""]
    for path in files:
        data = json.loads(path.read_text())
        m = data.get("machine", {})
        lines += [f"### {m.get('cpu', path.stem)}", "",
                  f"Measured on {data.get('date', '?')} — {m.get('cpu', '?')}, {m.get('cores', '?')} cores, "
                  f"{m.get('threads', '?')} threads, torch {data.get('torch', '?')}.", ""]
        rows = []
        for lv in data["levels"]:
            for r in lv["rows"]:
                rows.append([f"`{lv['level']}`", r["kernel"], r["shape"], f"{r['ms']:.2f}",
                             f"{r['peer_ms']:.2f}", f"{r['ratio']:.2f}×"])
        lines += [_table(["level", "kernel", "shape", "ms", "torch ms", "ratio"], rows), ""]
        envs = {lv["level"]: " ".join(f"{k}={v}" for k, v in lv.get("torch_env", {}).items()) for lv in data["levels"]}
        lines += ["Torch ran with " + "; ".join(f"`{k}`: `{v}`" for k, v in envs.items() if v) + ".", ""]
        lines += [_table(["target", "measured", "met"],
                         [[t["target"], t["measured"], {True: "yes", False: "**no**", None: "—"}[t["met"]]]
                          for t in level_targets(data)]), ""]
        flags = {lv["level"]: " ".join(lv.get("compile_args", [])) for lv in data["levels"]}
        lines += ["Flags per level: " + "; ".join(f"`{k}`: `{v}`" for k, v in flags.items()), ""]
    return lines


def precision_page(root: Path) -> str:
    from ..tolerance import __doc__ as bounds_doc

    data = _load(root, "precision.json")
    lines = ["---", "title: Precision", "hide:", "  - toc", "---", "# Precision", "",
             "Every kernel is checked against an independent float64 reference. The documented bounds:", "",
             "```text", (bounds_doc or "").strip(), "```", ""]
    if data:
        lines += [_stamp(data), "",
                  _table(["kernel", "dtype", "shape", "max rel. error", "bound", "within"],
                         [[r["kernel"], r["dtype"], r["shape"], f"{r['error']:.2e}", f"{r['bound']:.1e}",
                           "yes" if r["ok"] else "**no**"] for r in data["rows"]])]
    else:
        lines.append("No audit file yet: `fuel-cy demo --json benchmarks/results/precision.json` writes one.")
    return "\n".join(lines) + "\n"


def render_results_pages(root: Path) -> dict[str, Any]:
    pages: dict[str, Any] = {"performance.md": performance_page(root), "precision.md": precision_page(root)}
    png = root / RESULTS / "bench.png"
    if png.exists():
        pages["bench.png"] = png.read_bytes()
    return pages
