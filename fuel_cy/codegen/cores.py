"""What the hand-written core provides, so codegen can wire contracts to it (and refuse what it
cannot wire).  A kernel in a contract without an entry here gets stubs that raise
NotImplementedError instead of returning wrong numbers."""
from __future__ import annotations

from typing import Mapping

# kernel -> dim symbols (contract spelling) of the tuple its driver takes, in order
DRIVER_DIMS: Mapping[str, tuple[str, ...]] = {
    "attention_naive": ("B", "Hq", "Hkv", "Sq", "Sk", "D"),
    "attention_flash": ("B", "Hq", "Hkv", "Sq", "Sk", "D"),
    "attention_paged_naive": ("B", "Hq", "Hkv", "Sq", "D", "block_size", "max_blocks_per_seq", "num_blocks"),
    "attention_flash_backward": ("B", "Hq", "Hkv", "Sq", "Sk", "D"),
}

# contract dtype -> (rounding tag, C work type, numpy work dtype)
POLICIES: Mapping[str, tuple[str, str, str]] = {
    "F32": ("RoundNone", "float", "float32"),
    "F64": ("RoundNone", "double", "float64"),
    "BF16": ("RoundBF16", "float", "float32"),
    "F16": ("RoundF16", "float", "float32"),
}
INT_WORK = {"U32": ("unsigned int", "uint32")}

# kernel -> hand-written step (drivers.pxi) applied to a half-type call's inputs before they are
# widened to float32 work arrays; it takes (inputs..., params) and returns the inputs to use.
HALF_PREPARE: Mapping[str, str] = {
    "attention_paged_naive": "_paged_live_blocks",  # widen the referenced blocks, not the pool
}

CORE_SOURCES = ("fc_math.h", "fc_simd.h", "policy.pxi", "blocks.pxi", "kernels.pxi", "drivers.pxi")
