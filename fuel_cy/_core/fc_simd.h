/* The C micro-kernels of the attention core, one header per role; the core's Cython (policy.pxi)
 * declares them from this umbrella.  Hand-written; included by every CPU level's core module.
 *
 *   fc_isa.h    the level's vector width, register blocking, vector types, lane helpers, prefetch
 *   fc_uarch.h  choices inside a level per CPU: bf16 and f16 forms, PV form, backward steps, bf16 scores
 *   fc_gemm.h   tile GEMMs: QK, PV, row dots, the backward's A^T B, the rounded bf16/f16 forms,
 *               vdpbf16ps
 *   fc_gemm_f16.h  the f16 math-in-T GEMMs: F16C conversions or binary16 arithmetic (AVX512-FP16)
 *   fc_amx.h    the bf16 scores of the float32-compute kernels: vdpbf16ps or AMX-BF16 tiles
 *   fc_f16_tiles.h  f16 on those tiles: each value as two exact bf16 terms (round_p)
 *   fc_half.h   bf16/f16 <-> float32: widen/narrow, the half-pool readers, the vector roundings
 *   fc_pack.h   K^T tile packing (register transposes) and bf16 pairs
 *   fc_exp.h    softmax row passes: row max, 16-lane dots, the vectorized exps and their sums
 *
 * (fc_math.h holds the scalar roundings and exps; fc_testhooks.h the helpers only the test hooks
 * call, declared by test_hooks.pxi.)  One source for every CPU level
 * (fuel_cy/runtime/cpu_levels.py): the level's compiler flags choose the vector width and the
 * register blocking; the algorithms are the same at every level. */
#ifndef FUEL_CY_FC_SIMD_H
#define FUEL_CY_FC_SIMD_H
#include "fc_math.h"
#include "fc_isa.h"
#include "fc_uarch.h"
#include "fc_half.h"
#include "fc_gemm.h"
#include "fc_gemm_f16.h"
#include "fc_amx.h"
#include "fc_f16_tiles.h"
#include "fc_pack.h"
#include "fc_decode16.h"
#include "fc_exp.h"
#endif
