"""The FKC block schema: which keys live where.

One table drives three things: recovering the nesting of flattened (column-0) YAML, the
canonical formatter's indentation, and the model builder's "unknown key" errors.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional, Union


@dataclass(frozen=True)
class MapNode:
    """A mapping with a fixed key set; a key maps to its child node or None for a leaf."""

    keys: Mapping[str, Optional["SchemaNode"]]


@dataclass(frozen=True)
class ListNode:
    """A block list whose items are mappings."""

    item: MapNode


@dataclass(frozen=True)
class FreeMapNode:
    """A mapping with user-chosen keys (identifiers) whose values share one schema."""

    value: MapNode


SchemaNode = Union[MapNode, ListNode, FreeMapNode]

LAYOUT_KEYS = ("contiguous", "strided", "broadcast_stride0", "start_offset", "reverse_strides")
LAYOUT = MapNode({k: None for k in LAYOUT_KEYS})
GATHER = MapNode({"kind": None, "block_table": None, "context_lens": None})
FDX = MapNode({"requires_ext": None, "symbolic_extent": None, "extent_kind": None, "gather": GATHER})
INPUT = MapNode({
    "name": None, "dtypes": None, "layout": LAYOUT, "rank": None, "dims": None,
    "shape_constraint": None, "optional": None, "fdx": FDX, "element_type": None, "min_rank": None,
})
FIELD = MapNode({"kind": None, "note": None, "constraint": None, "default": None})
OUTPUT = MapNode({
    "name": None, "dtype_rule": None, "shape_rule": None, "layout_guarantee": None, "aliasing": None,
    "when": None, "caller_buffer": None,
})
FAST_PATH = MapNode({"when": None, "note": None})
MEMORY = MapNode({"device_bytes": None, "host_bytes": None, "disk_bytes": None})

BLOCK = MapNode({
    "kernel": None,
    "fused_op": None,
    "fused_op_id": None,
    "blurb": None,
    "backend": None,
    "kernel_source": None,
    "entry_point": None,
    "kernel_revision_hash": None,
    "accept": MapNode({"inputs": ListNode(INPUT)}),
    "op_params": MapNode({"variant": None, "fields": FreeMapNode(FIELD)}),
    "return": MapNode({"outputs": ListNode(OUTPUT), "bundle": ListNode(OUTPUT)}),
    "caps": MapNode({
        "awkward_layout_strategy": None, "fast_paths": ListNode(FAST_PATH), "in_place": None,
        "alignment_bytes": None, "access_granularity_bits": None,
    }),
    "cost": MapNode({
        "provenance": None, "class": None, "flops": None, "bytes_moved": None,
        "overhead_ns": None, "memory": MEMORY,
    }),
    "precision": MapNode({
        "bit_stable_on_same_hardware": None, "max_ulp": None, "max_relative": None,
        "max_absolute": None, "audited": None, "notes": None, "compute": None,
    }),
    "determinism": None,
    "mask_alignment": None,
})

PROVIDER = MapNode({
    "name": None, "backend": None, "kernel_source": None, "link_registry": None, "revision_base": None,
})
FRONT_MATTER = MapNode({"fkc_version": None, "provider": PROVIDER})

# The dtype vocabulary (`dtypes:` of an input, `exec_dtypes` of a fused op) is fuel_cy.dtypes.DTYPES.
LAYOUT_POLICIES = ("required", "rejected", "accepted")
PARAM_KINDS = ("f32", "f64", "bool", "usize", "DynScalar")
# precision.compute: "T" (the default, as the seed's kernels: every step in the element type) or
# "f32" (no arithmetic narrower than float32: half inputs widened exactly, all arithmetic in
# float32, each output rounded once to T; float64 in its own type)
COMPUTE_MODES = ("T", "f32")
# mask_alignment: where causal masks and windows put query i: "top_left" (the default, as the
# seed's kernels: at key position i) or "bottom_right" (at i + Sk - Sq, per sequence: flash-attn
# >= 2.1, vLLM, a decode step that sees its whole cache)
MASK_ALIGNMENTS = ("top_left", "bottom_right")
# an input's element type: T, the kernel's (shared by every such float input), or its own dtype
# (float32 ALiBi slopes beside bfloat16 q, k, v)
ELEMENT_TYPES = ("T", "own")
