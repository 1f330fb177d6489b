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
    from fuel_cy.cpu import core

    return F(core()._core_expf(np.array([x], np.float32))[0])


def rounder(code):
    target = {"BF16": ml_dtypes.bfloat16, "F16": np.float16}[code]

    def R(x):
        return F(np.array(F(x), dtype=F).astype(target).astype(F))

    return R


def _sum16(R, values):
    lanes = [F(0)] * 16
    for j, v in enumerate(values):
        lanes[j % 16] = R(lanes[j % 16] + v)
    total = lanes[0]
    for lane in lanes[1:]:
        total = R(total + lane)
    return total


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
    total = _sum16(R, p)
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
    R = rounder(code)
    q, k, v = (np.asarray(x, np.float32) for x in (q, k, v))
    b_, hq, sq, d = q.shape
    sk = k.shape[2]
    group = hq // k.shape[1]
    sc = R(F(scale))
    cap = None if softcap is None else R(F(softcap))
    kend = sk if k_len is None else min(k_len, sk)
    out = np.zeros(q.shape, np.float32)
    for b in range(b_):
        for h in range(hq):
            slope = None if alibi is None else F(np.asarray(alibi, np.float32)[h])
            for i in range(sq):
                lo, hi = _range(i, causal, left, right, kend)
                out[b, h, i] = _row(R, q[b, h, i], k[b, h // group], v[b, h // group], sc, cap, slope, i, lo, hi, kend)
    return out


def paged(code, q, kc, vc, table, lens, alibi, scale, softcap=None):
    R = rounder(code)
    q, kc, vc = (np.asarray(x, np.float32) for x in (q, kc, vc))
    b_, hq, sq, d = q.shape
    bs = kc.shape[1]
    group = hq // kc.shape[2]
    sc = R(F(scale))
    cap = None if softcap is None else R(F(softcap))
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
