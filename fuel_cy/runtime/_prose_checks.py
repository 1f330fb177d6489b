"""Input rules the contract states in prose rather than in its YAML (hand-written, one place).

- softcap: the score becomes tanh(s / c) * c, so c must be > 0.
- k_len: "None => full Sk; a live prefix" -- so 0 <= k_len <= Sk.
- varlen: cu_seqlens_q / cu_seqlens_k are B + 1 offsets from 0, non-decreasing, ending at the
  packed row counts of q and k (k's paged, with block_table: a table row holds each sequence);
  int32 index arrays hold no negative value where they are read.
- the model-facing and mixed backwards: the forward's out and lse, both or neither.
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


def _nonnegative(kernel: str, name: str, x: Any, where: str, read: Optional[np.ndarray] = None) -> None:
    """An int32 index array (flash-attn's and torch's dtype, read as the uint32 it equals) holds
    no negative value where it is read (`read`: a mask of the elements read; None: all): a
    negative block id or count would pass every bound below as a small number and be read by the
    core as one past 2**31."""
    a = None if x is None else np.asarray(x)
    if a is None or a.dtype != np.int32:
        return
    neg = np.argwhere(a < 0 if read is None else (a < 0) & read)
    if neg.size:
        at = tuple(int(i) for i in neg[0])
        shown = ", ".join(str(i) for i in at)
        raise InputError(kernel, f"input {name!r}", "prose: int32 index values are >= 0 where read (as the uint32 they equal)",
                         f"{name}[{shown}] = {int(a[at])}", where)


def _offsets(kernel: str, name: str, cu_in: Any, total: Optional[int], rows: str, where: str) -> np.ndarray:
    """B + 1 offsets from 0, non-decreasing, ending at `total` rows (`rows` says whose) unless None."""
    cu = np.asarray(cu_in).astype(np.int64)
    end = f", {name}[B] = {rows}" if total is not None else ""
    clause = f"prose: {name} holds B + 1 offsets: {name}[0] = 0, non-decreasing{end}"
    if cu.size == 0:
        raise InputError(kernel, f"input {name!r}", clause, "an empty array (B + 1 >= 1 offsets)", where)
    if cu[0] != 0:
        raise InputError(kernel, f"input {name!r}", clause, f"{name}[0] = {int(cu[0])}", where)
    down = np.nonzero(np.diff(cu) < 0)[0]
    if down.size:
        b = int(down[0])
        raise InputError(kernel, f"input {name!r}", clause,
                         f"{name}[{b + 1}] = {int(cu[b + 1])} < {name}[{b}] = {int(cu[b])}", where)
    if total is not None and cu[-1] != total:
        raise InputError(kernel, f"input {name!r}", clause, f"{name}[{cu.size - 1}] = {int(cu[-1])} but {rows} = {total}",
                         where)
    return cu


def _cu_seqlens(kernel: str, arrays: dict, params: dict, where: str) -> None:
    """varlen: cu_seqlens_q is B + 1 offsets into q's rows, from 0, non-decreasing, to the row
    count (flash-attn's layout); cu_seqlens_k the same into k's rows (the rows of its [NB, BS]
    leading dims), or with block_table each sequence's key count, which its table row must hold
    (every block it reads below NB); seqused_k[b] at most that count; max_seqlen_q/_k, when
    given, at least every lq/lk.  So every row a sequence reads lies inside the arrays."""
    q, k, table, used = arrays["q"], arrays["k"], arrays.get("block_table"), arrays.get("seqused_k")
    for name in ("cu_seqlens_q", "cu_seqlens_k", "seqused_k"):   # (block_table's live slots: below)
        _nonnegative(kernel, name, arrays.get(name), where)
    cu_q = _offsets(kernel, "cu_seqlens_q", arrays["cu_seqlens_q"], q.shape[0], "q.shape[0]", where)
    nb, bs = k.shape[0], k.shape[1]
    cu_k = _offsets(kernel, "cu_seqlens_k", arrays["cu_seqlens_k"], None if table is not None else nb * bs,
                    "the rows of k", where)
    lk = np.diff(cu_k)
    if used is not None:
        used = np.asarray(used).astype(np.int64)
        over = np.nonzero(used > lk)[0]
        if over.size:
            b = int(over[0])
            raise InputError(kernel, "input 'seqused_k'", "prose: seqused_k[b] <= cu_seqlens_k[b+1] - cu_seqlens_k[b]",
                             f"seqused_k[{b}] = {int(used[b])} but sequence {b} has {int(lk[b])} keys", where)
        lk = used
    if table is not None:
        capacity = table.shape[1] * bs
        over = np.nonzero(lk > capacity)[0]
        if over.size:
            b = int(over[0])
            raise InputError(kernel, "input 'block_table'", "prose: each sequence's keys fit its table row (MBS * BS)",
                             f"sequence {b} has {int(lk[b])} keys but block_table.shape[1] * BS = "
                             f"{table.shape[1]} * {bs} = {capacity}", where)
        if bs:
            live = np.arange(table.shape[1])[None, :] < (-(-lk // bs))[:, None]
            # a slot no sequence reads may hold anything (as with uint32: padding); a read one not < 0
            _nonnegative(kernel, "block_table", table, where, read=live)
            bad = np.argwhere(live & (np.asarray(table).astype(np.int64) >= nb))
            if bad.size:
                b, slot = (int(x) for x in bad[0])
                raise InputError(kernel, "input 'block_table'", "prose: every block a sequence reads is below NB",
                                 f"block_table[{b}, {slot}] = {int(table[b, slot])} but k has NB = {nb} blocks", where)
    for param, lengths in (("max_seqlen_q", np.diff(cu_q)), ("max_seqlen_k", lk)):
        bound = params.get(param)
        if bound is not None and lengths.size and bound < int(lengths.max()):
            b = int(np.argmax(lengths))
            raise InputError(kernel, f"param {param!r}", f"op_params.fields.{param} (prose: at least every length)",
                             f"received {bound} but sequence {b} has {int(lengths[b])}", where)


def _out_with_lse(kernel: str, arrays: dict, params: dict, where: str) -> None:
    """The forward's out and lse come together (the statistics need both) or not at all."""
    given = [name for name in ("out", "lse") if arrays.get(name) is not None]
    if len(given) == 1:
        missing = "lse" if given[0] == "out" else "out"
        raise InputError(kernel, f"input {missing!r}", "prose: the forward's out and lse, both or neither",
                         f"received {given[0]!r} without {missing!r}", where)


# keyed by the core driver a kernel binds to (codegen/cores.py): a kernel served by a driver
# obeys that driver's rules, whichever contract declares it
# (the generated validators first try typed copies of these rules, fastcheck.pxi; a driver whose
# list differs from what the typed copy implements always gets these)
RULES: dict[str, list[Callable[..., None]]] = {
    "attention_naive": [_softcap, _k_len],
    "attention_flash": [_softcap, _k_len],
    "attention_paged_naive": [_softcap, _paged],
    "attention_flash_backward": [_softcap],
    "attention_flash_half": [_softcap, _k_len],
    "attention_flash_backward_half": [_softcap, _out_with_lse],
    "attention_varlen": [_softcap, _cu_seqlens],
    "attention_masked": [_softcap],
    "attention_varlen_backward": [_softcap, _cu_seqlens, _out_with_lse],
    "attention_masked_backward": [_softcap, _out_with_lse],
}


def check(kernel: str, driver: Optional[str], arrays: dict[str, Any], params: dict[str, Any], where: str) -> None:
    for rule in RULES.get(driver or "", []):
        rule(kernel, arrays, params, where)
