/* f16 products on the AMX-BF16 tiles: the mixed f16 flash with round_p where the CPU has AMX-BF16
 * (and no f16 tile instruction), the one route to the tiles' rate for f16.
 *
 * An f16 value x is two bf16 terms, hi = bf16(x) (nearest even) and lo = bf16(x - hi), and
 * x = hi + lo exactly: x is m 2^e with m an integer below 2^11 (subnormals too, e = -24), hi keeps
 * 8 significant bits and is a multiple of 2^(e+3), so x - hi is a multiple of 2^e of magnitude at
 * most 2^(e+2): at most 3 significant bits, exact in float32 and in bf16, and a normal bf16 (at
 * least 2^-24), which the tiles do not read as zero.  So x y = hi_x hi_y + hi_x lo_y + lo_x hi_y +
 * lo_x lo_y, four exact products, and a float32 sum of them is a float32 sum of exact products, as
 * the mixed contract asks of the f16 kernels.  The four run as two tdpbf16ps per block, each
 * instruction's pair of products being (hi_x, lo_x) . (t_y, t_y) for t = hi, lo:
 *
 *   scores  Q's words (hi | lo << 16) per element, the row written twice (2D words: fc_split_q_f16);
 *           K's words (hi | hi << 16) for d < D and (lo | lo << 16) for D <= d < 2D, [2D][FC_BC]
 *           (fc_pack_k_split_f16): fc_qk_dpbf16's operands with D2 = 2D, its tiles and edges as
 *           they are.
 *   P V     V's words (hi | lo << 16) [key][D] (fc_pack_v_split_f16); P's (hi | hi << 16) and
 *           (lo | lo << 16) per weight, two planes of [row][key] (fc_split_p_f16: round_p's
 *           weights, f16 values): per 16 keys V's tile against P's high tile, then its low tile
 *           (fc_pv_f16s).  (V's words per key tile are 64 KB at D = 128 and stream from L2 per
 *           32 query rows; duplicating V's terms instead of P's doubled that, 6-11% slower at
 *           S = 1024-4096 on the Xeon, family 6 model 167, in runs minutes apart.)
 *   backward  S and dP as the scores (Q's and dO's words against K's and V's); dQ = dS K as P V
 *           (dS's planes against K's words, fc_pack_v_split's layout); dV = P^T dO and
 *           dK = dS^T Q contract over query rows, one per word: dO's (Q's) words (hi | lo << 16)
 *           against P's (dS's) two planes (fc_tn_f16s).  Packed from the widened float32 rows.
 *
 * Infinities and NaNs are not split (inf - inf is NaN): inputs holding one never come here
 * (fc_f16_all_finite, checked by the entry).  Products of f16 values are multiples of 2^-48, so
 * no partial sum is a float32 subnormal, which the tiles would flush.  Hand-written; included
 * (through fc_simd.h) by every CPU level's core module; the tile loops exist at the AVX512-BF16
 * level only, the packers everywhere (scalar below it). */
#ifndef FUEL_CY_FC_F16_TILES_H
#define FUEL_CY_FC_F16_TILES_H
#include "fc_isa.h"
#include "fc_math.h"
#include "fc_half.h"     /* fc_pv_heads_h16 */
#include "fc_amx.h"      /* the tile instructions, FC_BY_SCORES_FORM, fc_amx_config */

/* one f16 value (x: exactly an f16 value in float32, or h: its bits) -> the word (hi | lo << 16)
 * of its two bf16 terms */
static inline uint32_t fc_f32_split_word(float x) {
    uint16_t hi = fc_f32_to_bf16_bits(x);
    return hi | (uint32_t)fc_f32_to_bf16_bits(x - fc_bf16_bits_to_f32(hi)) << 16;
}
static inline uint32_t fc_f16_split_word(uint16_t h) { return fc_f32_split_word(fc_f16_bits_to_f32(h)); }
/* a term t (0: hi, 1: lo) of the word w as (t | t << 16) */
static inline uint32_t fc_split_term_dup(uint32_t w, int t) {
    uint32_t h = t ? w >> 16 : w & 0xffffu;
    return h | h << 16;
}

#if FC_HAVE_DPBF16
/* 16 f16 values (in float32, or their bits) -> their 16 split words */
static inline __m512i fc_f32_split_words16(__m512 x) {
    __m256bh hi = _mm512_cvtneps_pbh(x);
    __m256bh lo = _mm512_cvtneps_pbh(_mm512_sub_ps(x, _mm512_cvtpbh_ps(hi)));
    return _mm512_or_si512(_mm512_cvtepu16_epi32((__m256i)hi), _mm512_slli_epi32(_mm512_cvtepu16_epi32((__m256i)lo), 16));
}
static inline __m512i fc_f16_split_words16(__m256i h) { return fc_f32_split_words16(_mm512_cvtph_ps(h)); }
/* 16 split words -> (t | t << 16) of term t */
static inline __m512i fc_split_dup16(__m512i w, int t) {
    __m512i h = t ? _mm512_srli_epi32(w, 16) : _mm512_and_si512(w, _mm512_set1_epi32(0xffff));
    return _mm512_or_si512(h, _mm512_slli_epi32(h, 16));
}
#endif

/* one row of D f16 values -> Q's 2D words (the D split words, twice) */
static inline void fc_split_q_f16(const uint16_t* x, ptrdiff_t D, uint32_t* out) {
    ptrdiff_t d = 0;
#if FC_HAVE_DPBF16
    for (; d + 16 <= D; d += 16) {
        __m512i w = fc_f16_split_words16(_mm256_loadu_si256((const __m256i*)(const void*)(x + d)));
        _mm512_storeu_si512(out + d, w);
        _mm512_storeu_si512(out + D + d, w);
    }
#endif
    for (; d < D; d++) out[d] = out[D + d] = fc_f16_split_word(x[d]);
}

/* rows [nrows][ldx] of f16 values held in float32 (a widened q) -> Q's 2D words per row, rows ldo
 * apart: fc_split_q_f16's words */
static inline void fc_split_q_rows_f32(const float* X, ptrdiff_t ldx, ptrdiff_t nrows, ptrdiff_t D, uint32_t* out,
                                       ptrdiff_t ldo) {
    for (ptrdiff_t r = 0; r < nrows; r++) {
        const float* x = X + r * ldx;
        uint32_t* o = out + r * ldo;
        ptrdiff_t d = 0;
#if FC_HAVE_DPBF16
        for (; d + 16 <= D; d += 16) {
            __m512i w = fc_f32_split_words16(_mm512_loadu_ps(x + d));
            _mm512_storeu_si512(o + d, w);
            _mm512_storeu_si512(o + D + d, w);
        }
#endif
        for (; d < D; d++) o[d] = o[D + d] = fc_f32_split_word(x[d]);
    }
}

/* the split word of key j's element d, from f16 rows (r16) or float32 rows of f16 values (r32) */
static inline uint32_t fc_split_word_at(const uint16_t* const* r16, const float* const* r32, ptrdiff_t j,
                                        ptrdiff_t d) {
    return r16 ? fc_f16_split_word(r16[j][d]) : fc_f32_split_word(r32[j][d]);
}
#if FC_HAVE_DPBF16
/* the split words of key j's elements d .. d + 15 */
static inline __m512i fc_split_words16_at(const uint16_t* const* r16, const float* const* r32, ptrdiff_t j,
                                          ptrdiff_t d) {
    return r16 ? fc_f16_split_words16(_mm256_loadu_si256((const __m256i*)(const void*)(r16[j] + d)))
               : fc_f32_split_words16(_mm512_loadu_ps(r32[j] + d));
}
#endif

/* K rows (n <= FC_BC keys of D f16 values: f16 rows r16, or float32 rows r32) -> [2D][FC_BC]: row
 * d (< D) key j holds K[j][d]'s hi term twice, row D + d its lo term twice; keys n.. zero. */
static inline void fc_pack_k_split(const uint16_t* const* r16, const float* const* r32, ptrdiff_t n, ptrdiff_t D,
                                   uint32_t* out) {
    ptrdiff_t j0 = 0, d0 = 0;
#if FC_HAVE_DPBF16
    for (; j0 + 16 <= n; j0 += 16)   /* 16 keys x 16 elements at a time, transposed in registers */
        for (d0 = 0; d0 + 16 <= D; d0 += 16) {
            __m512 w[16];
            for (int j = 0; j < 16; j++) w[j] = _mm512_castsi512_ps(fc_split_words16_at(r16, r32, j0 + j, d0));
            fc_transpose_block(w);
            for (int d = 0; d < 16; d++) {
                __m512i c = _mm512_castps_si512(w[d]);
                _mm512_storeu_si512(out + (d0 + d) * FC_BC + j0, fc_split_dup16(c, 0));
                _mm512_storeu_si512(out + (D + d0 + d) * FC_BC + j0, fc_split_dup16(c, 1));
            }
        }
    /* what the blocks left: the last D % 16 elements of their keys */
    for (ptrdiff_t j = 0; j < j0; j++)
        for (ptrdiff_t d = D / 16 * 16; d < D; d++) {
            uint32_t w = fc_split_word_at(r16, r32, j, d);
            out[d * FC_BC + j] = fc_split_term_dup(w, 0);
            out[(D + d) * FC_BC + j] = fc_split_term_dup(w, 1);
        }
#endif
    (void)d0;
    for (ptrdiff_t j = j0; j < n; j++)
        for (ptrdiff_t d = 0; d < D; d++) {
            uint32_t w = fc_split_word_at(r16, r32, j, d);
            out[d * FC_BC + j] = fc_split_term_dup(w, 0);
            out[(D + d) * FC_BC + j] = fc_split_term_dup(w, 1);
        }
    for (ptrdiff_t d = 0; d < 2 * D; d++)
        for (ptrdiff_t j = n; j < FC_BC; j++) out[d * FC_BC + j] = 0;
}
static inline void fc_pack_k_split_f16(const uint16_t* const* rows, ptrdiff_t n, ptrdiff_t D, uint32_t* out) {
    fc_pack_k_split(rows, NULL, n, D, out);
}
static inline void fc_pack_k_split_f32(const float* const* rows, ptrdiff_t n, ptrdiff_t D, uint32_t* out) {
    fc_pack_k_split(NULL, rows, n, D, out);
}

/* V rows (n <= FC_BC keys of D f16 values, as fc_pack_k_split's) -> [FC_BC][D]: key j's split
 * words in row j; keys n.. zero.  (The backward's dQ = dS K takes K's in this layout.) */
static inline void fc_pack_v_split(const uint16_t* const* r16, const float* const* r32, ptrdiff_t n, ptrdiff_t D,
                                   uint32_t* out) {
    for (ptrdiff_t j = 0; j < FC_BC; j++) {
        uint32_t* o = out + j * D;
        if (j >= n) {
            memset(o, 0, (size_t)D * 4);
            continue;
        }
        ptrdiff_t d = 0;
#if FC_HAVE_DPBF16
        for (; d + 16 <= D; d += 16) _mm512_storeu_si512(o + d, fc_split_words16_at(r16, r32, j, d));
#endif
        for (; d < D; d++) o[d] = fc_split_word_at(r16, r32, j, d);
    }
}
static inline void fc_pack_v_split_f16(const uint16_t* const* rows, ptrdiff_t n, ptrdiff_t D, uint32_t* out) {
    fc_pack_v_split(rows, NULL, n, D, out);
}
static inline void fc_pack_v_split_f32(const float* const* rows, ptrdiff_t n, ptrdiff_t D, uint32_t* out) {
    fc_pack_v_split(NULL, rows, n, D, out);
}

/* P rows [nrows][ldp] of f16-valued floats (round_p's weights) -> each weight's high term twice,
 * out[r * ldo + j], and its low term twice, out[plane + r * ldo + j], for j < ncols rounded up to
 * 16, the keys past ncols zero */
static inline void fc_split_p_f16(const float* P, ptrdiff_t ldp, ptrdiff_t nrows, ptrdiff_t ncols, uint32_t* out,
                                  ptrdiff_t ldo, ptrdiff_t plane) {
    ptrdiff_t nc16 = (ncols + 15) / 16 * 16;
    for (ptrdiff_t r = 0; r < nrows; r++) {
        const float* p = P + r * ldp;
        uint32_t* hi = out + r * ldo;
        uint32_t* lo = hi + plane;
        ptrdiff_t j = 0;
#if FC_HAVE_DPBF16
        for (; j + 16 <= ncols; j += 16) {
            __m512i w = fc_f32_split_words16(_mm512_loadu_ps(p + j));
            _mm512_storeu_si512(hi + j, fc_split_dup16(w, 0));
            _mm512_storeu_si512(lo + j, fc_split_dup16(w, 1));
        }
#endif
        for (; j < ncols; j++) {
            uint32_t w = fc_f32_split_word(p[j]);
            hi[j] = fc_split_term_dup(w, 0);
            lo[j] = fc_split_term_dup(w, 1);
        }
        for (; j < nc16; j++) hi[j] = lo[j] = 0;
    }
}

/* Whether n values are all finite, read as their bits (T: uint16_t for f16, uint32_t for float32),
 * EXP the exponent field: the split's precondition.  LANES values per vector of VT lanes. */
#define FC_DEFINE_ALL_FINITE(NAME, ELEM, T, EXP, ISA, LANES, MASKT, SET1, CMPEQ)                 \
static inline int NAME(const ELEM* xs, ptrdiff_t n) {                                            \
    const unsigned char* x = (const unsigned char*)xs;                                           \
    ptrdiff_t i = 0;                                                                             \
    int bad = 0;                                                                                 \
    FC_IF_##ISA(                                                                                 \
        const __m512i e = SET1(EXP);                                                             \
        MASKT any = 0;                                                                           \
        for (; i + LANES <= n; i += LANES)                                                       \
            any |= CMPEQ(_mm512_and_si512(_mm512_loadu_si512(x + i * sizeof(T)), e), e);         \
        bad = any != 0;)                                                                         \
    for (; i < n; i++) {                                                                         \
        T u;                                                                                     \
        memcpy(&u, x + i * sizeof(T), sizeof(T));                                                \
        bad |= (u & (EXP)) == (EXP);                                                             \
    }                                                                                            \
    return !bad;                                                                                 \
}
#if defined(__AVX512BW__)
#define FC_IF_AVX512BW(...) __VA_ARGS__
#else
#define FC_IF_AVX512BW(...)
#endif
#if defined(__AVX512F__)
#define FC_IF_AVX512F(...) __VA_ARGS__
#else
#define FC_IF_AVX512F(...)
#endif
/* f16 values (bits): the entries' scan of q, k, v in storage */
FC_DEFINE_ALL_FINITE(fc_f16_all_finite, uint16_t, uint16_t, 0x7c00, AVX512BW, 32, __mmask32, _mm512_set1_epi16,
                     _mm512_cmpeq_epi16_mask)
/* float32 values: the backward's widened f16 inputs */
FC_DEFINE_ALL_FINITE(fc_f32_all_finite, float, uint32_t, 0x7f800000, AVX512F, 16, __mmask16, _mm512_set1_epi32,
                     _mm512_cmpeq_epi32_mask)

/* O += P V on the tiles from the split words: Pw (fc_split_p_f16's two planes, plane words apart,
 * rows ldpw words apart, keys up to ncols rounded to 16 written) and Vs (fc_pack_v_split's, this
 * key tile's).  Per block of 16 keys, V's tile against P's high tile, then its low tile.  Rows in
 * whole 16-row tiles and columns in whole 16-column tiles go to the tiles; the rest to the float32
 * loops on P's float32 rows and V's f16 rows (vrows16) or float32 rows (vrows, vrows16 NULL: the
 * backward's dQ = dS K on widened K), the float32 kernel's sums either way (fc_gemm.h fc_pv_rows_f32
 * is fc_pv_f32's loop without its prefetch). */
static inline void fc_pv_f16s_loops(const float* P, ptrdiff_t ldp, ptrdiff_t r0, ptrdiff_t nrows4, ptrdiff_t ncols,
                                    const uint16_t* const* vrows16, float* const* vrows, ptrdiff_t c0, ptrdiff_t D,
                                    float* O, ptrdiff_t ldo) {
    if (r0 >= nrows4 || c0 >= D) return;
    if (vrows16) {
        const uint16_t* vr[FC_BC];
        for (ptrdiff_t j = 0; j < ncols; j++) vr[j] = vrows16[j] + c0;
        fc_pv_heads_h16(P + r0 * ldp, ldp, 1, nrows4 - r0, ncols, ncols, vr, D - c0, O + r0 * ldo + c0, ldo, 1);
    } else {
        float* vr[FC_BC];
        for (ptrdiff_t j = 0; j < ncols; j++) vr[j] = vrows[j] + c0;
        fc_pv_rows_f32(P + r0 * ldp, ldp, nrows4 - r0, ncols, vr, D - c0, O + r0 * ldo + c0, ldo);
    }
}
#if FC_HAVE_DPBF16
#define FC_DEFINE_PV_F16S_AMX(NAME, CFG, ZERO, LOAD, STORE, DP, RELEASE)                         \
static void NAME(const float* P, ptrdiff_t ldp, const uint32_t* Pw, ptrdiff_t ldpw, ptrdiff_t plane,   \
                 ptrdiff_t nrows4, ptrdiff_t ncols, const uint32_t* Vs, const uint16_t* const* vrows16, \
                 float* const* vrows, ptrdiff_t D, float* O, ptrdiff_t ldo) {                    \
    ptrdiff_t rows_t = nrows4 / 16 * 16, cols_t = D / 16 * 16, keys = (ncols + 15) / 16 * 16;   \
    if (!rows_t || !cols_t || !ncols) {                                                          \
        fc_pv_f16s_loops(P, ldp, 0, nrows4, ncols, vrows16, vrows, 0, D, O, ldo);                \
        return;                                                                                  \
    }                                                                                            \
    long sa = (long)(ldpw * 4), sv = (long)(D * 4), so = (long)(ldo * 4);                        \
    CFG(&fc_amx_config);                                                                         \
    for (ptrdiff_t i = 0; i < rows_t; i += 32) {                                                 \
        int two = i + 32 <= rows_t;                                                              \
        for (ptrdiff_t d = 0; d < cols_t; d += 32) {                                             \
            int twoc = d + 32 <= cols_t;                                                         \
            float* o = O + i * ldo + d;                                                          \
            FC_AMX_C_BLOCK(LOAD, o, ldo, so, two, twoc);                                         \
            for (ptrdiff_t k = 0; k < keys; k += 16) {                                           \
                LOAD(6, Vs + k * D + d, sv);                                                     \
                if (twoc) LOAD(7, Vs + k * D + d + 16, sv);                                      \
                for (int t = 0; t < 2; t++)     /* the weights' high terms, then their low terms */ \
                    FC_AMX_A_PRODUCTS(LOAD, DP, Pw + t * plane + i * ldpw + k, ldpw, sa, two, twoc); \
            }                                                                                    \
            FC_AMX_C_BLOCK(STORE, o, ldo, so, two, twoc);                                        \
        }                                                                                        \
    }                                                                                            \
    RELEASE();                                                                                   \
    fc_pv_f16s_loops(P, ldp, 0, rows_t, ncols, vrows16, vrows, cols_t, D, O, ldo);               \
    fc_pv_f16s_loops(P, ldp, rows_t, nrows4, ncols, vrows16, vrows, 0, D, O, ldo);               \
}
FC_DEFINE_PV_F16S_AMX(fc_pv_f16s_amx_emulated, FC_AMX_EMU_CFG, FC_AMX_EMU_ZERO, FC_AMX_EMU_LOAD, FC_AMX_EMU_STORE,
                      FC_AMX_EMU_DP, FC_AMX_EMU_RELEASE)
#if FC_HAVE_AMX
FC_DEFINE_PV_F16S_AMX(fc_pv_f16s_amx, FC_AMX_CFG, FC_AMX_ZERO, FC_AMX_LOAD, FC_AMX_STORE, FC_AMX_DP, FC_AMX_RELEASE)
#endif

/* Ct += X^T P of the f16 backward (dV += P^T dO, dK += dS^T Q; fc_amx.h fc_tn_bf16t's layout, Ct
 * [d][key] rows ldc apart) from the split words: the product contracts over query rows, one row
 * per word: X's words (hi | lo << 16) of row r, column d at xt[d * rows_t + r] (built here, at
 * most D * FC_AMX_TN_ROWS words) against P's planes (fc_split_p_f16: weight (r, j)'s high term
 * twice, then its low term twice), per chunk of FC_AMX_TN_KEYS keys.  Per element the sum runs over
 * the query rows in blocks of 16, the high plane's instruction then the low plane's.  Rows in
 * whole 16-row blocks (at most FC_AMX_TN_ROWS), columns d and keys in whole 16-wide tiles go to the
 * tiles; the rest to fc_tn_part_f32 (fc_tn_bf16t's edges). */
#define FC_DEFINE_TN_F16S_AMX(NAME, CFG, ZERO, LOAD, STORE, DP, RELEASE)                         \
static void NAME(const float* P, ptrdiff_t ldp, ptrdiff_t nrows, ptrdiff_t ncols, const float* X,  \
                 ptrdiff_t ldx, ptrdiff_t D, float* Ct, ptrdiff_t ldc, uint32_t* xt) {           \
    ptrdiff_t rows_t = nrows / 16 * 16, keys_t = ncols / 16 * 16, d_t = D / 16 * 16;            \
    if (rows_t > FC_AMX_TN_ROWS) rows_t = FC_AMX_TN_ROWS;                                        \
    if (!rows_t || !keys_t || !d_t) {                                                            \
        fc_tn_part_f32(P, ldp, 0, nrows, 0, ncols, X, ldx, 0, D, Ct, ldc);                       \
        return;                                                                                  \
    }                                                                                            \
    for (ptrdiff_t r = 0; r < rows_t; r++)                                                       \
        for (ptrdiff_t d = 0; d < d_t; d++) xt[d * rows_t + r] = fc_f32_split_word(X[r * ldx + d]);  \
    enum { plane = FC_AMX_TN_ROWS * FC_AMX_TN_KEYS };                                            \
    uint32_t terms[2 * plane];                     /* [term][row][key of the chunk] */           \
    CFG(&fc_amx_config);                                                                         \
    for (ptrdiff_t j0 = 0; j0 < keys_t; j0 += FC_AMX_TN_KEYS) {                                  \
        ptrdiff_t w = keys_t - j0 < FC_AMX_TN_KEYS ? keys_t - j0 : FC_AMX_TN_KEYS;              \
        fc_split_p_f16(P + j0, ldp, rows_t, w, terms, w, plane);                                 \
        FC_AMX_TN_CHUNK(LOAD, STORE, DP, xt, rows_t, terms, plane, 2, w, j0, d_t, Ct, ldc);       \
    }                                                                                            \
    RELEASE();                                                                                   \
    if (rows_t < nrows) fc_tn_part_f32(P, ldp, rows_t, nrows, 0, keys_t, X, ldx, 0, d_t, Ct, ldc); \
    if (keys_t < ncols) fc_tn_part_f32(P, ldp, 0, nrows, keys_t, ncols, X, ldx, 0, d_t, Ct, ldc); \
    if (d_t < D) fc_tn_part_f32(P, ldp, 0, nrows, 0, ncols, X, ldx, d_t, D, Ct, ldc);            \
}
FC_DEFINE_TN_F16S_AMX(fc_tn_f16s_amx_emulated, FC_AMX_EMU_CFG, FC_AMX_EMU_ZERO, FC_AMX_EMU_LOAD, FC_AMX_EMU_STORE,
                      FC_AMX_EMU_DP, FC_AMX_EMU_RELEASE)
#if FC_HAVE_AMX
FC_DEFINE_TN_F16S_AMX(fc_tn_f16s_amx, FC_AMX_CFG, FC_AMX_ZERO, FC_AMX_LOAD, FC_AMX_STORE, FC_AMX_DP, FC_AMX_RELEASE)
#endif
#endif   /* FC_HAVE_DPBF16 */

/* the float32 loops with fc_pv_f16s_amx's and fc_tn_f16s_amx's arguments (never called where the
 * split runs: it runs only where the bf16 products take the tiles) */
static inline void fc_pv_f16s_vec(const float* P, ptrdiff_t ldp, const uint32_t* Pw, ptrdiff_t ldpw, ptrdiff_t plane,
                                  ptrdiff_t nrows4, ptrdiff_t ncols, const uint32_t* Vs,
                                  const uint16_t* const* vrows16, float* const* vrows, ptrdiff_t D, float* O,
                                  ptrdiff_t ldo) {
    (void)Pw; (void)ldpw; (void)plane; (void)Vs;
    fc_pv_f16s_loops(P, ldp, 0, nrows4, ncols, vrows16, vrows, 0, D, O, ldo);
}
static inline void fc_tn_f16s_vec(const float* P, ptrdiff_t ldp, ptrdiff_t nrows, ptrdiff_t ncols, const float* X,
                                  ptrdiff_t ldx, ptrdiff_t D, float* Ct, ptrdiff_t ldc, uint32_t* xt) {
    (void)xt;
    fc_tn_part_f32(P, ldp, 0, nrows, 0, ncols, X, ldx, 0, D, Ct, ldc);
}
/* O += P V of the mixed f16 flash with round_p (and the f16 backward's dQ = dS K) on the tiles
 * (fc_bf16_on_tiles), in the tile form this CPU takes. */
static inline void fc_pv_f16s(const float* P, ptrdiff_t ldp, const uint32_t* Pw, ptrdiff_t ldpw, ptrdiff_t plane,
                              ptrdiff_t nrows4, ptrdiff_t ncols, const uint32_t* Vs, const uint16_t* const* vrows16,
                              float* const* vrows, ptrdiff_t D, float* O, ptrdiff_t ldo) {
    FC_BY_SCORES_FORM(fc_pv_f16s_amx, fc_pv_f16s_amx_emulated, fc_pv_f16s_vec,
                      (P, ldp, Pw, ldpw, plane, nrows4, ncols, Vs, vrows16, vrows, D, O, ldo));
}
/* Ct += X^T P of the f16 backward with round_p on the tiles, in the tile form this CPU takes
 * (xt: at most D * FC_AMX_TN_ROWS words of scratch). */
static inline void fc_tn_f16s(const float* P, ptrdiff_t ldp, ptrdiff_t nrows, ptrdiff_t ncols, const float* X,
                              ptrdiff_t ldx, ptrdiff_t D, float* Ct, ptrdiff_t ldc, uint32_t* xt) {
    FC_BY_SCORES_FORM(fc_tn_f16s_amx, fc_tn_f16s_amx_emulated, fc_tn_f16s_vec, (P, ldp, nrows, ncols, X, ldx, D, Ct, ldc, xt));
}
#endif
