# Test hooks: Python entry points into the core's C helpers, for the tests only (no kernel and
# no generated entry calls them).  Every name here starts with _test_ / _TEST_; tests reach them
# through the loaded level module (fuel_cy.runtime.cpu.core()).  Hand-written; included by every
# `_core_<level>.pyx` after the core (policy.pxi and the generated _core_dtypes.pxi it includes
# declare the fc_* functions and flags used here; BC and NR come from blocks.pxi).

import numpy as _np

cdef extern from "fc_testhooks.h" nogil:
    void fc_round_vec_array(const float* x, float* out, Py_ssize_t n, int which)
    void fc_expf_tv_array(const float* x, float* out, Py_ssize_t n)

cdef extern from "fc_half.h" nogil:
    bint FC_HAVE_BF16_CVT    # the bf16 GEMMs may round by vcvtne(2)ps2bf16 (AVX512-BF16)


def _test_round(float[::1] x, str code):
    """Testing hook: the core's round-to-nearest-even of f32 values to a dtype rounded at every
    step, BF16 or F16 (as f32)."""
    cdef fc_rounding_fn rounding = rounding_of(code)  # _core_dtypes.pxi: fc_round_<dtype>
    if rounding == NULL:
        raise ValueError(code)
    out = _np.empty(x.shape[0], dtype=_np.float32)
    cdef float[::1] o = out
    cdef Py_ssize_t i
    for i in range(x.shape[0]):
        o[i] = rounding(x[i])
    return out


def _test_round_vec(float[::1] x, str which):
    """Testing hook: the vector roundings of the half-type GEMMs and row passes ("bf16-int",
    "bf16-cvt", "bf16-cvt-pair", "f16", "bf16-cvt-checked" and its one-float form
    "bf16-cvt-checked-scalar", and "bf16-pair-exact": the values vdpbf16ps reads from the mixed
    forward's pairing of its unrounded weights).  Returns None for the bf16 instruction forms when
    this build has no AVX512-BF16."""
    cdef int w = {"bf16-int": 0, "bf16-cvt": 1, "f16": 2, "bf16-cvt-pair": 3, "bf16-cvt-checked": 4,
                  "bf16-cvt-checked-scalar": 5, "bf16-pair-exact": 6}[which]
    if w in (1, 3, 4, 5, 6) and not FC_HAVE_BF16_CVT:
        return None
    out = _np.empty(x.shape[0], dtype=_np.float32)
    cdef float[::1] o = out
    if x.shape[0]:
        fc_round_vec_array(&x[0], &o[0], x.shape[0], w)
    return out


# the choices inside a level per micro-architecture (fc_uarch.h), each set at load
cdef extern from "fc_uarch.h" nogil:
    enum: FC_VBYTES    # this level's vector width in bytes (fc_isa.h)
    int fc_bf16_form   # which instruction form the bf16 math-in-T loops take
    enum:
        FC_BF16_FORM_VADDPS
        FC_BF16_FORM_VDPBF16PS
    int fc_pv_form     # how O += P V finds contiguous V's rows
    enum:
        FC_PV_BY_POINTER
        FC_PV_BY_STRIDE
    int fc_tn_blocks   # register blocks per A^T copy of the backward's C += A^T B
    int fc_gemm_block  # the register block of S = Q K^T and O += P V
    enum:
        FC_GEMM_BLOCK_NARROW
        FC_GEMM_BLOCK_WIDE
    int fc_f16_form    # which form the f16 math-in-T GEMMs take
    enum:
        FC_HAVE_F16_NATIVE
        FC_F16_FORM_CONVERT
        FC_F16_FORM_NATIVE
        FC_F16_FORM_NATIVE_EMULATED
    int fc_cpu_has_f16_native
    int fc_bf16_scores_form   # which form the bf16 scores of the float32-compute kernels take
    enum:
        FC_HAVE_AMX
        FC_SCORES_VDPBF16PS
        FC_SCORES_AMX
        FC_SCORES_AMX_EMULATED
    int fc_amx_state

cdef extern from "fc_amx.h" nogil:
    int fc_amx_emu_faults
    long fc_amx_emu_dps
    long fc_amx_emu_cfgs
    int fc_amx_emu_configured()
    long fc_amx_emu_paired



def _test_bf16_forms():
    """Testing hook: the instruction forms of the bf16 math-in-T loops this build has (fc_uarch.h
    fc_bf16_form): "vaddps" (GEMM additions by vaddps, row passes rounded by integer arithmetic) and
    "vdpbf16ps" (GEMM additions by vdpbf16ps on packed accumulators, row passes rounded by
    vcvtneps2bf16); empty without AVX512-BF16, where the loops have one form."""
    return ["vaddps", "vdpbf16ps"] if FC_HAVE_BF16_CVT else []


def _test_bf16_form(form=None):
    """Testing hook: the form the bf16 math-in-T loops take (chosen per CPU at load time); with an
    argument (one of _test_bf16_forms()), switch to it first."""
    global fc_bf16_form
    if form is not None:
        if form not in _test_bf16_forms():
            raise ValueError(form)
        fc_bf16_form = FC_BF16_FORM_VDPBF16PS if form == "vdpbf16ps" else FC_BF16_FORM_VADDPS
    return "vdpbf16ps" if fc_bf16_form == FC_BF16_FORM_VDPBF16PS else "vaddps"



_F16_FORMS = {"convert": FC_F16_FORM_CONVERT, "native": FC_F16_FORM_NATIVE,
              "native-emulated": FC_F16_FORM_NATIVE_EMULATED}


def _test_f16_forms():
    """Testing hook: the forms of the f16 math-in-T GEMMs (fc_gemm_f16.h) this build can run on
    this CPU: "convert" (F16C roundings) always; at AVX-512, "native-emulated" (the binary16 loops
    with vmulph/vaddph emulated), and "native" (AVX512-FP16) where the CPU has it."""
    forms = ["convert"]
    if FC_HAVE_F16_NATIVE:
        forms.append("native-emulated")
        if fc_cpu_has_f16_native:
            forms.append("native")
    return forms


def _test_f16_form(form=None):
    """Testing hook: the form the f16 math-in-T GEMMs take (chosen per CPU at load time: fc_uarch.h
    fc_f16_form); with an argument (one of _test_f16_forms()), switch to it first."""
    global fc_f16_form
    if form is not None:
        if form not in _test_f16_forms():
            raise ValueError(form)
        fc_f16_form = _F16_FORMS[form]
    return next(name for name, value in _F16_FORMS.items() if value == fc_f16_form)


_TEST_VECTOR_BYTES = FC_VBYTES


def _test_pv_form(form=None):
    """Testing hook: how O += P V finds contiguous V's rows ("pointer" or "stride", chosen per
    CPU at load time: fc_uarch.h fc_pv_form); with an argument, switch to it first."""
    global fc_pv_form
    if form is not None:
        if form not in ("pointer", "stride"):
            raise ValueError(form)
        fc_pv_form = FC_PV_BY_STRIDE if form == "stride" else FC_PV_BY_POINTER
    return "stride" if fc_pv_form == FC_PV_BY_STRIDE else "pointer"


def _test_gemm_blocks():
    """Testing hook: the register blocks of S = Q K^T and O += P V this level has (fc_uarch.h
    fc_gemm_block): "narrow" (FC_NRB rows x 2 vectors) everywhere, "wide" (6 rows x 4 vectors)
    at AVX-512."""
    return ["narrow", "wide"] if FC_VBYTES == 64 else ["narrow"]


def _test_gemm_block(block=None):
    """Testing hook: the register block of S = Q K^T and O += P V (chosen per CPU at load time);
    with an argument (one of _test_gemm_blocks()), switch to it first."""
    global fc_gemm_block
    if block is not None:
        if block not in _test_gemm_blocks():
            raise ValueError(block)
        fc_gemm_block = FC_GEMM_BLOCK_WIDE if block == "wide" else FC_GEMM_BLOCK_NARROW
    return "wide" if fc_gemm_block == FC_GEMM_BLOCK_WIDE else "narrow"


def _test_tn_blocks(blocks=None):
    """Testing hook: register blocks that share one A^T copy in the backward's C += A^T B (chosen
    per CPU at load time: fc_uarch.h fc_tn_blocks); with an argument (1 or 2), switch to it first."""
    global fc_tn_blocks
    if blocks is not None:
        if blocks not in (1, 2):
            raise ValueError(blocks)
        fc_tn_blocks = blocks
    return fc_tn_blocks


def _test_tn_ahead(nbytes=None):
    """Testing hook: the bytes of dK and dV (2 x Sk x D) above which the recomputing backward's
    C += A^T B asks for the next register block's rows of C ahead, -1 for never (chosen per CPU
    at load time: fc_uarch.h fc_tn_ahead); with an argument, switch to it first."""
    global fc_tn_ahead
    if nbytes is not None:
        if nbytes < -1:
            raise ValueError(nbytes)
        fc_tn_ahead = nbytes
    return fc_tn_ahead


def _test_h16_l1_ahead(n=None):
    """Testing hook: the keys past its group at which the half-pool heads loops also ask for a
    head's rows into L1 (0: never; chosen per CPU at load time: fc_uarch.h fc_h16_l1_ahead); with
    an argument, switch to it first."""
    global fc_h16_l1_ahead
    if n is not None:
        if not 0 <= n <= FC_PAGED_LOOKAHEAD:
            raise ValueError(n)
        fc_h16_l1_ahead = n
    return fc_h16_l1_ahead


def _test_paged_group(n=None):
    """Testing hook: the keys per group of the float32/float64 paged decode's heads loops (chosen
    per CPU at load time: fc_uarch.h fc_paged_group); with an argument, switch to it first."""
    global fc_paged_group
    if n is not None:
        if not 1 <= n <= 16:
            raise ValueError(n)
        fc_paged_group = n
    return fc_paged_group


def _test_paged_spread(n=None):
    """Testing hook: whether the float32/float64 paged heads loops and a bf16 decode step's scores
    on vdpbf16ps ask for their lookahead rows a line per step of their products (1) or in a burst
    per group (0) (chosen per CPU at load time: fc_uarch.h fc_paged_spread); with an argument,
    switch to it first."""
    global fc_paged_spread
    if n is not None:
        if n not in (0, 1):
            raise ValueError(n)
        fc_paged_spread = n
    return fc_paged_spread


def _test_qk_slab(n=None):
    """Testing hook: the query rows per slab of the float32/float64 flash tile's scores and
    softmax (0: the whole tile at once; chosen per CPU at load time: fc_uarch.h fc_qk_slab); with
    an argument, switch to it first."""
    global fc_qk_slab
    if n is not None:
        if not (n == 0 or (4 <= n <= BR_FLASH and n % NR == 0)):
            raise ValueError(n)
        fc_qk_slab = n
    return fc_qk_slab


def _test_qk_fused_max(on=None):
    """Testing hook: whether the float32/float64 flash tile's scores find each row's maximum as
    they are stored (True) or by a pass over the stored row (False; chosen per CPU at load time:
    fc_uarch.h fc_qk_fused_max); with an argument, switch to it first."""
    global fc_qk_fused_max
    if on is not None:
        fc_qk_fused_max = 1 if on else 0
    return bool(fc_qk_fused_max)


def _test_chunk_spread(on=None):
    """Testing hook: whether a chunk's tiles ask for the rows they read next a line per step of their
    products' loops (True) or all at once before the scores (False; chosen per CPU at load time:
    fc_uarch.h fc_chunk_spread); with an argument, switch to it first."""
    global fc_chunk_spread
    if on is not None:
        fc_chunk_spread = 1 if on else 0
    return bool(fc_chunk_spread)


def _test_bwd_rows(rows=None):
    """Testing hook: query rows per backward step (chosen per CPU at load time: fc_uarch.h
    fc_bwd_rows); with an argument (a multiple of 4, at most BR_BWD), switch to it first."""
    global fc_bwd_rows
    if rows is not None:
        fc_bwd_rows = _step_rows(rows)
    return fc_bwd_rows


def _step_rows(rows):
    """A backward step's row count the hooks accept: a multiple of 4, at most BR_BWD."""
    if rows <= 0 or rows % 4 or rows > BR_BWD:
        raise ValueError(rows)
    return rows


def _test_decode_heads_per_task(n=None):
    """Testing hook: kv heads per task of attention_varlen's decode steps (Shape.hpt), where the
    layout allows several (heads adjacent in K's and V's rows), at most as many as 32 rows hold
    (G rounded up to 4 per head); 0: chosen per call (the default).  With an argument, switch to it
    first."""
    global _decode_hpt_forced
    if n is not None:
        if n < 0:
            raise ValueError(n)
        _decode_hpt_forced = n
    return _decode_hpt_forced


def _test_decode_longest_first(on=None):
    """Testing hook: whether attention_varlen hands out its task list (decode steps, chunks)
    chunks first, then decode steps, each largest first (the default), or in batch order.  With an argument, switch to it first."""
    global _decode_longest_first
    if on is not None:
        _decode_longest_first = bool(on)
    return _decode_longest_first


def _test_chunks_in_list(on=None):
    """Testing hook: whether attention_varlen's paged chunks that pack their own K^T tiles run in
    the decode steps' task list (the default) or each as its own call after them.  With an
    argument, switch to it first."""
    global _chunks_in_list_allowed
    if on is not None:
        _chunks_in_list_allowed = bool(on)
    return _chunks_in_list_allowed


def _test_chunk_k_tiles(on=None):
    """Testing hook: whether a paged sequence whose kv heads take one task each packs its K^T
    tiles inside the task (AttnOpts.k_tiles, the default) or in a packing pass first.  With an
    argument, switch to it first."""
    global _k_tiles_allowed
    if on is not None:
        _k_tiles_allowed = bool(on)
    return _k_tiles_allowed


def _test_bwd_rows_pairs(rows=None):
    """Testing hook: query rows per backward step where all five products run on vdpbf16ps
    (fc_uarch.h fc_bwd_rows_pairs); with an argument (a multiple of 4, at most BR_BWD), switch to
    it first."""
    global fc_bwd_rows_pairs
    if rows is not None:
        fc_bwd_rows_pairs = _step_rows(rows)
    return fc_bwd_rows_pairs

_SCORE_FORMS = {"vdpbf16ps": FC_SCORES_VDPBF16PS, "amx": FC_SCORES_AMX, "amx-emulated": FC_SCORES_AMX_EMULATED}


def _test_bf16_score_forms():
    """Testing hook: the forms of the bf16 scores of the float32-compute kernels (fc_amx.h) this
    build can run on this CPU: at the AVX512-BF16 levels "vdpbf16ps" and "amx-emulated" (the tile
    loops with the tile instructions emulated), and "amx" where the CPU has AMX-BF16 and Linux
    granted the tile state; empty elsewhere (the kernels take the float32 loops there)."""
    if not FC_HAVE_DPBF16:
        return []
    return ["vdpbf16ps", "amx-emulated"] + (["amx"] if fc_amx_state == 1 else [])


def _test_bf16_score_form(form=None):
    """Testing hook: the form the bf16 scores take (chosen per CPU at load time: fc_uarch.h
    fc_bf16_scores_form); with an argument (one of _test_bf16_score_forms()), switch to it first."""
    global fc_bf16_scores_form
    if form is not None:
        if form not in _test_bf16_score_forms():
            raise ValueError(form)
        fc_bf16_scores_form = _SCORE_FORMS[form]
    return {v: k for k, v in _SCORE_FORMS.items()}[fc_bf16_scores_form]


def _test_amx_state():
    """Testing hook: "absent" (no AMX-BF16 at this level: CPU, OS or compiler), "granted" (Linux
    gave this process the tile state when the module loaded) or "refused" (it did not: a kernel
    before 5.16, or a thread's sigaltstack too small for the larger signal frame)."""
    return ("absent", "granted", "refused")[fc_amx_state]


def _test_amx_emulation_faults():
    """Testing hook: how many tile instructions of the emulated AMX form would have faulted on the
    hardware (a bad configuration, an unconfigured tile, shapes that do not agree) since the last
    call; resets the count."""
    global fc_amx_emu_faults
    n = fc_amx_emu_faults
    fc_amx_emu_faults = 0
    return n


def _test_amx_emulation_dps():
    """Testing hook: how many tdpbf16ps (16 x 16 x 32 products each) the emulated AMX form ran since
    the last call; resets the count."""
    global fc_amx_emu_dps
    n = fc_amx_emu_dps
    fc_amx_emu_dps = 0
    return n


def _test_amx_emulation_cfgs():
    """Testing hook: how many ldtilecfg the emulated AMX form ran since the last call (resets the
    count), and whether this thread's emulated tiles are configured now."""
    global fc_amx_emu_cfgs
    n = fc_amx_emu_cfgs
    fc_amx_emu_cfgs = 0
    return n, bool(fc_amx_emu_configured())


def _test_f16_split(on=None):
    """Testing hook: whether the f16 flash with round_p runs on the tiles from each value's two bf16
    terms where the bf16 products take the tiles (drivers.pxi _f16_split; off: the float32 loops,
    as attention_varlen's f16 runs); with an argument, set it first."""
    global _f16_split_allowed
    if on is not None:
        _f16_split_allowed = bool(on)
    return _f16_split_allowed


def _test_f16_split_q(const unsigned short[::1] x):
    """Testing hook: fc_f16_tiles.h fc_split_q_f16 on the f16 values x (bits): their 2n split words
    (hi | lo << 16), the n words twice, as the f16 scores on the tiles take Q's rows."""
    out = _np.zeros(2 * x.shape[0], _np.uint32)
    cdef unsigned int[::1] o = out
    if x.shape[0]:
        fc_split_q_f16(&x[0], x.shape[0], &o[0])
    return out


# whether bf16 flash scores under float32 compute come from vdpbf16ps (fc_qk_dpbf16)
_TEST_HAVE_DPBF16 = bool(FC_HAVE_DPBF16)


# whether the f32 softmax uses the AVX-512 exp (else fc_expf, which flushes below exp(-86.5))
_TEST_HAVE_AVX512_EXP = bool(FC_HAVE_EXP16)


def _test_exp_scaled_sum_f32(float[::1] s, float scale, float m):
    """Testing hook: flash f32's in-place s = exp(scale * s - m) and its sum (fc_exp.h)."""
    if s.shape[0] == 0:
        return 0.0
    return fc_exp_scaled_sum_f32(&s[0], s.shape[0], scale, m)


def _test_rescale_factors(float[::1] m_old, float[::1] m_new):
    """Testing hook: flash's rescaling factors of a tile's rows (fc_rescale_factors_f32)."""
    out = _np.empty(m_old.shape[0], dtype=_np.float32)
    cdef float[::1] o = out
    if m_old.shape[0] != m_new.shape[0]:
        raise ValueError("m_old and m_new differ in length")
    if m_old.shape[0]:
        fc_rescale_factors_f32(&m_old[0], &m_new[0], m_old.shape[0], &o[0])
    return out


def _test_sum16_rows(float[:, ::1] lanes):
    """Testing hook: the row sums of [n, 16] lane partials (fc_sum16_rows)."""
    if lanes.shape[1] != 16:
        raise ValueError("lanes must be [n, 16]")
    out = _np.empty(lanes.shape[0], dtype=_np.float32)
    cdef float[::1] o = out
    if lanes.shape[0]:
        fc_sum16_rows(&lanes[0, 0], lanes.shape[0], &o[0])
    return out


def _test_exp_f64(double[::1] x):
    """Testing hook: the vectorizable exp used by the f64 kernels."""
    out = _np.empty(x.shape[0], dtype=_np.float64)
    cdef double[::1] o = out
    cdef Py_ssize_t i
    for i in range(x.shape[0]):
        o[i] = fc_exp_f64(x[i])
    return out


def _test_expf(float[::1] x):
    """Testing hook: the vectorizable expf used by the f32 kernels."""
    out = _np.empty(x.shape[0], dtype=_np.float32)
    cdef float[::1] o = out
    cdef Py_ssize_t i
    for i in range(x.shape[0]):
        o[i] = fc_expf(x[i])
    return out


def _test_exp_row(float[::1] s, float scale, float m, bint sparse):
    """Testing hook: the flash's exp pass over one row of scores (fc_exp_lanes_rp_f32, then
    fc_sum16_rows): (exp(scale * s - m) as stored, their sum), with the pass for rows holding
    masked scores (sparse) or the plain one."""
    out = _np.array(s, dtype=_np.float32, copy=True)
    cdef float[::1] o = out
    cdef float lanes[16]
    cdef float total = 0
    if o.shape[0]:
        fc_exp_lanes_rp_f32(&o[0], o.shape[0], scale, m, 0, sparse, lanes)
        fc_sum16_rows(lanes, 1, &total)
    return out, total


def _test_expf_tv(float[::1] x):
    """Testing hook: the exp of the rounded softmax passes (fc_expf_tv, whole vectors)."""
    out = _np.empty(x.shape[0], dtype=_np.float32)
    cdef float[::1] o = out
    if x.shape[0]:
        fc_expf_tv_array(&x[0], &o[0], x.shape[0])
    return out


def _test_decode_pairs(on=None):
    """Testing hook: whether a bf16 decode step's round_p P V runs on vdpbf16ps from V's rows read
    in place (the default where the level has AVX512-BF16) or on the float32 loops over rows
    widened in registers (what it ran before: for timing).  With an argument, switch to it first."""
    global _decode_pairs_allowed
    if on is not None:
        _decode_pairs_allowed = bool(on)
    return _decode_pairs_allowed


def _test_paired_weights(on=None):
    """Testing hook: whether round_p's bf16 flash on the tiles has its exp pass write the weights
    as bf16 pairs for P V (the default; fc_pv_bf16_paired) or store them rounded in float32 for
    P V to split (what it ran before: for timing and the bit-for-bit comparison).  With an
    argument, switch to it first."""
    global _paired_weights_allowed
    if on is not None:
        _paired_weights_allowed = bool(on)
    return _paired_weights_allowed


def _test_emulated_paired_calls():
    """Testing hook: how many P V blocks took the paired weights on the emulated tile form."""
    return fc_amx_emu_paired


def _test_decode_qk_pairs(on=None):
    """Testing hook: whether a bf16 decode step's scores run on vdpbf16ps along d from K's rows
    read in place (the default where the level has AVX512-BF16) or on the float32 loops over rows
    widened in registers (for timing).  With an argument, switch to it first."""
    global _decode_qk_pairs_allowed
    if on is not None:
        _decode_qk_pairs_allowed = bool(on)
    return _decode_qk_pairs_allowed


def _test_decode_pv_dpbf16(float[:, ::1] p, const unsigned short[:, ::1] v, float[:, ::1] o, Py_ssize_t nheads=1):
    """Testing hook: a bf16 decode step's round_p O + P V on vdpbf16ps from V's rows read in place
    (fc_decode16.h) for p [nheads * rph <= 64, keys <= 128] (rph a multiple of 4; rounded to bf16
    first, as round_p's exp pass leaves the weights), v [keys, nheads * D] bf16 bits (a pool row's
    heads side by side) and o [nheads * rph, D].  None when this level has no AVX512-BF16."""
    if not FC_HAVE_DPBF16:
        return None
    cdef Py_ssize_t nr = p.shape[0], n = p.shape[1], D = o.shape[1], j
    if (nheads < 1 or nr % (4 * nheads) or nr > BR_FLASH or n > BC or n < 1 or D < 1 or v.shape[0] != n
            or v.shape[1] != nheads * D or o.shape[0] != nr):
        raise ValueError("p [nheads * rph <= 64, keys <= 128], v [keys, nheads * D], o [nheads * rph, D]")
    pr = _np.zeros((nr, BC), dtype=_np.float32)
    pr[:, :n] = _np.asarray(p)
    cdef float[:, ::1] pv = pr
    fc_round_rows_half(&pv[0, 0], BC, nr, n, 0)
    out = _np.array(o, dtype=_np.float32, copy=True)
    cdef float[:, ::1] ov = out
    cdef unsigned int[::1] pp = _np.zeros(BR_FLASH * (BC // 2), dtype=_np.uint32)
    cdef const unsigned short* vrows[BC]
    for j in range(n):
        vrows[j] = &v[j, 0]
    fc_pv_heads_dpbf16(&pv[0, 0], BC, nheads, nr // nheads, n, n, vrows, D, &ov[0, 0], D, &pp[0])
    return out


def _test_decode_qk_dpbf16(float[:, ::1] q, const unsigned short[:, ::1] k, Py_ssize_t nheads=1):
    """Testing hook: a bf16 decode step's scores on vdpbf16ps along d from K's rows read in place
    (fc_decode16.h) for q [nheads * rph <= 64, D] holding bf16 values (rph a multiple of 4, each
    head's rows together) and k [keys <= 128, nheads * D] bf16 bits (a pool row's heads side by
    side): S [nheads * rph, keys], head h's rows against its part of each key row.  None when
    this level has no AVX512-BF16."""
    if not FC_HAVE_DPBF16:
        return None
    cdef Py_ssize_t nr = q.shape[0], D = q.shape[1], n = k.shape[0], j
    if (nheads < 1 or nr % (4 * nheads) or nr > BR_FLASH or n > BC or n < 1 or D < 1
            or k.shape[1] != nheads * D):
        raise ValueError("q [nheads * rph <= 64, D], k [keys <= 128, nheads * D]")
    cdef Py_ssize_t D2 = (D + 1) // 2
    cdef unsigned int[::1] qp = _np.zeros(nr * D2, dtype=_np.uint32)
    fc_pair_rows_bf16(&q[0, 0], nr, D, &qp[0], D2)
    out = _np.zeros((nr, n), dtype=_np.float32)
    cdef float[:, ::1] sv = out
    cdef const unsigned short* krows[BC]
    for j in range(n):
        krows[j] = &k[j, 0]
    fc_qk_heads_dpbf16(&qp[0], D2, nheads, nr // nheads, D, krows, n, n, &sv[0, 0], n)
    return out


def _test_qk_dpbf16(float[:, ::1] q, float[:, ::1] k):
    """Testing hook: fc_qk_dpbf16's scores S [rows, keys] for bf16-valued q [rows, D] and k
    [keys <= 128, D].  None when this level has no AVX512-BF16."""
    if not FC_HAVE_DPBF16:
        return None
    cdef Py_ssize_t nr = q.shape[0], D = q.shape[1], n = k.shape[0], j
    cdef Py_ssize_t nr4 = (nr + NR - 1) // NR * NR, D2 = (D + 1) // 2
    if n > BC or k.shape[1] != D or D == 0:
        raise ValueError("k must be [<= 128, D], D > 0")
    qpad = _np.zeros((max(nr4, 1), max(D, 1)), dtype=_np.float32)
    qpad[:nr, :D] = q
    cdef float[:, ::1] qp = qpad
    cdef unsigned int[::1] qpairs = _np.zeros(max(nr4, 1) * D2 + 1, dtype=_np.uint32)
    cdef unsigned int[::1] kpairs = _np.zeros(D2 * BC + 1, dtype=_np.uint32)
    s = _np.zeros((max(nr4, 1), BC), dtype=_np.float32)
    cdef float[:, ::1] sv = s
    cdef float* rows[BC]
    for j in range(n):
        rows[j] = &k[j, 0]
    fc_pair_rows_bf16(&qp[0, 0], nr4, D, &qpairs[0], D2)
    fc_pack_k_pairs_bf16(rows, n, D, &kpairs[0])
    fc_qk_dpbf16(&qpairs[0], nr4, D2, &kpairs[0], &sv[0, 0], BC, n)
    return s[:nr, :n].copy()


def _test_pv_bf16v(float[:, ::1] p, float[:, ::1] v, float[:, ::1] o, bint prepaired=False, bint rounded=False):
    """Testing hook: fc_pv_bf16v's O + P V (the mixed bf16 flash's P V, in the form the scores take)
    for p [rows, keys <= 128], bf16-valued v [keys, D] and o [rows, D]; rows padded to a multiple
    of 4 with zero rows, as the flash tiles are.  prepaired: V's keys paired first, as the flash
    does once per kv head (fc_pack_v_pairs_bf16), instead of inside the product.  rounded: the
    round_p product (P rounded to bf16 first: pv_bf16_rounded, vdpbf16ps on prepaired pairs)."""
    cdef Py_ssize_t nr = p.shape[0], n = p.shape[1], D = v.shape[1], j
    cdef Py_ssize_t nr4 = (nr + NR - 1) // NR * NR
    if n > BC or v.shape[0] != n or o.shape[0] != nr or o.shape[1] != D:
        raise ValueError("p [rows, keys <= 128], v [keys, D], o [rows, D]")
    ppad = _np.zeros((max(nr4, 1), max(n, 1)), dtype=_np.float32)
    ppad[:nr, :n] = p
    opad = _np.zeros((max(nr4, 1), max(D, 1)), dtype=_np.float32)
    opad[:nr, :D] = o
    vpad = _np.zeros((max(n, 1), max(D, 1)), dtype=_np.float32)
    vpad[:n, :D] = v
    cdef float[:, ::1] pv = ppad
    cdef float[:, ::1] ov = opad
    cdef float[:, ::1] vv = vpad
    cdef float* rows[BC]
    for j in range(n):
        rows[j] = &vv[j, 0]
    pairs = _np.zeros(max(BC // 2 * D, 1), dtype=_np.uint32)
    cdef unsigned int[::1] pp = pairs
    if prepaired and n and D:
        fc_pack_v_pairs_bf16(rows, n, D, &pp[0])
    ppairs = _np.zeros(max(nr4, 1) * (BC // 2), dtype=_np.uint32)
    cdef unsigned int[::1] ppr = ppairs
    if nr and n and D and rounded:
        pv_bf16_rounded(&pv[0, 0], pv.shape[1], nr4, n, &vv[0, 0], vv.shape[1], rows, D, &ov[0, 0], ov.shape[1],
                        &pp[0] if prepaired else NULL, &ppr[0], True)
    elif nr and n and D:
        fc_pv_bf16v(&pv[0, 0], pv.shape[1], nr4, n, &vv[0, 0], vv.shape[1], rows, D, &ov[0, 0], ov.shape[1],
                    &pp[0] if prepaired else NULL, 3)
    return opad[:nr, :D].copy()


def _test_tn_bf16t(float[:, ::1] p, float[:, ::1] x, float[:, ::1] ct):
    """Testing hook: fc_tn_bf16t's Ct + X^T P (the mixed bf16 backward's dV += P^T dO and
    dK += dS^T Q into a transposed accumulator, in the form the scores take; the float32 loop
    beside vdpbf16ps) for p [rows, keys], bf16-valued x [rows, D] and ct [D, keys]."""
    cdef Py_ssize_t nr = p.shape[0], n = p.shape[1], D = x.shape[1]
    if x.shape[0] != nr or ct.shape[0] != D or ct.shape[1] != n:
        raise ValueError("p [rows, keys], x [rows, D], ct [D, keys]")
    out = _np.array(ct, dtype=_np.float32)
    cdef float[:, ::1] ov = out
    xt = _np.zeros(max(D * FC_AMX_TN_ROWS // 2, 1), dtype=_np.uint32)
    cdef unsigned int[::1] xv = xt
    if nr and n and D:
        fc_tn_bf16t(&p[0, 0], p.shape[1], nr, n, &x[0, 0], x.shape[1], D, &ov[0, 0], ov.shape[1], &xv[0], 3)
    return out


cdef extern from "fc_isa.h" nogil:
    enum: FC_W32             # float lanes per vector at this level


def _test_paged_dots_h16(float[:, ::1] q, unsigned short[:, ::1] k, bint is_f16):
    """Testing hook: the paged decode's dots of T-valued float32 query rows q [rows, D] with key rows
    k [keys, D] held as bf16/f16 bits, read by fc_rowdots_heads_h16 as the mixed paged kernel reads
    a pool.  Returns (scores [rows, keys], the level's float32 lane count)."""
    cdef Py_ssize_t nr = q.shape[0], D = q.shape[1], n = k.shape[0], j
    cdef Py_ssize_t nr4 = (nr + NR - 1) // NR * NR
    if k.shape[1] != D or D == 0 or n == 0 or nr == 0:
        raise ValueError("q [rows, D] and k [keys, D] with rows, keys, D > 0")
    qpad = _np.zeros((nr4, D), dtype=_np.float32)
    qpad[:nr] = q
    cdef float[:, ::1] qv = qpad
    s = _np.zeros((nr4, n), dtype=_np.float32)
    cdef float[:, ::1] sv = s
    rows = _np.zeros(n, dtype=_np.uintp)
    cdef const unsigned short** rp = <const unsigned short**><size_t>rows.ctypes.data
    for j in range(n):
        rp[j] = &k[j, 0]
    fc_rowdots_heads_h16(&qv[0, 0], 1, nr4, D, rp, n, n, &sv[0, 0], n, is_f16)
    return s[:nr].copy(), int(FC_W32)


def _test_gemm_f16(float[:, ::1] q, float[:, ::1] kt, float[:, ::1] p, float[:, ::1] v, float[:, ::1] o):
    """Testing hook: the f16 math-in-T tile GEMMs in the current form (_test_f16_form), on f16
    values held in float32: returns (S, O) with S = fc_qk_f16(q [rows, D], kt [D, 128]) [rows, 128]
    and O = o + fc_pv_f16(p [rows, keys], v [keys, D2]) [rows, D2]; rows a multiple of 4."""
    cdef Py_ssize_t nr = q.shape[0], D = q.shape[1], n = p.shape[1], D2 = v.shape[1], j
    if nr % NR or kt.shape[0] != D or kt.shape[1] != BC or p.shape[0] != nr or v.shape[0] != n \
            or o.shape[0] != nr or o.shape[1] != D2 or nr == 0 or D == 0 or n == 0 or D2 == 0:
        raise ValueError("q [4k, D], kt [D, 128], p [4k, n], v [n, D2], o [4k, D2], none empty")
    s = _np.zeros((nr, BC), dtype=_np.float32)
    out = _np.array(o, dtype=_np.float32)
    cdef float[:, ::1] sv = s
    cdef float[:, ::1] ov = out
    rows = _np.empty(n, dtype=_np.uintp)
    cdef size_t[::1] rv = rows
    for j in range(n):
        rv[j] = <size_t>&v[j, 0]
    fc_qk_f16(&q[0, 0], nr, D, &kt[0, 0], &sv[0, 0], BC, BC)
    fc_pv_f16(&p[0, 0], n, nr, n, <float**>&rv[0], D2, &ov[0, 0], D2)
    return s, out


def _test_pairs_from_storage(cnp.ndarray x, str which, int is_f16=0):
    """Testing hook: the bf16 pairs the mixed flash builds from x's bf16 storage (uint16 [n, D],
    n <= 128) by the storage route (fc_pack_k_pairs_b16 / fc_pack_v_pairs_b16 / fc_pair_row_b16
    per row) and by the widened-float32 route, as (storage, widened) uint32 arrays: which "k"
    ([D2, 128]), "v" ([64, D]) or "q" ([n, D2]); "kt": K^T packed for the float32 loops
    ([D, 128], the float32 bits) from bf16 or (is_f16) f16 storage (fc_pack_kt_h16) and from the
    widened rows (fc_pack_kt_f32)."""
    if x.dtype != _np.uint16 or x.ndim != 2 or not x.flags.c_contiguous:
        raise ValueError("x: a C-contiguous uint16 [n, D] array")
    cdef Py_ssize_t n = x.shape[0], D = x.shape[1], D2 = (x.shape[1] + 1) // 2, j
    if n > BC or D == 0:
        raise ValueError("x must be [<= 128, D], D > 0")
    if n and is_f16:
        wide = x.view(_np.float16).astype(_np.float32)
    elif n:
        wide = (x.astype(_np.uint32) << 16).view(_np.float32).copy()
    else:
        wide = _np.zeros((1, D), _np.float32)
    xs = x if n else _np.zeros((1, D), _np.uint16)
    cdef unsigned short[:, ::1] xv = xs
    cdef float[:, ::1] wv = wide
    cdef const unsigned short* r16[BC]
    cdef float* r32[BC]
    for j in range(n):
        r16[j] = &xv[j, 0]
        r32[j] = &wv[j, 0]
    shape = {"k": (D2, BC), "v": (BC // 2, D), "q": (max(n, 1), D2), "kt": (D, BC)}[which]
    a = _np.full(shape, 0xDEADBEEF, _np.uint32)
    b = _np.full(shape, 0xDEADBEEF, _np.uint32)
    cdef unsigned int[:, ::1] av = a
    cdef unsigned int[:, ::1] bv = b
    if which == "k":
        fc_pack_k_pairs_b16(r16, n, D, &av[0, 0])
        fc_pack_k_pairs_bf16(r32, n, D, &bv[0, 0])
    elif which == "kt":
        fc_pack_kt_h16(r16, n, D, <float*>&av[0, 0], is_f16)
        fc_pack_kt_f32(r32, n, D, <float*>&bv[0, 0])
    elif which == "v":
        fc_pack_v_pairs_b16(r16, n, D, &av[0, 0])
        fc_pack_v_pairs_bf16(r32, n, D, &bv[0, 0])
    else:
        for j in range(n):
            fc_pair_row_b16(r16[j], D, &av[j, 0])
        if n:
            fc_pair_rows_bf16(&wv[0, 0], n, D, &bv[0, 0], D2)
        a, b = a[:n], b[:n]
    return a, b

