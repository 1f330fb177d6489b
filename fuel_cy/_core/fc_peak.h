/* The arithmetic peak of this CPU level, measured: what the bench judges a compute-bound kernel
 * against (fuel_cy/harness/bench.py).  A target a kernel misses while it already runs near the
 * peak, or one that would need more than the peak, is a machine limit, not a tuning gap; the bench
 * prints that beside the miss.
 *
 * Each loop is register-only: FC_PEAK_CHAINS independent multiply-add chains on the level's widest
 * vectors, so neither memory nor the operation's latency limits it (the chains cover 4-cycle
 * latency times two FMA ports; AVX2 and SSE have 16 registers and keep 12).  Values stay near 1:
 * no subnormals, no overflow.  Each stores a sum of its accumulators in a volatile, so the loop is
 * not dead even where its caller drops the result (a build without OpenMP, whose prange is a
 * plain loop with no reduction to keep). */
#ifndef FUEL_CY_FC_PEAK_H
#define FUEL_CY_FC_PEAK_H
#include "fc_isa.h"
#include "fc_half.h"     /* fc_rf16_v: the f16 "math in T" GEMMs' rounding */

#if FC_VBYTES == 64
#define FC_PEAK_CHAINS 16
#else
#define FC_PEAK_CHAINS 12
#endif

/* Flops per iteration of each loop: two per multiply-add per lane per chain. */
#define FC_PEAK_FLOPS_F32 (2.0 * FC_W32 * FC_PEAK_CHAINS)
#define FC_PEAK_FLOPS_F64 (2.0 * FC_W64 * FC_PEAK_CHAINS)

static volatile double fc_peak_sink;

#define FC_PEAK_LOOP(SUF, T)                                                                     \
    static double fc_peak_loop_##SUF(long iters) {                                               \
        fc_vec_##SUF acc[FC_PEAK_CHAINS];                                                        \
        fc_vec_##SUF a, b;                                                                       \
        for (int l = 0; l < (int)(FC_VBYTES / sizeof(T)); l++) {                                 \
            a[l] = (T)0.999;                                                                     \
            b[l] = (T)5e-4;                                                                      \
        }                                                                                        \
        /* (not at the fixed point 0.5: a compiler folds a chain that starts there) */          \
        for (int c = 0; c < FC_PEAK_CHAINS; c++) acc[c] = a * (T)(1 + c);                        \
        for (long i = 0; i < iters; i++) {                                                       \
            /* (contracted to one FMA where the level has them; a multiply and an add on SSE) */ \
            for (int c = 0; c < FC_PEAK_CHAINS; c++) acc[c] = acc[c] * a + b;                    \
        }                                                                                        \
        double s = 0;                                                                            \
        for (int c = 0; c < FC_PEAK_CHAINS; c++) s += (double)fc_hsum_##SUF(acc[c]);             \
        fc_peak_sink = s;                                                                        \
        return s;                                                                                \
    }
FC_PEAK_LOOP(f32, float)
FC_PEAK_LOOP(f64, double)

/* The f16 "math in T" multiply-add as fc_gemm.h's convert form runs it (fc_rf16_v: vcvtps2ph +
 * vcvtph2ps where the level has F16C): the product rounded to binary16, then the sum, two flops
 * per lane.  The founding contract rounds every product and partial sum of its f16 kernels, so
 * without AVX512-FP16 this bounds them, not the FMA peak.  Values stay at binary16 normals. */
#define FC_PEAK_FLOPS_F16R (2.0 * FC_W32 * FC_PEAK_CHAINS)
static double fc_peak_loop_f16r(long iters) {
    fc_vec_f32 acc[FC_PEAK_CHAINS];
    fc_vec_f32 a, b;
    for (int l = 0; l < FC_W32; l++) {
        a[l] = 0.5f;
        b[l] = 0.25f;
    }
    for (int c = 0; c < FC_PEAK_CHAINS; c++) acc[c] = a * (float)(1 + c);
    for (long i = 0; i < iters; i++) {
        for (int c = 0; c < FC_PEAK_CHAINS; c++) acc[c] = fc_rf16_v(fc_rf16_v(acc[c] * a) + b);
    }
    double s = 0;
    for (int c = 0; c < FC_PEAK_CHAINS; c++) s += (double)fc_hsum_f32(acc[c]);
    fc_peak_sink = s;
    return s;
}

/* One read of n floats, summed in four vector chains: the machine's read rate, against which
 * `fuel-cy bench` sets a memory-bound kernel's reads beside the copy rate (a copy also writes,
 * and numpy's runs on one thread).  Returns the sum, so the reads are not dead. */
static double fc_read_pass(const float* x, ptrdiff_t n) {
    fc_vec_f32 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
    ptrdiff_t i = 0;
    for (; i + 4 * FC_W32 <= n; i += 4 * FC_W32) {
        a0 += fc_load_f32(x + i);
        a1 += fc_load_f32(x + i + FC_W32);
        a2 += fc_load_f32(x + i + 2 * FC_W32);
        a3 += fc_load_f32(x + i + 3 * FC_W32);
    }
    double s = (double)fc_hsum_f32(a0 + a1 + a2 + a3);
    for (; i < n; i++) s += x[i];
    fc_peak_sink = s;
    return s;
}

/* vdpbf16ps: two bf16 products per float lane, four flops. */
#if defined(__AVX512F__) && defined(__AVX512BF16__)
#define FC_PEAK_HAVE_BF16 1
#define FC_PEAK_FLOPS_BF16 (4.0 * 16 * FC_PEAK_CHAINS)
static double fc_peak_loop_bf16(long iters) {
    __m512 acc[FC_PEAK_CHAINS];
    /* bf16 0.5 and 1e-4-ish in every half: products stay tiny against the sums */
    __m512bh a = (__m512bh)_mm512_set1_epi32(0x3F003F00);
    __m512bh b = (__m512bh)_mm512_set1_epi32(0x38D138D1);
    for (int c = 0; c < FC_PEAK_CHAINS; c++) acc[c] = _mm512_set1_ps((float)(1 + c));
    for (long i = 0; i < iters; i++) {
        for (int c = 0; c < FC_PEAK_CHAINS; c++) acc[c] = _mm512_dpbf16_ps(acc[c], a, b);
    }
    double s = 0;
    for (int c = 0; c < FC_PEAK_CHAINS; c++) s += (double)_mm512_reduce_add_ps(acc[c]);
    fc_peak_sink = s;
    return s;
}
#else
#define FC_PEAK_HAVE_BF16 0
#define FC_PEAK_FLOPS_BF16 0.0
static double fc_peak_loop_bf16(long iters) { (void)iters; return 0; }
#endif

#endif
