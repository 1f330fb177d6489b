"""Input rules the contract states in prose rather than in its YAML (hand-written, one place).

- softcap: the score becomes tanh(s / c) * c, so c must be > 0.
- k_len: "None => full Sk; a live prefix" -- so 0 <= k_len <= Sk.
- varlen: cu_seqlens_q / cu_seqlens_k are B + 1 offsets from 0, non-decreasing, ending at the
  packed row counts of q and k.
- paged: "physical block index bounds-checked against num_blocks" for every block a sequence
  reads, and context_lens[b] may not exceed the table's capacity (max_blocks_per_seq * block_size).
  These run with the GIL, before any compute, so the nogil core never reads out of bounds.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np

from ..errors import InputError


def _softcap(kernel: str, arrays: dict, params: dict, where: str) -> None:
    cap = params.get("softcap")
    if cap is not None and not cap > 0:
        raise InputError(kernel, "param 'softcap'", "op_params.fields.softcap (prose: tanh(s/c)*c needs c > 0)",
                         f"received {cap!r}", where)


def _k_len(kernel: str, arrays: dict, params: dict, where: str) -> None:
    k_len = params.get("k_len")
    if k_len is not None and k_len > arrays["k"].shape[2]:
        raise InputError(kernel, "param 'k_len'", "op_params.fields.k_len (prose: live prefix, k_len <= Sk)",
                         f"received {k_len} but Sk = {arrays['k'].shape[2]}", where)


def _paged(kernel: str, arrays: dict, params: dict, where: str) -> None:
    table: np.ndarray = arrays["block_table"]
    lens: np.ndarray = arrays["context_lens"]
    num_blocks, block_size = arrays["k_cache"].shape[:2]
    capacity = table.shape[1] * block_size
    over = np.nonzero(lens.astype(np.int64) > capacity)[0]
    if over.size:
        b = int(over[0])
        raise InputError(kernel, "input 'context_lens'",
                         "prose: context_lens[b] <= max_blocks_per_seq * block_size",
                         f"context_lens[{b}] = {int(lens[b])} but capacity = {table.shape[1]} * {block_size} = {capacity}", where)
    if block_size == 0:
        return
    used = np.arange(table.shape[1])[None, :] < (-(-lens.astype(np.int64) // block_size))[:, None]
    bad = np.argwhere(used & (table.astype(np.int64) >= num_blocks))
    if bad.size:
        b, slot = (int(v) for v in bad[0])
        raise InputError(kernel, "input 'block_table'",
                         "prose: physical block index bounds-checked against num_blocks",
                         f"block_table[{b}, {slot}] = {int(table[b, slot])} but num_blocks = {num_blocks}", where)


def _cu_seqlens(kernel: str, arrays: dict, params: dict, where: str) -> None:
    """varlen: each cu_seqlens is B + 1 offsets into its packed rows, from 0, non-decreasing, to the
    row count (flash-attn's layout), so that every sequence's rows lie inside the arrays."""
    for name, rows_of in (("cu_seqlens_q", "q"), ("cu_seqlens_k", "k")):
        cu = np.asarray(arrays[name]).astype(np.int64)
        total = arrays[rows_of].shape[0]
        clause = f"prose: {name} holds B + 1 offsets: {name}[0] = 0, non-decreasing, {name}[B] = {rows_of}.shape[0]"
        if cu.size == 0:
            raise InputError(kernel, f"input {name!r}", clause, "an empty array (B + 1 >= 1 offsets)", where)
        if cu[0] != 0:
            raise InputError(kernel, f"input {name!r}", clause, f"{name}[0] = {int(cu[0])}", where)
        down = np.nonzero(np.diff(cu) < 0)[0]
        if down.size:
            b = int(down[0])
            raise InputError(kernel, f"input {name!r}", clause,
                             f"{name}[{b + 1}] = {int(cu[b + 1])} < {name}[{b}] = {int(cu[b])}", where)
        if cu[-1] != total:
            raise InputError(kernel, f"input {name!r}", clause,
                             f"{name}[{cu.size - 1}] = {int(cu[-1])} but {rows_of}.shape[0] = {total}", where)


# keyed by the core driver a kernel binds to (codegen/cores.py): a kernel served by a driver
# obeys that driver's rules, whichever contract declares it
# (the generated validators first try typed copies of these rules, fastcheck.pxi; a driver whose
# list differs from what the typed copy implements always gets these)
RULES: dict[str, list[Callable[..., None]]] = {
    "attention_naive": [_softcap, _k_len],
    "attention_flash": [_softcap, _k_len],
    "attention_paged_naive": [_softcap, _paged],
    "attention_flash_backward": [_softcap],
    "attention_varlen": [_softcap, _cu_seqlens],
    "attention_masked": [_softcap],
}


def check(kernel: str, driver: Optional[str], arrays: dict[str, Any], params: dict[str, Any], where: str) -> None:
    for rule in RULES.get(driver or "", []):
        rule(kernel, arrays, params, where)
