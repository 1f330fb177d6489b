"""Side by side, every form of each choice that `fc_uarch.h` makes per CPU, on the CPU at hand.

Each choice computes the same bits in every form (the tests check that), so which form a CPU
takes is a question of speed only, settled by measuring it there.  This script switches each
choice through its test hook between calls, interleaved (form A, form B, A, B, ...), and prints
the median times with the form this CPU takes at load marked, stamped with the CPU:

    python benchmarks/forms.py [--reps N] [--json OUT] [--only CHOICE ...]

Run it on a CPU whose forms were not measured yet (a new micro-architecture) before changing the
choice in `fc_uarch.h`; the forms it does not take are only timed, never chosen, here.
"""
from __future__ import annotations

import argparse
import json
from typing import Any, Callable

import ml_dtypes
import numpy as np

import fuel_cy
from fuel_cy.harness.bench import interleaved, machine_info
from fuel_cy.harness.tables import format_table
from fuel_cy.runtime.cpu import core


def _arrays(dtype, s: int, d: int, n: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((1, 8, s, d)).astype(dtype) for _ in range(n)]


def _flash(dtype, s: int, d: int, causal: bool = False) -> Callable[[], Any]:
    q, k, v = _arrays(dtype, s, d, 3)
    return lambda: fuel_cy.attention_flash(q, k, v, causal=causal)


def _backward(dtype, s: int, d: int) -> Callable[[], Any]:
    q, k, v, do = _arrays(dtype, s, d, 4)
    return lambda: fuel_cy.attention_flash_backward(q, k, v, do)


def _flash_mixed(s: int, d: int) -> Callable[[], Any]:
    q, k, v = _arrays(ml_dtypes.bfloat16, s, d, 3)
    return lambda: fuel_cy.attention_flash_mixed(q, k, v)


def _backward_mixed(s: int, d: int) -> Callable[[], Any]:
    q, k, v, do = _arrays(ml_dtypes.bfloat16, s, d, 4)
    return lambda: fuel_cy.attention_flash_backward_mixed(q, k, v, do)


def _varlen_mix(dtype, chunks_only: bool, paged: bool = True) -> Callable[[], Any]:
    """The bench's paged decode mix (fuel_cy.harness.bench, seed 0): 16 sequences of 512-4096 keys
    over a pool of 16-key blocks in random order, Hq=8 Hkv=2 D=128, 14 decode steps and two chunks
    of 8 and 4 queries; or (chunks_only) the two chunks alone; or (not paged) the same keys packed
    [T, Hkv, D]."""
    rng = np.random.default_rng(0)
    b, hq, hkv, d, bs = 16, 8, 2, 128, 16
    lens_k = rng.integers(512, 4097, b)
    lens_q = np.ones(b, np.int64)
    lens_q[:2] = (8, 4)
    per = [-(-int(n) // bs) for n in lens_k]
    order = rng.permutation(sum(per)).astype(np.uint32)
    table = np.zeros((b, max(per)), np.uint32)
    start = 0
    for s, n in enumerate(per):
        table[s, :n] = order[start:start + n]
        start += n
    kp, vp = (rng.standard_normal((sum(per), bs, hkv, d)).astype(dtype) for _ in range(2))
    if chunks_only:
        lens_q, lens_k, table = lens_q[:2], lens_k[:2], table[:2]
    cu_q, cu_k = (np.concatenate([[0], np.cumsum(x)]).astype(np.uint32) for x in (lens_q, lens_k))
    q = rng.standard_normal((int(cu_q[-1]), hq, d)).astype(dtype)
    if paged:
        return lambda: fuel_cy.attention_varlen(q, kp, vp, cu_q, cu_k, block_table=table, causal=True)
    rows = np.concatenate([table[s, np.arange(n) // bs].astype(np.int64) * bs + np.arange(n) % bs
                           for s, n in enumerate(lens_k)])
    k, v = (np.ascontiguousarray(x.reshape(-1, hkv, d)[rows]) for x in (kp, vp))
    return lambda: fuel_cy.attention_varlen(q, k, v, cu_q, cu_k, causal=True)


def _paged_decode(dtype, ctx: int, mixed: bool = False) -> Callable[[], Any]:
    """The bench's paged decode: B=16 Hq=32 Hkv=8 D=128, ctx keys per sequence in 16-key blocks in
    random order; mixed, a bf16 or f16 pool under float32 math (attention_paged_mixed)."""
    rng = np.random.default_rng(0)
    b, hq, hkv, d, bs = 16, 32, 8, 128, 16
    nblk = b * ctx // bs
    kc, vc = (rng.standard_normal((nblk, bs, hkv, d)).astype(dtype) for _ in range(2))
    table = rng.permutation(nblk).reshape(b, ctx // bs).astype(np.uint32)
    lens = np.full(b, ctx, np.uint32)
    q = rng.standard_normal((b, hq, 1, d)).astype(dtype)
    kernel = fuel_cy.attention_paged_mixed if mixed else fuel_cy.attention_paged_naive
    return lambda: kernel(q, kc, vc, table, lens)


Choice = tuple[str, Callable[..., Any], list[Any], list[tuple[str, Callable[[], Any]]]]


def _choices() -> list[Choice]:
    """(choice, its hook, the forms to time, [(shape, call)]) for every choice this level has."""
    c = core()
    out: list[Choice] = [
        ("fc_pv_form", c._test_pv_form, ["pointer", "stride"],
         [("flash f32 B=1 H=8 S=2048 D=64", _flash(np.float32, 2048, 64)),
          ("flash f32 B=1 H=8 S=2048 D=128", _flash(np.float32, 2048, 128))]),
        ("fc_bwd_rows", c._test_bwd_rows, [32, 64],
         [("backward f32 B=1 H=8 S=2048 D=64", _backward(np.float32, 2048, 64)),
          ("backward f32 B=1 H=8 S=2048 D=128", _backward(np.float32, 2048, 128))]),
        ("fc_tn_blocks", c._test_tn_blocks, [1, 2],
         [("backward f32 B=1 H=8 S=2048 D=64", _backward(np.float32, 2048, 64)),
          ("backward f32 B=1 H=8 S=2048 D=128", _backward(np.float32, 2048, 128))]),
        # never, or above 1 MB (Zen 4's L2): S=2048 D=64 lies at it, the other two past it
        ("fc_tn_ahead", c._test_tn_ahead, [-1, 1 << 20],
         [("backward f32 B=1 H=8 S=2048 D=64", _backward(np.float32, 2048, 64)),
          ("backward f32 B=1 H=8 S=2048 D=128", _backward(np.float32, 2048, 128)),
          ("backward f32 B=1 H=8 S=4096 D=64", _backward(np.float32, 4096, 64))]),
        ("fc_chunk_spread", c._test_chunk_spread, [False, True],
         [("varlen paged decode mix f32 (bench's, seed 0)", _varlen_mix(np.float32, False)),
          ("varlen paged decode mix f64", _varlen_mix(np.float64, False)),
          ("varlen paged chunks of 8 and 4 queries f32", _varlen_mix(np.float32, True)),
          ("varlen paged chunks of 8 and 4 queries f64", _varlen_mix(np.float64, True)),
          ("varlen decode mix f32, keys packed", _varlen_mix(np.float32, False, paged=False)),
          ("varlen chunks of 8 and 4 queries f32, keys packed", _varlen_mix(np.float32, True, paged=False)),
          # bf16: each tile's K and V pairs packed in its task (round_p on vdpbf16ps)
          ("varlen paged decode mix bf16", _varlen_mix(ml_dtypes.bfloat16, False)),
          ("varlen paged chunks of 8 and 4 queries bf16", _varlen_mix(ml_dtypes.bfloat16, True)),
          ("varlen decode mix bf16, keys packed", _varlen_mix(ml_dtypes.bfloat16, False, paged=False))]),
        ("fc_qk_slab", c._test_qk_slab, [0, 8, 16, 32],
         [("flash f32 B=1 H=8 S=2048 D=64", _flash(np.float32, 2048, 64)),
          ("flash f32 B=1 H=8 S=2048 D=128", _flash(np.float32, 2048, 128)),
          ("flash f32 B=1 H=8 S=4096 D=64 causal", _flash(np.float32, 4096, 64, causal=True)),
          ("flash f64 B=1 H=8 S=2048 D=128", _flash(np.float64, 2048, 128))]),
        # a flash tile's row maxima as its scores are stored, or by a pass over them
        ("fc_qk_fused_max", c._test_qk_fused_max, [False, True],
         [("flash f32 B=1 H=8 S=2048 D=64", _flash(np.float32, 2048, 64)),
          ("flash f32 B=1 H=8 S=2048 D=128", _flash(np.float32, 2048, 128)),
          ("flash f32 B=1 H=8 S=512 D=64", _flash(np.float32, 512, 64)),
          ("flash f32 B=1 H=8 S=4096 D=64 causal", _flash(np.float32, 4096, 64, causal=True)),
          ("flash f64 B=1 H=8 S=2048 D=64", _flash(np.float64, 2048, 64)),
          ("flash f64 B=1 H=8 S=2048 D=128", _flash(np.float64, 2048, 128))]),
        # both at once: (slab rows, maxima kept); a slab's scores with their maxima kept and then
        # its softmax is the whole fusion the two allow (the exp needs the row's max first)
        ("fc_qk_slab+fc_qk_fused_max", _slab_and_max(c), [(0, False), (0, True), (8, True), (16, True), (32, True)],
         [("flash f32 B=1 H=8 S=2048 D=64", _flash(np.float32, 2048, 64)),
          ("flash f32 B=1 H=8 S=2048 D=128", _flash(np.float32, 2048, 128)),
          ("flash f32 B=1 H=8 S=4096 D=128", _flash(np.float32, 4096, 128)),
          ("flash f64 B=1 H=8 S=2048 D=128", _flash(np.float64, 2048, 128))]),
        # half pools (bf16, f16 under float32 math): the heads loops' rows into L1 too, n keys on
        ("fc_h16_l1_ahead", c._test_h16_l1_ahead, [0, 8, 12, 16],
         [("paged mixed bf16 B=16 Hq=32 Hkv=8 D=128 ctx=2048 block=16", _paged_decode(ml_dtypes.bfloat16, 2048, mixed=True)),
          ("paged mixed bf16 ctx=1024", _paged_decode(ml_dtypes.bfloat16, 1024, mixed=True)),
          ("paged mixed f16 ctx=2048", _paged_decode(np.float16, 2048, mixed=True)),
          ("varlen paged decode mix bf16 (bench's, seed 0)", _varlen_mix(ml_dtypes.bfloat16, False)),
          ("varlen decode mix bf16, keys packed", _varlen_mix(ml_dtypes.bfloat16, False, paged=False))]),
        # the paged heads loops' lookahead: a burst per group (0) or a line per product step (1)
        ("fc_paged_spread", c._test_paged_spread, [0, 1],
         [("paged decode f32 B=16 Hq=32 Hkv=8 D=128 ctx=1024 block=16", _paged_decode(np.float32, 1024)),
          ("paged decode f32 ctx=4096", _paged_decode(np.float32, 4096)),
          ("paged decode f64 ctx=1024", _paged_decode(np.float64, 1024)),
          ("varlen paged decode mix f32 (bench's, seed 0)", _varlen_mix(np.float32, False)),
          ("varlen paged decode mix f64", _varlen_mix(np.float64, False)),
          # (bf16: the decode steps' scores on vdpbf16ps, fc_qk_heads_dpbf16)
          ("varlen paged decode mix bf16", _varlen_mix(ml_dtypes.bfloat16, False)),
          ("varlen decode mix bf16, keys packed", _varlen_mix(ml_dtypes.bfloat16, False, paged=False))]),
        ("fc_paged_group", c._test_paged_group, [16, 8, 4],
         [("paged decode f32 B=16 Hq=32 Hkv=8 D=128 ctx=1024 block=16", _paged_decode(np.float32, 1024)),
          ("paged decode f32 ctx=2048", _paged_decode(np.float32, 2048)),
          ("paged decode f64 ctx=1024", _paged_decode(np.float64, 1024)),
          ("varlen paged decode mix f32 (bench's, seed 0)", _varlen_mix(np.float32, False)),
          ("varlen paged decode mix f64", _varlen_mix(np.float64, False))]),
    ]
    if len(c._test_gemm_blocks()) > 1:
        out.append(("fc_gemm_block", c._test_gemm_block, c._test_gemm_blocks(),
                    [("flash f32 B=1 H=8 S=2048 D=64", _flash(np.float32, 2048, 64)),
                     ("flash f32 B=1 H=8 S=2048 D=128", _flash(np.float32, 2048, 128)),
                     ("flash f64 B=1 H=8 S=2048 D=128", _flash(np.float64, 2048, 128)),
                     ("backward f32 B=1 H=8 S=2048 D=64", _backward(np.float32, 2048, 64))]))
    if len(c._test_bf16_forms()) > 1:
        out.append(("fc_bf16_form", c._test_bf16_form, c._test_bf16_forms(),
                    [("flash bf16 B=1 H=8 S=1024 D=64", _flash(ml_dtypes.bfloat16, 1024, 64)),
                     ("backward bf16 B=1 H=8 S=512 D=64", _backward(ml_dtypes.bfloat16, 512, 64))]))
    # the emulated binary16 form exists for the tests, not as a candidate
    f16 = [f for f in c._test_f16_forms() if f != "native-emulated"]
    if len(f16) > 1:
        out.append(("fc_f16_form", c._test_f16_form, f16,
                    [("flash f16 B=1 H=8 S=1024 D=64", _flash(np.float16, 1024, 64)),
                     ("backward f16 B=1 H=8 S=512 D=64", _backward(np.float16, 512, 64))]))
    # the emulated tile form exists for the tests, not as a candidate
    scores = [f for f in c._test_bf16_score_forms() if f != "amx-emulated"]
    if len(scores) > 1:
        out.append(("fc_bf16_scores_form", c._test_bf16_score_form, scores,
                    [("flash mixed bf16 B=1 H=8 S=1024 D=64", _flash_mixed(1024, 64)),
                     ("flash mixed bf16 B=1 H=8 S=4096 D=128", _flash_mixed(4096, 128)),
                     ("backward mixed bf16 B=1 H=8 S=1024 D=64", _backward_mixed(1024, 64))]))
    return out


def _slab_and_max(c: Any) -> Callable[..., tuple[int, bool]]:
    """One hook over two choices: fc_qk_slab's rows and fc_qk_fused_max, as a pair."""
    def hook(form: tuple[int, bool] | None = None) -> tuple[int, bool]:
        if form is not None:
            c._test_qk_slab(form[0])
            c._test_qk_fused_max(form[1])
        return (c._test_qk_slab(), c._test_qk_fused_max())
    return hook


def _with_form(hook: Callable[..., Any], form: Any, call: Callable[[], Any]) -> Callable[[], Any]:
    def run() -> Any:
        hook(form)
        return call()
    return run


def measure(reps: int, only: list[str] | None = None) -> dict[str, Any]:
    rows = []
    for choice, hook, forms, cases in _choices():
        if only and choice not in only:
            continue
        chosen = hook()
        try:
            for shape, call in cases:
                times = interleaved([_with_form(hook, f, call) for f in forms], reps=reps)
                base = times[forms.index(chosen)]
                for form, t in zip(forms, times):
                    rows.append({"choice": choice, "shape": shape, "form": str(form), "chosen": form == chosen,
                                 "ms": t * 1e3, "vs_chosen": t / base})
        finally:
            hook(chosen)
    return {"machine": machine_info(), "reps": reps, "rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=7, help="interleaved repetitions per form (median)")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--only", nargs="+", metavar="CHOICE", help="time these choices only (e.g. fc_gemm_block)")
    args = ap.parse_args()
    result = measure(args.reps, args.only)
    m = result["machine"]
    print(f"{m['cpu']} ({m['cpu_id']}), level {m['cpu_capability']}, {m['threads']} threads, "
          f"median of {args.reps}; * = the form this CPU takes at load\n")
    print(format_table([["choice", "shape", "form", "ms", "time / chosen form's"]]
                       + [[r["choice"], r["shape"], r["form"] + (" *" if r["chosen"] else ""), f"{r['ms']:.1f}",
                           f"{r['vs_chosen']:.3f}"] for r in result["rows"]]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
