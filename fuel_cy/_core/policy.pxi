# Element policies for the attention core.  Hand-written; included by the generated extension.
#
# `real_t` is the storage/arithmetic type (float or double); `rnd_t` is a compile-time tag that
# says whether every arithmetic result is rounded to a narrower T.  f32 = (RoundNone, float),
# f64 = (RoundNone, double), bf16 = (RoundBF16, float), f16 = (RoundF16, float): half types are
# held in float (exactly representable) and each step is rounded to T with round-to-nearest-even,
# which is what a generic kernel over half::bf16 / half::f16 computes ("math in T").
#
# The lists of the dtype record (fuel_cy/dtypes.py) are generated into _core_dtypes.pxi: the tag
# structs, `rnd_t` and `real_t`, R() (the rounding to T), the declarations of each dtype's C
# helpers (fc_round_<dtype>, fc_qk_<dtype>, fc_pv_<dtype>, ...) and the chains that pick them.
# What is written here once, over any policy, stays here.

from libc.math cimport tanh, tanhf

include "_core_dtypes.pxi"

cdef extern from "fc_math.h" nogil:
    float FC_FUSED_SHIFT_MAX_F32   # |row max| below which the softmax's shift may be fused (fc_math.h)
    double FC_FUSED_SHIFT_MAX_F64
    float fc_expf(float x)
    double fc_exp_f64(double x)
    float fc_tanh_via_double(float x)

# The C micro-kernels (fc_simd.h includes one header per role; each group below names its own).
cdef extern from "fc_simd.h" nogil:
    # fc_gemm.h: tile GEMMs (fc_qk_<dtype> and fc_pv_<dtype> of every policy: _core_dtypes.pxi)
    void fc_rowdots_f32(const float* Q, Py_ssize_t nrows4, Py_ssize_t D, float** krows, Py_ssize_t ncols,
                        float* S, Py_ssize_t lds)
    void fc_rowdots_f64(const double* Q, Py_ssize_t nrows4, Py_ssize_t D, double** krows, Py_ssize_t ncols,
                        double* S, Py_ssize_t lds)
    void fc_rowdots_heads_f32(const float* Q, Py_ssize_t nheads, Py_ssize_t rph4, Py_ssize_t D, float** krows,
                              Py_ssize_t ncols, Py_ssize_t navail, float* S, Py_ssize_t lds)
    void fc_rowdots_heads_f64(const double* Q, Py_ssize_t nheads, Py_ssize_t rph4, Py_ssize_t D, double** krows,
                              Py_ssize_t ncols, Py_ssize_t navail, double* S, Py_ssize_t lds)
    void fc_pv_heads_f32(const float* P, Py_ssize_t ldp, Py_ssize_t nheads, Py_ssize_t rph4, Py_ssize_t ncols,
                         Py_ssize_t navail, float** vrows, Py_ssize_t D, float* O, Py_ssize_t ldo)
    void fc_pv_heads_f64(const double* P, Py_ssize_t ldp, Py_ssize_t nheads, Py_ssize_t rph4, Py_ssize_t ncols,
                         Py_ssize_t navail, double** vrows, Py_ssize_t D, double* O, Py_ssize_t ldo)
    void fc_pv_contig_f32(const float* P, Py_ssize_t ldp, Py_ssize_t nrows4, Py_ssize_t ncols, const float* V,
                          Py_ssize_t ldv, float** vrows, Py_ssize_t D, float* O, Py_ssize_t ldo)
    void fc_pv_contig_f64(const double* P, Py_ssize_t ldp, Py_ssize_t nrows4, Py_ssize_t ncols, const double* V,
                          Py_ssize_t ldv, double** vrows, Py_ssize_t D, double* O, Py_ssize_t ldo)
    void fc_gemm_acc_f32(const float* A, Py_ssize_t ai, Py_ssize_t ak, Py_ssize_t nrows4, Py_ssize_t K,
                         const float* B, Py_ssize_t ldb, Py_ssize_t ncols, float* C, Py_ssize_t ldc)
    void fc_gemm_acc_f64(const double* A, Py_ssize_t ai, Py_ssize_t ak, Py_ssize_t nrows4, Py_ssize_t K,
                         const double* B, Py_ssize_t ldb, Py_ssize_t ncols, double* C, Py_ssize_t ldc)
    void fc_gemm_tn_f32(const float* A, Py_ssize_t ak, Py_ssize_t nrows4, Py_ssize_t K,
                        const float* B, Py_ssize_t ldb, Py_ssize_t ncols, float* C, Py_ssize_t ldc, int pf)
    void fc_gemm_tn_f64(const double* A, Py_ssize_t ak, Py_ssize_t nrows4, Py_ssize_t K,
                        const double* B, Py_ssize_t ldb, Py_ssize_t ncols, double* C, Py_ssize_t ldc, int pf)
    bint FC_HAVE_DPBF16

    # fc_uarch.h: choices inside a level per micro-architecture
    int fc_bwd_rows   # query rows per backward step (at most BR_BWD)
    int fc_bwd_rows_pairs   # the same where all five products run on vdpbf16ps
    Py_ssize_t fc_tn_ahead   # dK and dV bytes above which C += A^T B asks for C's rows ahead (-1: never)
    int fc_chunk_spread      # a chunk's tiles ask for their next rows a line per product step (1) or at once (0)
    int fc_paged_group       # keys per group of the float32/float64 paged decode's heads loops (1 .. 16)
    int fc_paged_spread      # paged heads loops, bf16 decode scores: rows ahead a line per product step (1) or at once (0)
    int fc_h16_l1_ahead      # keys past a group whose rows the half-pool heads loops ask into L1 (0: never)
    int fc_qk_slab           # query rows per slab of the flash tile's scores and softmax (0: the whole tile)
    int fc_qk_fused_max      # the flash tile's row maxima taken as its scores are stored (1) or by a pass (0)
    void fc_qk_dpbf16(const unsigned int* Qp, Py_ssize_t nrows4, Py_ssize_t D2, const unsigned int* Kp,
                      float* S, Py_ssize_t lds, Py_ssize_t ncols)
    # fc_amx.h: one tile configuration per task (between these two, on one thread)
    void fc_amx_hold()
    void fc_amx_unhold()
    # fc_amx.h: O += P V beside the bf16 scores (float32 loops, or tiles where the scores take them)
    void fc_pv_bf16v(const float* P, Py_ssize_t ldp, Py_ssize_t nrows4, Py_ssize_t ncols, const float* V,
                     Py_ssize_t ldv, float** vrows, Py_ssize_t D, float* O, Py_ssize_t ldo,
                     const unsigned int* vpairs, int nterms)
    void fc_pv_bf16v16(const float* P, Py_ssize_t ldp, Py_ssize_t nrows4, Py_ssize_t ncols,
                       const unsigned short** vrows16, Py_ssize_t D, float* O, Py_ssize_t ldo,
                       const unsigned int* vpairs, int nterms)
    # and round_p's one tile product per block with P paired by the exp pass (no split, no float P)
    bint fc_pv_paired_whole(Py_ssize_t nrows4, Py_ssize_t ncols, Py_ssize_t D)
    void fc_pv_bf16_paired(const unsigned int* Pt, Py_ssize_t ldpt, Py_ssize_t nrows4, Py_ssize_t ncols,
                           const unsigned int* vpairs, Py_ssize_t D, float* O, Py_ssize_t ldo)
    void fc_qk_dpbf16_part(const unsigned int* Qp, Py_ssize_t i0, Py_ssize_t i1, Py_ssize_t D2, Py_ssize_t p0,
                           const unsigned int* Kp, float* S, Py_ssize_t lds, Py_ssize_t j_begin, Py_ssize_t j_end,
                           int acc)
    # fc_pack.h: the backward's round_p operands for it (P, dS: rows paired per column; dO, Q transposed)
    void fc_pair_cols_bf16(const float* X, Py_ssize_t ldx, Py_ssize_t nrows, Py_ssize_t ncols, unsigned int* out)
    void fc_pair_rows_t_bf16(const float* X, Py_ssize_t ldx, Py_ssize_t nrows, Py_ssize_t D, unsigned int* out)
    # fc_gemm.h: O += P V with P rounded to bf16 by the conversion, on vdpbf16ps (round_p)
    void fc_pv_dpbf16_vec(const float* P, Py_ssize_t ldp, Py_ssize_t nrows, Py_ssize_t ncols,
                          const unsigned int* Vp, Py_ssize_t D, float* O, Py_ssize_t ldo, unsigned int* Pp, int exact)
    # and the backward's dV/dK products there, into accumulators held transposed ([D][keys])
    bint fc_bf16_on_tiles()
    enum: FC_AMX_TN_ROWS   # query rows per call on the tiles, at most
    void fc_tn_bf16t(const float* P, Py_ssize_t ldp, Py_ssize_t nrows, Py_ssize_t ncols, const float* X,
                     Py_ssize_t ldx, Py_ssize_t D, float* Ct, Py_ssize_t ldc, unsigned int* xt, int nterms)

    # fc_half.h: bf16/f16 storage <-> float32
    void fc_widen_half(const unsigned short* x, float* out, Py_ssize_t n, int is_f16)
    void fc_narrow_half(const float* x, unsigned short* out, Py_ssize_t n, int is_f16)
    void fc_round_rows_half(float* P, Py_ssize_t ldp, Py_ssize_t nrows, Py_ssize_t ncols, int is_f16)
    enum: FC_PAGED_LOOKAHEAD   # rows past the computed ones that the paged heads loops prefetch
    void fc_rowdots_heads_h16(const float* Q, Py_ssize_t nheads, Py_ssize_t rph4, Py_ssize_t D,
                              const unsigned short** krows, Py_ssize_t ncols, Py_ssize_t navail, float* S,
                              Py_ssize_t lds, int is_f16)
    void fc_pv_heads_h16(const float* P, Py_ssize_t ldp, Py_ssize_t nheads, Py_ssize_t rph4, Py_ssize_t ncols,
                         Py_ssize_t navail, const unsigned short** vrows, Py_ssize_t D, float* O, Py_ssize_t ldo,
                         int is_f16)
    # fc_decode16.h: a bf16 decode step's round_p P V on vdpbf16ps, V's rows read in place
    void fc_pv_heads_dpbf16(const float* P, Py_ssize_t ldp, Py_ssize_t nheads, Py_ssize_t rph4, Py_ssize_t ncols,
                            Py_ssize_t navail, const unsigned short** vrows, Py_ssize_t D, float* O, Py_ssize_t ldo,
                            unsigned int* Pp)
    void fc_qk_heads_dpbf16(const unsigned int* Qp, Py_ssize_t D2, Py_ssize_t nheads, Py_ssize_t rph4, Py_ssize_t D,
                            const unsigned short** krows, Py_ssize_t ncols, Py_ssize_t navail, float* S,
                            Py_ssize_t lds)

    # fc_pack.h: tile packing
    void fc_pack_kt_f32(float** rows, Py_ssize_t n, Py_ssize_t D, float* out)
    void fc_prefetch_keys(void** rows, Py_ssize_t n, size_t nbytes)   # fc_isa.h: n rows into L2
    # fc_isa.h: rows into L2 a line per step of a product's loop; fc_gemm.h: the products that do so
    ctypedef struct fc_pf_stream:
        pass
    void fc_pf_init(fc_pf_stream* s, void** rows, Py_ssize_t n, size_t nbytes)
    void fc_pf_rest(fc_pf_stream* s)
    void fc_pv_pf_f32(const float* P, Py_ssize_t ldp, Py_ssize_t nrows4, Py_ssize_t ncols, float** vrows,
                      fc_pf_stream* pf, Py_ssize_t D, float* O, Py_ssize_t ldo)
    void fc_pv_pf_f64(const double* P, Py_ssize_t ldp, Py_ssize_t nrows4, Py_ssize_t ncols, double** vrows,
                      fc_pf_stream* pf, Py_ssize_t D, double* O, Py_ssize_t ldo)
    void fc_qk_pf_f32(const float* Q, Py_ssize_t nrows4, Py_ssize_t D, const float* Kt, float* S,
                      Py_ssize_t lds, Py_ssize_t ncols, fc_pf_stream* pf)
    void fc_qk_pf_f64(const double* Q, Py_ssize_t nrows4, Py_ssize_t D, const double* Kt, double* S,
                      Py_ssize_t lds, Py_ssize_t ncols, fc_pf_stream* pf)
    # fc_gemm.h: S = Q K^T keeping each row's maximum lane by lane (rmax[nrows4][W]), and a row's max from them
    void fc_qk_max_f32(const float* Q, Py_ssize_t nrows4, Py_ssize_t D, const float* Kt, float* S,
                       Py_ssize_t lds, Py_ssize_t ncols, float* rmax)
    void fc_qk_max_f64(const double* Q, Py_ssize_t nrows4, Py_ssize_t D, const double* Kt, double* S,
                       Py_ssize_t lds, Py_ssize_t ncols, double* rmax)
    float fc_rmax_row_f32(const float* rmax, Py_ssize_t r, const float* s, Py_ssize_t n)
    double fc_rmax_row_f64(const double* rmax, Py_ssize_t r, const double* s, Py_ssize_t n)
    bint fc_qk_max_whole_f32(Py_ssize_t ncols)
    bint fc_qk_max_whole_f64(Py_ssize_t ncols)
    void fc_qk_dpbf16_pf(const unsigned int* Qp, Py_ssize_t nrows4, Py_ssize_t D2, const unsigned int* Kp,
                         float* S, Py_ssize_t lds, Py_ssize_t ncols, fc_pf_stream* pf)
    void fc_pv_dpbf16_pf(const float* P, Py_ssize_t ldp, Py_ssize_t nrows, Py_ssize_t ncols,
                         const unsigned int* Vp, Py_ssize_t D, float* O, Py_ssize_t ldo, unsigned int* Pp, int exact,
                         fc_pf_stream* pf)
    void fc_transpose_f32(const float* src, Py_ssize_t lds, Py_ssize_t nrows, Py_ssize_t ncols, float* dst,
                          Py_ssize_t ldd)
    void fc_pair_rows_bf16(const float* x, Py_ssize_t rows, Py_ssize_t D, unsigned int* out, Py_ssize_t ldo)
    void fc_pack_k_pairs_bf16(float** rows, Py_ssize_t n, Py_ssize_t D, unsigned int* out)
    void fc_pack_v_pairs_bf16(float** rows, Py_ssize_t n, Py_ssize_t D, unsigned int* out)
    void fc_pair_row_b16(const unsigned short* x, Py_ssize_t D, unsigned int* out)
    void fc_pack_kt_h16(const unsigned short** rows, Py_ssize_t n, Py_ssize_t D, float* out, int is_f16)
    void fc_pack_k_pairs_b16(const unsigned short** rows, Py_ssize_t n, Py_ssize_t D, unsigned int* out)
    void fc_pack_v_pairs_b16(const unsigned short** rows, Py_ssize_t n, Py_ssize_t D, unsigned int* out)
    # fc_f16_tiles.h: f16 as two exact bf16 terms, for the tiles (round_p)
    void fc_split_q_f16(const unsigned short* x, Py_ssize_t D, unsigned int* out)
    void fc_split_q_rows_f32(const float* X, Py_ssize_t ldx, Py_ssize_t nrows, Py_ssize_t D, unsigned int* out,
                             Py_ssize_t ldo)
    void fc_pack_k_split_f16(const unsigned short** rows, Py_ssize_t n, Py_ssize_t D, unsigned int* out)
    void fc_pack_v_split_f16(const unsigned short** rows, Py_ssize_t n, Py_ssize_t D, unsigned int* out)
    void fc_split_p_f16(const float* P, Py_ssize_t ldp, Py_ssize_t nrows, Py_ssize_t ncols, unsigned int* out,
                        Py_ssize_t ldo, Py_ssize_t plane)
    void fc_pack_k_split_f32(float** rows, Py_ssize_t n, Py_ssize_t D, unsigned int* out)
    void fc_pack_v_split_f32(float** rows, Py_ssize_t n, Py_ssize_t D, unsigned int* out)
    void fc_pv_f16s(const float* P, Py_ssize_t ldp, const unsigned int* Pw, Py_ssize_t ldpw, Py_ssize_t plane,
                    Py_ssize_t nrows4, Py_ssize_t ncols, const unsigned int* Vs, const unsigned short** vrows16,
                    float** vrows, Py_ssize_t D, float* O, Py_ssize_t ldo)
    void fc_pv_f16s_loops(const float* P, Py_ssize_t ldp, Py_ssize_t r0, Py_ssize_t nrows4, Py_ssize_t ncols,
                          const unsigned short** vrows16, float** vrows, Py_ssize_t c0, Py_ssize_t D, float* O,
                          Py_ssize_t ldo)
    void fc_tn_f16s(const float* P, Py_ssize_t ldp, Py_ssize_t nrows, Py_ssize_t ncols, const float* X,
                    Py_ssize_t ldx, Py_ssize_t D, float* Ct, Py_ssize_t ldc, unsigned int* xt)
    void fc_tn_part_f32(const float* P, Py_ssize_t ldp, Py_ssize_t r0, Py_ssize_t r1, Py_ssize_t j0, Py_ssize_t j1,
                        const float* X, Py_ssize_t ldx, Py_ssize_t d0, Py_ssize_t d1, float* Ct, Py_ssize_t ldc)
    bint fc_f16_all_finite(const unsigned short* x, Py_ssize_t n)
    bint fc_f32_all_finite(const float* x, Py_ssize_t n)

    # fc_exp.h: softmax row passes
    bint FC_ROWRED_IN_C
    float fc_row_max_f32(const float* s, Py_ssize_t n)
    float fc_row_max16_f32(const float* s, Py_ssize_t n)
    double fc_row_max16_f64(const double* s, Py_ssize_t n)
    bint FC_HAVE_EXP16
    double fc_row_max_f64(const double* s, Py_ssize_t n)
    float fc_dot16_f32(const float* a, const float* b, Py_ssize_t n)
    double fc_dot16_f64(const double* a, const double* b, Py_ssize_t n)
    float fc_exp_scaled_sum_f32(float* s, Py_ssize_t n, float scale, float m)
    float fc_exp_shift_sum16_f32(float* s, Py_ssize_t n, float m, int sparse)
    void fc_rescale_factors_f32(const float* m_old, const float* m_new, Py_ssize_t n, float* alpha)
    void fc_exp_lanes_bf16p(const float* s, Py_ssize_t n, float scale, float m, unsigned short* p, int sparse,
                            float* lanes)
    void fc_exp_lanes_rp_f32(float* s, Py_ssize_t n, float scale, float m, int rp, int sparse, float* lanes)
    void fc_sum16_rows(const float* lanes, Py_ssize_t n, float* totals)
    double fc_exp_scaled_sum16_f64(double* s, Py_ssize_t n, double scale, double m)

cdef inline real_t EXP(rnd_t tag, real_t x) noexcept nogil:
    # f32 and the half types share the vectorizable f32 exp (<= 4 ulp of f32, far below a half
    # type's spacing); the half types then round it to T like every other step.
    if real_t is double:
        return fc_exp_f64(x)
    else:
        return R(tag, fc_expf(x))


cdef inline real_t TANH(rnd_t tag, real_t x) noexcept nogil:
    if rnd_t is RoundNone:
        if real_t is float:
            return tanhf(x)
        else:
            return tanh(x)
    else:
        return R(tag, <real_t>fc_tanh_via_double(<float>x))
