/* The softmax's row passes on this level's vectors: row max and 16-lane dot products
 * (fc_row_max_*, fc_dot16_*, where the Cython loops stay scalar), and exp(scale * s - m) over a row
 * with its sum (fc_exp_scaled_sum_f32, fc_exp_shift_sum16_f32, fc_exp_scaled_sum16_f64), built on
 * vectorized exps (fc_exp16 with AVX-512, fc_expf_v, fc_exp_f64_v) that match the scalar ones of
 * fc_math.h.  Hand-written; included (through fc_simd.h) by every CPU level's core module. */
#ifndef FUEL_CY_FC_EXP_H
#define FUEL_CY_FC_EXP_H
#include "fc_math.h"
#include "fc_isa.h"
#include "fc_half.h"     /* the vector roundings of the "math in T" softmax */
#include "fc_uarch.h"    /* fc_bf16_form */
#include "fc_dtypes.h"   /* generated from fuel_cy/dtypes.py: FC_FOR_EACH_WORK_TYPE */
#include "fc_pack.h"     /* fc_transpose_block (fc_sum16_rows) */

/* ---- Row reductions over 16 lane partials (lane j % 16, in order of j), on this level's vectors.
 * They compute what blocks.pxi's 16-lane loops define; gcc vectorizes those loops into one zmm
 * register at AVX-512 (where they stay in use) but left them scalar at AVX2 and SSE, where a
 * 128-key row max cost 16 scalar maxes per 16 keys.  Max is exact and the sums keep the lanes'
 * order, so the bits are those of the Cython loops at the same level. */
#define FC_ROWRED_IN_C (FC_VBYTES < 64)
/* The lanes' max (fc_isa.h fc_max_vf32, fc_max_vf64) is a > b ? a : b: with a new value first, a
 * NaN leaves the lane as it was */
#define FC_DEFINE_ROWRED(T, SUF, W)                                                              \
static inline T fc_row_max_##SUF(const T* s, ptrdiff_t n) {                                      \
    enum { NV = 16 / W };                                                                        \
    fc_vec_##SUF lane[NV];                                                                       \
    for (int v = 0; v < NV; v++) lane[v] = (fc_vec_##SUF){0} - (T)INFINITY;                      \
    ptrdiff_t j = 0;                                                                             \
    for (; j + 16 <= n; j += 16)                                                                 \
        for (int v = 0; v < NV; v++) lane[v] = fc_max_v##SUF(fc_load_##SUF(s + j + v * W), lane[v]); \
    T l[16];                                                                                     \
    memcpy(l, lane, sizeof l);                                                                   \
    for (ptrdiff_t k = 0; j + k < n; k++) l[k] = s[j + k] > l[k] ? s[j + k] : l[k];             \
    T m = l[0];                                                                                  \
    for (int k = 1; k < 16; k++) m = l[k] > m ? l[k] : m;                                        \
    if (m == -(T)INFINITY)                                                                       \
        for (ptrdiff_t k = 0; k < n; k++)                                                        \
            if (s[k] != s[k]) return s[k];                                                       \
    return m;                                                                                    \
}                                                                                                \
static inline T fc_dot16_##SUF(const T* a, const T* b, ptrdiff_t n) {                            \
    enum { NV = 16 / W };                                                                        \
    fc_vec_##SUF lane[NV];                                                                       \
    for (int v = 0; v < NV; v++) lane[v] = (fc_vec_##SUF){0};                                    \
    ptrdiff_t j = 0;                                                                             \
    for (; j + 16 <= n; j += 16)                                                                 \
        for (int v = 0; v < NV; v++) lane[v] += fc_load_##SUF(a + j + v * W) * fc_load_##SUF(b + j + v * W); \
    T l[16];                                                                                     \
    memcpy(l, lane, sizeof l);                                                                   \
    for (ptrdiff_t k = 0; j + k < n; k++) l[k] = fc_madd_##SUF(a[j + k], b[j + k], l[k]);        \
    T total = l[0];                                                                              \
    for (int k = 1; k < 16; k++) total += l[k];                                                  \
    return total;                                                                                \
}
#if FC_ROWRED_IN_C
FC_FOR_EACH_WORK_TYPE(FC_DEFINE_ROWRED)
#else  /* not called: the Cython loops serve this level */
#define FC_DEFINE_ROWRED_UNUSED(T, SUF, W)                                                       \
static inline T fc_row_max_##SUF(const T* s, ptrdiff_t n) { (void)s; (void)n; return 0; }       \
static inline T fc_dot16_##SUF(const T* a, const T* b, ptrdiff_t n) { (void)a; (void)b; (void)n; return 0; }
FC_FOR_EACH_WORK_TYPE(FC_DEFINE_ROWRED_UNUSED)
#endif

/* ---- f32 softmax: exp(scale * s - m) over a row, with 16 lane partials of its sum. -------------
 * The element-wise part of flash is ~30% of its time at D = 64.  The partials are always 16 lanes
 * (lane j % 16, each summed in order of j), as many vectors as this level needs, so the order of
 * the sums is the same at every level.
 * With AVX-512 the exp uses its own range-reduction and scaling instructions (vrndscaleps,
 * vscalefps: 2^n with overflow to inf and gradual underflow handled in hardware), so it needs no
 * clamps, integer shifts or selects beyond one min/max: 13 vector ops against ~25.  Same Cephes
 * polynomial as fc_expf; <= 2 ulp (tested).  Other levels use fc_expf_v (below). */
#if defined(__AVX512F__)
#define FC_HAVE_EXP16 1
/* sparse: for rows with masked (-inf) scores, the lanes at or below -110 (NaN excepted) skip the
 * final scaling and give +0, which it gives them too (y < 2 times 2^-158 and below rounds to 0):
 * on Intel cores each lane whose scaling underflows takes a microcode assist, and a masked score
 * is such a lane (a 1024-key row with 691 masked keys ran at a third of its speed, AMX Xeon).
 * The same bits either way; the plain rows keep the one instruction fewer. */
static inline __attribute__((always_inline)) __m512 fc_exp16_any(__m512 x, const int sparse) {
    /* min/max return their second operand when either is NaN: NaN passes through */
    x = _mm512_max_ps(_mm512_set1_ps(-160.0f), x);   /* -inf and below: exp = 0 exactly */
    x = _mm512_min_ps(_mm512_set1_ps(100.0f), x);    /* +inf and above: scalef gives inf */
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500E-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507E-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073E-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894E-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459E-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201E-1f));
    __m512 y = _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(p, r), r, r), _mm512_set1_ps(1.0f));
    if (sparse) return _mm512_maskz_scalef_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(-110.0f), _CMP_NLE_UQ), y, n);
    return _mm512_scalef_ps(y, n);
}
static inline __m512 fc_exp16(__m512 x) { return fc_exp16_any(x, 0); }
/* blocks.pxi row_max on zmm registers, reduced in them: the Cython loop's 16 lanes went through
 * memory to a scalar reduction (a store-forwarding stall per row).  Max is exact and a NaN score
 * never enters a lane (vmaxps keeps its second operand), so the order cannot matter; as there, a
 * NaN is looked for only when every other score is -inf. */
static inline float fc_row_max16_f32(const float* s, ptrdiff_t n) {
    __m512 acc = _mm512_set1_ps(-INFINITY);
    ptrdiff_t j = 0;
    for (; j + 16 <= n; j += 16) acc = _mm512_max_ps(_mm512_loadu_ps(s + j), acc);
    if (j < n) {
        __mmask16 k = (__mmask16)((1u << (n - j)) - 1u);
        acc = _mm512_max_ps(_mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), k, s + j), acc);
    }
    float m = _mm512_reduce_max_ps(acc);
    if (m == -INFINITY)
        for (ptrdiff_t i = 0; i < n; i++)
            if (s[i] != s[i]) return s[i];
    return m;
}
static inline double fc_row_max16_f64(const double* s, ptrdiff_t n) {
    __m512d a0 = _mm512_set1_pd(-INFINITY), a1 = a0;
    ptrdiff_t j = 0;
    for (; j + 16 <= n; j += 16) {
        a0 = _mm512_max_pd(_mm512_loadu_pd(s + j), a0);
        a1 = _mm512_max_pd(_mm512_loadu_pd(s + j + 8), a1);
    }
    for (; j < n; j += 8) {
        __mmask8 k = (__mmask8)(n - j >= 8 ? 0xffu : (1u << (n - j)) - 1u);
        a0 = _mm512_max_pd(_mm512_mask_loadu_pd(_mm512_set1_pd(-INFINITY), k, s + j), a0);
    }
    double m = _mm512_reduce_max_pd(_mm512_max_pd(a0, a1));
    if (m == -INFINITY)
        for (ptrdiff_t i = 0; i < n; i++)
            if (s[i] != s[i]) return s[i];
    return m;
}
/* scale * x - m: one fused multiply-subtract where `fused`, else the product rounded first
 * (FC_SHIFT in fc_math.h says when which) */
static inline __m512 fc_shift16(int fused, __m512 vs, __m512 x, __m512 vm) {
    if (fused) return _mm512_fmsub_ps(vs, x, vm);
    x = _mm512_mul_ps(vs, x);
    FC_ROUNDED(x);
    return _mm512_sub_ps(x, vm);
}
/* In place s[j] = exp(scale * s[j] - m) (FC_SHIFT); lane l of the result is the partial sum of
 * lane l. */
/* round_p's weights: e rounded to bf16 (rp 1; exact integer rounding, subnormals kept) or f16
 * (rp 2), as stored for P V; the row sum takes e unrounded */
static inline __m512 fc_round_p16(__m512 e, int rp) {
    if (rp == 1) return (__m512)fc_rbf16_exact_v((fc_vec_f32)e);
    return _mm512_cvtph_ps(_mm512_cvtps_ph(e, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
/* One vector of the exp pass's weights: stored in place in s (rounded to T for round_p: rp), or
 * (p16, AVX512-BF16 levels) as bf16 into p16, s left as it was (fc_exp_lanes_bf16p). */
static inline __attribute__((always_inline)) void fc_exp_store16(float* s, uint16_t* p16, __m512 e, int rp,
                                                                 __mmask16 k) {
#if defined(__AVX512BF16__)
    if (p16) {
        __m256i h = (__m256i)_mm512_cvtneps_pbh(e);
        if (k == (__mmask16)0xffff) _mm256_storeu_si256((__m256i*)p16, h);
        else _mm256_mask_storeu_epi16(p16, k, h);
        return;
    }
#endif
    (void)p16;
    if (k == (__mmask16)0xffff) _mm512_storeu_ps(s, rp ? fc_round_p16(e, rp) : e);
    else _mm512_mask_storeu_ps(s, k, rp ? fc_round_p16(e, rp) : e);
}
static inline __attribute__((always_inline)) __m512 fc_exp_acc16_t(float* s, ptrdiff_t n, float scale, float m,
                                                                    int rp, const int sparse, uint16_t* p16) {
    const __m512 vs = _mm512_set1_ps(scale), vm = _mm512_set1_ps(m);
    const int fused = fabsf(m) < FC_FUSED_SHIFT_MAX_F32;
    __m512 acc = _mm512_setzero_ps();
    ptrdiff_t j = 0;
#if defined(__AVX512BF16__)
    /* bf16 weights 32 at a time: one two-source conversion and one store per 32 (the loop is
     * bound by its vector operations); the same roundings, the sum in the same order */
    if (p16)
        for (; j + 32 <= n; j += 32) {
            __m512 e0 = fc_exp16_any(fc_shift16(fused, vs, _mm512_loadu_ps(s + j), vm), sparse);
            __m512 e1 = fc_exp16_any(fc_shift16(fused, vs, _mm512_loadu_ps(s + j + 16), vm), sparse);
            _mm512_storeu_si512((void*)(p16 + j), (__m512i)_mm512_cvtne2ps_pbh(e1, e0));
            acc = _mm512_add_ps(acc, e0);
            acc = _mm512_add_ps(acc, e1);
        }
#endif
    for (; j + 16 <= n; j += 16) {
        __m512 e = fc_exp16_any(fc_shift16(fused, vs, _mm512_loadu_ps(s + j), vm), sparse);
        fc_exp_store16(s + j, p16 ? p16 + j : NULL, e, rp, (__mmask16)0xffff);
        acc = _mm512_add_ps(acc, e);
    }
    if (j < n) {
        __mmask16 k = (__mmask16)((1u << (n - j)) - 1u);
        __m512 e = fc_exp16_any(fc_shift16(fused, vs, _mm512_maskz_loadu_ps(k, s + j), vm), sparse);
        fc_exp_store16(s + j, p16 ? p16 + j : NULL, e, rp, k);
        acc = _mm512_mask_add_ps(acc, k, acc, e);
    }
    return acc;
}
/* sparse: the row may hold masked (-inf) scores (fc_exp16_any) */
static inline __m512 fc_exp_acc16_rp(float* s, ptrdiff_t n, float scale, float m, int rp, int sparse) {
    return sparse ? fc_exp_acc16_t(s, n, scale, m, rp, 1, NULL) : fc_exp_acc16_t(s, n, scale, m, rp, 0, NULL);
}
static inline __m512 fc_exp_acc16(float* s, ptrdiff_t n, float scale, float m) {
    return fc_exp_acc16_rp(s, n, scale, m, 0, 0);
}
static inline void fc_exp_lanes_f32(float* s, ptrdiff_t n, float scale, float m, float lanes[16]) {
    _mm512_storeu_ps(lanes, fc_exp_acc16(s, n, scale, m));
}
#else
#define FC_HAVE_EXP16 0
static inline float fc_row_max16_f32(const float* s, ptrdiff_t n) { (void)s; (void)n; return 0; }  /* not called */
static inline double fc_row_max16_f64(const double* s, ptrdiff_t n) { (void)s; (void)n; return 0; }
/* exp on whole vectors for the levels without AVX-512, lean because it is most of the softmax's
 * time there: the input is clamped to [-87.5, 89] (NaN passes: vmaxps/vminps return their second
 * operand), n = round(x log2 e) comes from one magic-number addition whose bits also give 2^(n-1),
 * the remainder r = x - n ln2 uses the same two-part ln2 as fc_expf, and e^r is fc_expf's Cephes
 * polynomial evaluated by Horner's rule (7 fused steps).  So no blends: x above ln(FLT_MAX)
 * overflows to inf by itself, and below -86.98 (n = -126) the scale is 0, so results under
 * ~2e-38 flush to 0.  18 vector operations against fc_expf's 27, within 2 ulp (tested). */
static inline fc_vec_f32 fc_expf_v(fc_vec_f32 x) {
    const fc_vec_f32 zero = {0};
    x = fc_max_vf32(zero - 87.5f, x);   /* (fc_isa.h: NaN passes) */
    x = fc_min_vf32(zero + 89.0f, x);
    fc_vec_f32 t = x * 1.44269504088896341f + 12582912.0f;   /* 1.5 * 2^23 + n: n in the low bits */
    fc_vec_f32 fn = t - 12582912.0f;
    fc_vec_f32 r = x - fn * 0.693359375f;
    r = r - fn * -2.12194440e-4f;
    fc_vec_f32 p = zero + FC_EXPF_CEPHES_P0;
    FC_EXPF_CEPHES_P(p, r);
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    /* 2^(n-1) from t's bits (n >= -126 by the clamp; n = -126 gives +0), times 2 after the product,
     * so that n = 128 stays representable */
    fc_u32v scale = (fc_bits_f32(t) + (126u - 0x4B400000u)) << 23;
    fc_vec_f32 y = p * fc_from_bits_f32(scale);
    return y + y;
}
static inline void fc_exp_lanes_f32(float* s, ptrdiff_t n, float scale, float m, float lanes[16]) {
    enum { NV = 16 / FC_W32 };   /* vectors per 16 lanes */
    fc_vec_f32 acc[NV], x;
    for (int v = 0; v < NV; v++) acc[v] = (fc_vec_f32){0};
    const int fused = fabsf(m) < FC_FUSED_SHIFT_MAX_F32;
    ptrdiff_t j = 0;
    for (; j + 16 <= n; j += 16) {
        for (int v = 0; v < NV; v++) {
            FC_SHIFT(x, fused, scale, fc_load_f32(s + j + v * FC_W32), m);
            fc_vec_f32 e = fc_expf_v(x);
            fc_store_f32(s + j + v * FC_W32, e);
            acc[v] += e;
        }
    }
    memcpy(lanes, acc, 64);
    for (int l = 0; j + l < n; l++) {
        float xs;
        FC_SHIFT(xs, fused, scale, s[j + l], m);
        float e = fc_expf(xs);
        s[j + l] = e;
        lanes[l] += e;
    }
}
#endif
/* ---- f64 softmax exp for the levels without AVX-512 (gcc vectorizes blocks.pxi's 16-lane f64
 * loops only into zmm registers).  fc_exp_f64's operations on whole vectors, so the same bits:
 * the clamps as vminpd/vmaxpd (NaN passes and is restored at the end), n from the magic-number
 * sum's bits instead of a double-to-int64 conversion that AVX2 lacks, the special cases as blends. */
#if FC_ROWRED_IN_C
typedef int64_t fc_i64v __attribute__((vector_size(FC_VBYTES)));
typedef uint64_t fc_u64v __attribute__((vector_size(FC_VBYTES)));
static inline fc_u64v fc_bits_f64(fc_vec_f64 x) { fc_u64v u; memcpy(&u, &x, FC_VBYTES); return u; }
static inline fc_vec_f64 fc_from_bits_f64(fc_u64v u) { fc_vec_f64 x; memcpy(&x, &u, FC_VBYTES); return x; }
static inline fc_vec_f64 fc_select_f64(fc_i64v mask, fc_vec_f64 a, fc_vec_f64 b) {
#if FC_VBYTES == 32 && defined(__AVX__)
    return (fc_vec_f64)_mm256_blendv_pd((__m256d)b, (__m256d)a, (__m256d)mask);
#elif FC_VBYTES == 16 && defined(__SSE4_1__)
    return (fc_vec_f64)_mm_blendv_pd((__m128d)b, (__m128d)a, (__m128d)mask);
#else
    fc_u64v m = (fc_u64v)mask;
    return fc_from_bits_f64((fc_bits_f64(a) & m) | (fc_bits_f64(b) & ~m));
#endif
}
static inline fc_vec_f64 fc_exp_f64_v(fc_vec_f64 x) {
    const fc_vec_f64 zero = {0};
    fc_vec_f64 xc = fc_select_f64(x > 709.7, zero + 709.7, x);
    xc = fc_select_f64(xc < -708.0, zero - 700.0, xc);   /* (fc_exp_f64: lanes zeroed below) */
    xc = fc_select_f64(x == x, xc, zero);
    fc_vec_f64 t = xc * 1.4426950408889634 + 6755399441055744.0;   /* 1.5 * 2^52 + n */
    fc_vec_f64 fn = t - 6755399441055744.0;
    fc_vec_f64 r = xc - fn * 6.93147180369123816490e-01;
    r = r - fn * 1.90821492927058770002e-10;
    fc_vec_f64 p = zero + 1.0 / 6227020800.0;
    FC_EXP_F64_HORNER(p, r);
    fc_u64v bits = (fc_bits_f64(t) - 0x4338000000000000ull + 1022u) << 52;   /* 2^(n-1) */
    fc_vec_f64 y = (p * fc_from_bits_f64(bits)) * 2.0;
    y = fc_select_f64(x < -708.0, zero, y);
    y = fc_select_f64(x > 709.782712893384, zero + (double)INFINITY, y);
    return fc_select_f64(x == x, y, x);
}
/* In place s[j] = exp(scale * s[j] - m); their sum over 16 lane partials added in lane order
 * (blocks.pxi's exp_scaled_sum). */
static inline double fc_exp_scaled_sum16_f64(double* s, ptrdiff_t n, double scale, double m) {
    enum { NV = 16 / FC_W64 };
    fc_vec_f64 acc[NV], x;
    for (int v = 0; v < NV; v++) acc[v] = (fc_vec_f64){0};
    const int fused = fabs(m) < FC_FUSED_SHIFT_MAX_F64;
    ptrdiff_t j = 0;
    for (; j + 16 <= n; j += 16)
        for (int v = 0; v < NV; v++) {
            FC_SHIFT(x, fused, scale, fc_load_f64(s + j + v * FC_W64), m);
            fc_vec_f64 e = fc_exp_f64_v(x);
            fc_store_f64(s + j + v * FC_W64, e);
            acc[v] += e;
        }
    double l[16];
    memcpy(l, acc, sizeof l);
    for (int k = 0; j + k < n; k++) {
        double xs;
        FC_SHIFT(xs, fused, scale, s[j + k], m);
        double e = fc_exp_f64(xs);
        s[j + k] = e;
        l[k] += e;
    }
    double total = l[0];
    for (int k = 1; k < 16; k++) total += l[k];
    return total;
}
#else  /* not called: the Cython loops serve this level */
static inline double fc_exp_scaled_sum16_f64(double* s, ptrdiff_t n, double scale, double m) {
    (void)s; (void)n; (void)scale; (void)m; return 0;
}
#endif

#if FC_HAVE_EXP16
/* the 16 partials added pairwise, the tree in registers: l[i] + l[i + h] for h = 8, 4, 2, 1
 * (through memory, 64 rows per tile paid a store-forwarding stall each: 2% of a flash call at
 * D = 128) */
static inline float fc_sum16_tree(__m512 acc) {
    __m256 a8 = _mm256_add_ps(_mm512_castps512_ps256(acc), _mm512_extractf32x8_ps(acc, 1));
    __m128 a4 = _mm_add_ps(_mm256_castps256_ps128(a8), _mm256_extractf128_ps(a8, 1));
    __m128 a2 = _mm_add_ps(a4, _mm_movehl_ps(a4, a4));
    return _mm_cvtss_f32(_mm_add_ss(a2, _mm_movehdup_ps(a2)));
}
#endif
/* 16 lane partials added as fc_sum16_tree adds them (l[i] + l[i + h] for h = 8, 4, 2, 1), on
 * 4-lane vectors: written as the scalar loop, gcc kept the partials in memory and every step
 * waited on the last one's store (a fifth of a float32 flash task's own samples at AVX2, perf on
 * Zen 5). */
static inline float fc_tree16(const float* l) {
#ifdef FC_HAVE_SHUFFLE
    fc_f32x4 a0, a1, a2, a3;
    memcpy(&a0, l, 16); memcpy(&a1, l + 4, 16); memcpy(&a2, l + 8, 16); memcpy(&a3, l + 12, 16);
    return fc_hsum_f32x4((a0 + a2) + (a1 + a3));
#else
    float t[16];
    memcpy(t, l, sizeof t);
    for (int h = 8; h >= 1; h /= 2)
        for (int i = 0; i < h; i++) t[i] = t[i] + t[i + h];
    return t[0];
#endif
}
/* flash: the 16 partials added pairwise */
static inline float fc_exp_scaled_sum_f32(float* s, ptrdiff_t n, float scale, float m) {
#if FC_HAVE_EXP16
    return fc_sum16_tree(fc_exp_acc16(s, n, scale, m));
#else
    float l[16];
    fc_exp_lanes_f32(s, n, scale, m, l);
    return fc_tree16(l);
#endif
}
/* flash's exp pass over a row (scale * s - m, FC_SHIFT): its 16 lane partials stored in lanes (the
 * row's sum is fc_sum16_rows's, after the tile's rows), round_p's weights stored rounded (rp 1:
 * bf16, 2: f16; 0: as they are) while the partials take them unrounded: the rounding rides the
 * exp's own pass (AVX-512), or (other levels) a pass of its own after it. */
static inline void fc_exp_lanes_rp_f32(float* s, ptrdiff_t n, float scale, float m, int rp, int sparse, float* lanes) {
#if FC_HAVE_EXP16
    _mm512_storeu_ps(lanes, fc_exp_acc16_rp(s, n, scale, m, rp, sparse));
#else
    (void)sparse;   /* (fc_expf_v's scale is +0 there: no underflowing product) */
    fc_exp_lanes_f32(s, n, scale, m, lanes);
    if (rp) fc_round_rows_half(s, 0, 1, n, rp == 2);
#endif
}
/* fc_exp_lanes_rp_f32 with rp 1 for P V on the AMX tiles (fc_amx.h fc_pv_bf16_paired): the
 * weights stored as bf16 in p (row i's 2k and 2k + 1 make pair k, the tiles' layout) instead of as
 * float32 in s, which is left as it was; the same partials.  vcvtneps2bf16 rounds to nearest even as
 * the float32 store's rounding does, and where it flushes a subnormal weight to zero the tiles would
 * read that weight as zero anyway: the same products. */
static inline void fc_exp_lanes_bf16p(const float* s, ptrdiff_t n, float scale, float m, uint16_t* p, int sparse,
                                      float* lanes) {
#if FC_HAVE_EXP16 && defined(__AVX512BF16__)
    float* sw = (float*)s;   /* (not written: the weights go to p) */
    _mm512_storeu_ps(lanes, sparse ? fc_exp_acc16_t(sw, n, scale, m, 1, 1, p) : fc_exp_acc16_t(sw, n, scale, m, 1, 0, p));
#else
    (void)s; (void)n; (void)scale; (void)m; (void)p; (void)sparse; (void)lanes;   /* not called: fc_pv_paired_whole is 0 here */
#endif
}
/* n rows' sums from their 16 lane partials (lanes[r * 16 + l]), each in fc_sum16_tree's order
 * (l[i] + l[i + h] for h = 8, 4, 2, 1), so the bits of the per-row trees.  With AVX-512, 16 rows at
 * a time: the partials transposed, then the same additions lane by lane.  One row's tree is a
 * chain of seven dependent operations (~25 cycles) that the next row's exp pass hid only in part
 * (~17% of the bf16 exp pass's samples, perf, Xeon family 6 model 167); across rows they run side
 * by side. */
static inline void fc_sum16_rows(const float* lanes, ptrdiff_t n, float* totals) {
#if FC_HAVE_EXP16
    for (ptrdiff_t r0 = 0; r0 < n; r0 += 16) {
        ptrdiff_t w = n - r0 < 16 ? n - r0 : 16;
        __m512 t[16];
        for (int i = 0; i < 16; i++) t[i] = i < w ? _mm512_loadu_ps(lanes + (r0 + i) * 16) : _mm512_setzero_ps();
        fc_transpose_block(t);
        for (int h = 8; h >= 1; h /= 2)
            for (int i = 0; i < h; i++) t[i] = _mm512_add_ps(t[i], t[i + h]);
        _mm512_mask_storeu_ps(totals + r0, (__mmask16)((1u << w) - 1u), t[0]);
    }
#else
    for (ptrdiff_t r = 0; r < n; r++) totals[r] = fc_tree16(lanes + r * 16);
#endif
}
/* naive, paged, backward: exp(s - m) (scale 1 is exact), partials added in lane order; sparse:
 * the row may hold masked (-inf) scores (fc_exp16_any: the same bits without the microcode
 * assists a masked lane's underflowing scaling takes on Intel cores) */
static inline float fc_exp_shift_sum16_f32(float* s, ptrdiff_t n, float m, int sparse) {
    float l[16];
    fc_exp_lanes_rp_f32(s, n, 1.0f, m, 0, sparse, l);
    float total = l[0];
    for (int i = 1; i < 16; i++) total += l[i];
    return total;
}


/* ---- "math in T" softmax: exp(scale * s - m) rounded at every step, 16 lane partials. ----------
 * blocks.pxi exp_scaled_sum's loop on whole vectors: e = R(exp(R(R(scale * s) - m))), lane
 * l = R(lane l + e), then the lanes added in order, each sum rounded.  That loop ran scalar (the
 * scalar roundings' NaN branch keeps gcc from vectorizing it): 10% of a bf16 flash call on Zen 4.
 * The exp is fc_expf's statements on whole vectors; its inputs here are values of T (after a
 * rounding), 2^16 of them, on which the tests compare it with fc_expf bit for bit at every level. */
static inline fc_vec_f32 fc_expf_tv(fc_vec_f32 x) {
    const fc_vec_f32 zero = {0};
    fc_i32v isnum = (fc_i32v)(x == x);
    fc_vec_f32 xc = fc_select_f32((fc_i32v)(x > zero + 88.7228f), zero + 88.7228f, x);
    xc = fc_select_f32((fc_i32v)(xc < zero - 86.5f), zero - 86.5f, xc);
    xc = fc_select_f32(isnum, xc, zero);
    fc_vec_f32 fn = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    fc_vec_f32 r = xc - fn * 0.693359375f;
    r = r - fn * -2.12194440e-4f;
    fc_vec_f32 p = zero + FC_EXPF_CEPHES_P0;
    FC_EXPF_CEPHES_P(p, r);
    p = p * r * r + r + 1.0f;
    fc_i32v n = __builtin_convertvector(fn, fc_i32v);
    fc_vec_f32 scale = fc_from_bits_f32((fc_u32v)((n + 126) << 23));
    fc_vec_f32 y = (p * scale) * 2.0f;
    y = fc_select_f32((fc_i32v)(x < zero - 86.5f), zero, y);
    y = fc_select_f32((fc_i32v)(x > zero + 88.7228f), zero + INFINITY, y);
    return fc_select_f32(isnum, y, x);
}
/* flash's rescaling factors of a tile's rows, on whole vectors: alpha[r] = 1 where the running max
 * stayed put (m_new[r] == m_old[r]), 0 where the row had none yet (m_old[r] = -inf below m_new[r]),
 * else fc_expf(m_old[r] - m_new[r]).  The scalar exp per moved row sat on a chain of ~20 dependent
 * operations between a row's exp pass and the next (~4% of a bf16 flash call, perf); here all
 * rows take it at once.  fc_expf_tv gives fc_expf's bits on every float (the tests compare them
 * across the float range at every level), so the factors are the scalar ones. */
static inline void fc_rescale_factors_f32(const float* m_old, const float* m_new, ptrdiff_t n, float* alpha) {
    const fc_vec_f32 zero = {0};
    for (ptrdiff_t i = 0; i < n; i += FC_W32) {
        float mo[FC_W32] = {0}, mn[FC_W32] = {0};
        ptrdiff_t w = n - i < FC_W32 ? n - i : FC_W32;
        memcpy(mo, m_old + i, (size_t)w * 4);
        memcpy(mn, m_new + i, (size_t)w * 4);
        fc_vec_f32 a = fc_load_f32(mo), b = fc_load_f32(mn);
        fc_vec_f32 e = fc_expf_tv(a - b);
        e = fc_select_f32((fc_i32v)((a == zero - INFINITY) & (b > a)), zero, e);
        e = fc_select_f32((fc_i32v)(b == a), zero + 1.0f, e);
        fc_store_f32(mo, e);
        memcpy(alpha + i, mo, (size_t)w * 4);
    }
}
/* ... and blocks.pxi dot16 (lane l = R(lane l + R(a * b)), lanes then added in order), the
 * backward's dS row (dP[j] = R(P[j] * R(dP[j] - delta)), no softcap), softmax_row's
 * normalization (s[j] = R(s[j] / total)) and scale_row (s[j] = R(s[j] * a), flash's output
 * rescaling): scalar loops that took ~40% of a bf16 backward and 4% of a bf16 flash (perf,
 * Zen 4), as many roundings per score as the GEMMs' per contraction step.  The same steps, each
 * rounded exactly. */
#define FC_DEFINE_ROUNDED_ROW_PASSES(SUF, RV, RS)                                                \
static inline float fc_lane_total_##SUF(const float l[16]) {  /* lanes in order, rounded */      \
    float total = l[0];                                                                          \
    for (int k = 1; k < 16; k++) total = RS(total + l[k]);                                       \
    return total;                                                                                \
}                                                                                                \
static inline void fc_exp_scaled_lanes16_##SUF(float* s, ptrdiff_t n, float scale, float m, float l[16]) { \
    enum { NV = 16 / FC_W32 };                                                                   \
    fc_vec_f32 acc[NV];                                                                          \
    for (int v = 0; v < NV; v++) acc[v] = (fc_vec_f32){0};                                       \
    ptrdiff_t j = 0;                                                                             \
    for (; j + 16 <= n; j += 16)                                                                 \
        for (int v = 0; v < NV; v++) {                                                           \
            fc_vec_f32 t = RV(RV(scale * fc_load_f32(s + j + v * FC_W32)) - m);                  \
            fc_vec_f32 e = RV(fc_expf_tv(t));                                                    \
            fc_store_f32(s + j + v * FC_W32, e);                                                 \
            acc[v] = RV(acc[v] + e);                                                             \
        }                                                                                        \
    memcpy(l, acc, 16 * sizeof(float));                                                          \
    for (int k = 0; j + k < n; k++) {                                                            \
        float e = RS(fc_expf(RS(RS(scale * s[j + k]) - m)));                                     \
        s[j + k] = e;                                                                            \
        l[k] = RS(l[k] + e);                                                                     \
    }                                                                                            \
}                                                                                                \
static inline float fc_exp_scaled_sum16_##SUF(float* s, ptrdiff_t n, float scale, float m) {     \
    float l[16];                                                                                 \
    fc_exp_scaled_lanes16_##SUF(s, n, scale, m, l);                                              \
    return fc_lane_total_##SUF(l);                                                               \
}                                                                                                \
/* fc_lane_total of nrows rows of 16 lanes ([row][16]) at once: the rows in the vector lanes, so  \
 * the 15 dependent roundings of each total run once per FC_W32 rows (a row's chain was ~4% of a \
 * bf16 flash call). */                                                                          \
static inline void fc_lane_totals_##SUF(const float* lanes, ptrdiff_t nrows, float* totals) {    \
    for (ptrdiff_t r0 = 0; r0 < nrows; r0 += FC_W32) {                                           \
        ptrdiff_t nv = nrows - r0 < FC_W32 ? nrows - r0 : FC_W32;                                \
        float t[16][FC_W32] = {{0}};                                                             \
        for (ptrdiff_t i = 0; i < nv; i++)                                                       \
            for (int k = 0; k < 16; k++) t[k][i] = lanes[(r0 + i) * 16 + k];                     \
        fc_vec_f32 total = fc_load_f32(t[0]);                                                    \
        for (int k = 1; k < 16; k++) total = RV(total + fc_load_f32(t[k]));                      \
        fc_store_f32(t[0], total);                                                               \
        memcpy(totals + r0, t[0], (size_t)nv * sizeof(float));                                   \
    }                                                                                            \
}                                                                                                \
static inline float fc_dot16_##SUF(const float* a, const float* b, ptrdiff_t n) {                \
    enum { NV = 16 / FC_W32 };                                                                   \
    fc_vec_f32 acc[NV];                                                                          \
    for (int v = 0; v < NV; v++) acc[v] = (fc_vec_f32){0};                                       \
    ptrdiff_t j = 0;                                                                             \
    for (; j + 16 <= n; j += 16)                                                                 \
        for (int v = 0; v < NV; v++)                                                             \
            acc[v] = RV(acc[v] + RV(fc_load_f32(a + j + v * FC_W32) * fc_load_f32(b + j + v * FC_W32))); \
    float l[16];                                                                                 \
    memcpy(l, acc, sizeof l);                                                                    \
    for (int k = 0; j + k < n; k++) l[k] = RS(l[k] + RS(a[j + k] * b[j + k]));                   \
    return fc_lane_total_##SUF(l);                                                               \
}                                                                                                \
static inline void fc_ds_row_##SUF(const float* p, float* dp, ptrdiff_t n, float delta) {        \
    ptrdiff_t j = 0;                                                                             \
    for (; j + FC_W32 <= n; j += FC_W32)                                                         \
        fc_store_f32(dp + j, RV(fc_load_f32(p + j) * RV(fc_load_f32(dp + j) - delta)));          \
    for (; j < n; j++) dp[j] = RS(p[j] * RS(dp[j] - delta));                                     \
}                                                                                                \
static inline void fc_div_row_##SUF(float* s, ptrdiff_t n, float total) {                        \
    ptrdiff_t j = 0;                                                                             \
    for (; j + FC_W32 <= n; j += FC_W32) fc_store_f32(s + j, RV(fc_load_f32(s + j) / total));    \
    for (; j < n; j++) s[j] = RS(s[j] / total);                                                  \
}                                                                                                \
static inline void fc_scale_row_##SUF(float* s, ptrdiff_t n, float a) {                          \
    ptrdiff_t j = 0;                                                                             \
    for (; j + FC_W32 <= n; j += FC_W32) fc_store_f32(s + j, RV(fc_load_f32(s + j) * a));        \
    for (; j < n; j++) s[j] = RS(s[j] * a);                                                      \
}
/* bf16: an exp can be an f32 subnormal, which vcvtneps2bf16 would flush, so either the exact
 * integer rounding or the instruction with a per-vector subnormal check (fc_bf16_form picks) */
FC_DEFINE_ROUNDED_ROW_PASSES(bf16_exact, fc_rbf16_exact_v, fc_round_bf16)
FC_DEFINE_ROUNDED_ROW_PASSES(bf16_cvt, fc_rbf16_cvt_checked_v, fc_round_bf16_cvt_checked)
FC_DEFINE_ROUNDED_ROW_PASSES(f16, fc_rf16_v, fc_round_f16)
#define FC_BF16_FORM_CALL(F, ...) (fc_bf16_form == FC_BF16_FORM_VDPBF16PS ? F##_bf16_cvt(__VA_ARGS__) : F##_bf16_exact(__VA_ARGS__))
static inline float fc_exp_scaled_sum16_bf16(float* s, ptrdiff_t n, float scale, float m) {
    return FC_BF16_FORM_CALL(fc_exp_scaled_sum16, s, n, scale, m);
}
static inline void fc_exp_scaled_lanes16_bf16(float* s, ptrdiff_t n, float scale, float m, float l[16]) {
    FC_BF16_FORM_CALL(fc_exp_scaled_lanes16, s, n, scale, m, l);
}
static inline void fc_lane_totals_bf16(const float* lanes, ptrdiff_t nrows, float* totals) {
    FC_BF16_FORM_CALL(fc_lane_totals, lanes, nrows, totals);
}
static inline float fc_dot16_bf16(const float* a, const float* b, ptrdiff_t n) {
    return FC_BF16_FORM_CALL(fc_dot16, a, b, n);
}
static inline void fc_ds_row_bf16(const float* p, float* dp, ptrdiff_t n, float delta) {
    FC_BF16_FORM_CALL(fc_ds_row, p, dp, n, delta);
}
static inline void fc_div_row_bf16(float* s, ptrdiff_t n, float total) {
    FC_BF16_FORM_CALL(fc_div_row, s, n, total);
}
static inline void fc_scale_row_bf16(float* s, ptrdiff_t n, float a) {
    FC_BF16_FORM_CALL(fc_scale_row, s, n, a);
}

#endif
