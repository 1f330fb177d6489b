/* The f16 "math in T" tile GEMMs, S = Q K^T (fc_qk_f16) and O += P V (fc_pv_f16), every product
 * and every partial sum rounded to binary16, in one of three forms that give the same bits
 * (fc_uarch.h fc_f16_form picks one when the module loads):
 *
 *   convert          float32 vectors, each step rounded by vcvtps2ph + vcvtph2ps (fc_gemm.h's
 *                    FC_DEFINE_ROUNDED): four conversions per 16 lanes per multiply-add.
 *   native           AVX512-FP16 (Intel Sapphire Rapids and later): 32 binary16 lanes a register,
 *                    vmulph then vaddph, two instructions per 32 lanes per multiply-add.  Each
 *                    rounds its exact result to binary16 once, and that is what the convert form
 *                    computes: rounding the exact result to float32 and then to binary16 equals
 *                    rounding it to binary16 directly, because 24 >= 2 * 11 + 2 (for +, -, x; with
 *                    subnormals and overflow alike).  Never vfmaddph, which would round a product
 *                    and a sum that the contract rounds separately once.
 *   native-emulated  the native loops with the two instructions emulated by the convert form's
 *                    conversions: the tests run it on every AVX-512 CPU, so everything around the
 *                    two instructions (binary16 operand buffers, chunks, edges, reloads) is checked
 *                    on CPUs without AVX512-FP16 as well.
 *
 * The two instructions are inline assembly: gcc contracts _mm512_add_ph(a, _mm512_mul_ph(b, c))
 * into vfmadd231ph under its default -ffp-contract=fast, and it broadcasts a binary16 scalar with
 * vpbroadcastw, a uop on the same ports as the arithmetic, where vmulph can take the scalar from
 * memory by embedded broadcast ({1to32}).  Operands are read as binary16 from small buffers
 * converted once per tile chunk (values of T held in float32 convert exactly); the sums reload from
 * float32 exactly too, so a chunked contraction is the same sequence of roundings.
 * Hand-written; included (through fc_simd.h) by every CPU level's core module. */
#ifndef FUEL_CY_FC_GEMM_F16_H
#define FUEL_CY_FC_GEMM_F16_H
#include "fc_isa.h"
#include "fc_half.h"
#include "fc_uarch.h"    /* FC_HAVE_F16_NATIVE, fc_f16_form */
#include "fc_gemm.h"     /* fc_qk_f16_cvt, fc_pv_f16_cvt, fc_pv_tail_f16 */

#if FC_HAVE_F16_NATIVE
typedef __m512i fc_h32;          /* 32 binary16 values */
#define FC_H16_KC 128            /* contraction steps per chunk of binary16 operands */
#define FC_H16_RN (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define FC_H16_INLINE static inline __attribute__((always_inline))

FC_H16_INLINE fc_h32 fc_h32_pack(__m512 lo, __m512 hi) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtps_ph(lo, FC_H16_RN)),
                              _mm512_cvtps_ph(hi, FC_H16_RN), 1);
}
FC_H16_INLINE __m512 fc_h32_lo(fc_h32 h) { return _mm512_cvtph_ps(_mm512_castsi512_si256(h)); }
FC_H16_INLINE __m512 fc_h32_hi(fc_h32 h) { return _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1)); }
/* 32 consecutive float32 values of T, as binary16 (exact), and back */
FC_H16_INLINE fc_h32 fc_h32_load(const float* x) { return fc_h32_pack(_mm512_loadu_ps(x), _mm512_loadu_ps(x + 16)); }
FC_H16_INLINE void fc_h32_store(float* x, fc_h32 h) {
    _mm512_storeu_ps(x, fc_h32_lo(h));
    _mm512_storeu_ps(x + 16, fc_h32_hi(h));
}

/* v * s for a binary16 scalar s in memory, and a + b, each rounded once to binary16 */
FC_H16_INLINE fc_h32 fc_h32_mulb_hw(fc_h32 v, const uint16_t* s) {
    fc_h32 r;
    __asm__("vmulph %2%{1to32%}, %1, %0" : "=v"(r) : "v"(v), "m"(*s));
    return r;
}
FC_H16_INLINE fc_h32 fc_h32_add_hw(fc_h32 a, fc_h32 b) {
    fc_h32 r;
    __asm__("vaddph %2, %1, %0" : "=v"(r) : "v"(a), "v"(b));
    return r;
}
FC_H16_INLINE fc_h32 fc_h32_mulb_emu(fc_h32 v, const uint16_t* s) {
    __m512 b = _mm512_set1_ps(fc_f16_bits_to_f32(*s));
    return fc_h32_pack(_mm512_mul_ps(fc_h32_lo(v), b), _mm512_mul_ps(fc_h32_hi(v), b));
}
FC_H16_INLINE fc_h32 fc_h32_add_emu(fc_h32 a, fc_h32 b) {
    return fc_h32_pack(_mm512_add_ps(fc_h32_lo(a), fc_h32_lo(b)), _mm512_add_ps(fc_h32_hi(a), fc_h32_hi(b)));
}

/* NRB rows x 32 columns of S at (i, j0) over the chunk d in [k0, k0 + kc) of the contraction
 * (kb: that chunk of Kt's 32 columns as binary16, [kc][32]); sequential over d per element. */
#define FC_QK_H32_BLOCK(MULB, ADD, NRB)                                                          \
    {                                                                                            \
        fc_h32 a[NRB];                                                                           \
        for (int r = 0; r < NRB; r++) {                                                          \
            fc_narrow_half(Q + (i + r) * D + k0, qb + r * FC_H16_KC, kc, 1);                     \
            a[r] = k0 ? fc_h32_load(S + (i + r) * lds + j0) : _mm512_setzero_si512();            \
        }                                                                                        \
        for (ptrdiff_t d = 0; d < kc; d++) {                                                     \
            fc_h32 kv = _mm512_load_si512((const void*)(kb + d * 32));                           \
            for (int r = 0; r < NRB; r++) a[r] = ADD(a[r], MULB(kv, qb + r * FC_H16_KC + d));    \
        }                                                                                        \
        for (int r = 0; r < NRB; r++) fc_h32_store(S + (i + r) * lds + j0, a[r]);                 \
    }

/* NRB rows x 32 columns of O at (i, d0) over the keys j in [j0, j0 + jc) (vb: those keys' 32
 * values from d0 as binary16, [jc][32]); sequential over j per element. */
#define FC_PV_H32_BLOCK(MULB, ADD, NRB)                                                          \
    {                                                                                            \
        fc_h32 a[NRB];                                                                           \
        for (int r = 0; r < NRB; r++) {                                                          \
            fc_narrow_half(P + (i + r) * ldp + j0, pb + r * FC_H16_KC, jc, 1);                   \
            a[r] = fc_h32_load(O + (i + r) * ldo + d0);                                          \
        }                                                                                        \
        for (ptrdiff_t j = 0; j < jc; j++) {                                                     \
            fc_h32 vv = _mm512_load_si512((const void*)(vb + j * 32));                           \
            for (int r = 0; r < NRB; r++) a[r] = ADD(a[r], MULB(vv, pb + r * FC_H16_KC + j));    \
        }                                                                                        \
        for (int r = 0; r < NRB; r++) fc_h32_store(O + (i + r) * ldo + d0, a[r]);                 \
    }

/* The same loops and edges as FC_DEFINE_ROUNDED: S's 32-column blocks up to ncols (within FC_BC),
 * O's 32-column blocks up to D and the scalar tail past them, rows by FC_NRB, 4, 2. */
#define FC_DEFINE_GEMM_H32(FORM, MULB, ADD)                                                      \
static void fc_qk_f16_##FORM(const float* Q, ptrdiff_t nrows4, ptrdiff_t D, const float* Kt,      \
                             float* S, ptrdiff_t lds, ptrdiff_t ncols) {                         \
    uint16_t kb[FC_H16_KC * 32] __attribute__((aligned(64)));                                    \
    uint16_t qb[FC_NRB * FC_H16_KC];                                                             \
    for (ptrdiff_t j0 = 0; j0 < ncols; j0 += 32)                                                 \
        for (ptrdiff_t k0 = 0; k0 < D; k0 += FC_H16_KC) {                                        \
            ptrdiff_t kc = D - k0 < FC_H16_KC ? D - k0 : FC_H16_KC;                              \
            for (ptrdiff_t d = 0; d < kc; d++)                                                   \
                _mm512_store_si512((void*)(kb + d * 32), fc_h32_load(Kt + (k0 + d) * FC_BC + j0)); \
            ptrdiff_t i = 0;                                                                     \
            for (; i + FC_NRB <= nrows4; i += FC_NRB) FC_QK_H32_BLOCK(MULB, ADD, FC_NRB)          \
            for (; i + 4 <= nrows4; i += 4) FC_QK_H32_BLOCK(MULB, ADD, 4)                         \
            for (; i < nrows4; i += 2) FC_QK_H32_BLOCK(MULB, ADD, 2)                              \
        }                                                                                        \
}                                                                                                \
static void fc_pv_f16_##FORM(const float* P, ptrdiff_t ldp, ptrdiff_t nrows4, ptrdiff_t ncols,    \
                             float* const* vrows, ptrdiff_t D, float* O, ptrdiff_t ldo) {        \
    uint16_t vb[FC_H16_KC * 32] __attribute__((aligned(64)));                                    \
    uint16_t pb[FC_NRB * FC_H16_KC];                                                             \
    ptrdiff_t d0 = 0;                                                                            \
    for (; d0 + 32 <= D; d0 += 32)                                                               \
        for (ptrdiff_t j0 = 0; j0 < ncols; j0 += FC_H16_KC) {                                    \
            ptrdiff_t jc = ncols - j0 < FC_H16_KC ? ncols - j0 : FC_H16_KC;                      \
            for (ptrdiff_t j = 0; j < jc; j++)                                                   \
                _mm512_store_si512((void*)(vb + j * 32), fc_h32_load(vrows[j0 + j] + d0));       \
            ptrdiff_t i = 0;                                                                     \
            for (; i + FC_NRB <= nrows4; i += FC_NRB) FC_PV_H32_BLOCK(MULB, ADD, FC_NRB)          \
            for (; i + 4 <= nrows4; i += 4) FC_PV_H32_BLOCK(MULB, ADD, 4)                         \
            for (; i < nrows4; i += 2) FC_PV_H32_BLOCK(MULB, ADD, 2)                              \
        }                                                                                        \
    fc_pv_tail_f16(P, ldp, nrows4, ncols, vrows, d0, D, O, ldo);                                 \
}
FC_DEFINE_GEMM_H32(hw, fc_h32_mulb_hw, fc_h32_add_hw)
FC_DEFINE_GEMM_H32(emu, fc_h32_mulb_emu, fc_h32_add_emu)
#endif

static inline void fc_qk_f16(const float* Q, ptrdiff_t nrows4, ptrdiff_t D, const float* Kt,
                             float* S, ptrdiff_t lds, ptrdiff_t ncols) {
#if FC_HAVE_F16_NATIVE
    if (D > 0 && fc_f16_form == FC_F16_FORM_NATIVE) {
        fc_qk_f16_hw(Q, nrows4, D, Kt, S, lds, ncols);
        return;
    }
    if (D > 0 && fc_f16_form == FC_F16_FORM_NATIVE_EMULATED) {
        fc_qk_f16_emu(Q, nrows4, D, Kt, S, lds, ncols);
        return;
    }
#endif
    fc_qk_f16_cvt(Q, nrows4, D, Kt, S, lds, ncols);
}
static inline void fc_pv_f16(const float* P, ptrdiff_t ldp, ptrdiff_t nrows4, ptrdiff_t ncols,
                             float* const* vrows, ptrdiff_t D, float* O, ptrdiff_t ldo) {
#if FC_HAVE_F16_NATIVE
    if (fc_f16_form == FC_F16_FORM_NATIVE) {
        fc_pv_f16_hw(P, ldp, nrows4, ncols, vrows, D, O, ldo);
        return;
    }
    if (fc_f16_form == FC_F16_FORM_NATIVE_EMULATED) {
        fc_pv_f16_emu(P, ldp, nrows4, ncols, vrows, D, O, ldo);
        return;
    }
#endif
    fc_pv_f16_cvt(P, ldp, nrows4, ncols, vrows, D, O, ldo);
}
#endif
