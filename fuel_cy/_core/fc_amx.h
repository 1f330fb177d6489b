/* The bf16 scores S = Q K^T of the float32-compute kernels (fc_qk_dpbf16: the mixed flash and
 * backward, S and dP), and the products with P and dS beside them (fc_pv_bf16v: the mixed flash's
 * O += P V and the backward's dQ = dS K; fc_tn_bf16t: the backward's dV = P^T dO and dK = dS^T Q),
 * in one of three forms (fc_uarch.h fc_bf16_scores_form picks one at load):
 *
 *   vdpbf16ps     every score from vdpbf16ps on zmm registers (fc_gemm.h fc_qk_dpbf16_vec).
 *   amx           AMX-BF16 tiles (Intel Sapphire Rapids and later): 32 x 32 blocks of S on four
 *                 16 x 16 float32 tiles, fed by two tiles of Q pairs (16 rows x 16 pairs, D2 apart)
 *                 and two of K pairs (16 pairs x 16 keys: Kp's own layout, pair rows FC_BC keys
 *                 apart, so K needs no other packing), over the pairs in chunks of 16.  What those
 *                 blocks leave goes to vdpbf16ps: the last D2 % 16 pairs (added to the tiles' sums),
 *                 the last ncols % 32 keys and the last nrows4 % 16 rows (a decode's few rows).
 *   amx-emulated  the same loops with the six tile instructions emulated in C on a per-thread tile
 *                 register file that checks every configuration and operand shape the way the
 *                 instructions fault on them: the tests run it on every AVX512-BF16 CPU, so the
 *                 tiling, strides, edges and configuration are checked where no AMX is at hand.
 *
 * Every form is a float32 sum of exact bf16 products, as the mixed contract asks ("scores ... in
 * f32"); they differ in the order of the sum only.  Which path an element takes follows from the
 * tile's rows, keys and D, never from the thread count, so each form is deterministic.  TDPBF16PS
 * reads bf16 subnormals as zero and flushes float32 subnormal results, as vdpbf16ps does; the order
 * in which one instruction accumulates its 32 products is the hardware's (Intel's documents describe
 * it two ways), so the emulation takes one reading (per pair, the even product then the odd one,
 * each a fused multiply-add into the sum), the tests pin the emulated form's bits to it and hold
 * the hardware's to the float32 error bound of the sum.
 *
 * Tiles are configured at each call and released at its end: another library in the same thread
 * (oneDNN under torch) configures its own between our calls, and a released tile state is not
 * saved on a context switch.  The instructions are inline assembly with "memory" clobbers (gcc's
 * _tile_loadd tells the compiler nothing about the memory it reads), assembled by any binutils that
 * knows AMX (2.36) and executed only where fc_uarch_init found the CPU, XCR0 and Linux's permission.
 * Hand-written; included (through fc_simd.h) by every CPU level's core module. */
#ifndef FUEL_CY_FC_AMX_H
#define FUEL_CY_FC_AMX_H
#include "fc_isa.h"
#include "fc_math.h"
#include "fc_uarch.h"    /* fc_bf16_scores_form, FC_HAVE_AMX */
#include "fc_gemm.h"     /* FC_HAVE_DPBF16, fc_qk_dpbf16_part, fc_qk_dpbf16_vec */
#include "fc_pack.h"     /* fc_pair_keys_bf16 */

/* what the emulated tile instructions found would have faulted on the hardware, and how many
 * tdpbf16ps they ran, for the tests */
static int fc_amx_emu_faults = 0;
static long fc_amx_emu_dps = 0;
static long fc_amx_emu_cfgs = 0;   /* ldtilecfg on the emulated form */
static long fc_amx_emu_paired = 0;   /* fc_pv_bf16_paired calls on the emulated form */

#define FC_AMX_PV_ROWS 64   /* query rows of one O += P V on the tiles (fc_pv_amx), at most */
#define FC_AMX_PV_COLS 64   /* columns of O per chunk there */
#define FC_AMX_TN_ROWS 64   /* query rows of one C^T += X^T P on the tiles (fc_tn_bf16t), at most */
#define FC_AMX_TN_KEYS 64   /* keys per chunk of P's terms */
/* Ct[d][j] += sum_r X[r][d] P[r][j] over rows [r0, r1), for columns d in [d0, d1) and keys j in
 * [j0, j1): the float32 part of the tile form of C^T += X^T P below (its edges, and the whole
 * product where no tile fits), one fused multiply-add per row in row order. */
static inline void fc_tn_part_f32(const float* P, ptrdiff_t ldp, ptrdiff_t r0, ptrdiff_t r1, ptrdiff_t j0,
                                  ptrdiff_t j1, const float* X, ptrdiff_t ldx, ptrdiff_t d0, ptrdiff_t d1,
                                  float* Ct, ptrdiff_t ldc) {
    for (ptrdiff_t d = d0; d < d1; d++)
        for (ptrdiff_t r = r0; r < r1; r++) {
            float x = X[r * ldx + d];
            const float* p = P + r * ldp;
            float* c = Ct + d * ldc;
            for (ptrdiff_t j = j0; j < j1; j++) c[j] = __builtin_fmaf(x, p[j], c[j]);
        }
}
/* the float32 form of the whole product (the form beside vdpbf16ps scores, for the tests: the
 * kernels keep fc_gemm_tn_f32 on an untransposed accumulator there) */
static inline void fc_tn_f32(const float* P, ptrdiff_t ldp, ptrdiff_t nrows, ptrdiff_t ncols, const float* X,
                             ptrdiff_t ldx, ptrdiff_t D, float* Ct, ptrdiff_t ldc, uint32_t* xt, int nterms) {
    (void)xt; (void)nterms;
    fc_tn_part_f32(P, ldp, 0, nrows, 0, ncols, X, ldx, 0, D, Ct, ldc);
}

/* O += P V by the float32 loops for what the tiles leave: V's float32 rows (V, ldv, vrows), or
 * (vrows16 not NULL) its bf16 rows where they are stored, widened in registers: the same sums in
 * the same order (fc_half.h fc_pv_h16 is fc_pv_f32's loop), so the same bits, with no float32
 * copy of V.  nrows4 % 4 == 0. */
static inline void fc_pv_edge_bf16v(const float* P, ptrdiff_t ldp, ptrdiff_t nrows4, ptrdiff_t ncols,
                                    const float* V, ptrdiff_t ldv, float* const* vrows,
                                    const uint16_t* const* vrows16, ptrdiff_t D, float* O, ptrdiff_t ldo) {
    if (vrows16) fc_pv_heads_h16(P, ldp, 1, nrows4, ncols, ncols, vrows16, D, O, ldo, 0);
    else fc_pv_contig_f32(P, ldp, nrows4, ncols, V, ldv, vrows, D, O, ldo);
}
/* A task's tile configuration, loaded once: ldtilecfg takes ~140 cycles (measured on the AMX Xeon,
 * family 6 model 167, with its tilerelease ~150), and a flash task on the tiles configured three
 * times per key tile (the scores, then P V per column chunk).  Between fc_amx_hold and
 * fc_amx_unhold (one task, one thread) the kernels configure the tiles only where this span has
 * not yet, and leave them configured; fc_amx_unhold releases them, so that no configuration
 * outlives the task (other code in these threads, torch's oneDNN, configures its own).  Outside a
 * span every kernel configures and releases as it always did.  Every kernel loads the same
 * configuration (fc_amx_config) and sets each accumulator it uses (zeroed or loaded) itself. */
/* One thread-local int, read once per check (a thread-local of a shared object costs a call to
 * find): FC_AMX_SPAN set while a span is open, bit 1 while the tiles are configured in it, bit 2
 * while the emulated ones are. */
#define FC_AMX_SPAN 4
static __thread int fc_amx_span = 0;
#define FC_AMX_HELD_CFG(bit, LOADCFG)                                                            \
    do {                                                                                         \
        int span_ = fc_amx_span;                                                                 \
        if ((span_ & (FC_AMX_SPAN | (bit))) != (FC_AMX_SPAN | (bit))) {                          \
            LOADCFG;                                                                             \
            fc_amx_span = span_ | (bit);                                                         \
        }                                                                                        \
    } while (0)
#define FC_AMX_HELD_RELEASE(bit, RELEASE)                                                        \
    do {                                                                                         \
        int span_ = fc_amx_span;                                                                 \
        if (!(span_ & FC_AMX_SPAN)) {                                                            \
            RELEASE;                                                                             \
            fc_amx_span = span_ & ~(bit);                                                        \
        }                                                                                        \
    } while (0)
static inline void fc_amx_hold(void) { fc_amx_span = FC_AMX_SPAN; }
#if FC_HAVE_DPBF16
/* ldtilecfg's 64-byte operand (palette 1: eight tiles of at most 16 rows x 64 bytes) */
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} __attribute__((aligned(64))) fc_tilecfg;
_Static_assert(sizeof(fc_tilecfg) == 64, "ldtilecfg reads 64 bytes");

/* tiles 0-3: S blocks (rows i, i + 16) x (keys j, j + 16); 4-5: Q pairs of rows i, i + 16; 6-7: K
 * pairs of keys j, j + 16.  Every tile 16 rows x 64 bytes (16 floats or 16 bf16 pairs). */
static const fc_tilecfg fc_amx_config = {1, 0, {0}, {64, 64, 64, 64, 64, 64, 64, 64}, {16, 16, 16, 16, 16, 16, 16, 16}};

/* Scores of rows [0, nrows4), keys [0, ncols) over the D2 pairs, with the tile instructions given
 * as macros of literal tile numbers (the hardware encodes them in the instruction). */
#define FC_DEFINE_QK_AMX(NAME, CFG, ZERO, LOAD, STORE, DP, RELEASE)                              \
static void NAME(const uint32_t* Qp, ptrdiff_t nrows4, ptrdiff_t D2, const uint32_t* Kp, float* S, \
                 ptrdiff_t lds, ptrdiff_t ncols) {                                               \
    ptrdiff_t rows_t = nrows4 / 16 * 16, cols_t = ncols / 32 * 32, pairs_t = D2 / 16 * 16;      \
    if (rows_t && cols_t && pairs_t) {                                                           \
        long sq = (long)(D2 * 4), sk = (long)(FC_BC * 4), ss = (long)(lds * 4);                 \
        CFG(&fc_amx_config);                                                                     \
        for (ptrdiff_t i = 0; i < rows_t; i += 32) {                                             \
            int two = i + 32 <= rows_t;                                                          \
            for (ptrdiff_t j = 0; j < cols_t; j += 32) {                                         \
                ZERO(0);                                                                         \
                ZERO(1);                                                                         \
                if (two) {                                                                       \
                    ZERO(2);                                                                     \
                    ZERO(3);                                                                     \
                }                                                                                \
                for (ptrdiff_t p = 0; p < pairs_t; p += 16) {                                    \
                    LOAD(6, Kp + p * FC_BC + j, sk);                                             \
                    LOAD(7, Kp + p * FC_BC + j + 16, sk);                                        \
                    LOAD(4, Qp + i * D2 + p, sq);                                                \
                    DP(0, 4, 6);                                                                 \
                    DP(1, 4, 7);                                                                 \
                    if (two) {                                                                   \
                        LOAD(5, Qp + (i + 16) * D2 + p, sq);                                     \
                        DP(2, 5, 6);                                                             \
                        DP(3, 5, 7);                                                             \
                    }                                                                            \
                }                                                                                \
                STORE(0, S + i * lds + j, ss);                                                   \
                STORE(1, S + i * lds + j + 16, ss);                                              \
                if (two) {                                                                       \
                    STORE(2, S + (i + 16) * lds + j, ss);                                        \
                    STORE(3, S + (i + 16) * lds + j + 16, ss);                                   \
                }                                                                                \
            }                                                                                    \
        }                                                                                        \
        RELEASE();                                                                               \
        if (pairs_t < D2) fc_qk_dpbf16_part(Qp, 0, rows_t, D2, pairs_t, Kp, S, lds, 0, cols_t, 1); \
    } else {                                                                                     \
        rows_t = 0;                                                                              \
    }                                                                                            \
    if (cols_t < ncols) fc_qk_dpbf16_part(Qp, 0, rows_t, D2, 0, Kp, S, lds, cols_t, ncols, 0);   \
    if (rows_t < nrows4) fc_qk_dpbf16_part(Qp, rows_t, nrows4, D2, 0, Kp, S, lds, 0, ncols, 0);  \
}

/* O += P V on the tiles, for float32 P and bf16-valued V (float32 rows: vrows[j] is key j's row):
 * P is split exactly into three bf16 terms, p = p1 + p2 + p3 (p1 = bf16(p), p2 = bf16(p - p1),
 * p3 = p - p1 - p2: each difference is exact, and the 24 bits of p fit in three 8-bit terms; the
 * conversion reads float32 subnormals as zero, so a remainder below 2^-126 is dropped, which only
 * |p| < ~2^-110 can leave), so
 * every product of a term with V is exact and the sums are float32 sums, as for the scores.  Per
 * 32 keys (16 pairs), the three terms in turn.  Rows in whole 16-row tiles (at most
 * FC_AMX_PV_ROWS), keys in whole 32-key blocks and columns in whole 16-column tiles go to the tiles,
 * in column chunks of FC_AMX_PV_COLS; the rest to the float32 loops (fc_pv_contig_f32), whose sums
 * are the float32 kernel's.  V's keys are paired for the tiles per call and column chunk, or come
 * paired already (vpairs: [FC_BC / 2][D], fc_pack.h fc_pack_v_pairs_bf16, once per kv head); the
 * same sums either way. */
/* 32 floats of P -> 16 bf16 pairs of each of its first nterms terms (pairs: key 2k low, 2k + 1
 * high; out[t] for term t): three give P exactly, one where P holds bf16 values (round_p) */
static inline void fc_split_bf16(const float* p, int nterms, uint32_t* const* out) {
    __m512 a = _mm512_loadu_ps(p), b = _mm512_loadu_ps(p + 16);
    for (int t = 0; t < nterms; t++) {
        __m512bh h = _mm512_cvtne2ps_pbh(b, a);   /* a's 16 in the low half */
        _mm512_storeu_si512(out[t], (__m512i)h);
        if (t + 1 == nterms) break;
        a = _mm512_sub_ps(a, _mm512_cvtpbh_ps((__m256bh)_mm512_castsi512_si256((__m512i)h)));
        b = _mm512_sub_ps(b, _mm512_cvtpbh_ps((__m256bh)_mm512_extracti64x4_epi64((__m512i)h, 1)));
    }
}
/* OP (LOAD or STORE) on the float32 tiles 0-3 of a 32 x 32 block at C (rows ld floats, stride
 * bytes apart): tile 1 only with a second column tile, 2 with a second row tile, 3 with both */
#define FC_AMX_C_BLOCK(OP, C, ld, stride, two_rows, two_cols)                                     \
    do {                                                                                         \
        OP(0, C, stride);                                                                        \
        if (two_cols) OP(1, (C) + 16, stride);                                                   \
        if (two_rows) OP(2, (C) + 16 * (ld), stride);                                            \
        if ((two_rows) && (two_cols)) OP(3, (C) + 16 * (ld) + 16, stride);                       \
    } while (0)
/* the products of a block's 16 pairs with B: tiles 6 (and 7, with a second column tile) loaded
 * from B (and B + 16), rows stride bytes apart, multiplied into tiles 0-3 by the A tiles 4 (and 5,
 * with a second row tile) */
#define FC_AMX_B_PRODUCTS(LOAD, DP, B, stride, two_rows, two_cols)                              \
    do {                                                                                         \
        LOAD(6, B, stride);                                                                      \
        if (two_cols) LOAD(7, (B) + 16, stride);                                                 \
        DP(0, 4, 6);                                                                             \
        if (two_cols) DP(1, 4, 7);                                                               \
        if (two_rows) {                                                                          \
            DP(2, 5, 6);                                                                         \
            if (two_cols) DP(3, 5, 7);                                                           \
        }                                                                                        \
    } while (0)
/* the products of a block's 16 pairs with A: tile 4 (and 5, with a second row tile) loaded from A
 * (and A + 16 rows of lda words), rows stride bytes apart, multiplied into tiles 0-3 by the B
 * tiles 6 (and 7, with a second column tile) */
#define FC_AMX_A_PRODUCTS(LOAD, DP, A, lda, stride, two_rows, two_cols)                         \
    do {                                                                                         \
        LOAD(4, A, stride);                                                                      \
        DP(0, 4, 6);                                                                             \
        if (two_cols) DP(1, 4, 7);                                                               \
        if (two_rows) {                                                                          \
            LOAD(5, (A) + 16 * (lda), stride);                                                   \
            DP(2, 5, 6);                                                                         \
            if (two_cols) DP(3, 5, 7);                                                           \
        }                                                                                        \
    } while (0)
/* One key chunk of C^T += X^T P on the tiles (fc_tn_amx, fc_f16_tiles.h fc_tn_f16s_amx): per 32 x 32
 * block of Ct (columns d of X, keys j of the chunk: w keys, from key j0), the A tiles from xt
 * (column d's kx words, per 16 of them) against each of the nterms B planes (plane words apart,
 * rows of w words), then the block stored back. */
#define FC_AMX_TN_CHUNK(LOAD, STORE, DP, xt, kx, terms, plane, nterms, w, j0, d_t, Ct, ldc)       \
    do {                                                                                         \
        long sx_ = (long)((kx) * 4), sw_ = (long)((w) * 4), sc_ = (long)((ldc) * 4);             \
        for (ptrdiff_t d = 0; d < (d_t); d += 32) {                                              \
            int twod = d + 32 <= (d_t);                                                          \
            for (ptrdiff_t j = 0; j < (w); j += 32) {                                            \
                int twoc = j + 32 <= (w);                                                        \
                float* c = (Ct) + d * (ldc) + (j0) + j;                                          \
                FC_AMX_C_BLOCK(LOAD, c, ldc, sc_, twod, twoc);                                   \
                for (ptrdiff_t k = 0; k < (kx); k += 16) {                                       \
                    LOAD(4, (xt) + d * (kx) + k, sx_);                                           \
                    if (twod) LOAD(5, (xt) + (d + 16) * (kx) + k, sx_);                          \
                    for (int t = 0; t < (nterms); t++)                                           \
                        FC_AMX_B_PRODUCTS(LOAD, DP, (terms) + t * (plane) + k * (w) + j, sw_, twod, twoc); \
                }                                                                                \
                FC_AMX_C_BLOCK(STORE, c, ldc, sc_, twod, twoc);                                  \
            }                                                                                    \
        }                                                                                        \
    } while (0)
#define FC_DEFINE_PV_AMX(NAME, CFG, ZERO, LOAD, STORE, DP, RELEASE)                              \
static void NAME(const float* P, ptrdiff_t ldp, ptrdiff_t nrows4, ptrdiff_t ncols, const float* V,  \
                 ptrdiff_t ldv, float* const* vrows, ptrdiff_t D, float* O, ptrdiff_t ldo,      \
                 const uint32_t* vpairs, int nterms, const uint32_t* pt, ptrdiff_t ldpt,         \
                 const uint16_t* const* vrows16) {                                               \
    ptrdiff_t rows_t = nrows4 / 16 * 16, keys_t = ncols / 32 * 32, cols_t = D / 16 * 16;        \
    if (!rows_t || !keys_t || !cols_t || rows_t > FC_AMX_PV_ROWS || ncols > FC_BC) {             \
        fc_pv_edge_bf16v(P, ldp, nrows4, ncols, V, ldv, vrows, vrows16, D, O, ldo);              \
        return;                                                                                  \
    }                                                                                            \
    ptrdiff_t kp_n = keys_t / 2;                       /* key pairs */                          \
    uint32_t terms[3][FC_AMX_PV_ROWS * FC_BC / 2];     /* [term][row][pair] */                  \
    uint32_t vp[FC_BC / 2 * FC_AMX_PV_COLS];           /* [pair][column of the chunk] */        \
    const uint32_t* tb[3] = {terms[0], terms[1], terms[2]};                                     \
    ptrdiff_t tld = kp_n;                                                                        \
    if (pt) {                                          /* P's one term, paired by the exp pass */ \
        tb[0] = pt;                                                                              \
        tld = ldpt;                                                                              \
        nterms = 1;                                                                              \
    } else {                                                                                     \
        for (ptrdiff_t r = 0; r < rows_t; r++)                                                   \
            for (ptrdiff_t j = 0; j < keys_t; j += 32) {                                         \
                uint32_t* out[3] = {terms[0] + r * kp_n + j / 2, terms[1] + r * kp_n + j / 2,    \
                                    terms[2] + r * kp_n + j / 2};                                \
                fc_split_bf16(P + r * ldp + j, nterms, out);                                     \
            }                                                                                    \
    }                                                                                            \
    long sa = (long)(tld * 4), so = (long)(ldo * 4);                                             \
    for (ptrdiff_t c0 = 0; c0 < cols_t; c0 += FC_AMX_PV_COLS) {                                  \
        ptrdiff_t w = cols_t - c0 < FC_AMX_PV_COLS ? cols_t - c0 : FC_AMX_PV_COLS;              \
        const uint32_t* vb = vpairs ? vpairs + c0 : vp;                                          \
        ptrdiff_t ldvp = vpairs ? D : w;                                                         \
        if (!vpairs)                                                                             \
            for (ptrdiff_t k = 0; k < kp_n; k++)                                                 \
                for (ptrdiff_t d = 0; d < w; d += 16)                                            \
                    fc_pair_keys_bf16(vrows[2 * k] + c0 + d, vrows[2 * k + 1] + c0 + d, vp + k * w + d); \
        long sv = (long)(ldvp * 4);                                                              \
        CFG(&fc_amx_config);                                                                     \
        for (ptrdiff_t i = 0; i < rows_t; i += 32) {                                             \
            int two = i + 32 <= rows_t;                                                          \
            for (ptrdiff_t d = 0; d < w; d += 32) {                                              \
                int twoc = d + 32 <= w;                                                          \
                float* o = O + i * ldo + c0 + d;                                                 \
                FC_AMX_C_BLOCK(LOAD, o, ldo, so, two, twoc);                                     \
                for (ptrdiff_t k = 0; k < kp_n; k += 16) {                                       \
                    LOAD(6, vb + k * ldvp + d, sv);                                              \
                    if (twoc) LOAD(7, vb + k * ldvp + d + 16, sv);                               \
                    for (int t = 0; t < nterms; t++)                                             \
                        FC_AMX_A_PRODUCTS(LOAD, DP, tb[t] + i * tld + k, tld, sa, two, twoc);    \
                }                                                                                \
                FC_AMX_C_BLOCK(STORE, o, ldo, so, two, twoc);                                    \
            }                                                                                    \
        }                                                                                        \
        RELEASE();                                                                               \
    }                                                                                            \
    if (keys_t < ncols)                                                                          \
        fc_pv_edge_bf16v(P + keys_t, ldp, rows_t, ncols - keys_t, V ? V + keys_t * ldv : NULL, ldv,  \
                         vrows ? vrows + keys_t : NULL, vrows16 ? vrows16 + keys_t : NULL, cols_t, O, ldo); \
    if (cols_t < D) {                                                                            \
        float* vr[FC_BC];                                                                        \
        const uint16_t* vr16[FC_BC];                                                             \
        for (ptrdiff_t j = 0; j < ncols; j++) {                                                  \
            if (vrows) vr[j] = vrows[j] + cols_t;                                                \
            if (vrows16) vr16[j] = vrows16[j] + cols_t;                                          \
        }                                                                                        \
        fc_pv_edge_bf16v(P, ldp, rows_t, ncols, V ? V + cols_t : NULL, ldv, vr, vrows16 ? vr16 : NULL, \
                         D - cols_t, O + cols_t, ldo);                                           \
    }                                                                                            \
    if (rows_t < nrows4)                                                                         \
        fc_pv_edge_bf16v(P + rows_t * ldp, ldp, nrows4 - rows_t, ncols, V, ldv, vrows, vrows16, D,  \
                         O + rows_t * ldo, ldo);                                                 \
}

/* C^T += X^T P for the mixed backward's dV += P^T dO and dK += dS^T Q, with the accumulator held
 * transposed (Ct[d][j], rows ldc apart): then both tile operands come in the tile layout without
 * transposing P or dS.  X (dO or Q: bf16-valued float32 rows, ldx apart) pairs query rows 2k and
 * 2k + 1 per column d (built once per call in xt, at most D * FC_AMX_TN_ROWS / 2 words); P (or dS,
 * float32 rows ldp apart) is split exactly into three bf16 terms as above, rows 2k and 2k + 1 paired
 * per key, which is the layout tdpbf16ps takes for its second operand.  Per element the sum runs
 * over the query rows in blocks of 32, the three terms of each block in turn.  Rows in whole 32-row
 * blocks (at most FC_AMX_TN_ROWS), columns d in whole 16-column tiles and keys in whole 16-key tiles
 * (in chunks of FC_AMX_TN_KEYS) go to the tiles; the rest to fc_tn_part_f32, which adds the last
 * rows to the tiles' sums and computes the other elements whole. */
/* 16 keys of rows a and b (rows 2k and 2k + 1) -> 16 bf16 pairs of each of their first nterms
 * terms (out[t] for term t) */
static inline void fc_split_pair_bf16(const float* a, const float* b, int nterms, uint32_t* const* out) {
    __m512 x = _mm512_loadu_ps(a), y = _mm512_loadu_ps(b);
    for (int t = 0; t < nterms; t++) {
        __m512 hx = _mm512_cvtpbh_ps(_mm512_cvtneps_pbh(x)), hy = _mm512_cvtpbh_ps(_mm512_cvtneps_pbh(y));
        _mm512_storeu_si512(out[t], _mm512_or_si512(_mm512_srli_epi32(_mm512_castps_si512(hx), 16),
                                                    _mm512_and_si512(_mm512_castps_si512(hy),
                                                                     _mm512_set1_epi32((int)0xffff0000u))));
        if (t + 1 == nterms) break;
        x = _mm512_sub_ps(x, hx);
        y = _mm512_sub_ps(y, hy);
    }
}
#define FC_DEFINE_TN_AMX(NAME, CFG, ZERO, LOAD, STORE, DP, RELEASE)                              \
static void NAME(const float* P, ptrdiff_t ldp, ptrdiff_t nrows, ptrdiff_t ncols, const float* X,  \
                 ptrdiff_t ldx, ptrdiff_t D, float* Ct, ptrdiff_t ldc, uint32_t* xt, int nterms) { \
    ptrdiff_t rows_t = nrows / 32 * 32, keys_t = ncols / 16 * 16, d_t = D / 16 * 16;            \
    if (rows_t > FC_AMX_TN_ROWS) rows_t = FC_AMX_TN_ROWS;                                        \
    if (!rows_t || !keys_t || !d_t) {                                                            \
        fc_tn_part_f32(P, ldp, 0, nrows, 0, ncols, X, ldx, 0, D, Ct, ldc);                       \
        return;                                                                                  \
    }                                                                                            \
    ptrdiff_t kp = rows_t / 2;                                                                   \
    fc_pair_rows_t_bf16(X, ldx, rows_t, d_t, xt);   /* xt[d * kp + k] */                         \
    enum { plane = FC_AMX_TN_ROWS / 2 * FC_AMX_TN_KEYS };                                       \
    uint32_t terms[3 * plane];                     /* [term][pair][key of the chunk] */          \
    CFG(&fc_amx_config);                                                                         \
    for (ptrdiff_t j0 = 0; j0 < keys_t; j0 += FC_AMX_TN_KEYS) {                                  \
        ptrdiff_t w = keys_t - j0 < FC_AMX_TN_KEYS ? keys_t - j0 : FC_AMX_TN_KEYS;              \
        for (ptrdiff_t k = 0; k < kp; k++)                                                       \
            for (ptrdiff_t j = 0; j < w; j += 16) {                                              \
                uint32_t* out[3] = {terms + k * w + j, terms + plane + k * w + j, terms + 2 * plane + k * w + j}; \
                fc_split_pair_bf16(P + 2 * k * ldp + j0 + j, P + (2 * k + 1) * ldp + j0 + j, nterms, out); \
            }                                                                                    \
        FC_AMX_TN_CHUNK(LOAD, STORE, DP, xt, kp, terms, plane, nterms, w, j0, d_t, Ct, ldc);      \
    }                                                                                            \
    RELEASE();                                                                                   \
    if (rows_t < nrows) fc_tn_part_f32(P, ldp, rows_t, nrows, 0, keys_t, X, ldx, 0, d_t, Ct, ldc); \
    if (keys_t < ncols) fc_tn_part_f32(P, ldp, 0, nrows, keys_t, ncols, X, ldx, 0, d_t, Ct, ldc); \
    if (d_t < D) fc_tn_part_f32(P, ldp, 0, nrows, 0, ncols, X, ldx, d_t, D, Ct, ldc);            \
}

/* ---- the emulated tile instructions ---------------------------------------------------------- */
typedef struct {
    uint32_t t[8][16][16];
    fc_tilecfg cfg;
    int loaded;
} fc_amx_emu_regs;
static __thread fc_amx_emu_regs fc_amx_emu;

static inline void fc_amx_emu_fault(void) { __atomic_fetch_add(&fc_amx_emu_faults, 1, __ATOMIC_RELAXED); }
/* ldtilecfg: palette 1, no start row, reserved bytes and tiles 8-15 zero, each tile within 16 rows
 * x 64 bytes and either configured in both fields or in neither (else #GP); loads zeroed tiles. */
static inline void fc_amx_emu_cfg(const fc_tilecfg* c) {
    __atomic_fetch_add(&fc_amx_emu_cfgs, 1, __ATOMIC_RELAXED);
    int ok = c->palette == 1 && c->start_row == 0;
    for (int b = 0; b < 14; b++) ok &= c->reserved[b] == 0;
    for (int t = 0; t < 16; t++) {
        if (t >= 8) ok &= c->colsb[t] == 0 && c->rows[t] == 0;
        else ok &= c->rows[t] <= 16 && c->colsb[t] <= 64 && (c->rows[t] == 0) == (c->colsb[t] == 0);
    }
    memset(fc_amx_emu.t, 0, sizeof fc_amx_emu.t);
    fc_amx_emu.loaded = ok;
    if (!ok) {
        fc_amx_emu_fault();
        return;
    }
    fc_amx_emu.cfg = *c;
}
/* a tile instruction on tile t needs a loaded configuration that configures t (else #UD) */
static inline int fc_amx_emu_tile(int t) {
    int ok = fc_amx_emu.loaded && t >= 0 && t < 8 && fc_amx_emu.cfg.rows[t] > 0;
    if (!ok) fc_amx_emu_fault();
    return ok;
}
static inline void fc_amx_emu_zero(int t) {
    if (fc_amx_emu_tile(t)) memset(fc_amx_emu.t[t], 0, sizeof fc_amx_emu.t[t]);
}
/* tileloadd: the configured rows x colsb bytes, row r from base + r * stride; the rest of the tile
 * zeroed */
static inline void fc_amx_emu_load(int t, const void* base, long stride) {
    if (!fc_amx_emu_tile(t)) return;
    memset(fc_amx_emu.t[t], 0, sizeof fc_amx_emu.t[t]);
    for (int r = 0; r < fc_amx_emu.cfg.rows[t]; r++)
        memcpy(fc_amx_emu.t[t][r], (const char*)base + r * stride, fc_amx_emu.cfg.colsb[t]);
}
static inline void fc_amx_emu_store(int t, void* base, long stride) {
    if (!fc_amx_emu_tile(t)) return;
    for (int r = 0; r < fc_amx_emu.cfg.rows[t]; r++)
        memcpy((char*)base + r * stride, fc_amx_emu.t[t][r], fc_amx_emu.cfg.colsb[t]);
}
static inline float fc_bf16_daz(uint32_t h) { return fc_bf16_bits_to_f32((uint16_t)((h & 0x7f80u) ? h : h & 0x8000u)); }
static inline float fc_f32_ftz(float x) {
    uint32_t u = fc_f2u(x);
    return (u & 0x7f800000u) ? x : fc_u2f(u & 0x80000000u);
}
/* tdpbf16ps c += a b: #UD unless the three tiles differ and their shapes agree (a: M x K pairs,
 * b: K x N pairs, c: M x N floats); per element, per pair, the even product then the odd one, each
 * a fused multiply-add with bf16 subnormals read as zero and float32 subnormals flushed. */
static inline void fc_amx_emu_dp(int c, int a, int b) {
    if (!(fc_amx_emu_tile(c) & fc_amx_emu_tile(a) & fc_amx_emu_tile(b))) return;
    const fc_tilecfg* g = &fc_amx_emu.cfg;
    if (c == a || c == b || a == b || g->rows[a] != g->rows[c] || g->colsb[b] != g->colsb[c] ||
        g->colsb[a] != 4 * g->rows[b] || g->colsb[a] % 4 || g->colsb[c] % 4) {
        fc_amx_emu_fault();
        return;
    }
    __atomic_fetch_add(&fc_amx_emu_dps, 1, __ATOMIC_RELAXED);
    for (int m = 0; m < g->rows[c]; m++)
        for (int n = 0; n < g->colsb[c] / 4; n++) {
            float acc = fc_u2f(fc_amx_emu.t[c][m][n]);
            for (int k = 0; k < g->rows[b]; k++) {
                uint32_t x = fc_amx_emu.t[a][m][k], y = fc_amx_emu.t[b][k][n];
                acc = fc_f32_ftz(__builtin_fmaf(fc_bf16_daz(x & 0xffffu), fc_bf16_daz(y & 0xffffu), acc));
                acc = fc_f32_ftz(__builtin_fmaf(fc_bf16_daz(x >> 16), fc_bf16_daz(y >> 16), acc));
            }
            fc_amx_emu.t[c][m][n] = fc_f2u(acc);
        }
}
static inline void fc_amx_emu_release(void) {
    fc_amx_emu.loaded = 0;
    memset(fc_amx_emu.t, 0, sizeof fc_amx_emu.t);
}
#define FC_AMX_EMU_CFG(c) FC_AMX_HELD_CFG(2, fc_amx_emu_cfg(c))
#define FC_AMX_EMU_ZERO(t) fc_amx_emu_zero(t)
#define FC_AMX_EMU_LOAD(t, base, stride) fc_amx_emu_load(t, base, stride)
#define FC_AMX_EMU_STORE(t, base, stride) fc_amx_emu_store(t, base, stride)
#define FC_AMX_EMU_DP(c, a, b) fc_amx_emu_dp(c, a, b)
#define FC_AMX_EMU_RELEASE() FC_AMX_HELD_RELEASE(2, fc_amx_emu_release())
FC_DEFINE_QK_AMX(fc_qk_amx_emulated, FC_AMX_EMU_CFG, FC_AMX_EMU_ZERO, FC_AMX_EMU_LOAD, FC_AMX_EMU_STORE,
                 FC_AMX_EMU_DP, FC_AMX_EMU_RELEASE)
FC_DEFINE_PV_AMX(fc_pv_amx_emulated, FC_AMX_EMU_CFG, FC_AMX_EMU_ZERO, FC_AMX_EMU_LOAD, FC_AMX_EMU_STORE,
                 FC_AMX_EMU_DP, FC_AMX_EMU_RELEASE)
FC_DEFINE_TN_AMX(fc_tn_amx_emulated, FC_AMX_EMU_CFG, FC_AMX_EMU_ZERO, FC_AMX_EMU_LOAD, FC_AMX_EMU_STORE,
                 FC_AMX_EMU_DP, FC_AMX_EMU_RELEASE)

/* ---- the tile instructions themselves (AT&T operand order: sources first) --------------------- */
#if FC_HAVE_AMX
#define FC_AMX_CFG(c) FC_AMX_HELD_CFG(1, __asm__ volatile("ldtilecfg %0" ::"m"(*(const fc_tilecfg*)(c)) : "memory"))
#define FC_AMX_ZERO(t) __asm__ volatile("tilezero %%tmm" #t ::)
#define FC_AMX_LOAD(t, base, stride) \
    __asm__ volatile("tileloadd (%0,%1,1), %%tmm" #t ::"r"((const void*)(base)), "r"((long)(stride)) : "memory")
#define FC_AMX_STORE(t, base, stride) \
    __asm__ volatile("tilestored %%tmm" #t ", (%0,%1,1)" ::"r"((void*)(base)), "r"((long)(stride)) : "memory")
#define FC_AMX_DP(c, a, b) __asm__ volatile("tdpbf16ps %%tmm" #b ", %%tmm" #a ", %%tmm" #c ::)
#define FC_AMX_RELEASE() FC_AMX_HELD_RELEASE(1, __asm__ volatile("tilerelease" ::: "memory"))
FC_DEFINE_QK_AMX(fc_qk_amx, FC_AMX_CFG, FC_AMX_ZERO, FC_AMX_LOAD, FC_AMX_STORE, FC_AMX_DP, FC_AMX_RELEASE)
FC_DEFINE_PV_AMX(fc_pv_amx, FC_AMX_CFG, FC_AMX_ZERO, FC_AMX_LOAD, FC_AMX_STORE, FC_AMX_DP, FC_AMX_RELEASE)
FC_DEFINE_TN_AMX(fc_tn_amx, FC_AMX_CFG, FC_AMX_ZERO, FC_AMX_LOAD, FC_AMX_STORE, FC_AMX_DP, FC_AMX_RELEASE)
#endif
#endif   /* FC_HAVE_DPBF16 */
/* whether this thread's emulated tiles are configured (a testing hook's question) */
static inline int fc_amx_emu_configured(void) {
#if FC_HAVE_DPBF16
    return fc_amx_emu.loaded;
#else
    return 0;
#endif
}
/* the end of a span opened by fc_amx_hold: what it configured, released */
static inline void fc_amx_unhold(void) {
#if FC_HAVE_DPBF16
#if FC_HAVE_AMX
    if (fc_amx_span & 1) __asm__ volatile("tilerelease" ::: "memory");
#endif
    if (fc_amx_span & 2) fc_amx_emu_release();
#endif
    fc_amx_span = 0;
}

/* The float32 loops with fc_pv_amx's arguments (V's pairs, if any, are for the tiles only) */
static inline void fc_pv_loops_bf16v(const float* P, ptrdiff_t ldp, ptrdiff_t nrows4, ptrdiff_t ncols,
                                     const float* V, ptrdiff_t ldv, float* const* vrows, ptrdiff_t D, float* O,
                                     ptrdiff_t ldo, const uint32_t* vpairs, int nterms, const uint32_t* pt,
                                     ptrdiff_t ldpt, const uint16_t* const* vrows16) {
    (void)vpairs; (void)nterms; (void)pt; (void)ldpt;
    fc_pv_edge_bf16v(P, ldp, nrows4, ncols, V, ldv, vrows, vrows16, D, O, ldo);
}

/* Runs the tile form of a product (AMX or EMULATED, with ARGS) where the CPU takes it, else VEC:
 * the scores and P V switch together. */
#if FC_HAVE_DPBF16 && FC_HAVE_AMX
#define FC_BY_SCORES_FORM(AMX, EMULATED, VEC, ARGS)                                             \
    if (fc_bf16_scores_form == FC_SCORES_AMX) AMX ARGS;                                          \
    else if (fc_bf16_scores_form == FC_SCORES_AMX_EMULATED) EMULATED ARGS;                       \
    else VEC ARGS
#elif FC_HAVE_DPBF16
#define FC_BY_SCORES_FORM(AMX, EMULATED, VEC, ARGS)                                             \
    if (fc_bf16_scores_form == FC_SCORES_AMX_EMULATED) EMULATED ARGS;                            \
    else VEC ARGS
#else
#define FC_BY_SCORES_FORM(AMX, EMULATED, VEC, ARGS) VEC ARGS
#endif

/* S = Q K^T for bf16 pairs Qp [nrows4][D2] and Kp [D2][FC_BC] (fc_gemm.h), in the form this CPU
 * takes.  Never called at a level without AVX512-BF16 (the kernels take the float32 loops there). */
static inline void fc_qk_dpbf16(const uint32_t* Qp, ptrdiff_t nrows4, ptrdiff_t D2, const uint32_t* Kp,
                                float* S, ptrdiff_t lds, ptrdiff_t ncols) {
    FC_BY_SCORES_FORM(fc_qk_amx, fc_qk_amx_emulated, fc_qk_dpbf16_vec, (Qp, nrows4, D2, Kp, S, lds, ncols));
}

/* O += P V of the mixed bf16 flash (V's rows hold bf16 values), in the form this CPU takes: the
 * float32 loops (the float32 kernel's sums) beside vdpbf16ps scores, the tiles beside tile scores.
 * nterms: 3 for a float32 P (its exact split); 1 where P holds bf16 values already (round_p: the
 * one term is P itself, one tile product per block). */
static inline void fc_pv_bf16v(const float* P, ptrdiff_t ldp, ptrdiff_t nrows4, ptrdiff_t ncols, const float* V,
                               ptrdiff_t ldv, float* const* vrows, ptrdiff_t D, float* O, ptrdiff_t ldo,
                               const uint32_t* vpairs, int nterms) {
    FC_BY_SCORES_FORM(fc_pv_amx, fc_pv_amx_emulated, fc_pv_loops_bf16v,
                      (P, ldp, nrows4, ncols, V, ldv, vrows, D, O, ldo, vpairs, nterms, NULL, 0, NULL));
}
/* fc_pv_bf16v on the tiles with V in its bf16 storage: its pairs (vpairs, required) for the tiles
 * and its rows (vrows16) for what they leave, never a float32 copy.  Only where the bf16 products
 * take the tiles (fc_bf16_on_tiles). */
static inline void fc_pv_bf16v16(const float* P, ptrdiff_t ldp, ptrdiff_t nrows4, ptrdiff_t ncols,
                                 const uint16_t* const* vrows16, ptrdiff_t D, float* O, ptrdiff_t ldo,
                                 const uint32_t* vpairs, int nterms) {
    FC_BY_SCORES_FORM(fc_pv_amx, fc_pv_amx_emulated, fc_pv_loops_bf16v,
                      (P, ldp, nrows4, ncols, NULL, 0, NULL, D, O, ldo, vpairs, nterms, NULL, 0, vrows16));
}

/* Whether fc_pv_bf16_paired takes a block of nrows4 rows, ncols keys and D columns whole: on the
 * tiles only, with no edge for the float32 loops (which would need P in float32). */
static inline int fc_pv_paired_whole(ptrdiff_t nrows4, ptrdiff_t ncols, ptrdiff_t D) {
    return FC_HAVE_DPBF16 && fc_bf16_scores_form != FC_SCORES_VDPBF16PS && nrows4 % 16 == 0 && nrows4 > 0 &&
           nrows4 <= FC_AMX_PV_ROWS && ncols % 32 == 0 && ncols > 0 && ncols <= FC_BC && D % 16 == 0 && D > 0;
}
/* O += P V of round_p on the tiles with P already in bf16 pairs (Pt: rows ldpt pairs apart, as the
 * exp pass left them, fc_exp_lanes_bf16p) and V's pairs (vpairs, [FC_BC / 2][D]): one tile
 * product per block and no split, the same products and sums as fc_pv_bf16v with nterms 1 on the
 * same weights.  Only where fc_pv_paired_whole says so. */
static inline void fc_pv_bf16_paired(const uint32_t* Pt, ptrdiff_t ldpt, ptrdiff_t nrows4, ptrdiff_t ncols,
                                     const uint32_t* vpairs, ptrdiff_t D, float* O, ptrdiff_t ldo) {
    if (fc_bf16_scores_form == FC_SCORES_AMX_EMULATED) __atomic_fetch_add(&fc_amx_emu_paired, 1, __ATOMIC_RELAXED);
    FC_BY_SCORES_FORM(fc_pv_amx, fc_pv_amx_emulated, fc_pv_loops_bf16v,
                      (NULL, 0, nrows4, ncols, NULL, 0, NULL, D, O, ldo, vpairs, 1, Pt, ldpt, NULL));
}

/* Whether the bf16 products take the tiles (then the backward keeps its dK and dV accumulators
 * transposed, for fc_tn_bf16t) */
static inline int fc_bf16_on_tiles(void) { return fc_bf16_scores_form != FC_SCORES_VDPBF16PS; }

/* Ct += X^T P of the mixed bf16 backward (dV += P^T dO, dK += dS^T Q into transposed accumulators)
 * on the tiles, in the tile form this CPU takes; the float32 loop otherwise (tests only).  nterms
 * as fc_pv_bf16v's (1: P holds bf16 values, round_p). */
static inline void fc_tn_bf16t(const float* P, ptrdiff_t ldp, ptrdiff_t nrows, ptrdiff_t ncols, const float* X,
                               ptrdiff_t ldx, ptrdiff_t D, float* Ct, ptrdiff_t ldc, uint32_t* xt, int nterms) {
    FC_BY_SCORES_FORM(fc_tn_amx, fc_tn_amx_emulated, fc_tn_f32, (P, ldp, nrows, ncols, X, ldx, D, Ct, ldc, xt, nterms));
}

#endif
