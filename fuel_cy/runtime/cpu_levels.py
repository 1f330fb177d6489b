"""The CPU levels the attention core is compiled for: one extension module per level, picked at
import by what the CPU (and its OS) supports.  Pure data, standard library only: `setup.py` loads
this file by path to build the levels, and `fuel_cy.runtime.cpu` reads it to choose one.

Names follow PyTorch's CPU capabilities in lower case (`ATEN_CPU_CAPABILITY`), so a benchmark can
run both libraries at the same level.  Flags are the psABI micro-architecture levels, tuned for no
particular core: a wheel must run well on every CPU of its level.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Level:
    """One compiled variant of the core."""

    name: str
    flags: tuple[str, ...]
    summary: str


X86_64_LEVELS: tuple[Level, ...] = (
    Level("default", ("-march=x86-64-v2", "-mtune=generic"),
          "x86-64-v2: SSE4.2 and POPCNT, no AVX (any x86-64 CPU since 2009)"),
    Level("avx2", ("-march=x86-64-v3", "-mtune=generic"),
          "x86-64-v3: AVX2, FMA, F16C, BMI2 (Haswell, Zen 1 and later)"),
    Level("avx512", ("-march=x86-64-v4", "-mtune=generic"),
          "x86-64-v4: AVX-512 F/BW/CD/DQ/VL (Skylake-SP, Ice Lake, Zen 4 and later)"),
    Level("avx512_bf16", ("-march=x86-64-v4", "-mavx512bf16", "-mtune=generic"),
          "x86-64-v4 + AVX512-BF16: one-instruction bf16 rounding (Cooper Lake, Sapphire Rapids, Zen 4)"),
)
"""Ordered from the most portable to the fastest; the best one the CPU supports is the default."""

OTHER_LEVELS: tuple[Level, ...] = (
    Level("default", (), "the compiler's baseline for this architecture"),
)

NATIVE = Level("native", ("-march=native",),
               "this build machine's own instruction set (FUEL_CY_NATIVE=1; not for redistribution)")

ENV_CAPABILITY = "FUEL_CY_CPU_CAPABILITY"
"""Run-time switch: force a compiled level the CPU supports (e.g. to compare levels)."""

# Predefined compiler macros -> the CPU feature (Linux /proc/cpuinfo spelling) a level's code may
# then execute.  The build records, per level, every feature its flags enable; the run time loads
# a level only if cpuid reports all of them, so a level can never meet an instruction the CPU
# lacks, whatever the flags.  Features the core's code generation cannot reach are not listed.
MACRO_FEATURES: dict[str, str] = {
    "__SSE3__": "pni", "__SSSE3__": "ssse3", "__SSE4_1__": "sse4_1", "__SSE4_2__": "sse4_2",
    "__POPCNT__": "popcnt", "__GCC_HAVE_SYNC_COMPARE_AND_SWAP_16": "cx16",
    "__AVX__": "avx", "__AVX2__": "avx2", "__FMA__": "fma", "__F16C__": "f16c",
    "__BMI__": "bmi1", "__BMI2__": "bmi2", "__LZCNT__": "abm", "__MOVBE__": "movbe",
    "__AVX512F__": "avx512f", "__AVX512CD__": "avx512cd", "__AVX512BW__": "avx512bw",
    "__AVX512DQ__": "avx512dq", "__AVX512VL__": "avx512vl", "__AVX512IFMA__": "avx512ifma",
    "__AVX512VBMI__": "avx512vbmi", "__AVX512VBMI2__": "avx512_vbmi2",
    "__AVX512VNNI__": "avx512_vnni", "__AVX512BITALG__": "avx512_bitalg",
    "__AVX512VPOPCNTDQ__": "avx512_vpopcntdq", "__AVX512BF16__": "avx512_bf16",
    "__AVX512FP16__": "avx512_fp16", "__AVXVNNI__": "avx_vnni", "__GFNI__": "gfni",
    "__VAES__": "vaes", "__VPCLMULQDQ__": "vpclmulqdq", "__PCLMUL__": "pclmulqdq", "__AES__": "aes",
    "__SHA__": "sha_ni", "__ADX__": "adx", "__AMX_TILE__": "amx_tile", "__AMX_BF16__": "amx_bf16",
    "__AMX_INT8__": "amx_int8",
}


def levels_for(machine: str) -> tuple[Level, ...]:
    """The levels a build for `machine` (platform.machine()) compiles by default."""
    if machine.lower() in ("x86_64", "amd64"):
        return X86_64_LEVELS
    return OTHER_LEVELS


def all_level_names() -> tuple[str, ...]:
    """Every level name any build may compile (codegen renders a module stub for each)."""
    names: list[str] = []
    for level in (*X86_64_LEVELS, *OTHER_LEVELS, NATIVE):
        if level.name not in names:
            names.append(level.name)
    return tuple(names)


def features_from_macros(macros: str) -> list[str]:
    """CPU features implied by `cc -dM -E` output (sorted)."""
    defined = {line.split()[1] for line in macros.splitlines() if line.startswith("#define ")}
    return sorted({feat for macro, feat in MACRO_FEATURES.items() if macro in defined})
