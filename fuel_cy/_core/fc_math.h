/* Scalar helpers for the attention core: round-to-nearest-even to bf16/f16 ("math in T" for
 * half types) and a vectorizable expf.  Hand-written; included by the generated extension. */
#ifndef FUEL_CY_FC_MATH_H
#define FUEL_CY_FC_MATH_H
#include <stdint.h>
#include <string.h>
#include <math.h>

/* The softmax's shift x = scale * s - m, two ways.  gcc contracts the expression into one fused
 * multiply-subtract at the FMA levels (-ffp-contract=fast): one rounding, where the contract states
 * two (the score scale * s rounded, then minus the row's max m).  The fused form is off from the
 * two-step one by up to |m| u (u the unit roundoff), no more than rounding the score moves it, as
 * long as |m| is moderate: below FC_FUSED_SHIFT_MAX_<T> that is under 2^-12 and the fused form is
 * kept (the bits of ordinary inputs, one instruction).  Past it the score is rounded first
 * (FC_ROUNDED: an empty asm that "changes" the product in its register, so it cannot be fused):
 * for scores of ~1e10 the fused form is off by hundreds, and exp of it gave inf and NaN rows. */
#define FC_FUSED_SHIFT_MAX_F32 4096.0f                /* 2^12 = 2^-12 / 2^-24 */
#define FC_FUSED_SHIFT_MAX_F64 2199023255552.0        /* 2^41 = 2^-12 / 2^-53 */
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#if defined(__AVX512F__)
#define FC_ROUNDED(x) __asm__("" : "+v"(x))
#else
#define FC_ROUNDED(x) __asm__("" : "+x"(x))
#endif
#elif defined(__GNUC__)
#define FC_ROUNDED(x) __asm__("" : "+m"(x))
#else
#define FC_ROUNDED(x) ((void)0)
#endif
/* out = scale * x - m: fused where `fused` (|m| below the type's limit), else in two roundings */
#define FC_SHIFT(out, fused, scale, x, m)                                                        \
    do {                                                                                         \
        if (fused) {                                                                             \
            (out) = (scale) * (x) - (m);                                                         \
        } else {                                                                                 \
            __typeof__(out) fc_p_ = (scale) * (x);                                               \
            FC_ROUNDED(fc_p_);                                                                   \
            (out) = fc_p_ - (m);                                                                 \
        }                                                                                        \
    } while (0)

static inline uint32_t fc_f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float fc_u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* float -> bf16 bits, round to nearest even; NaN stays a quiet NaN (as ml_dtypes does). */
static inline uint16_t fc_f32_to_bf16_bits(float f) {
    uint32_t u = fc_f2u(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static inline float fc_bf16_bits_to_f32(uint16_t h) { return fc_u2f(((uint32_t)h) << 16); }
static inline float fc_round_bf16(float f) { return fc_bf16_bits_to_f32(fc_f32_to_bf16_bits(f)); }

/* float -> IEEE binary16 bits, round to nearest even, with subnormals, overflow and NaN. */
static inline uint16_t fc_f32_to_f16_bits(float f) {
    uint32_t x = fc_f2u(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t a = x & 0x7fffffffu;
    if (a >= 0x7f800000u) {
        if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
        return (uint16_t)(sign | 0x7c00u);
    }
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);   /* >= 65520 rounds to inf */
    if (a < 0x38800000u) {                                      /* below 2^-14: subnormal */
        if (a < 0x33000000u) return (uint16_t)sign;             /* <= 2^-25 rounds to 0 */
        uint32_t e = a >> 23;
        uint32_t m = (a & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - e;
        uint32_t h = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1u);
        uint32_t half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (h & 1u))) h++;
        return (uint16_t)(sign | h);
    }
    uint32_t h = (a - 0x38000000u) >> 13;
    uint32_t rem = a & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
    return (uint16_t)(sign | h);
}
static inline float fc_f16_bits_to_f32(uint16_t h) {
    uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1fu) return fc_u2f(sign | 0x7f800000u | (m << 13));
    if (e == 0) {
        if (m == 0) return fc_u2f(sign);
        float v = (float)m * 5.9604644775390625e-08f; /* m * 2^-24, exact */
        return sign ? -v : v;
    }
    return fc_u2f(sign | ((e + 112u) << 23) | (m << 13));
}
/* The same rounding in branch-free f32 arithmetic, so that gcc vectorizes the element-wise loops
 * that call it (a scalar vcvtps2ph per element kept them scalar): adding c = 1.5 * 2^(e+13),
 * whose spacing is the binary16 spacing at x's exponent e (2^-24 below 2^-14), rounds x to
 * nearest-even in one f32 addition; subtracting c is exact.  Overflow, NaN and the sign of
 * zero are set apart.  Bitwise equal to fc_f32_to_f16_bits (tests/test_half_precision.py). */
static inline float fc_round_f16(float f) {
    uint32_t u = fc_f2u(f);
    uint32_t a = u & 0x7fffffffu;
    uint32_t e = a & 0x7f800000u;
    e = e < 0x38800000u ? 0x38800000u : e;    /* f16 subnormals share the 2^-24 spacing */
    e = e > 0x47000000u ? 0x47000000u : e;    /* |x| >= 2^16 becomes inf below */
    float c = fc_u2f((e + (13u << 23)) | 0x00400000u);
    uint32_t r = fc_f2u((f + c) - c) | (u & 0x80000000u);
    r = a >= 0x477ff000u ? ((u & 0x80000000u) | 0x7f800000u) : r;   /* >= 65520: inf */
    r = a > 0x7f800000u ? ((u & 0xffffe000u) | 0x00400000u) : r;    /* NaN: quiet, payload cut */
    return fc_u2f(r);
}

/* Horner steps of fc_exp_f64's degree-13 Taylor polynomial after its leading 1/13!, written once
 * for scalars and for vectors (fc_exp.h), so both compute the same operations. */
#define FC_EXP_F64_HORNER(p, r)                                                                  \
    do {                                                                                         \
        p = p * r + 1.0 / 479001600.0; p = p * r + 1.0 / 39916800.0;                              \
        p = p * r + 1.0 / 3628800.0;   p = p * r + 1.0 / 362880.0;                                \
        p = p * r + 1.0 / 40320.0;     p = p * r + 1.0 / 5040.0;                                  \
        p = p * r + 1.0 / 720.0;       p = p * r + 1.0 / 120.0;                                   \
        p = p * r + 1.0 / 24.0;        p = p * r + 1.0 / 6.0;                                     \
        p = p * r + 0.5;               p = p * r + 1.0;                                           \
        p = p * r + 1.0;                                                                          \
    } while (0)
/* The Cephes polynomial of fc_expf after its leading coefficient (e^r = 1 + r + r^2 P(r)). */
#define FC_EXPF_CEPHES_P(p, r)                                                                   \
    do {                                                                                         \
        p = p * r + 1.3981999507E-3f; p = p * r + 8.3334519073E-3f;                               \
        p = p * r + 4.1665795894E-2f; p = p * r + 1.6666665459E-1f;                               \
        p = p * r + 5.0000001201E-1f;                                                             \
    } while (0)
#define FC_EXPF_CEPHES_P0 1.9875691500E-4f

/* Vectorizable expf (Cephes polynomial, ~1-2 ulp).  Results below ~exp(-86.5) flush to 0,
 * above 88.72 give +inf, NaN propagates.  No -ffast-math needed: gcc vectorizes the selects. */
static inline float fc_expf(float x) {
    float xc = (x > 88.7228f) ? 88.7228f : x;
    xc = (xc < -86.5f) ? -86.5f : xc;
    xc = (x == x) ? xc : 0.0f;
    float fn = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = xc - fn * 0.693359375f;
    r = r - fn * -2.12194440e-4f;
    float p = FC_EXPF_CEPHES_P0;
    FC_EXPF_CEPHES_P(p, r);
    p = p * r * r + r + 1.0f;
    int32_t n = (int32_t)fn;
    /* 2^n as 2^(n-1) * 2 so that n = 128 (x close to 88.72) stays representable */
    float scale = fc_u2f((uint32_t)(n + 126) << 23);
    float y = (p * scale) * 2.0f;
    y = (x < -86.5f) ? 0.0f : y;
    y = (x > 88.7228f) ? INFINITY : y;
    return (x == x) ? y : x;
}
/* Vectorizable exp for double: Cody-Waite reduction to |r| <= ln2/2 and a degree-13 Taylor
 * polynomial (truncation < 1e-17); within a few ulp of libm.  Below -708 results flush to 0. */
static inline double fc_exp_f64(double x) {
    double xc = (x > 709.7) ? 709.7 : x;
    /* below -708 the result is 0 (set at the end): -700 keeps p * 2^(n-1) a normal number there,
     * where -708's is subnormal and each such lane (every masked score) takes a microcode assist
     * on Intel cores */
    xc = (xc < -708.0) ? -700.0 : xc;
    xc = (x == x) ? xc : 0.0;
    double fn = (xc * 1.4426950408889634 + 6755399441055744.0) - 6755399441055744.0;
    double r = xc - fn * 6.93147180369123816490e-01;
    r = r - fn * 1.90821492927058770002e-10;
    double p = 1.0 / 6227020800.0;
    FC_EXP_F64_HORNER(p, r);
    int64_t n = (int64_t)fn;
    uint64_t bits = (uint64_t)(n + 1022) << 52;   /* 2^(n-1), times 2 below: n up to 1024 */
    double scale;
    memcpy(&scale, &bits, 8);
    double y = (p * scale) * 2.0;
    y = (x < -708.0) ? 0.0 : y;
    y = (x > 709.782712893384) ? INFINITY : y;
    return (x == x) ? y : x;
}

/* "math in T" for half types: tanh computed in double and rounded once to f32, so a pure-Python
 * emulation (math.tanh) reproduces the same bits; the caller then rounds to T. */
static inline float fc_tanh_via_double(float x) { return (float)tanh((double)x); }
#endif
