/* Packing of key (and value) tiles for the GEMMs (fc_gemm.h): K^T tiles [D][FC_BC] transposed in
 * registers (fc_pack_kt_f32), the bf16 pairs that vdpbf16ps and the AMX tiles read
 * (fc_pair_rows_bf16, fc_pack_k_pairs_bf16) and V's keys paired for the tile P V
 * (fc_pack_v_pairs_bf16).  Hand-written; included (through fc_simd.h) by every CPU level's core
 * module. */
#ifndef FUEL_CY_FC_PACK_H
#define FUEL_CY_FC_PACK_H
#include "fc_isa.h"
#include "fc_math.h"   /* fc_f32_to_bf16_bits */
#include "fc_half.h"   /* fc_widen_half */

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
/* dst[c * ldd + i] = rows[i][c] for i < n, c < ncols: square blocks transposed in registers, the
 * edges copied one by one. */
static inline void fc_transpose_rows(const float* const* rows, ptrdiff_t n, ptrdiff_t ncols, float* dst, ptrdiff_t ldd) {
    ptrdiff_t i0 = 0;
#ifdef FC_TB
    for (; i0 + FC_TB <= n; i0 += FC_TB) {
        ptrdiff_t c0 = 0;
        for (; c0 + FC_TB <= ncols; c0 += FC_TB) {
            fc_tvec r[FC_TB];
            for (int i = 0; i < FC_TB; i++) r[i] = fc_tload(rows[i0 + i] + c0);
            fc_transpose_block(r);
            for (int k = 0; k < FC_TB; k++) fc_tstore(dst + (c0 + k) * ldd + i0, r[k]);
        }
        for (; c0 < ncols; c0++)
            for (int i = 0; i < FC_TB; i++) dst[c0 * ldd + i0 + i] = rows[i0 + i][c0];
    }
#endif
    for (ptrdiff_t c = 0; c < ncols; c++)
        for (ptrdiff_t i = i0; i < n; i++) dst[c * ldd + i] = rows[i][c];
}
static inline void fc_pack_kt_f32(float* const* rows, ptrdiff_t n, ptrdiff_t D, float* out) {
    fc_transpose_rows((const float* const*)rows, n, D, out, FC_BC);
    for (ptrdiff_t d = 0; d < D; d++)
        for (ptrdiff_t j = n; j < FC_BC; j++) out[d * FC_BC + j] = 0;
}

/* fc_pack_kt_f32 from bf16/f16 storage (the mixed flash's K where its scores take the float32
 * loops): 16 rows x 64 columns at a time widened into a 4 KB buffer that stays in L1, then
 * transposed; the same K^T bits as packing a widened copy, without the copy. */
static inline void fc_pack_kt_h16(const uint16_t* const* rows, ptrdiff_t n, ptrdiff_t D, float* out, int is_f16) {
    float tmp[16 * 64];
    const float* tr[16];
    for (ptrdiff_t j0 = 0; j0 < n; j0 += 16) {
        ptrdiff_t m = n - j0 < 16 ? n - j0 : 16;
        for (ptrdiff_t c0 = 0; c0 < D; c0 += 64) {
            ptrdiff_t w = D - c0 < 64 ? D - c0 : 64;
            for (ptrdiff_t i = 0; i < m; i++) {
                fc_widen_half(rows[j0 + i] + c0, tmp + i * 64, w, is_f16);
                tr[i] = tmp + i * 64;
            }
            fc_transpose_rows(tr, m, w, out + c0 * FC_BC + j0, FC_BC);
        }
    }
    for (ptrdiff_t d = 0; d < D; d++)
        for (ptrdiff_t j = n; j < FC_BC; j++) out[d * FC_BC + j] = 0;
}

/* dst[j * ldd + r] = src[r * lds + j] for r < nrows, j < ncols (the rounded backward's P^T and
 * dS^T: element by element, its reads were a cache line apart and took a fifth of a bf16
 * backward). */
static inline void fc_transpose_f32(const float* src, ptrdiff_t lds, ptrdiff_t nrows, ptrdiff_t ncols,
                                    float* dst, ptrdiff_t ldd) {
    for (ptrdiff_t r0 = 0; r0 < nrows; r0 += 64) {
        const float* rows[64];
        ptrdiff_t m = nrows - r0 < 64 ? nrows - r0 : 64;
        for (ptrdiff_t i = 0; i < m; i++) rows[i] = src + (r0 + i) * lds;
        fc_transpose_rows(rows, m, ncols, dst + r0, ldd);
    }
}

/* bf16 pairs of float32 rows holding bf16 values (exactly: the widened inputs), rows x D -> out
 * [rows][D2] with row stride ldo; the top half of a float32 is its bf16. */
static inline uint32_t fc_bf16_pair(const float* x, ptrdiff_t d, ptrdiff_t D) {
    uint32_t lo, hi = 0;
    memcpy(&lo, x + d, 4);
    if (d + 1 < D) memcpy(&hi, x + d + 1, 4);
    return (lo >> 16) | (hi & 0xffff0000u);
}
static inline void fc_pair_rows_bf16(const float* x, ptrdiff_t rows, ptrdiff_t D, uint32_t* out, ptrdiff_t ldo) {
    for (ptrdiff_t r = 0; r < rows; r++) {
        ptrdiff_t p = 0;
#if defined(__AVX512BW__)
        /* 32 floats -> their 32 top halves, in order: 16 pairs per permute (element by element
         * it was a tenth of a bf16 backward given the forward's statistics, which pairs a query
         * step once per key tile) */
        const __m512i top = _mm512_set_epi16(63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33,
                                             31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
        for (; 2 * p + 32 <= D; p += 16)
            _mm512_storeu_si512(out + r * ldo + p,
                                _mm512_permutex2var_epi16(_mm512_loadu_si512(x + r * D + 2 * p), top,
                                                          _mm512_loadu_si512(x + r * D + 2 * p + 16)));
#endif
        for (; 2 * p < D; p++) out[r * ldo + p] = fc_bf16_pair(x + r * D, 2 * p, D);
    }
}
/* K rows (n <= FC_BC keys of D bf16-valued floats) -> Kp [D2][FC_BC], keys n.. zero. */
static inline void fc_pack_k_pairs_bf16(float* const* rows, ptrdiff_t n, ptrdiff_t D, uint32_t* out) {
    ptrdiff_t D2 = (D + 1) / 2;
    for (ptrdiff_t j = 0; j < n; j++)
        for (ptrdiff_t p = 0; p < D2; p++) out[p * FC_BC + j] = fc_bf16_pair(rows[j], 2 * p, D);
    for (ptrdiff_t p = 0; p < D2; p++)
        for (ptrdiff_t j = n; j < FC_BC; j++) out[p * FC_BC + j] = 0;
}

#if defined(__AVX512F__)
/* keys 2k and 2k + 1 of columns [d0, d0 + 16) as 16 bf16 pairs (bf16-valued floats: the top halves) */
static inline __m512i fc_pair_keys_bf16_v(const float* even, const float* odd) {
    __m512i e = _mm512_loadu_si512(even), o = _mm512_loadu_si512(odd);
    return _mm512_or_si512(_mm512_srli_epi32(e, 16), _mm512_and_si512(o, _mm512_set1_epi32((int)0xffff0000u)));
}
static inline void fc_pair_keys_bf16(const float* even, const float* odd, uint32_t* out) {
    _mm512_storeu_si512(out, fc_pair_keys_bf16_v(even, odd));
}
#endif
/* V rows (n <= FC_BC keys of D bf16-valued floats) -> Vp [FC_BC / 2][D]: keys 2k and 2k + 1 paired
 * per column (the layout tdpbf16ps takes for its second operand, fc_amx.h fc_pv_bf16v), keys n..
 * zero.  Built once per kv head and shared by its query tiles. */
static inline void fc_pack_v_pairs_bf16(float* const* rows, ptrdiff_t n, ptrdiff_t D, uint32_t* out) {
    for (ptrdiff_t k = 0; k < FC_BC / 2; k++) {
        const float* even = 2 * k < n ? rows[2 * k] : NULL;
        const float* odd = 2 * k + 1 < n ? rows[2 * k + 1] : NULL;
        ptrdiff_t d = 0;
#if defined(__AVX512F__)
        if (even && odd)   /* 16 columns at a time */
            for (; d + 16 <= D; d += 16) fc_pair_keys_bf16(even + d, odd + d, out + k * D + d);
#endif
        for (; d < D; d++) {
            uint32_t e = 0, o = 0;
            if (even) memcpy(&e, even + d, 4);
            if (odd) memcpy(&o, odd + d, 4);
            out[k * D + d] = (e >> 16) | (o & 0xffff0000u);
        }
    }
}

/* ---- The same pairs read straight from bf16 storage (uint16_t rows, D adjacent): the mixed
 * flash's Q, K and V need no widened float32 copy (a copy written and read again per call was
 * ~6% of a bf16 call at S = 1024).  Same bits as the float32 route: widening is exact and the
 * pairs are the widened values' top halves. */
/* one row of D bf16 values -> D2 pairs (an odd D padded with a zero) */
static inline void fc_pair_row_b16(const uint16_t* x, ptrdiff_t D, uint32_t* out) {
    ptrdiff_t D2 = D / 2;
    memcpy(out, x, (size_t)D2 * 4);
    if (D & 1) out[D2] = x[D - 1];
}
/* K rows (n <= FC_BC keys of D bf16 values) -> Kp [D2][FC_BC] (fc_pack_k_pairs_bf16's layout),
 * keys n.. zero: a transpose of 32-bit pairs, 16 x 16 blocks in registers where whole. */
static inline void fc_pack_k_pairs_b16(const uint16_t* const* rows, ptrdiff_t n, ptrdiff_t D, uint32_t* out) {
    ptrdiff_t D2 = (D + 1) / 2, full = D / 2, j0 = 0;
#if defined(__AVX512F__)
    for (; j0 + 16 <= n; j0 += 16) {
        ptrdiff_t p0 = 0;
        for (; p0 + 16 <= full; p0 += 16) {
            __m512 r[16];
            for (int j = 0; j < 16; j++) r[j] = _mm512_loadu_ps((const float*)(const void*)(rows[j0 + j] + 2 * p0));
            fc_transpose_block(r);
            for (int p = 0; p < 16; p++) _mm512_storeu_ps((float*)(void*)(out + (p0 + p) * FC_BC + j0), r[p]);
        }
        for (ptrdiff_t p = p0; p < D2; p++)
            for (ptrdiff_t j = j0; j < j0 + 16; j++) {
                uint32_t w = rows[j][2 * p];
                if (2 * p + 1 < D) w |= (uint32_t)rows[j][2 * p + 1] << 16;
                out[p * FC_BC + j] = w;
            }
    }
#endif
    for (ptrdiff_t j = j0; j < n; j++)
        for (ptrdiff_t p = 0; p < D2; p++) {
            uint32_t w = rows[j][2 * p];
            if (2 * p + 1 < D) w |= (uint32_t)rows[j][2 * p + 1] << 16;
            out[p * FC_BC + j] = w;
        }
    for (ptrdiff_t p = 0; p < D2; p++)
        for (ptrdiff_t j = n; j < FC_BC; j++) out[p * FC_BC + j] = 0;
}
/* V rows (n <= FC_BC keys of D bf16 values) -> Vp [FC_BC / 2][D] (fc_pack_v_pairs_bf16's
 * layout): keys 2k and 2k + 1 interleaved per column, keys n.. zero. */
static inline void fc_pack_v_pairs_b16(const uint16_t* const* rows, ptrdiff_t n, ptrdiff_t D, uint32_t* out) {
    for (ptrdiff_t k = 0; k < FC_BC / 2; k++) {
        const uint16_t* even = 2 * k < n ? rows[2 * k] : NULL;
        const uint16_t* odd = 2 * k + 1 < n ? rows[2 * k + 1] : NULL;
        ptrdiff_t d = 0;
#if defined(__AVX512F__)
        if (even && odd)
            for (; d + 16 <= D; d += 16) {
                __m512i e = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)(const void*)(even + d)));
                __m512i o = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)(const void*)(odd + d)));
                _mm512_storeu_si512(out + k * D + d, _mm512_or_si512(e, _mm512_slli_epi32(o, 16)));
            }
#endif
        for (; d < D; d++)
            out[k * D + d] = (even ? (uint32_t)even[d] : 0u) | ((odd ? (uint32_t)odd[d] : 0u) << 16);
    }
}

/* The backward's round_p products on vdpbf16ps (fc_qk_dpbf16_part with the query rows as the
 * contraction): X rows [nrows][ldx] of float32 (P or dS) rounded to bf16 (nearest even; the
 * vector part by vcvtneps2bf16, which reads a float32 subnormal as zero) and paired, rows 2k and
 * 2k + 1 per column: out[k * FC_BC + j] for k < ceil(nrows / 2) and j < FC_BC, columns j >= ncols
 * and a missing odd row zero (Kp's layout).  Rounding here, not in a pass of its own over P and
 * dS, saves two sweeps of rows that outgrow L2 at long sequences. */
static inline void fc_pair_cols_bf16(const float* X, ptrdiff_t ldx, ptrdiff_t nrows, ptrdiff_t ncols, uint32_t* out) {
    for (ptrdiff_t k = 0; 2 * k < nrows; k++) {
        const float* e = X + 2 * k * ldx;
        const float* o = 2 * k + 1 < nrows ? X + (2 * k + 1) * ldx : NULL;
        ptrdiff_t j = 0;
#if defined(__AVX512F__) && defined(__AVX512BF16__)
        if (o)
            for (; j + 16 <= ncols; j += 16) {
                __m512i a = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(e + j)));
                __m512i b = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(o + j)));
                _mm512_storeu_si512(out + k * FC_BC + j, _mm512_or_si512(a, _mm512_slli_epi32(b, 16)));
            }
#endif
        for (; j < FC_BC; j++) {
            uint32_t a = 0, b = 0;
            if (j < ncols) {
                a = fc_f32_to_bf16_bits(e[j]);
                if (o) b = fc_f32_to_bf16_bits(o[j]);
            }
            out[k * FC_BC + j] = a | (b << 16);
        }
    }
}
/* X rows [nrows][ldx] of bf16-valued floats -> transposed pairs of rows, out[d * R2 + k] =
 * (X[2k][d], X[2k + 1][d]) for d < D, k < R2 = ceil(nrows / 2) (Qp's layout with D as its rows). */
static inline void fc_pair_rows_t_bf16(const float* X, ptrdiff_t ldx, ptrdiff_t nrows, ptrdiff_t D, uint32_t* out) {
    ptrdiff_t R2 = (nrows + 1) / 2, kv = 0, dv = 0;   /* [0, kv) x [0, dv): done in registers */
#if defined(__AVX512F__)
    /* 16 pairs of rows x 16 columns at a time: each pair's 16 columns paired in one vector, then
     * the block transposed in registers (element by element these were most of fc_tn_bf16t's
     * time beside the tile products) */
    kv = nrows / 2 / 16 * 16;
    dv = D / 16 * 16;
    for (ptrdiff_t k0 = 0; k0 < kv; k0 += 16)
        for (ptrdiff_t d0 = 0; d0 < dv; d0 += 16) {
            __m512 w[16];
            for (int i = 0; i < 16; i++)
                w[i] = _mm512_castsi512_ps(fc_pair_keys_bf16_v(X + 2 * (k0 + i) * ldx + d0,
                                                               X + (2 * (k0 + i) + 1) * ldx + d0));
            fc_transpose_block(w);
            for (int j = 0; j < 16; j++) _mm512_storeu_ps((float*)(out + (d0 + j) * R2 + k0), w[j]);
        }
#endif
    for (ptrdiff_t k = 0; k < R2; k++)
        for (ptrdiff_t d = k < kv ? dv : 0; d < D; d++) {
            uint32_t a, b = 0;
            memcpy(&a, X + 2 * k * ldx + d, 4);
            if (2 * k + 1 < nrows) memcpy(&b, X + (2 * k + 1) * ldx + d, 4);
            out[d * R2 + k] = (a >> 16) | (b & 0xffff0000u);
        }
}

#endif
