"""Benchmarks per CPU level: ours forced to a level against PyTorch forced to the same one.

Both libraries pick their instruction set once per process (FUEL_CY_CPU_CAPABILITY for ours;
ATEN_CPU_CAPABILITY, MKL_ENABLE_INSTRUCTIONS and MKL_CBWR for torch), so each level runs in a child
process with both set alike; inside it, ours and torch are interleaved as in `bench`.
`fuel-cy bench --cpu-capability all` measures the target shapes at every level this CPU runs and
judges the targets; `--cpu-capability LEVEL` runs the ordinary benchmark at one level.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

from ..runtime.cpu_levels import ENV_CAPABILITY
from .tables import format_table

# our level -> torch's environment for the same instruction set.  MKL_ENABLE_INSTRUCTIONS alone is
# not enough: on AMD CPUs MKL ignores it (torch.mm on one Zen 4 core ran 94 GFLOP/s under SSE4_2,
# above the ~57 GFLOP/s that SSE mul + add can reach there), so MKL_CBWR pins MKL's code path as
# well; COMPATIBLE is its SSE2 path (39 GFLOP/s on that core), the closest to SSE4.2 it offers.
TORCH_LEVELS: dict[str, dict[str, str]] = {
    "default": {"ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2", "MKL_CBWR": "COMPATIBLE"},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "MKL_CBWR": "AVX2"},
    "avx512": {"ATEN_CPU_CAPABILITY": "avx512", "MKL_ENABLE_INSTRUCTIONS": "AVX512", "MKL_CBWR": "AVX512"},
    "avx512_bf16": {"ATEN_CPU_CAPABILITY": "avx512", "MKL_ENABLE_INSTRUCTIONS": "AVX512", "MKL_CBWR": "AVX512"},
}
RESULTS_DIR = Path("benchmarks") / "results" / "levels"


def level_env(level: str) -> dict[str, str]:
    """Environment that runs ours and torch at `level` (torch at its best for `native`)."""
    return {ENV_CAPABILITY: level, **TORCH_LEVELS.get(level, {})}


def rerun_at_level(level: str, argv: list[str]) -> int:
    """Run `fuel-cy <argv>` in a child process at `level` (ours and torch); its exit code."""
    from ..runtime import cpu

    cpu.choose(level)  # a clear error here rather than in the child
    env = {**os.environ, **level_env(level)}
    return subprocess.run([sys.executable, "-m", "fuel_cy", *argv], env=env).returncode


def measure_this_level(progress: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """The target shapes at the level this process runs, ours vs torch SDPA (f32, all threads)."""
    import fuel_cy

    from ..runtime import cpu
    from .bench import _torch, contiguous_kv, interleaved

    torch = _torch()
    if torch is None:
        raise ImportError("the per-level benchmark compares against PyTorch: pip install 'fuel_cy[bench]'")
    torch.set_num_threads(fuel_cy.get_num_threads())
    sdpa = torch.nn.functional.scaled_dot_product_attention
    rng = np.random.default_rng(0)
    rows: list[dict[str, Any]] = []

    def add(kernel: str, shape: str, flops: float, ours: Callable[[], Any], peer: Callable[[], Any], reps: int) -> None:
        progress(f"{cpu.capability()}: {kernel} {shape}")
        t_ours, t_peer = interleaved([ours, peer], reps=reps)
        rows.append({"kernel": kernel, "shape": shape, "ms": t_ours * 1e3, "peer_ms": t_peer * 1e3,
                     "ratio": t_peer / t_ours, "gflops": flops / t_ours / 1e9})

    b, h, s, d = 1, 8, 1024, 64
    for causal in (False, True):
        shape = f"B={b} H={h} S={s} D={d}" + (" causal" if causal else "")
        q, k, v, do = (rng.standard_normal((b, h, s, d), dtype=np.float32) for _ in range(4))
        tq, tk, tv = map(torch.from_numpy, (q, k, v))
        frac = 0.5 if causal else 1.0
        add("attention_flash", shape, 4 * b * h * s * s * d * frac,
            lambda: fuel_cy.attention_flash(q, k, v, causal=causal), lambda: sdpa(tq, tk, tv, is_causal=causal), 7)
        gq, gk, gv = (torch.from_numpy(x).requires_grad_() for x in (q, k, v))
        out = sdpa(gq, gk, gv, is_causal=causal)
        tdo = torch.from_numpy(do)
        add("attention_flash_backward", shape, 10 * b * h * s * s * d * frac,
            lambda: fuel_cy.attention_flash_backward(q, k, v, do, causal=causal),
            lambda: torch.autograd.grad(out, (gq, gk, gv), tdo, retain_graph=True), 5)
    bb, hq, hkv, dd, bs, ctx = 16, 32, 8, 128, 16, 1024
    nblk = bb * ctx // bs
    kc, vc = (rng.standard_normal((nblk, bs, hkv, dd), dtype=np.float32) for _ in range(2))
    table = rng.permutation(nblk).reshape(bb, ctx // bs).astype(np.uint32)
    lens = np.full(bb, ctx, np.uint32)
    q = rng.standard_normal((bb, hq, 1, dd), dtype=np.float32)
    tk, tv = (contiguous_kv(torch, x, table) for x in (kc, vc))
    tq = torch.from_numpy(q)
    add("attention_paged_naive", f"decode B={bb} Hq={hq} Hkv={hkv} D={dd} ctx={ctx} block={bs}", 4 * bb * hq * ctx * dd,
        lambda: fuel_cy.attention_paged_naive(q, kc, vc, table, lens), lambda: sdpa(tq, tk, tv, enable_gqa=True), 7)
    info = fuel_cy.build_info()
    level = info["cpu_capability"]
    return {"level": level, "compile_args": info["levels"][level]["compile_args"],
            "torch_capability": torch.backends.cpu.get_cpu_capability(),
            "torch_env": {k: os.environ[k] for k in ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR")
                          if k in os.environ},
            "rows": rows}


def run_levels(levels: Optional[list[str]] = None, progress: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """Every level this CPU supports (or `levels`), each in a child process."""
    from ..runtime import cpu
    from .bench import machine_info

    results = []
    for level in levels or list(cpu.supported_levels()):
        progress(f"{level}: starting a process with ours and torch at {level}")
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "level.json"
            r = subprocess.run([sys.executable, "-m", "fuel_cy", "bench", "--_level-json", str(out)],
                               env={**os.environ, **level_env(level)}, capture_output=True, text=True)
            if r.returncode != 0:
                raise RuntimeError(f"the {level} benchmark failed:\n{r.stderr[-3000:]}")
            results.append(json.loads(out.read_text()))
    machine = machine_info()
    machine.pop("flags", None)  # each level carries its own
    return {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "machine": machine,
            "torch": _torch_version(), "levels": results}


def _torch_version() -> Optional[str]:
    try:
        import torch
    except ImportError:
        return None
    return str(torch.__version__)


def level_targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue #12's targets: each level at least as fast as torch at the same level."""
    from .targets import check

    by_level = {lv["level"]: lv["rows"] for lv in result["levels"]}

    def ratios(level: str, kernel: str) -> list[float]:
        return [r["ratio"] for r in by_level.get(level, []) if r["kernel"] == kernel]

    top = result["levels"][-1]["level"] if result["levels"] else "?"
    return [
        check("flash f32 at default >= 1.0x torch default", ratios("default", "attention_flash"), 1.0),
        check("flash f32 at avx2 >= 1.0x torch avx2", ratios("avx2", "attention_flash"), 1.0),
        check("backward f32 at avx2 >= 1.0x torch avx2", ratios("avx2", "attention_flash_backward"), 1.0),
        check("paged decode f32 at avx2 >= 1.0x torch avx2", ratios("avx2", "attention_paged_naive"), 1.0),
        check(f"flash f32 at {top} (the top level here) >= 1.0x torch", ratios(top, "attention_flash"), 1.0),
    ]


def table_rows(result: dict[str, Any]) -> list[list[str]]:
    rows = [["level", "torch", "kernel", "shape", "ms", "torch ms", "ratio", "GFLOP/s"]]
    for lv in result["levels"]:
        for r in lv["rows"]:
            rows.append([lv["level"], str(lv["torch_capability"]).lower(), r["kernel"], r["shape"], f"{r['ms']:.2f}",
                         f"{r['peer_ms']:.2f}", f"{r['ratio']:.2f}x", f"{r['gflops']:.1f}"])
    return rows


def main(json_out: Optional[str] = None, progress: Callable[[str], None] = lambda s: None) -> int:
    from .bench import print_targets
    result = run_levels(progress=progress)
    progress("")
    print(format_table(table_rows(result)))
    m = result["machine"]
    print(f"\n{m['cpu']}, {m['threads']} threads; torch {result['torch']}; ratio = torch ms / our ms, "
          f"both at the same instruction set")
    print()
    print_targets(level_targets(result))
    if json_out:
        Path(json_out).parent.mkdir(parents=True, exist_ok=True)
        Path(json_out).write_text(json.dumps(result, indent=2))
        print(f"wrote {json_out}")
    return 0
