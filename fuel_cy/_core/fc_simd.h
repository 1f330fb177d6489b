/* Register-blocked micro-kernels for the un-rounded policies (f32, f64), written with GCC/Clang
 * vector extensions so the compiler cannot reshape them (left alone, gcc vectorized the wrong loop
 * of pv_accum and gathered).  They compute exactly what blocks.pxi's generic loops define:
 * every output element is a sequential sum over the contraction index, so results do not depend
 * on blocking or threads.  Hand-written; included by every CPU level's core module.
 *
 * One source for every CPU level (fuel_cy/cpu_levels.py): the level's compiler flags choose the
 * vector width and the register blocking below; the algorithms (tiling, packing, blocking, the
 * vectorized exp and roundings) are the same at every level. */
#ifndef FUEL_CY_FC_SIMD_H
#define FUEL_CY_FC_SIMD_H
#include <stddef.h>
#include <string.h>
#include "fc_math.h"
#if defined(__SSE2__)
#include <immintrin.h>
#endif

/* Vector width and register blocking of this level.  A register block holds FC_NRB rows x 2
 * vectors of accumulators: AVX-512 has 32 vector registers, so 8 x 2 = 16 accumulators plus the
 * two loaded vectors and a broadcast; AVX2 has 16, where 8 rows spilled every accumulator to the
 * stack (20x slower) and 6 rows (12 accumulators, as BLIS's Haswell kernel) beat 4 by 5%; SSE
 * also needs a register for each product (no FMA, two-operand forms), so it keeps 4 rows.
 * Row counts are multiples of 4; blocks of 4 and 2 rows take what FC_NRB leaves. */
#if defined(__AVX512F__)
#define FC_VBYTES 64
#define FC_NRB 8
#elif defined(__AVX__)
#define FC_VBYTES 32
#define FC_NRB 6
#else
#define FC_VBYTES 16
#define FC_NRB 4
#endif
#define FC_W32 (FC_VBYTES / 4)   /* float lanes per vector */
#define FC_W64 (FC_VBYTES / 8)   /* double lanes per vector */

#define FC_BC 128
/* Rows gathered through a block table sit in different pages, where hardware prefetchers stop:
 * ask for the rows a few keys ahead explicitly. */
#define FC_PREFETCH 8
static inline void fc_prefetch_row(const void* p, size_t bytes) {
    for (size_t off = 0; off < bytes; off += 64) __builtin_prefetch((const char*)p + off, 0, 3);
}

/* One register block of S = Q Kt: NRB rows x 2W columns at (i, j0), sequential over d. */
#define FC_QK_BLOCK(T, SUF, W, NRB)                                                              \
    {                                                                                            \
        const T* q[NRB];                                                                         \
        for (int r = 0; r < NRB; r++) q[r] = Q + (i + r) * D;                                    \
        fc_vec_##SUF a[NRB][2] = {{{0}}};                                                         \
        const T* kp = Kt + j0;                                                                   \
        for (ptrdiff_t d = 0; d < D; d++, kp += FC_BC) {                                         \
            fc_vec_##SUF k0 = fc_load_##SUF(kp), k1 = fc_load_##SUF(kp + W);                     \
            for (int r = 0; r < NRB; r++) { a[r][0] += q[r][d] * k0; a[r][1] += q[r][d] * k1; } \
        }                                                                                        \
        for (int r = 0; r < NRB; r++) {                                                          \
            fc_store_##SUF(S + (i + r) * lds + j0, a[r][0]);                                     \
            fc_store_##SUF(S + (i + r) * lds + j0 + W, a[r][1]);                                 \
        }                                                                                        \
    }

/* One register block of O += P V: NRB rows x 2W columns at (i, d0), sequential over j.  VROW(j)
 * is the address of V's row j, PF(j) what to prefetch at step j (the row forms below). */
#define FC_PV_BLOCK(T, SUF, W, NRB, VROW, PF)                                                    \
    {                                                                                            \
        const T* p[NRB];                                                                         \
        fc_vec_##SUF a[NRB][2];                                                                  \
        for (int r = 0; r < NRB; r++) {                                                          \
            p[r] = P + (i + r) * ldp;                                                            \
            a[r][0] = fc_load_##SUF(O + (i + r) * ldo + d0);                                     \
            a[r][1] = fc_load_##SUF(O + (i + r) * ldo + d0 + W);                                 \
        }                                                                                        \
        for (ptrdiff_t j = 0; j < ncols; j++) {                                                  \
            const T* v = VROW(j) + d0;                                                           \
            PF(j)                                                                                \
            fc_vec_##SUF v0 = fc_load_##SUF(v), v1 = fc_load_##SUF(v + W);                       \
            for (int r = 0; r < NRB; r++) { a[r][0] += p[r][j] * v0; a[r][1] += p[r][j] * v1; } \
        }                                                                                        \
        for (int r = 0; r < NRB; r++) {                                                          \
            fc_store_##SUF(O + (i + r) * ldo + d0, a[r][0]);                                     \
            fc_store_##SUF(O + (i + r) * ldo + d0 + W, a[r][1]);                                 \
        }                                                                                        \
    }

/* V's rows for O += P V: gathered (a pointer per row: the paged cache, whose rows sit in other
 * pages, so they are prefetched FC_PREFETCH rows ahead) or a fixed stride apart (contiguous K/V:
 * no pointer load per key, and the hardware prefetcher follows the stride). */
#define FC_VROW_PTR(j) vrows[j]
#define FC_VROW_STRIDED(j) (V + (j) * ldv)
#define FC_PF_PTR(j)                                                                             \
    if (d0 == 0 && i == 0 && (j) + FC_PREFETCH < ncols)                                          \
        fc_prefetch_row(vrows[(j) + FC_PREFETCH], D * sizeof(*O));
#define FC_PF_NONE(j)

/* O[i, :] += sum_j P[i, j] * V[j, :], sequential over j, rows in groups of 4.  Column blocks are
 * the outer loop so each V slice [ncols][2W] stays in L1 across row groups.  The trailing
 * arguments say how V's rows are found (FC_VROW_PTR: T* const* vrows; FC_VROW_STRIDED: const T*
 * V, ptrdiff_t ldv); the sums and their order are the same either way. */
#define FC_DEFINE_PV(T, SUF, W, NAME, VROW, PF, ...)                                             \
static inline void NAME(const T* P, ptrdiff_t ldp, ptrdiff_t nrows4, ptrdiff_t ncols,          \
                        __VA_ARGS__, ptrdiff_t D, T* O, ptrdiff_t ldo) {                         \
    ptrdiff_t d0 = 0;                                                                            \
    for (; d0 + 2 * W <= D; d0 += 2 * W) {                                                       \
        ptrdiff_t i = 0;                                                                         \
        for (; i + FC_NRB <= nrows4; i += FC_NRB) FC_PV_BLOCK(T, SUF, W, FC_NRB, VROW, PF)        \
        for (; i + 4 <= nrows4; i += 4) FC_PV_BLOCK(T, SUF, W, 4, VROW, PF)                       \
        for (; i < nrows4; i += 2) FC_PV_BLOCK(T, SUF, W, 2, VROW, PF)                            \
    }                                                                                            \
    for (; d0 + W <= D; d0 += W) {                                                               \
        for (ptrdiff_t i = 0; i < nrows4; i += 4) {                                              \
            const T *p0 = P + i * ldp, *p1 = p0 + ldp, *p2 = p1 + ldp, *p3 = p2 + ldp;           \
            T *o0 = O + i * ldo + d0, *o1 = o0 + ldo, *o2 = o1 + ldo, *o3 = o2 + ldo;            \
            fc_vec_##SUF a0 = fc_load_##SUF(o0), a1 = fc_load_##SUF(o1);                         \
            fc_vec_##SUF a2 = fc_load_##SUF(o2), a3 = fc_load_##SUF(o3);                         \
            for (ptrdiff_t j = 0; j < ncols; j++) {                                              \
                fc_vec_##SUF v0 = fc_load_##SUF(VROW(j) + d0);                                   \
                a0 += p0[j] * v0; a1 += p1[j] * v0; a2 += p2[j] * v0; a3 += p3[j] * v0;          \
            }                                                                                    \
            fc_store_##SUF(o0, a0); fc_store_##SUF(o1, a1);                                      \
            fc_store_##SUF(o2, a2); fc_store_##SUF(o3, a3);                                      \
        }                                                                                        \
    }                                                                                            \
    for (; d0 < D; d0++) {                                                                       \
        for (ptrdiff_t i = 0; i < nrows4; i += 4) {                                              \
            const T *p0 = P + i * ldp, *p1 = p0 + ldp, *p2 = p1 + ldp, *p3 = p2 + ldp;           \
            T *o0 = O + i * ldo + d0, *o1 = o0 + ldo, *o2 = o1 + ldo, *o3 = o2 + ldo;            \
            T a0 = *o0, a1 = *o1, a2 = *o2, a3 = *o3;                                            \
            for (ptrdiff_t j = 0; j < ncols; j++) {                                              \
                T v = VROW(j)[d0];                                                               \
                a0 += p0[j] * v; a1 += p1[j] * v; a2 += p2[j] * v; a3 += p3[j] * v;              \
            }                                                                                    \
            *o0 = a0; *o1 = a1; *o2 = a2; *o3 = a3;                                              \
        }                                                                                        \
    }                                                                                            \
}

#define FC_DEFINE_KERNELS(T, SUF, W)                                                             \
typedef T fc_vec_##SUF __attribute__((vector_size(FC_VBYTES)));                                 \
static inline fc_vec_##SUF fc_load_##SUF(const T* p) { fc_vec_##SUF v; memcpy(&v, p, FC_VBYTES); return v; } \
static inline void fc_store_##SUF(T* p, fc_vec_##SUF v) { memcpy(p, &v, FC_VBYTES); }           \
                                                                                                 \
/* S[i, j] = sum_d Q[i, d] * Kt[d, j] for j < FC_BC; Q rows (stride D), nrows4 % 4 == 0.  Each  \
 * Kt slice [D][2W] stays in L1 across the row blocks. */                                        \
static inline void fc_qk_##SUF(const T* Q, ptrdiff_t nrows4, ptrdiff_t D, const T* Kt,         \
                               T* S, ptrdiff_t lds, ptrdiff_t ncols) {                           \
    for (ptrdiff_t j0 = 0; j0 < ncols; j0 += 2 * W) {                                            \
        ptrdiff_t i = 0;                                                                         \
        for (; i + FC_NRB <= nrows4; i += FC_NRB) FC_QK_BLOCK(T, SUF, W, FC_NRB)                  \
        for (; i + 4 <= nrows4; i += 4) FC_QK_BLOCK(T, SUF, W, 4)                                 \
        for (; i < nrows4; i += 2) FC_QK_BLOCK(T, SUF, W, 2)                                      \
    }                                                                                            \
}                                                                                                \
                                                                                                 \
FC_DEFINE_PV(T, SUF, W, fc_pv_##SUF, FC_VROW_PTR, FC_PF_PTR, T* const* vrows)                 \
FC_DEFINE_PV(T, SUF, W, fc_pv_strided_##SUF, FC_VROW_STRIDED, FC_PF_NONE, const T* V, ptrdiff_t ldv) \
                                                                                                 \
/* O += P V for V rows ldv apart (flash, naive, the backward's dQ).  The strided form measured    \
 * 91 -> 112 GFLOP/s (avx2) and 31 -> 37 (default) per PV tile on Zen 4; AVX-512 keeps the      \
 * pointer form, tuned on Zen 4 and measured on Sapphire Rapids, until both are measured.  Same   \
 * sums, same order, so the same bits either way. */                                            \
static inline void fc_pv_contig_##SUF(const T* P, ptrdiff_t ldp, ptrdiff_t nrows4, ptrdiff_t ncols, \
                                      const T* V, ptrdiff_t ldv, T* const* vrows, ptrdiff_t D,  \
                                      T* O, ptrdiff_t ldo) {                                     \
    if (FC_VBYTES == 64) fc_pv_##SUF(P, ldp, nrows4, ncols, vrows, D, O, ldo);                   \
    else fc_pv_strided_##SUF(P, ldp, nrows4, ncols, V, ldv, D, O, ldo);                          \
}


#define FC_DEFINE_ROWDOTS(T, SUF, W)                                                             \
/* S[i, j] = sum_d Q[i, d] * krows[j][d] for j < ncols, reading each key row once for 4 query   \
 * rows (decode: few queries per key, so packing K^T would cost more than the dots).  Each dot  \
 * is W lane partials (lane d % W, in order of d) summed pairwise (fc_hsum). */                  \
static inline void fc_rowdots_##SUF(const T* Q, ptrdiff_t nrows4, ptrdiff_t D, T* const* krows, \
                                    ptrdiff_t ncols, T* S, ptrdiff_t lds) {                     \
    for (ptrdiff_t j = 0; j < ncols; j++) {                                                      \
        const T* k = krows[j];                                                                   \
        if (j + FC_PREFETCH < ncols) fc_prefetch_row(krows[j + FC_PREFETCH], D * sizeof(T));     \
        for (ptrdiff_t i = 0; i < nrows4; i += 4) {                                              \
            const T *q0 = Q + i * D, *q1 = q0 + D, *q2 = q1 + D, *q3 = q2 + D;                  \
            fc_vec_##SUF a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};                                 \
            ptrdiff_t d = 0;                                                                     \
            for (; d + W <= D; d += W) {                                                         \
                fc_vec_##SUF kv = fc_load_##SUF(k + d);                                          \
                a0 += fc_load_##SUF(q0 + d) * kv; a1 += fc_load_##SUF(q1 + d) * kv;              \
                a2 += fc_load_##SUF(q2 + d) * kv; a3 += fc_load_##SUF(q3 + d) * kv;              \
            }                                                                                    \
            for (ptrdiff_t l = 0; d < D; d++, l++) {                                             \
                a0[l] += q0[d] * k[d]; a1[l] += q1[d] * k[d];                                    \
                a2[l] += q2[d] * k[d]; a3[l] += q3[d] * k[d];                                    \
            }                                                                                    \
            S[i * lds + j] = fc_hsum_##SUF(a0); S[(i + 1) * lds + j] = fc_hsum_##SUF(a1);        \
            S[(i + 2) * lds + j] = fc_hsum_##SUF(a2); S[(i + 3) * lds + j] = fc_hsum_##SUF(a3);  \
        }                                                                                        \
    }                                                                                            \
}

FC_DEFINE_KERNELS(float, f32, FC_W32)
FC_DEFINE_KERNELS(double, f64, FC_W64)

/* ---- Row reductions over 16 lane partials (lane j % 16, in order of j), on this level's vectors.
 * They compute what blocks.pxi's 16-lane loops define; gcc vectorizes those loops into one zmm
 * register at AVX-512 (where they stay in use) but left them scalar at AVX2 and SSE, where a
 * 128-key row max cost 16 scalar maxes per 16 keys.  Max is exact and the sums keep the lanes'
 * order, so the bits are those of the Cython loops at the same level. */
#define FC_ROWRED_IN_C (FC_VBYTES < 64)
#if FC_ROWRED_IN_C
#if defined(__AVX__)
static inline fc_vec_f64 fc_max_v64(fc_vec_f64 a, fc_vec_f64 b) { return (fc_vec_f64)_mm256_max_pd((__m256d)a, (__m256d)b); }
#elif defined(__SSE2__)
static inline fc_vec_f64 fc_max_v64(fc_vec_f64 a, fc_vec_f64 b) { return (fc_vec_f64)_mm_max_pd((__m128d)a, (__m128d)b); }
#endif
#if defined(__AVX__)
static inline fc_vec_f32 fc_max_v32(fc_vec_f32 a, fc_vec_f32 b) { return (fc_vec_f32)_mm256_max_ps((__m256)a, (__m256)b); }
#elif defined(__SSE2__)
static inline fc_vec_f32 fc_max_v32(fc_vec_f32 a, fc_vec_f32 b) { return (fc_vec_f32)_mm_max_ps((__m128)a, (__m128)b); }
#else  /* other architectures: a > b ? a : b by masks */
#define FC_MAX_BY_MASK(T, SUF, I)                                                                \
static inline fc_vec_##SUF fc_max_v##SUF(fc_vec_##SUF a, fc_vec_##SUF b) {                       \
    typedef I iv __attribute__((vector_size(FC_VBYTES)));                                       \
    iv m = (iv)(a > b), ai, bi;                                                                  \
    memcpy(&ai, &a, FC_VBYTES);                                                                  \
    memcpy(&bi, &b, FC_VBYTES);                                                                  \
    ai = (ai & m) | (bi & ~m);                                                                   \
    memcpy(&a, &ai, FC_VBYTES);                                                                  \
    return a;                                                                                    \
}
FC_MAX_BY_MASK(float, f32, int32_t)
FC_MAX_BY_MASK(double, f64, int64_t)
#define fc_max_v32 fc_max_vf32
#define fc_max_v64 fc_max_vf64
#endif
#endif
/* x86 max(a, b) is a > b ? a : b: with a new value first, a NaN leaves the lane as it was */
#define FC_DEFINE_ROWRED(T, SUF, W, MAXV)                                                        \
static inline T fc_row_max_##SUF(const T* s, ptrdiff_t n) {                                      \
    enum { NV = 16 / W };                                                                        \
    fc_vec_##SUF lane[NV];                                                                       \
    for (int v = 0; v < NV; v++) lane[v] = (fc_vec_##SUF){0} - (T)INFINITY;                      \
    ptrdiff_t j = 0;                                                                             \
    for (; j + 16 <= n; j += 16)                                                                 \
        for (int v = 0; v < NV; v++) lane[v] = MAXV(fc_load_##SUF(s + j + v * W), lane[v]);    \
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
    for (ptrdiff_t k = 0; j + k < n; k++) l[k] += a[j + k] * b[j + k];                           \
    T total = l[0];                                                                              \
    for (int k = 1; k < 16; k++) total += l[k];                                                  \
    return total;                                                                                \
}
#if FC_ROWRED_IN_C
FC_DEFINE_ROWRED(float, f32, FC_W32, fc_max_v32)
FC_DEFINE_ROWRED(double, f64, FC_W64, fc_max_v64)
#else  /* not called: the Cython loops serve this level */
static inline float fc_row_max_f32(const float* s, ptrdiff_t n) { (void)s; (void)n; return 0; }
static inline double fc_row_max_f64(const double* s, ptrdiff_t n) { (void)s; (void)n; return 0; }
static inline float fc_dot16_f32(const float* a, const float* b, ptrdiff_t n) { (void)a; (void)b; (void)n; return 0; }
static inline double fc_dot16_f64(const double* a, const double* b, ptrdiff_t n) { (void)a; (void)b; (void)n; return 0; }
#endif

/* C[i, c] += sum_k A[i * ai + k * ak] * B[k * ldb + c] for i < nrows4 (a multiple of 4), c < ncols,
 * sequential over k.  With ai = 1 it reads A transposed in place: the backward's dV += P^T dO and
 * dK += dS^T Q take P and dS as stored (query rows) instead of transposing them first (the
 * transposes were a quarter of the backward task's time).  Same sums as fc_pv over a transposed
 * copy, so the same bits. */
/* One register block of C += A^T B: NRB output rows x 2W columns at (i, c0), accumulating over k
 * in order; XROW(k) points at the NRB values of A for step k, XS apart. */
#define FC_ACC_BLOCK(T, SUF, W, NRB, XROW, XS)                                                   \
    {                                                                                            \
        fc_vec_##SUF a[NRB][2];                                                                  \
        for (int r = 0; r < NRB; r++) {                                                          \
            a[r][0] = fc_load_##SUF(C + (i + r) * ldc + c0);                                     \
            a[r][1] = fc_load_##SUF(C + (i + r) * ldc + c0 + W);                                 \
        }                                                                                        \
        for (ptrdiff_t k = 0; k < K; k++) {                                                      \
            fc_vec_##SUF b0 = fc_load_##SUF(B + k * ldb + c0);                                   \
            fc_vec_##SUF b1 = fc_load_##SUF(B + k * ldb + c0 + W);                               \
            const T* x = XROW;                                                                   \
            for (int r = 0; r < NRB; r++) { a[r][0] += x[r * XS] * b0; a[r][1] += x[r * XS] * b1; } \
        }                                                                                        \
        for (int r = 0; r < NRB; r++) {                                                          \
            fc_store_##SUF(C + (i + r) * ldc + c0, a[r][0]);                                     \
            fc_store_##SUF(C + (i + r) * ldc + c0 + W, a[r][1]);                                 \
        }                                                                                        \
    }

#define FC_DEFINE_GEMM_ACC(T, SUF, W)                                                            \
static inline void fc_gemm_acc_##SUF(const T* A, ptrdiff_t ai, ptrdiff_t ak, ptrdiff_t nrows4,   \
                                     ptrdiff_t K, const T* B, ptrdiff_t ldb, ptrdiff_t ncols,    \
                                     T* C, ptrdiff_t ldc) {                                      \
    ptrdiff_t c0 = 0;                                                                            \
    for (; c0 + 2 * W <= ncols; c0 += 2 * W) {                                                   \
        ptrdiff_t i = 0;                                                                         \
        for (; i + FC_NRB <= nrows4; i += FC_NRB) FC_ACC_BLOCK(T, SUF, W, FC_NRB, A + k * ak + i * ai, ai) \
        for (; i + 4 <= nrows4; i += 4) FC_ACC_BLOCK(T, SUF, W, 4, A + k * ak + i * ai, ai)      \
        for (; i < nrows4; i += 2) FC_ACC_BLOCK(T, SUF, W, 2, A + k * ak + i * ai, ai)           \
    }                                                                                            \
    for (; c0 + W <= ncols; c0 += W) {                                                           \
        for (ptrdiff_t i = 0; i < nrows4; i += 4) {                                              \
            fc_vec_##SUF a[4];                                                                   \
            for (int r = 0; r < 4; r++) a[r] = fc_load_##SUF(C + (i + r) * ldc + c0);            \
            for (ptrdiff_t k = 0; k < K; k++) {                                                  \
                fc_vec_##SUF b0 = fc_load_##SUF(B + k * ldb + c0);                               \
                for (int r = 0; r < 4; r++) a[r] += A[k * ak + (i + r) * ai] * b0;               \
            }                                                                                    \
            for (int r = 0; r < 4; r++) fc_store_##SUF(C + (i + r) * ldc + c0, a[r]);            \
        }                                                                                        \
    }                                                                                            \
    for (; c0 < ncols; c0++) {                                                                   \
        for (ptrdiff_t i = 0; i < nrows4; i++) {                                                 \
            T a = C[i * ldc + c0];                                                               \
            for (ptrdiff_t k = 0; k < K; k++) a += A[k * ak + i * ai] * B[k * ldb + c0];         \
            C[i * ldc + c0] = a;                                                                 \
        }                                                                                        \
    }                                                                                            \
}

FC_DEFINE_GEMM_ACC(float, f32, FC_W32)
FC_DEFINE_GEMM_ACC(double, f64, FC_W64)

/* The same C += A^T B for A read transposed (ai = 1) with K <= 64: each block of FC_NRB output
 * rows first copies its A^T block ([K][FC_NRB], at most 2 KB) so that every column pass reads it
 * from L1; read in place, the K rows of A are a power-of-two stride apart and all land in one L1
 * set.  Same sums in the same order as fc_gemm_acc. */
#define FC_DEFINE_GEMM_TN(T, SUF, W)                                                             \
static inline void fc_gemm_tn_##SUF(const T* A, ptrdiff_t ak, ptrdiff_t nrows4, ptrdiff_t K,     \
                                    const T* B, ptrdiff_t ldb, ptrdiff_t ncols, T* C, ptrdiff_t ldc) { \
    if (K > 64 || ncols % (2 * W) != 0) {                                                        \
        fc_gemm_acc_##SUF(A, 1, ak, nrows4, K, B, ldb, ncols, C, ldc);                           \
        return;                                                                                  \
    }                                                                                            \
    T blk[64 * FC_NRB];                                                                          \
    ptrdiff_t i = 0;                                                                             \
    for (; i + FC_NRB <= nrows4; i += FC_NRB) {                                                  \
        for (ptrdiff_t k = 0; k < K; k++) memcpy(blk + k * FC_NRB, A + k * ak + i, FC_NRB * sizeof(T)); \
        for (ptrdiff_t c0 = 0; c0 < ncols; c0 += 2 * W)                                          \
            FC_ACC_BLOCK(T, SUF, W, FC_NRB, blk + k * FC_NRB, 1)                                 \
    }                                                                                            \
    if (i < nrows4)                                                                              \
        fc_gemm_acc_##SUF(A + i, 1, ak, nrows4 - i, K, B, ldb, ncols, C + i * ldc, ldc);         \
}

FC_DEFINE_GEMM_TN(float, f32, FC_W32)
FC_DEFINE_GEMM_TN(double, f64, FC_W64)

/* Horizontal sums in a fixed pairwise order (halves added until one lane is left), for this
 * level's vector width. */
#if defined(__has_builtin)
#if __has_builtin(__builtin_shufflevector)
#define FC_HAVE_SHUFFLE 1
#endif
#endif
#ifdef FC_HAVE_SHUFFLE
typedef float fc_f32x2 __attribute__((vector_size(8)));
typedef float fc_f32x4 __attribute__((vector_size(16)));
typedef double fc_f64x2 __attribute__((vector_size(16)));
static inline float fc_hsum_f32x2(fc_f32x2 a) { return a[0] + a[1]; }
static inline float fc_hsum_f32x4(fc_f32x4 a) {
    return fc_hsum_f32x2(__builtin_shufflevector(a, a, 0, 1) + __builtin_shufflevector(a, a, 2, 3));
}
static inline double fc_hsum_f64x2(fc_f64x2 a) { return a[0] + a[1]; }
#if FC_VBYTES >= 32
typedef float fc_f32x8 __attribute__((vector_size(32)));
typedef double fc_f64x4 __attribute__((vector_size(32)));
static inline float fc_hsum_f32x8(fc_f32x8 a) {
    return fc_hsum_f32x4(__builtin_shufflevector(a, a, 0, 1, 2, 3) + __builtin_shufflevector(a, a, 4, 5, 6, 7));
}
static inline double fc_hsum_f64x4(fc_f64x4 a) {
    return fc_hsum_f64x2(__builtin_shufflevector(a, a, 0, 1) + __builtin_shufflevector(a, a, 2, 3));
}
#endif
#if FC_VBYTES >= 64
static inline float fc_hsum_f32(fc_vec_f32 a) {
    return fc_hsum_f32x8(__builtin_shufflevector(a, a, 0, 1, 2, 3, 4, 5, 6, 7) +
                         __builtin_shufflevector(a, a, 8, 9, 10, 11, 12, 13, 14, 15));
}
static inline double fc_hsum_f64(fc_vec_f64 a) {
    return fc_hsum_f64x4(__builtin_shufflevector(a, a, 0, 1, 2, 3) + __builtin_shufflevector(a, a, 4, 5, 6, 7));
}
#elif FC_VBYTES == 32
static inline float fc_hsum_f32(fc_vec_f32 a) { return fc_hsum_f32x8(a); }
static inline double fc_hsum_f64(fc_vec_f64 a) { return fc_hsum_f64x4(a); }
#else
static inline float fc_hsum_f32(fc_vec_f32 a) { return fc_hsum_f32x4(a); }
static inline double fc_hsum_f64(fc_vec_f64 a) { return fc_hsum_f64x2(a); }
#endif
#else
#define FC_DEFINE_HSUM(T, SUF, W)                                                                \
static inline T fc_hsum_##SUF(fc_vec_##SUF a) {                                                  \
    T t[W];                                                                                      \
    memcpy(t, &a, sizeof t);                                                                     \
    for (int h = W / 2; h >= 1; h /= 2)                                                          \
        for (int l = 0; l < h; l++) t[l] = t[l] + t[l + h];                                      \
    return t[0];                                                                                 \
}
FC_DEFINE_HSUM(float, f32, FC_W32)
FC_DEFINE_HSUM(double, f64, FC_W64)
#endif

FC_DEFINE_ROWDOTS(float, f32, FC_W32)
FC_DEFINE_ROWDOTS(double, f64, FC_W64)

/* Paged decode over several kv heads at once.  In the pool a key's rows for all kv heads sit
 * side by side, so serving every head of a group of keys together reads the pool front to back
 * (one task per head read 512-byte pieces 4 KB apart and waited on memory: 38% of the copy rate
 * against 70% now).  krows[j] points at key j's row of the first head; head h is D further.
 * Query rows are head-major, rph4 rows per head.  Every dot and every output element is computed
 * by fc_rowdots / fc_pv as before (same lanes, same sequential order over keys), so the bits do
 * not depend on the grouping. */
/* Keys are visited in groups; while one group is computed (head by head, from L2) the next
 * group's rows for all heads are prefetched into L2.  Measured at B=16 Hkv=8 D=128: groups of
 * 8 and 16 equal, 32 slower; L1 or L2 as the target makes no difference. */
#define FC_KEYGROUP 16
static inline void fc_prefetch_keys(void* const* rows, ptrdiff_t n, size_t bytes) {
    for (ptrdiff_t j = 0; j < n; j++)
        for (size_t off = 0; off < bytes; off += 64)
            __builtin_prefetch((const char*)rows[j] + off, 0, 2);
}
#define FC_DEFINE_HEADS(T, SUF, W)                                                               \
static inline void fc_rowdots_heads_##SUF(const T* Q, ptrdiff_t nheads, ptrdiff_t rph4, ptrdiff_t D, \
                                          T* const* krows, ptrdiff_t ncols, T* S, ptrdiff_t lds) { \
    T* hrows[FC_KEYGROUP];                                                                       \
    for (ptrdiff_t j0 = 0; j0 < ncols; j0 += FC_KEYGROUP) {                                      \
        ptrdiff_t n = ncols - j0 < FC_KEYGROUP ? ncols - j0 : FC_KEYGROUP;                        \
        ptrdiff_t nn = ncols - j0 - n < FC_KEYGROUP ? ncols - j0 - n : FC_KEYGROUP;               \
        fc_prefetch_keys((void* const*)(krows + j0 + n), nn, nheads * D * sizeof(T));           \
        for (ptrdiff_t h = 0; h < nheads; h++) {                                                 \
            for (ptrdiff_t j = 0; j < n; j++) hrows[j] = krows[j0 + j] + h * D;                  \
            fc_rowdots_##SUF(Q + h * rph4 * D, rph4, D, hrows, n, S + h * rph4 * lds + j0, lds); \
        }                                                                                        \
    }                                                                                            \
}                                                                                                \
static inline void fc_pv_heads_##SUF(const T* P, ptrdiff_t ldp, ptrdiff_t nheads, ptrdiff_t rph4, \
                                     ptrdiff_t ncols, T* const* vrows, ptrdiff_t D, T* O,        \
                                     ptrdiff_t ldo) {                                            \
    T* hrows[FC_KEYGROUP];                                                                       \
    for (ptrdiff_t j0 = 0; j0 < ncols; j0 += FC_KEYGROUP) {                                      \
        ptrdiff_t n = ncols - j0 < FC_KEYGROUP ? ncols - j0 : FC_KEYGROUP;                        \
        ptrdiff_t nn = ncols - j0 - n < FC_KEYGROUP ? ncols - j0 - n : FC_KEYGROUP;               \
        fc_prefetch_keys((void* const*)(vrows + j0 + n), nn, nheads * D * sizeof(T));           \
        for (ptrdiff_t h = 0; h < nheads; h++) {                                                 \
            for (ptrdiff_t j = 0; j < n; j++) hrows[j] = vrows[j0 + j] + h * D;                  \
            fc_pv_##SUF(P + h * rph4 * ldp + j0, ldp, rph4, n, hrows, D, O + h * rph4 * ldo, ldo); \
        }                                                                                        \
    }                                                                                            \
}

FC_DEFINE_HEADS(float, f32, FC_W32)
FC_DEFINE_HEADS(double, f64, FC_W64)

/* ---- Bit-level vector helpers (this level's width). ------------------------------------------- */
typedef int32_t fc_i32v __attribute__((vector_size(FC_VBYTES)));
typedef uint32_t fc_u32v __attribute__((vector_size(FC_VBYTES)));
static inline fc_u32v fc_bits_f32(fc_vec_f32 x) { fc_u32v u; memcpy(&u, &x, FC_VBYTES); return u; }
static inline fc_vec_f32 fc_from_bits_f32(fc_u32v u) { fc_vec_f32 x; memcpy(&x, &u, FC_VBYTES); return x; }
/* mask ? a : b lane by lane, for masks from vector comparisons (all ones or all zeros) */
static inline fc_vec_f32 fc_select_f32(fc_i32v mask, fc_vec_f32 a, fc_vec_f32 b) {
#if FC_VBYTES == 32 && defined(__AVX__)   /* one vblendvps instead of and/andnot/or */
    return (fc_vec_f32)_mm256_blendv_ps((__m256)b, (__m256)a, (__m256)mask);
#elif FC_VBYTES == 16 && defined(__SSE4_1__)
    return (fc_vec_f32)_mm_blendv_ps((__m128)b, (__m128)a, (__m128)mask);
#else
    fc_u32v m = (fc_u32v)mask;
    return fc_from_bits_f32((fc_bits_f32(a) & m) | (fc_bits_f32(b) & ~m));
#endif
}
static inline fc_u32v fc_select_u32(fc_i32v mask, fc_u32v a, fc_u32v b) {
    return fc_bits_f32(fc_select_f32(mask, fc_from_bits_f32(a), fc_from_bits_f32(b)));
}

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
 * measured 2-16% (keys) and 20-24% (values) faster at B=16 Hq=32 Hkv=8 D=128 on Zen 4. *//* A vector of float32 from FC_W32 bf16 (IS_F16 = 0) or f16 (1) values: exact widening. */
static inline fc_vec_f32 fc_load_h16(const uint16_t* p, int is_f16) {
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
static inline void fc_rowdots2_h16(const float* Q, ptrdiff_t nrows4, ptrdiff_t D, const uint16_t* const* krows,
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
                a0[l] += q0[d] * u; a1[l] += q1[d] * u; a2[l] += q2[d] * u; a3[l] += q3[d] * u;
                b0[l] += q0[d] * w; b1[l] += q1[d] * w; b2[l] += q2[d] * w; b3[l] += q3[d] * w;
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
/* Keys per group of the half-pool heads loops, and how many groups ahead their rows are
 * prefetched: at B=16 Hq=32 Hkv=8 D=128 ctx 2048 on Zen 4, groups of 8 prefetched 2 ahead
 * measured 3-4% faster than 1 or 4 ahead, and groups of 16 15% slower. */
#define FC_H16_GROUP 8
#define FC_H16_AHEAD 2
/* The group of keys starting at j0 (at most FC_H16_GROUP of them); prefetches the rows of the
 * group FC_H16_AHEAD groups on, every kv head of a key (len elements) at once. */
static inline ptrdiff_t fc_h16_group(const uint16_t* const* rows, ptrdiff_t j0, ptrdiff_t ncols, ptrdiff_t len) {
    ptrdiff_t pf = j0 + FC_H16_AHEAD * FC_H16_GROUP;
    ptrdiff_t nn = pf >= ncols ? 0 : (ncols - pf < FC_H16_GROUP ? ncols - pf : FC_H16_GROUP);
    fc_prefetch_keys((void* const*)(rows + pf), nn, len * sizeof(uint16_t));
    return ncols - j0 < FC_H16_GROUP ? ncols - j0 : FC_H16_GROUP;
}
static inline void fc_rowdots_heads_h16(const float* Q, ptrdiff_t nheads, ptrdiff_t rph4, ptrdiff_t D,
                                        const uint16_t* const* krows, ptrdiff_t ncols, float* S,
                                        ptrdiff_t lds, int is_f16) {
    const uint16_t* hrows[FC_H16_GROUP];
    const ptrdiff_t len = nheads * D;
    for (ptrdiff_t j0 = 0; j0 < ncols; j0 += FC_H16_GROUP) {
        ptrdiff_t n = fc_h16_group(krows, j0, ncols, len);
        for (ptrdiff_t h = 0; h < nheads; h++) {
            for (ptrdiff_t j = 0; j < n; j++) hrows[j] = krows[j0 + j] + h * D;
            fc_rowdots2_h16(Q + h * rph4 * D, rph4, D, hrows, n, S + h * rph4 * lds + j0, lds, is_f16);
        }
    }
}
/* O[i, :] += sum_j P[i, j] * V[j, :] on bf16/f16 value rows, widened in registers, in blocks of
 * 4 rows: every element is the same multiply-add chain over j as in fc_pv_f32, so the same bits. */
static inline void fc_pv_h16(const float* P, ptrdiff_t ldp, ptrdiff_t nrows4, ptrdiff_t ncols,
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
                a0 += p0[j] * v; a1 += p1[j] * v; a2 += p2[j] * v; a3 += p3[j] * v;
            }
            *o0 = a0; *o1 = a1; *o2 = a2; *o3 = a3;
        }
    }
}
static inline void fc_pv_heads_h16(const float* P, ptrdiff_t ldp, ptrdiff_t nheads, ptrdiff_t rph4,
                                   ptrdiff_t ncols, const uint16_t* const* vrows, ptrdiff_t D, float* O,
                                   ptrdiff_t ldo, int is_f16) {
    const uint16_t* hrows[FC_H16_GROUP];
    const ptrdiff_t len = nheads * D;
    for (ptrdiff_t j0 = 0; j0 < ncols; j0 += FC_H16_GROUP) {
        ptrdiff_t n = fc_h16_group(vrows, j0, ncols, len);
        for (ptrdiff_t h = 0; h < nheads; h++) {
            for (ptrdiff_t j = 0; j < n; j++) hrows[j] = vrows[j0 + j] + h * D;
            fc_pv_h16(P + h * rph4 * ldp + j0, ldp, rph4, n, hrows, D, O + h * rph4 * ldo, ldo, is_f16);
        }
    }
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

/* ---- K^T packing: out[d * FC_BC + j] = rows[j][d] for j < n, zero for n <= j < FC_BC. ----------
 * Done in square blocks of one vector's lanes (16, 8 or 4) transposed in registers; the
 * element-by-element loop read 16 cache lines per 16 stores and was 70% of the half-type paged
 * decode.  Edges are copied one by one. */
#if defined(__AVX512F__)
#define FC_TB 16
typedef __m512 fc_tvec;
#define fc_tload _mm512_loadu_ps
#define fc_tstore _mm512_storeu_ps
/* unpack, shuffle, two 128-bit lane shuffles: 64 shuffles per 256 floats */
static inline void fc_transpose_block(__m512 r[16]) {
    __m512 t[16], u[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int g = 0; g < 4; g++) {  /* u[4g + c]: rows 4g..4g+3, column c of each 128-bit lane */
        u[4 * g + 0] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
        u[4 * g + 1] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0xEE);
        u[4 * g + 2] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
        u[4 * g + 3] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xEE);
    }
    for (int c = 0; c < 4; c++) {
        __m512 a0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88), a1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xDD);
        __m512 b0 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88), b1 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xDD);
        r[c] = _mm512_shuffle_f32x4(a0, b0, 0x88);
        r[c + 8] = _mm512_shuffle_f32x4(a0, b0, 0xDD);
        r[c + 4] = _mm512_shuffle_f32x4(a1, b1, 0x88);
        r[c + 12] = _mm512_shuffle_f32x4(a1, b1, 0xDD);
    }
}
#elif defined(__AVX__)
#define FC_TB 8
typedef __m256 fc_tvec;
#define fc_tload _mm256_loadu_ps
#define fc_tstore _mm256_storeu_ps
/* unpack, shuffle, one 128-bit lane permute: 24 shuffles per 64 floats */
static inline void fc_transpose_block(__m256 r[8]) {
    __m256 t[8], u[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int g = 0; g < 2; g++) {  /* u[4g + c]: rows 4g..4g+3, column c of each 128-bit lane */
        u[4 * g + 0] = _mm256_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
        u[4 * g + 1] = _mm256_shuffle_ps(t[4 * g], t[4 * g + 2], 0xEE);
        u[4 * g + 2] = _mm256_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
        u[4 * g + 3] = _mm256_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xEE);
    }
    for (int c = 0; c < 4; c++) {
        r[c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x20);
        r[c + 4] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x31);
    }
}
#elif defined(__SSE2__)
#define FC_TB 4
typedef __m128 fc_tvec;
#define fc_tload _mm_loadu_ps
#define fc_tstore _mm_storeu_ps
static inline void fc_transpose_block(__m128 r[4]) { _MM_TRANSPOSE4_PS(r[0], r[1], r[2], r[3]); }
#endif
static inline void fc_pack_kt_f32(float* const* rows, ptrdiff_t n, ptrdiff_t D, float* out) {
    ptrdiff_t j0 = 0;
#ifdef FC_TB
    for (; j0 + FC_TB <= n; j0 += FC_TB) {
        ptrdiff_t d0 = 0;
        for (; d0 + FC_TB <= D; d0 += FC_TB) {
            fc_tvec r[FC_TB];
            for (int i = 0; i < FC_TB; i++) r[i] = fc_tload(rows[j0 + i] + d0);
            fc_transpose_block(r);
            for (int k = 0; k < FC_TB; k++) fc_tstore(out + (d0 + k) * FC_BC + j0, r[k]);
        }
        for (; d0 < D; d0++)
            for (int i = 0; i < FC_TB; i++) out[d0 * FC_BC + j0 + i] = rows[j0 + i][d0];
    }
#endif
    for (ptrdiff_t d = 0; d < D; d++) {
        for (ptrdiff_t j = j0; j < n; j++) out[d * FC_BC + j] = rows[j][d];
        for (ptrdiff_t j = n; j < FC_BC; j++) out[d * FC_BC + j] = 0;
    }
}

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
static inline __m512 fc_exp16(__m512 x) {
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
    return _mm512_scalef_ps(y, n);
}
/* In place s[j] = exp(scale * s[j] - m) (one rounding: fused multiply-subtract); lanes[l] gets
 * the partial sum of lane l. */
static inline void fc_exp_lanes_f32(float* s, ptrdiff_t n, float scale, float m, float lanes[16]) {
    const __m512 vs = _mm512_set1_ps(scale), vm = _mm512_set1_ps(m);
    __m512 acc = _mm512_setzero_ps();
    ptrdiff_t j = 0;
    for (; j + 16 <= n; j += 16) {
        __m512 e = fc_exp16(_mm512_fmsub_ps(vs, _mm512_loadu_ps(s + j), vm));
        _mm512_storeu_ps(s + j, e);
        acc = _mm512_add_ps(acc, e);
    }
    if (j < n) {
        __mmask16 k = (__mmask16)((1u << (n - j)) - 1u);
        __m512 e = fc_exp16(_mm512_fmsub_ps(vs, _mm512_maskz_loadu_ps(k, s + j), vm));
        _mm512_mask_storeu_ps(s + j, k, e);
        acc = _mm512_mask_add_ps(acc, k, acc, e);
    }
    _mm512_storeu_ps(lanes, acc);
}
#else
#define FC_HAVE_EXP16 0
/* min/max of this level: like vminps/vmaxps, the second operand when either is NaN */
#if defined(__AVX__)
static inline fc_vec_f32 fc_min_v(fc_vec_f32 a, fc_vec_f32 b) { return (fc_vec_f32)_mm256_min_ps((__m256)a, (__m256)b); }
static inline fc_vec_f32 fc_max_v(fc_vec_f32 a, fc_vec_f32 b) { return (fc_vec_f32)_mm256_max_ps((__m256)a, (__m256)b); }
#elif defined(__SSE4_1__)
static inline fc_vec_f32 fc_min_v(fc_vec_f32 a, fc_vec_f32 b) { return (fc_vec_f32)_mm_min_ps((__m128)a, (__m128)b); }
static inline fc_vec_f32 fc_max_v(fc_vec_f32 a, fc_vec_f32 b) { return (fc_vec_f32)_mm_max_ps((__m128)a, (__m128)b); }
#else
static inline fc_vec_f32 fc_min_v(fc_vec_f32 a, fc_vec_f32 b) { return fc_select_f32(a < b, a, b); }
static inline fc_vec_f32 fc_max_v(fc_vec_f32 a, fc_vec_f32 b) { return fc_select_f32(a > b, a, b); }
#endif
/* exp on whole vectors for the levels without AVX-512, lean because it is most of the softmax's
 * time there: the input is clamped to [-87.5, 89] (NaN passes: vmaxps/vminps return their second
 * operand), n = round(x log2 e) comes from one magic-number addition whose bits also give 2^(n-1),
 * the remainder r = x - n ln2 uses the same two-part ln2 as fc_expf, and e^r is fc_expf's Cephes
 * polynomial evaluated by Horner's rule (7 fused steps).  So no blends: x above ln(FLT_MAX)
 * overflows to inf by itself, and below -86.98 (n = -126) the scale is 0, so results under
 * ~2e-38 flush to 0.  18 vector operations against fc_expf's 27, within 2 ulp (tested). */
static inline fc_vec_f32 fc_expf_v(fc_vec_f32 x) {
    const fc_vec_f32 zero = {0};
    x = fc_max_v(zero - 87.5f, x);
    x = fc_min_v(zero + 89.0f, x);
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
    fc_vec_f32 acc[NV];
    for (int v = 0; v < NV; v++) acc[v] = (fc_vec_f32){0};
    ptrdiff_t j = 0;
    for (; j + 16 <= n; j += 16) {
        for (int v = 0; v < NV; v++) {
            fc_vec_f32 e = fc_expf_v(scale * fc_load_f32(s + j + v * FC_W32) - m);
            fc_store_f32(s + j + v * FC_W32, e);
            acc[v] += e;
        }
    }
    memcpy(lanes, acc, 64);
    for (int l = 0; j + l < n; l++) {
        float e = fc_expf(scale * s[j + l] - m);
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
    xc = fc_select_f64(xc < -708.0, zero - 708.0, xc);
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
 * (blocks.pxi's exp_scaled_sum and sum16). */
static inline double fc_exp_scaled_sum16_f64(double* s, ptrdiff_t n, double scale, double m) {
    enum { NV = 16 / FC_W64 };
    fc_vec_f64 acc[NV];
    for (int v = 0; v < NV; v++) acc[v] = (fc_vec_f64){0};
    ptrdiff_t j = 0;
    for (; j + 16 <= n; j += 16)
        for (int v = 0; v < NV; v++) {
            fc_vec_f64 e = fc_exp_f64_v(scale * fc_load_f64(s + j + v * FC_W64) - m);
            fc_store_f64(s + j + v * FC_W64, e);
            acc[v] += e;
        }
    double l[16];
    memcpy(l, acc, sizeof l);
    for (int k = 0; j + k < n; k++) {
        double e = fc_exp_f64(scale * s[j + k] - m);
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

/* flash: the 16 partials added pairwise */
static inline float fc_exp_scaled_sum_f32(float* s, ptrdiff_t n, float scale, float m) {
    float l[16];
    fc_exp_lanes_f32(s, n, scale, m, l);
    for (int h = 8; h >= 1; h /= 2)
        for (int i = 0; i < h; i++) l[i] = l[i] + l[i + h];
    return l[0];
}
/* naive, paged, backward: exp(s - m) (scale 1 is exact), partials added in lane order (sum16) */
static inline float fc_exp_shift_sum16_f32(float* s, ptrdiff_t n, float m) {
    float l[16];
    fc_exp_lanes_f32(s, n, 1.0f, m, l);
    float total = l[0];
    for (int i = 1; i < 16; i++) total += l[i];
    return total;
}

/* ---- "math in T" variants for the half types held in float: every product and sum rounded. ----
 * Same loops and order as the generic Cython blocks (sequential over the contraction index per
 * element), so results are bit-identical to them, at every level; only the rounding is
 * vectorized.  Rows go in blocks of FC_NRB x 2 vectors because each step is a chain of dependent
 * mul/round/add/round: with 32 registers, four chains left the core waiting on latency. */

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
#else
#define FC_HAVE_BF16_CVT 0
#define fc_rbf16_cvt_v fc_rbf16_exact_v
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

/* Smallest biased exponent among the nonzero values of n floats (subnormals count as 1; 255 if
 * all are zero).  Used to prove that a rounded bf16 GEMM never meets an f32 subnormal: if every
 * operand of a product is a multiple of 2^-63 (exponent fields sum to >= 142) and every starting
 * accumulator a multiple of 2^-126 (field >= 8), then every product, sum and rounding in the chain
 * is a multiple of 2^-126, so it is either zero or normal. */
static inline unsigned fc_min_exp_field(const float* p, ptrdiff_t n) {
    fc_u32v m = {0};
    m = m + 255u;
    ptrdiff_t i = 0;
    for (; i + FC_W32 <= n; i += FC_W32) {
        fc_u32v u;
        memcpy(&u, p + i, FC_VBYTES);
        u &= 0x7fffffffu;
        fc_u32v e = u >> 23;
        e += (fc_u32v)(e == 0u) & 1u;          /* subnormals: field 1 */
        e |= (fc_u32v)(u == 0u);               /* zeros: all ones, never the minimum */
        fc_u32v lt = (fc_u32v)(e < m);
        m = (e & lt) | (m & ~lt);
    }
    unsigned r = 255u;
    for (int l = 0; l < FC_W32; l++) r = m[l] < r ? m[l] : r;
    for (; i < n; i++) {
        uint32_t u = fc_f2u(p[i]) & 0x7fffffffu;
        unsigned e = u >> 23;
        if (u != 0 && (e < 1u ? 1u : e) < r) r = e < 1u ? 1u : e;
    }
    return r;
}

#define FC_RQK_BLOCK(RV2, NRB)                                                                    \
    {                                                                                            \
        const float* q[NRB];                                                                     \
        for (int r = 0; r < NRB; r++) q[r] = Q + (i + r) * D;                                    \
        fc_vec_f32 a[NRB][2] = {{{0}}};                                                           \
        const float* kp = Kt + j0;                                                               \
        for (ptrdiff_t d = 0; d < D; d++, kp += FC_BC) {                                         \
            fc_vec_f32 k0 = fc_load_f32(kp), k1 = fc_load_f32(kp + FC_W32);                      \
            for (int r = 0; r < NRB; r++) {                                                      \
                fc_vec_f32 p0 = q[r][d] * k0, p1 = q[r][d] * k1;                                 \
                RV2(&p0, &p1);                                                                   \
                a[r][0] += p0; a[r][1] += p1;                                                    \
                RV2(&a[r][0], &a[r][1]);                                                         \
            }                                                                                    \
        }                                                                                        \
        for (int r = 0; r < NRB; r++) {                                                          \
            fc_store_f32(S + (i + r) * lds + j0, a[r][0]);                                       \
            fc_store_f32(S + (i + r) * lds + j0 + FC_W32, a[r][1]);                              \
        }                                                                                        \
    }

#define FC_RPV_BLOCK(RV2, NRB)                                                                    \
    {                                                                                            \
        const float* p[NRB];                                                                     \
        fc_vec_f32 a[NRB][2];                                                                    \
        for (int r = 0; r < NRB; r++) {                                                          \
            p[r] = P + (i + r) * ldp;                                                            \
            a[r][0] = fc_load_f32(O + (i + r) * ldo + d0);                                       \
            a[r][1] = fc_load_f32(O + (i + r) * ldo + d0 + FC_W32);                              \
        }                                                                                        \
        for (ptrdiff_t j = 0; j < ncols; j++) {                                                  \
            fc_vec_f32 v0 = fc_load_f32(vrows[j] + d0), v1 = fc_load_f32(vrows[j] + d0 + FC_W32); \
            for (int r = 0; r < NRB; r++) {                                                      \
                fc_vec_f32 m0 = p[r][j] * v0, m1 = p[r][j] * v1;                                 \
                RV2(&m0, &m1);                                                                   \
                a[r][0] += m0; a[r][1] += m1;                                                    \
                RV2(&a[r][0], &a[r][1]);                                                         \
            }                                                                                    \
        }                                                                                        \
        for (int r = 0; r < NRB; r++) {                                                          \
            fc_store_f32(O + (i + r) * ldo + d0, a[r][0]);                                       \
            fc_store_f32(O + (i + r) * ldo + d0 + FC_W32, a[r][1]);                              \
        }                                                                                        \
    }

#define FC_DEFINE_ROUNDED(SUF, RV2, RS)                                                           \
static inline void fc_qk_##SUF(const float* Q, ptrdiff_t nrows4, ptrdiff_t D, const float* Kt,   \
                               float* S, ptrdiff_t lds, ptrdiff_t ncols) {                       \
    for (ptrdiff_t j0 = 0; j0 < ncols; j0 += 2 * FC_W32) {                                       \
        ptrdiff_t i = 0;                                                                         \
        for (; i + FC_NRB <= nrows4; i += FC_NRB) FC_RQK_BLOCK(RV2, FC_NRB)                       \
        for (; i + 4 <= nrows4; i += 4) FC_RQK_BLOCK(RV2, 4)                                      \
        for (; i < nrows4; i += 2) FC_RQK_BLOCK(RV2, 2)                                           \
    }                                                                                            \
}                                                                                                \
static inline void fc_pv_##SUF(const float* P, ptrdiff_t ldp, ptrdiff_t nrows4, ptrdiff_t ncols, \
                               float* const* vrows, ptrdiff_t D, float* O, ptrdiff_t ldo) {      \
    ptrdiff_t d0 = 0;                                                                            \
    for (; d0 + 2 * FC_W32 <= D; d0 += 2 * FC_W32) {                                             \
        ptrdiff_t i = 0;                                                                         \
        for (; i + FC_NRB <= nrows4; i += FC_NRB) FC_RPV_BLOCK(RV2, FC_NRB)                       \
        for (; i + 4 <= nrows4; i += 4) FC_RPV_BLOCK(RV2, 4)                                      \
        for (; i < nrows4; i += 2) FC_RPV_BLOCK(RV2, 2)                                           \
    }                                                                                            \
    for (; d0 < D; d0++) {  /* D % (2 W) tail: one lane at a time, same order */               \
        for (ptrdiff_t i = 0; i < nrows4; i++) {                                                 \
            const float* pr = P + i * ldp;                                                       \
            float a = O[i * ldo + d0];                                                           \
            for (ptrdiff_t j = 0; j < ncols; j++) a = RS(a + RS(pr[j] * vrows[j][d0]));          \
            O[i * ldo + d0] = a;                                                                 \
        }                                                                                        \
    }                                                                                            \
}

FC_DEFINE_ROUNDED(bf16_exact, fc_rbf16_exact_v2, fc_round_bf16)
FC_DEFINE_ROUNDED(bf16_cvt, fc_rbf16_cvt_v2, fc_round_bf16)
FC_DEFINE_ROUNDED(f16, fc_rf16_v2, fc_round_f16)

/* Testing hook: apply one of the vector roundings (0: bf16 integer, 1: bf16 instruction,
 * 2: f16) to n floats, 16 at a time. */
static inline void fc_round_vec_array(const float* x, float* out, ptrdiff_t n, int which) {
    for (ptrdiff_t i = 0; i < n; i += 2 * FC_W32) {  /* 3: the pair form used by the bf16 GEMMs */
        float buf[2 * FC_W32] = {0};
        ptrdiff_t m = n - i < 2 * FC_W32 ? n - i : 2 * FC_W32;
        memcpy(buf, x + i, (size_t)m * 4);
        fc_vec_f32 v0 = fc_load_f32(buf), v1 = fc_load_f32(buf + FC_W32);
        if (which == 3) {
            fc_rbf16_cvt_v2(&v0, &v1);
        } else {
            v0 = which == 0 ? fc_rbf16_exact_v(v0) : which == 1 ? fc_rbf16_cvt_v(v0) : fc_rf16_v(v0);
            v1 = which == 0 ? fc_rbf16_exact_v(v1) : which == 1 ? fc_rbf16_cvt_v(v1) : fc_rf16_v(v1);
        }
        fc_store_f32(buf, v0);
        fc_store_f32(buf + FC_W32, v1);
        memcpy(out + i, buf, (size_t)m * 4);
    }
}

/* bf16 entry points: the one-instruction rounding when the operands' exponents rule out f32
 * subnormals anywhere in the chain (the common case), the integer rounding otherwise. */
static inline void fc_qk_bf16(const float* Q, ptrdiff_t nrows4, ptrdiff_t D, const float* Kt,
                              float* S, ptrdiff_t lds, ptrdiff_t ncols) {
    if (FC_HAVE_BF16_CVT && fc_min_exp_field(Q, nrows4 * D) + fc_min_exp_field(Kt, D * FC_BC) >= 142u)
        fc_qk_bf16_cvt(Q, nrows4, D, Kt, S, lds, ncols);
    else
        fc_qk_bf16_exact(Q, nrows4, D, Kt, S, lds, ncols);
}
static inline void fc_pv_bf16(const float* P, ptrdiff_t ldp, ptrdiff_t nrows4, ptrdiff_t ncols,
                              float* const* vrows, ptrdiff_t D, float* O, ptrdiff_t ldo) {
    if (FC_HAVE_BF16_CVT) {
        unsigned ep = 255u, ev = 255u, eo = 255u, e;
        for (ptrdiff_t i = 0; i < nrows4; i++) {
            e = fc_min_exp_field(P + i * ldp, ncols); ep = e < ep ? e : ep;
            e = fc_min_exp_field(O + i * ldo, D); eo = e < eo ? e : eo;
        }
        for (ptrdiff_t j = 0; j < ncols; j++) {
            e = fc_min_exp_field(vrows[j], D); ev = e < ev ? e : ev;
        }
        if (ep + ev >= 142u && eo >= 8u) {
            fc_pv_bf16_cvt(P, ldp, nrows4, ncols, vrows, D, O, ldo);
            return;
        }
    }
    fc_pv_bf16_exact(P, ldp, nrows4, ncols, vrows, D, O, ldo);
}

/* ---- bf16 dot products for the float32-compute kernels (AVX512-BF16). ------------------------
 * S = Q K^T for bf16 Q and K by vdpbf16ps: every product of two bf16 values is exact in float32,
 * so the scores are float32 sums of exact products, as the mixed contract asks; only the order of
 * the sum differs from the float32 loops (per key: d = 1, 0, 3, 2, ... with one rounding per
 * addition, and subnormal bf16 inputs and float32 partial sums read as zero, which the instruction
 * always does).  Half the instructions of the float32 tile.  Operands are bf16 pairs in uint32:
 * Qp [rows][D2], Kp [D2][FC_BC] with D2 = ceil(D / 2), low half = even d, high half = odd d, an odd
 * D padded with a zero. */
#if defined(__AVX512F__) && defined(__AVX512BF16__)
#define FC_HAVE_DPBF16 1
#define FC_QK_DPBF16_BLOCK(NRB)                                                                  \
    {                                                                                            \
        __m512 a[NRB][2];                                                                        \
        for (int r = 0; r < NRB; r++) a[r][0] = a[r][1] = _mm512_setzero_ps();                   \
        const uint32_t* kp = Kp + j0;                                                            \
        for (ptrdiff_t p = 0; p < D2; p++, kp += FC_BC) {                                        \
            __m512bh k0 = (__m512bh)_mm512_loadu_si512(kp), k1 = (__m512bh)_mm512_loadu_si512(kp + 16); \
            for (int r = 0; r < NRB; r++) {                                                      \
                __m512bh qb = (__m512bh)_mm512_set1_epi32((int)Qp[(i + r) * D2 + p]);            \
                a[r][0] = _mm512_dpbf16_ps(a[r][0], qb, k0);                                     \
                a[r][1] = _mm512_dpbf16_ps(a[r][1], qb, k1);                                     \
            }                                                                                    \
        }                                                                                        \
        for (int r = 0; r < NRB; r++) {                                                          \
            _mm512_storeu_ps(S + (i + r) * lds + j0, a[r][0]);                                   \
            _mm512_storeu_ps(S + (i + r) * lds + j0 + 16, a[r][1]);                              \
        }                                                                                        \
    }
static inline void fc_qk_dpbf16(const uint32_t* Qp, ptrdiff_t nrows4, ptrdiff_t D2, const uint32_t* Kp,
                                float* S, ptrdiff_t lds, ptrdiff_t ncols) {
    for (ptrdiff_t j0 = 0; j0 < ncols; j0 += 32) {
        ptrdiff_t i = 0;
        for (; i + 8 <= nrows4; i += 8) FC_QK_DPBF16_BLOCK(8)
        for (; i + 4 <= nrows4; i += 4) FC_QK_DPBF16_BLOCK(4)
        for (; i < nrows4; i += 2) FC_QK_DPBF16_BLOCK(2)
    }
}
#else
#define FC_HAVE_DPBF16 0
static inline void fc_qk_dpbf16(const uint32_t* Qp, ptrdiff_t nrows4, ptrdiff_t D2, const uint32_t* Kp,
                                float* S, ptrdiff_t lds, ptrdiff_t ncols) {
    (void)Qp; (void)nrows4; (void)D2; (void)Kp; (void)S; (void)lds; (void)ncols;  /* never called */
}
#endif
/* bf16 pairs of float32 rows holding bf16 values (exactly: the widened inputs), rows x D -> out
 * [rows][D2] with row stride ldo; the top half of a float32 is its bf16. */
static inline uint32_t fc_bf16_pair(const float* x, ptrdiff_t d, ptrdiff_t D) {
    uint32_t lo, hi = 0;
    memcpy(&lo, x + d, 4);
    if (d + 1 < D) memcpy(&hi, x + d + 1, 4);
    return (lo >> 16) | (hi & 0xffff0000u);
}
static inline void fc_pair_rows_bf16(const float* x, ptrdiff_t rows, ptrdiff_t D, uint32_t* out, ptrdiff_t ldo) {
    for (ptrdiff_t r = 0; r < rows; r++)
        for (ptrdiff_t p = 0; 2 * p < D; p++) out[r * ldo + p] = fc_bf16_pair(x + r * D, 2 * p, D);
}
/* K rows (n <= FC_BC keys of D bf16-valued floats) -> Kp [D2][FC_BC], keys n.. zero. */
static inline void fc_pack_k_pairs_bf16(float* const* rows, ptrdiff_t n, ptrdiff_t D, uint32_t* out) {
    ptrdiff_t D2 = (D + 1) / 2;
    for (ptrdiff_t j = 0; j < n; j++)
        for (ptrdiff_t p = 0; p < D2; p++) out[p * FC_BC + j] = fc_bf16_pair(rows[j], 2 * p, D);
    for (ptrdiff_t p = 0; p < D2; p++)
        for (ptrdiff_t j = n; j < FC_BC; j++) out[p * FC_BC + j] = 0;
}
#endif
