"""Run-time CPU dispatch: the cpuid probe, the choice of level, and every compiled level forced in
turn (FUEL_CY_CPU_CAPABILITY, in a subprocess) through the kernel suites."""
from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import fuel_cy
import fuel_cy.runtime.cpu as cpu
from fuel_cy.runtime.cpu_levels import ENV_CAPABILITY, X86_64_LEVELS

from conftest import ROOT

TESTS = Path(__file__).resolve().parent
X86 = platform.machine() in ("x86_64", "AMD64")
# the suites that exercise the core: forward, paged, backward, half-type bits, mixed precision,
# determinism
LEVEL_SUITES = ["test_kernels_forward.py", "test_paged_and_backward.py", "test_half_precision.py", "test_mixed.py",
                "test_determinism.py", "test_extremes.py", "test_varlen.py", "test_sdpa.py",
                "test_sdpa_torch.py"]


def _fake_cpu(monkeypatch, features):
    monkeypatch.setattr(cpu, "_probe", lambda: (frozenset(features), "FakeVendor", 6, 1))
    monkeypatch.setattr(cpu, "cpu_name", lambda: "a fake CPU")


def _features(level: str) -> set[str]:
    return set(fuel_cy.build_info()["levels"][level]["features"])


def test_build_info_lists_the_levels_and_the_one_in_use():
    info = fuel_cy.build_info()
    levels = info["cpu_capabilities"]
    if X86:
        assert levels[:3] == ["default", "avx2", "avx512"], levels
    for name in levels:
        assert info["levels"][name]["compile_args"] and "features" in info["levels"][name]
    assert info["cpu_capability"] in info["supported_capabilities"]
    assert info["cpu_capability"] == (os.environ.get(ENV_CAPABILITY) or info["supported_capabilities"][-1])
    assert "-march=native" not in " ".join(a for n in levels if n != "native" for a in info["levels"][n]["compile_args"])


@pytest.mark.skipif(not X86, reason="x86 feature names")
def test_each_level_needs_what_its_isa_level_defines():
    assert {"sse4_2", "popcnt", "ssse3"} <= _features("default") and "avx" not in _features("default")
    assert {"avx2", "fma", "f16c", "bmi2"} <= _features("avx2") and "avx512f" not in _features("avx2")
    assert {"avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512cd"} <= _features("avx512")
    assert "avx512_bf16" in _features("avx512_bf16") and "avx512_bf16" not in _features("avx512")


def test_each_level_measures_its_arithmetic_peak():
    """The ceilings `fuel-cy bench` judges compute-bound misses against (fc_peak.h): every level
    this CPU runs measures a positive, finite f32, f64 and f16-rounded rate on one and on two
    threads, and the bf16 dot product's exactly where the level compiles AVX512-BF16; a kind or
    thread count it cannot measure is an error naming what it got."""
    for name in fuel_cy.build_info()["supported_capabilities"]:
        core = cpu.load_level(name)
        for kind in ("f32", "f64", "bf16", "f16 rounded"):
            for threads in (1, 2):
                rate = core.peak_gflops(kind, threads, 0.002, 1)
                if kind == "bf16" and "avx512_bf16" not in _features(name):
                    assert rate is None, (name, rate)
                else:
                    assert rate is not None and 0 < rate < 1e6, (name, kind, threads, rate)
        with pytest.raises(ValueError, match="nthreads must be >= 1, got 0"):
            core.peak_gflops("f32", 0)
    with pytest.raises(ValueError, match="kind must be one of f32, f64, bf16, f16 rounded, got 'f16'"):
        cpu.peak_gflops("f16", 1)


def test_each_level_reads_every_value_of_its_read_probe():
    """fc_peak.h fc_read_pass, the read the bench times beside memory-bound calls: on every level
    and thread count it reads each value once (the sum of distinct small integers, exact in
    float32 per lane), empty and ragged lengths too; a thread count below 1 is an error."""
    for name in fuel_cy.build_info()["supported_capabilities"]:
        core = cpu.load_level(name)
        for n in (0, 1, 63, 1000, 100_003):
            x = (np.arange(n) % 7).astype(np.float32)
            for threads in (1, 2, 3):
                assert core.read_pass(x, threads) == float((np.arange(n) % 7).sum()), (name, n, threads)
        with pytest.raises(ValueError, match="nthreads must be >= 1, got 0"):
            core.read_pass(np.ones(4, np.float32), 0)
    assert cpu.read_pass(np.ones(10, np.float32)) == 10.0


@pytest.mark.skipif(not (X86 and Path("/proc/cpuinfo").exists()), reason="Linux x86 only")
def test_cpuid_probe_agrees_with_the_kernel():
    from fuel_cy import _cpuid

    flags = set()
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            break
    known = set(_cpuid.known_features())
    assert cpu.cpu_features() == flags & known


def test_fastest_supported_level_is_the_default(monkeypatch):
    _fake_cpu(monkeypatch, set().union(*(_features(n) for n in cpu.compiled_levels())))
    assert cpu.choose(None) == cpu.compiled_levels()[-1]
    assert cpu.choose("") == cpu.compiled_levels()[-1]
    assert cpu.choose(" Default ") == "default"


@pytest.mark.skipif(not X86, reason="x86 levels")
def test_a_cpu_without_avx512bw_gets_avx2(monkeypatch):
    _fake_cpu(monkeypatch, _features("avx512") - {"avx512bw"})
    assert cpu.supported_levels() == ("default", "avx2")
    assert cpu.choose(None) == "avx2"
    with pytest.raises(fuel_cy.CpuCapabilityError) as e:
        cpu.choose("avx512")
    msg = str(e.value)
    assert "FUEL_CY_CPU_CAPABILITY='avx512'" in msg and "lacks avx512bw" in msg
    assert "a fake CPU" in msg and "supports in this build: default, avx2" in msg


def test_unknown_level_names_the_compiled_ones(monkeypatch):
    with pytest.raises(fuel_cy.CpuCapabilityError) as e:
        cpu.choose("avx9000")
    assert "no level 'avx9000'" in str(e.value) and ", ".join(cpu.compiled_levels()) in str(e.value)


@pytest.mark.skipif(not X86, reason="x86 levels")
def test_a_cpu_below_every_level_is_a_clear_error(monkeypatch):
    _fake_cpu(monkeypatch, {"pni", "ssse3", "cx16"})  # a Core 2: no SSE4.2, no POPCNT
    with pytest.raises(fuel_cy.CpuCapabilityError) as e:
        cpu.choose(None)
    msg = str(e.value)
    assert "supports none of the compiled levels" in msg and "default needs popcnt, sse4_1, sse4_2" in msg
    with pytest.raises(fuel_cy.CpuCapabilityError):
        cpu.load_level("default")


def _env(level: str) -> dict[str, str]:
    return {**os.environ, ENV_CAPABILITY: level}


@pytest.mark.slow
@pytest.mark.parametrize("level", [lv.name for lv in X86_64_LEVELS] if X86 else ["default"])
def test_forced_level_passes_the_kernel_suites(level):
    """Every compiled level the CPU supports, forced, passes the forward, paged, backward,
    half-type (bit-exact emulation) and determinism suites; one it lacks is refused cleanly."""
    assert level in cpu.compiled_levels(), f"{level} was not compiled"
    probe = subprocess.run([sys.executable, "-c", "import fuel_cy; print(fuel_cy.build_info()['cpu_capability'])"],
                           capture_output=True, text=True, env=_env(level), cwd=ROOT)
    if level not in cpu.supported_levels():
        assert probe.returncode != 0
        assert "CpuCapabilityError" in probe.stderr and f"lacks {', '.join(cpu.missing_features(level))}" in probe.stderr
        return
    assert probe.returncode == 0 and probe.stdout.strip() == level, probe.stderr
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x",
                        *(str(TESTS / f) for f in LEVEL_SUITES)],
                       capture_output=True, text=True, env=_env(level), cwd=ROOT, timeout=1800)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert " passed" in r.stdout and "failed" not in r.stdout
