/* Choices inside a CPU level that follow the micro-architecture: where two forms compute the same
 * bits and one was measured faster on one CPU, that CPU takes it and the others keep the form
 * they were measured with, so a change tuned on one CPU cannot slow another's recorded results.
 * Set once when the module loads (one cpuid vendor probe); the tests switch each through a hook
 * and check that every form gives the same bits.  Hand-written; included (through fc_simd.h) by
 * every CPU level's core module. */
#ifndef FUEL_CY_FC_UARCH_H
#define FUEL_CY_FC_UARCH_H
#include "fc_isa.h"
#include "fc_half.h"     /* FC_HAVE_BF16_CVT */
#include "fc_cpuid.h"

/* Which instruction form the bf16 math-in-T loops take: the vdpbf16ps additions in the GEMMs
 * (fc_gemm.h) and vcvtneps2bf16 in the row passes (fc_exp.h) on AMD CPUs with AVX512-BF16, where
 * they were measured faster (Zen 4); elsewhere the vaddps GEMM form and the integer row rounding,
 * as before: Sapphire Rapids runs vpermt2w at half the rate of vpermw and has not been measured
 * with either. */
enum { FC_BF16_FORM_VADDPS = 0, FC_BF16_FORM_VDPBF16PS = 1 };
static int fc_bf16_form = FC_BF16_FORM_VADDPS;

/* How O += P V finds contiguous V's rows (fc_pv_contig_*): a fixed stride apart, or through the
 * row pointers that the paged cache needs anyway (one more load per key).  By stride the PV tile
 * ran 91 -> 112 GFLOP/s at avx2 and 31 -> 37 at default, and at AVX-512 on Zen 4 109 -> 117 in
 * isolation (64 x 128 x 128 tiles, one core, FMA peak 117; 1-3% of a flash call); Sapphire Rapids
 * was measured with the pointer form at AVX-512 and keeps it there until it is measured with
 * both. */
enum { FC_PV_BY_POINTER = 0, FC_PV_BY_STRIDE = 1 };
static int fc_pv_form = FC_PV_BY_STRIDE;

/* Query rows per step of the backward (at most BR_BWD, kernels.pxi).  A step keeps its rows' S and
 * dP over every key (2 x rows x Sk floats) and sweeps dK and dV (2 x Sk x D) once: at Sk = 2048
 * 64 rows hold 1 MB of S and dP, Zen 4's whole L2, and 32 rows measured 3.5% faster there (D=128;
 * 2.5% at D=64) for twice the dK/dV sweeps; Sapphire Rapids (2 MB of L2) keeps 64 until it is
 * measured.  Every gradient is the same sum in the same order either way. */
static int fc_bwd_rows = 64;

/* Register blocks of the backward's C += A^T B (fc_gemm_tn_*) that share one copy of their A^T
 * block.  With two, each row of A is read a whole 64-byte line at a time at AVX-512 (one 8-row
 * block's 32 bytes left the line's other half to be fetched again for the next block): the
 * product ran 104 -> 110 GFLOP/s in isolation on Zen 4 and the backward 3% faster at D=64 (equal
 * at D=128).  Other CPUs keep one until measured. */
static int fc_tn_blocks = 1;   /* 1 or 2 */

/* Measured at AVX-512 only: the levels below it keep their forms on every CPU. */
__attribute__((constructor)) static void fc_uarch_init(void) {
    int amd = fc_cpu_is_amd(), amd512 = FC_VBYTES == 64 && amd;
    fc_bf16_form = FC_HAVE_BF16_CVT && amd ? FC_BF16_FORM_VDPBF16PS : FC_BF16_FORM_VADDPS;
    fc_pv_form = FC_VBYTES == 64 && !amd512 ? FC_PV_BY_POINTER : FC_PV_BY_STRIDE;
    fc_bwd_rows = amd512 ? 32 : 64;
    fc_tn_blocks = amd512 ? 2 : 1;
}
#endif
