/* C helpers that only the test hooks (test_hooks.pxi) call: never used by a kernel.
 * Hand-written; included by every CPU level's core module. */
#ifndef FUEL_CY_FC_TESTHOOKS_H
#define FUEL_CY_FC_TESTHOOKS_H
#include "fc_isa.h"
#include "fc_half.h"
#include "fc_exp.h"
#include "fc_gemm.h"

/* Testing hook: apply one of the vector roundings (0: bf16 integer, 1: bf16 instruction,
 * 2: f16, 4: bf16 instruction with the subnormal check, 5: its one-float form, 6: the forward's
 * exact pairing of non-negative weights, fc_bf16_pair_exact then the instruction) to n floats. */
static inline void fc_round_vec_array(const float* x, float* out, ptrdiff_t n, int which) {
    for (ptrdiff_t i = 0; i < n; i += 2 * FC_W32) {  /* 3: the pair form used by the bf16 GEMMs */
        float buf[2 * FC_W32] = {0};
        ptrdiff_t m = n - i < 2 * FC_W32 ? n - i : 2 * FC_W32;
        memcpy(buf, x + i, (size_t)m * 4);
        fc_vec_f32 v0 = fc_load_f32(buf), v1 = fc_load_f32(buf + FC_W32);
        if (which == 3) {
            fc_rbf16_cvt_v2(&v0, &v1);
        } else if (which == 4) {
            v0 = fc_rbf16_cvt_checked_v(v0);
            v1 = fc_rbf16_cvt_checked_v(v1);
        } else if (which == 6) {
#if FC_HAVE_DPBF16
            v0 = fc_rbf16_cvt_v((fc_vec_f32)fc_bf16_pair_exact((__m512)v0));
            v1 = fc_rbf16_cvt_v((fc_vec_f32)fc_bf16_pair_exact((__m512)v1));
#endif
        } else if (which == 5) {
            for (ptrdiff_t k = 0; k < m; k++) buf[k] = fc_round_bf16_cvt_checked(buf[k]);
            memcpy(out + i, buf, (size_t)m * 4);
            continue;
        } else {
            v0 = which == 0 ? fc_rbf16_exact_v(v0) : which == 1 ? fc_rbf16_cvt_v(v0) : fc_rf16_v(v0);
            v1 = which == 0 ? fc_rbf16_exact_v(v1) : which == 1 ? fc_rbf16_cvt_v(v1) : fc_rf16_v(v1);
        }
        fc_store_f32(buf, v0);
        fc_store_f32(buf + FC_W32, v1);
        memcpy(out + i, buf, (size_t)m * 4);
    }
}

/* Testing hook: fc_expf_tv (the rounded softmax's exp on whole vectors) on n floats. */
static inline void fc_expf_tv_array(const float* x, float* out, ptrdiff_t n) {
    for (ptrdiff_t i = 0; i < n; i += FC_W32) {
        float buf[FC_W32] = {0};
        ptrdiff_t m = n - i < FC_W32 ? n - i : FC_W32;
        memcpy(buf, x + i, (size_t)m * 4);
        fc_store_f32(buf, fc_expf_tv(fc_load_f32(buf)));
        memcpy(out + i, buf, (size_t)m * 4);
    }
}

#endif
