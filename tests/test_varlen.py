"""attention_varlen (contracts/fuel-cy-model.md): packed variable-length sequences with masks aligned
bottom-right per sequence, against a float64 reference of flash-attn's semantics written here
(its tests' `attention_ref` / `construct_local_mask`, per sequence), not from the kernel."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import fuel_cy
from conftest import input_error_of
from measures import bits, bound, rel

from fuel_cy.runtime.cpu import core

CODES = {np.dtype(np.float32): "F32", np.dtype(np.float64): "F64", np.dtype(ml_dtypes.bfloat16): "BF16",
         np.dtype(np.float16): "F16"}


def scores(q, k, cu_q, cu_k, scale=None, causal=False, left=None, right=None, softcap=None, slopes=None):
    """(rows of q, rows of k, head, masked scores [lq, lk] in float64, admissible) of each
    sequence and query head: sequence b alone, query i at key position p = i + lk - lq."""
    q, k = np.asarray(q, np.float64), np.asarray(k, np.float64)
    hq, d = q.shape[1], q.shape[2]
    group = hq // k.shape[1]
    scale = float(np.float32(1 / np.sqrt(d) if scale is None else scale))
    for b in range(len(cu_q) - 1):
        qs, ks = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        lq, lk = cu_q[b + 1] - cu_q[b], cu_k[b + 1] - cu_k[b]
        p = np.arange(lq)[:, None] + lk - lq
        j = np.arange(lk)[None, :]
        ok = np.ones((lq, lk), bool)
        if causal:
            ok &= j <= p
        if left is not None:
            ok &= j >= p - left
        if right is not None:
            ok &= j <= p + right
        for h in range(hq):
            s = q[qs, h] @ k[ks, h // group].T * scale
            if softcap is not None:
                s = np.tanh(s / softcap) * softcap
            if slopes is not None:   # [Hq], or [B, Hq]: one set per sequence
                s = s - float((slopes[b] if np.ndim(slopes) == 2 else slopes)[h]) * np.abs(p - j)
            yield qs, ks, h, np.where(ok, s, -np.inf), ok


def reference(q, k, v, cu_q, cu_k, scale=None, causal=False, left=None, right=None, softcap=None, slopes=None):
    """flash-attn's varlen forward in float64: sequence b alone, query i at key position
    p = i + lk - lq; ALiBi as flash-attn's attention_ref, -slope * |p - j|; a row with no
    admissible key is zero."""
    v = np.asarray(v, np.float64)
    out = np.zeros(np.shape(q))
    group = np.shape(q)[1] // v.shape[1]
    for qs, ks, h, s, ok in scores(q, k, cu_q, cu_k, scale, causal, left, right, softcap, slopes):
        lq, lk = s.shape
        m = s.max(axis=1, keepdims=True) if lk else np.zeros((lq, 1))
        e = np.where(ok, np.exp(s - np.where(np.isfinite(m), m, 0)), 0.0)
        den = e.sum(axis=1, keepdims=True)
        w = np.divide(e, den, out=np.zeros_like(e), where=den > 0)
        out[qs, h] = w @ v[ks, h // group]
    return out


def packed(lens_q, lens_k, hq, hkv, d, dtype, seed=0):
    rng = np.random.default_rng(seed)
    cu_q = np.concatenate([[0], np.cumsum(lens_q)]).astype(np.uint32)
    cu_k = np.concatenate([[0], np.cumsum(lens_k)]).astype(np.uint32)
    q = rng.standard_normal((int(cu_q[-1]), hq, d)).astype(dtype)
    k = rng.standard_normal((int(cu_k[-1]), hkv, d)).astype(dtype)
    v = rng.standard_normal((int(cu_k[-1]), hkv, d)).astype(dtype)
    return q, k, v, cu_q, cu_k


# ragged lengths; prefill (lq = lk), chunked prefill against a cache (lk > lq), more queries than
# keys, empty sequences on either side
LENGTHS = [
    ([5], [5]),
    ([1, 63, 200, 130], [1, 63, 200, 130]),
    ([3, 64, 17], [100, 64, 300]),
    ([40, 0, 7, 20], [10, 5, 0, 20]),
    ([1, 1, 1], [576, 33, 129]),
]
PARAMS = [
    {},
    {"causal": True},
    {"causal": True, "window_size_left": 16},
    {"window_size_left": 8, "window_size_right": 3},
    {"causal": True, "softcap": 5.0, "softmax_scale": 0.3},
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, ml_dtypes.bfloat16, np.float16])
@pytest.mark.parametrize("lens", LENGTHS)
@pytest.mark.parametrize("params", PARAMS)
def test_matches_flash_attn_semantics(dtype, lens, params):
    hq, hkv, d = (8, 2, 64) if len(lens[0]) != 3 else (4, 1, 59)   # GQA, and MQA with an odd head dim
    q, k, v, cu_q, cu_k = packed(*lens, hq, hkv, d, dtype, seed=len(lens[0]))
    before = [x.copy() for x in (q, k, v, cu_q, cu_k)]
    out = fuel_cy.attention_varlen(q, k, v, cu_q, cu_k, **params)
    assert out.shape == q.shape and out.dtype == q.dtype and out.flags.c_contiguous
    expected = reference(q, k, v, cu_q, cu_k, params.get("softmax_scale"), params.get("causal", False),
                         params.get("window_size_left"), params.get("window_size_right"), params.get("softcap"))
    code = CODES[np.dtype(dtype)]
    assert rel(out, expected) <= bound(code, d, int(max(lens[1])), compute="f32"), (code, rel(out, expected))
    assert all(np.array_equal(a, b) for a, b in zip((q, k, v, cu_q, cu_k), before))
    # rows with no admissible key are exactly zero
    dead = np.all(expected == 0, axis=(1, 2))
    assert not np.asarray(out, np.float64)[dead].any()


@pytest.mark.parametrize("dtype", [np.float32, np.float64, ml_dtypes.bfloat16, np.float16])
@pytest.mark.parametrize("params", [{}, {"causal": True}, {"window_size_left": 20, "window_size_right": 5},
                                    {"softcap": 4.0}])
def test_alibi_is_flash_attns_form(dtype, params):
    """float32 slopes with every dtype; -slope * |p - j| around the bottom-right position, which
    differs from the seed's +slope * (j - i) by more than a constant per row when not causal."""
    lens = ([3, 64, 17, 1], [100, 64, 300, 40])
    q, k, v, cu_q, cu_k = packed(*lens, 8, 2, 64, dtype, seed=11)
    slopes = (2.0 ** -np.arange(1, 9)).astype(np.float32) * 4
    out = fuel_cy.attention_varlen(q, k, v, cu_q, cu_k, slopes, **params)
    expected = reference(q, k, v, cu_q, cu_k, None, params.get("causal", False), params.get("window_size_left"),
                         params.get("window_size_right"), params.get("softcap"), slopes)
    code = CODES[np.dtype(dtype)]
    assert rel(out, expected) <= bound(code, 64, 300, compute="f32"), (code, rel(out, expected))
    assert rel(out, reference(q, k, v, cu_q, cu_k, None, params.get("causal", False), params.get("window_size_left"),
                              params.get("window_size_right"), params.get("softcap"))) > 1e-2   # the slopes act


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16])
def test_alibi_slopes_per_sequence_and_head(dtype):
    """flash-attn's [B, Hq] slopes: sequence b uses row b; [1, Hq] is [Hq] (the same bits)."""
    lens = ([3, 64, 17, 1], [100, 64, 300, 40])
    q, k, v, cu_q, cu_k = packed(*lens, 8, 2, 64, dtype, seed=12)
    per_seq = (np.random.default_rng(12).random((4, 8)) * 2).astype(np.float32)
    out = fuel_cy.attention_varlen(q, k, v, cu_q, cu_k, per_seq, causal=True)
    code = CODES[np.dtype(dtype)]
    assert rel(out, reference(q, k, v, cu_q, cu_k, None, True, slopes=per_seq)) <= bound(code, 64, 300, compute="f32")
    for b in range(4):   # each sequence's rows are those of a call with its slopes alone
        rows = slice(cu_q[b], cu_q[b + 1])
        alone = fuel_cy.attention_varlen(q, k, v, cu_q, cu_k, per_seq[b].copy(), causal=True)
        assert bits(out[rows]) == bits(alone[rows])
    one = per_seq[:1]
    assert bits(fuel_cy.attention_varlen(q, k, v, cu_q, cu_k, one)) == bits(
        fuel_cy.attention_varlen(q, k, v, cu_q, cu_k, np.ascontiguousarray(one[0])))
    msg = input_error_of(fuel_cy.attention_varlen, q, k, v, cu_q, cu_k, np.ones((3, 8), np.float32))
    assert msg and "'alibi_slopes'" in msg and "broadcasts_to" in msg
    msg = input_error_of(fuel_cy.attention_varlen, q, k, v, cu_q, cu_k, np.ones((1, 4, 8), np.float32))
    assert msg and "'alibi_slopes'" in msg and "rank" in msg


def test_alibi_slopes_are_float32_whatever_q_is():
    q, k, v, cu_q, cu_k = packed([5], [9], 2, 2, 8, np.float64)
    msg = input_error_of(fuel_cy.attention_varlen, q, k, v, cu_q, cu_k, np.ones(2, np.float64))
    assert msg and "'alibi_slopes'" in msg and "F32" in msg
    msg = input_error_of(fuel_cy.attention_varlen, q, k, v, cu_q, cu_k, np.ones(3, np.float32))
    assert msg and "'alibi_slopes'" in msg and "dim Hq is shared" in msg


@pytest.mark.parametrize("d", [80, 111, 256])
def test_peers_head_dims(d):
    q, k, v, cu_q, cu_k = packed([33, 129], [97, 129], 4, 2, d, np.float32, seed=d)
    out = fuel_cy.attention_varlen(q, k, v, cu_q, cu_k, causal=True)
    assert rel(out, reference(q, k, v, cu_q, cu_k, causal=True)) <= 2e-5


@pytest.mark.parametrize("dtype", [np.float32, np.float64, ml_dtypes.bfloat16, np.float16])
def test_one_square_causal_sequence_is_attention_flash(dtype):
    """lq = lk: bottom-right and top-left are one mask, and the rows run attention_flash's loops,
    so the bits are attention_flash's (mixed for bf16/f16, in the same P V mode) on the [1, H, S, D]
    view."""
    q, k, v, cu_q, cu_k = packed([300], [300], 8, 2, 64, dtype, seed=3)
    as4 = [np.ascontiguousarray(x.transpose(1, 0, 2)[None]) for x in (q, k, v)]
    if dtype in (np.float32, np.float64):
        pairs = [(fuel_cy.attention_varlen(q, k, v, cu_q, cu_k, causal=True), fuel_cy.attention_flash(*as4, causal=True))]
    else:
        pairs = [(fuel_cy.attention_varlen(q, k, v, cu_q, cu_k, causal=True, round_p=rp),
                  fuel_cy.attention_flash_mixed(*as4, causal=True, round_p=rp)) for rp in (True, False)]
    for out, expected in pairs:
        assert bits(out) == bits(np.ascontiguousarray(expected[0].transpose(1, 0, 2)))


@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, np.float16])
@pytest.mark.parametrize("rp", [True, False])
def test_a_half_batch_gives_each_sequences_flash_bits(dtype, rp):
    """A bf16/f16 batch read in its storage, q included, with its output rounded per row: decode
    steps, a chunk of the task list, prefills, sequences with no key and none with no query,
    each sequence's rows the bits of attention_flash_mixed on that sequence alone (non-causal,
    so top-left and bottom-right agree), each row's log-sum-exp in its place; q a strided view
    of a wider array; no input written."""
    lq, lk = [130, 1, 3, 0, 1, 2, 77], [130, 40, 90, 5, 0, 0, 200]
    q, k, v, cu_q, cu_k = packed(lq, lk, 8, 2, 64, dtype, seed=41)
    wide = np.concatenate([q, q[:, :1]], axis=1)       # q as a view: rows 9 heads apart
    qv = wide[:, :8]
    before = [x.copy() for x in (wide, k, v)]
    out, lse = fuel_cy.attention_varlen(qv, k, v, cu_q, cu_k, return_lse=True, round_p=rp)
    assert out.dtype == np.dtype(dtype) and out.flags.c_contiguous
    for b in range(len(lq)):
        qs, ks = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        if lq[b] == 0:
            continue
        if lk[b] == 0:
            assert not np.any(out[qs].view(np.uint16)) and np.all(lse[:, qs] == np.inf)
            continue
        as4 = [x[s].transpose(1, 0, 2)[None].copy() for x, s in ((q, qs), (k, ks), (v, ks))]
        expected = fuel_cy.attention_flash_mixed(*as4, round_p=rp)
        assert bits(out[qs]) == bits(np.ascontiguousarray(expected[0].transpose(1, 0, 2))), b
    for qs, _, h, sc, _ in scores(q, k, cu_q, cu_k):   # each row's log-sum-exp in its place
        if sc.shape[1]:
            m = sc.max(axis=1)
            assert np.allclose(lse[h, qs], m + np.log(np.exp(sc - m[:, None]).sum(axis=1)), rtol=0, atol=1e-3)
    assert all(bits(x) == bits(y) for x, y in zip((wide, k, v), before))


def test_a_decode_step_sees_the_whole_cache():
    """One query against n cached keys with causal=True attends every key (the seed's top-left
    causal would give key 0 alone): the softmax-weighted mean over all of them."""
    n = 200
    q = np.zeros((1, 2, 16), np.float64)           # equal scores: a plain average
    k = np.random.default_rng(0).standard_normal((n, 2, 16))
    v = np.random.default_rng(1).standard_normal((n, 2, 16))
    cu_q, cu_k = np.array([0, 1], np.uint32), np.array([0, n], np.uint32)
    out = fuel_cy.attention_varlen(q, k, v, cu_q, cu_k, causal=True)
    assert np.allclose(out[0], v.mean(axis=0), rtol=0, atol=1e-12)


def test_sequences_never_see_each_other():
    q, k, v, cu_q, cu_k = packed([50, 70], [50, 70], 2, 2, 32, np.float64, seed=9)
    out = fuel_cy.attention_varlen(q, k, v, cu_q, cu_k)
    v2 = v.copy()
    v2[50:] += 100.0   # the second sequence's values: the first's rows must not move
    out2 = fuel_cy.attention_varlen(q, k, v2, cu_q, cu_k)
    assert np.array_equal(out[:50], out2[:50]) and not np.allclose(out[50:], out2[50:])


@pytest.mark.parametrize("w", [2**63 - 1, 2**62, 2**64 - 1])
def test_huge_windows_are_no_window(w):
    q, k, v, cu_q, cu_k = packed([3, 64, 17, 1], [100, 64, 300, 50], 4, 2, 16, np.float32, seed=1)   # (a decode step)
    plain = fuel_cy.attention_varlen(q, k, v, cu_q, cu_k, causal=True)
    out = fuel_cy.attention_varlen(q, k, v, cu_q, cu_k, causal=True, window_size_left=w, window_size_right=w)
    assert bits(out) == bits(plain)


def test_a_left_window_past_sq_still_masks_under_the_shift():
    """With lk > lq, positions run up to lk - 1: a left window between lq and lk still masks."""
    q, k, v, cu_q, cu_k = packed([10], [300], 2, 2, 16, np.float64, seed=2)
    out = fuel_cy.attention_varlen(q, k, v, cu_q, cu_k, window_size_left=50)
    assert rel(out, reference(q, k, v, cu_q, cu_k, left=50)) <= 1e-12
    assert not np.allclose(out, fuel_cy.attention_varlen(q, k, v, cu_q, cu_k))


def test_deterministic_across_thread_counts():
    q, k, v, cu_q, cu_k = packed([300, 40, 513], [300, 600, 513], 8, 2, 64, np.float32, seed=4)
    runs = []
    for n in (1, 2):
        fuel_cy.set_num_threads(n)
        try:
            runs.append(bits(fuel_cy.attention_varlen(q, k, v, cu_q, cu_k, causal=True)))
        finally:
            fuel_cy.set_num_threads(0)
    assert runs[0] == runs[1]


@pytest.mark.parametrize("which, cu, received", [
    ("cu_seqlens_q", [1, 5, 10], "cu_seqlens_q[0] = 1"),
    ("cu_seqlens_q", [0, 6, 5, 10], "cu_seqlens_q[2] = 5 < cu_seqlens_q[1] = 6"),
    ("cu_seqlens_q", [0, 5, 9], "cu_seqlens_q[2] = 9 but q.shape[0] = 10"),
    ("cu_seqlens_k", [0, 5, 11], "cu_seqlens_k[2] = 11 but the rows of k = 10"),
])
def test_bad_offsets_are_input_errors(which, cu, received):
    q, k, v, cu_q, cu_k = packed([5, 5], [5, 5], 2, 2, 8, np.float32)
    args = {"cu_seqlens_q": cu_q, "cu_seqlens_k": cu_k}
    args[which] = np.array(cu, np.uint32)
    if len(cu) != 3:
        other = "cu_seqlens_k" if which == "cu_seqlens_q" else "cu_seqlens_q"
        args[other] = np.array([0, 3, 5, 10], np.uint32)
    with pytest.raises(fuel_cy.InputError) as e:
        fuel_cy.attention_varlen(q, k, v, args["cu_seqlens_q"], args["cu_seqlens_k"])
    msg = str(e.value)
    assert "attention_varlen" in msg and repr(which) in msg and received in msg and "fuel-cy-model.md" in msg


def test_offsets_of_different_batch_sizes_are_an_input_error():
    q, k, v, cu_q, cu_k = packed([5, 5], [5, 5], 2, 2, 8, np.float32)
    with pytest.raises(fuel_cy.InputError) as e:
        fuel_cy.attention_varlen(q, k, v, cu_q, np.array([0, 10], np.uint32))
    assert "cu_seqlens_k" in str(e.value) and "B1" in str(e.value)


def test_empty_offsets_are_an_input_error():
    q, k, v, _, _ = packed([5], [5], 2, 2, 8, np.float32)
    empty = np.zeros(0, np.uint32)
    with pytest.raises(fuel_cy.InputError) as e:
        fuel_cy.attention_varlen(q, k, v, empty, empty)
    assert "B + 1 >= 1" in str(e.value)


@pytest.mark.parametrize("index", [np.uint32, np.int32])
@pytest.mark.parametrize("seed", range(30))
def test_the_typed_offset_check_accepts_what_the_python_rule_does(seed, index):
    """The validators' typed copy of the offsets rule (fastcheck.pxi) against the rule it copies
    (_prose_checks._cu_seqlens), on offsets that are right or wrong in each way, uint32 and int32
    (negative ones too): the call raises exactly when the rule raises, with its message."""
    from fuel_cy.runtime import _prose_checks

    rng = np.random.default_rng(seed)
    q, k, v, cu_q, cu_k = packed([4, 0, 9], [7, 3, 0], 2, 1, 8, np.float32)
    cu_q, cu_k = cu_q.astype(index), cu_k.astype(index)
    for cu in (cu_q, cu_k):
        how = rng.integers(0, 5 if index == np.int32 else 4)
        if how == 1:
            cu[rng.integers(0, cu.size)] += index(rng.integers(1, 3))
        elif how == 2:
            cu[0] = index(rng.integers(1, 3))
        elif how == 3:
            cu[-1] = index(rng.integers(0, 20))
        elif how == 4:   # a negative offset anywhere, the last included
            cu[rng.integers(0, cu.size)] = -index(rng.integers(1, 2**31 - 1))
    arrays = {"q": q, "k": k, "cu_seqlens_q": cu_q, "cu_seqlens_k": cu_k}
    expected = input_error_of(_prose_checks._cu_seqlens, "attention_varlen", arrays, {}, "contracts/fuel-cy-model.md")
    assert input_error_of(fuel_cy.attention_varlen, q, k, v, cu_q, cu_k) == expected


def _paged_lengths_case(rng, index, how):
    """A paged varlen call's arrays and params, right or wrong in one way (`how`): sequences of
    0-3 queries and 0-20 keys over a pool of 12 blocks of 4 keys, table rows of 5 blocks whose
    slots no sequence reads hold anything (a sentinel, an id past the pool), seqused_k and
    max_seqlen_q/_k given or not."""
    b, mb, bs, nb = 4, 5, 4, 12
    lq, lk = rng.integers(0, 4, b), rng.integers(0, mb * bs + 1, b)
    used = rng.integers(0, lk + 1) if rng.random() < 0.5 else None
    keys = lk if used is None else used
    table = rng.integers(0, nb, (b, mb)).astype(np.int64)
    for i in range(b):
        table[i, -(-int(keys[i]) // bs):] = rng.choice([0xFFFFFFFF if index == np.uint32 else -1, nb, 3])
    params = {}
    if rng.random() < 0.5:
        params = {"max_seqlen_q": int(lq.max()) + int(rng.integers(0, 2)),
                  "max_seqlen_k": int(keys.max()) + int(rng.integers(0, 2))}
    live = [i for i in range(b) if keys[i] > 0]
    if how == 1 and live:   # a block a sequence reads is past the pool (or negative as int32)
        i = int(rng.choice(live))
        table[i, rng.integers(0, -(-int(keys[i]) // bs))] = nb + int(rng.integers(0, 3)) if index == np.uint32 else -2
    elif how == 2:          # a sequence holds more keys than its table row
        lk[rng.integers(0, b)] = mb * bs + 1 + int(rng.integers(0, 3))
    elif how == 3:          # seqused_k past a sequence's keys (or negative as int32)
        used = rng.integers(0, lk + 1)
        used[rng.integers(0, b)] = (lk.max() + 1) if index == np.uint32 else -1
    elif how == 4 and lq.max() > 0:
        params = {"max_seqlen_q": int(lq.max()) - 1}
    elif how == 5 and keys.max() > 0:
        params = {"max_seqlen_k": int(keys.max()) - 1}
    cu_q, cu_k = (np.concatenate([[0], np.cumsum(n)]).astype(index) for n in (lq, lk))
    q = np.zeros((int(lq.sum()), 2, 8), np.float32)
    kc = np.zeros((nb, bs, 1, 8), np.float32)
    arrays = {"q": q, "k": kc, "v": kc.copy(), "cu_seqlens_q": cu_q, "cu_seqlens_k": cu_k,
              "block_table": table.astype(index), "seqused_k": None if used is None else used.astype(index)}
    return arrays, params


@pytest.mark.parametrize("index", [np.uint32, np.int32])
@pytest.mark.parametrize("seed", range(36))
def test_the_typed_paged_and_length_checks_accept_what_the_python_rule_does(seed, index):
    """The typed copy of the rule (fastcheck.pxi) for a block table, seqused_k and max_seqlen_q/_k
    against the rule it copies (_prose_checks._cu_seqlens), each right or wrong in each way,
    uint32 and int32 (negative ones too): the call raises exactly when the rule raises, with its
    message.  (Until the copy covered them, such calls ran the numpy rule: 29-45 us a
    decode-sized call where the typed checks take 10.)"""
    from fuel_cy.runtime import _prose_checks

    rng = np.random.default_rng(seed)
    arrays, params = _paged_lengths_case(rng, index, seed % 6)
    expected = input_error_of(_prose_checks._cu_seqlens, "attention_varlen", arrays, params,
                              "contracts/fuel-cy-model.md")
    got = input_error_of(fuel_cy.attention_varlen, arrays["q"], arrays["k"], arrays["v"], arrays["cu_seqlens_q"],
                         arrays["cu_seqlens_k"], block_table=arrays["block_table"], seqused_k=arrays["seqused_k"],
                         **params)
    assert got == expected
    if seed % 6 == 0:
        assert expected is None
    if expected is None:   # and the typed copy, not the numpy rule, accepted it
        calls = []
        spy = {**_prose_checks.RULES, "attention_varlen": [lambda *a: calls.append(a)]}
        with pytest.MonkeyPatch.context() as m:
            m.setattr(_prose_checks, "RULES", spy)
            fuel_cy.attention_varlen(arrays["q"], arrays["k"], arrays["v"], arrays["cu_seqlens_q"],
                                     arrays["cu_seqlens_k"], block_table=arrays["block_table"],
                                     seqused_k=arrays["seqused_k"], **params)
        assert calls == []



def reference_lse(q, k, cu_q, cu_k, causal=False, slopes=None, softcap=None):
    """flash-attn's softmax_lse [Hq, Tq] in float64: log sum_j exp(s_j) over the admissible keys;
    +inf for a row with none (flash-attn's value)."""
    lse = np.full((np.shape(q)[1], np.shape(q)[0]), np.inf)
    for qs, _, h, s, _ in scores(q, k, cu_q, cu_k, None, causal, None, None, softcap, slopes):
        lq, lk = s.shape
        with np.errstate(divide="ignore"):
            m = s.max(axis=1) if lk else np.full(lq, -np.inf)
            row = m + np.log(np.exp(s - np.where(np.isfinite(m), m, 0)[:, None]).sum(axis=1)) if lk else m
        lse[h, qs] = np.where(np.isfinite(m), row, np.inf)
    return lse


@pytest.mark.parametrize("dtype", [np.float32, np.float64, ml_dtypes.bfloat16, np.float16])
@pytest.mark.parametrize("params", [{}, {"causal": True}, {"causal": True, "softcap": 3.0}])
def test_return_lse_is_flash_attns_softmax_lse(dtype, params):
    lens = ([40, 0, 7, 20, 3], [10, 5, 0, 20, 300])   # empty sequences both ways, lq > lk
    q, k, v, cu_q, cu_k = packed(*lens, 4, 2, 32, dtype, seed=12)
    slopes = np.array([0.5, 0.25, 0.125, 0.0625], np.float32)
    out, lse = fuel_cy.attention_varlen(q, k, v, cu_q, cu_k, slopes, return_lse=True, **params)
    assert lse.dtype == np.float32 and lse.shape == (4, q.shape[0]) and lse.flags.c_contiguous
    assert bits(out) == bits(fuel_cy.attention_varlen(q, k, v, cu_q, cu_k, slopes, **params))
    expected = reference_lse(q, k, cu_q, cu_k, params.get("causal", False), slopes, params.get("softcap"))
    dead = np.isinf(expected)
    assert dead.any() and np.array_equal(np.isinf(lse), dead) and (lse[dead] > 0).all()
    tol = 1e-5 if dtype in (np.float32, np.float64) else 1e-4
    assert np.max(np.abs(lse[~dead] - expected[~dead])) <= tol * max(1.0, np.abs(expected[~dead]).max())


def test_lse_merges_split_keys_as_one_call():
    """The use lse exists for: attention over keys split in two parts, merged by their lse, is
    attention over all keys (flash-attn's and vLLM's merge_attn_states)."""
    q, k, v, _, _ = packed([50], [300], 4, 4, 32, np.float64, seed=13)
    one = lambda a, b: fuel_cy.attention_varlen(q, k[a:b].copy(), v[a:b].copy(), np.array([0, 50], np.uint32),  # noqa: E731
                                                np.array([0, b - a], np.uint32), return_lse=True)
    (o1, l1), (o2, l2) = one(0, 120), one(120, 300)
    full = fuel_cy.attention_varlen(q, k, v, np.array([0, 50], np.uint32), np.array([0, 300], np.uint32))
    m = np.maximum(l1, l2)
    w1, w2 = np.exp(l1 - m).T[:, :, None], np.exp(l2 - m).T[:, :, None]
    # lse is float32 (flash-attn's), so the weights carry its rounding
    assert np.allclose((o1 * w1 + o2 * w2) / (w1 + w2), full, rtol=0, atol=1e-6)


# ---- a paged pool (block_table), seqused_k, max_seqlen_q / max_seqlen_k -------------------------

def paged_pool(k, v, cu_k, block_size, spare=3, seed=0):
    """k, v [Tk, Hkv, D] scattered into a pool [NB, block_size, Hkv, D] in a shuffled block order,
    with `spare` blocks no sequence uses (NaN: reading one would show), and its block_table [B, MBS]."""
    rng = np.random.default_rng(seed)
    lens = np.diff(cu_k).astype(int)
    per = [-(-n // block_size) for n in lens]
    mbs = max(per + [1])
    nb = sum(per) + spare
    order = rng.permutation(nb)
    kp = np.full((nb, block_size) + k.shape[1:], np.nan, k.dtype)
    vp = np.full_like(kp, np.nan)
    table = np.zeros((len(lens), mbs), np.uint32)
    used = 0
    for b, n in enumerate(lens):
        for slot in range(per[b]):
            blk = order[used]
            used += 1
            table[b, slot] = blk
            rows = slice(cu_k[b] + slot * block_size, cu_k[b] + min((slot + 1) * block_size, n))
            m = rows.stop - rows.start
            kp[blk, :m], vp[blk, :m] = k[rows], v[rows]
    return kp, vp, table


@pytest.mark.parametrize("dtype", [np.float32, np.float64, ml_dtypes.bfloat16, np.float16])
@pytest.mark.parametrize("block_size", [1, 16, 256])
@pytest.mark.parametrize("d", [64, 8, 17])
def test_a_paged_pool_gives_the_packed_bits(dtype, block_size, d):
    """flash-attn's block_table: sequence b's key j at row j % BS of block block_table[b, j // BS];
    the same keys as the packed call, so the same bits, and right against float64, whether the
    sequences of several queries pack from the pool through the table (float32/float64, bf16
    P in T) or from a gathered copy (exact P).  D = 8 and 17 run the columns past the last whole
    vector, which once summed with separate multiplies and adds in one copy of the loops only."""
    lens = ([3, 64, 17, 1, 0], [100, 64, 300, 40, 7])
    q, k, v, cu_q, cu_k = packed(*lens, 8, 2, d, dtype, seed=block_size)
    kp, vp, table = paged_pool(k, v, cu_k, block_size, seed=block_size)
    half = dtype in (ml_dtypes.bfloat16, np.float16)
    for params in ({"causal": True}, {"window_size_left": 20, "softcap": 4.0}) + (({"round_p": False},) if half else ()):
        out = fuel_cy.attention_varlen(q, kp, vp, cu_q, cu_k, block_table=table, **params)
        assert bits(out) == bits(fuel_cy.attention_varlen(q, k, v, cu_q, cu_k, **params))
        expected = reference(q, k, v, cu_q, cu_k, None, params.get("causal", False), params.get("window_size_left"),
                             None, params.get("softcap"))
        assert rel(out, expected) <= bound(CODES[np.dtype(dtype)], d, 300, compute="f32")


@pytest.mark.parametrize("dtype", [np.float32, np.float64, ml_dtypes.bfloat16])
def test_paged_chunks_packing_their_own_tiles_give_the_packing_pass_bits(dtype):
    """A paged sequence whose kv heads take one task each (G * Sq rows in one tile) packs its K^T
    tiles inside the task (bf16: its K and V pairs for vdpbf16ps, where P V runs on them), the
    next tile's rows asked for ahead; with a packing pass first instead, the same bits: causal
    (tiles past the diagonal skipped), a window (tiles before it skipped), seqused_k (a tile cut
    short) and lse, and right against float64."""
    c = core()
    lens = ([3, 5, 12, 1], [700, 260, 333, 90])   # G * Sq = 12, 20 and 48 rows: one tile each
    q, k, v, cu_q, cu_k = packed(*lens, 8, 2, 64, dtype, seed=81)
    kp, vp, table = paged_pool(k, v, cu_k, 16, seed=82)
    used = np.array([650, 260, 200, 90], np.uint32)
    saved = c._test_chunk_k_tiles()
    try:
        for kw in ({"causal": True}, {"window_size_left": 150, "softcap": 3.0}, {"seqused_k": used}):
            seen = []
            for on in (True, False):
                assert c._test_chunk_k_tiles(on) is on
                out, lse = fuel_cy.attention_varlen(q, kp, vp, cu_q, cu_k, block_table=table, return_lse=True, **kw)
                seen.append((bits(out), bits(lse)))
            assert seen[0] == seen[1], kw
            if "seqused_k" not in kw:
                expected = reference(q, k, v, cu_q, cu_k, None, kw.get("causal", False), kw.get("window_size_left"),
                                     None, kw.get("softcap"))
                assert rel(out, expected) <= bound(CODES[np.dtype(dtype)], 64, 700, compute="f32"), kw
    finally:
        c._test_chunk_k_tiles(saved)


def assert_switch_keeps_bits(switch, lens, d, dtype, seed, kws, lk_max):
    """attention_varlen on sequences of lens (8 query heads, 2 kv heads), over a paged pool and over
    packed keys, with a testing hook's `switch` on and off: for each of kws, every output and lse
    element has the same bits, and (but under seqused_k) is right against float64."""
    q, k, v, cu_q, cu_k = packed(*lens, 8, 2, d, dtype, seed=seed)
    kp, vp, table = paged_pool(k, v, cu_k, 16, seed=seed + 1)
    saved = switch()
    try:
        for kw in kws:
            seen = []
            for on in (True, False):
                assert switch(on) is on
                for pool in ({"block_table": table}, {}):
                    kk, vv = (kp, vp) if pool else (k, v)
                    out, lse = fuel_cy.attention_varlen(q, kk, vv, cu_q, cu_k, return_lse=True, **pool, **kw)
                    seen.append((bits(out), bits(lse)))
            assert all(x == seen[0] for x in seen), kw
            if "seqused_k" not in kw:
                expected = reference(q, k, v, cu_q, cu_k, None, kw.get("causal", False), kw.get("window_size_left"),
                                     kw.get("window_size_right"), kw.get("softcap"), kw.get("alibi_slopes"))
                assert rel(out, expected) <= bound(CODES[np.dtype(dtype)], d, lk_max, compute="f32"), kw
    finally:
        switch(saved)


@pytest.mark.parametrize("d", [64, 17])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, ml_dtypes.bfloat16])
def test_chunk_tiles_asking_for_their_rows_as_they_go_give_the_same_bits(dtype, d):
    """fc_uarch.h fc_chunk_spread: a chunk's tiles ask for V's rows of the tile during the scores and
    the next tile's K rows during P V (then read V's rows by pointer), a line per step (bf16: the
    tile's K and V pairs, their lines spread evenly over the steps); asked for all at once before
    the scores instead, the same bits (paged and packed): causal, a window with softcap, seqused_k
    (a tile cut short) and ALiBi, G * Sq of 8, 12, 20 and 48 rows (D = 17: rows of two lines, the
    columns past the last whole vector; bf16 pairs with a lone last element)."""
    lens = ([3, 5, 12, 2, 1], [700, 260, 333, 150, 90])
    slopes = np.random.default_rng(87).uniform(0.01, 0.3, (len(lens[0]), 8)).astype(np.float32)
    used = np.array([650, 260, 200, 129, 90], np.uint32)
    kws = ({"causal": True}, {"window_size_left": 150, "softcap": 3.0}, {"seqused_k": used},
           {"causal": True, "alibi_slopes": slopes})
    assert_switch_keeps_bits(core()._test_chunk_spread, lens, d, dtype, 85, kws, 700)


@pytest.mark.parametrize("d", [64, 63])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, ml_dtypes.bfloat16])
def test_chunks_in_the_decode_task_list_give_their_own_calls_bits(dtype, d):
    """Chunks whose kv heads take one task each run in one task list with the decode steps
    (chunks first), over a paged pool and over packed keys; run each as its own call after the
    steps instead, the same bits: causal, a window with softcap, a two-sided window, seqused_k (a
    chunk cut to no key, a step to one), ALiBi per sequence, beside a chunk too tall for one tile
    (G * Sq = 72 > 64) and an empty sequence (an odd head size too: bf16 pairs with a lone last
    element)."""
    lens = ([8, 1, 18, 1, 4, 0, 1, 12], [900, 1300, 400, 70, 260, 30, 5, 333])
    slopes = np.random.default_rng(93).uniform(0.01, 0.3, (len(lens[0]), 8)).astype(np.float32)
    used = np.array([0, 1, 400, 70, 200, 30, 5, 100], np.uint32)
    kws = ({"causal": True}, {"window_size_left": 150, "softcap": 3.0}, {"seqused_k": used},
           {"causal": True, "alibi_slopes": slopes}, {"window_size_left": 40, "window_size_right": 3})
    assert_switch_keeps_bits(core()._test_chunks_in_list, lens, d, dtype, 91, kws, 1300)


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16])
def test_seqused_k_uses_each_sequences_first_keys(dtype):
    """seqused_k[b] <= lk: only the first seqused_k[b] keys of sequence b take part (packed and
    paged alike), as if the sequence had only those."""
    lens = ([3, 64, 17, 1], [100, 64, 300, 40])
    q, k, v, cu_q, cu_k = packed(*lens, 8, 2, 64, dtype, seed=21)
    used = np.array([50, 64, 0, 39], np.uint32)
    keep = np.concatenate([np.arange(cu_k[b], cu_k[b] + used[b]) for b in range(4)]).astype(int)
    cu_used = np.concatenate([[0], np.cumsum(used)]).astype(np.uint32)
    k2, v2 = k[keep], v[keep]
    out = fuel_cy.attention_varlen(q, k, v, cu_q, cu_k, seqused_k=used, causal=True)
    assert bits(out) == bits(fuel_cy.attention_varlen(q, k2, v2, cu_q, cu_used, causal=True))
    assert rel(out, reference(q, k2, v2, cu_q, cu_used, causal=True)) <= bound(CODES[np.dtype(dtype)], 64, 64, compute="f32")
    kp, vp, table = paged_pool(k, v, cu_k, 16)
    assert bits(fuel_cy.attention_varlen(q, kp, vp, cu_q, cu_k, block_table=table, seqused_k=used, causal=True)) == bits(out)


def test_a_half_pool_is_read_only_where_the_call_reads_it():
    """A bf16 pool far larger than the live blocks: no widened copy of it (the call allocates far
    less than the pool), the spare blocks (NaN) never read."""
    from measures import peak_bytes_in_fresh_thread

    q, k, v, cu_q, cu_k = packed([1, 1, 1], [300, 77, 1000], 8, 2, 128, ml_dtypes.bfloat16, seed=5)
    kp, vp, table = paged_pool(k, v, cu_k, 16, spare=2000)
    out, peak = peak_bytes_in_fresh_thread(lambda: fuel_cy.attention_varlen(q, kp, vp, cu_q, cu_k, block_table=table))
    assert np.isfinite(np.asarray(out, np.float32)).all()
    assert peak < kp.nbytes // 3, (peak, kp.nbytes)   # a widened pool alone would be 2 * kp.nbytes
    assert bits(out) == bits(fuel_cy.attention_varlen(q, k, v, cu_q, cu_k))


def test_max_seqlens_are_checked_bounds():
    q, k, v, cu_q, cu_k = packed([3, 9], [10, 4], 2, 2, 8, np.float32)
    plain = fuel_cy.attention_varlen(q, k, v, cu_q, cu_k)
    assert bits(fuel_cy.attention_varlen(q, k, v, cu_q, cu_k, max_seqlen_q=9, max_seqlen_k=10)) == bits(plain)
    msg = input_error_of(fuel_cy.attention_varlen, q, k, v, cu_q, cu_k, max_seqlen_q=8)
    assert msg and "max_seqlen_q" in msg and "sequence 1 has 9" in msg
    msg = input_error_of(fuel_cy.attention_varlen, q, k, v, cu_q, cu_k, max_seqlen_k=9)
    assert msg and "max_seqlen_k" in msg and "sequence 0 has 10" in msg


def test_bad_pools_are_input_errors():
    q, k, v, cu_q, cu_k = packed([3, 9], [10, 40], 2, 2, 8, np.float32)
    kp, vp, table = paged_pool(k, v, cu_k, 16, spare=0)
    bad = table.copy()
    bad[1, 2] = kp.shape[0]
    msg = input_error_of(fuel_cy.attention_varlen, q, kp, vp, cu_q, cu_k, block_table=bad)
    assert msg and "'block_table'" in msg and f"block_table[1, 2] = {kp.shape[0]}" in msg
    msg = input_error_of(fuel_cy.attention_varlen, q, kp, vp, cu_q, cu_k, block_table=table[:, :2].copy())
    assert msg and "'block_table'" in msg and "sequence 1 has 40 keys" in msg
    msg = input_error_of(fuel_cy.attention_varlen, q, kp, vp, cu_q, cu_k, block_table=table[:1].copy())
    assert msg and "'block_table'" in msg and "shape_constraint" in msg
    msg = input_error_of(fuel_cy.attention_varlen, q, k, v, cu_q, cu_k, seqused_k=np.array([11, 3], np.uint32))
    assert msg and "'seqused_k'" in msg and "seqused_k[0] = 11" in msg
    msg = input_error_of(fuel_cy.attention_varlen, q, kp, vp, cu_q, cu_k)   # a pool without its table
    assert msg and "'cu_seqlens_k'" in msg and "the rows of k" in msg


@pytest.mark.parametrize("dtype", [np.float32, np.float64, ml_dtypes.bfloat16, np.float16])
def test_strided_views_are_read_in_place(dtype):
    """q, k, v sliced from one fused projection [T, Hq + 2 Hkv, D] (rows Hq + 2 Hkv heads apart,
    offsets), an expanded kv head (stride 0), a pool of every other block: the bits of the same
    values made contiguous, decode steps and longer sequences alike."""
    lens = ([1, 64, 17, 1], [1, 64, 17, 1])
    hq, hkv, d = 8, 2, 64
    cu = np.concatenate([[0], np.cumsum(lens[0])]).astype(np.uint32)
    qkv = np.random.default_rng(30).standard_normal((int(cu[-1]), hq + 2 * hkv, d)).astype(dtype)
    q, k, v = qkv[:, :hq], qkv[:, hq:hq + hkv], qkv[:, hq + hkv:]
    flat = [np.ascontiguousarray(x) for x in (q, k, v)]
    for params in ({"causal": True}, {"window_size_left": 5}):
        out = fuel_cy.attention_varlen(q, k, v, cu, cu, **params)
        assert bits(out) == bits(fuel_cy.attention_varlen(*flat, cu, cu, **params))
    one = np.broadcast_to(k[:, :1], k.shape)                       # both kv heads the same, stride 0
    assert bits(fuel_cy.attention_varlen(q, one, v, cu, cu)) == bits(
        fuel_cy.attention_varlen(flat[0], np.ascontiguousarray(one), flat[2], cu, cu))
    q2, k2, v2, cu_q, cu_k = packed([1, 3, 1], [40, 70, 9], hq, hkv, d, dtype, seed=31)
    kp, vp, table = paged_pool(k2, v2, cu_k, 16, spare=0)
    kw, vw = (np.repeat(x, 2, axis=0) for x in (kp, vp))           # block i at 2 i: every other block
    out = fuel_cy.attention_varlen(q2, kw[::2], vw[::2], cu_q, cu_k, block_table=table)
    assert bits(out) == bits(fuel_cy.attention_varlen(q2, kp, vp, cu_q, cu_k, block_table=table))
    msg = input_error_of(fuel_cy.attention_varlen, q[::-1], k, v, cu, cu)
    assert msg and "'q'" in msg and "reverse_strides: rejected" in msg


@pytest.mark.parametrize("dtype", [np.float32, np.float64, ml_dtypes.bfloat16])
@pytest.mark.parametrize("lq", [2, 3, 16])
def test_few_query_rows_with_gqa_give_the_bits_of_each_head_alone(dtype, lq):
    """With GQA and G * Sq <= 64 a kv head's query heads share its tiles (K and V read once for
    them): each row's arithmetic stays that of its head alone, so the bits equal multi-head
    attention on K and V repeated per head (which shares nothing), for attention_flash and for a
    varlen chunk alike."""
    hq, hkv, d = 8, 2, 64
    rng = np.random.default_rng(lq)
    q = rng.standard_normal((2, hq, lq, d)).astype(dtype)
    k, v = (rng.standard_normal((2, hkv, 300, d)).astype(dtype) for _ in range(2))
    flash = fuel_cy.attention_flash_mixed if dtype == ml_dtypes.bfloat16 else fuel_cy.attention_flash
    rep = [np.ascontiguousarray(np.repeat(x, hq // hkv, axis=1)) for x in (k, v)]
    for kw in ({}, {"causal": True}, {"softcap": 3.0}):
        assert bits(flash(q, k, v, **kw)) == bits(flash(q, *rep, **kw))
    qs, ks, vs, cu_q, cu_k = packed([lq, 1, lq], [300, 40, 77], hq, hkv, d, dtype, seed=lq)
    krep, vrep = (np.ascontiguousarray(np.repeat(x, hq // hkv, axis=1)) for x in (ks, vs))
    slopes = (2.0 ** -np.arange(1, hq + 1)).astype(np.float32)
    for kw in ({"causal": True}, {"window_size_left": 7}):
        assert bits(fuel_cy.attention_varlen(qs, ks, vs, cu_q, cu_k, slopes, **kw)) == bits(
            fuel_cy.attention_varlen(qs, krep, vrep, cu_q, cu_k, slopes, **kw))


def test_a_pool_of_one_repeated_block_is_copied_not_misread():
    """A pool broadcast over its blocks (stride 0 on NB) is not evenly spaced rows: read as its
    copy, the same bits."""
    q, k, v, cu_q, cu_k = packed([1, 2], [16, 16], 4, 2, 8, np.float32, seed=40)
    one = np.broadcast_to(k[None, :16], (3, 16, 2, 8))
    vone = np.broadcast_to(v[None, :16], (3, 16, 2, 8))
    table = np.array([[0], [2]], np.uint32)
    out = fuel_cy.attention_varlen(q, one, vone, cu_q, cu_k, block_table=table)
    assert bits(out) == bits(fuel_cy.attention_varlen(q, np.ascontiguousarray(one), np.ascontiguousarray(vone),
                                                      cu_q, cu_k, block_table=table))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, ml_dtypes.bfloat16, np.float16])
@pytest.mark.parametrize("hq,hkv", [(16, 4), (16, 2), (12, 3), (8, 8), (12, 4), (14, 2)],
                         ids=["G4", "G8", "G4-odd-heads", "mha", "G3", "G7"])
def test_decode_steps_serving_several_kv_heads_give_each_heads_bits(dtype, hq, hkv):
    """A decode task may serve several kv heads (their rows' heads read together, each head's
    query heads padded to 4 rows with copies of its last): 1, 2, 3 or 4 kv heads per task, paged
    and packed, with ALiBi, a window and softcap, give the bits of a task per kv head, right
    against float64."""
    c = core()
    d, lens_k = 64, [700, 2100, 33, 1500, 9]
    q, k, v, cu_q, cu_k = packed([1] * len(lens_k), lens_k, hq, hkv, d, dtype, seed=hq + hkv)
    kp, vp, table = paged_pool(k, v, cu_k, 16, seed=hq)
    slopes = (2.0 ** -np.arange(1, hq + 1)).astype(np.float32)
    saved = c._test_decode_heads_per_task()
    try:
        for kw in ({"causal": True}, {"window_size_left": 1000, "softcap": 5.0}):
            seen = []
            for n in (1, 2, 3, 4):
                assert c._test_decode_heads_per_task(n) == n
                out = fuel_cy.attention_varlen(q, k, v, cu_q, cu_k, slopes, **kw)
                assert bits(fuel_cy.attention_varlen(q, kp, vp, cu_q, cu_k, slopes, block_table=table, **kw)) == bits(out)
                seen.append(bits(out))
            assert all(x == seen[0] for x in seen), kw
            expected = reference(q, k, v, cu_q, cu_k, None, kw.get("causal", False), kw.get("window_size_left"),
                                 None, kw.get("softcap"), slopes=slopes)
            assert rel(out, expected) <= bound(CODES[np.dtype(dtype)], d, max(lens_k), compute="f32"), kw
    finally:
        c._test_decode_heads_per_task(saved)
    with pytest.raises(ValueError):
        c._test_decode_heads_per_task(-1)


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16])
def test_decode_steps_handed_out_longest_first_give_the_batch_order_bits(dtype):
    """The decode steps of a batch whose lengths vary (and one under a window shorter than its
    context) are handed to the threads longest first; in batch order instead, every output and
    lse element has the same bits, paged and packed, and is right against float64."""
    c = core()
    d, lens_k = 64, [40, 1900, 300, 1300, 7, 2500, 900]
    q, k, v, cu_q, cu_k = packed([1] * len(lens_k), lens_k, 8, 2, d, dtype, seed=71)
    kp, vp, table = paged_pool(k, v, cu_k, 16, seed=72)
    saved = c._test_decode_longest_first()
    try:
        for kw in ({"causal": True}, {"window_size_left": 100}):
            seen = []
            for on in (True, False):
                assert c._test_decode_longest_first(on) is on
                for pool in ({}, {"block_table": table}):
                    kk, vv = (kp, vp) if pool else (k, v)
                    out, lse = fuel_cy.attention_varlen(q, kk, vv, cu_q, cu_k, return_lse=True, **pool, **kw)
                    seen.append((bits(out), bits(lse)))
            assert all(x == seen[0] for x in seen), kw
            expected = reference(q, k, v, cu_q, cu_k, None, kw.get("causal", False), kw.get("window_size_left"),
                                 None, None)
            assert rel(out, expected) <= bound(CODES[np.dtype(dtype)], d, max(lens_k), compute="f32"), kw
    finally:
        c._test_decode_longest_first(saved)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, ml_dtypes.bfloat16, np.float16])
def test_decode_steps_over_long_contexts(dtype):
    """Decode steps (one query) over contexts longer than the keys whose dots a step computes in
    one run (2048 at most, fewer with more query heads per kv head), with a left window that
    starts mid-run and ends past it: right against float64, the same bits from a paged pool as
    from packed keys, and with GQA the bits of each head alone (K and V repeated per head)."""
    hq, hkv, d = 8, 2, 64
    lens_k = [5000, 2048, 2049, 130, 4097]
    q, k, v, cu_q, cu_k = packed([1] * len(lens_k), lens_k, hq, hkv, d, dtype, seed=31)
    kp, vp, table = paged_pool(k, v, cu_k, 16, seed=31)
    krep, vrep = (np.ascontiguousarray(np.repeat(x, hq // hkv, axis=1)) for x in (k, v))
    for kw in ({"causal": True}, {"window_size_left": 2500, "softcap": 5.0}, {"window_size_left": 100}):
        out = fuel_cy.attention_varlen(q, k, v, cu_q, cu_k, **kw)
        expected = reference(q, k, v, cu_q, cu_k, None, kw.get("causal", False), kw.get("window_size_left"),
                             None, kw.get("softcap"))
        assert rel(out, expected) <= bound(CODES[np.dtype(dtype)], d, max(lens_k), compute="f32"), kw
        assert bits(fuel_cy.attention_varlen(q, kp, vp, cu_q, cu_k, block_table=table, **kw)) == bits(out), kw
        assert bits(fuel_cy.attention_varlen(q, krep, vrep, cu_q, cu_k, **kw)) == bits(out), kw


@pytest.mark.parametrize("dtype", [np.float32, np.float64, ml_dtypes.bfloat16, np.float16])
def test_a_masked_keys_k_row_never_reaches_the_output(dtype):
    """The contract's numerics: a NaN in the `k` row of a key that the causal mask or a window
    removes from some rows leaves those rows' bits as they were (the mask replaces the score), for
    a chunk and a decode step, packed and paged."""
    q, k, v, cu_q, cu_k = packed([5, 1], [20, 9], 4, 2, 16, dtype, seed=31)
    # sequence 0: query i sits at key i + 15, so causal removes key 19 from queries 0..3 (query 4
    # sees it); sequence 1's one query sits at key 8, and a left window of 3 removes its key 2
    poisoned = k.copy()
    poisoned[19] = np.nan
    poisoned[int(cu_k[1]) + 2] = np.nan
    kp, vp, table = paged_pool(k, v, cu_k, 4)
    kpp, _, table2 = paged_pool(poisoned, v, cu_k, 4)
    assert (table == table2).all()
    for params, kept in (({"causal": True}, [0, 1, 2, 3]), ({"causal": True, "window_size_left": 3}, [0, 1, 2, 3, 5])):
        clean = fuel_cy.attention_varlen(q, k, v, cu_q, cu_k, **params)
        for out in (fuel_cy.attention_varlen(q, poisoned, v, cu_q, cu_k, **params),
                    fuel_cy.attention_varlen(q, kpp, vp, cu_q, cu_k, block_table=table, **params)):
            assert bits(out[kept]) == bits(clean[kept]), params
            # (the rows that do see a poisoned key are NaN: the test poisons what it claims)
            assert np.isnan(np.asarray(out[4], np.float64)).all()


# ---- int32 index arrays (flash-attn's and torch's dtype) ------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16])
def test_int32_index_arrays_give_the_uint32_bits(dtype):
    """flash-attn's cu_seqlens are int32 (torch.cumsum(..., dtype=torch.int32)), and so are vLLM's
    block tables: the contract takes I32 beside U32 for every index array, read as the uint32 each
    non-negative value equals, so the same bits, forward (packed and paged, seqused_k) and backward,
    and right against float64."""
    lens = ([3, 64, 17, 1], [100, 64, 300, 40])
    q, k, v, cu_q, cu_k = packed(*lens, 8, 2, 64, dtype, seed=5)
    i32 = lambda x: x.astype(np.int32)  # noqa: E731
    used = np.array([50, 64, 0, 39], np.uint32)
    kp, vp, table = paged_pool(k, v, cu_k, 16, seed=5)
    calls = [((q, k, v, cu_q, cu_k), {"causal": True}),
             ((q, kp, vp, cu_q, cu_k), {"block_table": table, "seqused_k": used, "window_size_left": 30})]
    for args, kw in calls:
        out = fuel_cy.attention_varlen(*args, **kw)
        got = fuel_cy.attention_varlen(*args[:3], i32(args[3]), i32(args[4]),
                                       **{n: i32(a) if isinstance(a, np.ndarray) else a for n, a in kw.items()})
        assert got.dtype == out.dtype and bits(got) == bits(out)
    expected = reference(q, k, v, cu_q, cu_k, causal=True)
    assert rel(fuel_cy.attention_varlen(q, k, v, i32(cu_q), i32(cu_k), causal=True), expected) <= bound(
        CODES[np.dtype(dtype)], 64, 300, compute="f32")
    do = np.ones_like(q)
    grads = fuel_cy.attention_varlen_backward(q, k, v, do, cu_q, cu_k, seqused_k=used, causal=True)
    grads32 = fuel_cy.attention_varlen_backward(q, k, v, do, i32(cu_q), i32(cu_k), seqused_k=i32(used), causal=True)
    assert all(bits(a) == bits(b) for a, b in zip(grads, grads32))


@pytest.mark.parametrize("which", ["cu_seqlens_q", "cu_seqlens_k", "block_table", "seqused_k"])
def test_a_negative_int32_index_is_an_input_error(which):
    """An int32 index array's values must be >= 0 (the contract reads each as the uint32 it equals):
    a negative block id would pass the bound `< NB` as a small number and be read by the core as one
    past 2**31, and a negative seqused_k the bound `<= lk`. Each is an InputError naming the array and
    the first negative element, before any compute."""
    lens = ([3, 6], [10, 20])
    q, k, v, cu_q, cu_k = packed(*lens, 4, 2, 16, np.float32, seed=3)
    kp, vp, table = paged_pool(k, v, cu_k, 4, seed=3)
    args = {"cu_seqlens_q": cu_q.astype(np.int32), "cu_seqlens_k": cu_k.astype(np.int32),
            "block_table": table.astype(np.int32), "seqused_k": np.array([5, 7], np.int32)}
    bad = args[which].copy()
    pos = (1, 0) if which == "block_table" else (bad.size - 1,)   # (a slot sequence 1 reads)
    bad[pos] = -7
    args[which] = bad
    at = ", ".join(str(i) for i in pos)
    for kernel, extra in ((fuel_cy.attention_varlen, ()), (fuel_cy.attention_varlen_backward, (np.ones_like(q),))):
        if kernel is fuel_cy.attention_varlen_backward and which == "block_table":
            continue   # (the backward takes packed keys only)
        keys = (kp, vp) if kernel is fuel_cy.attention_varlen else (k, v)
        kw = {"seqused_k": args["seqused_k"]}
        if kernel is fuel_cy.attention_varlen:
            kw["block_table"] = args["block_table"]
        msg = input_error_of(kernel, q, *keys, *extra, args["cu_seqlens_q"], args["cu_seqlens_k"], **kw)
        assert msg and kernel.__name__ in msg and f"input {which!r}" in msg and ">= 0" in msg, msg
        assert f"{which}[{at}] = -7" in msg, msg


def test_int32_table_padding_is_never_read():
    """A block_table slot no sequence reads may hold anything, as with uint32 (vLLM-style padding):
    -1 there in int32 gives the bits of 0xFFFFFFFF there in uint32, while -1 in a slot a sequence
    reads is an InputError."""
    lens = ([3, 6], [10, 20])
    q, k, v, cu_q, cu_k = packed(*lens, 4, 2, 16, np.float32, seed=4)
    kp, vp, table = paged_pool(k, v, cu_k, 4, seed=4)
    assert table.shape[1] == 5   # sequence 0 reads slots 0-2 of its row, sequence 1 all five
    padded32, padded_u = table.astype(np.int32), table.copy()
    padded32[0, 3:], padded_u[0, 3:] = -1, 0xFFFFFFFF
    i32 = lambda x: x.astype(np.int32)  # noqa: E731
    out = fuel_cy.attention_varlen(q, kp, vp, cu_q, cu_k, block_table=padded_u, causal=True)
    assert bits(fuel_cy.attention_varlen(q, kp, vp, i32(cu_q), i32(cu_k), block_table=padded32, causal=True)) == bits(out)
    assert bits(out) == bits(fuel_cy.attention_varlen(q, k, v, cu_q, cu_k, causal=True))
    padded32[0, 2] = -1
    msg = input_error_of(fuel_cy.attention_varlen, q, kp, vp, cu_q, cu_k, block_table=padded32)
    assert msg and "input 'block_table'" in msg and "block_table[0, 2] = -1" in msg, msg
