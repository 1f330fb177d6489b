"""The test suite's own float64 reference, written from the contract prose (not from the kernels).

One (batch, head) at a time: a score matrix, `position_admissible` as the prose states it,
softcap then ALiBi, stable softmax with fully-masked rows -> 0, and the backward closed form.
"""
from __future__ import annotations

import numpy as np


def position_admissible(qi, kj, causal, left, right, k_len):
    ok = np.ones(np.broadcast(qi, kj).shape, dtype=bool)
    if causal:
        ok &= ~(kj > qi)
    if left is not None:
        ok &= ~(kj + left < qi)
    if right is not None:
        ok &= ~(kj > qi + right)
    if k_len is not None:
        ok &= kj < k_len
    return ok


def _params(d, scale, softcap):
    """The contract's default scale 1/sqrt(D), and scale and softcap as the float32 values a kernel
    receives."""
    scale = float(np.float32(1 / np.sqrt(d))) if scale is None else float(np.float32(scale))
    return scale, None if softcap is None else float(np.float32(softcap))


def _head_scores(qh, kh, scale, causal, left, right, softcap, k_len, slope, qpos=None):
    """(scores after softcap and ALiBi, which of them are admissible, scores before softcap)"""
    s_pre = (qh @ kh.T) * scale
    s = np.tanh(s_pre / softcap) * softcap if softcap is not None else s_pre.copy()
    qi = (np.arange(qh.shape[0]) if qpos is None else qpos)[:, None]
    kj = np.arange(kh.shape[0])[None, :]
    if slope is not None:
        s = s + slope * (kj - qi)
    return s, position_admissible(qi, kj, causal, left, right, k_len), s_pre


TILE = 128  # keys per tile of the flash kernels' online softmax, as the contracts state


def _rounded_weights(s, ok, round_to):
    """One row's softmax weights under round_p, as the mixed contract's prose states it: each
    128-key tile's exp(s - m_t), m_t the largest admissible score of the row through that tile,
    rounded to round_to and carried to the row's final max exactly; the denominator is the sum of
    the unrounded weights."""
    m = s[ok].max()
    w = np.zeros_like(s)
    m_t = -np.inf
    for j0 in range(0, s.size, TILE):
        tile = slice(j0, j0 + TILE)
        if ok[tile].any():
            m_t = max(m_t, s[tile][ok[tile]].max())
        if m_t == -np.inf:
            continue
        e = np.where(ok[tile], np.exp(np.where(ok[tile], s[tile], m_t) - m_t), 0.0)
        w[tile] = e.astype(round_to).astype(np.float64) * np.exp(m_t - m)
    return w / np.exp(s[ok] - m).sum()


def _head_probs(qh, kh, scale, causal, left, right, softcap, k_len, slope, qpos=None, round_to=None):
    s, ok, s_pre = _head_scores(qh, kh, scale, causal, left, right, softcap, k_len, slope, qpos)
    p = np.zeros_like(s)
    for i in range(s.shape[0]):
        row = s[i][ok[i]]
        if row.size == 0 or not np.isfinite(row.max()):
            continue
        if round_to is not None:
            p[i] = _rounded_weights(s[i], ok[i], round_to)
            continue
        e = np.exp(row - row.max())
        p[i, ok[i]] = e / e.sum()
    return p, s_pre


def forward(q, k, v, alibi=None, scale=None, causal=False, left=None, right=None, softcap=None, k_len=None,
            round_to=None):
    """round_to: round_p's weights, rounded to that type (_rounded_weights)."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    b_, hq, sq, d = q.shape
    group = hq // k.shape[1]
    scale, softcap = _params(d, scale, softcap)
    out = np.zeros_like(q)
    for b in range(b_):
        for h in range(hq):
            slope = None if alibi is None else float(alibi[h])
            p, _ = _head_probs(q[b, h], k[b, h // group], scale, causal, left, right, softcap, k_len, slope,
                               round_to=round_to)
            out[b, h] = p @ v[b, h // group]
    return out


def largest_row_max(q, k, alibi=None, scale=None, causal=False, left=None, right=None, softcap=None, k_len=None):
    """max over rows of |the row's largest admissible score| (0 with no admissible score)."""
    q, k = (np.asarray(x, np.float64) for x in (q, k))
    group = q.shape[1] // max(k.shape[1], 1)
    scale, softcap = _params(q.shape[3], scale, softcap)
    top = 0.0
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            slope = None if alibi is None else float(alibi[h])
            s, ok, _ = _head_scores(q[b, h], k[b, h // group], scale, causal, left, right, softcap, k_len, slope)
            masked = np.where(ok, s, -np.inf).max(axis=1, initial=-np.inf)
            finite = masked[np.isfinite(masked)]
            if finite.size:
                top = max(top, float(np.abs(finite).max()))
    return top


def lse(q, k, alibi=None, scale=None, causal=False, left=None, right=None, softcap=None, k_len=None):
    """[B, Hq, Sq]: each row's log Σ_j exp(s_j) over its admissible keys; +inf where it has none."""
    q, k = np.asarray(q, np.float64), np.asarray(k, np.float64)
    b_, hq, sq, d = q.shape
    group = hq // k.shape[1]
    scale, softcap = _params(d, scale, softcap)
    out = np.full((b_, hq, sq), np.inf)
    for b in range(b_):
        for h in range(hq):
            slope = None if alibi is None else float(alibi[h])
            s, ok, _ = _head_scores(q[b, h], k[b, h // group], scale, causal, left, right, softcap, k_len, slope)
            for i in range(sq):
                if ok[i].any():
                    m = s[i][ok[i]].max()
                    out[b, h, i] = m + np.log(np.exp(s[i][ok[i]] - m).sum())
    return out


def backward(q, k, v, do, alibi=None, scale=None, causal=False, left=None, right=None, softcap=None,
             round_to=None, dlse=None, out=None):
    """round_to (round_p): P and dS rounded to that type before the products they enter.  dlse
    ([B, Hq, Sq], broadcast): the gradient of the forward's lse too, dS = P (dP - rowsum(P dP) + dlse).
    out: the forward's output as a backward given it reads it (in its type): rowsum(P dP) = dO . O."""
    q, k, v, do = (np.asarray(x, np.float64) for x in (q, k, v, do))
    rnd = (lambda x: x.astype(round_to).astype(np.float64)) if round_to is not None else (lambda x: x)
    b_, hq, sq, d = q.shape
    group = hq // k.shape[1]
    scale, softcap = _params(d, scale, softcap)
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    g_lse = np.zeros((b_, hq, sq)) if dlse is None else np.broadcast_to(np.asarray(dlse, np.float64), (b_, hq, sq))
    for b in range(b_):
        for h in range(hq):
            hk = h // group
            slope = None if alibi is None else float(alibi[h])
            p, s_pre = _head_probs(q[b, h], k[b, hk], scale, causal, left, right, softcap, None, slope)
            dv[b, hk] += rnd(p).T @ do[b, h]
            dp = do[b, h] @ v[b, hk].T
            if out is None:
                delta = (p * dp).sum(axis=1, keepdims=True)
            else:
                delta = (do[b, h] * np.asarray(out[b, h], np.float64)).sum(axis=1, keepdims=True)
            ds = p * (dp - delta + g_lse[b, h][:, None])
            if softcap is not None:
                ds *= 1 - np.tanh(s_pre / softcap) ** 2
            ds = rnd(ds)
            dq[b, h] = scale * ds @ k[b, hk]
            dk[b, hk] += scale * ds.T @ q[b, h]
    return dq, dk, dv


def paged(q, k_cache, v_cache, table, lens, alibi=None, scale=None, softcap=None):
    """Gather each sequence's keys through the block table, then attend with the implicit causal
    mask at abs = saturating_sub(context_len, Sq) + q_pos."""
    q = np.asarray(q, np.float64)
    b_, hq, sq, d = q.shape
    bs = k_cache.shape[1]
    group = hq // k_cache.shape[2]
    scale, softcap = _params(d, scale, softcap)
    out = np.zeros_like(q)
    for b in range(b_):
        n = int(lens[b])
        if n == 0:
            continue
        keys = np.array([k_cache[table[b, p // bs], p % bs] for p in range(n)], np.float64).reshape(n, -1, d)
        vals = np.array([v_cache[table[b, p // bs], p % bs] for p in range(n)], np.float64).reshape(n, -1, d)
        qpos = max(n - sq, 0) + np.arange(sq)
        for h in range(hq):
            slope = None if alibi is None else float(alibi[h])
            p, _ = _head_probs(q[b, h], keys[:, h // group], scale, True, None, None, softcap, None, slope, qpos)
            out[b, h] = p @ vals[:, h // group]
    return out
