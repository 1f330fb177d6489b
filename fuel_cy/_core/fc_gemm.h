/* Register-blocked GEMM micro-kernels of the attention tiles: S = Q K^T (fc_qk_*), O += P V
 * (fc_pv_*), the decode-time row dots (fc_rowdots_*, the *_heads forms over several kv heads), the
 * backward's C += A^T B (fc_gemm_acc_*, fc_gemm_tn_*), their "math in T" forms for bf16 and f16
 * (every product and sum rounded: fc_qk_bf16, fc_pv_bf16, and the F16C form of fc_qk_f16 and
 * fc_pv_f16, which fc_gemm_f16.h completes) and the bf16 dot
 * products of the float32-compute kernels (fc_qk_dpbf16_vec, vdpbf16ps; fc_amx.h adds the AMX form).
 *
 * The un-rounded kernels (f32, f64) are written with GCC/Clang vector extensions so the compiler
 * cannot reshape them (left alone, gcc vectorized the wrong loop of pv_accum and gathered).  They
 * compute exactly what blocks.pxi's generic loops define: every output element is a sequential sum
 * over the contraction index, so results do not depend on blocking or threads.  Hand-written;
 * included (through fc_simd.h) by every CPU level's core module. */
#ifndef FUEL_CY_FC_GEMM_H
#define FUEL_CY_FC_GEMM_H
#include "fc_math.h"
#include "fc_isa.h"
#include "fc_half.h"
#include "fc_uarch.h"    /* fc_pv_form, fc_tn_blocks, fc_bf16_form */
#include "fc_dtypes.h"   /* generated from fuel_cy/dtypes.py: FC_FOR_EACH_WORK_TYPE */

/* One register block of S = Q Kt: NRB rows x NV vectors of columns at (i, j0), sequential over d.
 * PF: what each step of d also does (FC_QK_PF_NONE, FC_QK_PF_STREAM); KEEP: what the block does
 * with its sums besides storing them (FC_QK_KEEP_NONE, FC_QK_KEEP_MAX). */
#define FC_QK_BLOCK(T, SUF, W, PF, KEEP, NRB, NV)                                                \
    {                                                                                            \
        const T* q[NRB];                                                                         \
        for (int r = 0; r < NRB; r++) q[r] = Q + (i + r) * D;                                    \
        fc_vec_##SUF a[NRB][NV] = {{{0}}};                                                        \
        const T* kp = Kt + j0;                                                                   \
        for (ptrdiff_t d = 0; d < D; d++, kp += FC_BC) {                                         \
            PF                                                                                   \
            fc_vec_##SUF k[NV];                                                                  \
            for (int c = 0; c < NV; c++) k[c] = fc_load_##SUF(kp + c * W);                       \
            for (int r = 0; r < NRB; r++)                                                        \
                for (int c = 0; c < NV; c++) a[r][c] += q[r][d] * k[c];                          \
        }                                                                                        \
        for (int r = 0; r < NRB; r++)                                                            \
            for (int c = 0; c < NV; c++) fc_store_##SUF(S + (i + r) * lds + j0 + c * W, a[r][c]); \
        KEEP(SUF, W, NRB, NV)                                                                    \
    }

/* (fc_qk_max_*: each row's running maximum over the columns, lane by lane, rmax[row][W], taken
 * from the sums while they are in registers, so that the softmax needs no pass of its own over
 * the stored scores to find it; fc_qk_fused_max.  fc_max_v* keeps its second operand when either
 * is NaN, so a NaN score never enters a lane, as in fc_exp.h's row_max.) */
#define FC_QK_KEEP_NONE(SUF, W, NRB, NV)
#define FC_QK_KEEP_MAX(SUF, W, NRB, NV)                                                          \
        for (int r = 0; r < NRB; r++) {                                                          \
            fc_vec_##SUF mx = fc_load_##SUF(rmax + (i + r) * W);                                  \
            for (int c = 0; c < NV; c++) mx = fc_max_v##SUF(a[r][c], mx);                        \
            fc_store_##SUF(rmax + (i + r) * W, mx);                                              \
        }

/* One register block of O += P V: NRB rows x NV vectors of columns at (i, d0), sequential over j.
 * VROW(j) is the address of V's row j, PF(j) what to prefetch at step j (the row forms below). */
#define FC_PV_BLOCK(T, SUF, W, VROW, PF, NRB, NV)                                                \
    {                                                                                            \
        const T* p[NRB];                                                                         \
        fc_vec_##SUF a[NRB][NV];                                                                 \
        for (int r = 0; r < NRB; r++) {                                                          \
            p[r] = P + (i + r) * ldp;                                                            \
            for (int c = 0; c < NV; c++) a[r][c] = fc_load_##SUF(O + (i + r) * ldo + d0 + c * W); \
        }                                                                                        \
        for (ptrdiff_t j = 0; j < ncols; j++) {                                                  \
            const T* v = VROW(j) + d0;                                                           \
            fc_vec_##SUF vv[NV];                                                                 \
            PF(j)                                                                                \
            for (int c = 0; c < NV; c++) vv[c] = fc_load_##SUF(v + c * W);                       \
            for (int r = 0; r < NRB; r++)                                                        \
                for (int c = 0; c < NV; c++) a[r][c] += p[r][j] * vv[c];                         \
        }                                                                                        \
        for (int r = 0; r < NRB; r++)                                                            \
            for (int c = 0; c < NV; c++) fc_store_##SUF(O + (i + r) * ldo + d0 + c * W, a[r][c]); \
    }

/* The row blocks of one column block, NV vectors wide: NRB rows at a time, then 4, then 2. */
#define FC_ROW_BLOCKS(BLOCK, NRB, NV, ...)                                                       \
    {                                                                                            \
        ptrdiff_t i = 0;                                                                         \
        for (; i + (NRB) <= nrows4; i += (NRB)) BLOCK(__VA_ARGS__, NRB, NV)                       \
        for (; i + 4 <= nrows4; i += 4) BLOCK(__VA_ARGS__, 4, NV)                                 \
        for (; i < nrows4; i += 2) BLOCK(__VA_ARGS__, 2, NV)                                      \
    }

/* Whether S = Q K^T and O += P V take the wide register block (fc_uarch.h fc_gemm_block): 6 rows
 * x 4 vectors needs 24 accumulators, which only AVX-512's 32 registers hold.  f64's O += P V keeps
 * the narrow block: wide, its V slices of 128 keys x 32 doubles, 1 KB apart at D=128, left L1 and
 * the flash ran 10-15% slower on the Xeon, where f32's ran 3-4% faster. */
#if FC_VBYTES == 64
#define FC_GEMM_WIDE (fc_gemm_block == FC_GEMM_BLOCK_WIDE)
#else
#define FC_GEMM_WIDE 0
#endif
#define FC_PV_WIDE_f32 FC_GEMM_WIDE
#define FC_PV_WIDE_f64 0

/* V's rows for O += P V: gathered (a pointer per row: the paged cache, whose rows sit in other
 * pages, so they are prefetched FC_PREFETCH rows ahead) or a fixed stride apart (contiguous K/V:
 * no pointer load per key, and the hardware prefetcher follows the stride). */
#define FC_VROW_PTR(j) vrows[j]
#define FC_VROW_STRIDED(j) (V + (j) * ldv)
#define FC_PF_PTR(j)                                                                             \
    if (d0 == 0 && i == 0 && (j) + FC_PREFETCH < ncols)                                          \
        fc_prefetch_row(vrows[(j) + FC_PREFETCH], D * sizeof(*O));
#define FC_PF_NONE(j)
/* (fc_pv_pf_*: each column block's first row block asks for its own slice of the rows ahead into
 * L1 (two vectors: the narrow block's, fc_chunk_spread's CPUs), where FC_PF_PTR asks for whole
 * rows in the first column block only, which left L1 before the later blocks read them (P V
 * waited on its V loads); and a line of the stream per step) */
#define FC_PF_PTR_STREAM(j)                                                                      \
    if (i == 0 && (j) + FC_PREFETCH < ncols)                                                     \
        fc_prefetch_row(vrows[(j) + FC_PREFETCH] + d0, 2 * FC_VBYTES);                           \
    fc_pf_step(&pfl);

/* (fc_pv_rows_spread_*: the paged heads loops' lookahead, pfrows, asked into L2 as the steps go:
 * each column block's first row block asks for its own slice (sizeof vv) of key j's row ahead,
 * so over the column blocks every line of it, one slice per key read; fc_paged_spread) */
#define FC_PF_SPREAD(j)                                                                          \
    if (i == 0) fc_prefetch_l2(pfrows[j] + d0, sizeof(vv));

/* O[i, :] += sum_j P[i, j] * V[j, :], sequential over j, rows in groups of 4.  Column blocks are
 * the outer loop so each V slice [ncols][2W] (4W in the wide block) stays in L1 across row
 * groups.  The trailing arguments say how V's rows are found (FC_VROW_PTR: T* const* vrows;
 * FC_VROW_STRIDED: const T* V, ptrdiff_t ldv); the sums and their order are the same either way. */
#define FC_DEFINE_PV(T, SUF, W, NAME, VROW, PF, ENTER, LEAVE, ...)                               \
static inline void NAME(const T* P, ptrdiff_t ldp, ptrdiff_t nrows4, ptrdiff_t ncols,          \
                        __VA_ARGS__, ptrdiff_t D, T* O, ptrdiff_t ldo) {                         \
    ENTER                                                                                        \
    ptrdiff_t d0 = 0;                                                                            \
    if (FC_PV_WIDE_##SUF)                                                                        \
        for (; d0 + 4 * W <= D; d0 += 4 * W) FC_ROW_BLOCKS(FC_PV_BLOCK, 6, 4, T, SUF, W, VROW, PF) \
    for (; d0 + 2 * W <= D; d0 += 2 * W) FC_ROW_BLOCKS(FC_PV_BLOCK, FC_NRB, 2, T, SUF, W, VROW, PF) \
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
                a0 = fc_madd_##SUF(p0[j], v, a0); a1 = fc_madd_##SUF(p1[j], v, a1);              \
                a2 = fc_madd_##SUF(p2[j], v, a2); a3 = fc_madd_##SUF(p3[j], v, a3);              \
            }                                                                                    \
            *o0 = a0; *o1 = a1; *o2 = a2; *o3 = a3;                                              \
        }                                                                                        \
    }                                                                                            \
    LEAVE                                                                                        \
}

/* S[i, j] = sum_d Q[i, d] * Kt[d, j] for j < FC_BC; Q rows (stride D), nrows4 % 4 == 0.  Each Kt
 * slice [D][2W] (4W in the wide block) stays in L1 across the row blocks.  PF and the trailing
 * arguments: what each step of d also does (the sums are the same either way). */
#define FC_DEFINE_QK(T, SUF, W, NAME, PF, KEEP, ENTER, LEAVE, ...)                               \
static inline void NAME(const T* Q, ptrdiff_t nrows4, ptrdiff_t D, const T* Kt, T* S,          \
                        ptrdiff_t lds, ptrdiff_t ncols __VA_ARGS__) {                            \
    ENTER                                                                                        \
    ptrdiff_t j0 = 0;                                                                            \
    if (FC_GEMM_WIDE)   /* (the same columns written as by 2W: ncols rounded up to 2W) */      \
        for (; j0 + 4 * W <= (ncols + 2 * W - 1) / (2 * W) * (2 * W); j0 += 4 * W)               \
            FC_ROW_BLOCKS(FC_QK_BLOCK, 6, 4, T, SUF, W, PF, KEEP)                                \
    for (; j0 < ncols; j0 += 2 * W) FC_ROW_BLOCKS(FC_QK_BLOCK, FC_NRB, 2, T, SUF, W, PF, KEEP)   \
    LEAVE                                                                                        \
}
/* The stream of fc_qk_pf_* and fc_pv_pf_* (fc_isa.h fc_pf_stream), in locals while they run. */
#define FC_QK_PF_NONE
#define FC_QK_PF_STREAM fc_pf_step(&pfl);
#define FC_PF_ENTER fc_pf_stream pfl = *pf;
#define FC_PF_LEAVE *pf = pfl;
#define FC_QK_MAX_ENTER(T, W) for (ptrdiff_t l = 0; l < nrows4 * (W); l++) rmax[l] = -INFINITY;

#define FC_DEFINE_KERNELS(T, SUF, W)                                                             \
FC_DEFINE_QK(T, SUF, W, fc_qk_##SUF, FC_QK_PF_NONE, FC_QK_KEEP_NONE, , , )                       \
/* (a chunk's tiles: rows asked for as the steps go, pf) */                                     \
FC_DEFINE_QK(T, SUF, W, fc_qk_pf_##SUF, FC_QK_PF_STREAM, FC_QK_KEEP_NONE, FC_PF_ENTER, FC_PF_LEAVE, , \
             fc_pf_stream* pf)                                                                   \
/* (the rows' maxima kept as the sums are stored, rmax[nrows4][W]: ncols a multiple of 2W, so   \
 * that no column past ncols enters them) */                                                    \
FC_DEFINE_QK(T, SUF, W, fc_qk_max_##SUF, FC_QK_PF_NONE, FC_QK_KEEP_MAX, FC_QK_MAX_ENTER(T, W), , , \
             T* rmax)                                                                            \
/* whether fc_qk_max_* takes ncols columns: whole register blocks of 2W */                      \
static inline int fc_qk_max_whole_##SUF(ptrdiff_t ncols) { return ncols % (2 * W) == 0; }       \
/* max(s[0:n]) from row r's lanes of fc_qk_max_*'s rmax, as fc_exp.h's row_max gives it from s: \
 * max is exact, so the lanes' order cannot matter; a NaN is looked for in s only when every    \
 * other score is -inf */                                                                       \
static inline T fc_rmax_row_##SUF(const T* rmax, ptrdiff_t r, const T* s, ptrdiff_t n) {        \
    T m = rmax[r * W];                                                                           \
    for (int l = 1; l < W; l++) m = rmax[r * W + l] > m ? rmax[r * W + l] : m;                  \
    if (m == -INFINITY)                                                                          \
        for (ptrdiff_t j = 0; j < n; j++)                                                        \
            if (s[j] != s[j]) return s[j];                                                       \
    return m;                                                                                    \
}                                                                                                \
                                                                                                 \
FC_DEFINE_PV(T, SUF, W, fc_pv_##SUF, FC_VROW_PTR, FC_PF_PTR, , , T* const* vrows)             \
FC_DEFINE_PV(T, SUF, W, fc_pv_strided_##SUF, FC_VROW_STRIDED, FC_PF_NONE, , , const T* V, ptrdiff_t ldv) \
FC_DEFINE_PV(T, SUF, W, fc_pv_rows_##SUF, FC_VROW_PTR, FC_PF_NONE, , , T* const* vrows)        \
FC_DEFINE_PV(T, SUF, W, fc_pv_rows_spread_##SUF, FC_VROW_PTR, FC_PF_SPREAD, , ,                  \
             T* const* vrows, T* const* pfrows)                                                  \
/* (a paged chunk's tiles: the next tile's K rows asked for as the steps go, pf) */              \
FC_DEFINE_PV(T, SUF, W, fc_pv_pf_##SUF, FC_VROW_PTR, FC_PF_PTR_STREAM, FC_PF_ENTER, FC_PF_LEAVE, \
             T* const* vrows, fc_pf_stream* pf)                                                  \
                                                                                                 \
/* O += P V for V rows ldv apart (flash, naive, the backward's dQ), in the form fc_pv_form (fc_uarch.h) picks. \
 * Same sums, same order, so the same bits either way. */                                       \
static inline void fc_pv_contig_##SUF(const T* P, ptrdiff_t ldp, ptrdiff_t nrows4, ptrdiff_t ncols, \
                                      const T* V, ptrdiff_t ldv, T* const* vrows, ptrdiff_t D,  \
                                      T* O, ptrdiff_t ldo) {                                     \
    if (fc_pv_form == FC_PV_BY_POINTER) fc_pv_##SUF(P, ldp, nrows4, ncols, vrows, D, O, ldo);    \
    else fc_pv_strided_##SUF(P, ldp, nrows4, ncols, V, ldv, D, O, ldo);                          \
}


/* S[i, j] = sum_d Q[i, d] * krows[j][d] for j < ncols, reading each key row once for 4 query
 * rows (decode: few queries per key, so packing K^T would cost more than the dots).  Each dot is
 * W lane partials (lane d % W, in order of d) summed pairwise (fc_hsum).  The heads loops below
 * prefetch the rows; PF, what each step d of the first four rows also does (it sees j and d). */
#define FC_DEFINE_ROWDOTS_AS(T, SUF, W, NAME, PF, ...)                                           \
static inline void NAME(const T* Q, ptrdiff_t nrows4, ptrdiff_t D, T* const* krows,             \
                        ptrdiff_t ncols, T* S, ptrdiff_t lds __VA_ARGS__) {                      \
    for (ptrdiff_t j = 0; j < ncols; j++) {                                                      \
        const T* k = krows[j];                                                                   \
        for (ptrdiff_t i = 0; i < nrows4; i += 4) {                                              \
            const T *q0 = Q + i * D, *q1 = q0 + D, *q2 = q1 + D, *q3 = q2 + D;                  \
            fc_vec_##SUF a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};                                 \
            ptrdiff_t d = 0;                                                                     \
            for (; d + W <= D; d += W) {                                                         \
                if (i == 0) { PF }                                                               \
                fc_vec_##SUF kv = fc_load_##SUF(k + d);                                          \
                a0 += fc_load_##SUF(q0 + d) * kv; a1 += fc_load_##SUF(q1 + d) * kv;              \
                a2 += fc_load_##SUF(q2 + d) * kv; a3 += fc_load_##SUF(q3 + d) * kv;              \
            }                                                                                    \
            for (ptrdiff_t l = 0; d < D; d++, l++) {                                             \
                a0[l] = fc_madd_##SUF(q0[d], k[d], a0[l]); a1[l] = fc_madd_##SUF(q1[d], k[d], a1[l]); \
                a2[l] = fc_madd_##SUF(q2[d], k[d], a2[l]); a3[l] = fc_madd_##SUF(q3[d], k[d], a3[l]); \
            }                                                                                    \
            S[i * lds + j] = fc_hsum_##SUF(a0); S[(i + 1) * lds + j] = fc_hsum_##SUF(a1);        \
            S[(i + 2) * lds + j] = fc_hsum_##SUF(a2); S[(i + 3) * lds + j] = fc_hsum_##SUF(a3);  \
        }                                                                                        \
    }                                                                                            \
}
/* (fc_rowdots_spread_*: key j's row of the heads loops' lookahead, pfrows[j], asked into L2 a line
 * per step as its own is read; fc_paged_spread) */
#define FC_ROWDOTS_PF_SPREAD(T)                                                                  \
    if ((d * (ptrdiff_t)sizeof(T)) % 64 == 0) __builtin_prefetch(pfrows[j] + d, 0, 2);
#define FC_DEFINE_ROWDOTS(T, SUF, W)                                                             \
FC_DEFINE_ROWDOTS_AS(T, SUF, W, fc_rowdots_##SUF, , )                                            \
FC_DEFINE_ROWDOTS_AS(T, SUF, W, fc_rowdots_spread_##SUF, FC_ROWDOTS_PF_SPREAD(T), , T* const* pfrows)

FC_FOR_EACH_WORK_TYPE(FC_DEFINE_KERNELS)

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
            for (ptrdiff_t k = 0; k < K; k++) a = fc_madd_##SUF(A[k * ak + i * ai], B[k * ldb + c0], a); \
            C[i * ldc + c0] = a;                                                                 \
        }                                                                                        \
    }                                                                                            \
}

FC_FOR_EACH_WORK_TYPE(FC_DEFINE_GEMM_ACC)

/* The same C += A^T B for A read transposed (ai = 1) with K <= 64: each span of NB register blocks
 * of FC_NRB output rows first copies its A^T block ([K][NB FC_NRB], at most 4 KB) so that every
 * column pass reads it from L1; read in place, the K rows of A are a power-of-two stride apart and
 * all land in one L1 set.  NB is fc_tn_blocks (fc_uarch.h), a constant in each copy loop so that
 * the copies stay vector moves.  Same sums in the same order as fc_gemm_acc. */
#define FC_TN_SPANS(T, SUF, W, NB)                                                               \
    for (; i0 + (NB) * FC_NRB <= nrows4; i0 += (NB) * FC_NRB) {                                  \
        for (ptrdiff_t k = 0; k < K; k++)                                                        \
            memcpy(blk + k * (NB) * FC_NRB, A + k * ak + i0, (NB) * FC_NRB * sizeof(T));         \
        for (int h = 0; h < (NB); h++) {                                                         \
            ptrdiff_t i = i0 + h * FC_NRB;                                                       \
            for (ptrdiff_t c0 = 0; c0 < ncols; c0 += 2 * W) {                                    \
                if (pf) FC_TN_PREFETCH_NEXT(T, W, i, c0)                                         \
                FC_ACC_BLOCK(T, SUF, W, FC_NRB, blk + k * (NB) * FC_NRB + h * FC_NRB, 1)         \
            }                                                                                    \
        }                                                                                        \
    }
/* The rows of C the register block after (i, c0) reads (the next columns of these rows, else the
 * next rows' first columns), asked for ahead (pf); none past row nrows4. */
#define FC_TN_PREFETCH_NEXT(T, W, i, c0)                                                         \
    {                                                                                            \
        ptrdiff_t pi = (c0) + 2 * (W) < ncols ? (i) : (i) + FC_NRB;                              \
        ptrdiff_t pc = (c0) + 2 * (W) < ncols ? (c0) + 2 * (W) : 0;                              \
        for (int r = 0; r < FC_NRB && pi + r < nrows4; r++) {                                    \
            __builtin_prefetch(C + (pi + r) * ldc + pc, 0, 3);                                   \
            __builtin_prefetch(C + (pi + r) * ldc + pc + (W), 0, 3);                             \
        }                                                                                        \
    }
#define FC_DEFINE_GEMM_TN(T, SUF, W)                                                             \
static inline void fc_gemm_tn_##SUF(const T* A, ptrdiff_t ak, ptrdiff_t nrows4, ptrdiff_t K,     \
                                    const T* B, ptrdiff_t ldb, ptrdiff_t ncols, T* C, ptrdiff_t ldc, \
                                    int pf) {                                                    \
    if (K > 64 || ncols % (2 * W) != 0) {                                                        \
        fc_gemm_acc_##SUF(A, 1, ak, nrows4, K, B, ldb, ncols, C, ldc);                           \
        return;                                                                                  \
    }                                                                                            \
    T blk[64 * 2 * FC_NRB];                                                                      \
    ptrdiff_t i0 = 0;                                                                            \
    if (fc_tn_blocks == 2) FC_TN_SPANS(T, SUF, W, 2)                                             \
    else FC_TN_SPANS(T, SUF, W, 1)                                                               \
    if (i0 < nrows4)                                                                             \
        fc_gemm_acc_##SUF(A + i0, 1, ak, nrows4 - i0, K, B, ldb, ncols, C + i0 * ldc, ldc);      \
}

FC_FOR_EACH_WORK_TYPE(FC_DEFINE_GEMM_TN)

FC_FOR_EACH_WORK_TYPE(FC_DEFINE_ROWDOTS)

#if defined(__AVX512F__)
/* fc_rowdots_f32 four keys at a time (D a multiple of 16; fc_isa.h), the same bits; and
 * fc_rowdots_spread_f32 so, each step asking for a line of each of the four keys' lookahead rows. */
FC_DEFINE_ROWDOTS4(fc_rowdots4_f32, float* const*, float, fc_load_f32,
                   fc_rowdots_f32(Q, nrows4, D, krows + j, ncols - j, S + j, lds), )
FC_DEFINE_ROWDOTS4(fc_rowdots4_spread_f32, float* const*, float, fc_load_f32,
                   fc_rowdots_spread_f32(Q, nrows4, D, krows + j, ncols - j, S + j, lds, pfrows + j),
                   __builtin_prefetch(pfrows[j] + d, 0, 2); __builtin_prefetch(pfrows[j + 1] + d, 0, 2);
                   __builtin_prefetch(pfrows[j + 2] + d, 0, 2); __builtin_prefetch(pfrows[j + 3] + d, 0, 2);,
                   , float* const* pfrows)
#define FC_ROWDOTS4_F32(Q, nrows4, D, krows, ncols, S, lds) \
    ((D) % 16 == 0 ? fc_rowdots4_f32(Q, nrows4, D, krows, ncols, S, lds) : fc_rowdots_f32(Q, nrows4, D, krows, ncols, S, lds))
#define FC_ROWDOTS_SPREAD_f32 fc_rowdots4_spread_f32   /* (the spread form's D: a multiple of 2W) */
#else
#define FC_ROWDOTS4_F32 fc_rowdots_f32
#define FC_ROWDOTS_SPREAD_f32 fc_rowdots_spread_f32
#endif
#define FC_ROWDOTS_SPREAD_f64 fc_rowdots_spread_f64

/* Paged decode over several kv heads at once.  In the pool a key's rows for all kv heads sit
 * side by side, so serving every head of a group of keys together reads the pool front to back
 * (one task per head read 512-byte pieces 4 KB apart and waited on memory: 38% of the copy rate
 * against 70% now).  krows[j] points at key j's row of the first head; head h is D further.
 * Query rows are head-major, rph4 rows per head.  Every dot and every output element is computed
 * by fc_rowdots / fc_pv as before (same lanes, same sequential order over keys), so the bits do
 * not depend on the grouping. */
/* Keys are visited in groups of fc_paged_group (fc_uarch.h); while one group is computed (head by
 * head) the rows FC_PAGED_LOOKAHEAD keys on are prefetched into L2, one head's part per head
 * visited: spread over the heads loop rather than a burst of every head's lines, and into L2, not
 * L1 (into L1 the half-pool decode ran at 9.3 ms against 5.0; fc_half.h).  Where fc_paged_spread
 * says so, a head's part is asked for a line per step of its products too, not at once.  The
 * callers pass the row pointers of up to FC_PAGED_LOOKAHEAD keys past the computed ones
 * (navail >= ncols), so the prefetch runs on across their 128-key tiles. */
#define FC_KEYGROUP_MAX 16   /* (fc_uarch.h fc_paged_group: the group this CPU takes) */
/* The 16-lane f32 dots take four keys at a time where the level has AVX-512 (fc_rowdots4_f32). */
#define FC_ROWDOTS_HEADS_f32(Q, nrows4, D, krows, ncols, S, lds) FC_ROWDOTS4_F32(Q, nrows4, D, krows, ncols, S, lds)
#define FC_ROWDOTS_HEADS_f64(Q, nrows4, D, krows, ncols, S, lds) fc_rowdots_f64(Q, nrows4, D, krows, ncols, S, lds)
#define FC_DEFINE_HEADS(T, SUF, W)                                                               \
static inline void fc_rowdots_heads_##SUF(const T* Q, ptrdiff_t nheads, ptrdiff_t rph4, ptrdiff_t D, \
                                          T* const* krows, ptrdiff_t ncols, ptrdiff_t navail,    \
                                          T* S, ptrdiff_t lds) {                                 \
    if (fc_paged_spread && D % (2 * W) == 0)                                                     \
        FC_FOR_KEY_GROUPS_AND_HEADS(T, krows, FC_KEYGROUP_MAX, fc_paged_group, 0, 1,             \
            FC_ROWDOTS_SPREAD_##SUF(Q + h * rph4 * D, rph4, D, hrows, n, S + h * rph4 * lds + j0, lds, pfrows)) \
    else                                                                                         \
        FC_FOR_KEY_GROUPS_AND_HEADS(T, krows, FC_KEYGROUP_MAX, fc_paged_group, 0, 0,             \
            FC_ROWDOTS_HEADS_##SUF(Q + h * rph4 * D, rph4, D, hrows, n, S + h * rph4 * lds + j0, lds)) \
}                                                                                                \
static inline void fc_pv_heads_##SUF(const T* P, ptrdiff_t ldp, ptrdiff_t nheads, ptrdiff_t rph4, \
                                     ptrdiff_t ncols, ptrdiff_t navail, T* const* vrows, ptrdiff_t D, \
                                     T* O, ptrdiff_t ldo) {                                      \
    if (fc_paged_spread && D % (2 * W) == 0)                                                     \
        FC_FOR_KEY_GROUPS_AND_HEADS(T, vrows, FC_KEYGROUP_MAX, fc_paged_group, 0, 1,             \
            fc_pv_rows_spread_##SUF(P + h * rph4 * ldp + j0, ldp, rph4, n, hrows, pfrows, D, O + h * rph4 * ldo, ldo)) \
    else                                                                                         \
        FC_FOR_KEY_GROUPS_AND_HEADS(T, vrows, FC_KEYGROUP_MAX, fc_paged_group, 0, 0,             \
            fc_pv_rows_##SUF(P + h * rph4 * ldp + j0, ldp, rph4, n, hrows, D, O + h * rph4 * ldo, ldo)) \
}

FC_FOR_EACH_WORK_TYPE(FC_DEFINE_HEADS)

/* ---- "math in T" variants for the half types held in float: every product and sum rounded. ----
 * Same loops and order as the generic Cython blocks (sequential over the contraction index per
 * element), so results are bit-identical to them, at every level; only the rounding is
 * vectorized.  Rows go in blocks of FC_NRB x 2 vectors because each step is a chain of dependent
 * mul/round/add/round: with 32 registers, four chains left the core waiting on latency. */

/* The exponent fields of a set of floats (added a row at a time): lo, the smallest among the
 * nonzero values (subnormals count as 1, 255 if all are zero), and hi, the largest (255: an inf
 * or NaN).  lo proves that a rounded bf16 GEMM never meets an f32 subnormal: if every operand of a
 * product is a multiple of 2^-63 (fields sum to >= 142) and every starting accumulator a multiple
 * of 2^-126 (field >= 8), then every product, sum and rounding in the chain is a multiple of
 * 2^-126, so it is either zero or normal.  hi bounds the sums for the vdpbf16ps form
 * (fc_bf16_dp_fits).  The vector lanes are reduced once per set, not per row: a decode's rounded
 * tiles scan as many values as they multiply, in short rows. */
typedef struct { fc_u32v mn, mx; uint32_t smin, smax; } fc_exp_span;
static inline fc_exp_span fc_exp_span_new(void) {
    fc_exp_span sp;
    sp.mn = (fc_u32v){0} - 1u;   /* the smallest |x| - 1 as unsigned: a zero wraps to the largest */
    sp.mx = (fc_u32v){0};
    sp.smin = 0xffffffffu;
    sp.smax = 0;
    return sp;
}
static inline void fc_exp_span_add(fc_exp_span* sp, const float* p, ptrdiff_t n) {
    ptrdiff_t i = 0;
    for (; i + FC_W32 <= n; i += FC_W32) {
        fc_u32v u;
        memcpy(&u, p + i, FC_VBYTES);
        u = u & 0x7fffffffu;
        sp->mx = fc_max_u32(u, sp->mx);
        sp->mn = fc_min_u32(u - 1u, sp->mn);
    }
    for (; i < n; i++) {
        uint32_t u = fc_f2u(p[i]) & 0x7fffffffu;
        sp->smin = u - 1u < sp->smin ? u - 1u : sp->smin;
        sp->smax = u > sp->smax ? u : sp->smax;
    }
}
static inline void fc_exp_span_fields(const fc_exp_span* sp, unsigned* lo, unsigned* hi) {
    uint32_t rmin = sp->smin, rmax = sp->smax;
    for (int l = 0; l < FC_W32; l++) {
        rmin = sp->mn[l] < rmin ? sp->mn[l] : rmin;
        rmax = sp->mx[l] > rmax ? sp->mx[l] : rmax;
    }
    unsigned e = rmin == 0xffffffffu ? 255u : (rmin + 1u) >> 23;
    *lo = e < 1u ? 1u : e;
    *hi = rmax >> 23;
}

/* Whether the chains a = R(a + R(x y)) of n steps stay finite, given the largest exponent fields
 * of the starting accumulators (e0), of the x (e1) and of the y (e2): every value is below
 * 2^(field - 126), so every rounded product and the start are at most 2^E with
 * E = max(e1 + e2 - 252, e0 - 126), and after n steps |a| <= (n + 1) 2^E (1 + 2^-8)^n, whose log2
 * is below E + bitlen(n + 1) + n / 177 + 1 (log2(1 + 2^-8) < 1/177).  At most 2^127 never rounds
 * to inf. */
static inline int fc_bf16_dp_fits(unsigned e0, unsigned e1, unsigned e2, ptrdiff_t n) {
    if (e0 > 254u || e1 > 254u || e2 > 254u) return 0;
    int e = (int)e1 + (int)e2 - 252, e_start = (int)e0 - 126;
    e = e > e_start ? e : e_start;
    int bits = 0;
    for (ptrdiff_t m = n + 1; m; m >>= 1) bits++;
    return e + bits + (int)(n / 177) + 1 <= 127;
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

/* The D % (2 W) columns of a rounded O += P V from d0: one lane at a time, same order. */
#define FC_DEFINE_PV_TAIL(SUF, RS)                                                                \
static inline void fc_pv_tail_##SUF(const float* P, ptrdiff_t ldp, ptrdiff_t nrows4, ptrdiff_t ncols, \
                                    float* const* vrows, ptrdiff_t d0, ptrdiff_t D, float* O, ptrdiff_t ldo) { \
    for (; d0 < D; d0++) {                                                                       \
        for (ptrdiff_t i = 0; i < nrows4; i++) {                                                 \
            const float* pr = P + i * ldp;                                                       \
            float a = O[i * ldo + d0];                                                           \
            for (ptrdiff_t j = 0; j < ncols; j++) a = RS(a + RS(pr[j] * vrows[j][d0]));          \
            O[i * ldo + d0] = a;                                                                 \
        }                                                                                        \
    }                                                                                            \
}
FC_DEFINE_PV_TAIL(bf16, fc_round_bf16)
FC_DEFINE_PV_TAIL(f16, fc_round_f16)

#define FC_DEFINE_ROUNDED(SUF, RV2, TAIL)                                                        \
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
    fc_pv_tail_##TAIL(P, ldp, nrows4, ncols, vrows, d0, D, O, ldo);                              \
}

FC_DEFINE_ROUNDED(bf16_exact, fc_rbf16_exact_v2, bf16)
FC_DEFINE_ROUNDED(bf16_cvt, fc_rbf16_cvt_v2, bf16)
FC_DEFINE_ROUNDED(f16_cvt, fc_rf16_v2, f16)   /* fc_gemm_f16.h picks it or the binary16 form */

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
#define FC_QK_DPBF16_BLOCK(NRB, PF)                                                              \
    {                                                                                            \
        __m512 a[NRB][2];                                                                        \
        for (int r = 0; r < NRB; r++) {                                                          \
            a[r][0] = acc ? _mm512_loadu_ps(S + (i + r) * lds + j0) : _mm512_setzero_ps();       \
            a[r][1] = acc ? _mm512_loadu_ps(S + (i + r) * lds + j0 + 16) : _mm512_setzero_ps();  \
        }                                                                                        \
        const uint32_t* kp = Kp + p0 * FC_BC + j0;                                               \
        for (ptrdiff_t p = p0; p < D2; p++, kp += FC_BC) {                                       \
            __m512bh k0 = (__m512bh)_mm512_loadu_si512(kp), k1 = (__m512bh)_mm512_loadu_si512(kp + 16); \
            PF                                                                                   \
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
/* Rows [i0, i1) (multiples of 2 apart) and keys [j_begin, j_end) of S (j_begin a multiple of 32;
 * whole 32-key blocks are written, so j_end rounds up to one, within the FC_BC keys of Kp), over
 * the pairs [p0, D2): from zero, or (acc) added to what S holds, in the same order as from zero. */
static inline void fc_qk_dpbf16_part(const uint32_t* Qp, ptrdiff_t i0, ptrdiff_t i1, ptrdiff_t D2, ptrdiff_t p0,
                                     const uint32_t* Kp, float* S, ptrdiff_t lds, ptrdiff_t j_begin,
                                     ptrdiff_t j_end, int acc) {
    for (ptrdiff_t j0 = j_begin; j0 < j_end; j0 += 32) {
        ptrdiff_t i = i0;
        for (; i + 8 <= i1; i += 8) FC_QK_DPBF16_BLOCK(8, )
        for (; i + 4 <= i1; i += 4) FC_QK_DPBF16_BLOCK(4, )
        for (; i < i1; i += 2) FC_QK_DPBF16_BLOCK(2, )
    }
}
/* The vdpbf16ps form of fc_qk_dpbf16 (fc_amx.h picks the form): every score from vdpbf16ps. */
static inline void fc_qk_dpbf16_vec(const uint32_t* Qp, ptrdiff_t nrows4, ptrdiff_t D2, const uint32_t* Kp,
                                    float* S, ptrdiff_t lds, ptrdiff_t ncols) {
    fc_qk_dpbf16_part(Qp, 0, nrows4, D2, 0, Kp, S, lds, 0, ncols, 0);
}
/* fc_qk_dpbf16_vec asking for pf's rows as it goes (fc_isa.h fc_pf_stream: a chunk's tiles on
 * fc_chunk_spread's CPUs), over the first half of its steps of pairs (fc_pf_per_step): the same
 * sums. */
#define FC_DPBF16_PF_STREAM fc_pf_steps(&pfl, per);
static inline void fc_qk_dpbf16_pf(const uint32_t* Qp, ptrdiff_t nrows4, ptrdiff_t D2, const uint32_t* Kp,
                                   float* S, ptrdiff_t lds, ptrdiff_t ncols, fc_pf_stream* pf) {
    const int acc = 0;
    const ptrdiff_t p0 = 0;
    ptrdiff_t blocks = nrows4 / 8 + nrows4 % 8 / 4 + nrows4 % 4 / 2;
    fc_pf_stream pfl = *pf;
    int per = fc_pf_per_step(&pfl, (ncols + 31) / 32 * blocks * D2);
    for (ptrdiff_t j0 = 0; j0 < ncols; j0 += 32) {
        ptrdiff_t i = 0;
        for (; i + 8 <= nrows4; i += 8) FC_QK_DPBF16_BLOCK(8, FC_DPBF16_PF_STREAM)
        for (; i + 4 <= nrows4; i += 4) FC_QK_DPBF16_BLOCK(4, FC_DPBF16_PF_STREAM)
        for (; i < nrows4; i += 2) FC_QK_DPBF16_BLOCK(2, FC_DPBF16_PF_STREAM)
    }
    *pf = pfl;
}

/* O += P V with P rounded to bf16 (the round_p mode): P's rows (float32, ldp apart, keys [0,
 * ncols), ncols <= FC_BC) rounded to nearest even by vcvtne2ps2bf16 into bf16 pairs of keys (Pp:
 * [nrows][FC_BC / 2] scratch, keys 2k low, 2k + 1 high, keys >= ncols zero), then per output
 * element one vdpbf16ps per key pair against V's pairs (Vp [FC_BC / 2][D], fc_pack_v_pairs_bf16),
 * pairs in order from O's value: float32 sums of exact products, in an order fixed by the shapes
 * only.  NRB rows x NV vectors of 16 columns per register block, the last vector masked to D. */
#define FC_PV_DPBF16_BLOCK(NRB, NV, PF)                                                          \
    {                                                                                            \
        __m512 a[NRB][NV];                                                                       \
        for (int r = 0; r < NRB; r++)                                                            \
            for (int v = 0; v < NV; v++)                                                         \
                a[r][v] = _mm512_maskz_loadu_ps(v == NV - 1 ? mlast : 0xffff, O + (i + r) * ldo + d0 + 16 * v); \
        const uint32_t* vp = Vp + d0;                                                            \
        for (ptrdiff_t k = 0; k < K2; k++, vp += D) {                                            \
            __m512bh w[NV];                                                                      \
            for (int v = 0; v < NV; v++)                                                         \
                w[v] = (__m512bh)_mm512_maskz_loadu_epi32(v == NV - 1 ? mlast : 0xffff, vp + 16 * v); \
            PF                                                                                   \
            for (int r = 0; r < NRB; r++) {                                                      \
                __m512bh pb = (__m512bh)_mm512_set1_epi32((int)Pp[(i + r) * (FC_BC / 2) + k]);   \
                for (int v = 0; v < NV; v++) a[r][v] = _mm512_dpbf16_ps(a[r][v], pb, w[v]);      \
            }                                                                                    \
        }                                                                                        \
        for (int r = 0; r < NRB; r++)                                                            \
            for (int v = 0; v < NV; v++)                                                         \
                _mm512_mask_storeu_ps(O + (i + r) * ldo + d0 + 16 * v, v == NV - 1 ? mlast : 0xffff, a[r][v]); \
    }
#define FC_PV_DPBF16_ROWS(NV, PF)                                                                \
    {                                                                                            \
        ptrdiff_t i = 0;                                                                         \
        for (; i + 4 <= nrows; i += 4) FC_PV_DPBF16_BLOCK(4, NV, PF)                             \
        for (; i < nrows; i++) FC_PV_DPBF16_BLOCK(1, NV, PF)                                     \
    }
/* A non-negative float32 weight about to be paired by vcvtne2ps2bf16 (round to nearest even, f32
 * subnormals read as zero) so that its product on vdpbf16ps is that of the weight rounded exactly
 * (fc_rbf16_exact_v): the integer rounding sends f32 subnormals from 0x007F8000 up to bf16's least
 * normal 2^-126, which vdpbf16ps reads as it is, and the smaller ones to bf16 subnormals, which it
 * reads as zero, as the instruction's own reading does.  So those become 2^-126 first. */
static inline __m512 fc_bf16_pair_exact(__m512 x) {
    __m512i u = _mm512_castps_si512(x);
    __mmask16 up = _mm512_cmplt_epu32_mask(_mm512_sub_epi32(u, _mm512_set1_epi32(0x007F8000)),
                                           _mm512_set1_epi32(0x8000));
    return _mm512_mask_mov_ps(x, up, _mm512_castsi512_ps(_mm512_set1_epi32(0x00800000)));
}
/* P's rows (float32, ldp apart, keys [0, ncols), ncols <= FC_BC) as bf16 pairs of keys, rounded to
 * nearest even by vcvtne2ps2bf16 (exact: see fc_pv_dpbf16_vec): Pp [nrows][FC_BC / 2], keys 2k
 * low, 2k + 1 high, keys >= ncols zero up to the next 32. */
static inline void fc_pair_p_bf16(const float* P, ptrdiff_t ldp, ptrdiff_t nrows, ptrdiff_t ncols, uint32_t* Pp,
                                  int exact) {
    for (ptrdiff_t r = 0; r < nrows; r++) {
        const float* p = P + r * ldp;
        uint32_t* pp = Pp + r * (FC_BC / 2);
        for (ptrdiff_t j = 0; j < ncols; j += 32) {
            ptrdiff_t n = ncols - j;
            __mmask16 m0 = n >= 16 ? 0xffff : (__mmask16)((1u << n) - 1);
            __mmask16 m1 = n >= 32 ? 0xffff : (n > 16 ? (__mmask16)((1u << (n - 16)) - 1) : 0);
            __m512 a = _mm512_maskz_loadu_ps(m0, p + j), b = _mm512_maskz_loadu_ps(m1, p + j + 16);
            if (exact) {
                a = fc_bf16_pair_exact(a);
                b = fc_bf16_pair_exact(b);
            }
            _mm512_storeu_si512(pp + j / 2, (__m512i)_mm512_cvtne2ps_pbh(b, a));
        }
    }
}
/* O += P V on P's and V's key pairs (Vp: fc_pack_v_pairs_bf16's), P paired into Pp as it goes.
 * exact: P holds the forward's non-negative float32 weights, not rounded yet: the pairing rounds
 * them to the exactly rounded weights' products (fc_bf16_pair_exact; the exp pass then skips its
 * integer rounding, a third of its instructions); else P's values pair as vcvtne2ps2bf16 reads
 * them (bf16 values already, or the backward's dS). */
#define FC_DEFINE_PV_DPBF16(NAME, PF, ENTER, LEAVE, ...)                                         \
static inline void NAME(const float* P, ptrdiff_t ldp, ptrdiff_t nrows, ptrdiff_t ncols, const uint32_t* Vp,  \
                        ptrdiff_t D, float* O, ptrdiff_t ldo, uint32_t* Pp, int exact __VA_ARGS__) {  \
    ptrdiff_t K2 = (ncols + 1) / 2;                                                              \
    fc_pair_p_bf16(P, ldp, nrows, ncols, Pp, exact);                                             \
    ENTER                                                                                        \
    for (ptrdiff_t d0 = 0; d0 < D; d0 += 64) {                                                   \
        ptrdiff_t w = D - d0 < 64 ? D - d0 : 64;                                                 \
        int nv = (int)((w + 15) / 16);                                                           \
        __mmask16 mlast = (w % 16) ? (__mmask16)((1u << (w % 16)) - 1) : 0xffff;                  \
        switch (nv) {                                                                            \
            case 4: FC_PV_DPBF16_ROWS(4, PF) break;                                              \
            case 3: FC_PV_DPBF16_ROWS(3, PF) break;                                              \
            case 2: FC_PV_DPBF16_ROWS(2, PF) break;                                              \
            default: FC_PV_DPBF16_ROWS(1, PF) break;                                             \
        }                                                                                        \
    }                                                                                            \
    LEAVE                                                                                        \
}
FC_DEFINE_PV_DPBF16(fc_pv_dpbf16_vec, , , , )
/* fc_pv_dpbf16_vec asking for pf's rows as it goes, as fc_qk_dpbf16_pf: the same sums. */
FC_DEFINE_PV_DPBF16(fc_pv_dpbf16_pf, FC_DPBF16_PF_STREAM,
                    fc_pf_stream pfl = *pf;
                    int per = fc_pf_per_step(&pfl, (D + 63) / 64 * (nrows / 4 + nrows % 4) * K2);,
                    *pf = pfl;, , fc_pf_stream* pf)
#else
#define FC_HAVE_DPBF16 0
static inline void fc_qk_dpbf16_vec(const uint32_t* Qp, ptrdiff_t nrows4, ptrdiff_t D2, const uint32_t* Kp,
                                float* S, ptrdiff_t lds, ptrdiff_t ncols) {
    (void)Qp; (void)nrows4; (void)D2; (void)Kp; (void)S; (void)lds; (void)ncols;  /* never called */
}
static inline void fc_pv_dpbf16_vec(const float* P, ptrdiff_t ldp, ptrdiff_t nrows, ptrdiff_t ncols,
                                    const uint32_t* Vp, ptrdiff_t D, float* O, ptrdiff_t ldo, uint32_t* Pp,
                                    int exact) {
    (void)P; (void)ldp; (void)nrows; (void)ncols; (void)Vp; (void)D; (void)O; (void)ldo; (void)Pp; (void)exact;  /* never called */
}
static inline void fc_qk_dpbf16_pf(const uint32_t* Qp, ptrdiff_t nrows4, ptrdiff_t D2, const uint32_t* Kp,
                                   float* S, ptrdiff_t lds, ptrdiff_t ncols, fc_pf_stream* pf) {
    (void)Qp; (void)nrows4; (void)D2; (void)Kp; (void)S; (void)lds; (void)ncols; (void)pf;  /* never called */
}
static inline void fc_pv_dpbf16_pf(const float* P, ptrdiff_t ldp, ptrdiff_t nrows, ptrdiff_t ncols,
                                   const uint32_t* Vp, ptrdiff_t D, float* O, ptrdiff_t ldo, uint32_t* Pp,
                                   int exact, fc_pf_stream* pf) {
    (void)P; (void)ldp; (void)nrows; (void)ncols; (void)Vp; (void)D; (void)O; (void)ldo; (void)Pp; (void)exact;
    (void)pf;  /* never called */
}
static inline void fc_qk_dpbf16_part(const uint32_t* Qp, ptrdiff_t i0, ptrdiff_t i1, ptrdiff_t D2, ptrdiff_t p0,
                                     const uint32_t* Kp, float* S, ptrdiff_t lds, ptrdiff_t j_begin,
                                     ptrdiff_t j_end, int acc) {
    (void)Qp; (void)i0; (void)i1; (void)D2; (void)p0; (void)Kp; (void)S; (void)lds; (void)j_begin; (void)j_end;
    (void)acc;  /* never called */
}
#endif

/* ---- The "math in T" bf16 GEMMs with the additions on vdpbf16ps (AVX512-BF16). ---------------
 * The accumulators stay packed bf16 (32 per register: a rounded sum is exactly a bf16 value), and
 * each step's addition a + R(p) runs on vdpbf16ps: vpermt2w pairs every accumulator (low half)
 * with its rounded product (high half) in one f32 lane, and the dot product of that pair with
 * (1, 1) from -0 is -0 + a*1 + p*1, where -0 + x is x exactly (+0 and -0 too) and the other
 * addition is the f32 a + p, whether the instruction rounds once or twice.  vcvtne2ps2bf16 then
 * rounds the 32 sums and leaves them packed for the next step.  Against the vaddps form
 * (fc_rbf16_cvt_v2 on the sums, whose vpermw spread them back to f32 lanes): the same bits, one
 * vpermt2w per 16 lanes instead of two vpermw, 20% less time per rounded multiply-add on Zen 4
 * (microbenchmark, 6 rows: 1.10 vs 1.38 ns).  vdpbf16ps reads bf16 subnormals as zero and flushes
 * f32 subnormal results, so this form runs under the same proof as the instruction rounding (no
 * f32 subnormal anywhere in the chain), and only on finite operands whose sums cannot overflow
 * (fc_bf16_dp_fits): which NaN an addition of two NaNs returns follows the operand order, which
 * the two forms do not share (measured: the sign of such NaNs differed), so neither inf nor NaN
 * may reach this form.  Which form runs is chosen per CPU: fc_bf16_form (fc_uarch.h). */
#if FC_HAVE_DPBF16
/* pairs (A[i], P[i]) for lanes 0..15 and (A[16 + i], P[16 + i]) for lanes 16..31, as vpermt2w
 * indices with P the first table and A the second (index + 32) */
static inline __m512i fc_bf16_pair_index(int half) {
    const __m512i lane = _mm512_set_epi16(15, 15, 14, 14, 13, 13, 12, 12, 11, 11, 10, 10, 9, 9, 8, 8,
                                          7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    const __m512i even_is_a = _mm512_set_epi16(0, 32, 0, 32, 0, 32, 0, 32, 0, 32, 0, 32, 0, 32, 0, 32,
                                               0, 32, 0, 32, 0, 32, 0, 32, 0, 32, 0, 32, 0, 32, 0, 32);
    return _mm512_add_epi16(_mm512_add_epi16(lane, even_is_a), _mm512_set1_epi16((short)(16 * half)));
}
#define FC_BF16_DP_CONSTS                                                                        \
    const __m512i pair0 = fc_bf16_pair_index(0), pair1 = fc_bf16_pair_index(1);                  \
    const __m512 negzero = _mm512_set1_ps(-0.0f);                                                \
    const __m512bh ones = (__m512bh)_mm512_set1_epi16(0x3f80);
/* A = R(A + R(p)) for 32 packed bf16 accumulators and two f32 vectors of exact products */
#define FC_BF16_DP_STEP(A, P0, P1)                                                               \
    {                                                                                            \
        __m512i pr = (__m512i)_mm512_cvtne2ps_pbh((__m512)(P1), (__m512)(P0));                    \
        __m512 s0 = _mm512_dpbf16_ps(negzero, (__m512bh)_mm512_permutex2var_epi16(pr, pair0, A), ones); \
        __m512 s1 = _mm512_dpbf16_ps(negzero, (__m512bh)_mm512_permutex2var_epi16(pr, pair1, A), ones); \
        A = (__m512i)_mm512_cvtne2ps_pbh(s1, s0);                                                 \
    }
/* 32 packed bf16 values stored as 32 floats; 32 floats that are bf16 values (not f32 subnormals)
 * packed, exactly */
static inline void fc_bf16_store32(__m512i A, float* x) {
    fc_store_f32(x, (fc_vec_f32)_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(A)), 16));
    fc_store_f32(x + FC_W32, (fc_vec_f32)_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(A, 1)), 16));
}
static inline __m512i fc_bf16_pack32(const float* x) {
    return (__m512i)_mm512_cvtne2ps_pbh((__m512)fc_load_f32(x + FC_W32), (__m512)fc_load_f32(x));
}

#define FC_DPQK_BLOCK(NRB)                                                                        \
    {                                                                                            \
        const float* q[NRB];                                                                     \
        __m512i a[NRB];                                                                          \
        for (int r = 0; r < NRB; r++) { q[r] = Q + (i + r) * D; a[r] = _mm512_setzero_si512(); } \
        const float* kp = Kt + j0;                                                               \
        for (ptrdiff_t d = 0; d < D; d++, kp += FC_BC) {                                         \
            fc_vec_f32 k0 = fc_load_f32(kp), k1 = fc_load_f32(kp + FC_W32);                      \
            for (int r = 0; r < NRB; r++) FC_BF16_DP_STEP(a[r], q[r][d] * k0, q[r][d] * k1)     \
        }                                                                                        \
        for (int r = 0; r < NRB; r++) fc_bf16_store32(a[r], S + (i + r) * lds + j0);             \
    }

#define FC_DPPV_BLOCK(NRB)                                                                        \
    {                                                                                            \
        const float* p[NRB];                                                                     \
        __m512i a[NRB];                                                                          \
        for (int r = 0; r < NRB; r++) {                                                          \
            p[r] = P + (i + r) * ldp;                                                            \
            a[r] = fc_bf16_pack32(O + (i + r) * ldo + d0);                                       \
        }                                                                                        \
        for (ptrdiff_t j = 0; j < ncols; j++) {                                                  \
            fc_vec_f32 v0 = fc_load_f32(vrows[j] + d0), v1 = fc_load_f32(vrows[j] + d0 + FC_W32); \
            for (int r = 0; r < NRB; r++) FC_BF16_DP_STEP(a[r], p[r][j] * v0, p[r][j] * v1)     \
        }                                                                                        \
        for (int r = 0; r < NRB; r++) fc_bf16_store32(a[r], O + (i + r) * ldo + d0);             \
    }

static inline void fc_qk_bf16_dp(const float* Q, ptrdiff_t nrows4, ptrdiff_t D, const float* Kt,
                                 float* S, ptrdiff_t lds, ptrdiff_t ncols) {
    FC_BF16_DP_CONSTS
    for (ptrdiff_t j0 = 0; j0 < ncols; j0 += 2 * FC_W32) {
        ptrdiff_t i = 0;
        for (; i + FC_NRB <= nrows4; i += FC_NRB) FC_DPQK_BLOCK(FC_NRB)
        for (; i + 4 <= nrows4; i += 4) FC_DPQK_BLOCK(4)
        for (; i < nrows4; i += 2) FC_DPQK_BLOCK(2)
    }
}
static inline void fc_pv_bf16_dp(const float* P, ptrdiff_t ldp, ptrdiff_t nrows4, ptrdiff_t ncols,
                                 float* const* vrows, ptrdiff_t D, float* O, ptrdiff_t ldo) {
    FC_BF16_DP_CONSTS
    ptrdiff_t d0 = 0;
    for (; d0 + 2 * FC_W32 <= D; d0 += 2 * FC_W32) {
        ptrdiff_t i = 0;
        for (; i + FC_NRB <= nrows4; i += FC_NRB) FC_DPPV_BLOCK(FC_NRB)
        for (; i + 4 <= nrows4; i += 4) FC_DPPV_BLOCK(4)
        for (; i < nrows4; i += 2) FC_DPPV_BLOCK(2)
    }
    fc_pv_tail_bf16(P, ldp, nrows4, ncols, vrows, d0, D, O, ldo);
}
#else
#define fc_qk_bf16_dp fc_qk_bf16_cvt
#define fc_pv_bf16_dp fc_pv_bf16_cvt
#endif

/* bf16 entry points: an instruction form when the operands' exponents rule out f32 subnormals
 * anywhere in the chain (the common case; the vdpbf16ps one where fc_bf16_form picks it and the
 * sums cannot overflow), the integer rounding otherwise. */
static inline void fc_qk_bf16(const float* Q, ptrdiff_t nrows4, ptrdiff_t D, const float* Kt,
                              float* S, ptrdiff_t lds, ptrdiff_t ncols) {
    if (FC_HAVE_BF16_CVT) {
        fc_exp_span q = fc_exp_span_new(), k = fc_exp_span_new();
        unsigned lq, hq, lk, hk;
        fc_exp_span_add(&q, Q, nrows4 * D);
        fc_exp_span_add(&k, Kt, D * FC_BC);
        fc_exp_span_fields(&q, &lq, &hq);
        fc_exp_span_fields(&k, &lk, &hk);
        if (lq + lk >= 142u) {
            if (fc_bf16_form == FC_BF16_FORM_VDPBF16PS && fc_bf16_dp_fits(0u, hq, hk, D))
                fc_qk_bf16_dp(Q, nrows4, D, Kt, S, lds, ncols);
            else
                fc_qk_bf16_cvt(Q, nrows4, D, Kt, S, lds, ncols);
            return;
        }
    }
    fc_qk_bf16_exact(Q, nrows4, D, Kt, S, lds, ncols);
}
static inline void fc_pv_bf16(const float* P, ptrdiff_t ldp, ptrdiff_t nrows4, ptrdiff_t ncols,
                              float* const* vrows, ptrdiff_t D, float* O, ptrdiff_t ldo) {
    if (FC_HAVE_BF16_CVT) {
        fc_exp_span p = fc_exp_span_new(), v = fc_exp_span_new(), o = fc_exp_span_new();
        unsigned lp, hp, lv, hv, lo, ho;
        for (ptrdiff_t i = 0; i < nrows4; i++) {
            fc_exp_span_add(&p, P + i * ldp, ncols);
            fc_exp_span_add(&o, O + i * ldo, D);
        }
        for (ptrdiff_t j = 0; j < ncols; j++) fc_exp_span_add(&v, vrows[j], D);
        fc_exp_span_fields(&p, &lp, &hp);
        fc_exp_span_fields(&v, &lv, &hv);
        fc_exp_span_fields(&o, &lo, &ho);
        if (lp + lv >= 142u && lo >= 8u) {
            if (fc_bf16_form == FC_BF16_FORM_VDPBF16PS && fc_bf16_dp_fits(ho, hp, hv, ncols))
                fc_pv_bf16_dp(P, ldp, nrows4, ncols, vrows, D, O, ldo);
            else
                fc_pv_bf16_cvt(P, ldp, nrows4, ncols, vrows, D, O, ldo);
            return;
        }
    }
    fc_pv_bf16_exact(P, ldp, nrows4, ncols, vrows, D, O, ldo);
}

#endif
