# Shared building blocks of every attention kernel: masking, score transform, tile GEMMs and
# lane-partial reductions.  Written once over (rnd_t, real_t); each arithmetic result goes
# through R() so half types round at every step.  Reductions use fixed lane partials, so the
# order of additions (and thus the bits) never depends on threads or tiling of the caller.
# Included after policy.pxi (the policies R, EXP, TANH, the fc_* declarations, and the C GEMM
# dispatch qk_tile_c / pv_accum_c that policy.pxi includes from the generated _core_dtypes.pxi).

from libc.math cimport INFINITY, fabs

cdef enum:
    BC = 128      # keys per packed tile (K^T stored as [D][BC])
cdef enum:
    NL = 16       # vector lanes per register block
cdef enum:
    NR = 4        # rows per register block

cdef extern from "fc_interrupt.h" nogil:
    ctypedef struct fc_interrupt:
        int stop
    void fc_interrupt_init(fc_interrupt* it, int is_main_thread)
    int fc_stopped(fc_interrupt* it)        # 1: a signal handler raised, skip the remaining work
    int fc_interrupt_raise(fc_interrupt* it) except -1


cdef struct AttnOpts:
    double scale      # already rounded to f32 by the dispatcher (the contract's `f32` kind)
    double softcap    # 0 => no softcap
    int causal
    Py_ssize_t wl     # window_size_left, -1 => none
    Py_ssize_t wr     # window_size_right, -1 => none
    Py_ssize_t k_len  # live key prefix (Sk when None)
    Py_ssize_t shift  # query row i sits at key position i + shift for the masks (0: top-left;
                      # Sk - Sq: bottom-right, attention_varlen's per-sequence alignment)
    fc_interrupt* it  # this call's Ctrl-C state, polled between tasks
    float* lse        # the flash forward's log-sum-exp per row, or NULL: row i of the flattened head
    Py_ssize_t lse_ld # index b * Hq + h is lse[(b * Hq + h) * lse_ld + i] (+inf: nothing admissible);
                      # in the backward, the gradient of that lse (read only)
    int k_rows        # the flash forward's scores are row dots with K's rows where they lie (a
                      # decode step: one query row per head; packing K^T would cost more than them)
    int k_tiles       # the flash forward packs each K^T tile itself from K's rows where they lie
                      # (through ktable in a paged pool), into its thread's scratch
                      # (flash_scratch(D, 1)), with the next tile's rows asked for ahead: a
                      # sequence whose kv heads each have one task, so that no tile would be packed
                      # twice; with kp16 (bf16 pairs), each tile's K pairs and V pairs instead, from
                      # kp16's and vp16's rows
    # (k_tiles, float32 compute) the bf16 K and V whose pairs each tile packs (laid out as Shape.lk
    # and lv say, through ktable), for the vdpbf16ps products: NULL otherwise
    const unsigned short* kp16
    const unsigned short* vp16
    # (the bf16 products on AMX tiles, Sq > 1) V in its bf16 storage, laid out as Shape.lv says
    # (through ktable): its pairs are packed per kv head for the tiles and P V reads its rows
    # where the tiles leave edges, widened in registers; NULL: V's float32 rows
    const unsigned short* vt16
    # a decode step under float32 compute on bf16/f16 K and V: their rows read in place in their
    # 16-bit storage (laid out as Shape.lk / lv say), widened in registers; NULL otherwise
    const unsigned short* k16
    const unsigned short* v16
    int is_f16        # with k16: 1 for f16 storage, 0 for bf16
    # a decode step over a paged pool: key j is row ktable[j // kbs] * kbs + j % kbs of K and V
    # (the row index the layouts step by); NULL: row j
    const unsigned int* ktable
    Py_ssize_t kbs
    int alibi_abs     # ALiBi in flash-attn's form, -slope * |p - j| at the key position p = i + shift,
                      # instead of the seed's +slope * (j - i)
    # attention_masked: a boolean mask (unsigned char, nonzero: the pair takes part) and an
    # additive bias (the work type), each [MB, MH, MQ, Sk] read at b * sb + h * sh + i * si + j,
    # a stride 0 where that dim broadcasts; NULL: none
    const void* mask
    Py_ssize_t m_sb, m_sh, m_si
    const void* bias
    Py_ssize_t a_sb, a_sh, a_si
    # round_p (float32 compute on bf16/f16 inputs): each tile's P rounded to bf16 (1) or f16 (2)
    # before P V, after its row sums; 0: P stays float32
    int round_p
    # (round_p 2 on the tiles, fc_f16_tiles.h) the f16 flash's products on the tiles from each
    # value's two exact bf16 terms: Q's and K's split words (2D of them) for the scores, P's and
    # V's for P V (V's [BC][D] per key tile, P's two planes); 0 otherwise
    int f16s
    # query rows per backward step (at most BR_BWD): fc_uarch.h's choice for the call's products
    # (_backward); the step's scratch is carved for this many rows
    Py_ssize_t bwd_rows
    # the mixed flash reading Q in its bf16/f16 storage (is_f16; NULL: the widened q) and writing
    # each output row rounded to T there (NULL: the float32 out)
    const unsigned short* q16
    unsigned short* out16


cdef inline Py_ssize_t table_row(const unsigned int* table, Py_ssize_t tbs, Py_ssize_t j) noexcept nogil:
    """The row that holds key j: j itself, or through a paged pool's table row (blocks of tbs
    rows)."""
    if table == NULL:
        return j
    return <Py_ssize_t>table[j // tbs] * tbs + j % tbs


cdef inline void table_rows(const unsigned int* table, Py_ssize_t tbs, Py_ssize_t j0, Py_ssize_t n,
                            const char* base, Py_ssize_t stride, const char** rows) noexcept nogil:
    """rows[jj] = base + table_row(table, tbs, j0 + jj) * stride (stride in bytes) for jj < n, with
    one division per call: a division per key (tbs is known only at run time) took an eighth of a
    bf16 chunk tile's own samples on Zen 4.  Reads no table entry past key j0 + n - 1's."""
    cdef Py_ssize_t jj, r
    cdef const unsigned int* blk
    cdef const char* p
    if table == NULL:
        for jj in range(n):
            rows[jj] = base + (j0 + jj) * stride
        return
    if n <= 0:
        return
    blk = table + j0 // tbs
    r = j0 % tbs
    p = base + <Py_ssize_t>blk[0] * tbs * stride
    for jj in range(n):
        rows[jj] = p + r * stride
        r += 1
        if r == tbs and jj + 1 < n:
            r = 0
            blk += 1
            p = base + <Py_ssize_t>blk[0] * tbs * stride


cdef inline void key_rows(AttnOpts* o, Py_ssize_t j0, Py_ssize_t n, const real_t* base, Py_ssize_t stride,
                          const real_t** rows) noexcept nogil:
    """rows[jj] = base + (the row of K and V that holds key j0 + jj) * stride, for jj < n
    (AttnOpts.ktable; table_rows)."""
    table_rows(o.ktable, o.kbs, j0, n, <const char*>base, stride * <Py_ssize_t>sizeof(real_t), <const char**>rows)


cdef inline void key_rows16(AttnOpts* o, Py_ssize_t j0, Py_ssize_t n, const unsigned short* base, Py_ssize_t stride,
                            const unsigned short** rows) noexcept nogil:
    """key_rows for 16-bit storage."""
    table_rows(o.ktable, o.kbs, j0, n, <const char*>base, stride * <Py_ssize_t>sizeof(unsigned short),
               <const char**>rows)


cdef inline void admissible_range(Py_ssize_t qpos, AttnOpts* o, Py_ssize_t* lo, Py_ssize_t* hi) noexcept nogil:
    """Keys kj admissible for query qpos form the interval [lo, hi) (position_admissible), with
    lo <= hi <= k_len, both non-decreasing in qpos.  A row with no admissible key gets lo = hi:
    the interval is clamped at its right end, never widened past k_len, because callers visit
    the key tiles up to the last row's hi (a row past the keys' end under a left window, qpos -
    wl > k_len, once sent the backward to a tile after the last one)."""
    cdef Py_ssize_t a = 0, b = o.k_len
    qpos += o.shift   # the key position the query sits at (may be < 0 under a bottom-right shift)
    # each test is written without a sum that could pass 2**63 for any window or position (the
    # driver already reads a window past the extents as none; this holds for any value)
    if o.causal and qpos < b - 1:
        b = qpos + 1
    if o.wr >= 0 and o.wr < b - 1 - qpos:
        b = qpos + o.wr + 1
    if o.wl >= 0 and qpos > a + o.wl:
        a = qpos - o.wl
    if b < 0:     # a query before every key (bottom-right, more queries than keys): none
        b = 0
    if a > b:
        a = b
    lo[0] = a
    hi[0] = b


cdef inline int tile_class(Py_ssize_t ilo, Py_ssize_t ihi, Py_ssize_t jlo, Py_ssize_t jhi, AttnOpts* o) noexcept nogil:
    """0: every (i, j) in the tile is masked; 1: some are; 2: none are (inclusive bounds)."""
    cdef Py_ssize_t lo_a, hi_a, lo_b, hi_b
    admissible_range(ilo, o, &lo_a, &hi_a)
    admissible_range(ihi, o, &lo_b, &hi_b)
    # lo and hi are monotone non-decreasing in qpos, so the tile's extremes bound every row
    if jlo >= hi_b or jhi < lo_a:
        return 0
    if jlo >= lo_b and jhi < hi_a:
        return 2
    return 1


cdef inline Py_ssize_t abs_diff(Py_ssize_t a, Py_ssize_t b) noexcept nogil:
    return a - b if a >= b else b - a


cdef inline void transform_row(rnd_t tag, real_t* s, Py_ssize_t n, Py_ssize_t j0, Py_ssize_t qpos,
                               real_t scale, real_t cap, real_t slope, bint has_alibi,
                               AttnOpts* o, bint masked, real_t* tout) noexcept nogil:
    """Raw dot products -> scores: scale, then softcap tanh(s/c)*c, then ALiBi, then mask."""
    cdef Py_ssize_t j, lo, hi
    cdef real_t t
    for j in range(n):
        s[j] = R(tag, scale * s[j])
    if cap != 0:
        for j in range(n):
            t = TANH(tag, R(tag, s[j] / cap))
            if tout != NULL:
                tout[j] = t
            s[j] = R(tag, t * cap)
    if has_alibi and o.alibi_abs:
        for j in range(n):
            s[j] = R(tag, s[j] - R(tag, slope * R(tag, <real_t>abs_diff(j0 + j, qpos + o.shift))))
    elif has_alibi:
        for j in range(n):
            s[j] = R(tag, s[j] + R(tag, slope * R(tag, <real_t>(j0 + j - qpos))))
    if masked:
        admissible_range(qpos, o, &lo, &hi)
        for j in range(n):
            if j0 + j < lo or j0 + j >= hi:
                s[j] = -INFINITY


cdef inline int mask_tile_class(const unsigned char* m, Py_ssize_t step, Py_ssize_t nr, Py_ssize_t nc) noexcept nogil:
    """attn_mask over a tile of nr rows (step elements apart; 0: one row shared) and nc keys:
    0 when it masks every pair, 2 when it masks none, 1 otherwise."""
    cdef Py_ssize_t r, j
    cdef unsigned char any_ = 0, all_ = 1
    for r in range(nr if step != 0 else 1):
        for j in range(nc):
            any_ |= m[r * step + j] != 0
            all_ &= m[r * step + j] != 0
    return 0 if not any_ else (2 if all_ else 1)


cdef inline void mask_key_range(const unsigned char* m, Py_ssize_t step, Py_ssize_t nr, Py_ssize_t* lo,
                                Py_ssize_t* hi) noexcept nogil:
    """[lo, hi) narrowed to the keys attn_mask admits for at least one of nr rows (step elements
    apart; 0: one row shared); lo = hi when it admits none.  Keys outside it have P = 0 and dS = 0
    in every row, so skipping them changes no gradient."""
    cdef Py_ssize_t r, j, a = hi[0], b = lo[0]
    for r in range(nr if step != 0 else 1):
        for j in range(lo[0], a):
            if m[r * step + j]:
                a = j
                break
        j = hi[0] - 1
        while j >= b:
            if m[r * step + j]:
                b = j + 1
                break
            j -= 1
    if b <= a:
        hi[0] = lo[0]
    else:
        lo[0], hi[0] = a, b


cdef inline void apply_masks(rnd_t tag, real_t* s, Py_ssize_t n, const unsigned char* m, const real_t* a) noexcept nogil:
    """Scores of one row -> the bias a added (a score already masked stays -inf: a bias of +inf
    never unmasks it), then -inf where m is 0.  Either may be NULL."""
    cdef Py_ssize_t j
    if a != NULL:
        for j in range(n):
            if s[j] != -INFINITY:
                s[j] = R(tag, s[j] + a[j])
    if m != NULL:
        for j in range(n):
            if m[j] == 0:
                s[j] = -INFINITY


cdef inline real_t row_max(real_t* s, Py_ssize_t n) noexcept nogil:
    """max(s), propagating NaN as IEEE arithmetic would.  The hot loop is a plain vectorizable
    max that skips NaN; NaN only changes the outcome when every other score is -inf (it then
    shows up in exp(s - m) anyway), so only that rare case scans for it."""
    cdef real_t lanes[NL]
    cdef Py_ssize_t j, l, j0 = 0
    cdef real_t m, x
    if FC_ROWRED_IN_C:  # the same lanes on this level's vectors (fc_exp.h)
        if real_t is float:
            return fc_row_max_f32(s, n)
        else:
            return fc_row_max_f64(s, n)
    if FC_HAVE_EXP16:  # AVX-512: reduced in registers (fc_exp.h)
        if real_t is float:
            return fc_row_max16_f32(s, n)
        else:
            return fc_row_max16_f64(s, n)
    for l in range(NL):
        lanes[l] = -INFINITY
    while j0 + NL <= n:
        for l in range(NL):
            x = s[j0 + l]
            lanes[l] = x if x > lanes[l] else lanes[l]
        j0 += NL
    for j in range(j0, n):
        x = s[j]
        lanes[j - j0] = x if x > lanes[j - j0] else lanes[j - j0]
    m = lanes[0]
    for l in range(1, NL):
        m = lanes[l] if lanes[l] > m else m
    if m == -INFINITY:
        for j in range(n):
            if s[j] != s[j]:
                return s[j]
    return m


cdef inline real_t exp_scaled_sum(rnd_t tag, real_t* s, Py_ssize_t n, real_t scale, real_t m) noexcept nogil:
    """In place s[j] = exp(scale * s[j] - m); returns their sum with lane j % 16 partials combined
    in lane order (the documented reduction order)."""
    cdef real_t lanes[NL]
    cdef real_t total
    if rnd_t is RoundNone and real_t is double and FC_ROWRED_IN_C:  # on this level's vectors
        return fc_exp_scaled_sum16_f64(s, n, scale, m)
    if exp_sum_c(tag, s, n, scale, m, &total):  # a rounded policy's loop on vectors (fc_exp.h)
        return total
    exp_scaled_lanes(tag, s, n, scale, m, lanes)
    return lane_total(tag, lanes)


cdef inline bint shift_fusable(real_t m) noexcept nogil:
    """Whether scale * s - m may take one fused rounding for a row whose max is m (FC_SHIFT)."""
    if real_t is float:
        return fabs(m) < FC_FUSED_SHIFT_MAX_F32
    else:
        return fabs(m) < FC_FUSED_SHIFT_MAX_F64


cdef inline void exp_scaled_lanes(rnd_t tag, real_t* s, Py_ssize_t n, real_t scale, real_t m,
                                  real_t* lanes) noexcept nogil:
    """exp_scaled_sum without its last step: the NL lane partials in lanes (lane_total or
    lane_totals add them up)."""
    cdef Py_ssize_t j, l, j0 = 0
    cdef real_t e
    if exp_lanes_c(tag, s, n, scale, m, lanes):  # a rounded policy's loop on vectors (fc_exp.h)
        return
    if rnd_t is RoundNone and scale != 1 and not shift_fusable(m):
        # large scores: rounded first, in a pass of their own (gcc fuses scale * s - m in one
        # expression, off by hundreds for such scores: FC_SHIFT in fc_math.h; a separate loop
        # keeps both loops vectorized)
        for j in range(n):
            s[j] = scale * s[j]
        scale = 1
    for l in range(NL):
        lanes[l] = 0
    while j0 + NL <= n:
        for l in range(NL):
            e = EXP(tag, R(tag, R(tag, scale * s[j0 + l]) - m))
            s[j0 + l] = e
            lanes[l] = R(tag, lanes[l] + e)
        j0 += NL
    for j in range(j0, n):
        e = EXP(tag, R(tag, R(tag, scale * s[j]) - m))
        s[j] = e
        lanes[j - j0] = R(tag, lanes[j - j0] + e)


cdef inline real_t lane_total(rnd_t tag, real_t* lanes) noexcept nogil:
    """The NL lane partials added in lane order."""
    cdef real_t total = lanes[0]
    cdef Py_ssize_t l
    for l in range(1, NL):
        total = R(tag, total + lanes[l])
    return total


cdef inline void lane_totals(rnd_t tag, real_t* lanes, Py_ssize_t nrows, real_t* totals) noexcept nogil:
    """lane_total of nrows rows of lane partials ([row][NL]); a rounded policy runs the rows'
    chains side by side in C (fc_lane_totals_<dtype>)."""
    cdef Py_ssize_t r
    if lane_totals_c(tag, lanes, nrows, totals):
        return
    for r in range(nrows):
        totals[r] = lane_total(tag, lanes + r * NL)


cdef inline real_t dot16(rnd_t tag, real_t* a, real_t* b, Py_ssize_t n) noexcept nogil:
    """sum(a*b) in the same lane order as exp_scaled_sum."""
    cdef real_t lanes[NL]
    cdef Py_ssize_t j, l, j0 = 0
    cdef real_t total
    if rnd_t is RoundNone and FC_ROWRED_IN_C:  # the same lanes on this level's vectors (fc_exp.h)
        if real_t is float:
            return fc_dot16_f32(a, b, n)
        else:
            return fc_dot16_f64(a, b, n)
    if dot16_c(tag, a, b, n, &total):  # a rounded policy's loop on vectors (fc_exp.h)
        return total
    for l in range(NL):
        lanes[l] = 0
    while j0 + NL <= n:
        for l in range(NL):
            lanes[l] = R(tag, lanes[l] + R(tag, a[j0 + l] * b[j0 + l]))
        j0 += NL
    for j in range(j0, n):
        lanes[j - j0] = R(tag, lanes[j - j0] + R(tag, a[j] * b[j]))
    total = lanes[0]
    for l in range(1, NL):
        total = R(tag, total + lanes[l])
    return total


cdef inline void pack_kt(real_t** rows, Py_ssize_t n, Py_ssize_t D, real_t* out) noexcept nogil:
    """Pack n <= BC rows of length D as K^T [D][BC], zero-padding the missing columns."""
    cdef Py_ssize_t j, d
    if real_t is float:  # 16 x 16 register transposes in C (fc_pack.h)
        fc_pack_kt_f32(rows, n, D, out)
        return
    for d in range(D):
        for j in range(n):
            out[d * BC + j] = rows[j][d]
        for j in range(n, BC):
            out[d * BC + j] = 0


cdef inline void qk_tile(rnd_t tag, real_t* Q, Py_ssize_t nrows4, Py_ssize_t D, real_t* Kt,
                         real_t* S, Py_ssize_t lds, Py_ssize_t ncols) noexcept nogil:
    """S[i, j] = sum_d Q[i, d] * Kt[d, j] for the column blocks covering j < ncols (<= BC);
    sequential over d per (i, j).  Q rows (stride D) must be padded to a multiple of NR rows."""
    # the same sums in C where the policy has a GEMM (fc_gemm.h): register-blocked, and for the
    # rounded policies the same rounded loops with the rounding vectorized (_core_dtypes.pxi)
    if qk_tile_c(tag, Q, nrows4, D, Kt, S, lds, ncols):
        return
    cdef real_t acc0[NL]
    cdef real_t acc1[NL]
    cdef real_t acc2[NL]
    cdef real_t acc3[NL]
    cdef real_t q0, q1, q2, q3
    cdef real_t* kv
    cdef Py_ssize_t i, j0, d, l
    for i in range(0, nrows4, 4):   # NR
        for j0 in range(0, ncols, 16):  # NL
            for l in range(NL):
                acc0[l] = 0
                acc1[l] = 0
                acc2[l] = 0
                acc3[l] = 0
            for d in range(D):
                kv = Kt + d * BC + j0
                q0 = Q[i * D + d]
                q1 = Q[(i + 1) * D + d]
                q2 = Q[(i + 2) * D + d]
                q3 = Q[(i + 3) * D + d]
                for l in range(NL):
                    acc0[l] = R(tag, acc0[l] + R(tag, q0 * kv[l]))
                    acc1[l] = R(tag, acc1[l] + R(tag, q1 * kv[l]))
                    acc2[l] = R(tag, acc2[l] + R(tag, q2 * kv[l]))
                    acc3[l] = R(tag, acc3[l] + R(tag, q3 * kv[l]))
            for l in range(NL):
                S[i * lds + j0 + l] = acc0[l]
                S[(i + 1) * lds + j0 + l] = acc1[l]
                S[(i + 2) * lds + j0 + l] = acc2[l]
                S[(i + 3) * lds + j0 + l] = acc3[l]


cdef inline void qk_tile_pf(real_t* Q, Py_ssize_t nrows4, Py_ssize_t D, real_t* Kt, real_t* S, Py_ssize_t lds,
                            Py_ssize_t ncols, fc_pf_stream* pf) noexcept nogil:
    """qk_tile's sums (float32/float64 compute), each step of d also asking for a line of pf's rows
    (fc_isa.h fc_pf_step)."""
    if real_t is float:
        fc_qk_pf_f32(Q, nrows4, D, Kt, S, lds, ncols, pf)
    else:
        fc_qk_pf_f64(Q, nrows4, D, Kt, S, lds, ncols, pf)


cdef inline void qk_tile_max(real_t* Q, Py_ssize_t nrows4, Py_ssize_t D, real_t* Kt, real_t* S, Py_ssize_t lds,
                             Py_ssize_t ncols, real_t* rmax) noexcept nogil:
    """qk_tile's sums (float32/float64 compute; ncols whole register blocks, fc_qk_max_whole_*),
    each row's maximum kept lane by lane in rmax as they are stored (fc_gemm.h fc_qk_max_*)."""
    if real_t is float:
        fc_qk_max_f32(Q, nrows4, D, Kt, S, lds, ncols, rmax)
    else:
        fc_qk_max_f64(Q, nrows4, D, Kt, S, lds, ncols, rmax)


cdef inline real_t qk_tile_row_max(real_t* rmax, Py_ssize_t r, real_t* s, Py_ssize_t n) noexcept nogil:
    """row_max(s, n) of row r of the scores qk_tile_max stored, from its lanes in rmax."""
    if real_t is float:
        return fc_rmax_row_f32(rmax, r, s, n)
    else:
        return fc_rmax_row_f64(rmax, r, s, n)


cdef inline void pv_accum_pf(real_t* P, Py_ssize_t ldp, Py_ssize_t nrows4, Py_ssize_t ncols, real_t** vrows,
                             Py_ssize_t D, real_t* O, Py_ssize_t ldo, fc_pf_stream* pf) noexcept nogil:
    """pv_accum's sums (float32/float64 compute), each step of j also asking for a line of pf's
    rows."""
    if real_t is float:
        fc_pv_pf_f32(P, ldp, nrows4, ncols, vrows, pf, D, O, ldo)
    else:
        fc_pv_pf_f64(P, ldp, nrows4, ncols, vrows, pf, D, O, ldo)


cdef inline void pv_accum(rnd_t tag, real_t* P, Py_ssize_t ldp, Py_ssize_t nrows4, Py_ssize_t ncols,
                          real_t** vrows, Py_ssize_t D, real_t* O, Py_ssize_t ldo) noexcept nogil:
    """O[i, :] += sum_j P[i, j] * vrows[j][:], sequential over j (rows padded to NR)."""
    if pv_accum_c(tag, P, ldp, nrows4, ncols, vrows, D, O, ldo):  # the same sums in C, as qk_tile
        return
    cdef real_t acc0[NL]
    cdef real_t acc1[NL]
    cdef real_t acc2[NL]
    cdef real_t acc3[NL]
    cdef real_t p0, p1, p2, p3
    cdef real_t* vv
    cdef Py_ssize_t i, j, l, d0, nl
    for i in range(0, nrows4, 4):   # NR
        d0 = 0
        while d0 + NL <= D:
            for l in range(NL):
                acc0[l] = O[i * ldo + d0 + l]
                acc1[l] = O[(i + 1) * ldo + d0 + l]
                acc2[l] = O[(i + 2) * ldo + d0 + l]
                acc3[l] = O[(i + 3) * ldo + d0 + l]
            for j in range(ncols):
                vv = vrows[j] + d0
                p0 = P[i * ldp + j]
                p1 = P[(i + 1) * ldp + j]
                p2 = P[(i + 2) * ldp + j]
                p3 = P[(i + 3) * ldp + j]
                for l in range(NL):
                    acc0[l] = R(tag, acc0[l] + R(tag, p0 * vv[l]))
                    acc1[l] = R(tag, acc1[l] + R(tag, p1 * vv[l]))
                    acc2[l] = R(tag, acc2[l] + R(tag, p2 * vv[l]))
                    acc3[l] = R(tag, acc3[l] + R(tag, p3 * vv[l]))
            for l in range(NL):
                O[i * ldo + d0 + l] = acc0[l]
                O[(i + 1) * ldo + d0 + l] = acc1[l]
                O[(i + 2) * ldo + d0 + l] = acc2[l]
                O[(i + 3) * ldo + d0 + l] = acc3[l]
            d0 += NL
        if d0 < D:  # the D % 16 tail: same order of operations, fewer lanes
            nl = D - d0
            for l in range(nl):
                acc0[l] = O[i * ldo + d0 + l]
                acc1[l] = O[(i + 1) * ldo + d0 + l]
                acc2[l] = O[(i + 2) * ldo + d0 + l]
                acc3[l] = O[(i + 3) * ldo + d0 + l]
            for j in range(ncols):
                vv = vrows[j] + d0
                p0 = P[i * ldp + j]
                p1 = P[(i + 1) * ldp + j]
                p2 = P[(i + 2) * ldp + j]
                p3 = P[(i + 3) * ldp + j]
                for l in range(nl):
                    acc0[l] = R(tag, acc0[l] + R(tag, p0 * vv[l]))
                    acc1[l] = R(tag, acc1[l] + R(tag, p1 * vv[l]))
                    acc2[l] = R(tag, acc2[l] + R(tag, p2 * vv[l]))
                    acc3[l] = R(tag, acc3[l] + R(tag, p3 * vv[l]))
            for l in range(nl):
                O[i * ldo + d0 + l] = acc0[l]
                O[(i + 1) * ldo + d0 + l] = acc1[l]
                O[(i + 2) * ldo + d0 + l] = acc2[l]
                O[(i + 3) * ldo + d0 + l] = acc3[l]


cdef inline void pv_accum_contig(rnd_t tag, real_t* P, Py_ssize_t ldp, Py_ssize_t nrows4, Py_ssize_t ncols,
                                 real_t* V, Py_ssize_t ldv, real_t** vrows, Py_ssize_t D, real_t* O,
                                 Py_ssize_t ldo) noexcept nogil:
    """pv_accum for V rows ldv apart starting at V (vrows[j] == V + j * ldv): the same sums; the
    un-rounded policies read the rows by stride where the level measured that faster."""
    if rnd_t is RoundNone:
        if real_t is float:
            fc_pv_contig_f32(P, ldp, nrows4, ncols, V, ldv, vrows, D, O, ldo)
        else:
            fc_pv_contig_f64(P, ldp, nrows4, ncols, V, ldv, vrows, D, O, ldo)
        return
    pv_accum(tag, P, ldp, nrows4, ncols, vrows, D, O, ldo)


cdef inline void softmax_row(rnd_t tag, real_t* s, Py_ssize_t n, bint sparse) noexcept nogil:
    """In place: stable softmax over n scores; a row with no finite score becomes all zeros.
    sparse: the row may hold masked (-inf) scores (fc_exp_shift_sum16_f32; the same result)."""
    cdef Py_ssize_t j
    cdef real_t m = row_max(s, n)
    cdef real_t total
    if m == -INFINITY:
        for j in range(n):
            s[j] = 0
        return
    if rnd_t is RoundNone and real_t is float:  # the same order, the level's vector exp (fc_exp.h)
        total = fc_exp_shift_sum16_f32(s, n, m, sparse)
    else:  # scale 1 is exact (R(1 * s) = s: the scores are values of T)
        total = exp_scaled_sum(tag, s, n, 1, m)
    if div_row_c(tag, s, n, total):  # a rounded policy's loop on vectors (fc_exp.h)
        return
    for j in range(n):
        s[j] = R(tag, s[j] / total)


cdef inline void scale_row(rnd_t tag, real_t* s, Py_ssize_t n, real_t a) noexcept nogil:
    """s[j] = R(s[j] * a): flash's rescaling of an output row when its running max moves."""
    if scale_row_c(tag, s, n, a):  # a rounded policy's loop on vectors (fc_exp.h)
        return
    cdef Py_ssize_t j
    for j in range(n):
        s[j] = R(tag, s[j] * a)


cdef inline void copy_rows_padded(real_t* src, Py_ssize_t nrows, Py_ssize_t nrows4, Py_ssize_t D, real_t* dst) noexcept nogil:
    cdef Py_ssize_t x
    for x in range(nrows * D):
        dst[x] = src[x]
    for x in range(nrows * D, nrows4 * D):
        dst[x] = 0


cdef inline void copy_rows_strided(real_t* src, Py_ssize_t stride, Py_ssize_t nrows, Py_ssize_t nrows4,
                                   Py_ssize_t D, real_t* dst) noexcept nogil:
    """nrows rows of D values, stride elements apart, into dst [nrows4][D], the extra rows zero."""
    cdef Py_ssize_t r, x
    if stride == D:
        copy_rows_padded(src, nrows, nrows4, D, dst)
        return
    for r in range(nrows):
        for x in range(D):
            dst[r * D + x] = src[r * stride + x]
    for x in range(nrows * D, nrows4 * D):
        dst[x] = 0


cdef inline void zero(real_t* p, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t x
    for x in range(n):
        p[x] = 0
