/* bf16 and f16 storage <-> float32 work values: widening and narrowing whole arrays
 * (fc_widen_half, fc_narrow_half), the half-pool readers of the float32-compute paged decode
 * (dots and PV straight from a bf16/f16 pool, widened in registers: fc_rowdots_heads_h16,
 * fc_pv_heads_h16), and the vector roundings of float32 to bf16/f16 values that the "math in T"
 * GEMMs (fc_gemm.h) apply after every step.  The scalar conversions are in fc_math.h.
 * Hand-written; included (through fc_simd.h) by every CPU level's core module. */
#ifndef FUEL_CY_FC_HALF_H
#define FUEL_CY_FC_HALF_H
#include "fc_math.h"
#include "fc_isa.h"

/* ---- Half-type storage <-> the float work arrays. ----------------------------------------------
 * Widening is exact; narrowing rounds to nearest even (below).  NumPy's own float16
 * conversion is a scalar bit-twiddling loop: a third of an f16 paged decode's time.  f16 uses
 * F16C where the level has it (avx2 and up); bf16 is a 16-bit shift at every level. */
static inline void fc_widen_half(const uint16_t* x, float* out, ptrdiff_t n, int is_f16) {
    ptrdiff_t i = 0;
#if defined(__AVX512F__)
    if (is_f16) {
        for (; i + 16 <= n; i += 16)
            _mm512_storeu_ps(out + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(x + i))));
    } else {
        for (; i + 16 <= n; i += 16)
            _mm512_storeu_si512(out + i, _mm512_slli_epi32(
                _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)(x + i))), 16));
    }
#elif defined(__AVX2__) && defined(__F16C__)
    if (is_f16) {
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(x + i))));
    } else {
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_si256((__m256i*)(out + i), _mm256_slli_epi32(
                _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)(x + i))), 16));
    }
#elif defined(__SSE2__)
    if (!is_f16) {  /* interleaving zeros below each bf16 is the shift by 16 */
        const __m128i zero = _mm_setzero_si128();
        for (; i + 8 <= n; i += 8) {
            __m128i h = _mm_loadu_si128((const __m128i*)(x + i));
            _mm_storeu_si128((__m128i*)(out + i), _mm_unpacklo_epi16(zero, h));
            _mm_storeu_si128((__m128i*)(out + i + 4), _mm_unpackhi_epi16(zero, h));
        }
    }
#endif
    for (; i < n; i++) out[i] = is_f16 ? fc_f16_bits_to_f32(x[i]) : fc_bf16_bits_to_f32(x[i]);
}
/* Paged decode straight from a bf16/f16 pool (the float32-compute kernels): the pool is read once
 * at two bytes an element and no widened copy of it is made.  Key and value rows are widened in
 * registers inside the dots and the PV loop; the bits are those of the float32 loops on a widened
 * pool (same lanes, same order).  Against widening each group of rows into a buffer first this
 * measured 2-16% (keys) and 20-24% (values) faster at B=16 Hq=32 Hkv=8 D=128 on Zen 4. */
/* A vector of float32 from FC_W32 bf16 (IS_F16 = 0) or f16 (1) values: exact widening. */
static inline __attribute__((always_inline)) fc_vec_f32 fc_load_h16(const uint16_t* p, int is_f16) {
#if defined(__AVX512F__)
    __m256i h = _mm256_loadu_si256((const __m256i*)p);
    return is_f16 ? (fc_vec_f32)_mm512_cvtph_ps(h) : (fc_vec_f32)_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16);
#elif defined(__AVX2__) && defined(__F16C__)
    __m128i h = _mm_loadu_si128((const __m128i*)p);
    return is_f16 ? (fc_vec_f32)_mm256_cvtph_ps(h) : (fc_vec_f32)_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
#else
    fc_vec_f32 v;
    for (int l = 0; l < FC_W32; l++) v[l] = is_f16 ? fc_f16_bits_to_f32(p[l]) : fc_bf16_bits_to_f32(p[l]);
    return v;
#endif
}
/* fc_rowdots_f32 on bf16/f16 key rows, widened in registers, two keys at a time (each query load
 * feeds two FMAs; eight chains side by side): every dot is the same lanes in the same order as
 * fc_rowdots_f32 on the widened rows, so the same bits. */
static inline __attribute__((always_inline)) void fc_rowdots2_h16(const float* Q, ptrdiff_t nrows4, ptrdiff_t D, const uint16_t* const* krows,
                                   ptrdiff_t ncols, float* S, ptrdiff_t lds, int is_f16) {
    ptrdiff_t j = 0;
    for (; j < ncols; j += 2) {
        const int two = j + 1 < ncols;
        const uint16_t *k0 = krows[j], *k1 = two ? krows[j + 1] : krows[j];
        for (ptrdiff_t i = 0; i < nrows4; i += 4) {
            const float *q0 = Q + i * D, *q1 = q0 + D, *q2 = q1 + D, *q3 = q2 + D;
            fc_vec_f32 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, b0 = {0}, b1 = {0}, b2 = {0}, b3 = {0};
            ptrdiff_t d = 0;
            for (; d + FC_W32 <= D; d += FC_W32) {
                fc_vec_f32 u = fc_load_h16(k0 + d, is_f16), w = fc_load_h16(k1 + d, is_f16), x;
                x = fc_load_f32(q0 + d); a0 += x * u; b0 += x * w;
                x = fc_load_f32(q1 + d); a1 += x * u; b1 += x * w;
                x = fc_load_f32(q2 + d); a2 += x * u; b2 += x * w;
                x = fc_load_f32(q3 + d); a3 += x * u; b3 += x * w;
            }
            for (ptrdiff_t l = 0; d < D; d++, l++) {
                float u = is_f16 ? fc_f16_bits_to_f32(k0[d]) : fc_bf16_bits_to_f32(k0[d]);
                float w = is_f16 ? fc_f16_bits_to_f32(k1[d]) : fc_bf16_bits_to_f32(k1[d]);
                a0[l] = fc_madd_f32(q0[d], u, a0[l]); a1[l] = fc_madd_f32(q1[d], u, a1[l]);
                a2[l] = fc_madd_f32(q2[d], u, a2[l]); a3[l] = fc_madd_f32(q3[d], u, a3[l]);
                b0[l] = fc_madd_f32(q0[d], w, b0[l]); b1[l] = fc_madd_f32(q1[d], w, b1[l]);
                b2[l] = fc_madd_f32(q2[d], w, b2[l]); b3[l] = fc_madd_f32(q3[d], w, b3[l]);
            }
            float* s = S + i * lds + j;
            s[0] = fc_hsum_f32(a0); s[lds] = fc_hsum_f32(a1); s[2 * lds] = fc_hsum_f32(a2); s[3 * lds] = fc_hsum_f32(a3);
            if (two) {
                s[1] = fc_hsum_f32(b0); s[lds + 1] = fc_hsum_f32(b1); s[2 * lds + 1] = fc_hsum_f32(b2);
                s[3 * lds + 1] = fc_hsum_f32(b3);
            }
        }
    }
}
#if defined(__AVX512F__)
/* fc_rowdots2_h16 four keys at a time (D a multiple of 16; fc_isa.h), the same bits. */
#define FC_LOAD_H16(p) fc_load_h16(p, is_f16)
FC_DEFINE_ROWDOTS4(fc_rowdots4_h16, const uint16_t* const*, uint16_t, FC_LOAD_H16,
                   fc_rowdots2_h16(Q, nrows4, D, krows + j, ncols - j, S + j, lds, is_f16), , , int is_f16)
#define FC_ROWDOTS_H16(Q, nrows4, D, krows, ncols, S, lds, is_f16) \
    ((D) % 16 == 0 ? fc_rowdots4_h16(Q, nrows4, D, krows, ncols, S, lds, is_f16) \
                   : fc_rowdots2_h16(Q, nrows4, D, krows, ncols, S, lds, is_f16))
#else
#define FC_ROWDOTS_H16 fc_rowdots2_h16
#endif
/* Keys per group of the half-pool heads loops (groups of 8 measured 15% faster than 16 at B=16
 * Hq=32 Hkv=8 D=128 ctx 2048 on Zen 4; at ctx 1024 4-11% faster than 4, the float32 loops' group
 * there, fc_uarch.h fc_paged_group, and within 3% of it at 2048); rows are prefetched
 * FC_PAGED_LOOKAHEAD keys ahead into L2, and fc_h16_l1_ahead keys ahead into L1 where the CPU's
 * L1d holds them (fc_prefetch_head_rows, fc_uarch.h). */
#define FC_H16_GROUP 8
static inline __attribute__((always_inline)) void fc_rowdots_heads_h16_t(
        const float* Q, ptrdiff_t nheads, ptrdiff_t rph4, ptrdiff_t D, const uint16_t* const* krows,
        ptrdiff_t ncols, ptrdiff_t navail, float* S, ptrdiff_t lds, const int is_f16) {
    FC_FOR_KEY_GROUPS_AND_HEADS(const uint16_t, krows, FC_H16_GROUP, FC_H16_GROUP, fc_h16_l1_ahead, 0,
        FC_ROWDOTS_H16(Q + h * rph4 * D, rph4, D, hrows, n, S + h * rph4 * lds + j0, lds, is_f16))
}
/* The dots of every kv head's query rows with keys [0, ncols) (is_f16 made a constant, so each
 * type gets its own loops). */
static inline void fc_rowdots_heads_h16(const float* Q, ptrdiff_t nheads, ptrdiff_t rph4, ptrdiff_t D,
                                        const uint16_t* const* krows, ptrdiff_t ncols, ptrdiff_t navail,
                                        float* S, ptrdiff_t lds, int is_f16) {
    if (is_f16) fc_rowdots_heads_h16_t(Q, nheads, rph4, D, krows, ncols, navail, S, lds, 1);
    else fc_rowdots_heads_h16_t(Q, nheads, rph4, D, krows, ncols, navail, S, lds, 0);
}
/* O[i, :] += sum_j P[i, j] * V[j, :] on bf16/f16 value rows, widened in registers, in blocks of
 * 4 rows: every element is the same multiply-add chain over j as in fc_pv_f32, so the same bits. */
static inline __attribute__((always_inline)) void fc_pv_h16(const float* P, ptrdiff_t ldp, ptrdiff_t nrows4, ptrdiff_t ncols,
                             const uint16_t* const* vrows, ptrdiff_t D, float* O, ptrdiff_t ldo, int is_f16) {
    ptrdiff_t d0 = 0;
    for (; d0 + 2 * FC_W32 <= D; d0 += 2 * FC_W32) {
        for (ptrdiff_t i = 0; i < nrows4; i += 4) {
            const float *p0 = P + i * ldp, *p1 = p0 + ldp, *p2 = p1 + ldp, *p3 = p2 + ldp;
            float *o0 = O + i * ldo + d0, *o1 = o0 + ldo, *o2 = o1 + ldo, *o3 = o2 + ldo;
            fc_vec_f32 a0 = fc_load_f32(o0), b0 = fc_load_f32(o0 + FC_W32);
            fc_vec_f32 a1 = fc_load_f32(o1), b1 = fc_load_f32(o1 + FC_W32);
            fc_vec_f32 a2 = fc_load_f32(o2), b2 = fc_load_f32(o2 + FC_W32);
            fc_vec_f32 a3 = fc_load_f32(o3), b3 = fc_load_f32(o3 + FC_W32);
            for (ptrdiff_t j = 0; j < ncols; j++) {
                fc_vec_f32 v0 = fc_load_h16(vrows[j] + d0, is_f16), v1 = fc_load_h16(vrows[j] + d0 + FC_W32, is_f16);
                a0 += p0[j] * v0; b0 += p0[j] * v1; a1 += p1[j] * v0; b1 += p1[j] * v1;
                a2 += p2[j] * v0; b2 += p2[j] * v1; a3 += p3[j] * v0; b3 += p3[j] * v1;
            }
            fc_store_f32(o0, a0); fc_store_f32(o0 + FC_W32, b0); fc_store_f32(o1, a1); fc_store_f32(o1 + FC_W32, b1);
            fc_store_f32(o2, a2); fc_store_f32(o2 + FC_W32, b2); fc_store_f32(o3, a3); fc_store_f32(o3 + FC_W32, b3);
        }
    }
    for (; d0 + FC_W32 <= D; d0 += FC_W32) {
        for (ptrdiff_t i = 0; i < nrows4; i += 4) {
            const float *p0 = P + i * ldp, *p1 = p0 + ldp, *p2 = p1 + ldp, *p3 = p2 + ldp;
            float *o0 = O + i * ldo + d0, *o1 = o0 + ldo, *o2 = o1 + ldo, *o3 = o2 + ldo;
            fc_vec_f32 a0 = fc_load_f32(o0), a1 = fc_load_f32(o1), a2 = fc_load_f32(o2), a3 = fc_load_f32(o3);
            for (ptrdiff_t j = 0; j < ncols; j++) {
                fc_vec_f32 v0 = fc_load_h16(vrows[j] + d0, is_f16);
                a0 += p0[j] * v0; a1 += p1[j] * v0; a2 += p2[j] * v0; a3 += p3[j] * v0;
            }
            fc_store_f32(o0, a0); fc_store_f32(o1, a1); fc_store_f32(o2, a2); fc_store_f32(o3, a3);
        }
    }
    for (; d0 < D; d0++) {
        for (ptrdiff_t i = 0; i < nrows4; i += 4) {
            const float *p0 = P + i * ldp, *p1 = p0 + ldp, *p2 = p1 + ldp, *p3 = p2 + ldp;
            float *o0 = O + i * ldo + d0, *o1 = o0 + ldo, *o2 = o1 + ldo, *o3 = o2 + ldo;
            float a0 = *o0, a1 = *o1, a2 = *o2, a3 = *o3;
            for (ptrdiff_t j = 0; j < ncols; j++) {
                uint16_t h = vrows[j][d0];
                float v = is_f16 ? fc_f16_bits_to_f32(h) : fc_bf16_bits_to_f32(h);
                a0 = fc_madd_f32(p0[j], v, a0); a1 = fc_madd_f32(p1[j], v, a1);
                a2 = fc_madd_f32(p2[j], v, a2); a3 = fc_madd_f32(p3[j], v, a3);
            }
            *o0 = a0; *o1 = a1; *o2 = a2; *o3 = a3;
        }
    }
}
static inline __attribute__((always_inline)) void fc_pv_heads_h16_t(
        const float* P, ptrdiff_t ldp, ptrdiff_t nheads, ptrdiff_t rph4, ptrdiff_t ncols, ptrdiff_t navail,
        const uint16_t* const* vrows, ptrdiff_t D, float* O, ptrdiff_t ldo, const int is_f16) {
    FC_FOR_KEY_GROUPS_AND_HEADS(const uint16_t, vrows, FC_H16_GROUP, FC_H16_GROUP, fc_h16_l1_ahead, 0,
        fc_pv_h16(P + h * rph4 * ldp + j0, ldp, rph4, n, hrows, D, O + h * rph4 * ldo, ldo, is_f16))
}
/* O += P V for every kv head's query rows over value rows [0, ncols) (navail: see fc_prefetch_head_rows). */
static inline void fc_pv_heads_h16(const float* P, ptrdiff_t ldp, ptrdiff_t nheads, ptrdiff_t rph4,
                                   ptrdiff_t ncols, ptrdiff_t navail, const uint16_t* const* vrows, ptrdiff_t D,
                                   float* O, ptrdiff_t ldo, int is_f16) {
    if (is_f16) fc_pv_heads_h16_t(P, ldp, nheads, rph4, ncols, navail, vrows, D, O, ldo, 1);
    else fc_pv_heads_h16_t(P, ldp, nheads, rph4, ncols, navail, vrows, D, O, ldo, 0);
}
/* float -> T, rounding to nearest even (NaN stays a quiet NaN): exact for the "math in T" kernels'
 * results, which are values of T already, and the one rounding of the float32-compute kernels.
 * f16 by F16C where the level has it; bf16 by integer arithmetic on the level's vectors. */
typedef uint16_t fc_u16h __attribute__((vector_size(FC_VBYTES / 2)));
static inline void fc_narrow_half(const float* x, uint16_t* out, ptrdiff_t n, int is_f16) {
    ptrdiff_t i = 0;
    if (is_f16) {
#if defined(__AVX512F__)
        for (; i + 16 <= n; i += 16)
            _mm256_storeu_si256((__m256i*)(out + i),
                                _mm512_cvtps_ph(_mm512_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#elif defined(__AVX2__) && defined(__F16C__)
        for (; i + 8 <= n; i += 8)
            _mm_storeu_si128((__m128i*)(out + i),
                             _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
    } else {
        for (; i + FC_W32 <= n; i += FC_W32) {
            fc_u32v u;
            memcpy(&u, x + i, FC_VBYTES);
            fc_i32v nan = (fc_i32v)(u & 0x7fffffffu) > 0x7f800000;
            fc_u32v r = fc_select_u32(nan, (u >> 16) | 0x0040u, (u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
            fc_u16h h = __builtin_convertvector(r, fc_u16h);
            memcpy(out + i, &h, FC_VBYTES / 2);
        }
    }
    for (; i < n; i++) out[i] = is_f16 ? fc_f32_to_f16_bits(x[i]) : fc_f32_to_bf16_bits(x[i]);
}

/* bf16 by integer arithmetic: exact for every input (subnormals, inf, NaN). */
static inline fc_vec_f32 fc_rbf16_exact_v(fc_vec_f32 x) {
    fc_u32v u = fc_bits_f32(x);
    fc_i32v nan = (fc_i32v)(u & 0x7fffffffu) > 0x7f800000;               /* all-ones where NaN */
    fc_u32v r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;          /* round to nearest even */
    fc_u32v quiet = (u & 0xffff0000u) | 0x00400000u;                     /* NaN stays a quiet NaN */
    return fc_from_bits_f32(fc_select_u32(nan, quiet, r));
}

#if defined(__AVX512F__) && defined(__AVX512BF16__)
/* vcvtneps2bf16: the same round-to-nearest-even and quiet NaN, in one instruction, but it flushes
 * f32 subnormal inputs to zero.  Only used where fc_bf16_no_subnormals() proved none can occur. */
#define FC_HAVE_BF16_CVT 1
static inline fc_vec_f32 fc_rbf16_cvt_v(fc_vec_f32 x) {
    /* word i of the result goes to the high half of lane i, low halves zeroed: one vpermw
     * (measured 20% faster per rounded MAC than vpmovzxwd + vpslld) */
    const __m512i to_high = _mm512_set_epi16(15, 0, 14, 0, 13, 0, 12, 0, 11, 0, 10, 0, 9, 0, 8, 0,
                                             7, 0, 6, 0, 5, 0, 4, 0, 3, 0, 2, 0, 1, 0, 0, 0);
    __m256i h = (__m256i)_mm512_cvtneps_pbh((__m512)x);
    return (fc_vec_f32)_mm512_maskz_permutexvar_epi16(0xAAAAAAAAu, to_high, _mm512_castsi256_si512(h));
}
/* Two vectors at once: vcvtne2ps2bf16 packs 32 results, two vpermw spread them back
 * (23% faster per rounded MAC than rounding the vectors one by one). */
static inline void fc_rbf16_cvt_v2(fc_vec_f32* x0, fc_vec_f32* x1) {
    const __m512i lo_to_high = _mm512_set_epi16(15, 0, 14, 0, 13, 0, 12, 0, 11, 0, 10, 0, 9, 0, 8, 0,
                                                7, 0, 6, 0, 5, 0, 4, 0, 3, 0, 2, 0, 1, 0, 0, 0);
    const __m512i hi_to_high = _mm512_set_epi16(31, 0, 30, 0, 29, 0, 28, 0, 27, 0, 26, 0, 25, 0, 24, 0,
                                                23, 0, 22, 0, 21, 0, 20, 0, 19, 0, 18, 0, 17, 0, 16, 0);
    __m512i h = (__m512i)_mm512_cvtne2ps_pbh((__m512)*x1, (__m512)*x0);
    *x0 = (fc_vec_f32)_mm512_maskz_permutexvar_epi16(0xAAAAAAAAu, lo_to_high, h);
    *x1 = (fc_vec_f32)_mm512_maskz_permutexvar_epi16(0xAAAAAAAAu, hi_to_high, h);
}
/* vcvtneps2bf16 unless a lane is an f32 subnormal (which it would flush), then the integer
 * rounding: for row passes whose values need no proof (an exp may be subnormal, rarely). */
static inline fc_vec_f32 fc_rbf16_cvt_checked_v(fc_vec_f32 x) {
    __m512i u = (__m512i)x;
    __mmask16 subnormal = _mm512_mask_testn_epi32_mask(_mm512_test_epi32_mask(u, _mm512_set1_epi32(0x007fffff)),
                                                       u, _mm512_set1_epi32(0x7f800000));
    return subnormal ? fc_rbf16_exact_v(x) : fc_rbf16_cvt_v(x);
}
/* The same for one float: vcvtneps2bf16 on one lane, whose latency (a row's lane total is a chain
 * of 15 dependent roundings) is about two thirds of the integer rounding's through a GPR. */
static inline float fc_round_bf16_cvt_checked(float f) {
    __m128i u = _mm_castps_si128(_mm_set_ss(f));
    if (__builtin_expect(_mm_mask_testn_epi32_mask(_mm_test_epi32_mask(u, _mm_set1_epi32(0x007fffff)), u,
                                                   _mm_set1_epi32(0x7f800000)) & 1, 0))
        return fc_round_bf16(f);
    __m128i h = (__m128i)_mm_cvtneps_pbh(_mm_castsi128_ps(u));
    return _mm_cvtss_f32(_mm_castsi128_ps(_mm_slli_epi32(_mm_cvtepu16_epi32(h), 16)));
}
#else
#define FC_HAVE_BF16_CVT 0
#define fc_rbf16_cvt_v fc_rbf16_exact_v
#define fc_rbf16_cvt_checked_v fc_rbf16_exact_v
#define fc_round_bf16_cvt_checked fc_round_bf16
#endif

/* vcvtps2ph/vcvtph2ps (F16C, avx2 and up): round-to-nearest-even binary16 with subnormals,
 * overflow and NaN exactly as fc_f32_to_f16_bits; without F16C, fc_round_f16's branch-free
 * arithmetic on whole vectors.  Both are checked against NumPy bit for bit. */
#if defined(__AVX512F__) && defined(__F16C__)
static inline fc_vec_f32 fc_rf16_v(fc_vec_f32 x) {
    __m256i h = _mm512_cvtps_ph((__m512)x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    return (fc_vec_f32)_mm512_cvtph_ps(h);
}
#elif defined(__AVX__) && defined(__F16C__)
static inline fc_vec_f32 fc_rf16_v(fc_vec_f32 x) {
    __m128i h = _mm256_cvtps_ph((__m256)x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    return (fc_vec_f32)_mm256_cvtph_ps(h);
}
#else
static inline fc_vec_f32 fc_rf16_v(fc_vec_f32 f) {
    fc_u32v u = fc_bits_f32(f);
    fc_i32v a = (fc_i32v)(u & 0x7fffffffu);
    fc_i32v e = a & 0x7f800000;
    e = (fc_i32v)fc_select_u32(e < 0x38800000, (fc_u32v){0} + 0x38800000u, (fc_u32v)e);
    e = (fc_i32v)fc_select_u32(e > 0x47000000, (fc_u32v){0} + 0x47000000u, (fc_u32v)e);
    fc_vec_f32 c = fc_from_bits_f32((fc_u32v)((e + (13 << 23)) | 0x00400000));
    fc_u32v sign = u & 0x80000000u;
    fc_u32v r = fc_bits_f32((f + c) - c) | sign;
    r = fc_select_u32(a >= 0x477ff000, sign | 0x7f800000u, r);
    r = fc_select_u32(a > 0x7f800000, (u & 0xffffe000u) | 0x00400000u, r);
    return fc_from_bits_f32(r);
}
#endif

/* Pair rounders for the GEMM blocks (each rounds two vectors in place). */
#define FC_PAIR_OF(RV) { *x0 = RV(*x0); *x1 = RV(*x1); }
static inline void fc_rbf16_exact_v2(fc_vec_f32* x0, fc_vec_f32* x1) FC_PAIR_OF(fc_rbf16_exact_v)
static inline void fc_rf16_v2(fc_vec_f32* x0, fc_vec_f32* x1) FC_PAIR_OF(fc_rf16_v)
#if !FC_HAVE_BF16_CVT
#define fc_rbf16_cvt_v2 fc_rbf16_exact_v2
#endif


/* The weights P of a flash tile rounded in place to bf16 (is_f16 0) or f16 (1), to nearest even,
 * rows [0, nrows) x keys [0, ncols): the round_p mode of the mixed and model kernels, before a P V
 * whose products with V (values of T) are then exact in float32. */
static inline void fc_round_rows_half(float* P, ptrdiff_t ldp, ptrdiff_t nrows, ptrdiff_t ncols, int is_f16) {
    for (ptrdiff_t r = 0; r < nrows; r++) {
        float* p = P + r * ldp;
        ptrdiff_t i = 0;
        for (; i + FC_W32 <= ncols; i += FC_W32) {
            fc_vec_f32 x;
            memcpy(&x, p + i, FC_VBYTES);
            x = is_f16 ? fc_rf16_v(x) : fc_rbf16_exact_v(x);
            memcpy(p + i, &x, FC_VBYTES);
        }
        for (; i < ncols; i++) p[i] = is_f16 ? fc_round_f16(p[i]) : fc_round_bf16(p[i]);
    }
}

#endif
