"""Float64 NumPy references of the contract's semantics (used by `fuel-cy run` / `demo`).

Independent of the compiled core: materialized scores, einsum, explicit masks.  The test suite
keeps its own, separately written reference so the kernels are never checked against this file
alone.
"""
from __future__ import annotations


import numpy as np


def _scores(q, k, scale, causal, wl, wr, softcap, k_len, alibi, qpos=None):
    b, hq, sq, d = q.shape
    hkv, sk = k.shape[1], k.shape[2]
    kk = np.repeat(np.asarray(k, np.float64), hq // hkv, axis=1)
    s = np.einsum("bhid,bhjd->bhij", np.asarray(q, np.float64), kk) * scale
    s_pre = s
    if softcap is not None:
        s = np.tanh(s / softcap) * softcap
    qi = (np.arange(sq) if qpos is None else qpos)[:, None]
    kj = np.arange(sk)[None, :]
    if alibi is not None:
        s = s + np.asarray(alibi, np.float64)[None, :, None, None] * (kj - qi)
    masked = np.zeros((sq, sk), bool) if qpos is None or qpos.ndim == 1 else np.zeros(qpos.shape[:1] + (sk,), bool)
    if causal:
        masked = masked | (kj > qi)
    if wl is not None:
        masked = masked | (kj + wl < qi)
    if wr is not None:
        masked = masked | (kj > qi + wr)
    if k_len is not None:
        masked = masked | (kj >= k_len)
    return np.where(masked, -np.inf, s), s_pre


FLASH_TILE = 128   # keys per tile of the flash kernels' online softmax (the contracts state it)


def _half_type(x: object) -> object:
    """The 16-bit float type of an input (round_p rounds P to it), or None."""
    dt = np.asarray(x).dtype
    return dt if dt.itemsize == 2 else None


def _softmax(s, round_to=None):
    """Softmax over the last axis; a row with no admissible key gives zeros.  round_to (round_p):
    each key tile's weights exp(s - m_t), m_t the row's running max through that tile, rounded to
    that type before they weigh V, the denominator from the unrounded weights."""
    m = s.max(axis=-1, keepdims=True)
    dead = ~np.isfinite(m)
    m0 = np.where(dead, 0.0, m)
    p = np.exp(s - m0)
    l = p.sum(axis=-1, keepdims=True)
    if round_to is not None:
        for j0 in range(0, s.shape[-1], FLASH_TILE):
            mt = s[..., : j0 + FLASH_TILE].max(axis=-1, keepdims=True)
            mt = np.where(np.isfinite(mt), mt, m0)
            w = np.exp(s[..., j0 : j0 + FLASH_TILE] - mt).astype(round_to).astype(np.float64)
            p[..., j0 : j0 + FLASH_TILE] = w * np.exp(mt - m0)
    return np.where(dead | (l == 0), 0.0, p / np.where(l == 0, 1.0, l))


def attention(q, k, v, alibi=None, *, softmax_scale=None, causal=False, window_size_left=None,
              window_size_right=None, softcap=None, k_len=None, round_p=False):
    d = q.shape[-1]
    scale = float(np.float32(1 / np.sqrt(d))) if softmax_scale is None else float(np.float32(softmax_scale))
    s, _ = _scores(q, k, scale, causal, window_size_left, window_size_right, softcap, k_len, alibi)
    vv = np.repeat(np.asarray(v, np.float64), q.shape[1] // k.shape[1], axis=1)
    return np.einsum("bhij,bhjd->bhid", _softmax(s, _half_type(q) if round_p else None), vv)


def _masked_scores(q, k, attn_mask, attn_bias, softmax_scale, causal, softcap):
    """masked_attention's final scores, its pre-softcap scores and its scale (a float64)."""
    d = q.shape[-1]
    scale = 1 / np.sqrt(max(d, 1)) if softmax_scale is None else float(softmax_scale)
    s, s_pre = _scores(q, k, scale, causal, None, None, softcap, None, None)
    if attn_bias is not None:
        s = np.where(np.isneginf(s), s, s + np.asarray(attn_bias, np.float64))
    if attn_mask is not None:
        s = np.where(np.broadcast_to(attn_mask, s.shape), s, -np.inf)
    return s, s_pre, scale


def masked_attention(q, k, v, attn_mask=None, attn_bias=None, *, softmax_scale=None, causal=False, softcap=None,
                     round_p=False):
    """torch SDPA's masks: scores (scale a float64), softcap, + attn_bias, then -inf where attn_mask
    is False or causal (top-left) masks; both broadcast to [B, Hq, Sq, Sk].  round_p: P rounded
    to a 16-bit input's type before P V, per key tile (_softmax)."""
    s, _, _ = _masked_scores(q, k, attn_mask, attn_bias, softmax_scale, causal, softcap)
    vv = np.repeat(np.asarray(v, np.float64), q.shape[1] // k.shape[1], axis=1)
    return np.einsum("bhij,bhjd->bhid", _softmax(s, _half_type(q) if round_p else None), vv)


def varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, alibi=None, *, softmax_scale=None, causal=False,
                     window_size_left=None, window_size_right=None, softcap=None, round_p=False):
    """Packed sequences [T, H, D]: each alone, query i at key position p = i + lk - lq
    (bottom-right); ALiBi in flash-attn's form, -slope * |p - j|.  round_p: as masked_attention's,
    each sequence's key tiles from its first key."""
    round_to = _half_type(q) if round_p else None
    d = q.shape[-1]
    scale = float(np.float32(1 / np.sqrt(d))) if softmax_scale is None else float(np.float32(softmax_scale))
    out = np.zeros(q.shape, np.float64)
    group = q.shape[1] // k.shape[1]
    for b in range(len(cu_seqlens_q) - 1):
        q0, q1, k0, k1 = int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1]), int(cu_seqlens_k[b]), int(cu_seqlens_k[b + 1])
        if q1 == q0 or k1 == k0:
            continue
        qb, kb, vb = (np.asarray(x, np.float64).transpose(1, 0, 2)[None] for x in (q[q0:q1], k[k0:k1], v[k0:k1]))
        qpos = np.arange(q1 - q0) + (k1 - k0) - (q1 - q0)
        s, _ = _scores(qb, kb, scale, causal, window_size_left, window_size_right, softcap, None, None, qpos)
        if alibi is not None:
            dist = np.abs(qpos[:, None] - np.arange(k1 - k0)[None, :])
            s = s - np.asarray(alibi, np.float64)[None, :, None, None] * dist
        o = np.einsum("bhij,bhjd->bhid", _softmax(s, round_to), np.repeat(vb, group, axis=1))
        out[q0:q1] = o[0].transpose(1, 0, 2)
    return out


def paged_attention(q, k_cache, v_cache, block_table, context_lens, alibi=None, *, softmax_scale=None,
                    softcap=None, block_size=None):
    bsz, hq, sq, d = q.shape
    bs = k_cache.shape[1] if block_size is None else block_size
    scale = float(np.float32(1 / np.sqrt(d))) if softmax_scale is None else float(np.float32(softmax_scale))
    out = np.zeros(q.shape, np.float64)
    for b in range(bsz):
        n = int(context_lens[b])
        if n == 0:
            continue
        pos = np.arange(n)
        phys = np.asarray(block_table[b])[pos // bs]
        k = np.asarray(k_cache, np.float64)[phys, pos % bs].transpose(1, 0, 2)[None]
        v = np.asarray(v_cache, np.float64)[phys, pos % bs].transpose(1, 0, 2)[None]
        qpos = max(n - sq, 0) + np.arange(sq)
        s, _ = _scores(q[b:b + 1], k, scale, True, None, None, softcap, None, alibi, qpos=qpos)
        vv = np.repeat(v, hq // v.shape[1], axis=1)
        out[b] = np.einsum("hij,hjd->hid", _softmax(s)[0], vv[0])
    return out


def _gradients(q, k, v, do, s, s_pre, scale, softcap, round_to=None):
    """dq, dk, dv of attention whose final scores are s (masked: -inf) from the pre-softcap
    scores s_pre, both [B, Hq, Sq, Sk]; dk and dv summed over each kv head's query heads.
    round_to (round_p): P and dS rounded to that type before the products they enter."""
    rnd = (lambda x: x.astype(round_to).astype(np.float64)) if round_to is not None else (lambda x: x)
    hq, hkv = q.shape[1], k.shape[1]
    g = hq // hkv
    d = q.shape[-1]
    p = _softmax(s)
    do64 = np.asarray(do, np.float64)
    kk = np.repeat(np.asarray(k, np.float64), g, axis=1)
    vv = np.repeat(np.asarray(v, np.float64), g, axis=1)
    dp = np.einsum("bhid,bhjd->bhij", do64, vv)
    ds = p * (dp - (p * dp).sum(-1, keepdims=True))
    if softcap is not None:
        ds = ds * (1 - np.tanh(s_pre / softcap) ** 2)
    ds = rnd(ds)
    dq = scale * np.einsum("bhij,bhjd->bhid", ds, kk)
    dk = scale * np.einsum("bhij,bhid->bhjd", ds, np.asarray(q, np.float64))
    dv = np.einsum("bhij,bhid->bhjd", rnd(p), do64)
    b, _, sk, _ = k.shape
    return dq, dk.reshape(b, hkv, g, sk, d).sum(2), dv.reshape(b, hkv, g, sk, d).sum(2)


def attention_backward(q, k, v, do, alibi=None, *, softmax_scale=None, causal=False,
                       window_size_left=None, window_size_right=None, softcap=None, round_p=False):
    d = q.shape[-1]
    scale = float(np.float32(1 / np.sqrt(d))) if softmax_scale is None else float(np.float32(softmax_scale))
    s, s_pre = _scores(q, k, scale, causal, window_size_left, window_size_right, softcap, None, alibi)
    return _gradients(q, k, v, do, s, s_pre, scale, softcap, _half_type(q) if round_p else None)


def masked_attention_backward(q, k, v, do, attn_mask=None, attn_bias=None, *, softmax_scale=None, causal=False,
                              softcap=None, round_p=False):
    """The gradients of masked_attention."""
    s, s_pre, scale = _masked_scores(q, k, attn_mask, attn_bias, softmax_scale, causal, softcap)
    return _gradients(q, k, v, do, s, s_pre, scale, softcap, _half_type(q) if round_p else None)


def varlen_attention_backward(q, k, v, do, cu_seqlens_q, cu_seqlens_k, alibi=None, *, softmax_scale=None,
                              causal=False, window_size_left=None, window_size_right=None, softcap=None,
                              round_p=False):
    """The gradients of varlen_attention (packed keys), sequence by sequence."""
    round_to = _half_type(q) if round_p else None
    d = q.shape[-1]
    scale = float(np.float32(1 / np.sqrt(d))) if softmax_scale is None else float(np.float32(softmax_scale))
    grads = [np.zeros(x.shape, np.float64) for x in (q, k, v)]
    for b in range(len(cu_seqlens_q) - 1):
        q0, q1, k0, k1 = int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1]), int(cu_seqlens_k[b]), int(cu_seqlens_k[b + 1])
        if q1 == q0 or k1 == k0:
            continue
        qb, kb, vb, db = (np.asarray(x, np.float64).transpose(1, 0, 2)[None]
                          for x in (q[q0:q1], k[k0:k1], v[k0:k1], do[q0:q1]))
        qpos = np.arange(q1 - q0) + (k1 - k0) - (q1 - q0)
        s, s_pre = _scores(qb, kb, scale, causal, window_size_left, window_size_right, softcap, None, None, qpos)
        if alibi is not None:
            dist = np.abs(qpos[:, None] - np.arange(k1 - k0)[None, :])
            s = s - np.asarray(alibi, np.float64)[None, :, None, None] * dist
        for grad, g, rows in zip(grads, _gradients(qb, kb, vb, db, s, s_pre, scale, softcap, round_to),
                                 (slice(q0, q1), slice(k0, k1), slice(k0, k1))):
            grad[rows] = g[0].transpose(1, 0, 2)
    return tuple(grads)
