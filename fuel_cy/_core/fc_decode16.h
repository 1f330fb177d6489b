/* A bf16 decode step's products on vdpbf16ps (AVX512-BF16), K's and V's rows read where they lie
 * (a KV cache, a paged pool), with no widening:
 * - the scores along d (fc_qk_heads_dpbf16): 16 lanes of pairs of elements, folded by halves at
 *   the end, the decode order the mixed contract declares.  The tiled scores' order (each score
 *   one sequential sum over the pairs, lane = key) would need K's pairs transposed into one vector
 *   per pair (16 x 16 transposes of 32-bit words in registers), which took as long as the dots it
 *   fed: with four query rows per kv head no faster than the float32 loops (Zen 4, 2026-12-05).
 * - round_p's P V (fc_pv_heads_dpbf16): V's rows paired per column in registers as they are read,
 *   per output element the pairs of keys in order from O's value, the order of the packed-tile
 *   form (fc_pv_dpbf16_vec), which the contract declares for round_p's P V.
 * Before them a decode step multiplied float32 Q and weights by K's and V's rows widened in
 * registers with float32 multiply-adds (fc_half.h), twice the multiply instructions and the
 * widening: a decode's few query rows per key leave the core's arithmetic the larger part of a
 * cached step's time (Zen 4, 2026-12-05: a batch of 14 bf16 decode steps took 1.19 ms on rows held
 * in L2 and 1.45 ms from a 31 MB pool).
 * Hand-written; included (through fc_simd.h) by every CPU level's core module. */
#ifndef FUEL_CY_FC_DECODE16_H
#define FUEL_CY_FC_DECODE16_H
#include "fc_isa.h"      /* the level's intrinsics */
#include "fc_gemm.h"     /* FC_HAVE_DPBF16, fc_pair_p_bf16 */
#include "fc_half.h"     /* FC_H16_GROUP */

#if FC_HAVE_DPBF16
/* Keys per group (16 pairs), V's rows of one kv head. */
#define FC_DP16_GROUP 32

/* The rows a group asks for into L2 while it computes: the next group's rows of the same head
 * (n of them, `ofs` elements into each), two rows' part at each key pair, so that the requests
 * spread over the group's work: asked for all at once at the group's start, a decode batch's
 * products ran 16-18% slower from a 31 MB pool where on rows held in L2 they ran 20% faster; the
 * group after next measured 6% slower than the next (Zen 4). */
typedef struct { const uint16_t* const* rows; ptrdiff_t n, ofs; } fc_dp16_ahead;
static inline void fc_dp16_prefetch(const fc_dp16_ahead* pf, ptrdiff_t j0, ptrdiff_t j1, ptrdiff_t b0, ptrdiff_t b1) {
    if (j1 > pf->n) j1 = pf->n;
    for (ptrdiff_t j = j0; j < j1; j++)
        for (ptrdiff_t b = b0; b < b1; b += 64) __builtin_prefetch((const char*)(pf->rows[j] + pf->ofs) + b, 0, 2);
}
/* The group after keys [j0, j0 + n) of rows (navail of them), head h's part (D elements each). */
static inline fc_dp16_ahead fc_dp16_next(const uint16_t* const* rows, ptrdiff_t j0, ptrdiff_t n, ptrdiff_t navail,
                                         ptrdiff_t h, ptrdiff_t D) {
    fc_dp16_ahead pf;
    ptrdiff_t s = j0 + n;
    ptrdiff_t a = s + FC_DP16_GROUP <= navail ? FC_DP16_GROUP : (navail > s ? navail - s : 0);
    pf.rows = rows + s;
    pf.n = a;
    pf.ofs = h * D;
    return pf;
}

/* Two V rows' 32 columns from d interleaved into key pairs in their 128-bit lanes (vpunpcklwd,
 * vpunpckhwd: one uop each on Zen 4 and on Intel, where vpermt2w takes three): the low pairs are
 * columns {0-3, 8-11, 16-19, 24-27}, the high ones {4-7, 12-15, 20-23, 28-31}.  The accumulators
 * hold O's columns in that order (one permute per 16 columns when O is loaded and stored, not per
 * key pair); each element's sum is the same. */
static inline __m512i fc_dp16_lo_cols(void) {
    return _mm512_set_epi32(27, 26, 25, 24, 19, 18, 17, 16, 11, 10, 9, 8, 3, 2, 1, 0);
}
static inline __m512i fc_dp16_hi_cols(void) {
    return _mm512_set_epi32(31, 30, 29, 28, 23, 22, 21, 20, 15, 14, 13, 12, 7, 6, 5, 4);
}
static inline __m512i fc_dp16_first16(void) {   /* columns 0-15 back from the (low, high) pair */
    return _mm512_set_epi32(23, 22, 21, 20, 7, 6, 5, 4, 19, 18, 17, 16, 3, 2, 1, 0);
}
static inline __m512i fc_dp16_last16(void) {    /* columns 16-31 */
    return _mm512_set_epi32(31, 30, 29, 28, 15, 14, 13, 12, 27, 26, 25, 24, 11, 10, 9, 8);
}
#define FC_DP16_PV_BLOCK(NH)                                                                     \
    for (ptrdiff_t i = 0; i < nrows4; i += 4) {                                                  \
        __m512 a[4][2 * NH];                                                                     \
        for (int r = 0; r < 4; r++)                                                              \
            for (int h = 0; h < NH; h++) {                                                       \
                const float* o = O + (i + r) * ldo + d0 + 32 * h;                                \
                __m512 x = _mm512_maskz_loadu_ps(mo[2 * h], o), y = _mm512_maskz_loadu_ps(mo[2 * h + 1], o + 16); \
                a[r][2 * h] = _mm512_permutex2var_ps(x, clo, y);                                 \
                a[r][2 * h + 1] = _mm512_permutex2var_ps(x, chi, y);                             \
            }                                                                                    \
        for (ptrdiff_t k = 0; 2 * k < n; k++) {                                                  \
            const uint16_t* e = rows[2 * k] + d0;                                                \
            const uint16_t* od = rows[2 * k + 1 < n ? 2 * k + 1 : 2 * k] + d0;                   \
            __mmask32 odd = 2 * k + 1 < n ? (__mmask32)0xffffffffu : 0;                          \
            if (i == 0) fc_dp16_prefetch(pf, 2 * k, 2 * k + 2, 2 * d0, 2 * (d0 + w));           \
            __m512bh v[2 * NH];                                                                  \
            for (int h = 0; h < NH; h++) {                                                       \
                __m512i ev = _mm512_maskz_loadu_epi16(mw[h], e + 32 * h);                        \
                __m512i ov = _mm512_maskz_loadu_epi16(mw[h] & odd, od + 32 * h);                 \
                v[2 * h] = (__m512bh)_mm512_unpacklo_epi16(ev, ov);                              \
                v[2 * h + 1] = (__m512bh)_mm512_unpackhi_epi16(ev, ov);                          \
            }                                                                                    \
            for (int r = 0; r < 4; r++) {                                                        \
                __m512bh pb = (__m512bh)_mm512_set1_epi32((int)Pp[(i + r) * ldpp + k]);          \
                for (int x = 0; x < 2 * NH; x++) a[r][x] = _mm512_dpbf16_ps(a[r][x], pb, v[x]);  \
            }                                                                                    \
        }                                                                                        \
        for (int r = 0; r < 4; r++)                                                              \
            for (int h = 0; h < NH; h++) {                                                       \
                float* o = O + (i + r) * ldo + d0 + 32 * h;                                      \
                _mm512_mask_storeu_ps(o, mo[2 * h], _mm512_permutex2var_ps(a[r][2 * h], c16, a[r][2 * h + 1])); \
                _mm512_mask_storeu_ps(o + 16, mo[2 * h + 1],                                     \
                                      _mm512_permutex2var_ps(a[r][2 * h], c32, a[r][2 * h + 1])); \
            }                                                                                    \
    }
/* O[r][d] += P[r] . V[:, d] for rows r < nrows4 (a multiple of 4) over the n <= FC_DP16_GROUP keys
 * of rows (bf16 V rows, D adjacent), P given as its key pairs (Pp [nrows4][ldpp], fc_pair_p_bf16):
 * per element the key pairs in order from O's value, a lone last key paired with a zero
 * (fc_pv_dpbf16_vec's order), 64 columns at a time. */
static inline void fc_pv_dpbf16_rows(const uint32_t* Pp, ptrdiff_t ldpp, ptrdiff_t nrows4, ptrdiff_t n,
                                     const uint16_t* const* rows, ptrdiff_t D, float* O, ptrdiff_t ldo,
                                     const fc_dp16_ahead* pf) {
    const __m512i clo = fc_dp16_lo_cols(), chi = fc_dp16_hi_cols(), c16 = fc_dp16_first16(), c32 = fc_dp16_last16();
    for (ptrdiff_t d0 = 0; d0 < D; d0 += 64) {
        ptrdiff_t w = D - d0 < 64 ? D - d0 : 64;
        __mmask16 mo[4];
        __mmask32 mw[2];
        for (int v = 0; v < 4; v++) {
            ptrdiff_t c = w - 16 * v;
            mo[v] = c >= 16 ? (__mmask16)0xffff : (c > 0 ? (__mmask16)((1u << c) - 1u) : (__mmask16)0);
        }
        for (int h = 0; h < 2; h++) {
            ptrdiff_t c = w - 32 * h;
            mw[h] = c >= 32 ? (__mmask32)0xffffffffu : (c > 0 ? (__mmask32)((1ull << c) - 1u) : (__mmask32)0);
        }
        if (w > 32) {
            FC_DP16_PV_BLOCK(2)
        } else {
            FC_DP16_PV_BLOCK(1)
        }
    }
}
/* S[i, j] = Q[i] . K[j] for query rows i < nrows4 (a multiple of 4; Qp: each row's bf16 pairs, D2
 * apart, zero past D) and keys j < n of krows (bf16 rows of D elements, read where they lie), four
 * keys x four rows at a time on vdpbf16ps along d: lane l (of 16) takes the pairs of elements
 * (32c + 2l + 1, 32c + 2l) for c = 0, 1, ... in order, both operands zero past D, and the 16 lane
 * sums fold by halves (fc_hsum16_f32: lane l + l + 8, then + 4, + 2, + 1).  K's rows are read as
 * they lie, no pairing, no widening: the order fc_rowdots_h16 takes with 16 lanes of d, in pairs.
 * pfrows (or NULL): rows each step of the first four rows asks for a line of into L2, the one at
 * the offset it reads of key j's (fc_uarch.h fc_paged_spread). */
static inline __attribute__((always_inline)) void fc_qk_dpbf16_rows(
        const uint32_t* Qp, ptrdiff_t D2, ptrdiff_t nrows4, ptrdiff_t D, const uint16_t* const* krows, ptrdiff_t n,
        float* S, ptrdiff_t lds, const uint16_t* const* pfrows) {
    for (ptrdiff_t j = 0; j < n; j += 4) {
        const ptrdiff_t nk = n - j < 4 ? n - j : 4;
        const uint16_t* k0 = krows[j];
        const uint16_t* k1 = krows[j + (nk > 1 ? 1 : 0)];
        const uint16_t* k2 = krows[j + (nk > 2 ? 2 : 0)];
        const uint16_t* k3 = krows[j + (nk > 3 ? 3 : 0)];
        for (ptrdiff_t i = 0; i < nrows4; i += 4) {
            const uint32_t* q = Qp + i * D2;
            __m512 a[16];   /* a[4 * key + row] */
            for (int c = 0; c < 16; c++) a[c] = _mm512_setzero_ps();
            for (ptrdiff_t d = 0; d < D; d += 32) {
                const ptrdiff_t left = D - d, pl = D2 - d / 2;
                const __mmask32 mk = left >= 32 ? (__mmask32)0xffffffffu : (__mmask32)((1u << left) - 1u);
                const __mmask16 mq = pl >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << pl) - 1u);
                if (pfrows && i == 0)
                    for (ptrdiff_t c = 0; c < nk; c++) __builtin_prefetch(pfrows[j + c] + d, 0, 2);
                __m512bh u0 = (__m512bh)_mm512_maskz_loadu_epi16(mk, k0 + d);
                __m512bh u1 = (__m512bh)_mm512_maskz_loadu_epi16(mk, k1 + d);
                __m512bh u2 = (__m512bh)_mm512_maskz_loadu_epi16(mk, k2 + d);
                __m512bh u3 = (__m512bh)_mm512_maskz_loadu_epi16(mk, k3 + d);
                for (int r = 0; r < 4; r++) {
                    __m512bh x = (__m512bh)_mm512_maskz_loadu_epi32(mq, q + r * D2 + d / 2);
                    a[r] = _mm512_dpbf16_ps(a[r], x, u0);
                    a[4 + r] = _mm512_dpbf16_ps(a[4 + r], x, u1);
                    a[8 + r] = _mm512_dpbf16_ps(a[8 + r], x, u2);
                    a[12 + r] = _mm512_dpbf16_ps(a[12 + r], x, u3);
                }
            }
            __m512 s = fc_hsum16_f32(a);
            if (nk == 4) {
                fc_store_4x4_f32(S + i * lds + j, lds, s);
            } else {
                float t[16];
                _mm512_storeu_ps(t, s);
                for (int r = 0; r < 4; r++)
                    for (ptrdiff_t c = 0; c < nk; c++) S[(i + r) * lds + j + c] = t[4 * r + c];
            }
        }
    }
}
#endif

/* The dots of every kv head's query rows (rph4 per head, head-major; Qp their bf16 pairs, D2 apart)
 * with keys [0, ncols) of krows (head h's rows D further; navail: see fc_prefetch_head_rows) on
 * vdpbf16ps (fc_qk_dpbf16_rows), in fc_rowdots_heads_h16's key groups and prefetch, or asking for
 * the rows ahead a line per step (fc_uarch.h fc_paged_spread). */
static inline void fc_qk_heads_dpbf16(const uint32_t* Qp, ptrdiff_t D2, ptrdiff_t nheads, ptrdiff_t rph4, ptrdiff_t D,
                                      const uint16_t* const* krows, ptrdiff_t ncols, ptrdiff_t navail,
                                      float* S, ptrdiff_t lds) {
#if FC_HAVE_DPBF16
    if (fc_paged_spread)
        FC_FOR_KEY_GROUPS_AND_HEADS(const uint16_t, krows, FC_H16_GROUP, FC_H16_GROUP, 0, 1,
            fc_qk_dpbf16_rows(Qp + h * rph4 * D2, D2, rph4, D, hrows, n, S + h * rph4 * lds + j0, lds, pfrows))
    else
        FC_FOR_KEY_GROUPS_AND_HEADS(const uint16_t, krows, FC_H16_GROUP, FC_H16_GROUP, fc_h16_l1_ahead, 0,
            fc_qk_dpbf16_rows(Qp + h * rph4 * D2, D2, rph4, D, hrows, n, S + h * rph4 * lds + j0, lds, NULL))
#else
    (void)Qp; (void)D2; (void)nheads; (void)rph4; (void)D; (void)krows; (void)ncols; (void)navail; (void)S;
    (void)lds;  /* never called */
#endif
}

/* O += P V for every kv head's query rows (rph4 per head, head-major) over value rows [0, ncols <=
 * FC_BC) of vrows (head h's D further; navail: see fc_prefetch_head_rows), P holding round_p's
 * weights (bf16 values in float32, ldp apart), paired into Pp ([rows][FC_BC / 2] scratch) first. */
static inline void fc_pv_heads_dpbf16(const float* P, ptrdiff_t ldp, ptrdiff_t nheads, ptrdiff_t rph4,
                                      ptrdiff_t ncols, ptrdiff_t navail, const uint16_t* const* vrows, ptrdiff_t D,
                                      float* O, ptrdiff_t ldo, uint32_t* Pp) {
#if FC_HAVE_DPBF16
    const uint16_t* hrows[FC_DP16_GROUP];
    fc_pair_p_bf16(P, ldp, nheads * rph4, ncols, Pp, 0);
    for (ptrdiff_t j0 = 0; j0 < ncols; j0 += FC_DP16_GROUP) {   /* key groups, kv head by kv head (D apart) */
        ptrdiff_t n = ncols - j0 < FC_DP16_GROUP ? ncols - j0 : FC_DP16_GROUP;
        for (ptrdiff_t h = 0; h < nheads; h++) {
            fc_dp16_ahead pf = fc_dp16_next(vrows, j0, n, navail, h, D);
            for (ptrdiff_t j = 0; j < n; j++) hrows[j] = vrows[j0 + j] + h * D;
            fc_pv_dpbf16_rows(Pp + h * rph4 * (FC_BC / 2) + j0 / 2, FC_BC / 2, rph4, n, hrows, D,
                              O + h * rph4 * ldo, ldo, &pf);
        }
    }
#else
    (void)P; (void)ldp; (void)nheads; (void)rph4; (void)ncols; (void)navail; (void)vrows; (void)D; (void)O; (void)ldo;
    (void)Pp;  /* never called */
#endif
}
#endif
