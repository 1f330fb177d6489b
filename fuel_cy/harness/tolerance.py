"""Documented accuracy bounds against the float64 reference (one place; tests and CLI use it).

Errors are measured as max|out - ref| / max(max|ref|, tiny).

- f64: 1e-12 (1e-10 for the backward, whose gradients sum more terms).
- f32: 2e-5 forward, 1e-4 backward.
- bf16 / f16 with float32 math (fuel_cy's mixed-precision contract: inputs widened exactly, every
  step in float32, outputs rounded once to T): 1e-2 (bf16) and 2e-3 (f16), as the contract states;
  the one rounding alone costs up to u = 2^-8 / 2^-11 of an element.
- bf16 / f16 ("math in T": every step rounded to T): 8 * u * sqrt(D + Sk) forward and
  4 * u * sqrt(D + Sk) backward, where u is the unit roundoff of T (2^-8 for bf16, 2^-11 for
  f16).  The square root reflects that rounding errors of independent steps add like a random
  walk.  Over the test suite's randomized cases (3 seeds each) the worst observed factors were
  6.4 forward (Sq = 1, Sk = 300: outputs are averages of many rows, small next to their error)
  and 1.0 backward.  The random walk assumes moderate scores: math in T also rounds each score s
  by up to u|s|, so with large scores (ALiBi over hundreds of positions) the weights near a row's
  largest score m move by a factor up to exp(2u|m|), the output by up to (exp(2u|m|) - 1) max|v|.
  A bf16 case with |m| ~ 66-97 (D = 1, 240 x 211 positions) measured 0.97, bit for bit what the
  contract's "every step rounded" defines: the contract calls these kernels precision-sensitive at
  half precision, and the mixed kernels (float32 math) are the accurate ones.
"""
from __future__ import annotations

import math

from ..dtypes import DTYPES

UNIT_ROUNDOFF = {code: d.unit_roundoff for code, d in DTYPES.items() if d.unit_roundoff is not None}


MIXED_BOUNDS = {"BF16": 1e-2, "F16": 2e-3}


def bound(dtype: str, d: int, sk: int, backward: bool = False, compute: str = "T") -> float:
    if compute == "f32" and dtype in MIXED_BOUNDS:
        return MIXED_BOUNDS[dtype]
    if dtype == "F64":
        return 1e-10 if backward else 1e-12
    if dtype == "F32":
        return 1e-4 if backward else 2e-5
    factor = 4.0 if backward else 8.0
    return factor * UNIT_ROUNDOFF[dtype] * math.sqrt(max(d + sk, 1))


def relative_error(out, ref) -> float:
    import numpy as np

    out64 = np.asarray(out, dtype=np.float64)
    ref64 = np.asarray(ref, dtype=np.float64)
    if ref64.size == 0:
        return 0.0
    scale = max(float(np.max(np.abs(ref64))), 1e-30)
    return float(np.max(np.abs(out64 - ref64))) / scale
