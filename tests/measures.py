"""How the tests compare results (numpy only, so tests/wheel_check.py can use it in a bare venv)."""
from __future__ import annotations

import numpy as np


def rel(out, expected) -> float:
    """max |out - expected| / max |expected|, in float64."""
    out64, exp64 = np.asarray(out, np.float64), np.asarray(expected, np.float64)
    return float(np.max(np.abs(out64 - exp64)) / max(float(np.max(np.abs(exp64))), 1e-30))


def bits(result) -> bytes:
    """The raw bytes of a result or a tuple of results (bitwise comparisons)."""
    parts = result if isinstance(result, tuple) else (result,)
    return b"".join(np.ascontiguousarray(p).view(np.uint8).tobytes() for p in parts)
