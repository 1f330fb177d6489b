"""Small reference checks for an installed fuel_cy, run as a script in a fresh venv (and under
qemu as an older CPU) by tests/test_distribution.py.  Prints one JSON object:

  {"level": <cpu level in use>, "errors": {case: relative error}, "bounds": {case: bound},
   "deterministic": {case: bool}}

Only numpy, tests/reference_impl.py (the suite's own float64 reference) and tests/measures.py
besides fuel_cy.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import reference_impl as ref  # noqa: E402
from measures import bits, rel  # noqa: E402

import fuel_cy  # noqa: E402

# f32 forward / backward and f64 bounds of the documented accuracy (site/semantics.md)
BOUNDS = {"F32": (2e-5, 1e-4), "F64": (1e-12, 1e-10)}


def main() -> None:
    rng = np.random.default_rng(12)
    errors, bounds, deterministic = {}, {}, {}

    def check(name, dtype, fn, expected, backward=False):
        outs = []
        for threads in (1, 2):
            fuel_cy.set_num_threads(threads)
            outs.append(fn())
        fuel_cy.set_num_threads(0)
        deterministic[name] = bits(outs[0]) == bits(outs[1])
        got = outs[0] if isinstance(outs[0], tuple) else (outs[0],)
        exp = expected if isinstance(expected, tuple) else (expected,)
        errors[name] = max(rel(g, e) for g, e in zip(got, exp))
        bounds[name] = BOUNDS[dtype][1 if backward else 0]

    for dtype, code in ((np.float32, "F32"), (np.float64, "F64")):
        # ragged sizes, GQA, a tile edge (Sk > 128), every mask and score option
        q = rng.standard_normal((2, 4, 37, 24)).astype(dtype)
        k = rng.standard_normal((2, 2, 150, 24)).astype(dtype)
        v = rng.standard_normal((2, 2, 150, 24)).astype(dtype)
        slopes = (rng.random(4) * 0.3).astype(dtype)
        check(f"flash causal {code}", code, lambda: fuel_cy.attention_flash(q, k, v, causal=True),
              ref.forward(q, k, v, causal=True))
        check(f"naive window+softcap+alibi {code}", code,
              lambda: fuel_cy.attention_naive(q, k, v, slopes, window_size_left=20, window_size_right=5, softcap=7.0),
              ref.forward(q, k, v, slopes, left=20, right=5, softcap=7.0))
        do = rng.standard_normal(q.shape).astype(dtype)
        check(f"backward causal {code}", code, lambda: fuel_cy.attention_flash_backward(q, k, v, do, causal=True),
              ref.backward(q, k, v, do, causal=True), backward=True)
        nblk, bs = 24, 16
        kc = rng.standard_normal((nblk, bs, 2, 24)).astype(dtype)
        vc = rng.standard_normal((nblk, bs, 2, 24)).astype(dtype)
        table = rng.permutation(nblk)[:2 * 12].reshape(2, 12).astype(np.uint32)
        lens = np.array([190, 17], np.uint32)
        qd = rng.standard_normal((2, 4, 1, 24)).astype(dtype)
        check(f"paged decode {code}", code, lambda: fuel_cy.attention_paged_naive(qd, kc, vc, table, lens),
              ref.paged(qd, kc, vc, table, lens))
    print(json.dumps({"level": fuel_cy.build_info()["cpu_capability"], "errors": errors, "bounds": bounds,
                      "deterministic": deterministic}))


if __name__ == "__main__":
    main()
