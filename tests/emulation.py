"""A slow pure-Python emulation of "math in T" for bf16/f16, following the documented order of
operations (see site/semantics.md): every product, sum, difference, quotient, exp and tanh is
computed in float32 and rounded to T.  exp is fuel_cy's f32 exp primitive (its accuracy is tested
on its own in test_half_precision.py); tanh is float64 tanh rounded once to f32.

  dot      acc = R(acc + R(q_d * k_d)), d = 0..D-1 in order
  score    s = R(scale * dot); softcap: t = R(tanh(R(s / c))), s = R(t * c); ALiBi: s = R(s + R(slope * R(kj - qi)))
  softmax  m = max; p = R(exp(R(s - m))); total = 16 lane partials (lane j % 16, in order) summed in lane order; p = R(p / total)
  output   o_d = R(o_d + R(p_j * v_jd)), j = 0..kend-1 in order (masked j contribute p = 0)
"""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np

F = np.float32


def f32_exp(x):
    from fuel_cy.runtime.cpu import core

    return F(core()._test_expf(np.array([x], np.float32))[0])


def rounder(code):
    """R: float32 (scalar or array) -> nearest value of T, as float32 (a scalar stays a scalar)."""
    target = {"BF16": ml_dtypes.bfloat16, "F16": np.float16}[code]

    def R(x):
        y = np.asarray(x, F).astype(target).astype(F)
        return y if y.ndim else F(y)

    return R


def _lane_sum(R, x):
    """sum16 over the last axis: lane partials j % 16 (rounded), then the lanes in order."""
    x = np.asarray(x, F)
    lanes = np.zeros(x.shape[:-1] + (16,), F)
    for j in range(x.shape[-1]):
        lanes[..., j % 16] = R(lanes[..., j % 16] + x[..., j])
    total = lanes[..., 0]
    for lane in range(1, 16):
        total = R(total + lanes[..., lane])
    return total


def _setup(code, scale, softcap):
    """The rounder, and the scale and softcap as the kernels hold them (rounded to T)."""
    R = rounder(code)
    return R, R(F(scale)), None if softcap is None else R(F(softcap))


def _forward_setup(code, q, k, v, scale, softcap, k_len):
    """_setup, the operands as float32, the query heads per kv head, the keys in play and a zero
    output."""
    R, sc, cap = _setup(code, scale, softcap)
    q, k, v = (np.asarray(x, np.float32) for x in (q, k, v))
    sk = k.shape[2]
    return (R, sc, cap, q, k, v, q.shape[1] // k.shape[1], sk if k_len is None else min(k_len, sk),
            np.zeros(q.shape, np.float32))


def _row(R, q, keys, vals, scale, cap, slope, qpos, lo, hi, kend):
    scores = []
    for j in range(kend):
        acc = F(0)
        for d in range(len(q)):
            acc = R(acc + R(q[d] * keys[j][d]))
        s = R(scale * acc)
        if cap is not None:
            t = R(F(math.tanh(float(R(s / cap)))))
            s = R(t * cap)
        if slope is not None:
            s = R(s + R(slope * R(F(j - qpos))))
        if j < lo or j >= hi:
            s = F(-np.inf)
        scores.append(s)
    m = max(scores) if scores else F(-np.inf)
    if not m > -np.inf:
        return [F(0)] * len(q)
    p = [R(f32_exp(R(s - m))) for s in scores]
    total = F(_lane_sum(R, p))
    p = [R(x / total) for x in p]
    out = [F(0)] * len(q)
    for j in range(kend):
        for d in range(len(q)):
            out[d] = R(out[d] + R(p[j] * vals[j][d]))
    return out


def _range(qpos, causal, left, right, k_len):
    lo, hi = 0, k_len
    if causal:
        hi = min(hi, qpos + 1)
    if right is not None:
        hi = min(hi, qpos + right + 1)
    if left is not None:
        lo = max(lo, qpos - left)
    return lo, max(hi, lo)


def naive(code, q, k, v, alibi, scale, causal=False, left=None, right=None, softcap=None, k_len=None):
    R, sc, cap, q, k, v, group, kend, out = _forward_setup(code, q, k, v, scale, softcap, k_len)
    b_, hq, sq, d = q.shape
    for b in range(b_):
        for h in range(hq):
            slope = None if alibi is None else F(np.asarray(alibi, np.float32)[h])
            for i in range(sq):
                lo, hi = _range(i, causal, left, right, kend)
                out[b, h, i] = _row(R, q[b, h, i], k[b, h // group], v[b, h // group], sc, cap, slope, i, lo, hi, kend)
    return out


def paged(code, q, kc, vc, table, lens, alibi, scale, softcap=None):
    R, sc, cap = _setup(code, scale, softcap)
    q, kc, vc = (np.asarray(x, np.float32) for x in (q, kc, vc))
    b_, hq, sq, d = q.shape
    bs = kc.shape[1]
    group = hq // kc.shape[2]
    out = np.zeros(q.shape, np.float32)
    for b in range(b_):
        n = int(lens[b])
        for h in range(hq):
            keys = [kc[table[b, p // bs], p % bs, h // group] for p in range(n)]
            vals = [vc[table[b, p // bs], p % bs, h // group] for p in range(n)]
            slope = None if alibi is None else F(np.asarray(alibi, np.float32)[h])
            for i in range(sq):
                qpos = max(n - sq, 0) + i
                lo, hi = _range(qpos, True, None, None, n)
                out[b, h, i] = _row(R, q[b, h, i], keys, vals, sc, cap, slope, qpos, lo, hi, n)
    return out


# ---- flash attention and its backward, vectorized over rows (NumPy, not the kernels' code) ------
# The order of operations of attention_flash in T (site/semantics.md):
#   scores   as above (dot sequential over d, each product and sum rounded; scale, softcap, ALiBi)
#   per 128-key tile t, for each row with an admissible key so far:
#            m' = max(m, max_j s_j); alpha = R(exp(R(m - m'))); p_j = R(exp(R(s_j - m')))
#            l = R(R(l * alpha) + sum16(p)) (lanes j % 16 of the tile); O = R(O * alpha)
#            O_d = R(O_d + R(p_j * v_jd)), j in order
#   output   R(O / l), or 0 for a row with no admissible key
# The backward (per kv head; query heads of its group in order, rows in order):
#   P        the row softmax of the scores, as in naive (sum16 over the row, p = R(p / total))
#   dP       dO . v, rounded like the scores' dot
#   dS       R(p * R(dp - delta)), delta = dot16(p, dp) (lane partials j % 16, rounded);
#            softcap: R(dS * R(1 - R(t * t))) with t = the score's rounded tanh
#   dQ       R(scale * sum_j R(dS_j * k_j)), j in order;  dV += R(p_ij * dO_i), dK += R(dS_ij * q_i),
#            i in order; dK = R(scale * dK)

def _f32_exp_v(x):
    from fuel_cy.runtime.cpu import core

    x = np.ascontiguousarray(x, np.float32)
    return core()._test_expf(x.reshape(-1)).reshape(x.shape)


def _scores(R, Q, K, scale, cap, slope, causal, left, right, kend):
    """Rounded scores [rows, kend] for query positions 0..rows-1, masked to -inf, and the
    rounded tanh of the softcap (or None)."""
    sq = Q.shape[0]
    acc = np.zeros((sq, kend), np.float32)
    for d in range(Q.shape[1]):
        acc = R(acc + R(Q[:, d:d + 1] * K[None, :kend, d]))
    s = R(scale * acc)
    t = None
    if cap is not None:
        t = R(np.tanh(R(s / cap).astype(np.float64)).astype(np.float32))
        s = R(t * cap)
    i = np.arange(sq)[:, None]
    j = np.arange(kend)[None, :]
    if slope is not None:
        s = R(s + R(slope * R((j - i).astype(np.float32))))
    lo, hi = np.zeros_like(i), np.full_like(i, kend)
    if causal:
        hi = np.minimum(hi, i + 1)
    if right is not None:
        hi = np.minimum(hi, i + right + 1)
    if left is not None:
        lo = np.maximum(lo, i - left)
    return np.where((j >= lo) & (j < hi), s, np.float32(-np.inf)), t


def flash(code, q, k, v, alibi, scale, causal=False, left=None, right=None, softcap=None, k_len=None):
    R, sc, cap, q, k, v, group, kend, out = _forward_setup(code, q, k, v, scale, softcap, k_len)
    b_, hq, sq, d = q.shape
    for b in range(b_):
        for h in range(hq):
            K, V = k[b, h // group], v[b, h // group]
            slope = None if alibi is None else np.float32(np.asarray(alibi, np.float32)[h])
            s, _ = _scores(R, q[b, h], K, sc, cap, slope, causal, left, right, kend)
            m = np.full(sq, -np.inf, np.float32)
            l = np.zeros(sq, np.float32)
            O = np.zeros((sq, d), np.float32)
            for j0 in range(0, kend, 128):
                st = s[:, j0:j0 + 128]
                mn = np.maximum(m, st.max(axis=1))
                live = mn > -np.inf
                mlive = mn[live][:, None]
                alpha = R(_f32_exp_v(R(m[live] - mn[live])))
                p = R(_f32_exp_v(R(st[live] - mlive)))
                l[live] = R(R(l[live] * alpha) + _lane_sum(R, p))
                Ol = R(O[live] * alpha[:, None])
                for jj in range(st.shape[1]):
                    Ol = R(Ol + R(p[:, jj:jj + 1] * V[j0 + jj][None, :]))
                O[live] = Ol
                m[live] = mn[live]
            nz = l != 0
            out[b, h][nz] = R(O[nz] / l[nz][:, None])
    return out


def backward(code, q, k, v, do, alibi, scale, causal=False, left=None, right=None, softcap=None):
    R, sc, cap = _setup(code, scale, softcap)
    q, k, v, do = (np.asarray(x, np.float32) for x in (q, k, v, do))
    b_, hq, sq, d = q.shape
    hkv, sk = k.shape[1], k.shape[2]
    group = hq // hkv
    dq = np.zeros(q.shape, np.float32)
    dk = np.zeros(k.shape, np.float32)
    dv = np.zeros(v.shape, np.float32)
    for b in range(b_):
        for hk in range(hkv):
            K, V = k[b, hk], v[b, hk]
            dKa = np.zeros((sk, d), np.float32)
            dVa = np.zeros((sk, d), np.float32)
            for g in range(group):
                h = hk * group + g
                slope = None if alibi is None else np.float32(np.asarray(alibi, np.float32)[h])
                Q, dO = q[b, h], do[b, h]
                s, t = _scores(R, Q, K, sc, cap, slope, causal, left, right, sk)
                dp = np.zeros((sq, sk), np.float32)
                for e in range(d):
                    dp = R(dp + R(dO[:, e:e + 1] * V[None, :, e]))
                m = s.max(axis=1)
                live = m > -np.inf
                p = np.zeros_like(s)
                p[live] = R(_f32_exp_v(R(s[live] - m[live][:, None])))
                total = _lane_sum(R, p)
                p[live] = R(p[live] / total[live][:, None])
                delta = _lane_sum(R, R(p * dp))
                ds = R(p * R(dp - delta[:, None]))
                if t is not None:
                    ds = R(ds * R(1 - R(t * t)))
                dQa = np.zeros((sq, d), np.float32)
                for j in range(sk):
                    dQa = R(dQa + R(ds[:, j:j + 1] * K[j][None, :]))
                dq[b, h] = R(sc * dQa)
                for i in range(sq):
                    dVa = R(dVa + R(p[i][:, None] * dO[i][None, :]))
                    dKa = R(dKa + R(ds[i][:, None] * Q[i][None, :]))
            dk[b, hk] = R(sc * dKa)
            dv[b, hk] = dVa
    return dq, dk, dv
