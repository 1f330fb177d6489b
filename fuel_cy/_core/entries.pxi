# The core's one entry point for the generated glue: `call(driver, code, f32_compute, inputs, dims,
# params, nthreads)` runs a drive_* function (drivers_api.pxi) under the element policy of `code`.
# Hand-written; included by every `_core_<level>.pyx` after drivers_api.pxi.
#
# Why one declared entry instead of one generated entry per (kernel, dtype): what a contract says
# (which kernels exist, their dtypes, inputs, dims, messages, costs) then lives only in the
# validators' module (`_generated/_kernels`), compiled once at baseline flags in seconds; the
# per-level cores hold the math alone and carry every policy the dtype record defines, so a
# contract edit, a dtype dropped from an input included, never recompiles them.
#
# The convention (codegen/cores.py BINDINGS says which kernel calls which driver with which dims):
#   driver       a drive_* name of drivers_api.pxi, without the prefix: attention_naive,
#                attention_flash, attention_paged_naive, attention_flash_backward, attention_varlen,
#                attention_masked, attention_varlen_backward, attention_masked_backward, or a half
#                driver (attention_flash_half, attention_paged_half, attention_flash_backward_half,
#                attention_varlen_half, attention_masked_half, attention_varlen_backward_half,
#                attention_masked_backward_half)
#   code         the contract dtype of the float inputs (F32, F64, BF16, F16)
#   f32_compute  run under the float32 policy (precision.compute: f32) instead of math in T
#   inputs       the validated arrays in the driver's order (cores.py Driver.inputs); None for an
#                absent optional input
#   dims, params, nthreads   as drivers_api.pxi states
# A 16-bit input (bf16/f16) is widened exactly into a reused temporary (drivers.pxi _work), except
# the pool of the paged half driver and K and V of a decode step (Sq = 1) of the flash and masked
# half drivers, which are read in place; outputs are fresh arrays of T.

cdef enum:
    _DRV_NAIVE = 0
    _DRV_FLASH = 1
    _DRV_FLASH_HALF = 2
    _DRV_PAGED = 3
    _DRV_PAGED_HALF = 4
    _DRV_BACKWARD = 5
    _DRV_BACKWARD_HALF = 6
    _DRV_VARLEN = 7
    _DRV_VARLEN_HALF = 8
    _DRV_MASKED = 9
    _DRV_MASKED_HALF = 10
    _DRV_VARLEN_BACKWARD = 11
    _DRV_VARLEN_BACKWARD_HALF = 12
    _DRV_MASKED_BACKWARD = 13
    _DRV_MASKED_BACKWARD_HALF = 14

_DRIVERS = {"attention_naive": _DRV_NAIVE, "attention_flash": _DRV_FLASH, "attention_flash_half": _DRV_FLASH_HALF,
            "attention_paged_naive": _DRV_PAGED, "attention_paged_half": _DRV_PAGED_HALF,
            "attention_flash_backward": _DRV_BACKWARD, "attention_flash_backward_half": _DRV_BACKWARD_HALF,
            "attention_varlen": _DRV_VARLEN, "attention_varlen_half": _DRV_VARLEN_HALF,
            "attention_masked": _DRV_MASKED, "attention_masked_half": _DRV_MASKED_HALF,
            "attention_varlen_backward": _DRV_VARLEN_BACKWARD,
            "attention_varlen_backward_half": _DRV_VARLEN_BACKWARD_HALF,
            "attention_masked_backward": _DRV_MASKED_BACKWARD,
            "attention_masked_backward_half": _DRV_MASKED_BACKWARD_HALF}
DRIVERS = tuple(_DRIVERS)   # for the tests: every driver this core can run


def call(str driver, str code, bint f32_compute, tuple inputs, tuple dims, dict params, int nthreads):
    """Run drive_<driver> on validated inputs under the policy of `code` (see the file's header)."""
    which = _DRIVERS.get(driver)
    if which is None:
        raise ValueError(f"fuel_cy core: no driver {driver!r} (this core has {', '.join(DRIVERS)})")
    result = policy_entry(code, f32_compute, which, inputs, dims, params, nthreads)  # _core_dtypes.pxi
    if result is NotImplemented:
        raise ValueError(f"fuel_cy core: drive_{driver} has no policy for {code}"
                         + (" under float32 compute" if f32_compute else ""))
    return result


cdef inline object _win(object x, object npwork, str code, bint narrow, int nthreads, str slot):
    """A float input as the drivers read it: widened exactly into the temporary `slot` when it is
    stored narrower than the work type, else the validated array itself."""
    if x is None or not narrow:
        return x
    return _work(x, npwork, code, nthreads, slot)


cdef inline const void* _ptr(object a, int typenum, int typenum2=-1) except? NULL:
    """The data of a work array (drivers.pxi _data checks it: of typenum, or typenum2 where the
    driver reads both alike); NULL for an absent optional input."""
    return NULL if a is None else _data(a, typenum, typenum2)


cdef inline object _out(str slot, object like, object npwork, bint narrow, int typenum):
    """An output's work array: a reused temporary when it is narrowed to T afterwards, else the
    fresh array handed out."""
    if narrow:
        return _temp_c(slot, cnp.PyArray_NDIM(<cnp.ndarray>like), cnp.PyArray_DIMS(<cnp.ndarray>like), typenum)
    return _empty_as(like, typenum)


cdef inline object _rows_view(object x, Py_ssize_t* st):
    """x itself where the core reads its rows in place (st[0:3]: its batch, head and row strides,
    drivers.pxi _row_strides), else a C-contiguous copy of it (st: the copy's)."""
    if not _row_strides(x, st):
        x = _np.ascontiguousarray(x)
        _row_strides(x, st)
    return x


cdef inline object _rows_heads_view(object x, Py_ssize_t* sr, Py_ssize_t* sh):
    """x itself where the core reads its rows in place (drivers.pxi _rows_heads: sr, sh its row
    and head strides), else a C-contiguous copy of it (sr, sh: the copy's)."""
    if not _rows_heads(x, sr, sh):
        x = _np.ascontiguousarray(x)
        _rows_heads(x, sr, sh)
    return x


cdef bint _finite16(x):
    """Whether a bf16/f16 array holds no infinity and no NaN (read as its 16-bit storage)."""
    cdef const unsigned short[::1] flat = _np.ascontiguousarray(x).reshape(-1).view(_np.uint16)
    cdef bint ok = True
    if flat.shape[0] > 0:
        with nogil:
            ok = fc_f16_all_finite(&flat[0], flat.shape[0])
    return ok


cdef bint _v_in_storage(int is_f16, dict params, tuple ins):
    """Whether the half flash (and the masked half route) hand V in its 16-bit storage to the
    core: where P V reads bf16 pairs only (_pairs16_v), or f16's split words on the tiles
    (_f16_split), whose q, k and v must be finite (an infinity has no two-term split; those calls
    keep the float32 loops)."""
    if is_f16 == 0:
        return _pairs16_v(_round_p(params, 0))
    return _f16_split(_round_p(params, 1)) and all(_finite16(x) for x in ins[:3])


cdef object _entry(rnd_t tag, real_t w, str code, int driver, tuple ins, tuple dims, dict params, int nthreads):
    """`call` under one policy: (tag, real_t) is the policy, `w` only selects real_t."""
    cdef Py_ssize_t strides[12]   # the masked drivers' q, k, v and out strides; varlen's row and head strides
    cdef int is_f16 = half_flag(code)       # _core_dtypes.pxi: -1 unless a 16-bit float
    cdef bint narrow = is_f16 >= 0          # stored narrower than computed: widened in, rounded out
    cdef int tn = cnp.NPY_FLOAT32 if real_t is float else cnp.NPY_FLOAT64
    cdef int u32 = cnp.NPY_UINT32
    # the varlen index arrays may also be int32 (the contract's I32): the validators found every
    # value they read >= 0, so the drivers read their bits as the uint32 they equal
    cdef int i32 = cnp.NPY_INT32
    cdef bint halfdrv = (driver == _DRV_FLASH_HALF or driver == _DRV_PAGED_HALF or driver == _DRV_BACKWARD_HALF
                         or driver == _DRV_VARLEN_HALF or driver == _DRV_MASKED_HALF
                         or driver == _DRV_VARLEN_BACKWARD_HALF or driver == _DRV_MASKED_BACKWARD_HALF)
    npwork = "float32" if real_t is float else "float64"
    if halfdrv and not (narrow and real_t is float and (rnd_t is RoundNone or driver == _DRV_PAGED_HALF)):
        return NotImplemented
    # a decode step (Sq == 1) of a half driver reads K and V in their 16-bit storage: a KV cache
    # is read once at two bytes an element instead of widened into a copy on every step
    cdef bint decode16 = halfdrv and (driver == _DRV_FLASH_HALF or driver == _DRV_MASKED_HALF) and dims[3] == 1
    # the half flash reads Q and K in their storage (bf16 pairs on vdpbf16ps or the tiles: the
    # stored bits; else widened as they are packed), V too where its P V reads bf16 pairs only,
    # and rounds its output into the T array: no widened copies written and read again per call
    cdef bint pairs16 = (halfdrv and driver == _DRV_FLASH_HALF and not decode16 and real_t is float
                         and rnd_t is RoundNone)
    cdef bint vpairs16 = pairs16 and _v_in_storage(is_f16, params, ins)
    if pairs16:
        q, k, v, s = ins
        lse = _lse_out((_dim(q, 0), _dim(q, 1), _dim(q, 2)), params)
        h = _half_typenum(code)
        v_a = None if vpairs16 else _win(v, npwork, code, narrow, nthreads, "v")
        s_a = _win(s, npwork, code, narrow, nthreads, "alibi_slopes")
        res = _empty_as(q, h)
        if rnd_t is RoundNone and real_t is float:
            drive_attention_flash_half(tag, NULL, NULL, <const float*>_ptr(v_a, tn), <const float*>_ptr(s_a, tn),
                                       NULL, dims, params, nthreads, is_f16, NULL, NULL,
                                       <const unsigned short*>_ptr(q, h), <const unsigned short*>_ptr(k, h),
                                       <const unsigned short*>_ptr(v, h) if vpairs16 else NULL,
                                       <unsigned short*>_ptr(res, h), <float*>_ptr(lse, cnp.NPY_FLOAT32))
        return _with_lse(res, lse)
    if driver <= _DRV_FLASH_HALF:
        q, k, v, s = ins
        q_a = _win(q, npwork, code, narrow, nthreads, "q")
        k_a = _win(k, npwork, code, narrow and not decode16, nthreads, "k")
        v_a = _win(v, npwork, code, narrow and not decode16, nthreads, "v")
        s_a = _win(s, npwork, code, narrow, nthreads, "alibi_slopes")
        out = _out("out:out", q, npwork, narrow, tn)
        lse = _lse_out((_dim(q, 0), _dim(q, 1), _dim(q, 2)), params)   # (the half flash's alone)
        if driver == _DRV_NAIVE:
            drive_attention_naive(tag, <const real_t*>_ptr(q_a, tn), <const real_t*>_ptr(k_a, tn),
                                  <const real_t*>_ptr(v_a, tn), <const real_t*>_ptr(s_a, tn),
                                  <real_t*>_ptr(out, tn), dims, params, nthreads)
        elif driver == _DRV_FLASH:
            drive_attention_flash(tag, <const real_t*>_ptr(q_a, tn), <const real_t*>_ptr(k_a, tn),
                                  <const real_t*>_ptr(v_a, tn), <const real_t*>_ptr(s_a, tn),
                                  <real_t*>_ptr(out, tn), dims, params, nthreads)
        else:
            if rnd_t is RoundNone and real_t is float:
                if decode16:
                    h = _half_typenum(code)
                    drive_attention_flash_half(tag, <const float*>_ptr(q_a, tn), NULL, NULL,
                                               <const float*>_ptr(s_a, tn), <float*>_ptr(out, tn), dims, params,
                                               nthreads, is_f16, <const unsigned short*>_ptr(k, h),
                                               <const unsigned short*>_ptr(v, h), NULL, NULL, NULL, NULL,
                                               <float*>_ptr(lse, cnp.NPY_FLOAT32))
                else:
                    drive_attention_flash_half(tag, <const float*>_ptr(q_a, tn), <const float*>_ptr(k_a, tn),
                                               <const float*>_ptr(v_a, tn), <const float*>_ptr(s_a, tn),
                                               <float*>_ptr(out, tn), dims, params, nthreads, is_f16, NULL, NULL,
                                               NULL, NULL, NULL, NULL, <float*>_ptr(lse, cnp.NPY_FLOAT32))
        result = _from_work(out, code, nthreads) if narrow else out
        return _with_lse(result, lse)
    if driver <= _DRV_PAGED_HALF:
        q, kc, vc, table, lens, s = ins
        q_a = _win(q, npwork, code, narrow, nthreads, "q")
        s_a = _win(s, npwork, code, narrow, nthreads, "alibi_slopes")
        out = _out("out:out", q, npwork, narrow, tn)
        if driver == _DRV_PAGED:
            kc_a = _win(kc, npwork, code, narrow, nthreads, "k_cache")
            vc_a = _win(vc, npwork, code, narrow, nthreads, "v_cache")
            drive_attention_paged_naive(tag, <const real_t*>_ptr(q_a, tn), <const real_t*>_ptr(kc_a, tn),
                                        <const real_t*>_ptr(vc_a, tn), <const unsigned int*>_ptr(table, u32),
                                        <const unsigned int*>_ptr(lens, u32), <const real_t*>_ptr(s_a, tn),
                                        <real_t*>_ptr(out, tn), dims, params, nthreads)
        else:
            if real_t is float:  # the pool read in place, in its 16-bit storage
                h = _half_typenum(code)
                drive_attention_paged_half(tag, <const float*>_ptr(q_a, tn), <const unsigned short*>_ptr(kc, h),
                                           <const unsigned short*>_ptr(vc, h), <const unsigned int*>_ptr(table, u32),
                                           <const unsigned int*>_ptr(lens, u32), <const float*>_ptr(s_a, tn),
                                           <float*>_ptr(out, tn), dims, params, nthreads, is_f16)
        return _from_work(out, code, nthreads) if narrow else out
    if driver == _DRV_MASKED_BACKWARD or driver == _DRV_MASKED_BACKWARD_HALF:
        q, k, v, do, mask, bias, dlse, fout, flse = ins
        mask, bias, mdims = _full_key_masks(mask, bias, _dim(k, 2))
        dlse = _f32_rows(dlse, (_dim(q, 0), _dim(q, 1), _dim(q, 2)))   # [B, Hq, Sq]
        flse = _f32_rows(flse, (_dim(q, 0), _dim(q, 1), _dim(q, 2)))
        fo_a = _win(fout, npwork, code, narrow, nthreads, "out")
        q_a = _win(q, npwork, code, narrow, nthreads, "q")
        k_a = _win(k, npwork, code, narrow, nthreads, "k")
        v_a = _win(v, npwork, code, narrow, nthreads, "v")
        do_a = _win(do, npwork, code, narrow, nthreads, "do_grad")
        b_a = _win(bias, npwork, code, narrow, nthreads, "attn_bias")
        dq = _out("out:dq", q, npwork, narrow, tn)
        dk = _out("out:dk", k, npwork, narrow, tn)
        dv = _out("out:dv", v, npwork, narrow, tn)
        if driver == _DRV_MASKED_BACKWARD:
            drive_attention_masked_backward(tag, <const real_t*>_ptr(q_a, tn), <const real_t*>_ptr(k_a, tn),
                                            <const real_t*>_ptr(v_a, tn), <const real_t*>_ptr(do_a, tn),
                                            <const unsigned char*>_ptr(mask, cnp.NPY_BOOL),
                                            <const real_t*>_ptr(b_a, tn), <const float*>_ptr(dlse, cnp.NPY_FLOAT32),
                                            <const real_t*>_ptr(fo_a, tn), <const float*>_ptr(flse, cnp.NPY_FLOAT32),
                                            <real_t*>_ptr(dq, tn), <real_t*>_ptr(dk, tn), <real_t*>_ptr(dv, tn),
                                            dims, params, nthreads, mdims)
        elif rnd_t is RoundNone and real_t is float:
            drive_attention_masked_backward_half(tag, <const float*>_ptr(q_a, tn), <const float*>_ptr(k_a, tn),
                                                 <const float*>_ptr(v_a, tn), <const float*>_ptr(do_a, tn),
                                                 <const unsigned char*>_ptr(mask, cnp.NPY_BOOL),
                                                 <const float*>_ptr(b_a, tn), <const float*>_ptr(dlse, cnp.NPY_FLOAT32),
                                                 <const float*>_ptr(fo_a, tn), <const float*>_ptr(flse, cnp.NPY_FLOAT32),
                                                 <float*>_ptr(dq, tn), <float*>_ptr(dk, tn), <float*>_ptr(dv, tn),
                                                 dims, params, nthreads, mdims, is_f16)
        return _grads(dq, dk, dv, code, narrow, nthreads)
    if driver == _DRV_VARLEN_BACKWARD or driver == _DRV_VARLEN_BACKWARD_HALF:
        q, k, v, do, cu_q, cu_k, s, used, dlse, fout, flse = ins
        dlse = _f32_rows(dlse, (_dim(q, 1), _dim(q, 0)))   # [Hq, Tq]
        flse = _f32_rows(flse, (_dim(q, 1), _dim(q, 0)))
        fo_a = _win(fout, npwork, code, narrow, nthreads, "out")
        q_a = _win(q, npwork, code, narrow, nthreads, "q")
        k_a = _win(k, npwork, code, narrow, nthreads, "k")
        v_a = _win(v, npwork, code, narrow, nthreads, "v")
        do_a = _win(do, npwork, code, narrow, nthreads, "do_grad")
        s_a = None if s is None else _np.ascontiguousarray(s, dtype=npwork)   # float32 slopes: exact in either
        s_ld = _dim(s_a, 1) if s_a is not None and _dim(s_a, 0) > 1 else 0
        dq = _out("out:dq", q, npwork, narrow, tn)
        dk = _out("out:dk", k, npwork, narrow, tn)
        dv = _out("out:dv", v, npwork, narrow, tn)
        if driver == _DRV_VARLEN_BACKWARD:
            drive_attention_varlen_backward(tag, <const real_t*>_ptr(q_a, tn), <const real_t*>_ptr(k_a, tn),
                                            <const real_t*>_ptr(v_a, tn), <const real_t*>_ptr(do_a, tn),
                                            <const unsigned int*>_ptr(cu_q, u32, i32), <const unsigned int*>_ptr(cu_k, u32, i32),
                                            <const real_t*>_ptr(s_a, tn), s_ld, <const unsigned int*>_ptr(used, u32, i32),
                                            <const float*>_ptr(dlse, cnp.NPY_FLOAT32), <const real_t*>_ptr(fo_a, tn),
                                            <const float*>_ptr(flse, cnp.NPY_FLOAT32), <real_t*>_ptr(dq, tn),
                                            <real_t*>_ptr(dk, tn), <real_t*>_ptr(dv, tn), dims, params, nthreads)
        elif rnd_t is RoundNone and real_t is float:
            drive_attention_varlen_backward_half(tag, <const float*>_ptr(q_a, tn), <const float*>_ptr(k_a, tn),
                                                 <const float*>_ptr(v_a, tn), <const float*>_ptr(do_a, tn),
                                                 <const unsigned int*>_ptr(cu_q, u32, i32),
                                                 <const unsigned int*>_ptr(cu_k, u32, i32), <const float*>_ptr(s_a, tn),
                                                 s_ld, <const unsigned int*>_ptr(used, u32, i32),
                                                 <const float*>_ptr(dlse, cnp.NPY_FLOAT32), <const float*>_ptr(fo_a, tn),
                                                 <const float*>_ptr(flse, cnp.NPY_FLOAT32), <float*>_ptr(dq, tn),
                                                 <float*>_ptr(dk, tn), <float*>_ptr(dv, tn), dims, params, nthreads,
                                                 is_f16)
        return _grads(dq, dk, dv, code, narrow, nthreads)
    if driver == _DRV_MASKED or driver == _DRV_MASKED_HALF:
        q, k, v, mask, bias = ins
        mask, bias, mdims = _full_key_masks(mask, bias, _dim(k, 2))
        b_a = _win(bias, npwork, code, narrow, nthreads, "attn_bias")
        out = _out("out:out", q, npwork, narrow, tn)
        lse = _lse_out((_dim(q, 0), _dim(q, 1), _dim(q, 2)), params)
        if driver == _DRV_MASKED:
            # q, k and v are read where they lie (any view with unit-stride rows; another is copied)
            q = _rows_view(q, strides)
            k = _rows_view(k, strides + 3)
            v = _rows_view(v, strides + 6)
            _rows_view(out, strides + 9)
            drive_attention_masked(tag, <const real_t*>_data_rows(q, tn), <const real_t*>_data_rows(k, tn),
                                   <const real_t*>_data_rows(v, tn), <const unsigned char*>_ptr(mask, cnp.NPY_BOOL),
                                   <const real_t*>_ptr(b_a, tn), <real_t*>_ptr(out, tn), dims, params, nthreads,
                                   mdims, strides, <float*>_ptr(lse, cnp.NPY_FLOAT32))
        elif decode16:
            q_a = _win(q, npwork, code, narrow, nthreads, "q")
            h = _half_typenum(code)
            k = _rows_view(k, strides + 3)
            v = _rows_view(v, strides + 6)
            # q's work array and out are C-contiguous [B, Hq, 1, D]
            strides[0] = strides[9] = _dim(q, 1) * _dim(q, 3)
            strides[1] = strides[2] = strides[10] = strides[11] = _dim(q, 3)
            if rnd_t is RoundNone and real_t is float:
                drive_attention_masked_half(tag, <const float*>_ptr(q_a, tn), NULL, NULL,
                                            <const unsigned char*>_ptr(mask, cnp.NPY_BOOL),
                                            <const float*>_ptr(b_a, tn), <float*>_ptr(out, tn), dims, params,
                                            nthreads, mdims, is_f16, <const unsigned short*>_data_rows(k, h),
                                            <const unsigned short*>_data_rows(v, h), strides, NULL, NULL, NULL,
                                            NULL, <float*>_ptr(lse, cnp.NPY_FLOAT32))
        elif rnd_t is RoundNone and real_t is float:
            # as the half flash (pairs16 above): q and k read in their 16-bit storage, V too where
            # P V reads its pairs (_pairs16_v), the output rounded into the T array; the masks
            # as they are
            h = _half_typenum(code)
            q, k = _np.ascontiguousarray(q), _np.ascontiguousarray(k)
            # the finiteness scan reads the contiguous q and k just made (a non-contiguous
            # original would be copied a second time)
            vin16 = _v_in_storage(is_f16, params, (q, k, v))
            v = _np.ascontiguousarray(v) if vin16 else v
            v_a = None if vin16 else _win(v, npwork, code, narrow, nthreads, "v")
            res = _empty_as(q, h)
            drive_attention_masked_half(tag, NULL, NULL, <const float*>_ptr(v_a, tn),
                                        <const unsigned char*>_ptr(mask, cnp.NPY_BOOL),
                                        <const float*>_ptr(b_a, tn), NULL, dims, params, nthreads, mdims, is_f16,
                                        NULL, NULL, NULL, <const unsigned short*>_ptr(q, h),
                                        <const unsigned short*>_ptr(k, h),
                                        <const unsigned short*>_ptr(v, h) if vin16 else NULL,
                                        <unsigned short*>_ptr(res, h), <float*>_ptr(lse, cnp.NPY_FLOAT32))
            return _with_lse(res, lse)
        result = _from_work(out, code, nthreads) if narrow else out
        return _with_lse(result, lse)
    if driver == _DRV_VARLEN or driver == _DRV_VARLEN_HALF:
        q, k, v, cu_q, cu_k, s, table, used = ins
        s_a = None if s is None else _np.ascontiguousarray(s, dtype=npwork)   # float32 slopes: exact in either
        # [SB, Hq] slopes (the contract reads [Hq] as [1, Hq]): per sequence, or one set for all
        s_ld = _dim(s_a, 1) if s_a is not None and _dim(s_a, 0) > 1 else 0
        mbs = _dim(table, 1) if table is not None else 0
        lse = _lse_out((_dim(q, 1), _dim(q, 0)), params)   # [Hq, Tq]
        # q, k and v read where they lie (rows of heads with adjacent elements; others copied once),
        # bf16/f16 ones in their storage, the output of those written rounded to T
        q = _rows_heads_view(q, strides, strides + 1)
        k = _rows_heads_view(k, strides + 2, strides + 3)
        v = _rows_heads_view(v, strides + 4, strides + 5)
        if driver == _DRV_VARLEN:
            q_a = _win(q, npwork, code, narrow, nthreads, "q")
            if q_a is not q:   # (a widened copy: flat and C-contiguous)
                q_a = _rows_heads_view(_np.reshape(q_a, _np.shape(q)), strides, strides + 1)
            out = _out("out:out", q, npwork, narrow, tn)
            drive_attention_varlen(tag, <const real_t*>_data_strided(q_a, tn), <const real_t*>_data_strided(k, tn),
                                   <const real_t*>_data_strided(v, tn), <const unsigned int*>_ptr(cu_q, u32, i32),
                                   <const unsigned int*>_ptr(cu_k, u32, i32), <const real_t*>_ptr(s_a, tn), s_ld,
                                   <const unsigned int*>_ptr(table, u32, i32), mbs, <const unsigned int*>_ptr(used, u32, i32),
                                   <real_t*>_ptr(out, tn), <float*>_ptr(lse, cnp.NPY_FLOAT32), dims, params,
                                   nthreads, strides)
        else:
            if rnd_t is RoundNone and real_t is float:   # q, k and v in their 16-bit storage (cores.py half_storage)
                h = _half_typenum(code)
                out = _empty_as(q, h)
                drive_attention_varlen_half(tag, <const unsigned short*>_data_strided(q, h),
                                            <const unsigned short*>_data_strided(k, h),
                                            <const unsigned short*>_data_strided(v, h),
                                            <const unsigned int*>_ptr(cu_q, u32, i32),
                                            <const unsigned int*>_ptr(cu_k, u32, i32), <const float*>_ptr(s_a, tn), s_ld,
                                            <const unsigned int*>_ptr(table, u32, i32), mbs,
                                            <const unsigned int*>_ptr(used, u32, i32), <unsigned short*>_ptr(out, h),
                                            <float*>_ptr(lse, cnp.NPY_FLOAT32), dims, params, nthreads, is_f16,
                                            strides, is_f16 == 1 and _f16_split(_round_p(params, 1)) and _finite16(q))
                return _with_lse(out, lse)
        result = _from_work(out, code, nthreads) if narrow else out
        return _with_lse(result, lse)
    # the founding backward takes (q, k, v, do_grad, alibi_slopes); the mixed one's half driver
    # also the forward's lse gradient, out and lse (cores.py BACKWARD_HALF)
    q, k, v, do, s = ins[:5]
    dlse = fout = flse = None
    if driver == _DRV_BACKWARD_HALF:
        dlse, fout, flse = ins[5:]
        dlse = _f32_rows(dlse, (_dim(q, 0), _dim(q, 1), _dim(q, 2)))   # [B, Hq, Sq]
        flse = _f32_rows(flse, (_dim(q, 0), _dim(q, 1), _dim(q, 2)))
    fo_a = _win(fout, npwork, code, narrow, nthreads, "out")
    q_a = _win(q, npwork, code, narrow, nthreads, "q")
    k_a = _win(k, npwork, code, narrow, nthreads, "k")
    v_a = _win(v, npwork, code, narrow, nthreads, "v")
    do_a = _win(do, npwork, code, narrow, nthreads, "do_grad")
    s_a = _win(s, npwork, code, narrow, nthreads, "alibi_slopes")
    dq = _out("out:dq", q, npwork, narrow, tn)
    dk = _out("out:dk", k, npwork, narrow, tn)
    dv = _out("out:dv", v, npwork, narrow, tn)
    if driver == _DRV_BACKWARD:
        drive_attention_flash_backward(tag, <const real_t*>_ptr(q_a, tn), <const real_t*>_ptr(k_a, tn),
                                       <const real_t*>_ptr(v_a, tn), <const real_t*>_ptr(do_a, tn),
                                       <const real_t*>_ptr(s_a, tn), <real_t*>_ptr(dq, tn), <real_t*>_ptr(dk, tn),
                                       <real_t*>_ptr(dv, tn), dims, params, nthreads)
    else:
        if rnd_t is RoundNone and real_t is float:
            drive_attention_flash_backward_half(tag, <const float*>_ptr(q_a, tn), <const float*>_ptr(k_a, tn),
                                                <const float*>_ptr(v_a, tn), <const float*>_ptr(do_a, tn),
                                                <const float*>_ptr(s_a, tn), <const float*>_ptr(dlse, cnp.NPY_FLOAT32),
                                                <const float*>_ptr(fo_a, tn), <const float*>_ptr(flse, cnp.NPY_FLOAT32),
                                                <float*>_ptr(dq, tn),
                                                <float*>_ptr(dk, tn), <float*>_ptr(dv, tn), dims, params,
                                                nthreads, is_f16)
    return _grads(dq, dk, dv, code, narrow, nthreads)


cdef inline object _lse_out(tuple shape, dict params):
    """A forward's log-sum-exp output of `shape` when asked (the contracts' `when: return_lse`),
    +inf where the kernel finds a row with nothing admissible (it writes every other); else None."""
    return _np.full(shape, _np.inf, _np.float32) if params.get("return_lse") else None


cdef inline object _with_lse(object result, object lse):
    """What a forward returns: its output, with its log-sum-exp when asked."""
    return result if lse is None else (result, lse)


cdef inline object _f32_rows(object x, tuple shape):
    """A row-statistics input (dlse, the forward's lse) as the drivers read it: float32,
    C-contiguous, `shape` (a dim of 1 broadcasts: expanded here); None stays None."""
    return None if x is None else _np.ascontiguousarray(_np.broadcast_to(x, shape), _np.float32)


cdef inline tuple _grads(object dq, object dk, object dv, str code, bint narrow, int nthreads):
    """A backward driver's three work arrays as the kernel returns them (rounded once to T)."""
    if narrow:
        return _from_work(dq, code, nthreads), _from_work(dk, code, nthreads), _from_work(dv, code, nthreads)
    return dq, dk, dv


cdef inline tuple _full_key_masks(object mask, object bias, Py_ssize_t sk):
    """attention_masked's mask and bias as the cores read them, with (MB, MH, MQ, AB, AH, AQ):
    a key dim of 1 broadcasts too, so it is expanded here (the cores read a mask row as Sk keys)."""
    if mask is not None and _dim(mask, 3) != sk:
        mask = _np.ascontiguousarray(_np.broadcast_to(mask, mask.shape[:3] + (sk,)))
    if bias is not None and _dim(bias, 3) != sk:
        bias = _np.ascontiguousarray(_np.broadcast_to(bias, bias.shape[:3] + (sk,)))
    mdims = ((mask.shape[:3] if mask is not None else (1, 1, 1))
             + (bias.shape[:3] if bias is not None else (1, 1, 1)))
    return mask, bias, mdims
