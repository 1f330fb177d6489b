"""Run-time CPU dispatch: pick the compiled level of the attention core that this CPU supports.

The build compiles the hand-written core once per CPU level (`cpu_levels.py`) into
`fuel_cy._generated._core_<level>` and records, per level, every instruction-set feature its
compiler flags enable.  At import the best level whose features cpuid (and the OS's saved
register state) reports is loaded; ``FUEL_CY_CPU_CAPABILITY=<level>`` forces another one.  A level
is never imported on a CPU that lacks one of its features, so no level can execute an
instruction the CPU does not have.
"""
from __future__ import annotations

import importlib
import os
from functools import lru_cache
from pathlib import Path
from types import ModuleType
from typing import Any, Mapping, Optional, cast

from ..errors import CpuCapabilityError
from .cpu_levels import ENV_CAPABILITY

__all__ = ["CpuCapabilityError", "capability", "compiled_levels", "core", "cpu_features", "cpu_name",
           "load_level", "missing_features", "peak_gflops", "supported_levels"]


def _build_levels() -> Mapping[str, Mapping[str, Any]]:
    from .._generated._build_info import BUILD_INFO

    return cast("Mapping[str, Mapping[str, Any]]", BUILD_INFO["levels"])


@lru_cache(maxsize=1)
def _probe() -> tuple[frozenset[str], str, int, int]:
    from .. import _cpuid

    return _cpuid.probe()


def cpu_features() -> frozenset[str]:
    """Instruction-set features this CPU and its OS let the process use (cpuid + xgetbv)."""
    return _probe()[0]


@lru_cache(maxsize=1)
def cpu_name() -> str:
    """The CPU's model name (as /proc/cpuinfo gives it), else vendor, family and model."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    _, vendor, family, model = _probe()
    return f"{vendor or 'unknown vendor'} family {family} model {model}"


def compiled_levels() -> tuple[str, ...]:
    """The levels this build contains, from the most portable to the fastest."""
    return tuple(_build_levels())


def missing_features(level: str) -> list[str]:
    """Features `level`'s code may use that this CPU (or its OS) does not provide."""
    return sorted(set(_build_levels()[level]["features"]) - cpu_features())


def supported_levels() -> tuple[str, ...]:
    """The compiled levels this CPU can run, from the most portable to the fastest."""
    return tuple(name for name in compiled_levels() if not missing_features(name))


def _describe_supported() -> str:
    ok = supported_levels()
    return (f"levels this CPU supports in this build: {', '.join(ok)}" if ok
            else "this CPU supports none of this build's levels")


def choose(requested: Optional[str]) -> str:
    """The level to load: `requested` (validated), else the fastest supported one."""
    if requested is None or not requested.strip():
        ok = supported_levels()
        if not ok:
            details = "; ".join(f"{n} needs {', '.join(missing_features(n))}" for n in compiled_levels())
            raise CpuCapabilityError(
                f"fuel_cy: this CPU ({cpu_name()}) supports none of the compiled levels "
                f"({details}); build from source with FUEL_CY_NATIVE=1 for this machine")
        return ok[-1]
    _require(requested.strip().lower(), f"{ENV_CAPABILITY}={requested!r}: ")
    return requested.strip().lower()


def _require(name: str, prefix: str = "") -> None:
    """Raise CpuCapabilityError unless `name` is compiled and this CPU can run it."""
    if name not in compiled_levels():
        raise CpuCapabilityError(f"{prefix}this build has no level {name!r}; compiled levels: "
                                 f"{', '.join(compiled_levels())} ({_describe_supported()})")
    missing = missing_features(name)
    if missing:
        raise CpuCapabilityError(f"{prefix}this CPU ({cpu_name()}) lacks {', '.join(missing)}, "
                                 f"which level {name!r} uses; {_describe_supported()}")


def load_level(name: str) -> ModuleType:
    """Import the core compiled for `name` (after checking that this CPU supports it)."""
    _require(name)
    return importlib.import_module(f"fuel_cy._generated._core_{name}")


@lru_cache(maxsize=1)
def capability() -> str:
    """The level in use in this process (chosen once, at the first import of the kernels)."""
    return choose(os.environ.get(ENV_CAPABILITY))


@lru_cache(maxsize=1)
def core() -> ModuleType:
    """The core module of the level in use."""
    return load_level(capability())


PEAK_KINDS = ("f32", "f64", "bf16", "f16 rounded")


def peak_gflops(kind: str, nthreads: Optional[int] = None) -> Optional[float]:
    """The arithmetic peak of the level in use, measured: GFLOP/s of `nthreads` threads (default:
    the kernels' count, get_num_threads) running its register-only multiply-add loop (kind "f32",
    "f64", "bf16" for vdpbf16ps, None at a level without it, or "f16 rounded": each product and
    sum rounded to binary16, the f16 "math in T" kernels' arithmetic).  The ceiling a compute-bound
    kernel's rate is judged against (`fuel-cy bench`).  In a process forked after a thread team
    existed it runs on one thread, as the kernels do."""
    from . import _threads

    if kind not in PEAK_KINDS:
        raise ValueError(f"peak_gflops: kind must be one of {', '.join(PEAK_KINDS)}, got {kind!r}")
    n = _threads.get_num_threads() if nthreads is None else _threads.team_of(nthreads)
    return cast("Optional[float]", core().peak_gflops(kind, n))


def read_pass(buf: Any, nthreads: Optional[int] = None) -> float:
    """One read of a C-contiguous float32 array by `nthreads` threads (default: the kernels'
    count), each its own share; returns the sum of its values.  Timed, the machine's read rate:
    what `fuel-cy bench` sets a memory-bound kernel's reads against beside the copy rate."""
    from . import _threads

    n = _threads.get_num_threads() if nthreads is None else _threads.team_of(nthreads)
    return cast(float, core().read_pass(buf, n))
