"""How contract kernels bind to the hand-written core: which driver (drivers.pxi) implements each
kernel, the dims it takes, and the element policy each dtype runs under.  Codegen refuses to wire
a kernel that is not listed here (it gets a stub that raises NotImplementedError)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional

FORWARD_DIMS = ("B", "Hq", "Hkv", "Sq", "Sk", "D")
PAGED_DIMS = ("B", "Hq", "Hkv", "Sq", "D", "block_size", "max_blocks_per_seq", "num_blocks")


@dataclass(frozen=True)
class CoreBinding:
    """One kernel's implementation in the core."""

    driver: str                    # drive_<driver> in drivers.pxi (also the key of _prose_checks.RULES)
    dims: tuple[str, ...]          # dim symbols (contract spelling) of the tuple the driver takes
    half_prepare: Optional[str] = None  # step applied to a half-type call's inputs before widening
    # bf16/f16 calls go to drive_<half_driver> instead, which takes is_f16 last and reads the
    # `half_storage` inputs in their 16-bit storage (uint16 views, never widened copies)
    half_driver: Optional[str] = None
    half_storage: tuple[str, ...] = ()


BINDINGS: Mapping[str, CoreBinding] = {
    "attention_naive": CoreBinding("attention_naive", FORWARD_DIMS),
    "attention_flash": CoreBinding("attention_flash", FORWARD_DIMS),
    # a half-type pool is widened for the core: only the blocks the live contexts reference
    "attention_paged_naive": CoreBinding("attention_paged_naive", PAGED_DIMS, "_paged_live_blocks"),
    "attention_flash_backward": CoreBinding("attention_flash_backward", FORWARD_DIMS),
    # fuel_cy's mixed-precision kernels (contracts/fuel-cy-mixed.md): the same drivers, run under
    # the float32 policy (precision.compute: f32)
    # bf16 scores by vdpbf16ps where the CPU level has AVX512-BF16
    "attention_flash_mixed": CoreBinding("attention_flash", FORWARD_DIMS, half_driver="attention_flash_half"),
    # the mixed paged kernel reads a bf16/f16 pool in place (decode is bound by the pool's bytes)
    "attention_paged_mixed": CoreBinding("attention_paged_naive", PAGED_DIMS,
                                         half_driver="attention_paged_half",
                                         half_storage=("k_cache", "v_cache")),
    "attention_flash_backward_mixed": CoreBinding("attention_flash_backward", FORWARD_DIMS,
                                                  half_driver="attention_flash_backward_half"),
}

# contract dtype -> (rounding tag, C work type, numpy work dtype) under "math in T"
POLICIES: Mapping[str, tuple[str, str, str]] = {
    "F32": ("RoundNone", "float", "float32"),
    "F64": ("RoundNone", "double", "float64"),
    "BF16": ("RoundBF16", "float", "float32"),
    "F16": ("RoundF16", "float", "float32"),
}


def policy(compute: str, dtype: str) -> Optional[tuple[str, str, str]]:
    """The element policy a dtype runs under.  compute "T": every step rounded to the element type;
    "f32": half inputs widened exactly and every step in float32 (the float32 policy), outputs
    rounded once to T when narrowed (drivers.pxi _from_work)."""
    if compute == "f32":  # float64 has no float32-math meaning: no entry
        return POLICIES["F32"] if dtype in ("F32", "BF16", "F16") else None
    return POLICIES.get(dtype)


INT_WORK = {"U32": ("unsigned int", "uint32")}

CORE_SOURCES = ("fc_math.h", "fc_simd.h", "fc_interrupt.h", "fastcheck.pxi", "policy.pxi", "blocks.pxi", "kernels.pxi", "drivers.pxi")
