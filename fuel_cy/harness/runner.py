"""Random-input runs of the kernels, checked against the float64 reference (`run`, `demo`)."""
from __future__ import annotations

import inspect

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np

from ..errors import InputError, UsageError
from ..runtime._validation import NUMPY_DTYPES
from . import reference, tolerance
from .tables import format_table

# default problems by the kind of kernel, read from its inputs (so a new contract's kernels run too)
DEFAULT_SHAPES: dict[str, dict[str, tuple[int, ...]]] = {
    "forward": {"q": (1, 8, 256, 64), "k": (1, 2, 512, 64)},
    "backward": {"q": (1, 8, 128, 64), "k": (1, 2, 256, 64)},
    "paged": {"q": (4, 8, 1, 64), "k_cache": (96, 16, 2, 64), "block_table": (4, 24)},
    # packed sequences: q/k rows split into 3 sequences of random lengths (chunked prefill: lk >= lq)
    "varlen": {"q": (384, 8, 64), "k": (640, 2, 64)},
    # a key-padding mask [B, 1, 1, Sk] and a bias [1, Hq, Sq, Sk]
    "masked": {"q": (2, 8, 256, 64), "k": (2, 2, 512, 64)},
}


def kernel_kind(inputs: tuple[str, ...]) -> str:
    """forward, backward, paged, varlen or masked, from the input names the contracts give these kernels."""
    if "k_cache" in inputs:
        return "paged"
    if "cu_seqlens_q" in inputs:
        return "varlen"
    if "attn_mask" in inputs:
        return "masked"
    return "backward" if "do_grad" in inputs else "forward"


@dataclass
class RunSpec:
    kernel: str
    dtype: str = "F32"
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    causal: bool = False
    window: Optional[tuple[Optional[int], Optional[int]]] = None
    softcap: Optional[float] = None
    alibi: bool = False
    seed: int = 0
    k_len: Optional[int] = None
    round_p: Optional[bool] = None   # None: the kernel's default P V mode


# The `fuel-cy run` options a RunSpec carries, and what each needs of the kernel: a param of its
# contract (op_params) or an input.  --shape, --dtype and --seed apply to every kernel.
OPTIONS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "causal": ("--causal", "param", ("causal",)),
    "window": ("--window", "param", ("window_size_left", "window_size_right")),
    "softcap": ("--softcap", "param", ("softcap",)),
    "k_len": ("--k-len", "param", ("k_len",)),
    "alibi": ("--alibi", "input", ("alibi_slopes",)),
}


def kernel_options(entry: Any) -> list[str]:
    """The options of `fuel-cy run` that `entry`'s kernel takes."""
    have = set(entry.params) | set(entry.inputs)
    return ["--shape", "--dtype", "--seed"] + [flag for flag, _, needs in OPTIONS.values() if set(needs) <= have]


def check_spec(spec: "RunSpec", entry: Any) -> None:
    """A UsageError for an option or a --shape input that the kernel does not have (naming the
    kernel, the option and the ones it does take), instead of silently ignoring it."""
    for attr, (flag, kind, needs) in OPTIONS.items():
        value = getattr(spec, attr)
        if value is None or value is False:
            continue
        absent = [n for n in needs if n not in (entry.params if kind == "param" else entry.inputs)]
        if absent:
            raise UsageError(f"{spec.kernel} has no option {flag} (its contract has no {kind} {absent[0]!r}); "
                             f"options for {spec.kernel}: {', '.join(kernel_options(entry))}")
    unknown = [n for n in spec.shapes if n not in entry.inputs]
    if unknown:
        raise UsageError(f"{spec.kernel} has no input {unknown[0]!r} for --shape (inputs: {', '.join(entry.inputs)})")


@dataclass
class RunResult:
    spec: RunSpec
    shape: str
    seconds: float
    flops: float
    error: float
    bound: float
    naive_error: Optional[float] = None
    naive_note: Optional[str] = None  # why the naive comparison was skipped

    @property
    def ok(self) -> bool:
        return self.error <= self.bound

    @property
    def gflops(self) -> float:
        return self.flops / self.seconds / 1e9 if self.seconds > 0 else float("nan")

    def describe(self) -> str:
        lines = [f"{self.spec.kernel} {self.spec.dtype} {self.shape}",
                 f"  time        {self.seconds * 1e3:.3f} ms ({self.gflops:.1f} GFLOP/s)",
                 f"  max error   {self.error:.3e} relative to max|ref| (bound {self.bound:.1e}) "
                 f"{'ok' if self.ok else 'MISMATCH'}"]
        if self.naive_error is not None:
            lines.append(f"  vs naive    {self.naive_error:.3e}")
        elif self.naive_note:
            lines.append(f"  vs naive    skipped: {self.naive_note}")
        return "\n".join(lines)


def _inputs(spec: RunSpec, rng: np.random.Generator) -> tuple[list[Any], dict[str, Any], Callable[[], Any]]:
    import fuel_cy

    entry = fuel_cy.registry.get(spec.kernel)
    if entry is None:
        raise UsageError(f"unknown kernel {spec.kernel!r} (known: {', '.join(fuel_cy.registry)})")
    check_spec(spec, entry)
    kind = kernel_kind(entry.inputs)
    shapes = dict(DEFAULT_SHAPES[kind])
    shapes.update(spec.shapes)
    T = NUMPY_DTYPES[spec.dtype]

    def rand(shape):
        return rng.standard_normal(shape).astype(T)

    params: dict[str, Any] = {}
    if spec.softcap is not None:
        params["softcap"] = spec.softcap
    if "round_p" in entry.params:   # the P V mode (the kernel's default), stated to the reference too
        params["round_p"] = _default_round_p(entry) if spec.round_p is None else spec.round_p
    if kind == "paged":
        q = rand(shapes["q"])
        kc = rand(shapes["k_cache"])
        vc = rand(shapes.get("v_cache", shapes["k_cache"]))
        b, maxb = shapes.get("block_table", (q.shape[0], kc.shape[0] // max(q.shape[0], 1)))
        table = rng.permutation(kc.shape[0])[: b * maxb].reshape(b, maxb).astype(np.uint32)
        lens = rng.integers(0, maxb * kc.shape[1] + 1, size=b).astype(np.uint32)
        alibi = rng.random(q.shape[1]).astype(T) if spec.alibi else None
        args = [q, kc, vc, table, lens, alibi]
        return args, params, lambda: reference.paged_attention(q, kc, vc, table, lens, alibi, **params)
    q = rand(shapes["q"])
    k = rand(shapes["k"])
    v = rand(shapes.get("v", shapes["k"]))
    if kind == "varlen":
        if "causal" in entry.params:
            params["causal"] = spec.causal
        if spec.window:
            params["window_size_left"], params["window_size_right"] = spec.window
        # three sequences with random cut points (an empty one possible, as in real batches)
        cu_q = np.concatenate([[0], np.sort(rng.integers(0, q.shape[0] + 1, 2)), [q.shape[0]]]).astype(np.uint32)
        cu_k = np.concatenate([[0], np.sort(rng.integers(0, k.shape[0] + 1, 2)), [k.shape[0]]]).astype(np.uint32)
        alibi = rng.random(q.shape[1]).astype(np.float32) if spec.alibi else None   # float32 slopes (own type)
        if "do_grad" in entry.inputs:
            do = rand(q.shape)
            return ([q, k, v, do, cu_q, cu_k, alibi], params,
                    lambda: reference.varlen_attention_backward(q, k, v, do, cu_q, cu_k, alibi, **params))
        args = [q, k, v, cu_q, cu_k, alibi]
        return args, params, lambda: reference.varlen_attention(q, k, v, cu_q, cu_k, alibi, **params)
    if kind == "masked":
        params["causal"] = spec.causal
        # a key-padding mask (each sequence keeps a random prefix of its keys) and a small bias
        b, sk = q.shape[0], k.shape[2]
        keep = (np.arange(sk)[None, :] < rng.integers(1, sk + 1, b)[:, None])[:, None, None, :]
        bias = (rng.standard_normal((1, q.shape[1], q.shape[2], sk)) * 0.5).astype(T)
        if "do_grad" in entry.inputs:
            do = rand(q.shape)
            return ([q, k, v, do, keep, bias], params,
                    lambda: reference.masked_attention_backward(q, k, v, do, keep, bias, **params))
        return ([q, k, v, keep, bias], params,
                lambda: reference.masked_attention(q, k, v, keep, bias, **params))
    alibi = rng.random(q.shape[1]).astype(T) if spec.alibi else None
    if "causal" in entry.params:
        params["causal"] = spec.causal
    if spec.window:
        params["window_size_left"], params["window_size_right"] = spec.window
    if kind == "backward":
        do = rand(shapes.get("do_grad", q.shape))
        return [q, k, v, do, alibi], params, lambda: reference.attention_backward(q, k, v, do, alibi, **params)
    if spec.k_len is not None:
        params["k_len"] = spec.k_len
    return [q, k, v, alibi], params, lambda: reference.attention(q, k, v, alibi, **params)


def run_kernel(spec: RunSpec, repeats: int = 3) -> RunResult:
    import fuel_cy

    rng = np.random.default_rng(spec.seed)
    args, params, reference_of = _inputs(spec, rng)
    fn = fuel_cy.registry[spec.kernel].fn
    out = fn(*args, **params)  # validates first: a shape outside the contract is an InputError
    ref = reference_of()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(*args, **params)
        times.append(time.perf_counter() - t0)
    q = args[0]
    entry = fuel_cy.registry[spec.kernel]
    kind = kernel_kind(entry.inputs)
    sk = (args[3].shape[1] * args[1].shape[1] if kind == "paged" else
          args[1].shape[0] if kind == "varlen" else args[1].shape[2])
    backward = isinstance(out, tuple)
    if backward:
        error = max(tolerance.relative_error(o, r) for o, r in zip(out, ref))
    else:
        error = tolerance.relative_error(out, ref)
    naive_error, naive_note = None, None
    if spec.kernel == "attention_flash":
        naive_error, naive_note = _versus_naive(out, args, params, spec.dtype)
    report = fuel_cy.cost(spec.kernel, *args, **{k: v for k, v in params.items() if k == "block_size"})
    shape = " ".join(f"{n}={list(a.shape)}" for n, a in zip(fuel_cy.registry[spec.kernel].inputs, args)
                     if a is not None and n in ("q", "k", "k_cache"))
    return RunResult(spec, shape, float(np.median(times)), float(report.flops), error,
                     tolerance.bound(spec.dtype, q.shape[-1], sk, backward, entry.compute), naive_error, naive_note)


def _versus_naive(out: Any, args: list[Any], params: dict[str, Any], dtype: str) -> tuple[Optional[float], Optional[str]]:
    """attention_flash's output against attention_naive's on the same call, when the naive kernel
    (as its contract stands) takes that call; else why not."""
    import fuel_cy

    naive = fuel_cy.registry.get("attention_naive")
    if naive is None:
        return None, "there is no attention_naive kernel"
    if dtype not in naive.dtypes:
        return None, f"attention_naive does not take {dtype} (its contract lists {', '.join(naive.dtypes)})"
    extra = [p for p in params if p not in naive.params]
    if extra:
        return None, f"attention_naive has no param {extra[0]!r}"
    try:
        return tolerance.relative_error(out, naive.fn(*args, **params)), None
    except InputError as exc:  # the compiled kernel and the tables disagree (an unbuilt edit)
        return None, f"attention_naive rejects the call: {exc}"


def _default_round_p(entry: Any) -> Optional[bool]:
    if "round_p" not in entry.params:
        return None
    return bool(inspect.signature(entry.fn).parameters["round_p"].default)


def _demo_modes(entry: Any) -> list[tuple[str, Optional[bool]]]:
    """(dtype, round_p) pairs the demo runs: every dtype in the kernel's default mode, and half
    types of a kernel with a P V mode in both (the Precision page audits both against float64)."""
    modes: list[tuple[str, Optional[bool]]] = []
    for dtype in entry.dtypes:
        if "round_p" in entry.params and dtype in ("BF16", "F16"):
            modes += [(dtype, True), (dtype, False)]
        else:
            modes.append((dtype, None))
    return modes


def _head_commit() -> Optional[str]:
    """The checkout's HEAD, which the audit belongs to (tests/test_precision_audit.py checks it is
    not older than the last change to the kernels), or None outside a git checkout."""
    import subprocess
    from pathlib import Path

    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parents[2],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def demo(progress: Callable[[str], None] = lambda s: None, json_out: Optional[str] = None) -> bool:
    """Every kernel in every dtype on a default problem, checked against float64; optionally
    written as the precision audit file the docs' Precision page shows."""
    import fuel_cy

    rows = [["kernel", "dtype", "shape", "time ms", "GFLOP/s", "max rel err", "bound", "ok"]]
    audit = []
    notes = []
    all_ok = True
    for name, entry in fuel_cy.registry.items():
        for dtype, round_p in _demo_modes(entry):
            progress(f"demo: {name} {dtype}")
            # what the contract offers: causal masking where it has the param, ALiBi where it has the input
            spec = RunSpec(kernel=name, dtype=dtype, causal="causal" in entry.params,
                           alibi="alibi_slopes" in entry.inputs, round_p=round_p)
            try:
                r = run_kernel(spec, repeats=2)
            except InputError as exc:
                if ".dtypes" not in exc.clause:
                    raise
                # the registry lists the dtype but the compiled kernel's contract no longer takes it
                # (an edited contract, generated but not yet built): not this demo's failure to report
                notes.append(f"{name} {dtype} skipped: the compiled kernel does not take {dtype} ({exc}); "
                             "rebuild (`fuel-cy build`) so the registry and the kernels agree")
                continue
            if r.naive_note:
                notes.append(f"{name} {dtype}: comparison with attention_naive skipped: {r.naive_note}")
            all_ok &= r.ok
            label = dtype if round_p is None else f"{dtype} ({'P in T' if round_p else 'P in f32'})"
            rows.append([name, label, r.shape, f"{r.seconds * 1e3:.2f}", f"{r.gflops:.1f}",
                         f"{r.error:.2e}", f"{r.bound:.0e}", "yes" if r.ok else "NO"])
            audit.append({"kernel": name, "dtype": dtype, "shape": r.shape, "error": r.error, "bound": r.bound,
                          "ok": r.ok, "ms": r.seconds * 1e3, "round_p": round_p,
                          "default": round_p is None or round_p == _default_round_p(entry)})
    progress("")
    print(format_table(rows))
    for note in notes:
        print(f"note: {note}")
    print("all kernels verified against the float64 reference" if all_ok else "MISMATCH: see the rows marked NO")
    print("(GFLOP/s uses the contract's cost formula, which counts all Sq x Sk pairs, also for causal runs)")
    if json_out:
        import json
        from datetime import datetime, timezone

        from .bench import machine_info

        from . import peer_accuracy

        data = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "machine": machine_info(),
                "commit": _head_commit(), "rows": audit}
        peer = peer_accuracy.rows(progress)
        if peer is not None:
            import torch

            data["torch"] = torch.__version__
            data["peer"] = peer
        with open(json_out, "w") as fh:
            json.dump(data, fh, indent=2)
        print(f"wrote {json_out}")
    return all_ok
