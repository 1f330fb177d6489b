/* Choices inside a CPU level that follow the CPU: where two forms compute the same bits and one
 * was measured faster on one CPU, that CPU takes it and the others keep the form they were
 * measured with, so a change tuned on one CPU cannot slow another's recorded results; where a
 * form needs instructions that only some CPUs of the level have (AVX512-FP16), those CPUs take it.
 * Set once when the module loads (one cpuid probe: vendor and features); the tests switch each
 * through a hook and check that every form gives the same bits.  Hand-written; included (through
 * fc_simd.h) by every CPU level's core module. */
#ifndef FUEL_CY_FC_UARCH_H
#define FUEL_CY_FC_UARCH_H
#include "fc_isa.h"
#include "fc_half.h"     /* FC_HAVE_BF16_CVT */
#include "fc_cpuid.h"

/* Which instruction form the bf16 math-in-T loops take: the vdpbf16ps additions in the GEMMs
 * (fc_gemm.h) and vcvtneps2bf16 in the row passes (fc_exp.h) on AMD CPUs with AVX512-BF16, where
 * they were measured faster (Zen 4, 21%); elsewhere the vaddps GEMM form and the integer row
 * rounding: on the Sapphire Rapids-class Xeon vdpbf16ps was 13-15% slower (flash S=1024 D=64,
 * backward S=512 D=64; vpermt2w runs at half the rate of vpermw there). */
enum { FC_BF16_FORM_VADDPS = 0, FC_BF16_FORM_VDPBF16PS = 1 };
static int fc_bf16_form = FC_BF16_FORM_VADDPS;

/* How O += P V finds contiguous V's rows (fc_pv_contig_*): a fixed stride apart, or through the
 * row pointers that the paged cache needs anyway (one more load per key).  By stride the PV tile
 * ran 91 -> 112 GFLOP/s at avx2 and 31 -> 37 at default, and at AVX-512 on Zen 4 109 -> 117 in
 * isolation (64 x 128 x 128 tiles, one core, FMA peak 117; 1-3% of a flash call); on a Sapphire
 * Rapids-class Xeon (benchmarks/results/forms/intel-xeon.json) the flash f32 call 0.5% faster at
 * S=2048 D=64 and 5% at D=128.  Every CPU measured takes the stride; the pointer form stays a
 * candidate for forms.py on the next one. */
enum { FC_PV_BY_POINTER = 0, FC_PV_BY_STRIDE = 1 };
static int fc_pv_form = FC_PV_BY_STRIDE;

/* The register block of S = Q K^T and O += P V (fc_qk_*, fc_pv_*; f64's O += P V excepted, see
 * fc_gemm.h): FC_NRB rows x 2 vectors of columns, or at AVX-512 6 rows x 4 vectors (24 of the 32
 * registers accumulate).  Per step the wide block loads 4 vectors and broadcasts 6 values for 24
 * FMAs where 8 x 2 loads 2 and broadcasts 8 for 16, and it reads Q (P) once per 4 vectors of
 * columns instead of once per 2.  On the AMX Xeon of family 6 model 167 the f32 flash ran 4-12%
 * faster (S=512-4096, D=64 and 128), the f64 flash 4-6% (its scores alone wide), the f32 and f64
 * backward 4-5% (benchmarks/results/forms/intel-xeon-model167.json).  On Zen 4 the wide block
 * ran 0.98-1.02x the narrow one's time (flash f32 and f64, backward f32, S=2048; two runs,
 * benchmarks/results/forms/amd-epyc-gemm-block.json): no gain, so it keeps 8 x 2.  Each output is
 * the same sequential sum over the contraction either way. */
enum { FC_GEMM_BLOCK_NARROW = 0, FC_GEMM_BLOCK_WIDE = 1 };
static int fc_gemm_block = FC_GEMM_BLOCK_NARROW;

/* Query rows per step of the backward (at most BR_BWD, kernels.pxi).  A step keeps its rows' S and
 * dP over every key (2 x rows x Sk floats) and sweeps dK and dV (2 x Sk x D) once: at Sk = 2048
 * 64 rows hold 1 MB of S and dP, Zen 4's whole L2, and 32 rows measured 3.5% faster there (D=128;
 * 2.5% at D=64) for twice the dK/dV sweeps; on the Sapphire Rapids-class Xeon (2 MB of L2) 64
 * rows were 14% faster at S=2048 D=64 and 2% at D=128, so Intel keeps 64.  Every gradient is
 * the same sum in the same order either way. */
static int fc_bwd_rows = 64;

/* The same where all five products of the step run on vdpbf16ps (round_p's bf16 backward, D even,
 * no tiles), in the recomputing order (the saved order, backward_task_saved, takes fc_bwd_rows):
 * dV^T += dO^T P and dK^T += Q^T dS then contract over the step's rows in pairs, so a
 * 32-row step adds only 16 pairs to each accumulator it reads and writes back, at twice the f32
 * rate.  On Zen 4 128 rows were 1.16-1.36x faster than 32 (S=2048 D=128, S=1024 D=64, causal and
 * not; 64 rows 1.07-1.09x) although a step's S and dP (2 MB at Sk = 2048) then outgrow L2; the
 * f32 and exact-P steps stayed fastest at 32.  Intel keeps its 64 (unmeasured in this form). */
static int fc_bwd_rows_pairs = 64;

/* Register blocks of the backward's C += A^T B (fc_gemm_tn_*) that share one copy of their A^T
 * block.  With two, each row of A is read a whole 64-byte line at a time at AVX-512 (one 8-row
 * block's 32 bytes left the line's other half to be fetched again for the next block): the
 * product ran 104 -> 110 GFLOP/s in isolation on Zen 4 and the backward 3% faster at D=64 (equal
 * at D=128); on the Sapphire Rapids-class Xeon the backward 3% faster at both (S=2048).  Below
 * AVX-512 a block's 8 rows are a whole line already. */
static int fc_tn_blocks = 1;   /* 1 or 2 */

/* Above how many bytes of dK and dV (2 x Sk x D, the recomputing order's sweep per step) the
 * backward's C += A^T B (fc_gemm_tn_*) asks for the next register block's rows of C while it
 * computes the current one; -1: never.  Past L2 each block's 16 loads of C come from L3, and on
 * Zen 4 the instructions waiting on them held a quarter of the product's samples (perf, S=2048
 * D=128).  Asked for one block ahead, the f32 backward ran 1.04-1.10x faster there (GQA 4:1
 * too), 1.00-1.13x at S=4096 D=64, and f64 1.14-1.25x at S=2048 D=128; where dK and dV fit the
 * 1 MB L2 (S=2048 D=64) and in the key-tiles-outer order (a key tile's accumulators stay in
 * cache, so it never asks) the requests only cost issue slots: 0.96-0.99x.  Intel keeps -1
 * (unmeasured).  Every sum is the same either way. */
static ptrdiff_t fc_tn_ahead = -1;

/* How a chunk's tiles (kernels.pxi flash_task, AttnOpts.k_tiles: a varlen sequence of a few queries
 * whose kv heads take one task each) ask for the rows they read next: 1, a line per step of their
 * products' loops (fc_isa.h fc_pf_stream: V's rows of the tile during the scores, the next tile's
 * K rows during P V, which reads V's rows by pointer); 0, a paged pool's rows all at once before
 * the scores (packed keys: the next K rows only, V left to the hardware).  On Zen 4 the burst
 * stalled the core on the prefetch instructions (two thirds of a paged chunk task's own samples)
 * and P V on its V loads.  Side by side (forms.py, 2 threads) the burst took 1.03-1.10x the time
 * on the bench's paged decode mix and its two chunks alone (8 and 4 queries over 3561 and 2795
 * keys, Hq=8 Hkv=2 D=128) in f32, 1.06-1.13x in f64, and 1.15-1.18x with the keys packed (f32).
 * bf16 chunks (each tile's K and V pairs packed in its task, round_p on vdpbf16ps: fc_qk_dpbf16_pf,
 * fc_pv_dpbf16_pf) ask for half the lines a tile; there the burst took 1.00-1.03x on the mix,
 * 0.99-1.03x on the chunks alone and 1.02-1.04x with the keys packed.
 * Intel keeps 0 (unmeasured).  The same sums either way. */
static int fc_chunk_spread = 0;

/* Keys per group of the float32/float64 paged decode's heads loops (fc_gemm.h
 * fc_rowdots_heads_*, fc_pv_heads_*: fc_isa.h FC_FOR_KEY_GROUPS_AND_HEADS; at most
 * FC_KEYGROUP_MAX).  Before each group's dots or products, per kv head, the rows of as many keys
 * FC_PAGED_LOOKAHEAD on are asked for into L2 at once: groups of 16 ask for 128 lines at D = 128,
 * which filled the miss queues and stalled the core on the prefetch instructions on Zen 4 (half
 * of a paged decode task's own samples).  Side by side there (B=16 Hq=32 Hkv=8 D=128, block 16, 2
 * threads) groups of 4 ran 1.15-1.18x faster than 16 in f32 and 1.22x in f64, 1.02-1.06x faster
 * than 8, and 1.3-1.5x faster than 2 or 1 (four keys are what fc_rowdots4_f32 takes at a time).
 * The half-pool loops keep their own (fc_half.h FC_H16_GROUP).  Intel keeps 16 (unmeasured).  The
 * same sums whatever the group (each dot alone, P V sequential over keys). */
static int fc_paged_group = 16;

/* How the float32/float64 paged heads loops (fc_gemm.h fc_rowdots_heads_*, fc_pv_heads_*) and
 * the bf16 decode scores on vdpbf16ps (fc_decode16.h fc_qk_heads_dpbf16) ask for the rows
 * FC_PAGED_LOOKAHEAD keys on: 0, a burst of a head's lines before each group's products
 * (fc_isa.h fc_prefetch_head_rows); 1, a line per step of the products, each step of key j's own
 * row asking for the same line of the key that far on (the float32/float64 loops where D is a
 * multiple of 2W, else the burst).  The burst is a head's lines at once (32 at groups of 4,
 * D = 128 f32), and on Zen 5 the f32 paged decode read its pool at 65% of the copy rate with them,
 * against 83-91% for a loop that only touched the same rows.  Side by side (B=16 Hq=32 Hkv=8
 * D=128, block 16, 2 threads; four runs, benchmarks/results/forms/amd-epyc-zen5-paged-spread.json)
 * the burst took 1.23-1.56x the time of the spread requests in f32 (ctx 1024 and 4096),
 * 1.35-1.45x in f64, 1.44-1.71x on the varlen paged mix (f32, f64) and 1.78-1.84x on its bf16
 * form (scores on vdpbf16ps; paged or packed).  Groups of 4 stay (8 and 16 ran 0.96-1.08x).  The
 * half-pool loops of fc_half.h keep the burst: on attention_paged_mixed (bf16, f16, ctx 2048 and
 * 8192, three runs) spreading there took 0.97-1.10x the time of Zen 5's burst with its L1
 * requests (fc_h16_l1_ahead), 0.92-1.07x asked into L1: no form won throughout.  Zen 4 and Intel
 * keep 0 (unmeasured).  The same sums either way: only prefetches move. */
static int fc_paged_spread = 0;

/* fc_h16_l1_ahead (declared in fc_isa.h, which fc_half.h reads before this file): the keys past
 * its group at which the half-pool heads loops (bf16/f16 pools under float32 math: fc_half.h,
 * fc_decode16.h) ask for a head's rows into L1 as well as FC_PAGED_LOOKAHEAD on into L2; 0, never.
 * At 16 keys the rows asked for and not yet read are 16 x 8 heads x 256 bytes = 32 KB at Hkv=8
 * D=128: Zen 4's whole L1d, where asking into L1 ran the half-pool decode at 9.3 ms against 5.0
 * (fc_gemm.h), but two thirds of Zen 5's 48 KB.  On Zen 5 (AMD family 26 model 2, 2 threads,
 * forms.py side by side, three runs, benchmarks/results/forms/amd-epyc-zen5-h16-l1.json) never
 * asking took 1.16-1.33x the time of 16 keys on attention_paged_mixed bf16 at ctx 2048 and
 * 1.27-1.31x at ctx 1024 (B=16 Hq=32 Hkv=8 D=128, block 16), 1.12-1.19x in f16; 8 keys
 * 1.06-1.17x, 12 keys 1.02-1.07x; the varlen paged mix 0.98-1.02x.  The float32/float64 loops
 * (rows twice as long) measured 0.99-1.02x at 4, 8 and 16 keys there, so they never ask.  Zen 4
 * and Intel keep 0 (Zen 4 measured slower as above, Intel unmeasured).  Prefetches only: the same
 * bits. */

/* Query rows per slab of the float32/float64 flash tile's scores (kernels.pxi flash_task, over
 * K^T tiles packed per kv head): 0, the tile's 64 rows of scores in one product and then each
 * row's softmax pass; n (a multiple of 4), n rows' scores and then those rows' softmax, slab by
 * slab, so that the pass reads its rows while they are still in L1 (the 32 KB score tile is a
 * Zen 4's whole L1d) at the cost of reading the K^T tile from L2 once per slab.  The Xeon's
 * profiles put part of its f32 flash's gap in that second pass (benchmarks/results/intel-xeon/
 * notes.md); on Zen 4 slabs of 8, 16 and 32 rows ran 0.97-1.02x the whole tile's time (flash f32
 * S=2048 D=64 and 128, S=4096 D=64 causal, f64 S=2048 D=128; three runs, forms.py,
 * benchmarks/results/forms/amd-epyc-qk-slab.json), so every CPU keeps 0 until one measures a
 * gain.  Each score is the same sequential sum over d either way. */
static int fc_qk_slab = 0;

/* Whether the float32/float64 flash tile's scores find each row's maximum as they are stored
 * (fc_gemm.h fc_qk_max_*: the sums' lanes kept in a running maximum per row while they are in
 * registers) instead of in a pass of its own over the stored row (fc_exp.h row_max) before the
 * exp pass: the scores then go through L1 twice between the two products (exp, then P V) where
 * they went three times.  Taken where the tile's columns are whole register blocks (a multiple of
 * 2W: every full key tile, and a short last or causal diagonal one whose keys make whole blocks)
 * and a row attends all of them; the others keep the pass.  The candidate for the Xeon, whose
 * profile puts part of its f32 flash's gap in the softmax's passes through its 48 KB L1d
 * (benchmarks/results/intel-xeon/notes.md).  On Zen 5 the flash's two products hold 77% of its
 * samples and run at 88-95% of the FMA peak, the rest of the task, the pass included, 7% (perf,
 * f32 S=2048 D=64): keeping the maxima ran 0.99-1.01x the pass's time (flash f32 S=512-4096 D=64
 * and 128, causal, f64; three runs, forms.py, benchmarks/results/forms/amd-epyc-zen5-fused-max.json),
 * so every CPU keeps 0 until one measures a gain.  Max is exact: the same bits either way. */
static int fc_qk_fused_max = 0;

/* Whether the compiler is at least gcc G or clang C: new instructions written as inline assembly
 * need an assembler that knows them, which comes with compilers of about that age. */
#if defined(__clang__)
#define FC_CC_AT_LEAST(G, C) (__clang_major__ >= (C))
#elif defined(__GNUC__)
#define FC_CC_AT_LEAST(G, C) (__GNUC__ >= (G))
#else
#define FC_CC_AT_LEAST(G, C) 0
#endif

/* Which form the f16 math-in-T GEMMs take (fc_gemm_f16.h): binary16 arithmetic where the CPU has
 * AVX512-FP16 (the same bits as the conversions, in a fraction of the instructions), the F16C
 * conversions everywhere else.  The native form needs an AVX-512 level and a compiler whose
 * assembler knows vmulph (GCC 12, clang 14); the emulated native form is for the tests. */
#if FC_VBYTES == 64 && defined(__x86_64__) && defined(__F16C__) && FC_CC_AT_LEAST(12, 14)
#define FC_HAVE_F16_NATIVE 1
#else
#define FC_HAVE_F16_NATIVE 0
#endif
enum { FC_F16_FORM_CONVERT = 0, FC_F16_FORM_NATIVE = 1, FC_F16_FORM_NATIVE_EMULATED = 2 };
static int fc_f16_form = FC_F16_FORM_CONVERT;
static int fc_cpu_has_f16_native = 0;   /* AVX512-FP16 present and usable by this build */

/* Which form the bf16 scores of the float32-compute kernels and the products with P and dS beside
 * them take (fc_qk_dpbf16, fc_pv_bf16v, fc_tn_bf16t: fc_amx.h): vdpbf16ps and the float32 loops, or
 * AMX-BF16 tiles (Intel Sapphire Rapids and later) where the CPU has them, the compiler's assembler
 * knows them, and Linux grants this process the tile state (arch_prctl ARCH_REQ_XCOMP_PERM:
 * without it the first tile instruction raises SIGILL); the emulated tile form is for the tests.
 * AMX does 16 x 16 x 32 products per instruction where vdpbf16ps does 16 x 2, and it is what
 * torch's bf16 SDPA runs on such CPUs.  On the Sapphire Rapids-class Xeon the tiles made the
 * mixed flash 1.8x (S=1024 D=64) to 2.6x (S=4096 D=128) faster and the mixed backward 1.75x
 * (benchmarks/results/forms/intel-xeon.json). */
#if defined(__AVX512F__) && defined(__AVX512BF16__) && defined(__x86_64__) && defined(__linux__) && FC_CC_AT_LEAST(11, 12)
#define FC_HAVE_AMX 1
#include <sys/syscall.h>
#include <unistd.h>
#else
#define FC_HAVE_AMX 0
#endif
enum { FC_SCORES_VDPBF16PS = 0, FC_SCORES_AMX = 1, FC_SCORES_AMX_EMULATED = 2 };
static int fc_bf16_scores_form = FC_SCORES_VDPBF16PS;
/* 0: no AMX-BF16 here (CPU, XCR0 or this build); 1: Linux granted the tile state, the tiles may
 * run; 2: it refused */
static int fc_amx_state = 0;

/* Asks Linux for the AMX tile data state (ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18):
 * process-wide, inherited by threads and forks; refused (-1) by kernels before 5.16 and while a
 * thread's sigaltstack is too small for the larger signal frame. */
static inline int fc_amx_permitted(void) {
#if FC_HAVE_AMX
    return syscall(SYS_arch_prctl, 0x1023, 18) == 0;
#else
    return 0;
#endif
}

/* The vendor forms were measured at AVX-512 only: the levels below it keep theirs on every CPU.
 * The f16 form follows the instruction set, not the vendor. */
__attribute__((constructor)) static void fc_uarch_init(void) {
    unsigned char have[FC_F_COUNT];
    char vendor[13];
    unsigned family, model;
    fc_cpu_features(have, vendor, &family, &model);
    int amd = strcmp(vendor, "AuthenticAMD") == 0, amd512 = FC_VBYTES == 64 && amd;
    fc_bf16_form = FC_HAVE_BF16_CVT && amd ? FC_BF16_FORM_VDPBF16PS : FC_BF16_FORM_VADDPS;
    fc_pv_form = FC_PV_BY_STRIDE;
    fc_gemm_block = FC_VBYTES == 64 && !amd ? FC_GEMM_BLOCK_WIDE : FC_GEMM_BLOCK_NARROW;
    fc_bwd_rows = amd512 ? 32 : 64;
    fc_bwd_rows_pairs = amd512 ? 128 : 64;
    fc_tn_blocks = FC_VBYTES == 64 ? 2 : 1;
    fc_tn_ahead = amd512 ? (ptrdiff_t)1 << 20 : -1;
    fc_chunk_spread = amd512;
    fc_paged_group = amd512 ? 4 : 16;
    fc_h16_l1_ahead = amd512 && family >= 26 ? 16 : 0;
    fc_paged_spread = amd512 && family >= 26;
    fc_cpu_has_f16_native = FC_HAVE_F16_NATIVE && have[FC_F_AVX512_FP16];
    fc_f16_form = fc_cpu_has_f16_native ? FC_F16_FORM_NATIVE : FC_F16_FORM_CONVERT;
    if (FC_HAVE_AMX && have[FC_F_AMX_TILE] && have[FC_F_AMX_BF16]) fc_amx_state = fc_amx_permitted() ? 1 : 2;
    fc_bf16_scores_form = fc_amx_state == 1 ? FC_SCORES_AMX : FC_SCORES_VDPBF16PS;
}
#endif
