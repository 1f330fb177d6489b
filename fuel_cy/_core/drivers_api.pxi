# The drivers of the hand-written core: every `drive_*` function that entries.pxi `call` runs is
# defined here, and only these.  Hand-written; included by every `_core_<level>.pyx` after
# drivers.pxi (the shared machinery: _forward, _paged, _backward) and before entries.pxi.  Which
# kernel calls which driver with which dims is fuel_cy/codegen/cores.py BINDINGS; the generated
# validators (templates/cython/_kernels.pyx.j2) pass them to `call`.
#
# Why a .pxi of definitions and not a .pxd of declarations: Cython 3 rejects a cdef function
# declared without a body in a .pyx or an included .pxi ("Non-extern C function declared but not
# defined"); only a .pxd may declare one, and Cython reads a .pxd only for the module of the same
# name (here `_core_<level>.pxd`, one per level, next to the generated module), where it also
# exports every declared function through the module's __pyx_capi__.  So each driver is declared
# by its definition: one call into drivers.pxi, so that this file reads as the signature list,
# and the compiler checks every call the entries make against it.
#
# The calling convention, every driver:
#   tag      the element policy, a compile-time tag (policy.pxi rnd_t: RoundNone for f32/f64 and
#            the float32-compute kernels, RoundBF16 / RoundF16 for bf16 / f16 "math in T")
#   inputs   the data of the validated work arrays (drivers.pxi _data), in contract order, const;
#            an absent optional input (alibi_slopes) is NULL
#   outputs  the data of fresh arrays of the work type, each written in full
#   dims     the sizes cores.py names for the driver, in that order: (B, Hq, Hkv, Sq, Sk, D) for
#            the forward and backward drivers, (B, Hq, Hkv, Sq, D, block_size, max_blocks_per_seq,
#            num_blocks) for the paged ones
#   params   the validated keyword parameters (softmax_scale, softcap, causal, window_size_*, k_len)
#   nthreads the OpenMP team size (small calls run on one thread: drivers.pxi _threads_for)
#   is_f16   (the *_half drivers only) 1 for f16 inputs, 0 for bf16; they take inputs widened
#            exactly to float, or read in their 16-bit storage (cores.py half_storage)
#
# entries.pxi also uses these names of drivers.pxi: _data, _dim, _empty_as, _work, _temp, _from_work,
# cnp (numpy's C API); and the type numbers numpy has no constant for (_FC_NUM_<code>) of the
# generated _core_dtypes.pxi.


# ---- forward: naive (scores materialized per row block) and flash (online softmax) ------------


cdef object drive_attention_naive(rnd_t tag, const real_t* q, const real_t* k, const real_t* v, const real_t* slopes,
                                  real_t* out, tuple dims, dict params, int nthreads):
    _forward(tag, q, k, v, slopes, out, dims, params, nthreads, True)


cdef object drive_attention_flash(rnd_t tag, const real_t* q, const real_t* k, const real_t* v, const real_t* slopes,
                                  real_t* out, tuple dims, dict params, int nthreads):
    _forward(tag, q, k, v, slopes, out, dims, params, nthreads, False)


cdef object drive_attention_flash_half(RoundNone tag, const float* q, const float* k, const float* v,
                                       const float* slopes, float* out, tuple dims,
                                       dict params, int nthreads, int is_f16,
                                       const unsigned short* k16=NULL, const unsigned short* v16=NULL,
                                       const unsigned short* q_h16=NULL, const unsigned short* k_h16=NULL,
                                       const unsigned short* v_h16=NULL, unsigned short* out_h16=NULL,
                                       float* lse=NULL):
    """Flash attention on bf16/f16 inputs (widened exactly) under float32 compute.  Where the CPU
    level has AVX512-BF16, bf16 scores are vdpbf16ps dot products of the bf16 values (fc_qk_dpbf16),
    or AMX tile sums where the CPU has AMX-BF16, P V then on the tiles too (fc_pv_h16v);
    otherwise, and for f16, the float32 loops.  k16, v16 (k and v NULL): a decode step (Sq == 1)
    reading K and V in their 16-bit storage, C-contiguous, widened in registers (no copy).
    q_h16, k_h16, v_h16, out_h16 (q, k, out NULL, v NULL with v_h16): Q and K read in their
    16-bit storage, V too where _pairs16_v, the output rounded into its T array (_forward).
    lse: [B, Hq, Sq] float32 filled with +inf, written with each row's log-sum-exp, or NULL."""
    cdef Py_ssize_t sq = dims[3]
    _forward(tag, q, k, v, slopes, out, dims, params, nthreads, False,
             bool(FC_HAVE_DPBF16) and not is_f16 and k16 == NULL, 0, NULL, <const float*>NULL, None, False, NULL,
             lse, sq, k16, v16, is_f16, NULL, 0, _round_p(params, is_f16), q_h16, k_h16, v_h16, out_h16)


# ---- paged decode over a block table ------------------------------------------------------------


cdef object drive_attention_paged_naive(rnd_t tag, const real_t* q, const real_t* kc, const real_t* vc,
                                        const unsigned int* table, const unsigned int* ctx_lens,
                                        const real_t* slopes, real_t* out,
                                        tuple dims, dict params, int nthreads):
    _paged(tag, q, kc, vc, NULL, NULL, 0, table, ctx_lens, slopes, out, dims, params, nthreads)


cdef object drive_attention_paged_half(rnd_t tag, const float* q, const unsigned short* kc,
                                       const unsigned short* vc, const unsigned int* table,
                                       const unsigned int* ctx_lens, const float* slopes,
                                       float* out, tuple dims, dict params, int nthreads, int is_f16):
    """Paged decode over a bf16/f16 pool read in place, under float32 compute (RoundNone: the
    mixed kernel) or math in T (the dtype's rounded policy): no widened copy of the pool (the cores
    widen each group of keys as they go, exactly), so a decode step reads the cache at two bytes
    an element, and a pool far larger than the live contexts costs nothing beyond them.  Same
    bits as drive_attention_paged_naive on the widened pool."""
    _paged(tag, q, <const float*>NULL, <const float*>NULL, kc, vc, is_f16, table, ctx_lens, slopes, out, dims,
           params, nthreads)


# ---- backward of flash attention: dq, dk, dv ----------------------------------------------------


cdef object drive_attention_flash_backward(rnd_t tag, const real_t* q, const real_t* k, const real_t* v,
                                           const real_t* dout, const real_t* slopes,
                                           real_t* dq, real_t* dk, real_t* dv,
                                           tuple dims, dict params, int nthreads):
    _backward(tag, q, k, v, dout, slopes, dq, dk, dv, dims, params, nthreads, False)


cdef object drive_attention_flash_backward_half(RoundNone tag, const float* q, const float* k, const float* v,
                                                const float* dout, const float* slopes, const float* dlse,
                                                const float* fwd_out, const float* fwd_lse,
                                                float* dq, float* dk, float* dv,
                                                tuple dims, dict params, int nthreads, int is_f16):
    """The backward on bf16/f16 inputs (widened exactly) under float32 compute: with AVX512-BF16,
    bf16 S = Q K^T and dP = dO V^T are vdpbf16ps dot products and the three products with P and dS
    (float32 values) float32 FMAs; where the CPU has AMX-BF16, all five run on the tiles (P and dS
    split into three exact bf16 terms: fc_amx.h).  dlse: the gradient of the forward's lse,
    [B, Hq, Sq] C-contiguous float32, or NULL (zero); fwd_out (widened, as dout) and fwd_lse
    ([B, Hq, Sq] C-contiguous float32), both or NULL, taken where _saved_stats says."""
    cdef Py_ssize_t sq = dims[3]
    _backward(tag, q, k, v, dout, slopes, dq, dk, dv, dims, params, nthreads, bool(FC_HAVE_DPBF16) and not is_f16,
              0, False, NULL, NULL, None, dlse, sq, _round_p(params, is_f16), fwd_out, fwd_lse, sq)


# ---- packed variable-length sequences (flash-attn's varlen layout, bottom-right masks) -----------


cdef object drive_attention_varlen(rnd_t tag, const real_t* q, const real_t* k, const real_t* v,
                                   const unsigned int* cu_seqlens_q, const unsigned int* cu_seqlens_k,
                                   const real_t* slopes, Py_ssize_t slopes_ld, const unsigned int* block_table,
                                   Py_ssize_t max_blocks, const unsigned int* seqused_k, real_t* out, float* lse,
                                   tuple dims, dict params, int nthreads, const Py_ssize_t* row_strides):
    """dims (Tq, NB, BS, B1, Hq, Hkv, D): q [Tq, Hq, D], k/v [NB, BS, Hkv, D] (packed: NB * BS
    rows, or with block_table [B, max_blocks] a pool of NB blocks), B1 = B + 1 offsets each;
    slopes: the float32 ALiBi slopes in the work type (exactly), Hq per sequence, slopes_ld apart
    (0: the same Hq for every sequence), or NULL; seqused_k: each sequence's used keys, or NULL;
    lse: [Hq, Tq] float32 filled with +inf, written with each row's log-sum-exp, or NULL;
    row_strides: the element strides of a row and of a head of q, k and v (6; the rows' D elements
    adjacent), out C-contiguous."""
    _varlen(tag, q, k, v, NULL, NULL, 0, cu_seqlens_q, cu_seqlens_k, block_table, max_blocks, seqused_k, slopes,
            slopes_ld, out, lse, dims, params, nthreads, False, row_strides)


cdef object drive_attention_varlen_half(RoundNone tag, const unsigned short* q, const unsigned short* k,
                                        const unsigned short* v, const unsigned int* cu_seqlens_q,
                                        const unsigned int* cu_seqlens_k, const float* slopes, Py_ssize_t slopes_ld,
                                        const unsigned int* block_table, Py_ssize_t max_blocks,
                                        const unsigned int* seqused_k, unsigned short* out, float* lse, tuple dims,
                                        dict params, int nthreads, int is_f16, const Py_ssize_t* row_strides,
                                        bint f16_split=False):
    """drive_attention_varlen on bf16/f16 inputs under float32 compute: q, k and v in their 16-bit
    storage (q read as the half flash reads it, each sequence's keys gathered as it runs: only the
    keys a call uses are read, so a paged pool costs only its live blocks), out [Tq, Hq, D]
    C-contiguous in T, each row rounded once from float32; the bf16 scores by vdpbf16ps or AMX
    tiles where the CPU has them (as drive_attention_flash_half); f16_split: the entry found f16's
    split words allowed (_f16_split) and q finite (_varlen)."""
    _varlen(tag, <const float*>NULL, <const float*>NULL, <const float*>NULL, k, v, is_f16, cu_seqlens_q,
            cu_seqlens_k, block_table, max_blocks, seqused_k, slopes, slopes_ld, <float*>NULL, lse, dims, params,
            nthreads, bool(FC_HAVE_DPBF16) and not is_f16, row_strides, _round_p(params, is_f16), f16_split, q, out)


# ---- torch SDPA's masks: a boolean mask and an additive bias, broadcast (top-left masks) ---------


cdef object drive_attention_masked(rnd_t tag, const real_t* q, const real_t* k, const real_t* v,
                                   const unsigned char* attn_mask, const real_t* attn_bias,
                                   real_t* out, tuple dims, dict params, int nthreads, tuple mask_dims,
                                   const Py_ssize_t* strides, float* lse=NULL):
    """The flash forward with attn_mask (nonzero: the pair takes part) and attn_bias (added after
    softcap), each [MB, MH, MQ, Sk] with each leading dim 1 or its extent; NULL when absent.
    mask_dims (MB, MH, MQ, AB, AH, AQ): their leading dims (entries.pxi expands a key dim of 1).
    strides: the (batch, head, row) element strides of q, k, v and out (_forward), 12 in all, or NULL.
    lse: [B, Hq, Sq] float32 filled with +inf, written with each row's log-sum-exp, or NULL."""
    cdef Py_ssize_t sq = dims[3]
    _forward(tag, q, k, v, NULL, out, dims, params, nthreads, False, False, 0, attn_mask, attn_bias, mask_dims,
             False, strides, lse, sq)


cdef object drive_attention_masked_half(RoundNone tag, const float* q, const float* k, const float* v,
                                        const unsigned char* attn_mask, const float* attn_bias,
                                        float* out, tuple dims, dict params, int nthreads, tuple mask_dims,
                                        int is_f16, const unsigned short* k16=NULL, const unsigned short* v16=NULL,
                                        const Py_ssize_t* strides=NULL, const unsigned short* q_h16=NULL,
                                        const unsigned short* k_h16=NULL, const unsigned short* v_h16=NULL,
                                        unsigned short* out_h16=NULL, float* lse=NULL):
    """drive_attention_masked on bf16/f16 inputs (widened exactly into C-contiguous work arrays)
    under float32 compute, the bf16 scores by vdpbf16ps or AMX tiles where the CPU has them (as
    drive_attention_flash_half).  k16, v16 (k and v NULL): a decode step (Sq == 1) reading K and V
    in their 16-bit storage where they lie (strides: q's, k's, v's and out's, as drive_attention_masked),
    widened in registers: a KV cache is read at two bytes an element, never copied.  q_h16, k_h16,
    v_h16, out_h16 (q, k, out NULL; v NULL with v_h16): more query rows reading q, k (and v where
    P V reads its pairs) in their C-contiguous 16-bit storage and writing the output rounded to T
    (as drive_attention_flash_half), no widened copies."""
    cdef Py_ssize_t sq = dims[3]
    _forward(tag, q, k, v, NULL, out, dims, params, nthreads, False,
             bool(FC_HAVE_DPBF16) and not is_f16 and k16 == NULL, 0, attn_mask, attn_bias, mask_dims, False,
             strides, lse, sq, k16, v16, is_f16, NULL, 0, _round_p(params, is_f16), q_h16, k_h16, v_h16, out_h16)


# ---- the model-facing kernels' backwards: dq, dk, dv ---------------------------------------------


cdef object drive_attention_varlen_backward(rnd_t tag, const real_t* q, const real_t* k, const real_t* v,
                                            const real_t* dout, const unsigned int* cu_seqlens_q,
                                            const unsigned int* cu_seqlens_k, const real_t* slopes,
                                            Py_ssize_t slopes_ld, const unsigned int* seqused_k,
                                            const float* dlse, const real_t* fwd_out, const float* fwd_lse,
                                            real_t* dq, real_t* dk, real_t* dv, tuple dims, dict params,
                                            int nthreads):
    """The gradients of drive_attention_varlen for packed keys; dims as it takes them (Tq, NB, BS,
    B1, Hq, Hkv, D), k and v read as NB * BS rows; q, k, v and dout C-contiguous; slopes as it
    takes them; dlse: the gradient of its lse, [Hq, Tq] C-contiguous float32, or NULL (zero);
    fwd_out, fwd_lse: its out (as dout) and lse ([Hq, Tq] C-contiguous float32), both or NULL."""
    _varlen_backward(tag, q, k, v, dout, cu_seqlens_q, cu_seqlens_k, seqused_k, slopes, slopes_ld, dlse, dq, dk,
                     dv, dims, params, nthreads, False, 0, fwd_out, fwd_lse)


cdef object drive_attention_varlen_backward_half(RoundNone tag, const float* q, const float* k, const float* v,
                                                 const float* dout, const unsigned int* cu_seqlens_q,
                                                 const unsigned int* cu_seqlens_k, const float* slopes,
                                                 Py_ssize_t slopes_ld, const unsigned int* seqused_k,
                                                 const float* dlse, const float* fwd_out, const float* fwd_lse,
                                                 float* dq, float* dk, float* dv, tuple dims, dict params,
                                                 int nthreads, int is_f16):
    """drive_attention_varlen_backward on bf16/f16 inputs widened exactly, under float32 compute
    (bf16 S and dP by vdpbf16ps or AMX tiles where the CPU has them, as
    drive_attention_flash_backward_half).  fwd_out (widened, as dout) and fwd_lse: as
    drive_attention_varlen_backward's, taken where _saved_stats says."""
    _varlen_backward(tag, q, k, v, dout, cu_seqlens_q, cu_seqlens_k, seqused_k, slopes, slopes_ld, dlse, dq, dk,
                     dv, dims, params, nthreads, bool(FC_HAVE_DPBF16) and not is_f16, _round_p(params, is_f16),
                     fwd_out, fwd_lse)


cdef object drive_attention_masked_backward(rnd_t tag, const real_t* q, const real_t* k, const real_t* v,
                                            const real_t* dout, const unsigned char* attn_mask,
                                            const real_t* attn_bias, const float* dlse, const real_t* fwd_out,
                                            const float* fwd_lse, real_t* dq, real_t* dk, real_t* dv,
                                            tuple dims, dict params, int nthreads, tuple mask_dims):
    """The gradients of drive_attention_masked: its masks (mask_dims as it takes them), q, k, v
    and dout C-contiguous; dlse: the gradient of its lse, [B, Hq, Sq] C-contiguous float32, or
    NULL (zero); fwd_out, fwd_lse: its out (as dout) and lse ([B, Hq, Sq] C-contiguous float32),
    both or NULL."""
    cdef Py_ssize_t sq = dims[3]
    _backward(tag, q, k, v, dout, NULL, dq, dk, dv, dims, params, nthreads, False, 0, False, attn_mask, attn_bias,
              mask_dims, dlse, sq, 0, fwd_out, fwd_lse, sq)


cdef object drive_attention_masked_backward_half(RoundNone tag, const float* q, const float* k, const float* v,
                                                 const float* dout, const unsigned char* attn_mask,
                                                 const float* attn_bias, const float* dlse, const float* fwd_out,
                                                 const float* fwd_lse, float* dq, float* dk, float* dv, tuple dims,
                                                 dict params, int nthreads, tuple mask_dims, int is_f16):
    """drive_attention_masked_backward on bf16/f16 inputs widened exactly, under float32 compute;
    fwd_out (widened, as dout) and fwd_lse taken where _saved_stats says."""
    cdef Py_ssize_t sq = dims[3]
    _backward(tag, q, k, v, dout, NULL, dq, dk, dv, dims, params, nthreads, bool(FC_HAVE_DPBF16) and not is_f16,
              0, False, attn_mask, attn_bias, mask_dims, dlse, sq, _round_p(params, is_f16), fwd_out, fwd_lse, sq)
