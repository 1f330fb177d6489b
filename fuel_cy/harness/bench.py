"""Benchmarks: ours vs PyTorch SDPA and NumPy, run side by side in one process (`fuel-cy bench`),
and the cost-model judge (`fuel-cy calibrate`).

Timing here is noisy, so every comparison is interleaved (ours, peer, ours, peer, ...) after a
warm-up and reported as medians; ratios measured in the same run are what to read.  torch is an
optional peer (the `bench` extra): without it, our kernels are still measured.
"""
from __future__ import annotations

import json
import math
import os
import platform
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

from .tables import format_table

REPS = 5
# A group whose rounds are short takes more of them, up to MAX_REPS, so that its samples span at
# least MIN_SECONDS: on a shared host a slow stretch lasts about a second, and three rounds of a
# 15 ms call fell inside one (a backward read 25.9 ms in a run, 13.4-18 ms in every check after).
MIN_SECONDS = 1.0
MAX_REPS = 15


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


def machine_info() -> dict[str, Any]:
    """The CPU, threads and the CPU level (with its compiler flags) that ran the measurements."""
    import fuel_cy

    from ..runtime import cpu

    info = fuel_cy.build_info()
    level = info["cpu_capability"]
    _, vendor, family, model = cpu._probe()
    return {"cpu": cpu.cpu_name(), "cpu_id": f"{vendor} family {family} model {model}",
            "cores": os.cpu_count(), "threads": fuel_cy.get_num_threads(),
            "cpu_capability": level, "flags": info["levels"][level]["compile_args"],
            "features": sorted(cpu.cpu_features()), "python": platform.python_version()}


def interleaved(fns: list[Callable[[], Any]], reps: int = REPS, warmup: int = 1,
                stat: Callable[[list[float]], Any] = np.median,
                min_seconds: float = MIN_SECONDS) -> list[float]:
    """Median (or `stat`) seconds of each callable, calling them in turn so drift hits all alike:
    at least `reps` rounds, more (up to MAX_REPS) while they span less than `min_seconds`, as the
    warm-up round's time predicts."""
    t0 = time.perf_counter()
    for _ in range(warmup):
        for f in fns:
            f()
    round_s = (time.perf_counter() - t0) / warmup if warmup else 0.0
    if warmup and reps * round_s < min_seconds:   # (no warm-up: nothing predicts a round)
        reps = max(reps, min(MAX_REPS, math.ceil(min_seconds / round_s) if round_s > 0 else MAX_REPS))
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(reps):
        for i, f in enumerate(fns):
            t0 = time.perf_counter()
            f()
            times[i].append(time.perf_counter() - t0)
    return [float(stat(t)) for t in times]


def gemm_gflops(torch) -> Optional[float]:
    """The machine's f32 GEMM rate: best of 10 (a reference ceiling, so noise must not lower it)."""
    n = 2048
    if torch is not None:
        a = torch.randn(n, n)
        f = lambda: torch.mm(a, a)  # noqa: E731
    else:
        a = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
        f = lambda: a @ a  # noqa: E731
    f()
    best = min(_timed(f) for _ in range(10))
    return 2 * n ** 3 / best / 1e9


def peak_gflops() -> dict[str, float]:
    """The level's arithmetic peaks on the bench's threads (f32 and f64 multiply-adds, and the bf16
    dot product where the level has it): what the targets table measures a compute-bound miss
    against (targets.py)."""
    import fuel_cy

    from ..runtime import cpu

    n = fuel_cy.get_num_threads()
    peaks = {kind: cpu.peak_gflops(kind, n) for kind in cpu.PEAK_KINDS}
    return {kind: v for kind, v in peaks.items() if v is not None}


def _timed(f: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    f()
    return time.perf_counter() - t0


class CopyProbe:
    """A large copy (64 MiB by default, past any L3 here) to time in the same interleaved group as a
    memory-bound call, so that the call's share of the copy rate is a ratio measured side by side.
    A rate taken once at the start put the same paged decode mix at 41% in one run and 59% in the
    next on a shared host, whose memory bandwidth moves with its neighbours' load."""

    def __init__(self, mib: int = 64) -> None:
        self.src = np.ones(mib * 1024 * 1024 // 4, np.float32)
        self.dst = np.empty_like(self.src)
        self.rbuf = np.ones_like(self.src)   # (its own: the copy's lines are the last in the L3)

    def __call__(self) -> None:
        np.copyto(self.dst, self.src)

    def gbps(self, seconds: float) -> float:
        """The copy rate (bytes read + written per second, as copy_gbps) of one timed call."""
        return 2 * self.src.nbytes / seconds / 1e9

    def read(self) -> None:
        """A read alone on the kernels' threads (runtime.cpu.read_pass): numpy's copy runs on one
        thread and writes too, so a kernel that only reads, on every thread, can pass its rate."""
        from ..runtime import cpu

        cpu.read_pass(self.rbuf)

    def read_gbps(self, seconds: float) -> float:
        """The read rate (bytes read per second) of one timed read()."""
        return self.rbuf.nbytes / seconds / 1e9


def copy_gbps() -> float:
    """The run's large-copy rate (256 MiB), for the header: the rows use a CopyProbe beside them."""
    probe = CopyProbe(256)
    (t,) = interleaved([probe], reps=5)
    return probe.gbps(t)


def _read_share(kv_bytes: int, t_ours: float, t_copy: float, probe: CopyProbe, t_read: float) -> dict[str, float]:
    """A memory-bound row's read rate and its shares of the copy rate and of the read rate timed
    beside it."""
    kv, rate, read = kv_bytes / t_ours / 1e9, probe.gbps(t_copy), probe.read_gbps(t_read)
    return {"kv_gbps": kv, "pct_copy": 100 * kv / rate, "copy_gbps": rate, "pct_read": 100 * kv / read, "read_gbps": read}


def contiguous_kv(torch, pool: np.ndarray, table: np.ndarray):
    """The [B, Hkv, ctx, D] K or V that a block table reads from a pool [blocks, block, Hkv, D],
    gathered once into a contiguous tensor (the peer's layout for paged decode)."""
    gathered = torch.from_numpy(pool)[torch.from_numpy(table.astype(np.int64))]  # [B, nb, block, Hkv, D]
    b, nb, bs, hkv, d = gathered.shape
    return gathered.permute(0, 3, 1, 2, 4).reshape(b, hkv, nb * bs, d).contiguous()


def _row(kernel, dtype, shape, ms, flops, peer=None, peer_ms=None, gemm=None, **extra) -> dict[str, Any]:
    gflops = flops / (ms / 1e3) / 1e9
    row = {"kernel": kernel, "dtype": dtype, "shape": shape, "ms": ms, "gflops": gflops, "peer": peer,
           "peer_ms": peer_ms, "ratio": (peer_ms / ms) if peer_ms else None,
           "pct_gemm": (100 * gflops / gemm) if gemm and dtype == "F32" else None}
    row.update(extra)
    return row


FULL_GRID = [(s, d, c) for s in (512, 2048, 4096) for d in (64, 128) for c in (False, True)]
QUICK_GRID = [(512, 64, False), (512, 64, True), (1024, 128, False)]


def run_bench(quick: bool = False, progress: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    import fuel_cy

    torch = _torch()
    if torch is not None:
        torch.set_num_threads(fuel_cy.get_num_threads())
    rng = np.random.default_rng(0)
    # the peaks first, before torch's threads exist to spin beside them (one run on AMD EPYC
    # measured the f32 peak at exactly half, right after torch's GEMM), and again at the end:
    # a ceiling takes the higher of the two, so one slow stretch cannot lower it
    progress("measuring the arithmetic peaks")
    peaks = peak_gflops()
    progress("measuring the f32 GEMM rate")
    gemm = gemm_gflops(torch)
    rows: list[dict[str, Any]] = []
    grid = QUICK_GRID if quick else FULL_GRID
    b, h = 1, 8
    for s, d, causal in grid:
        shape = f"B={b} H={h} S={s} D={d}" + (" causal" if causal else "")
        flops = 4 * b * h * s * s * d * (0.5 if causal else 1.0)
        q, k, v = (rng.standard_normal((b, h, s, d), dtype=np.float32) for _ in range(3))
        progress(f"forward f32 {shape}")
        ours = lambda: fuel_cy.attention_flash(q, k, v, causal=causal)  # noqa: E731
        if torch is not None:
            tq, tk, tv = map(torch.from_numpy, (q, k, v))
            peer = lambda: torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)  # noqa: E731
            t_ours, t_peer = interleaved([ours, peer])
            rows.append(_row("attention_flash", "F32", shape, t_ours * 1e3, flops, "torch SDPA", t_peer * 1e3, gemm))
        else:
            (t_ours,) = interleaved([ours])
            rows.append(_row("attention_flash", "F32", shape, t_ours * 1e3, flops, gemm=gemm))
        if s <= 2048:
            progress(f"naive f32 {shape}")
            naive = [lambda: fuel_cy.attention_naive(q, k, v, causal=causal), ours]
            if torch is not None:   # the peer that also materializes the scores: torch's math SDPA
                naive.append(lambda: _sdpa_math(torch, tq, tk, tv, causal))
            t_naive, t_flash, *t_math = interleaved(naive, reps=3)
            rows.append(_row("attention_naive", "F32", shape, t_naive * 1e3, flops, "fuel_cy flash f32", t_flash * 1e3, gemm))
            if t_math:
                rows.append(_row("attention_naive", "F32", shape, t_naive * 1e3, flops, "torch SDPA math",
                                 t_math[0] * 1e3))
        q64, k64, v64 = (x.astype(np.float64) for x in (q, k, v))
        progress(f"forward f64 {shape}")
        ours64 = lambda: fuel_cy.attention_flash(q64, k64, v64, causal=causal)  # noqa: E731
        if torch is not None:
            t64 = [torch.from_numpy(x) for x in (q64, k64, v64)]
            peer64 = lambda: torch.nn.functional.scaled_dot_product_attention(*t64, is_causal=causal)  # noqa: E731
            t_ours, t_peer = interleaved([ours64, peer64], reps=3 if quick else REPS)
            rows.append(_row("attention_flash", "F64", shape, t_ours * 1e3, flops, "torch SDPA f64", t_peer * 1e3))
        if s == (1024 if quick else 2048) and not causal:
            rows += _half_rows("attention_flash", shape, flops, progress, [q, k, v], fuel_cy.attention_flash)
    rows += _backward_rows(torch, rng, quick, progress)
    probe = CopyProbe()   # timed beside each memory-bound call: its share of the copy rate
    paged_rows, copy_rate = _paged_rows(torch, rng, quick, progress, probe)
    rows += paged_rows
    rows += _mixed_rows(torch, rng, quick, progress, probe)
    rows += _varlen_rows(torch, rng, quick, progress)
    rows += _varlen_paged_rows(torch, rng, quick, progress, probe)
    rows += _sdpa_rows(torch, rng, quick, progress)
    rows += _numpy_rows(rng, progress)
    rows += _threads_rows(rng, quick, progress)
    rows += _per_call_rows(torch, rng, progress)
    progress("measuring the arithmetic peaks again")
    again = peak_gflops()
    peaks = {kind: max(v, again.get(kind, v)) for kind, v in peaks.items()}
    result = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "machine": machine_info(),
              "gemm_gflops": gemm, "peak_gflops": peaks, "copy_gbps": copy_rate, "quick": quick, "torch": getattr(torch, "__version__", None),
              "rows": rows}
    progress("import time (subprocesses)")
    result["import_ms"] = import_ms()
    if not quick:
        progress("peak RSS of attention_flash at S=32768 (subprocess)")
        result["flash_32k_rss"] = flash_32k_rss()
    return result


def _sdpa_math(torch, q, k, v, causal):
    """torch SDPA on its math backend: the scores materialized, as attention_naive computes them."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.MATH):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)


def _backward_rows(torch, rng, quick, progress):
    import fuel_cy

    rows = []
    points = [(512, 64, False, 8), (512, 64, True, 2)] if quick else [
        (s, d, c, hkv) for s in (512, 2048) for d in (64, 128) for c in (False, True) for hkv in (8, 2)]
    for s, d, causal, hkv in points:
        shape = f"B=1 Hq=8 Hkv={hkv} S={s} D={d}" + (" causal" if causal else "")
        flops = 10 * 8 * s * s * d * (0.5 if causal else 1.0)  # recompute QK + dV, dP, dQ, dK
        q, do = (rng.standard_normal((1, 8, s, d), dtype=np.float32) for _ in range(2))
        k, v = (rng.standard_normal((1, hkv, s, d), dtype=np.float32) for _ in range(2))
        progress(f"backward f32 {shape}")
        ours = lambda: fuel_cy.attention_flash_backward(q, k, v, do, causal=causal)  # noqa: E731
        if torch is None:
            (t,) = interleaved([ours], reps=3)
            rows.append(_row("attention_flash_backward", "F32", shape, t * 1e3, flops))
            continue
        tq, tk, tv = (torch.from_numpy(x).requires_grad_() for x in (q, k, v))
        tdo = torch.from_numpy(do)
        out = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=causal, enable_gqa=hkv != 8)

        def peer():
            torch.autograd.grad(out, (tq, tk, tv), tdo, retain_graph=True)

        # the varlen backward given the forward's out and lse, as torch's backward is given its
        # own (FlashAttention-2's order: key tiles outer), on the same values as one sequence
        cu = np.array([0, s], np.uint32)
        q3, k3, v3, do3 = (np.ascontiguousarray(x[0].transpose(1, 0, 2)) for x in (q, k, v, do))
        o3, lse3 = fuel_cy.attention_varlen(q3, k3, v3, cu, cu, causal=causal, return_lse=True)
        saved = lambda: fuel_cy.attention_varlen_backward(q3, k3, v3, do3, cu, cu, out=o3, lse=lse3,  # noqa: E731
                                                          causal=causal)
        t_ours, t_saved, t_peer = interleaved([ours, saved, peer], reps=3 if quick else REPS)
        rows.append(_row("attention_flash_backward", "F32", shape, t_ours * 1e3, flops, "torch SDPA autograd bwd", t_peer * 1e3))
        rows.append(_row("attention_varlen_backward", "F32", shape, t_saved * 1e3, flops, "torch SDPA autograd bwd",
                         t_peer * 1e3, mode="out+lse"))
        rows.append(_row("attention_varlen_backward", "F32", shape, t_saved * 1e3, flops,
                         "fuel_cy attention_flash_backward", t_ours * 1e3, mode="out+lse"))
    rows += _half_rows("attention_flash_backward", "B=1 Hq=8 Hkv=8 S=512 D=64", 10 * 8 * 512 * 512 * 64, progress,
                       [rng.standard_normal((1, 8, 512, 64), dtype=np.float32) for _ in range(4)],
                       lambda q, k, v, do: fuel_cy.attention_flash_backward(q, k, v, do))
    return rows


def _half_rows(kernel, shape, flops, progress, arrays, call) -> list[dict[str, Any]]:
    """bf16 and f16 ("math in T") against our own f32 on the same kernel and shape."""
    import ml_dtypes

    rows = []
    for name, dt in (("BF16", ml_dtypes.bfloat16), ("F16", np.float16)):
        progress(f"{kernel} {name} {shape}")
        half = [x.astype(dt) if x.dtype == np.float32 else x for x in arrays]
        t_half, t_f32 = interleaved([lambda: call(*half), lambda: call(*arrays)], reps=3)
        rows.append(_row(kernel, name, shape, t_half * 1e3, flops, f"fuel_cy {kernel} f32", t_f32 * 1e3))
    return rows


def _paged_rows(torch, rng, quick, progress, probe):
    import fuel_cy

    rows = []
    progress("large-copy bandwidth")
    copy_rate = copy_gbps()
    b, hq, hkv, d, bs = 16, 32, 8, 128, 16
    for ctx in ((1024,) if quick else (1024, 2048, 8192)):
        nblk = b * ctx // bs
        kc = rng.standard_normal((nblk, bs, hkv, d), dtype=np.float32)
        vc = rng.standard_normal((nblk, bs, hkv, d), dtype=np.float32)
        table = rng.permutation(nblk).reshape(b, ctx // bs).astype(np.uint32)
        lens = np.full(b, ctx, np.uint32)
        q = rng.standard_normal((b, hq, 1, d), dtype=np.float32)
        shape = f"decode B={b} Hq={hq} Hkv={hkv} D={d} ctx={ctx} block={bs}"
        flops = 4 * b * hq * ctx * d
        kv_bytes = 2 * kc.nbytes
        progress(f"paged {shape}")
        ours = lambda: fuel_cy.attention_paged_naive(q, kc, vc, table, lens)  # noqa: E731
        if torch is not None:
            tk, tv = contiguous_kv(torch, kc, table), contiguous_kv(torch, vc, table)
            tq = torch.from_numpy(q)
            kct, vct, tt = torch.from_numpy(kc), torch.from_numpy(vc), torch.from_numpy(table.astype(np.int64))

            def gather_sdpa():
                k_ = kct[tt].permute(0, 3, 1, 2, 4).reshape(b, hkv, ctx, d)
                v_ = vct[tt].permute(0, 3, 1, 2, 4).reshape(b, hkv, ctx, d)
                return torch.nn.functional.scaled_dot_product_attention(tq, k_, v_, enable_gqa=True)

            t_ours, t_sdpa, t_gather, t_copy, t_read = interleaved(
                [ours, lambda: torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, enable_gqa=True), gather_sdpa,
                 probe, probe.read], reps=5)
            rows.append(_row("attention_paged_naive", "F32", shape, t_ours * 1e3, flops, "torch SDPA (contiguous K/V)",
                             t_sdpa * 1e3, **_read_share(kv_bytes, t_ours, t_copy, probe, t_read)))
            rows.append(_row("attention_paged_naive", "F32", shape, t_ours * 1e3, flops, "torch gather + SDPA", t_gather * 1e3))
        else:
            t_ours, t_copy, t_read = interleaved([ours, probe, probe.read])
            rows.append(_row("attention_paged_naive", "F32", shape, t_ours * 1e3, flops,
                             **_read_share(kv_bytes, t_ours, t_copy, probe, t_read)))
        if ctx == 1024:
            rows += _half_rows("attention_paged_naive", shape, flops, progress, [q, kc, vc, table, lens],
                               fuel_cy.attention_paged_naive)
    return rows, copy_rate


def _mixed_rows(torch, rng, quick, progress, probe):
    """fuel_cy's mixed-precision kernels against torch SDPA in the same dtype (bf16, f16)."""
    import ml_dtypes

    import fuel_cy

    if torch is None:
        return []
    sdpa = torch.nn.functional.scaled_dot_product_attention
    rows = []
    types = (("BF16", ml_dtypes.bfloat16, torch.bfloat16), ("F16", np.float16, torch.float16))
    grid = [(1024, 64, c) for c in (False, True)] if quick else [(s, d, c) for s in (1024, 4096) for d in (64, 128)
                                                                   for c in (False, True)]
    for s, d, causal in grid:
        shape = f"B=1 H=8 S={s} D={d}" + (" causal" if causal else "")
        flops = 4 * 8 * s * s * d * (0.5 if causal else 1.0)
        base = [rng.standard_normal((1, 8, s, d), dtype=np.float32) for _ in range(3)]
        for code, npdt, tdt in types:
            q, k, v = (x.astype(npdt) for x in base)
            tq, tk, tv = (torch.from_numpy(x).to(tdt) for x in base)
            progress(f"mixed flash {code} {shape}")
            # both P V modes, torch in the dtype and our own float32 flash, side by side
            t_ours, t_fast, t_peer, t_f32 = interleaved(
                [lambda: fuel_cy.attention_flash_mixed(q, k, v, causal=causal),
                 lambda: fuel_cy.attention_flash_mixed(q, k, v, causal=causal, round_p=True),
                 lambda: sdpa(tq, tk, tv, is_causal=causal),
                 lambda: fuel_cy.attention_flash(*base, causal=causal)], reps=3 if quick else REPS)
            rows.append(_row("attention_flash_mixed", code, shape, t_ours * 1e3, flops, f"torch SDPA {code.lower()}",
                             t_peer * 1e3))
            rows.append(_row("attention_flash_mixed", code, shape, t_fast * 1e3, flops, f"torch SDPA {code.lower()}",
                             t_peer * 1e3, mode="P in T"))
            rows.append(_row("attention_flash_mixed", code, shape, t_fast * 1e3, flops, "fuel_cy attention_flash f32",
                             t_f32 * 1e3, mode="P in T"))
    for s, d in ([(512, 64)] if quick else [(1024, 64), (2048, 128)]):   # two shapes for the kernel's page
        shape = f"B=1 H=8 S={s} D={d}"
        base = [rng.standard_normal((1, 8, s, d), dtype=np.float32) for _ in range(4)]
        for code, npdt, tdt in types:
            q, k, v, do = (x.astype(npdt) for x in base)
            tq, tk, tv = (torch.from_numpy(x).to(tdt).requires_grad_() for x in base[:3])
            tdo = torch.from_numpy(base[3]).to(tdt)
            out = sdpa(tq, tk, tv)
            progress(f"mixed backward {code} {shape}")
            # and the model-facing backward given the forward's out and lse in both modes, as
            # fuel_cy.torch's SDPA hands them over (torch's autograd is given its own)
            saved = {rp: fuel_cy.attention_masked(q, k, v, return_lse=True, round_p=rp) for rp in (False, True)}
            t_ours, t_fast, t_peer, t_saved, t_saved_fast = interleaved(
                [lambda: fuel_cy.attention_flash_backward_mixed(q, k, v, do),
                 lambda: fuel_cy.attention_flash_backward_mixed(q, k, v, do, round_p=True),
                 lambda: torch.autograd.grad(out, (tq, tk, tv), tdo, retain_graph=True),
                 lambda: fuel_cy.attention_masked_backward(q, k, v, do, out=saved[False][0], lse=saved[False][1],
                                                           round_p=False),
                 lambda: fuel_cy.attention_masked_backward(q, k, v, do, out=saved[True][0], lse=saved[True][1])],
                reps=3 if quick else REPS)
            peer = f"torch SDPA autograd bwd {code.lower()}"
            rows.append(_row("attention_flash_backward_mixed", code, shape, t_ours * 1e3, 10 * 8 * s * s * d,
                             peer, t_peer * 1e3))
            rows.append(_row("attention_flash_backward_mixed", code, shape, t_fast * 1e3, 10 * 8 * s * s * d,
                             peer, t_peer * 1e3, mode="P in T"))
            rows.append(_row("attention_masked_backward", code, shape, t_saved * 1e3, 10 * 8 * s * s * d,
                             peer, t_peer * 1e3, mode="out+lse"))
            rows.append(_row("attention_masked_backward", code, shape, t_saved_fast * 1e3, 10 * 8 * s * s * d,
                             peer, t_peer * 1e3, mode="P in T, out+lse"))
    b, hq, hkv, d, bs = 16, 32, 8, 128, 16
    for ctx in ((1024,) if quick else (2048, 8192)):
        nblk = b * ctx // bs
        pool = [rng.standard_normal((nblk, bs, hkv, d), dtype=np.float32) for _ in range(2)]
        table = rng.permutation(nblk).reshape(b, ctx // bs).astype(np.uint32)
        lens = np.full(b, ctx, np.uint32)
        q32 = rng.standard_normal((b, hq, 1, d), dtype=np.float32)
        shape = f"decode B={b} Hq={hq} Hkv={hkv} D={d} ctx={ctx} block={bs}"
        for code, npdt, tdt in types:
            kc, vc = (x.astype(npdt) for x in pool)
            q = q32.astype(npdt)
            tk, tv = (contiguous_kv(torch, x, table).to(tdt) for x in pool)
            tq = torch.from_numpy(q32).to(tdt)
            progress(f"mixed paged {code} {shape}")
            t_ours, t_peer, t_copy, t_read = interleaved([lambda: fuel_cy.attention_paged_mixed(q, kc, vc, table, lens),
                                                          lambda: sdpa(tq, tk, tv, enable_gqa=True), probe, probe.read],
                                                         reps=5)
            kv_bytes = 2 * kc.nbytes
            rows.append(_row("attention_paged_mixed", code, shape, t_ours * 1e3, 4 * b * hq * ctx * d,
                             f"torch SDPA {code.lower()} (contiguous K/V)", t_peer * 1e3,
                             **_read_share(kv_bytes, t_ours, t_copy, probe, t_read)))
            del kc, vc, tk, tv
    return rows


VARLEN_LENGTHS = (64, 128, 256, 512, 768, 1024, 1536, 2048)   # 8 causal sequences, as issue #34 names them


def _varlen_rows(torch, rng, quick, progress):
    """attention_varlen on packed causal sequences against torch SDPA called per sequence and on the
    padded batch with a boolean mask (causal within each sequence, padding masked), f32 and bf16."""
    import fuel_cy

    if torch is None:
        return []
    lens = VARLEN_LENGTHS[:4] if quick else VARLEN_LENGTHS
    h, d = 8, 64
    cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.uint32)
    flops = sum(2 * h * n * (n + 1) * d for n in lens)   # the causal pairs only
    shape = f"{len(lens)} causal sequences of {lens[0]}-{lens[-1]} tokens, H={h} D={d}"
    rows = []
    for code, tdt in (("F32", torch.float32), ("BF16", torch.bfloat16)):
        progress(f"varlen {code} {shape}")
        x = [torch.randn(int(cu[-1]), h, d, generator=torch.Generator().manual_seed(i)).to(tdt) for i in range(3)]
        arrays = [fuel_cy_numpy(t) for t in x]
        seqs = [[t[cu[b]:cu[b + 1]].transpose(0, 1).unsqueeze(0).contiguous() for t in x] for b in range(len(lens))]
        n = max(lens)
        padded = [torch.zeros(len(lens), h, n, d, dtype=tdt) for _ in range(3)]
        mask = torch.zeros(len(lens), 1, n, n, dtype=torch.bool)
        for b, m in enumerate(lens):
            for p, s in zip(padded, seqs[b]):
                p[b, :, :m] = s[0]
            mask[b, 0, :m, :m] = torch.tril(torch.ones(m, m, dtype=torch.bool))
            mask[b, 0, m:, 0] = True   # padded query rows attend one key: no NaN rows to compare
        sdpa = torch.nn.functional.scaled_dot_product_attention

        def ours():
            fuel_cy.attention_varlen(*arrays, cu, cu, causal=True)

        def per_sequence():
            with torch.no_grad():
                for s in seqs:
                    sdpa(*s, is_causal=True)

        def padded_batch():
            with torch.no_grad():
                sdpa(*padded, attn_mask=mask)

        t_ours, t_seq, t_pad = interleaved([ours, per_sequence, padded_batch], reps=3 if quick else REPS)
        rows.append(_row("attention_varlen", code, shape, t_ours * 1e3, flops, "torch SDPA per sequence", t_seq * 1e3))
        rows.append(_row("attention_varlen", code, shape, t_ours * 1e3, flops, "torch SDPA padded + mask", t_pad * 1e3))
        # the backward against torch's autograd backward of SDPA called per sequence (the forward
        # outside the timing on both sides: torch's saved for its backward, ours recomputed inside)
        progress(f"varlen backward {code} {shape}")
        do = torch.randn(int(cu[-1]), h, d, generator=torch.Generator().manual_seed(9)).to(tdt)
        do_a = fuel_cy_numpy(do)
        graphs = []
        for b in range(len(lens)):
            leaves = [s.clone().requires_grad_() for s in seqs[b]]
            out = sdpa(*leaves, is_causal=True)
            graphs.append((out, leaves, do[cu[b]:cu[b + 1]].transpose(0, 1).unsqueeze(0).contiguous()))

        def ours_bwd():
            fuel_cy.attention_varlen_backward(*arrays, do_a, cu, cu, causal=True)

        def peer_bwd():
            for out, leaves, g in graphs:
                torch.autograd.grad(out, leaves, g, retain_graph=True)

        t_ours, t_peer = interleaved([ours_bwd, peer_bwd], reps=3 if quick else REPS)
        rows.append(_row("attention_varlen_backward", code, shape, t_ours * 1e3, 2.5 * flops,
                         "torch SDPA autograd bwd per sequence", t_peer * 1e3))
    return rows


def _varlen_paged_rows(torch, rng, quick, progress, probe):
    """attention_varlen over a paged pool (block_table), a decode-heavy mix: 16 sequences of 512-4096
    keys, 14 of them decode steps (one query) and two chunks of 8 and 4 queries; the K and V it
    reads against the large-copy rate timed beside it (probe), and torch SDPA per sequence on
    contiguous K/V."""
    import ml_dtypes

    import fuel_cy

    if torch is None:
        return []
    b, hq, hkv, d, bs = 16, 8, 2, 128, 16
    lens_k = rng.integers(512, (1025 if quick else 4097), b)
    lens_q = np.ones(b, np.int64)
    lens_q[:2] = (8, 4)
    cu_q = np.concatenate([[0], np.cumsum(lens_q)]).astype(np.uint32)
    cu_k = np.concatenate([[0], np.cumsum(lens_k)]).astype(np.uint32)
    per = [-(-int(n) // bs) for n in lens_k]
    nblk = sum(per)
    order = rng.permutation(nblk).astype(np.uint32)
    table = np.zeros((b, max(per)), np.uint32)
    start = 0
    for s, n in enumerate(per):
        table[s, :n] = order[start:start + n]
        start += n
    pool32 = [rng.standard_normal((nblk, bs, hkv, d), dtype=np.float32) for _ in range(2)]
    q32 = rng.standard_normal((int(cu_q[-1]), hq, d), dtype=np.float32)
    flops = sum(4 * hq * int(a) * int(c) * d for a, c in zip(lens_q, lens_k))
    shape = f"paged decode mix: B={b} (14 steps, chunks of 8 and 4) keys 512-{int(lens_k.max())} Hq={hq} Hkv={hkv} D={d} block={bs}"
    rows = []
    for code, npdt, tdt in (("F32", np.float32, torch.float32), ("BF16", ml_dtypes.bfloat16, torch.bfloat16)):
        kp, vp = (x.astype(npdt) for x in pool32)
        q = q32.astype(npdt)
        # the peer: each sequence's keys gathered once, outside the timing, [1, Hkv, lk, D]
        seq_kv = []
        for s in range(b):
            rows_of = (table[s, np.arange(int(lens_k[s])) // bs].astype(np.int64) * bs + np.arange(int(lens_k[s])) % bs)
            kk, vv = (torch.from_numpy(x.reshape(-1, hkv, d)[rows_of].transpose(1, 0, 2)[None].copy()).to(tdt)
                      for x in pool32)
            qq = torch.from_numpy(q32[cu_q[s]:cu_q[s + 1]].transpose(1, 0, 2)[None].copy()).to(tdt)
            seq_kv.append((qq, kk, vv))
        sdpa = torch.nn.functional.scaled_dot_product_attention
        progress(f"varlen paged {code} {shape}")

        def per_sequence():
            with torch.no_grad():
                for qq, kk, vv in seq_kv:
                    sdpa(qq, kk, vv, enable_gqa=True, is_causal=False)

        t_ours, t_peer, t_copy, t_read = interleaved(
            [lambda: fuel_cy.attention_varlen(q, kp, vp, cu_q, cu_k, block_table=table, causal=True),
             per_sequence, probe, probe.read], reps=5)
        kv_bytes = 2 * int(lens_k.sum()) * hkv * d * np.dtype(npdt).itemsize
        rows.append(_row("attention_varlen", code, shape, t_ours * 1e3, flops,
                         f"torch SDPA per sequence {code.lower()} (contiguous K/V)", t_peer * 1e3,
                         **_read_share(kv_bytes, t_ours, t_copy, probe, t_read)))
    return rows


def _sdpa_rows(torch, rng, quick, progress):
    """fuel_cy.scaled_dot_product_attention with a key-padding mask against torch SDPA with the same
    mask (B = 4, H = 8, L = S = 1024; each sequence keeps a different prefix of its keys), f32
    and bf16, and without a mask against attention_flash(_mixed) (the entry's own cost); the
    masked backward against torch's autograd backward, f32 also given the forward's out and lse."""
    import fuel_cy

    if torch is None:
        return []
    b, h, n = 4, 8, 1024
    keep_lens = [1024, 900, 640, 333]
    flops = 4 * b * h * n * n   # times D below: every pair, as torch computes it
    rows = []
    sdpa = torch.nn.functional.scaled_dot_product_attention
    for d in ((64,) if quick else (64, 128)):
        shape = f"B={b} H={h} L=S={n} D={d}, key padding (keeps {'/'.join(map(str, keep_lens))})"
        keep = torch.arange(n)[None, :] < torch.tensor(keep_lens)[:, None]
        mask_t = keep[:, None, None, :]
        mask = mask_t.numpy()
        for code, tdt in (("F32", torch.float32), ("BF16", torch.bfloat16)):
            progress(f"sdpa {code} {shape}")
            x = [torch.randn(b, h, n, d, generator=torch.Generator().manual_seed(i)).to(tdt) for i in range(3)]
            arrays = [fuel_cy_numpy(t) for t in x]
            flash = fuel_cy.attention_flash if code == "F32" else fuel_cy.attention_flash_mixed

            def ours():
                fuel_cy.scaled_dot_product_attention(*arrays, attn_mask=mask)

            def peer():
                with torch.no_grad():
                    sdpa(*x, attn_mask=mask_t)

            def unmasked():
                fuel_cy.scaled_dot_product_attention(*arrays)

            def plain():
                flash(*arrays)

            t_ours, t_peer, t_un, t_plain = interleaved([ours, peer, unmasked, plain], reps=3 if quick else REPS)
            rows.append(_row("scaled_dot_product_attention", code, shape, t_ours * 1e3, flops * d,
                             "torch SDPA same mask", t_peer * 1e3))
            rows.append(_row("scaled_dot_product_attention", code, f"B={b} H={h} L=S={n} D={d}, no mask",
                             t_un * 1e3, flops * d, f"fuel_cy {flash.__name__}", t_plain * 1e3))
            # the backward with the same mask against torch's autograd backward (its forward
            # outside the timing; ours recomputes it inside)
            progress(f"masked backward {code} {shape}")
            do = torch.randn(b, h, n, d, generator=torch.Generator().manual_seed(9)).to(tdt)
            do_a = fuel_cy_numpy(do)
            leaves = [t.clone().requires_grad_() for t in x]
            out = sdpa(*leaves, attn_mask=mask_t)

            def ours_bwd():
                fuel_cy.attention_masked_backward(*arrays, do_a, attn_mask=mask)

            def peer_bwd():
                torch.autograd.grad(out, leaves, do, retain_graph=True)

            runs = [ours_bwd, peer_bwd]
            if code == "F32":   # and given the forward's out and lse, as fuel_cy.torch's SDPA hands them over
                o_a, lse_a = fuel_cy.attention_masked(*arrays, attn_mask=mask, return_lse=True)
                runs.append(lambda: fuel_cy.attention_masked_backward(*arrays, do_a, attn_mask=mask, out=o_a,
                                                                      lse=lse_a))
            t_ours, t_peer, *t_saved = interleaved(runs, reps=3 if quick else REPS)
            rows.append(_row("attention_masked_backward", code, shape, t_ours * 1e3, 2.5 * flops * d,
                             "torch SDPA autograd bwd same mask", t_peer * 1e3))
            if t_saved:
                rows.append(_row("attention_masked_backward", code, shape, t_saved[0] * 1e3, 2.5 * flops * d,
                                 "torch SDPA autograd bwd same mask", t_peer * 1e3, mode="out+lse"))
    return rows


def fuel_cy_numpy(t) -> np.ndarray:
    """A CPU tensor's memory as the numpy array fuel_cy takes (bf16 as ml_dtypes.bfloat16)."""
    import ml_dtypes
    import torch

    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def _numpy_rows(rng, progress):
    """NumPy materialized attention: its multi-threaded BLAS runs on its own, not interleaved."""
    import fuel_cy

    s, d = 512, 64
    q, k, v = (rng.standard_normal((1, 8, s, d), dtype=np.float32) for _ in range(3))

    def numpy_attention():
        sc = q @ k.transpose(0, 1, 3, 2) / np.sqrt(d)
        sc = np.exp(sc - sc.max(-1, keepdims=True))
        return (sc / sc.sum(-1, keepdims=True)) @ v

    progress("NumPy materialized attention")
    (t_np,) = interleaved([numpy_attention])
    (t_ours,) = interleaved([lambda: fuel_cy.attention_flash(q, k, v)])
    return [_row("attention_flash", "F32", f"B=1 H=8 S={s} D={d}", t_ours * 1e3, 4 * 8 * s * s * d,
                 "NumPy materialized", t_np * 1e3)]


def _threads_rows(rng, quick, progress):
    import fuel_cy

    s = 1024 if quick else 4096
    q, k, v = (rng.standard_normal((1, 8, s, 128), dtype=np.float32) for _ in range(3))
    progress(f"1 vs {fuel_cy.get_num_threads()} threads")
    n = fuel_cy.get_num_threads()

    def with_threads(t):
        def run():
            fuel_cy.set_num_threads(t)
            try:
                fuel_cy.attention_flash(q, k, v)
            finally:
                fuel_cy.set_num_threads(0)
        return run

    t_n, t_1 = interleaved([with_threads(n), with_threads(1)], reps=3)
    return [_row("attention_flash", "F32", f"B=1 H=8 S={s} D=128, {n} threads", t_n * 1e3, 4 * 8 * s * s * 128,
                 "fuel_cy 1 thread", t_1 * 1e3)]


PER_CALL_SHAPE = "per call: decode GQA q [1,8,1,64], k/v [1,2,16,64]"


def _per_call_rows(torch, rng, progress):
    """What a decode-sized call costs end to end (validation, dispatch, allocation, math): the
    figure that matters when a model calls attention once per layer per token."""
    import fuel_cy

    progress("per-call cost, decode-sized GQA call")
    q = rng.standard_normal((1, 8, 1, 64), dtype=np.float32)
    k, v = (rng.standard_normal((1, 2, 16, 64), dtype=np.float32) for _ in range(2))
    n = 2000

    def many(f):
        def run():
            for _ in range(n):
                f()
        return run

    ours = many(lambda: fuel_cy.attention_flash(q, k, v))
    flops = 4 * 8 * 16 * 64
    if torch is None:
        (t_ours,) = interleaved([ours], reps=7)
        return [_row("attention_flash", "F32", PER_CALL_SHAPE, t_ours / n * 1e3, flops, us=t_ours / n * 1e6)]
    tq, tk, tv = map(torch.from_numpy, (q, k, v))
    peer = many(lambda: torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, enable_gqa=True))
    t_ours, t_peer = interleaved([ours, peer], reps=7)
    return [_row("attention_flash", "F32", PER_CALL_SHAPE, t_ours / n * 1e3, flops, "torch SDPA (per call)",
                 t_peer / n * 1e3, us=t_ours / n * 1e6, peer_us=t_peer / n * 1e6)]


IMPORT_PROBE = ("import time, numpy, ml_dtypes; t = time.perf_counter(); import fuel_cy; "
                "print(time.perf_counter() - t)")


def import_ms(runs: int = 7) -> float:
    """Median milliseconds `import fuel_cy` adds to a fresh interpreter that has numpy and
    ml_dtypes loaded (the first run leaves the bytecode caches an installed package has)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    times = [float(subprocess.run([sys.executable, "-c", IMPORT_PROBE], capture_output=True, text=True,
                                  check=True, env=env).stdout) for _ in range(runs + 1)]
    return float(np.median(times[1:])) * 1e3


RSS_PROBE = """
import numpy as np, fuel_cy
def hwm():  # this process's own peak RSS in MiB (VmHWM, unlike ru_maxrss, is not inherited)
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
s, d = 32768, 64
rng = np.random.default_rng(0)
q = rng.standard_normal((1, 8, s, d), dtype=np.float32)
k, v = q.copy(), q.copy()
base = hwm()
out = fuel_cy.attention_flash(q, k, v, causal=True)
print(base, hwm(), (3 * q.nbytes + out.nbytes) / 2**20, out.nbytes / 2**20)
"""


def flash_32k_rss() -> dict[str, float]:
    """Peak RSS of attention_flash at B=1, H=8, S=32768, D=64 f32, measured in a fresh process."""
    r = subprocess.run([sys.executable, "-c", RSS_PROBE], capture_output=True, text=True, timeout=3600)
    base, peak, io, out = map(float, r.stdout.split())
    return {"rss_before_mb": base, "rss_peak_mb": peak, "inputs_plus_output_mb": io,
            "extra_mb": peak - base - out}


def print_table(result: dict[str, Any]) -> None:
    from .targets import targets

    rows = [["kernel", "dtype", "shape", "ms", "GFLOP/s", "peer", "peer ms", "ratio", "% GEMM"]]
    for r in result["rows"]:
        rows.append([r["kernel"], r["dtype"] + (f" ({r['mode']})" if r.get("mode") else ""), r["shape"], f"{r['ms']:.2f}", f"{r['gflops']:.1f}", r["peer"] or "—",
                     "—" if r["peer_ms"] is None else f"{r['peer_ms']:.2f}",
                     "—" if r["ratio"] is None else f"{r['ratio']:.2f}x",
                     "—" if r["pct_gemm"] is None else f"{r['pct_gemm']:.0f}%"])
    print(format_table(rows))
    m = result["machine"]
    print(f"\nf32 GEMM {result['gemm_gflops']:.1f} GFLOP/s; large copy {result['copy_gbps']:.1f} GB/s (read+write); "
          f"{m['cpu']}, {m['threads']} threads; torch {result['torch'] or 'not installed'}; ratio = peer ms / our ms")
    if result.get("peak_gflops"):
        print("arithmetic peaks (register-only loops, same threads): "
              + ", ".join(f"{k} {v:.1f} GFLOP/s" for k, v in result["peak_gflops"].items()))
    for r in result["rows"]:
        if r.get("pct_copy") is not None:
            beside = f" ({r['copy_gbps']:.1f} GB/s, timed beside it)" if r.get("copy_gbps") else ""
            read = (f", {r['pct_read']:.0f}% of a read alone on the same threads ({r['read_gbps']:.1f} GB/s)"
                    if r.get("pct_read") is not None else "")
            print(f"paged {r['shape']}: K+V read at {r['kv_gbps']:.1f} GB/s = {r['pct_copy']:.0f}% of the copy rate"
                  f"{beside}{read}")
    for r in result["rows"]:
        if r.get("us") is not None:
            peer = f"; {r['peer']} {r['peer_us']:.1f} µs" if r.get("peer_us") is not None else ""
            print(f"attention_flash F32 {r['shape']}: {r['us']:.1f} µs{peer}")
    if "import_ms" in result:
        print(f"import fuel_cy (after numpy and ml_dtypes): {result['import_ms']:.1f} ms")
    if "flash_32k_rss" in result:
        x = result["flash_32k_rss"]
        print(f"attention_flash S=32768 D=64 causal: peak RSS {x['rss_peak_mb']:.0f} MB; {x['extra_mb']:.0f} MB beyond "
              f"the {x['inputs_plus_output_mb']:.0f} MB of inputs + output (budget 64 MB)")
    print()
    print_targets(targets(result))


def print_targets(rows: list[dict[str, Any]]) -> None:
    """A targets table: what was measured against each goal and whether it is met; under it, each
    miss against the machine's own limit where the run measured one."""
    print(format_table([["target", "measured", "met"]] + [
        [t["target"], t["measured"], {True: "yes", False: "NO", None: "—"}[t["met"]]] for t in rows]))
    limits = [t for t in rows if t["met"] is False and t.get("limit")]
    if limits:
        print("\nWhat the misses measure against the machine:")
        for t in limits:
            print(f"- {t['target']}: {t['limit']}")


def plot(result: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in result["rows"] if r["ratio"] is not None]
    fig, ax = plt.subplots(figsize=(12, 0.32 * len(rows) + 1.5))
    labels = [f"{r['kernel']} {r['dtype']} {r['shape']} vs {r['peer']}" for r in rows]
    ax.barh(range(len(rows)), [r["ratio"] for r in rows], color=["#2a9d8f" if r["ratio"] >= 1 else "#e76f51" for r in rows])
    ax.axvline(1.0, color="k", lw=0.8)
    ax.set_xscale("log")  # ratios span 0.03x (f16 vs f32) to 7x (gather + SDPA)
    ax.set_xticks([0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8], ["0.05", "0.1", "0.25", "0.5", "1", "2", "4", "8"])
    ax.set_yticks(range(len(rows)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("speed ratio (peer time / fuel_cy time)")
    ax.set_title(f"fuel_cy vs peers — {result['machine']['cpu']}, {result['date'][:10]}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(quick: bool = False, json_out: Optional[str] = None, plot: Optional[str] = None,
         progress: Callable[[str], None] = lambda s: None) -> int:
    result = run_bench(quick=quick, progress=progress)
    progress("")
    print_table(result)
    if json_out:
        Path(json_out).write_text(json.dumps(result, indent=2))
        print(f"wrote {json_out}")
    if plot:
        globals()["plot"](result, plot)
        print(f"wrote {plot}")
    return 0


def _fit_time_model(samples: list[tuple[float, float, float]]) -> np.ndarray:
    """Non-negative least squares of t ~ c0 + c1 * flops + c2 * bytes, weighted by 1/t so small
    and large shapes count alike (relative error).  Three unknowns: try every support set."""
    import itertools

    a = np.array([[1.0, f, b] for f, b, _ in samples])
    t = np.array([x[2] for x in samples])
    aw, tw = a / t[:, None], np.ones_like(t)
    best, best_res = np.zeros(3), np.inf
    for k in range(1, 4):
        for cols in itertools.combinations(range(3), k):
            sub = np.linalg.lstsq(aw[:, cols], tw, rcond=None)[0]
            if np.any(sub < 0):
                continue
            coef = np.zeros(3)
            coef[list(cols)] = sub
            res = float(np.sum((aw @ coef - tw) ** 2))
            if res < best_res:
                best, best_res = coef, res
    return best


def calibrate(quick: bool = False, progress: Callable[[str], None] = lambda s: None) -> int:
    """Fit time ~ overhead_ns + flops * ns_per_flop + bytes * ns_per_byte per kernel and dtype on a
    shape sweep; report the error on held-out shapes; store a versioned JSON next to the build."""
    import ml_dtypes

    import fuel_cy
    from ..runtime.calibration import CALIBRATION_VERSION, calibration_path

    rng = np.random.default_rng(0)
    dtypes = {"F32": np.float32, "F64": np.float64, "BF16": ml_dtypes.bfloat16, "F16": np.float16}
    sizes = [64, 128, 256, 384, 512, 768] if quick else [64, 128, 256, 384, 512, 768, 1024, 1536]
    fits: dict[str, Any] = {}
    from .runner import kernel_kind

    for name, entry in fuel_cy.registry.items():
        kind = kernel_kind(entry.inputs)
        codes = entry.dtypes if not quick else ([d for d in entry.dtypes if d in ("F32", "F64")] or entry.dtypes[:1])
        for code in codes:
            samples = []
            for s in sizes:
                progress(f"calibrate {name} {code} S={s}")
                dt = dtypes[code]
                if kind == "paged":
                    nblk = 4 * s // 16
                    args = [rng.standard_normal((4, 8, 1, 64)).astype(dt), rng.standard_normal((nblk, 16, 2, 64)).astype(dt),
                            rng.standard_normal((nblk, 16, 2, 64)).astype(dt),
                            rng.permutation(nblk).reshape(4, s // 16).astype(np.uint32), np.full(4, s, np.uint32)]
                elif kind == "varlen":  # one sequence of s rows: the contract's flop bound is exact
                    q = rng.standard_normal((s, 4, 64)).astype(dt)
                    kv = rng.standard_normal((s, 2, 64)).astype(dt)
                    cu = np.array([0, s], np.uint32)
                    args = [q, kv, kv] + ([q] if "do_grad" in entry.inputs else []) + [cu, cu]
                else:
                    q = rng.standard_normal((1, 4, s, 64)).astype(dt)
                    kv = rng.standard_normal((1, 2, s, 64)).astype(dt)
                    args = [q, kv, kv] + ([q] if "do_grad" in entry.inputs else [])
                fn = fuel_cy.registry[name].fn
                # the fastest of 5: what the shape costs on a quiet machine, which the model predicts
                # (a median of 3 let one busy moment move a held-out shape by half)
                (t,) = interleaved([lambda: fn(*args)], reps=5, stat=np.min, min_seconds=0.0)
                c = fuel_cy.cost(name, *args)
                samples.append((c.flops, c.bytes_moved, t * 1e9))
            train = samples[::2] + samples[-1:]
            held = [x for x in samples if x not in train] or samples[-1:]
            coef = _fit_time_model(train)
            pred = lambda f, b: coef[0] + coef[1] * f + coef[2] * b  # noqa: E731
            err = float(np.max([abs(pred(f, b) - t) / t for f, b, t in held]))
            fits[f"{name}:{code}"] = {"overhead_ns": float(coef[0]), "ns_per_flop": float(coef[1]),
                                      "ns_per_byte": float(coef[2]), "heldout_max_rel_err": err,
                                      "samples": len(samples)}
    data = {"version": CALIBRATION_VERSION, "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "machine": machine_info(), "fits": fits}
    path = calibration_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2))
    progress("")
    table = [["kernel:dtype", "overhead us", "GFLOP/s (fit)", "GB/s (fit)", "held-out max err"]]
    for key, f in fits.items():
        table.append([key, f"{f['overhead_ns'] / 1e3:.1f}", "—" if f["ns_per_flop"] == 0 else f"{1 / f['ns_per_flop']:.1f}",
                      "—" if f["ns_per_byte"] == 0 else f"{1 / f['ns_per_byte']:.1f}", f"{100 * f['heldout_max_rel_err']:.0f}%"])
    print(format_table(table))
    print(f"wrote {path}")
    return 0
