"""How the tests compare results (numpy only, so tests/wheel_check.py can use it in a bare venv)."""
from __future__ import annotations

import threading
import tracemalloc

import numpy as np


def rel(out, expected) -> float:
    """max |out - expected| / max |expected|, in float64."""
    out64, exp64 = np.asarray(out, np.float64), np.asarray(expected, np.float64)
    return float(np.max(np.abs(out64 - exp64)) / max(float(np.max(np.abs(exp64))), 1e-30))


def bits(result) -> bytes:
    """The raw bytes of a result or a tuple of results (bitwise comparisons)."""
    parts = result if isinstance(result, tuple) else (result,)
    return b"".join(np.ascontiguousarray(p).view(np.uint8).tobytes() for p in parts)


def ulps16(a, b) -> int:
    """The largest distance, in units in the last place, between two bf16 or float16 arrays of
    the same shape (NaNs excluded): bit patterns mapped to a monotone integer line."""
    def line(x):
        u = np.ascontiguousarray(x).view(np.uint16).astype(np.int64)
        return np.where(u & 0x8000, -(u & 0x7FFF), u)
    a, b = np.asarray(a), np.asarray(b)
    if a.size == 0:
        return 0
    return int(np.max(np.abs(line(a) - line(b))))


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
