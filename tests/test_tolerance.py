"""The yardsticks themselves.  The tests measure with their own rel and bound (tests/measures.py);
fuel_cy.harness.tolerance holds the package's copy, which the CLI and the Precision page report.
Both are checked here: if either broke (an error that reads 0, a bound that grows without limit), the
kernel tests would pass whatever the kernels computed, or the documentation would promise what
is not tested."""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

import fuel_cy.harness.tolerance as package
from measures import MIXED_BOUNDS, UNIT_ROUNDOFF, bound
from measures import rel as relative_error


def test_relative_error_is_the_largest_deviation_over_the_largest_reference_value():
    assert relative_error([1.0, -2.0, 0.5], [1.0, -2.0, 0.5]) == 0.0
    assert relative_error([1.0, -2.5, 0.5], [1.0, -2.0, 0.5]) == 0.25       # 0.5 / 2
    assert relative_error([1.3, -2.0, 0.5], [1.0, -2.0, 0.5]) == pytest.approx(0.15)
    assert relative_error([[0.0, 4.0]], [[0.0, -4.0]]) == 2.0               # signs count
    assert relative_error(np.zeros((2, 0)), np.zeros((2, 0))) == 0.0         # nothing to compare
    # computed in float64 whatever the operands' type: a bf16 result is compared exactly
    out = np.array([1.0, 3.0], dtype=ml_dtypes.bfloat16)
    assert relative_error(out, np.array([1.0, 3.0078125])) == pytest.approx(0.0078125 / 3.0078125)


def test_relative_error_never_reads_a_bad_result_as_good():
    for bad in (np.nan, np.inf, -np.inf):
        err = relative_error([1.0, bad], [1.0, 2.0])
        assert not err <= 1.0  # NaN compares false, inf is too large: either way the test fails
    # a zero reference does not divide by zero, and any deviation from it is huge
    assert relative_error([1e-3], [0.0]) > 1e20
    assert relative_error([0.0], [0.0]) == 0.0


def test_bounds_follow_the_unit_roundoff_and_the_problem_size():
    assert bound("F64", 64, 128) == 1e-12 and bound("F64", 64, 128, backward=True) == 1e-10
    assert bound("F32", 64, 128) == 2e-5 and bound("F32", 64, 128, backward=True) == 1e-4
    for dt in ("BF16", "F16"):
        u = UNIT_ROUNDOFF[dt]
        # at least the one rounding of an output, at most a small multiple of sqrt(n) roundings
        for d, sk in ((1, 1), (8, 12), (64, 128), (128, 4096)):
            b = bound(dt, d, sk)
            assert u <= b <= 8 * u * math.sqrt(d + sk)
            assert bound(dt, d, sk, backward=True) <= b
        assert bound(dt, 64, 128) < bound(dt, 64, 4096) < bound(dt, 128, 4096)
    assert bound("F16", 64, 128) < bound("BF16", 64, 128)          # f16 has 3 more bits
    assert bound("BF16", 64, 128) / bound("F16", 64, 128) == 8.0


def test_mixed_precision_bounds_are_the_contracts_and_independent_of_size():
    for dt, value in (("BF16", 1e-2), ("F16", 2e-3)):
        assert MIXED_BOUNDS[dt] == value
        assert bound(dt, 1, 1, compute="f32") == bound(dt, 256, 65536, compute="f32") == value
        assert UNIT_ROUNDOFF[dt] < value  # room for the one rounding of the output
    # float32 and float64 have no separate float32-compute bound
    assert bound("F32", 64, 128, compute="f32") == bound("F32", 64, 128)


def test_the_package_documents_the_bounds_the_tests_use():
    grid = [(code, d, sk, backward, compute) for code in ("F64", "F32", "BF16", "F16") for d in (1, 64, 130)
            for sk in (1, 300, 4096) for backward in (False, True) for compute in ("T", "f32")]
    for code, d, sk, backward, compute in grid:
        assert package.bound(code, d, sk, backward, compute) == bound(code, d, sk, backward, compute)
    rng = np.random.default_rng(0)
    for _ in range(20):
        a, b = rng.standard_normal((2, 7, 5))
        assert package.relative_error(a, b) == relative_error(a, b)
    assert package.relative_error(np.zeros(0), np.zeros(0)) == relative_error(np.zeros(0), np.zeros(0)) == 0.0
