"""How the tests compare results (numpy only, so tests/wheel_check.py can use it in a bare venv)."""
from __future__ import annotations

import math
import threading
import tracemalloc

import numpy as np


def rel(out, expected) -> float:
    """max |out - expected| / max |expected|, in float64."""
    out64, exp64 = np.asarray(out, np.float64), np.asarray(expected, np.float64)
    if exp64.size == 0:
        return 0.0
    return float(np.max(np.abs(out64 - exp64)) / max(float(np.max(np.abs(exp64))), 1e-30))


# The tests' own accuracy bounds against the float64 reference, as max |out - ref| / max |ref|
# (rel above).  They are the numbers the Precision page documents; test_tolerance.py checks that
# fuel_cy.harness.tolerance (which the CLI and the page use) states the same, so a loosened package
# bound cannot loosen the tests.
#   f64 1e-12 (backward 1e-10), f32 2e-5 (backward 1e-4): a few hundred ulps of the longest sums.
#   bf16/f16 "math in T": every step rounds, and rounding errors of independent steps add like a
#   random walk over the D products of a dot and the Sk terms of a sum: c * u * sqrt(D + Sk), u the
#   unit roundoff of T, c = 8 forward (outputs averaging many values are smaller than the values,
#   and the error is measured against the largest output) and 4 backward.  Half-type kernels are
#   pinned bit for bit to the emulation as well; this bound is the sanity check on top.
#   bf16/f16 with float32 math (the mixed contract): 1e-2 and 2e-3, as the contract states.
UNIT_ROUNDOFF = {"F64": 2.0 ** -53, "F32": 2.0 ** -24, "BF16": 2.0 ** -8, "F16": 2.0 ** -11}


def large_score_allowance(code: str, row_max: float, vmax: float) -> float:
    """What math in T may lose to large scores, as an absolute error of an output: rounding a score
    s to T moves it by up to u|s|, so where scores are large (ALiBi over hundreds of positions, up to
    ~150 in the tile fuzz) the weights near a row's max m (scores about m, each off by u|m|, the
    max and the shift too) change by a factor up to exp(2u|m|), and the output, a weighted mean of
    v, by up to (exp(2u|m|) - 1) max|v|.  The random-walk bound above assumes moderate scores; at
    |m| ~ 66 in bf16 this term is larger (a fuzz case measured 0.97 relative error there, bit for
    bit the emulation's)."""
    return (math.exp(2.0 * UNIT_ROUNDOFF[code] * row_max) - 1.0) * vmax
MIXED_BOUNDS = {"BF16": 1e-2, "F16": 2e-3}


def bound(code: str, d: int, sk: int, backward: bool = False, compute: str = "T") -> float:
    if compute == "f32" and code in MIXED_BOUNDS:
        return MIXED_BOUNDS[code]
    if code == "F64":
        return 1e-10 if backward else 1e-12
    if code == "F32":
        return 1e-4 if backward else 2e-5
    return (4.0 if backward else 8.0) * UNIT_ROUNDOFF[code] * math.sqrt(max(d + sk, 1))


def bits(result) -> bytes:
    """The raw bytes of a result or a tuple of results (bitwise comparisons)."""
    parts = result if isinstance(result, tuple) else (result,)
    return b"".join(np.ascontiguousarray(p).view(np.uint8).tobytes() for p in parts)


def near_in_another_f32_order(out, f32, terms: int, vmax: float) -> bool:
    """A bf16 result of float32 sums taken in another order (vdpbf16ps scores, AMX tile products)
    against the float32 kernel's result on the same values: each element within one bf16 ulp of the
    float32 value, plus what two orders of a float32 sum of `terms` terms, each at most vmax, may
    differ by (terms * 2^-24 * vmax each).  Per element, so a wrong row or column fails; the slack
    matters only where a sum cancels to far below vmax, where one bf16 ulp is tiny."""
    out64, f64 = np.asarray(out, np.float64), np.asarray(f32, np.float64)
    ulp = np.exp2(np.floor(np.log2(np.maximum(np.abs(f64), 2.0 ** -126))) - 7)
    return bool(np.all(np.abs(out64 - f64) <= ulp + 2.0 * terms * 2.0 ** -24 * vmax))


def peak_bytes_in_fresh_thread(call):
    """(result, peak bytes traced) of call() on a new thread, whose thread-local temporaries start
    empty, so every array the call needs is allocated while traced."""
    box = {}
    tracemalloc.start()
    try:
        def run():
            try:
                box["out"] = call()
            except BaseException as exc:  # re-raised on the test's thread
                box["error"] = exc

        worker = threading.Thread(target=run)
        worker.start()
        worker.join()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    if "error" in box:
        raise box["error"]
    return box["out"], peak
