/* The CPU level's vector machinery, shared by the micro-kernel headers: the vector width and
 * register blocking that the level's compiler flags select, the vector types with their loads and
 * stores, horizontal sums in a fixed order, bit-level helpers (reinterpretation, lane selects) and
 * prefetches.  Hand-written; included (through fc_simd.h) by every CPU level's core module.
 *
 * One source for every CPU level (fuel_cy/runtime/cpu_levels.py): the level's compiler flags
 * choose the vector width and the register blocking below; the algorithms (tiling, packing,
 * blocking, the vectorized exp and roundings) are the same at every level. */
#ifndef FUEL_CY_FC_ISA_H
#define FUEL_CY_FC_ISA_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <immintrin.h>
#endif
#include "fc_dtypes.h"   /* generated from fuel_cy/dtypes.py: FC_FOR_EACH_WORK_TYPE */

/* Vector width and register blocking of this level.  A register block holds FC_NRB rows x 2
 * vectors of accumulators: AVX-512 has 32 vector registers, so 8 x 2 = 16 accumulators plus the
 * two loaded vectors and a broadcast; AVX2 has 16, where 8 rows spilled every accumulator to the
 * stack (20x slower) and 6 rows (12 accumulators, as BLIS's Haswell kernel) beat 4 by 5%; SSE
 * also needs a register for each product (no FMA, two-operand forms), so it keeps 4 rows.
 * Row counts are multiples of 4; blocks of 4 and 2 rows take what FC_NRB leaves.  At AVX-512,
 * S = Q K^T and O += P V may take 6 rows x 4 vectors instead (fc_uarch.h fc_gemm_block). */
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
/* The rows of n keys, `bytes` each, into L2: the heads loops (fc_gemm.h) and the half-pool readers
 * (fc_half.h) prefetch the next group of keys while they compute the current one. */
static inline void fc_prefetch_l2(const void* p, size_t bytes) {
    for (size_t off = 0; off < bytes; off += 64) __builtin_prefetch((const char*)p + off, 0, 2);
}
static inline void fc_prefetch_keys(void* const* rows, ptrdiff_t n, size_t bytes) {
    for (ptrdiff_t j = 0; j < n; j++) fc_prefetch_l2(rows[j], bytes);
}
/* Key rows asked into L2 one line per step of a product's loop (fc_qk_pf_*, fc_pv_pf_*), not all at
 * once before it: a burst of a tile's 2 x 128 rows (2048 lines at D=128 f32) filled the miss
 * queues and stalled the core on the prefetch instructions themselves (two thirds of a paged
 * chunk task's own samples on Zen 4).  A product whose steps are fewer than the lines leaves the
 * rest to fc_pf_rest.  The products copy the stream into locals and back (fc_gemm.h FC_PF_ENTER,
 * FC_PF_LEAVE), so that its state can live in registers across their loops. */
typedef struct {
    void* const* rows;
    ptrdiff_t nrows, lines, r, l;
} fc_pf_stream;
static inline void fc_pf_init(fc_pf_stream* s, void* const* rows, ptrdiff_t n, size_t bytes) {
    s->rows = rows;
    s->nrows = n;
    s->lines = (ptrdiff_t)((bytes + 63) / 64);
    s->r = s->l = 0;
}
static inline __attribute__((always_inline)) void fc_pf_step(fc_pf_stream* s) {
    if (s->r < s->nrows) {
        __builtin_prefetch((const char*)s->rows[s->r] + 64 * s->l, 0, 2);
        if (++s->l == s->lines) { s->l = 0; s->r++; }
    }
}
static inline void fc_pf_rest(fc_pf_stream* s) {
    while (s->r < s->nrows) fc_pf_step(s);
}
/* Lines per step that ask for s's lines within the first half of a product's nsteps steps (at
 * least 1), so the last ones have the second half to arrive (the bf16 chunk tiles, whose rows are
 * half a float32 row's lines: fc_qk_dpbf16_pf, fc_pv_dpbf16_pf); and those steps. */
static inline int fc_pf_per_step(const fc_pf_stream* s, ptrdiff_t nsteps) {
    ptrdiff_t left = (s->nrows - s->r) * s->lines - s->l, half = nsteps / 2;
    return half > 0 && left > half ? (int)((left + half - 1) / half) : 1;
}
static inline __attribute__((always_inline)) void fc_pf_steps(fc_pf_stream* s, int n) {
    for (int i = 0; i < n; i++) fc_pf_step(s);
}
/* Keys a paged decode's heads loops prefetch ahead of the group they compute (fc_gemm.h,
 * fc_half.h); their callers pass that many row pointers past the computed rows where they exist. */
#define FC_PAGED_LOOKAHEAD 16
/* Keys past its group at which the half-pool heads loops (fc_half.h, fc_decode16.h) ask for a
 * head's rows into L1 as well (0: never; at most FC_PAGED_LOOKAHEAD, the pointers the callers
 * pass).  Chosen per CPU by fc_uarch.h, which says why; here because fc_half.h reads it. */
static int fc_h16_l1_ahead = 0;
/* Into L2: `bytes` at byte offset `ofs` (one head's part) of the rows of the n keys that come
 * FC_PAGED_LOOKAHEAD keys after key j0, of the navail whose pointers the caller passed; and into
 * L1 those that come l1_ahead keys after it (0: none). */
static inline void fc_prefetch_head_rows(const void* const* rows, ptrdiff_t j0, ptrdiff_t n, ptrdiff_t navail,
                                         size_t ofs, size_t bytes, ptrdiff_t l1_ahead) {
    ptrdiff_t pf = j0 + FC_PAGED_LOOKAHEAD;
    ptrdiff_t nn = pf >= navail ? 0 : (navail - pf < n ? navail - pf : n);
    for (ptrdiff_t j = 0; j < nn; j++) fc_prefetch_l2((const char*)rows[pf + j] + ofs, bytes);
    if (l1_ahead > 0) {
        pf = j0 + l1_ahead;
        nn = pf >= navail ? 0 : (navail - pf < n ? navail - pf : n);
        for (ptrdiff_t j = 0; j < nn; j++) fc_prefetch_row((const char*)rows[pf + j] + ofs, bytes);
    }
}
/* The paged decode's heads loop (fc_gemm.h, fc_half.h): keys [0, ncols) in groups of GROUP (at
 * most GMAX, a constant) and, per group, kv head by kv head: point hrows (element type ET) at the
 * group's rows of head h (D apart per head); then either (SPREAD 0) prefetch that head's rows
 * FC_PAGED_LOOKAHEAD keys on (and L1AHEAD keys on into L1, 0: none) before CALL, or (SPREAD 1)
 * point pfrows at them (a row's own where the caller passed no pointer that far) for CALL to ask
 * for as its steps go (fc_uarch.h fc_paged_spread).  CALL sees j0, n (the group's size), h, hrows
 * and pfrows.  ROWS, ncols, navail, nheads and D come from the enclosing function. */
#define FC_FOR_KEY_GROUPS_AND_HEADS(ET, ROWS, GMAX, GROUP, L1AHEAD, SPREAD, CALL)                 \
    {                                                                                            \
        ET* hrows[GMAX];                                                                         \
        ET* pfrows[GMAX];                                                                        \
        (void)pfrows;                                                                            \
        for (ptrdiff_t j0 = 0; j0 < ncols; j0 += GROUP) {                                        \
            ptrdiff_t n = ncols - j0 < GROUP ? ncols - j0 : GROUP;                               \
            for (ptrdiff_t h = 0; h < nheads; h++) {                                             \
                for (ptrdiff_t j = 0; j < n; j++) hrows[j] = (ROWS)[j0 + j] + h * D;             \
                if (SPREAD)                                                                      \
                    for (ptrdiff_t j = 0; j < n; j++)                                            \
                        pfrows[j] = j0 + j + FC_PAGED_LOOKAHEAD < navail                         \
                                        ? (ROWS)[j0 + j + FC_PAGED_LOOKAHEAD] + h * D : hrows[j]; \
                else                                                                             \
                    fc_prefetch_head_rows((const void* const*)(ROWS), j0, n, navail, h * D * sizeof(ET), \
                                          D * sizeof(ET), L1AHEAD);                              \
                CALL;                                                                            \
            }                                                                                    \
        }                                                                                        \
    }

/* This level's vectors of T (W lanes of FC_VBYTES bytes), loaded and stored unaligned (memcpy:
 * one vector move); one per work type of the dtype record. */
#define FC_DEFINE_VEC(T, SUF, W)                                                                 \
typedef T fc_vec_##SUF __attribute__((vector_size(FC_VBYTES)));                                 \
static inline fc_vec_##SUF fc_load_##SUF(const T* p) { fc_vec_##SUF v; memcpy(&v, p, FC_VBYTES); return v; } \
static inline void fc_store_##SUF(T* p, fc_vec_##SUF v) { memcpy(p, &v, FC_VBYTES); }
FC_FOR_EACH_WORK_TYPE(FC_DEFINE_VEC)

/* a * b + c with one rounding where the target has fused multiply-adds (__FP_FAST_FMAF: x86 with
 * FMA, aarch64) and two where it has none: what contraction makes of the vector loops'
 * `acc += x * y` at -O2 and above (an -O1 build leaves those unfused).  The scalar tails (D % W
 * columns, the last keys of a dot) call it, so that every copy of a tail sums alike however the
 * compiler vectorizes it: left to contraction, one copy was vectorized with masked epilogues whose
 * multiplies and adds stayed apart while another copy fused them, and a paged varlen chunk
 * differed from the packed one in the last bit at D % 16 != 0. */
#if defined(__FP_FAST_FMAF) && defined(__FP_FAST_FMA)
static inline float fc_madd_f32(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
static inline double fc_madd_f64(double a, double b, double c) { return __builtin_fma(a, b, c); }
#else
static inline float fc_madd_f32(float a, float b, float c) { return a * b + c; }
static inline double fc_madd_f64(double a, double b, double c) { return a * b + c; }
#endif

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
FC_FOR_EACH_WORK_TYPE(FC_DEFINE_HSUM)
#endif

#if defined(__AVX512F__)
/* The 16 horizontal sums of a[0..15] in one vector, lane 4 * (i % 4) + i / 4 holding a[i]'s: a
 * transposing tree of shuffles that adds the same lanes in the same order as fc_hsum_f32 (halves
 * folded: lane l + l + 8, then l + 4, l + 2, l + 1), so each sum has fc_hsum_f32's bits, at 45
 * instructions for 16 sums instead of 128.  With a[4 * key + row] the result is row-major: 128-bit
 * quarter r holds row r's sums for keys 0..3. */
static inline __m512 fc_hsum16_f32(const __m512* a) {
    __m512 c[8], e[4], g[2];
    for (int m = 0; m < 8; m++)    /* lanes 0-7: a[2m], lanes 8-15: a[2m + 1], each folded by 8 */
        c[m] = _mm512_shuffle_f32x4(a[2 * m], a[2 * m + 1], _MM_SHUFFLE(1, 0, 1, 0)) +
               _mm512_shuffle_f32x4(a[2 * m], a[2 * m + 1], _MM_SHUFFLE(3, 2, 3, 2));
    for (int n = 0; n < 4; n++)    /* quarter k: a[4n + k] folded by 4 */
        e[n] = _mm512_shuffle_f32x4(c[2 * n], c[2 * n + 1], _MM_SHUFFLE(2, 0, 2, 0)) +
               _mm512_shuffle_f32x4(c[2 * n], c[2 * n + 1], _MM_SHUFFLE(3, 1, 3, 1));
    for (int p = 0; p < 2; p++)    /* folded by 2 */
        g[p] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(e[2 * p]), _mm512_castps_pd(e[2 * p + 1]))) +
               _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(e[2 * p]), _mm512_castps_pd(e[2 * p + 1])));
    return _mm512_shuffle_ps(g[0], g[1], _MM_SHUFFLE(2, 0, 2, 0)) + _mm512_shuffle_ps(g[0], g[1], _MM_SHUFFLE(3, 1, 3, 1));
}
/* Quarter r of s (four floats) to S + r * lds, r = 0..3: the row-major 4 x 4 block that
 * fc_hsum16_f32 returns.  (Immediates spelled out: at -O1 a loop would not be unrolled.) */
static inline void fc_store_4x4_f32(float* S, ptrdiff_t lds, __m512 s) {
    _mm_storeu_ps(S, _mm512_extractf32x4_ps(s, 0));
    _mm_storeu_ps(S + lds, _mm512_extractf32x4_ps(s, 1));
    _mm_storeu_ps(S + 2 * lds, _mm512_extractf32x4_ps(s, 2));
    _mm_storeu_ps(S + 3 * lds, _mm512_extractf32x4_ps(s, 3));
}
/* NAME(Q, nrows4, D, krows, ncols, S, lds ...): S[i, j] = Q[i] . krows[j] for D a multiple of 16,
 * four keys x four rows at a time: 16 dot chains (lane d % 16, in order of d), each query load
 * feeding four FMAs, folded by one shuffle tree (fc_hsum16_f32, the lanes and fold of
 * fc_hsum_f32), so a dot's bits do not depend on the block it falls in.  KP is the key rows' type
 * and KE their element type, LOAD(p) reads 16 of them as floats, and the ncols % 4 keys left go
 * to TAIL, the same dots a key at a time; PF, what each step d of the first four rows also does
 * (it sees j and d); the trailing arguments are extra parameters. */
#define FC_DEFINE_ROWDOTS4(NAME, KP, KE, LOAD, TAIL, PF, ...)                                      \
static inline __attribute__((always_inline)) void NAME(const float* Q, ptrdiff_t nrows4, ptrdiff_t D, \
                                                       KP krows, ptrdiff_t ncols, float* S,        \
                                                       ptrdiff_t lds __VA_ARGS__) {                \
    ptrdiff_t j = 0;                                                                               \
    for (; j + 4 <= ncols; j += 4) {                                                               \
        const KE *k0 = krows[j], *k1 = krows[j + 1], *k2 = krows[j + 2], *k3 = krows[j + 3];       \
        for (ptrdiff_t i = 0; i < nrows4; i += 4) {                                                \
            const float* q = Q + i * D;                                                            \
            fc_vec_f32 a[16];   /* a[4 * key + row] */                                             \
            for (int c = 0; c < 16; c++) a[c] = (fc_vec_f32){0};                                   \
            for (ptrdiff_t d = 0; d < D; d += 16) {                                                \
                if (i == 0) { PF }                                                                 \
                fc_vec_f32 u0 = LOAD(k0 + d), u1 = LOAD(k1 + d), u2 = LOAD(k2 + d), u3 = LOAD(k3 + d); \
                for (int r = 0; r < 4; r++) {                                                      \
                    fc_vec_f32 x = fc_load_f32(q + r * D + d);                                     \
                    a[r] += x * u0; a[4 + r] += x * u1; a[8 + r] += x * u2; a[12 + r] += x * u3;   \
                }                                                                                  \
            }                                                                                      \
            fc_store_4x4_f32(S + i * lds + j, lds, fc_hsum16_f32((const __m512*)a));               \
        }                                                                                          \
    }                                                                                              \
    if (j < ncols) TAIL;                                                                           \
}
#endif

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
/* Lane-wise unsigned minimum and maximum: one instruction where the level has it (gcc turns the
 * generic compare-and-select into three dependent ones, a latency chain in a reduction loop). */
#if FC_VBYTES == 64
#define FC_U32_MINMAX(OP, CMP) return (fc_u32v)_mm512_##OP##_epu32((__m512i)a, (__m512i)b);
#elif FC_VBYTES == 32 && defined(__AVX2__)
#define FC_U32_MINMAX(OP, CMP) return (fc_u32v)_mm256_##OP##_epu32((__m256i)a, (__m256i)b);
#elif FC_VBYTES == 16 && defined(__SSE4_1__)
#define FC_U32_MINMAX(OP, CMP) return (fc_u32v)_mm_##OP##_epu32((__m128i)a, (__m128i)b);
#else
#define FC_U32_MINMAX(OP, CMP) return fc_select_u32((fc_i32v)(a CMP b), a, b);
#endif
static inline fc_u32v fc_min_u32(fc_u32v a, fc_u32v b) { FC_U32_MINMAX(min, <) }
static inline fc_u32v fc_max_u32(fc_u32v a, fc_u32v b) { FC_U32_MINMAX(max, >) }

/* Lane-wise max and min of this level as x86's maxps, minps and maxpd give them: the second
 * operand where either is NaN, so a running maximum fed new values first never takes in a NaN,
 * and a clamp's bound lets a NaN through. */
#if FC_VBYTES == 64
static inline fc_vec_f32 fc_max_vf32(fc_vec_f32 a, fc_vec_f32 b) { return (fc_vec_f32)_mm512_max_ps((__m512)a, (__m512)b); }
static inline fc_vec_f32 fc_min_vf32(fc_vec_f32 a, fc_vec_f32 b) { return (fc_vec_f32)_mm512_min_ps((__m512)a, (__m512)b); }
static inline fc_vec_f64 fc_max_vf64(fc_vec_f64 a, fc_vec_f64 b) { return (fc_vec_f64)_mm512_max_pd((__m512d)a, (__m512d)b); }
#elif FC_VBYTES == 32
static inline fc_vec_f32 fc_max_vf32(fc_vec_f32 a, fc_vec_f32 b) { return (fc_vec_f32)_mm256_max_ps((__m256)a, (__m256)b); }
static inline fc_vec_f32 fc_min_vf32(fc_vec_f32 a, fc_vec_f32 b) { return (fc_vec_f32)_mm256_min_ps((__m256)a, (__m256)b); }
static inline fc_vec_f64 fc_max_vf64(fc_vec_f64 a, fc_vec_f64 b) { return (fc_vec_f64)_mm256_max_pd((__m256d)a, (__m256d)b); }
#elif defined(__SSE2__)
static inline fc_vec_f32 fc_max_vf32(fc_vec_f32 a, fc_vec_f32 b) { return (fc_vec_f32)_mm_max_ps((__m128)a, (__m128)b); }
static inline fc_vec_f32 fc_min_vf32(fc_vec_f32 a, fc_vec_f32 b) { return (fc_vec_f32)_mm_min_ps((__m128)a, (__m128)b); }
static inline fc_vec_f64 fc_max_vf64(fc_vec_f64 a, fc_vec_f64 b) { return (fc_vec_f64)_mm_max_pd((__m128d)a, (__m128d)b); }
#else  /* other architectures: a CMP b ? a : b by masks (false on NaN: b) */
#define FC_PICK_BY_MASK(NAME, T, SUF, CMP)                                                       \
static inline fc_vec_##SUF NAME(fc_vec_##SUF a, fc_vec_##SUF b) {                                \
    typedef __typeof__(a > b) iv;  /* the comparison's mask: signed integers as wide as T */     \
    iv m = (iv)(a CMP b), ai, bi;                                                                \
    memcpy(&ai, &a, FC_VBYTES);                                                                  \
    memcpy(&bi, &b, FC_VBYTES);                                                                  \
    ai = (ai & m) | (bi & ~m);                                                                   \
    memcpy(&a, &ai, FC_VBYTES);                                                                  \
    return a;                                                                                    \
}
FC_PICK_BY_MASK(fc_max_vf32, float, f32, >)
FC_PICK_BY_MASK(fc_min_vf32, float, f32, <)
FC_PICK_BY_MASK(fc_max_vf64, double, f64, >)
#endif

#endif
