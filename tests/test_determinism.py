"""Same inputs, same bits: across runs and thread counts; inputs untouched; outputs fully written."""
from __future__ import annotations

import threading

import ml_dtypes
import numpy as np
import pytest

import fuel_cy
from fuel_cy.runtime.cpu import core

DTYPES = [np.float32, np.float64, ml_dtypes.bfloat16, np.float16]


def _calls(dtype):
    rng = np.random.default_rng(21)
    r = lambda *s: rng.standard_normal(s).astype(dtype)  # noqa: E731
    q, k, v, do = r(2, 4, 70, 32), r(2, 2, 150, 32), r(2, 2, 150, 32), r(2, 4, 70, 32)
    slopes = (rng.random(4) * 0.3).astype(dtype)
    kc, vc = r(40, 8, 2, 32), r(40, 8, 2, 32)
    table = rng.permutation(40)[:16].reshape(2, 8).astype(np.uint32)
    lens = np.array([61, 17], np.uint32)
    params = dict(causal=True, window_size_left=40, softcap=3.0)
    return [
        ("attention_naive", (q, k, v, slopes), params),
        ("attention_flash", (q, k, v, slopes), dict(params, k_len=120)),
        ("attention_paged_naive", (q[:, :, :3].copy(), kc, vc, table, lens, slopes), {"softcap": 3.0}),
        ("attention_flash_backward", (q, k, v, do, slopes), params),
    ]


def _bits(result):
    parts = result if isinstance(result, tuple) else (result,)
    return [np.ascontiguousarray(p).view(np.uint8).tobytes() for p in parts]



def _same_bits_through(hook, forms, bad, calls) -> None:
    """Every call gives the same bits under each form a testing hook switches to (the CPU's own
    choice restored after), and the hook refuses each value in `bad`."""
    saved = hook()
    seen = []
    try:
        for form in forms:
            assert hook(form) == form
            seen.append([_bits(f()) for f in calls])
    finally:
        hook(saved)
    assert all(s == seen[0] for s in seen)
    for value in bad:
        with pytest.raises(ValueError):
            hook(value)

@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_bitwise_across_runs_and_thread_counts(dtype):
    for name, args, params in _calls(dtype):
        fn = getattr(fuel_cy, name)
        before = [None if a is None else a.copy() for a in args]
        try:
            fuel_cy.set_num_threads(1)
            one = _bits(fn(*args, **params))
            fuel_cy.set_num_threads(2)
            two = _bits(fn(*args, **params))
            again = _bits(fn(*args, **params))
        finally:
            fuel_cy.set_num_threads(0)
        assert one == two == again, name
        for a, b in zip(args, before):
            assert a is None or np.array_equal(a.view(np.uint8), b.view(np.uint8)), f"{name} modified an input"


class _PoisonedNumpy:
    """numpy, except that `empty` hands out NaN-filled memory (a poisoned allocator)."""

    def __getattr__(self, name):
        return getattr(np, name)

    @staticmethod
    def empty(shape, dtype=float, **kw):
        out = np.empty(shape, dtype=dtype, **kw)
        if np.dtype(dtype).kind == "f":
            out.fill(np.nan)
        else:
            out.fill(0xAB)
        return out


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_outputs_fully_written_with_poisoned_allocations(dtype, monkeypatch):
    calls = _calls(dtype)
    clean = {name: _bits(getattr(fuel_cy, name)(*args, **params)) for name, args, params in calls}
    monkeypatch.setattr(core(), "_np", _PoisonedNumpy())
    for name, args, params in calls:
        result = getattr(fuel_cy, name)(*args, **params)
        parts = result if isinstance(result, tuple) else (result,)
        assert not any(np.isnan(np.asarray(p, np.float64)).any() for p in parts), name
        assert _bits(result) == clean[name], name


def test_concurrent_python_threads_match_serial():
    calls = _calls(np.float32)
    serial = {name: _bits(getattr(fuel_cy, name)(*args, **params)) for name, args, params in calls}
    results, errors = [], []

    def worker(i):
        try:
            name, args, params = calls[i % len(calls)]
            for _ in range(3):
                results.append((name, _bits(getattr(fuel_cy, name)(*args, **params))))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(results) == 24
    assert all(bits == serial[name] for name, bits in results)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_chunked_packing_gives_the_same_bits(dtype, monkeypatch):
    # long sequences pack K in chunks of kv heads; chunk boundaries must not change any result
    calls = [c for c in _calls(dtype) if c[0] != "attention_paged_naive"]
    whole = {name: _bits(getattr(fuel_cy, name)(*args, **params)) for name, args, params in calls}
    monkeypatch.setattr(core(), "PACKED_BUDGET_BYTES", 1)
    for name, args, params in calls:
        assert _bits(getattr(fuel_cy, name)(*args, **params)) == whole[name], name


def _paged(dtype, rng, hq, hkv, d: int = 64):
    """A paged decode's inputs: B=4, two query slots, head size d, a pool of 40 blocks of 16 keys in
    random order, context lengths 160, 1, 77 and 130 (tiles and groups cut short)."""
    b, sq, bs, nblocks = 4, 2, 16, 40
    q = rng.standard_normal((b, hq, sq, d)).astype(dtype)
    kc = rng.standard_normal((nblocks, bs, hkv, d)).astype(dtype)
    vc = rng.standard_normal((nblocks, bs, hkv, d)).astype(dtype)
    table = rng.permutation(nblocks)[: b * 10].reshape(b, 10).astype(np.uint32)
    return q, kc, vc, table, np.array([160, 1, 77, 130], np.uint32)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_paged_bits_do_not_depend_on_how_heads_are_grouped(dtype):
    """Paged tasks serve several kv heads at once, as many as keeps every thread busy: at B=4,
    Hkv=8 one thread takes all 8 heads per task and two threads take 4, yet the bits agree."""
    q, kc, vc, table, lens = _paged(dtype, np.random.default_rng(8), 32, 8)
    outs = []
    try:
        for threads in (1, 2):
            fuel_cy.set_num_threads(threads)
            outs.append(fuel_cy.attention_paged_naive(q, kc, vc, table, lens).view(np.uint8).tobytes())
    finally:
        fuel_cy.set_num_threads(0)
    assert outs[0] == outs[1]


def _decode_case(dtype, seed: int, d: int = 64):
    """A paged pool (16 query heads over 4 kv heads, _paged's contexts, head size d) with ALiBi
    slopes, and the varlen form of decode steps over it beside a chunk of 8 queries: (q, kc, vc,
    table, lens, slopes, (qv, cu_q, cu_k))."""
    rng = np.random.default_rng(seed)
    q, kc, vc, table, lens = _paged(dtype, rng, 16, 4, d)
    slopes = rng.uniform(0.01, 0.3, 16).astype(dtype)
    cu_q = np.array([0, 1, 2, 10, 11], np.uint32)   # decode steps, and a chunk of 8 queries
    cu_k = np.concatenate([[0], np.cumsum(lens)]).astype(np.uint32)
    qv = rng.standard_normal((int(cu_q[-1]), 16, d)).astype(dtype)
    return q, kc, vc, table, lens, slopes, (qv, cu_q, cu_k)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_paged_decode_key_groups_give_the_same_bits(dtype):
    """fc_uarch.h fc_paged_group: the float32/float64 paged decode's heads loops visit the keys in
    groups (asking for the rows a lookahead on before each); every group size from 1 to 16 gives
    the same bits: attention_paged_naive (GQA, two query slots, context lengths of 1, 77, 130 and
    160 keys, so groups cut short at a tile's and a sequence's end, with ALiBi) and
    attention_varlen's decode steps over a paged pool beside a chunk."""
    q, kc, vc, table, lens, slopes, (qv, cu_q, cu_k) = _decode_case(dtype, 31)
    calls = [lambda: fuel_cy.attention_paged_naive(q, kc, vc, table, lens),
             lambda: fuel_cy.attention_paged_naive(q, kc, vc, table, lens, alibi_slopes=slopes),
             lambda: fuel_cy.attention_varlen(qv, kc, vc, cu_q, cu_k, block_table=table, causal=True)]
    _same_bits_through(core()._test_paged_group, (16, 1, 3, 4, 8, 13), (0, 17), calls)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, ml_dtypes.bfloat16], ids=["f32", "f64", "bf16"])
@pytest.mark.parametrize("d", [64, 48, 40])
def test_paged_spread_requests_give_the_same_bits(dtype, d):
    """fc_uarch.h fc_paged_spread: the float32/float64 paged heads loops, and a bf16 decode step's
    scores on vdpbf16ps, ask for their lookahead rows in a burst per group or a line per step of
    their products; both give the same bits at every group size, in attention_paged_naive (GQA,
    two query slots, contexts of 1, 77, 130 and 160 keys, so requests run past a tile's and a
    sequence's end, with ALiBi) and in attention_varlen's decode steps over the pool beside a chunk
    (bf16: with round_p's weights and without).  The float loops take the spread form where 2W
    divides D and the burst elsewhere: D = 64 spreads at every level, 48 takes the burst in f32 at
    AVX-512, 40 at AVX-512 and in f32 at AVX2, so both sides of that test run at the AVX levels;
    the bf16 scores take any D, 40 and 48 with a masked last step."""
    q, kc, vc, table, lens, slopes, (qv, cu_q, cu_k) = _decode_case(dtype, 53, d)
    varlen = lambda **kw: fuel_cy.attention_varlen(qv, kc, vc, cu_q, cu_k, block_table=table,  # noqa: E731
                                                   causal=True, **kw)
    if dtype == ml_dtypes.bfloat16:
        calls = [varlen, lambda: varlen(round_p=False),
                 # (the keys packed: the pool's first rows as [T, Hkv, D])
                 lambda: fuel_cy.attention_varlen(qv, *(x.reshape(-1, 4, d)[:int(cu_k[-1])] for x in (kc, vc)),
                                                  cu_q, cu_k, causal=True)]
    else:
        calls = [lambda: fuel_cy.attention_paged_naive(q, kc, vc, table, lens),
                 lambda: fuel_cy.attention_paged_naive(q, kc, vc, table, lens, alibi_slopes=slopes),
                 varlen]
    hook, group = core()._test_paged_spread, core()._test_paged_group
    saved = group()
    try:
        for g in (4, 1, 3, 8, 16):
            group(g)
            _same_bits_through(hook, (0, 1), (-1, 2), calls)
    finally:
        group(saved)


@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, np.float16], ids=["bf16", "f16"])
def test_half_pool_l1_requests_give_the_same_bits(dtype):
    """fc_uarch.h fc_h16_l1_ahead: the half-pool heads loops (bf16/f16 pools under float32 math)
    may also ask for a head's rows some keys on into L1; none, or any distance up to the 16 keys
    of row pointers the callers pass, gives the same bits: attention_paged_mixed (GQA, two query
    slots, contexts of 1, 77, 130 and 160 keys, so requests run past a tile's and a sequence's end,
    with ALiBi and softcap) and attention_varlen's decode steps over the pool beside a chunk, with
    round_p's weights and without."""
    q, kc, vc, table, lens, slopes, (qv, cu_q, cu_k) = _decode_case(dtype, 43)
    calls = [lambda: fuel_cy.attention_paged_mixed(q, kc, vc, table, lens),
             lambda: fuel_cy.attention_paged_mixed(q, kc, vc, table, lens, slopes, softcap=4.0),
             lambda: fuel_cy.attention_varlen(qv, kc, vc, cu_q, cu_k, block_table=table, causal=True),
             lambda: fuel_cy.attention_varlen(qv, kc, vc, cu_q, cu_k, block_table=table, causal=True,
                                              round_p=False)]
    _same_bits_through(core()._test_h16_l1_ahead, (0, 16, 1, 5, 8, 12), (-1, 17), calls)


def _score_tile_case(dtype, seed: int):
    """(q, k, v) and the flash calls whose score tiles fc_qk_slab and fc_qk_fused_max change:
    plain rows over 330 keys (tiles of 128, 128 and 74), causal (diagonal tiles cut short), GQA,
    203 rows (a short last slab), a GQA tile of stacked heads with D = 40, softcap and ALiBi (the
    transformed rows), a boolean mask, and the causal backward."""
    rng = np.random.default_rng(seed)
    r = lambda *s: rng.standard_normal(s).astype(dtype)  # noqa: E731
    q, k, v, do = r(1, 4, 203, 48), r(1, 2, 330, 48), r(1, 2, 330, 48), r(1, 4, 203, 48)
    slopes = rng.uniform(0.01, 0.3, 4).astype(dtype)
    mask = rng.random((1, 1, 203, 330)) < 0.8
    # a few positions of 4 query heads per kv head stacked into one tile, D not a multiple of 16
    qs, ks, vs = r(2, 8, 5, 40), r(2, 2, 77, 40), r(2, 2, 77, 40)
    return (q, k, v), [lambda: fuel_cy.attention_flash(qs, ks, vs, causal=True),
                       lambda: fuel_cy.attention_flash(q, k, v),
                       lambda: fuel_cy.attention_flash(q, k, v, causal=True),
                       lambda: fuel_cy.attention_flash(q, k, v, slopes, softcap=5.0),
                       lambda: fuel_cy.attention_masked(q, k, v, mask),
                       lambda: fuel_cy.attention_flash_backward(q, k, v, do, causal=True)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_flash_score_slabs_give_the_same_bits(dtype):
    """fc_uarch.h fc_qk_slab: the flash tile's scores and softmax in slabs of query rows or the
    whole tile at once give the same bits: plain rows, causal (diagonal tiles cut short), GQA, a
    row count that leaves a short last slab, a GQA tile of stacked heads with D = 40, softcap and
    ALiBi (the transformed rows), a boolean mask, and the backward, whose forward statistics do
    not go through the slabs."""
    _, calls = _score_tile_case(dtype, 37)
    _same_bits_through(core()._test_qk_slab, (0, 4, 8, 12, 16, 32, 64), (-4, 2, 6, 68), calls)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_row_maxima_kept_with_the_scores_give_the_same_bits(dtype):
    """fc_uarch.h fc_qk_fused_max: a flash tile's row maxima taken from its sums as they are
    stored, or by a pass over the stored rows, give the same bits, alone and under every slab
    size: whole and short key tiles (330 keys: 128, 128, 74), causal (the diagonal tiles' rows
    that attend part of them keep the pass), GQA, stacked heads with D = 40, the transformed rows
    (softcap, ALiBi, a mask), which never take it, and rows whose scores hold a NaN or are -inf but
    for a NaN (a -inf query entry against a zero key entry), where the max must come out as the
    pass gives it; in every register block the level has."""
    (q, k, v), calls = _score_tile_case(dtype, 41)
    # row 3 of head 0: -inf against every key's positive first entry, but NaN at key 200 (0 there);
    # row 9: a NaN entry, so NaN against every key
    qx, kx = q.copy(), k.copy()
    qx[0, 0, 3, :] = 0
    qx[0, 0, 3, 0] = -np.inf
    kx[0, 0, :, 0] = np.abs(kx[0, 0, :, 0]) + 0.5
    kx[0, 0, 200, 0] = 0
    qx[0, 0, 9, 5] = np.nan
    calls.append(lambda: fuel_cy.attention_flash(qx, kx, v))
    out = fuel_cy.attention_flash(qx, kx, v)
    assert np.isnan(out[0, 0, 3]).all() and np.isnan(out[0, 0, 9]).all()
    assert np.isfinite(np.delete(out[0, 0], [3, 9], axis=0)).all()
    slab, block = core()._test_qk_slab, core()._test_gemm_block
    saved = slab(), block()
    try:
        for b in core()._test_gemm_blocks():   # (the wide block's columns: 4W at a time, then 2W)
            block(b)
            for n in (0, 8, 12, 64):
                slab(n)
                _same_bits_through(core()._test_qk_fused_max, (False, True), (), calls)
    finally:
        slab(saved[0])
        block(saved[1])


def test_micro_architecture_choices_follow_the_vendor():
    """fc_uarch.h, at AVX-512: AMD CPUs take 32 backward rows per step (128 where all five
    products run on vdpbf16ps) and the narrow register block of Q K^T and P V, the others
    (Intel, measured faster in each) 64 rows and the wide block; every CPU measured took the
    strided PV form and, at AVX-512, two register blocks per A^T copy; AMD CPUs at AVX-512 ask
    for dK's and dV's rows ahead where the two pass 1 MB (Zen 4's L2), the others never, and a
    chunk's tiles ask for their next rows a line per product step (the others all at once), and
    the float32/float64 paged decode takes its keys four at a time (the others 16).  Below
    AVX-512 every CPU takes the strided PV form, 64 rows, one block per copy, the narrow register
    block (the only one its 16 registers hold), no requests ahead, the chunks' rows asked for at
    once and keys 16 at a time.  Every CPU takes a flash tile's scores whole (slabs measured no
    faster on Zen 4 or Zen 5 and are untried elsewhere) and finds their rows' maxima by a pass
    (keeping them as the scores are stored measured no faster on Zen 5).  The half-pool heads loops ask for rows 16
    keys on into L1 on AMD CPUs of family 26 (Zen 5, 48 KB L1d) at AVX-512 only, and there alone
    the float32/float64 paged heads loops and the bf16 decode scores ask for their lookahead a
    line per product step."""
    from fuel_cy import _cpuid

    _, vendor, family, _ = _cpuid.probe()
    avx512 = core()._TEST_VECTOR_BYTES == 64
    amd512 = avx512 and vendor == "AuthenticAMD"
    assert core()._test_pv_form() == "stride"
    assert core()._test_bwd_rows() == (32 if amd512 else 64)
    assert core()._test_bwd_rows_pairs() == (128 if amd512 else 64)
    assert core()._test_tn_blocks() == (2 if avx512 else 1)
    assert core()._test_gemm_blocks() == (["narrow", "wide"] if avx512 else ["narrow"])
    assert core()._test_gemm_block() == ("wide" if avx512 and not amd512 else "narrow")
    assert core()._test_tn_ahead() == (1 << 20 if amd512 else -1)
    assert core()._test_chunk_spread() is amd512
    assert core()._test_paged_group() == (4 if amd512 else 16)
    assert core()._test_qk_slab() == 0
    assert core()._test_qk_fused_max() is False
    assert core()._test_h16_l1_ahead() == (16 if amd512 and family >= 26 else 0)
    assert core()._test_paged_spread() == (1 if amd512 and family >= 26 else 0)


def test_f16_form_follows_the_instruction_set():
    """fc_uarch.h: the f16 math-in-T GEMMs take binary16 arithmetic where the CPU has AVX512-FP16
    (at the AVX-512 levels, whatever the vendor), the F16C conversions everywhere else; the
    emulated binary16 form exists at every AVX-512 level for the tests."""
    from fuel_cy import _cpuid

    features, _, _, _ = _cpuid.probe()
    avx512 = core()._TEST_VECTOR_BYTES == 64
    native = avx512 and "avx512_fp16" in features
    assert core()._test_f16_form() == ("native" if native else "convert")
    assert core()._test_f16_forms() == ["convert"] + (["native-emulated"] if avx512 else []) + (["native"] if native else [])
    if not native:
        with pytest.raises(ValueError):
            core()._test_f16_form("native")  # never run vmulph on a CPU without it


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_micro_architecture_choices_give_the_same_bits(dtype):
    """Every form fc_uarch.h may pick computes the same sums in the same order: the PV form
    (flash, naive, the backward's dQ), the backward's query rows per step (a step of 16, 32 or
    64 of the 70 query rows, so partial steps too), the register blocks per A^T copy of its
    dK and dV products (150 keys: whole spans and a remainder) and the register block of
    Q K^T and P V (D = 115: at AVX-512 one wide block of columns, then a narrow one, a vector
    and 3 scalar columns; 64-row tiles in 6-row blocks and a 4-row one, the last 6 rows in a 6
    and a 2; 200 keys: a 128-key tile and one of 72, a wide and a narrow block of scores), the
    last in float32's varlen backward given the forward's out and lse too, and whether those
    dK and dV products ask for their next block's rows ahead (never, or always: D = 32, so the
    150-key products run their spans, the last span's requests cut at the last key)."""
    c = core()
    pv, rows, blocks, block = c._test_pv_form(), c._test_bwd_rows(), c._test_tn_blocks(), c._test_gemm_block()
    above = c._test_tn_ahead()
    rng = np.random.default_rng(22)
    r = lambda *s: rng.standard_normal(s).astype(dtype)  # noqa: E731
    q, k, v, do = r(1, 2, 70, 115), r(1, 2, 200, 115), r(1, 2, 200, 115), r(1, 2, 70, 115)
    # the varlen backward given the forward's out and lse (float32's key tiles outer), causal so
    # that its diagonal steps are cut short of their tile's end
    seq = lambda x: np.ascontiguousarray(x[0].transpose(1, 0, 2))   # noqa: E731
    cq, ck = np.array([0, 70], np.uint32), np.array([0, 200], np.uint32)
    out, lse = fuel_cy.attention_varlen(seq(q), seq(k), seq(v), cq, ck, causal=True, return_lse=True)
    calls = _calls(dtype) + [
        ("attention_naive", (q, k, v), {}),
        ("attention_flash", (q, k, v), {}),
        ("attention_flash_backward", (q, k, v, do), {}),
    ]
    if dtype == np.float32:
        calls.append(("attention_varlen_backward", (seq(q), seq(k), seq(v), seq(do), cq, ck),
                      dict(out=out, lse=lse, causal=True)))
    try:
        seen = {}
        for form in ("pointer", "stride"):
            for n in (16, 32, 64):
                for nb in (1, 2):
                    for gb in c._test_gemm_blocks():
                        for pf in (-1, 0):
                            assert c._test_pv_form(form) == form and c._test_bwd_rows(n) == n
                            assert c._test_tn_blocks(nb) == nb and c._test_gemm_block(gb) == gb
                            assert c._test_tn_ahead(pf) == pf
                            for i, (name, args, params) in enumerate(calls):
                                seen.setdefault((i, name), []).append(_bits(getattr(fuel_cy, name)(*args, **params)))
    finally:
        c._test_pv_form(pv)
        c._test_bwd_rows(rows)
        c._test_tn_blocks(blocks)
        c._test_gemm_block(block)
        c._test_tn_ahead(above)
    for name, bits in seen.items():
        assert all(b == bits[0] for b in bits), name
    with pytest.raises(ValueError):
        c._test_bwd_rows(65)
    with pytest.raises(ValueError):
        c._test_tn_blocks(3)
    with pytest.raises(ValueError):
        c._test_gemm_block("square")
    with pytest.raises(ValueError):
        c._test_tn_ahead(-2)
