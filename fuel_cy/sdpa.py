"""`scaled_dot_product_attention`: torch's SDPA signature and semantics over `attention_masked`.

`torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask, dropout_p,
is_causal, scale, enable_gqa)` takes `[..., H, L, E]` arrays with any leading dims and one mask
that is boolean (True takes part) or float (added), broadcastable to `[..., H, L, S]`.  The
contract kernel `attention_masked` takes `[B, H, L, E]` and a boolean mask and an additive bias,
each `[MB, MH, MQ, MK]` with every dim 1 or its extent.  This module maps one onto the other
without copying where it can: leading dims fold into `B` (a view of a contiguous array), a mask
dim that broadcasts by a stride of 0 (`np.broadcast_to`, torch's `expand`) is read as a dim of 1,
and q, k, v are passed as the views they are (the kernel reads any view with unit-stride rows).

The mapping is written once over the few operations numpy arrays and torch tensors share
(`shape`, `reshape`, basic indexing); `ArrayOps` supplies the rest, so `fuel_cy.torch` runs the
same steps on tensors, traceable by `torch.compile`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import numpy as np

from .errors import InputError

NAME = "scaled_dot_product_attention"
_WHERE = "torch.nn.functional.scaled_dot_product_attention's semantics (fuel_cy/sdpa.py)"


@dataclass(frozen=True)
class ArrayOps:
    """What the mapping needs of an array library beyond shape, reshape and indexing."""

    is_array: Callable[[Any], bool]
    is_bool: Callable[[Any], bool]
    dtype_name: Callable[[Any], str]
    zero_stride: Callable[[Any, int], bool]  # does axis i broadcast by a stride of 0?
    broadcast_to: Callable[[Any, tuple[int, ...]], Any]
    contiguous: Callable[[Any], Any]  # C-contiguous (the array itself when it is already)


NUMPY_OPS = ArrayOps(
    is_array=lambda x: isinstance(x, np.ndarray),
    is_bool=lambda x: x.dtype == np.bool_,
    dtype_name=lambda x: str(x.dtype),
    zero_stride=lambda x, i: x.strides[i] == 0,
    broadcast_to=np.broadcast_to,
    contiguous=np.ascontiguousarray,
)


def _error(what: str, clause: str, received: str) -> InputError:
    return InputError(NAME, what, clause, received, _WHERE)


def _shape(x: Any) -> tuple[int, ...]:
    return tuple(x.shape)


def _fold_mask(ops: ArrayOps, mask: Any, target: tuple[int, ...], B: int) -> Any:
    """The mask as [MB, MH, MQ, MK] with each dim 1 or the extent of [B, H, L, S] (target is the
    full [..., H, L, S] it broadcasts to, already checked)."""
    ms = _shape(mask)
    if len(ms) < len(target):
        mask = mask.reshape((1,) * (len(target) - len(ms)) + ms)
    # a broadcast view's repeated dim is read once: index 0 of it, kept as a dim of 1
    idx = tuple(slice(0, 1) if ms_i != 1 and ops.zero_stride(mask, i) else slice(None)
                for i, ms_i in enumerate(_shape(mask)))
    if any(isinstance(s, slice) and s.stop == 1 for s in idx):
        mask = mask[idx]
    ms = _shape(mask)
    lead, rest = ms[:-3], ms[-3:]
    if all(d == 1 for d in lead):
        return mask.reshape((1,) + rest)
    if lead == target[:-3]:
        return mask.reshape((B,) + rest)
    # broadcast over some leading dims only: those are expanded (a copy of the mask alone)
    return ops.broadcast_to(mask, target[:-3] + rest).reshape((B,) + rest)


def sdpa(ops: ArrayOps, kernel: Callable[..., Any], query: Any, key: Any, value: Any, attn_mask: Any = None,
         dropout_p: float = 0.0, is_causal: bool = False, scale: Optional[float] = None,
         enable_gqa: bool = False, softcap: Optional[float] = None, round_p: bool = True) -> Any:
    """torch's SDPA arguments -> one call of `kernel` (attention_masked, numpy's or torch's)."""
    if (attn_mask is None and dropout_p == 0.0 and ops.is_array(query) and ops.is_array(key) and ops.is_array(value)
            and query.ndim == key.ndim == value.ndim == 4 and (enable_gqa or query.shape[1] == key.shape[1])):
        # [B, H, L, E] with no mask (a decode step's call): nothing to map
        return kernel(query, key, value, None, None, softmax_scale=scale, causal=bool(is_causal), softcap=softcap,
                      round_p=round_p)
    if (attn_mask is not None and dropout_p == 0.0 and not is_causal and ops.is_array(query) and ops.is_array(key)
            and ops.is_array(value) and ops.is_array(attn_mask)
            and query.ndim == key.ndim == value.ndim == attn_mask.ndim == 4
            and (enable_gqa or query.shape[1] == key.shape[1])):
        # [B, H, L, E] and a C-contiguous [MB, MH, MQ, MK] mask of 1s and extents (a padding
        # mask's [B, 1, 1, S], say): the kernel's own layout, nothing to fold; anything else, or
        # anything wrong, takes the mapping below and its errors
        ms, qs = _shape(attn_mask), _shape(query)
        if (all(m == 1 or m == t for m, t in zip(ms, qs[:3] + (_shape(key)[2],)))
                and (ops.is_bool(attn_mask) or ops.dtype_name(attn_mask) == ops.dtype_name(query))
                and ops.contiguous(attn_mask) is attn_mask):
            boolean = ops.is_bool(attn_mask)
            return kernel(query, key, value, attn_mask=attn_mask if boolean else None,
                          attn_bias=None if boolean else attn_mask, softmax_scale=scale, causal=False,
                          softcap=softcap, round_p=round_p)
    arrays = {"query": query, "key": key, "value": value}
    for name, x in arrays.items():
        if not ops.is_array(x):
            raise _error(f"input {name!r}", "an array of rank >= 2 ([..., L, E])", f"received {type(x).__name__}")
        if len(_shape(x)) < 2:
            raise _error(f"input {name!r}", "rank >= 2 ([..., L, E])", f"shape {list(_shape(x))}")
    qs, ks, vs = _shape(query), _shape(key), _shape(value)
    if not (len(qs) == len(ks) == len(vs)) or not (qs[:-3] == ks[:-3] == vs[:-3]):
        raise _error("inputs", "query, key and value share their leading (batch) dims",
                     f"query {list(qs)}, key {list(ks)}, value {list(vs)}")
    if dropout_p != 0.0:
        raise _error("param 'dropout_p'", "fuel_cy's attention is deterministic: no dropout (pass 0.0)",
                     f"received {dropout_p!r}")
    if is_causal and attn_mask is not None:
        raise _error("param 'is_causal'", "torch's rule: an explicit attn_mask is not set when is_causal=True",
                     "both given")
    hq = qs[-3] if len(qs) >= 3 else 1
    hkv = ks[-3] if len(ks) >= 3 else 1
    if hq != hkv and not enable_gqa:
        raise _error("input 'key'", "query and key have the same number of heads unless enable_gqa=True",
                     f"query has {hq} heads, key {hkv}")
    L, E, S = qs[-2], qs[-1], ks[-2]
    B = math.prod(qs[:-3])
    q4 = query.reshape((B, hq, L, E))
    k4 = key.reshape((B, hkv, S, ks[-1]))
    v4 = value.reshape((B, hkv, vs[-2], vs[-1]))
    mask = bias = None
    if attn_mask is not None:
        if not ops.is_array(attn_mask):
            raise _error("input 'attn_mask'", "an array (bool: True takes part; float: added to the scores)",
                         f"received {type(attn_mask).__name__}")
        target = qs[:-1] + (S,)
        ms = _shape(attn_mask)
        if len(ms) > len(target) or any(m != 1 and m != t for m, t in zip(ms[::-1], target[::-1])):
            raise _error("input 'attn_mask'", f"broadcastable to [..., H, L, S] = {list(target)}",
                         f"shape {list(ms)}")
        if not ops.is_bool(attn_mask) and ops.dtype_name(attn_mask) != ops.dtype_name(query):
            raise _error("input 'attn_mask'", "torch's rule: a bool mask, or a float mask of the query's dtype",
                         f"{ops.dtype_name(attn_mask)} with a {ops.dtype_name(query)} query")
        full = ((1,) * (3 - len(target)) + target) if len(target) < 3 else target
        folded = _fold_mask(ops, attn_mask.reshape((1,) * (len(full) - len(ms)) + ms), full, B)
        folded = ops.contiguous(folded)   # the kernel reads masks C-contiguous (a sliced one is copied)
        if ops.is_bool(attn_mask):
            mask = folded
        else:
            bias = folded
    out = kernel(q4, k4, v4, attn_mask=mask, attn_bias=bias, softmax_scale=scale, causal=bool(is_causal),
                 softcap=softcap, round_p=round_p)
    return out.reshape(qs[:-1] + (_shape(out)[-1],))


def scaled_dot_product_attention(query: np.ndarray, key: np.ndarray, value: np.ndarray,
                                 attn_mask: Optional[np.ndarray] = None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: Optional[float] = None,
                                 enable_gqa: bool = False, *, softcap: Optional[float] = None,
                                 round_p: bool = True) -> np.ndarray:
    """`torch.nn.functional.scaled_dot_product_attention` on numpy arrays.

    query `[..., Hq, L, E]`, key and value `[..., Hkv, S, E]` (the same leading dims; `Hkv = Hq`
    unless `enable_gqa=True`, then `Hkv` divides `Hq`). `attn_mask`: bool (True takes part) or
    float of the query's dtype (added to the scores), broadcastable to `[..., Hq, L, S]`; a
    broadcast view (`np.broadcast_to`) is read without being expanded. `is_causal`: key `j` is
    masked for query `i` when `j > i` (top-left, as torch); not together with `attn_mask`.
    `scale`: None is `1 / sqrt(E)`. `dropout_p` must be 0. `softcap` (fuel_cy's, keyword-only):
    scores become `tanh(s / c) * c` before the mask is added. A row with no admissible key gives
    zeros (torch's math backend gives NaN). float32/float64 compute in their own type,
    bfloat16/float16 in float32 with the output rounded once; `round_p` (fuel_cy's, keyword-only)
    rounds the softmax weights to the input's type before they multiply V, as torch's CPU flash
    attention does, which runs that product at the half-precision rate; `round_p=False` keeps them
    float32. Runs `attention_masked`.

    >>> import numpy as np, fuel_cy
    >>> q = np.random.default_rng(0).standard_normal((2, 8, 128, 64), dtype=np.float32)
    >>> keep = np.arange(128) < np.array([100, 128])[:, None]      # key padding, [B, S]
    >>> out = fuel_cy.scaled_dot_product_attention(q, q, q, attn_mask=keep[:, None, None, :])
    >>> out.shape
    (2, 8, 128, 64)
    """
    global _attention_masked
    kernel = _attention_masked
    if kernel is None:   # bound on first use: this layer sits below the generated kernels
        from ._generated._kernels import attention_masked

        kernel = _attention_masked = attention_masked
    return sdpa(NUMPY_OPS, kernel, query, key, value, attn_mask, dropout_p, is_causal, scale,
                enable_gqa, softcap, round_p)


_attention_masked: Optional[Callable[..., np.ndarray]] = None


__all__: Sequence[str] = ["scaled_dot_product_attention"]
