"""The runtime under stress.

A signal during a long call is honoured while the call runs (fc_interrupt.h): Ctrl-C raises
KeyboardInterrupt from inside the kernel, a handler's own exception comes out unchanged, the inputs
are untouched, and the next call works.  Each case runs in a child process, so a failure cannot
leave a stray KeyboardInterrupt in the test session.  The uninterrupted calls take seconds; the
1 s bound only separates "stopped while running" from "stopped when the call ended".

An output too large to allocate raises a MemoryError that names the kernel and the bytes, never a
crash; the child caps its address space (RLIMIT_AS) just above what the inputs use."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

CHILD = textwrap.dedent("""
    import json, os, signal, sys, threading, time
    import ml_dtypes, numpy as np, fuel_cy
    sys.path.insert(0, {tests!r})
    import reference_impl as ref

    case, signame = {case!r}, {signame!r}
    rng = np.random.default_rng(0)
    if case == "naive_f64":
        q = rng.standard_normal((1, 8, 8192, 128))
        kernel, args, kw = fuel_cy.attention_naive, (q, q.copy(), q.copy()), {{}}
    elif case == "flash_f32":
        q = rng.standard_normal((1, 8, 16384, 128), dtype=np.float32)
        kernel, args, kw = fuel_cy.attention_flash, (q, q.copy(), q.copy()), {{"causal": True}}
    elif case == "backward_f32":
        q = rng.standard_normal((1, 2, 16384, 128), dtype=np.float32)
        kernel, args, kw = fuel_cy.attention_flash_backward, (q, q.copy(), q.copy(), q.copy()), {{}}
    elif case == "flash_mixed_bf16":
        q = rng.standard_normal((1, 8, 16384, 128), dtype=np.float32).astype(ml_dtypes.bfloat16)
        kernel, args, kw = fuel_cy.attention_flash_mixed, (q, q.copy(), q.copy()), {{}}
    elif case == "paged_f32":
        # 8 sequences of 8192 tokens sharing one pool of 512 blocks, 1024 query rows each
        pool = rng.standard_normal((512, 16, 8, 128), dtype=np.float32)
        table = np.tile(np.arange(512, dtype=np.uint32), (8, 1))
        q = rng.standard_normal((8, 32, 1024, 128), dtype=np.float32)
        kernel, args, kw = fuel_cy.attention_paged_naive, (q, pool, pool.copy(), table,
                                                            np.full(8, 8192, np.uint32)), {{}}
    before = [a.copy() for a in args]

    class Stop(Exception):
        pass

    def handler(signum, frame):
        raise Stop("from the handler")

    if signame == "SIGUSR1":
        signal.signal(signal.SIGUSR1, handler)
    else:
        # Python leaves SIGINT ignored when it starts with it ignored (under a background job of a
        # non-interactive shell, say); at a terminal Ctrl-C reaches the default handler: install it
        signal.signal(signal.SIGINT, signal.default_int_handler)
    sent = {{}}

    def fire():
        sent["t"] = time.perf_counter()
        os.kill(os.getpid(), getattr(signal, signame))

    threading.Timer(0.3, fire).start()
    t0 = time.perf_counter()
    try:
        kernel(*args, **kw)
        raised = None
    except (KeyboardInterrupt, Stop) as exc:
        raised = type(exc).__name__ + ": " + str(exc)
    latency = time.perf_counter() - sent.get("t", t0)
    untouched = all(np.array_equal(a, b) and a.tobytes() == b.tobytes() for a, b in zip(args, before))
    # the next call works and is right
    x = rng.standard_normal((1, 2, 37, 16))
    err = float(np.max(np.abs(fuel_cy.attention_naive(x, x, x) - ref.forward(x, x, x))))
    print(json.dumps({{"raised": raised, "latency": latency, "untouched": untouched, "next_err": err}}))
""")


def _run(case: str, signame: str) -> dict:
    from conftest import ROOT

    code = CHILD.format(tests=str(ROOT / "tests"), case=case, signame=signame)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("case", ["naive_f64", "flash_f32", "backward_f32", "flash_mixed_bf16", "paged_f32"])
def test_ctrl_c_stops_a_long_call_while_it_runs(case):
    r = _run(case, "SIGINT")
    assert r["raised"] is not None and r["raised"].startswith("KeyboardInterrupt"), r
    assert r["latency"] < 1.0, r
    assert r["untouched"], "an interrupted call changed its inputs"
    assert r["next_err"] < 1e-12, r


def test_a_handlers_own_exception_comes_out_of_the_call():
    r = _run("flash_f32", "SIGUSR1")
    assert r["raised"] == "Stop: from the handler", r
    assert r["latency"] < 1.0, r
    assert r["untouched"] and r["next_err"] < 1e-12, r


OOM_CHILD = textwrap.dedent("""
    import json, resource
    import ml_dtypes, numpy as np, fuel_cy
    case = {case!r}
    rng = np.random.default_rng(0)
    T = {{"f32": np.float32, "bf16": ml_dtypes.bfloat16}}[case.split("_")[-1]]
    q = rng.standard_normal((1, 8, 32768, 64), dtype=np.float32).astype(T)
    q = np.concatenate([q] * 4, axis=2)   # [1, 8, 131072, 64]: 256 MiB in f32, 128 MiB in bf16
    kernel = {{"flash_f32": fuel_cy.attention_flash, "flash_mixed_bf16": fuel_cy.attention_flash_mixed,
              "flash_mixed_lse_bf16": fuel_cy.attention_flash_mixed,
              "backward_f32": fuel_cy.attention_flash_backward}}[case]
    args = (q, q, q, q) if case.startswith("backward") else (q, q, q)
    kw = {{"return_lse": True}} if "lse" in case else {{}}   # lse [1, 8, 131072] float32 too
    tuples = case.startswith("backward") or "lse" in case
    fuel_cy.attention_flash(q[:, :, :8].astype(np.float32), q[:, :, :8].astype(np.float32),
                            q[:, :, :8].astype(np.float32))   # threads and temporaries exist
    vm = int([l for l in open("/proc/self/status") if l.startswith("VmSize")][0].split()[1]) * 1024
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (vm + q.nbytes // 2, hard))
    try:
        kernel(*args, **kw)
        message = None
    except MemoryError as exc:
        message = str(exc)
    resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    small = np.ascontiguousarray(q[:, :, :64])
    ok = bool(np.isfinite(kernel(*((small,) * len(args)), **kw)[0] if tuples
                          else kernel(*((small,) * len(args)))).all())
    lse = 4 * q.shape[0] * q.shape[1] * q.shape[2] if "lse" in case else 0
    print(json.dumps({{"message": message, "need": q.nbytes, "lse": lse, "next_ok": ok}}))
""")


@pytest.mark.parametrize("case,kernel,outputs", [
    ("flash_f32", "attention_flash", 1),
    ("flash_mixed_bf16", "attention_flash_mixed", 1),
    ("flash_mixed_lse_bf16", "attention_flash_mixed", 1),   # lse asked: counted, in float32
    ("backward_f32", "attention_flash_backward", 3),
])
def test_an_output_too_large_for_memory_is_a_memory_error_naming_kernel_and_bytes(case, kernel, outputs):
    proc = subprocess.run([sys.executable, "-c", OOM_CHILD.format(case=case)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    assert r["message"] is not None, "the call succeeded under the memory cap"
    assert r["message"].startswith(f"{kernel}: not enough memory"), r
    assert f"its outputs need {outputs * r['need'] + r['lse']} bytes" in r["message"], r
    assert ("lse [1, 8, 131072] F32 = 4.0 MiB" in r["message"]) == (r["lse"] > 0), r
    assert r["next_ok"], r
