/* The bf16 scores S = Q K^T of the float32-compute kernels (fc_qk_dpbf16: the mixed flash and
 * backward, S and dP) in one of three forms (fc_uarch.h fc_bf16_scores_form picks one at load):
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

/* what the emulated tile instructions found would have faulted on the hardware, for the tests */
static int fc_amx_emu_faults = 0;

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
#define FC_AMX_EMU_CFG(c) fc_amx_emu_cfg(c)
#define FC_AMX_EMU_ZERO(t) fc_amx_emu_zero(t)
#define FC_AMX_EMU_LOAD(t, base, stride) fc_amx_emu_load(t, base, stride)
#define FC_AMX_EMU_STORE(t, base, stride) fc_amx_emu_store(t, base, stride)
#define FC_AMX_EMU_DP(c, a, b) fc_amx_emu_dp(c, a, b)
#define FC_AMX_EMU_RELEASE() fc_amx_emu_release()
FC_DEFINE_QK_AMX(fc_qk_amx_emulated, FC_AMX_EMU_CFG, FC_AMX_EMU_ZERO, FC_AMX_EMU_LOAD, FC_AMX_EMU_STORE,
                 FC_AMX_EMU_DP, FC_AMX_EMU_RELEASE)

/* ---- the tile instructions themselves (AT&T operand order: sources first) --------------------- */
#if FC_HAVE_AMX
#define FC_AMX_CFG(c) __asm__ volatile("ldtilecfg %0" ::"m"(*(const fc_tilecfg*)(c)) : "memory")
#define FC_AMX_ZERO(t) __asm__ volatile("tilezero %%tmm" #t ::)
#define FC_AMX_LOAD(t, base, stride) \
    __asm__ volatile("tileloadd (%0,%1,1), %%tmm" #t ::"r"((const void*)(base)), "r"((long)(stride)) : "memory")
#define FC_AMX_STORE(t, base, stride) \
    __asm__ volatile("tilestored %%tmm" #t ", (%0,%1,1)" ::"r"((void*)(base)), "r"((long)(stride)) : "memory")
#define FC_AMX_DP(c, a, b) __asm__ volatile("tdpbf16ps %%tmm" #b ", %%tmm" #a ", %%tmm" #c ::)
#define FC_AMX_RELEASE() __asm__ volatile("tilerelease" ::: "memory")
FC_DEFINE_QK_AMX(fc_qk_amx, FC_AMX_CFG, FC_AMX_ZERO, FC_AMX_LOAD, FC_AMX_STORE, FC_AMX_DP, FC_AMX_RELEASE)
#endif
#endif   /* FC_HAVE_DPBF16 */

/* S = Q K^T for bf16 pairs Qp [nrows4][D2] and Kp [D2][FC_BC] (fc_gemm.h), in the form this CPU
 * takes.  Never called at a level without AVX512-BF16 (the kernels take the float32 loops there). */
static inline void fc_qk_dpbf16(const uint32_t* Qp, ptrdiff_t nrows4, ptrdiff_t D2, const uint32_t* Kp,
                                float* S, ptrdiff_t lds, ptrdiff_t ncols) {
#if FC_HAVE_DPBF16
#if FC_HAVE_AMX
    if (fc_bf16_scores_form == FC_SCORES_AMX) {
        fc_qk_amx(Qp, nrows4, D2, Kp, S, lds, ncols);
        return;
    }
#endif
    if (fc_bf16_scores_form == FC_SCORES_AMX_EMULATED) {
        fc_qk_amx_emulated(Qp, nrows4, D2, Kp, S, lds, ncols);
        return;
    }
#endif
    fc_qk_dpbf16_vec(Qp, nrows4, D2, Kp, S, lds, ncols);
}

#endif
