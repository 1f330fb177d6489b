"""Random attention problems for the tests: one place that draws q, k, v (, dO) and ALiBi slopes."""
from __future__ import annotations

import numpy as np


def attention_inputs(b, hq, hkv, sq, sk, d, dtype, alibi, seed=0, with_do=False, slope_scale=0.5):
    """(q, k, v, [do,] slopes) drawn in that order from one seeded generator."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((b, hq, sq, d)).astype(dtype)
    k = rng.standard_normal((b, hkv, sk, d)).astype(dtype)
    v = rng.standard_normal((b, hkv, sk, d)).astype(dtype)
    extra = [rng.standard_normal((b, hq, sq, d)).astype(dtype)] if with_do else []
    slopes = (rng.random(hq) * slope_scale).astype(dtype) if alibi else None
    return (q, k, v, *extra, slopes)
