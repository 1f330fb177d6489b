# The four attention kernels, written once over (rnd_t, real_t).  Hand-written; included by the
# generated extension after policy.pxi and blocks.pxi.  Callers pass validated, contiguous
# buffers; every index these loops touch is implied by the shapes the validator checked (and,
# for the paged kernel, by the block ids checked before the GIL is released).

from cython.parallel cimport prange, threadid
from libc.math cimport INFINITY, log

cdef enum:
    BR_FLASH = 64     # query rows per flash tile
cdef enum:
    BR_NAIVE = 16     # query rows per naive/paged task (score rows materialized together)
cdef enum:
    BR_BWD = 128      # query rows per backward step, at most (AttnOpts.bwd_rows; at most BC: rows[])
cdef enum:
    BC_DECODE = 2048  # keys whose dots a decode step computes at once, at most (flash_task)

# a bf16 decode step's round_p P V and its scores on vdpbf16ps where the level has it
# (fc_decode16.h); each off (_test_decode_pairs, _test_decode_qk_pairs), the float32 loops on rows
# widened in registers, as before them: timing and the tests that tell the orders apart only
cdef bint _decode_pairs_allowed = True
cdef bint _decode_qk_pairs_allowed = True
# round_p's bf16 weights written as pairs by the exp pass where P V runs on the tiles (flash_task
# p16); off (_test_paired_weights), stored in float32 and split by P V, as before: the same bits
cdef bint _paired_weights_allowed = True


cdef struct Layout:
    # where row s of head h of batch item b of a [B, H, S, D] operand starts: b * sb + h * sh + s * ss
    # elements from its base (the D elements of a row are adjacent)
    Py_ssize_t sb, sh, ss
    Py_ssize_t H      # heads per batch item, to split a flattened head index b * H + h


cdef struct Shape:
    Py_ssize_t B, Hq, Hkv, Sq, Sk, D
    # the operands' layouts: q and out [B, Hq, Sq, D], k and v [B, Hkv, Sk, D] (C-contiguous unless
    # a driver says otherwise: the flash forward reads and writes through them; the naive and
    # backward kernels take C-contiguous operands only)
    Layout lq, lk, lv, lo
    # the flash forward may stack the Sq query rows of a kv head's G query heads in one tile when
    # G * Sq <= BR_FLASH (the driver allows it: no masks, the float32/float64 policies), so that
    # K and V are read once per kv head, not once per query head (flash_heads_as_rows)
    int stack
    # a decode step (Sq = 1, B = 1) may serve hpt kv heads per task, the G query heads of each as
    # rows head after head, G rounded up to NR with copies of its last row (hpt * that <= 32; each
    # K and V row's heads adjacent, D apart): a pool row's heads are then read together, front to
    # back, where a task per kv head read a D-element piece of each row and left the rest to the
    # next task (paged_split does the same for the paged kernels).  1: a task per kv head.
    Py_ssize_t hpt


cdef inline Layout contiguous_layout(Py_ssize_t H, Py_ssize_t S, Py_ssize_t D) noexcept nogil:
    cdef Layout l
    l.ss = D
    l.sh = S * D
    l.sb = H * S * D
    l.H = H
    return l


cdef inline Py_ssize_t row_offset(Layout* l, Py_ssize_t head, Py_ssize_t s) noexcept nogil:
    """Offset of row s of the flattened head index head (= b * H + h)."""
    return (head // l.H) * l.sb + (head % l.H) * l.sh + s * l.ss


cdef inline Py_ssize_t ceil_div(Py_ssize_t a, Py_ssize_t b) noexcept nogil:
    return (a + b - 1) // b


cdef inline Py_ssize_t head_tile_rows(real_t* x, Layout* l, Py_ssize_t head0, Py_ssize_t task, Py_ssize_t ntiles,
                                      Py_ssize_t Sk, real_t** rows, const unsigned int* table,
                                      Py_ssize_t tbs) noexcept nogil:
    """rows[j] = the row of key j of tile task % ntiles of head head0 + task // ntiles in x (laid
    out as l says; through table, when not NULL: table_row); returns how many keys the tile has
    (at most BC)."""
    cdef Py_ssize_t head = head0 + task // ntiles, t = task % ntiles, n
    n = Sk - t * BC
    if n > BC:
        n = BC
    table_rows(table, tbs, t * BC, n, <const char*>(x + row_offset(l, head, 0)), l.ss * <Py_ssize_t>sizeof(real_t),
               <const char**>rows)
    return n


cdef inline void pack_head_tile(real_t* k, Layout* l, Py_ssize_t head0, Py_ssize_t task, Py_ssize_t ntiles,
                                Py_ssize_t Sk, Py_ssize_t D, real_t* out, const unsigned int* table,
                                Py_ssize_t tbs) noexcept nogil:
    # a function of its own so `rows` lives on each OpenMP thread's stack
    cdef real_t* rows[BC]
    cdef Py_ssize_t n = head_tile_rows(k, l, head0, task, ntiles, Sk, rows, table, tbs)
    if table != NULL:   # a paged pool's blocks lie in any order, where the hardware prefetcher
        fc_prefetch_keys(<void**>rows, n, D * sizeof(real_t))   # stops: ask for every row first
    pack_kt(rows, n, D, out + task * D * BC)


cdef void pack_heads(real_t* k, Layout* l, Py_ssize_t head0, Py_ssize_t nheads, Py_ssize_t Sk, Py_ssize_t D,
                     real_t* out, int nthreads, const unsigned int* table=NULL, Py_ssize_t tbs=1) noexcept nogil:
    """Heads head0 .. head0 + nheads of K (laid out as l says; its rows through a paged pool's
    table where table is not NULL) -> packed tiles [nheads][ceil(Sk/BC)][D][BC] (shared by all q
    tiles)."""
    cdef Py_ssize_t ntiles = ceil_div(Sk, BC)
    cdef Py_ssize_t task
    for task in prange(nheads * ntiles, schedule='static', num_threads=nthreads):
        pack_head_tile(k, l, head0, task, ntiles, Sk, D, out, table, tbs)


cdef inline void pack_head_tile_pairs(float* x, Layout* l, Py_ssize_t head0, Py_ssize_t task, Py_ssize_t ntiles,
                                      Py_ssize_t Sk, Py_ssize_t D, unsigned int* out, bint keys_paired,
                                      bint split) noexcept nogil:
    cdef float* rows[BC]
    cdef Py_ssize_t n = head_tile_rows(x, l, head0, task, ntiles, Sk, rows, NULL, 1)
    if split and keys_paired:
        fc_pack_v_split_f32(rows, n, D, out + task * BC * D)
    elif split:
        fc_pack_k_split_f32(rows, n, D, out + task * 2 * D * BC)
    elif keys_paired:
        fc_pack_v_pairs_bf16(rows, n, D, out + task * (BC // 2) * D)
    else:
        fc_pack_k_pairs_bf16(rows, n, D, out + task * ((D + 1) // 2) * BC)


cdef void pack_heads_pairs(float* x, Layout* l, Py_ssize_t head0, Py_ssize_t nheads, Py_ssize_t Sk, Py_ssize_t D,
                           unsigned int* out, int nthreads, bint keys_paired=False, bint split=False) noexcept nogil:
    """Heads head0 .. head0 + nheads of bf16-valued K (laid out as l says) -> bf16 pairs
    [nheads][ceil(Sk/BC)][ceil(D/2)][BC] for fc_qk_dpbf16; keys_paired: bf16-valued V -> keys 2k
    and 2k + 1 paired per column [nheads][ceil(Sk/BC)][BC/2][D] for the tile P V (fc_pv_bf16v).
    split: f16-valued rows -> their split words (fc_f16_tiles.h), [2D][BC] per tile for the scores,
    or (keys_paired) [BC][D] per tile for fc_pv_f16s."""
    cdef Py_ssize_t ntiles = ceil_div(Sk, BC)
    cdef Py_ssize_t task
    for task in prange(nheads * ntiles, schedule='static', num_threads=nthreads):
        pack_head_tile_pairs(x, l, head0, task, ntiles, Sk, D, out, keys_paired, split)


cdef inline Py_ssize_t head_tile_rows16(const unsigned short* x, Layout* l, Py_ssize_t head0, Py_ssize_t task,
                                        Py_ssize_t ntiles, Py_ssize_t Sk, const unsigned short** rows,
                                        const unsigned int* table, Py_ssize_t tbs) noexcept nogil:
    """head_tile_rows for 16-bit storage."""
    cdef Py_ssize_t head = head0 + task // ntiles, t = task % ntiles, n
    n = Sk - t * BC
    if n > BC:
        n = BC
    table_rows(table, tbs, t * BC, n, <const char*>(x + row_offset(l, head, 0)),
               l.ss * <Py_ssize_t>sizeof(unsigned short), <const char**>rows)
    return n


cdef inline void pack_head_tile_pairs16(const unsigned short* x, Layout* l, Py_ssize_t head0, Py_ssize_t task,
                                        Py_ssize_t ntiles, Py_ssize_t Sk, Py_ssize_t D, unsigned int* out,
                                        bint keys_paired, const unsigned int* table, Py_ssize_t tbs) noexcept nogil:
    cdef const unsigned short* rows[BC]
    cdef Py_ssize_t n = head_tile_rows16(x, l, head0, task, ntiles, Sk, rows, table, tbs)
    if table != NULL:   # (as pack_head_tile)
        fc_prefetch_keys(<void**>rows, n, D * sizeof(unsigned short))
    if keys_paired:
        fc_pack_v_pairs_b16(rows, n, D, out + task * (BC // 2) * D)
    else:
        fc_pack_k_pairs_b16(rows, n, D, out + task * ((D + 1) // 2) * BC)


cdef inline void pack_head_tile_split16(const unsigned short* x, Layout* l, Py_ssize_t head0, Py_ssize_t task,
                                        Py_ssize_t ntiles, Py_ssize_t Sk, Py_ssize_t D, unsigned int* out,
                                        bint values) noexcept nogil:
    cdef const unsigned short* rows[BC]
    cdef Py_ssize_t n = head_tile_rows16(x, l, head0, task, ntiles, Sk, rows, NULL, 1)
    if values:
        fc_pack_v_split_f16(rows, n, D, out + task * BC * D)
    else:
        fc_pack_k_split_f16(rows, n, D, out + task * 2 * D * BC)


cdef void pack_heads_split16(const unsigned short* x, Layout* l, Py_ssize_t head0, Py_ssize_t nheads, Py_ssize_t Sk,
                             Py_ssize_t D, unsigned int* out, int nthreads, bint values) noexcept nogil:
    """Heads head0 .. head0 + nheads of f16 K (or V: values) in their storage -> the split words of
    the f16 products on the tiles (fc_f16_tiles.h): [nheads][ceil(Sk/BC)][2D][BC] for K,
    [nheads][ceil(Sk/BC)][BC][D] for V."""
    cdef Py_ssize_t ntiles = ceil_div(Sk, BC)
    cdef Py_ssize_t task
    for task in prange(nheads * ntiles, schedule='static', num_threads=nthreads):
        pack_head_tile_split16(x, l, head0, task, ntiles, Sk, D, out, values)


cdef void pack_heads_pairs16(const unsigned short* x, Layout* l, Py_ssize_t head0, Py_ssize_t nheads, Py_ssize_t Sk,
                             Py_ssize_t D, unsigned int* out, int nthreads, bint keys_paired=False,
                             const unsigned int* table=NULL, Py_ssize_t tbs=1) noexcept nogil:
    """pack_heads_pairs from K or V in their bf16 storage (laid out as l says; through table as
    pack_heads): the same pairs, with no widened copy in between."""
    cdef Py_ssize_t ntiles = ceil_div(Sk, BC)
    cdef Py_ssize_t task
    for task in prange(nheads * ntiles, schedule='static', num_threads=nthreads):
        pack_head_tile_pairs16(x, l, head0, task, ntiles, Sk, D, out, keys_paired, table, tbs)


cdef inline void pack_head_tile16(const unsigned short* x, Layout* l, Py_ssize_t head0, Py_ssize_t task,
                                  Py_ssize_t ntiles, Py_ssize_t Sk, Py_ssize_t D, float* out, int is_f16) noexcept nogil:
    cdef const unsigned short* rows[BC]
    cdef Py_ssize_t n = head_tile_rows16(x, l, head0, task, ntiles, Sk, rows, NULL, 1)
    fc_pack_kt_h16(rows, n, D, out + task * D * BC, is_f16)


cdef void pack_heads16(const unsigned short* x, Layout* l, Py_ssize_t head0, Py_ssize_t nheads, Py_ssize_t Sk,
                       Py_ssize_t D, float* out, int nthreads, int is_f16) noexcept nogil:
    """pack_heads from K in its bf16/f16 storage (laid out as l says), widened as it packs."""
    cdef Py_ssize_t ntiles = ceil_div(Sk, BC)
    cdef Py_ssize_t task
    for task in prange(nheads * ntiles, schedule='static', num_threads=nthreads):
        pack_head_tile16(x, l, head0, task, ntiles, Sk, D, out, is_f16)


cdef inline Py_ssize_t flash_scratch(Py_ssize_t D, bint k_tiles=False, bint f16s=False) noexcept nogil:
    """The work-type elements of one thread's flash_task scratch: Q, S, O, m, l, Q's bf16 pairs and
    P's (round_p), or (f16s: AttnOpts.f16s, never with k_tiles) their split words, 2D and 2 BC per
    row; with k_tiles (AttnOpts.k_tiles), the tile's K^T after them (or its K pairs and
    V pairs, (D + 1) // 2 * BC + BC // 2 * D 32-bit words)."""
    if f16s:
        return 2 * BR_FLASH * D + BR_FLASH * BC + 2 * BR_FLASH + BR_FLASH * 2 * D + 2 * BR_FLASH * BC
    return (2 * BR_FLASH * D + BR_FLASH * BC + 2 * BR_FLASH + BR_FLASH * ((D + 1) // 2) + BR_FLASH * (BC // 2)
            + ((D + 1) * BC if k_tiles else 0))


cdef inline void pv_bf16_rounded(float* P, Py_ssize_t ldp, Py_ssize_t nr4, Py_ssize_t nc, const float* V,
                                 Py_ssize_t ldv, float** rows, Py_ssize_t D, float* O, Py_ssize_t ldo,
                                 const unsigned int* vpairs, unsigned int* Pp, bint round_first) noexcept nogil:
    """O += P V for bf16-valued V with P rounded to bf16 (round_p; round_first: P is float32 yet,
    else it holds bf16 values already): vdpbf16ps on P's and V's pairs (vpairs: this tile's,
    fc_pack_v_pairs_bf16; the pairing rounds), or on the tiles one product per block."""
    if FC_HAVE_DPBF16 and vpairs != NULL and not fc_bf16_on_tiles():
        fc_pv_dpbf16_vec(P, ldp, nr4, nc, vpairs, D, O, ldo, Pp, False)
    else:
        if round_first:
            fc_round_rows_half(P, ldp, nr4, nc, 0)
        fc_pv_bf16v(P, ldp, nr4, nc, V, ldv, rows, D, O, ldo, vpairs, 1)


cdef inline bint flash_heads_as_rows(Shape* sh) noexcept nogil:
    """GQA with few query rows: a kv head's G query heads, Sq rows each (one in a decode step),
    make its tiles, head after head (see flash_task); a decode step always (with Shape.hpt > 1
    several kv heads' too, multi-head included), more rows where the driver allows it
    (Shape.stack) and G * Sq fits one tile."""
    return sh.hpt > 1 or (sh.Hq > sh.Hkv and (sh.Sq == 1 or (sh.stack and (sh.Hq // sh.Hkv) * sh.Sq <= BR_FLASH)))


cdef inline Py_ssize_t flash_tasks(Shape* sh, Py_ssize_t nkv) noexcept nogil:
    cdef Py_ssize_t G = sh.Hq // sh.Hkv
    if flash_heads_as_rows(sh):
        if sh.hpt > 1:   # (B = 1: the kv heads [kv0, kv0 + nkv) in groups of hpt)
            return ceil_div(nkv, sh.hpt)
        return nkv * ceil_div(G * sh.Sq, BR_FLASH)
    return nkv * G * ceil_div(sh.Sq, BR_FLASH)


cdef inline void flash_task(rnd_t tag, Py_ssize_t task, Py_ssize_t kv0, real_t* q, real_t* ktp,
                            const unsigned int* kpp, const unsigned int* vpp, real_t* v, real_t* slopes,
                            real_t* out, Shape* sh, AttnOpts* o, real_t* buf) noexcept nogil:
    # task -> (kv head kv0 + i, its query head g, query tile); ktp holds the packed K of kv heads from kv0.
    # kpp, when not NULL (bf16 inputs under float32 compute, drive_attention_flash_half), holds
    # them as bf16 pairs instead, and the scores come from fc_qk_dpbf16; vpp, when not NULL (the
    # tile form), V's keys paired for the tile P V, per kv head from kv0 (pack_heads_pairs).
    cdef Py_ssize_t D = sh.D, Sq = sh.Sq, Sk = sh.Sk
    cdef Py_ssize_t ntiles = ceil_div(Sk, BC)
    cdef Py_ssize_t G = sh.Hq // sh.Hkv
    # Few query rows per head with GQA (a decode step; or Sq rows with G * Sq <= BR_FLASH where
    # Shape.stack allows): the rows of a kv head's G query heads form its tiles, head after head
    # (row r of the task is position (g0 + r) % Sq of head hk * G + (g0 + r) // Sq), each with its
    # head's ALiBi slope, and K and V are read once for them all.  Otherwise a tile is BR_FLASH
    # consecutive positions of one head.  Either way each row's arithmetic is the same: only how
    # many rows share a task changes.
    cdef bint heads_as_rows = flash_heads_as_rows(sh)
    cdef Py_ssize_t nqt = ceil_div(G * Sq, BR_FLASH) if heads_as_rows else ceil_div(Sq, BR_FLASH)
    cdef Py_ssize_t qt = task % nqt, rest = task // nqt
    # (Shape.hpt) nh kv heads from kvh, rph rows each in the dots and P V: G rounded up to NR,
    # the rows past G copies of the head's last (the same bits, written twice)
    cdef Py_ssize_t nh = 1, rph = (G + NR - 1) // NR * NR, gg
    if heads_as_rows and sh.hpt > 1:
        nqt = 1
        qt = 0
        rest = task * sh.hpt
    cdef Py_ssize_t kvh = kv0 + (rest if heads_as_rows else rest // G)
    cdef Py_ssize_t b = kvh // sh.Hkv, hk = kvh % sh.Hkv
    if heads_as_rows and sh.hpt > 1:
        nh = sh.Hkv - hk if sh.Hkv - hk < sh.hpt else sh.hpt
    cdef Py_ssize_t g0 = qt * BR_FLASH   # (heads_as_rows) the task's first row among the G * Sq
    cdef Py_ssize_t h = hk * G + (g0 // Sq if heads_as_rows else rest % G)
    cdef Py_ssize_t i0 = g0 % Sq if heads_as_rows else qt * BR_FLASH
    # the masks' step between rows, where the rows are affine in (head, position): a decode step's
    # heads (hstep 1), or one head's positions (pstep 1); stacked rows of Sq > 1 have no masks
    cdef Py_ssize_t pstep = 0 if heads_as_rows else 1, hstep = 1 if heads_as_rows else 0
    cdef Py_ssize_t rh[BR_FLASH]   # each row's query head and position
    cdef Py_ssize_t rp[BR_FLASH]
    cdef Py_ssize_t ifirst
    cdef Py_ssize_t nr, nr4, t, j0, nc, r, jj, d, kend, cls, lds, toff, wbase, wend, nw
    cdef real_t* Qs = buf
    cdef real_t* S = Qs + BR_FLASH * D
    cdef real_t* O = S + BR_FLASH * BC
    cdef real_t* m = O + BR_FLASH * D
    cdef real_t* l = m + BR_FLASH
    cdef unsigned int* Qp = <unsigned int*>(l + BR_FLASH)   # BR_FLASH * D2: Q as bf16 pairs
    # (o.f16s: Q's 2D split words per row, the scores' operand with D2 = 2D)
    cdef Py_ssize_t D2 = 2 * D if o.f16s else (D + 1) // 2
    cdef unsigned int* Pp = Qp + BR_FLASH * D2              # BR_FLASH * BC / 2: P as bf16 pairs (f16s: two planes of BC words)
    cdef const unsigned int* vtile
    cdef real_t* rows[BC_DECODE]
    cdef real_t* srow
    cdef real_t* orow
    cdef real_t* vbase = v + row_offset(&sh.lv, kvh, 0) if o.v16 == NULL and v != NULL else NULL
    # with o.k16 / o.v16 (float32 compute, 16-bit K and V read in place), their rows there
    cdef const unsigned short* rows16[BC_DECODE]
    cdef const unsigned short* krow16 = o.k16 + row_offset(&sh.lk, kvh, 0) if o.k16 != NULL else NULL
    cdef const unsigned short* vrow16 = o.v16 + row_offset(&sh.lv, kvh, 0) if o.v16 != NULL else NULL
    cdef Py_ssize_t ldv = sh.lv.ss
    cdef real_t* kth = ktp + (kvh - kv0) * ntiles * D * BC
    # with o.k_tiles, ktp is K itself and each tile is packed here (flash_scratch's last D * BC)
    cdef real_t* ktile = buf + flash_scratch(D) if o.k_tiles and o.kp16 == NULL else NULL
    cdef Py_ssize_t kpf = -1, npf   # (k_tiles) the tile whose rows were asked for ahead; how many
    # (spread) the rows the products ask for as they go: V's rows of the tile, K's of the next
    cdef void* pf_rows[2 * BC]
    cdef Py_ssize_t npr
    cdef fc_pf_stream pfs
    # (fc_uarch.h fc_chunk_spread: the rows a chunk's tiles read next asked for as its products go)
    cdef bint spread = ktile != NULL and fc_chunk_spread
    # with o.k_tiles and o.kp16, each tile's K pairs and V pairs are packed here instead, and kpp,
    # vpp point at them (one tile each, not a kv head's tiles)
    cdef bint pair_tiles = real_t is float and o.k_tiles and o.kp16 != NULL
    cdef const unsigned short* kprow16 = o.kp16 + row_offset(&sh.lk, kvh, 0) if pair_tiles else NULL
    cdef const unsigned short* vprow16 = o.vp16 + row_offset(&sh.lv, kvh, 0) if pair_tiles else NULL
    if pair_tiles:
        kpp = <unsigned int*>(buf + flash_scratch(D))
        vpp = kpp + ((D + 1) // 2) * BC
    cdef bint spread16 = pair_tiles and fc_chunk_spread   # (spread, for the tiles' bf16 pairs)
    # with o.k_rows, ktp is K itself, laid out as sh.lk says
    cdef real_t* krow0 = ktp + row_offset(&sh.lk, kvh, 0) if o.k_rows else NULL
    # a bf16 decode step's round_p P V on vdpbf16ps (fc_decode16.h), V's rows paired as they are read
    cdef bint pv16 = (rnd_t is RoundNone and real_t is float and vrow16 != NULL and o.round_p == 1
                      and o.is_f16 == 0 and FC_HAVE_DPBF16 and _decode_pairs_allowed)
    # its scores on vdpbf16ps along d (fc_decode16.h), K's rows read in place
    cdef bint qk16 = (rnd_t is RoundNone and real_t is float and krow16 != NULL and o.is_f16 == 0
                      and FC_HAVE_DPBF16 and _decode_qk_pairs_allowed)
    cdef real_t scale = R(tag, <real_t>o.scale)
    cdef real_t cap = R(tag, <real_t>o.softcap)
    cdef real_t slope
    cdef real_t mt, mn, alpha, li
    cdef bint plain
    # math in T: each row's lane partials, kept until the tile's rows are done so that their
    # rounded totals (15 dependent roundings per row) run side by side (lane_totals)
    cdef real_t lanes[BR_FLASH * NL]
    cdef real_t alphas[BR_FLASH]
    cdef real_t totals[BR_FLASH]
    cdef bint live[BR_FLASH]
    # float32 compute: each row's new running max, its factor and its weights' sum taken after
    # the tile's rows, for all of them at once (fc_rescale_factors_f32, fc_sum16_rows)
    cdef real_t mnew[BR_FLASH]
    cdef bint defer = rnd_t is RoundNone and real_t is float
    cdef Py_ssize_t nrow, ilast
    # attention_masked's masks at the tile's first row (key 0) and the step between its rows
    cdef const unsigned char* mrow0 = NULL
    cdef const real_t* arow0 = NULL
    cdef const unsigned char* mtile
    cdef Py_ssize_t mstep = 0, astep = 0
    cdef int mcls
    cdef bint tmask
    if o.mask != NULL:
        mrow0 = <const unsigned char*>o.mask + b * o.m_sb + h * o.m_sh + i0 * o.m_si
        mstep = hstep * o.m_sh + pstep * o.m_si
    if o.bias != NULL:
        arow0 = <const real_t*>o.bias + b * o.a_sb + h * o.a_sh + i0 * o.a_si
        astep = hstep * o.a_sh + pstep * o.a_si
    if nh > 1:
        nr = nh * rph
    else:
        nr = (G * Sq - g0) if heads_as_rows else (Sq - i0)
    if nr > BR_FLASH:
        nr = BR_FLASH
    for r in range(nr):
        if nh > 1:
            gg = r % rph
            rh[r] = (hk + r // rph) * G + (gg if gg < G else G - 1)
            rp[r] = 0
        elif heads_as_rows:
            rh[r] = hk * G + (g0 + r) // Sq
            rp[r] = (g0 + r) % Sq
        else:
            rh[r] = h
            rp[r] = i0 + r
    # the tile's first and last query positions (positions grow along a head's rows)
    ifirst = 0 if heads_as_rows and nr > Sq - i0 else i0
    ilast = Sq - 1 if heads_as_rows and nr > Sq - i0 else rp[nr - 1]
    nr4 = (nr + NR - 1) // NR * NR
    if nh == 1:
        rph = nr4
    # the tile's rows: consecutive positions of head h, or (heads_as_rows) of heads h, h + 1, ...
    if rnd_t is RoundNone and real_t is float and o.q16 != NULL:   # Q read in its 16-bit storage
        if o.f16s:        # its split words
            for r in range(nr):
                fc_split_q_f16(o.q16 + row_offset(&sh.lq, b * sh.Hq + rh[r], rp[r]), D, Qp + r * D2)
            memset(Qp + nr * D2, 0, (nr4 - nr) * D2 * sizeof(unsigned int))
        elif kpp != NULL:   # its pairs are its stored bits
            for r in range(nr):
                fc_pair_row_b16(o.q16 + row_offset(&sh.lq, b * sh.Hq + rh[r], rp[r]), D, Qp + r * D2)
            memset(Qp + nr * D2, 0, (nr4 - nr) * D2 * sizeof(unsigned int))
        else:
            for r in range(nr):
                fc_widen_half(o.q16 + row_offset(&sh.lq, b * sh.Hq + rh[r], rp[r]), <float*>Qs + r * D, D, o.is_f16)
            zero(Qs + nr * D, (nr4 - nr) * D)
    elif heads_as_rows and (Sq > 1 or nh > 1):
        for r in range(nr):
            memcpy(Qs + r * D, q + row_offset(&sh.lq, b * sh.Hq + rh[r], rp[r]), D * sizeof(real_t))
        zero(Qs + nr * D, (nr4 - nr) * D)
    else:
        copy_rows_strided(q + row_offset(&sh.lq, b * sh.Hq + h, i0), hstep * sh.lq.sh + pstep * sh.lq.ss,
                          nr, nr4, D, Qs)
    if rnd_t is RoundNone and real_t is float:
        if o.f16s and o.q16 == NULL:   # (a widened q: its split words from the float32 rows)
            fc_split_q_rows_f32(<float*>Qs, D, nr4, D, Qp, D2)
        elif (kpp != NULL or qk16) and o.q16 == NULL:
            fc_pair_rows_bf16(Qs, nr4, D, Qp, D2)
    zero(O, nr4 * D)
    for r in range(nr):
        m[r] = -INFINITY
        l[r] = 0
    kend = o.k_len if o.k_len < Sk else Sk
    # A decode step reads K's and V's rows where they lie (krow0, krow16): its few rows take the
    # dots of as many keys as the score buffer holds (BR_FLASH * BC scores, lds apart) in one
    # pass, from the first tile it attends, and P V reads V's rows of that run in key groups with
    # the prefetch running past the tiles' edges.  The softmax still steps 128-key tile by tile,
    # with the same dots and the same sums: the bits of tile-by-tile steps, in longer runs.
    lds = BC
    if krow0 != NULL or krow16 != NULL:
        lds = (BR_FLASH // nr4) * BC
        if lds > BC_DECODE:
            lds = BC_DECODE
    toff = wbase = wend = 0   # the tile's first column in S; the run of keys whose dots S holds
    # round_p's bf16 weights where P V runs on V's pairs alone (vdpbf16ps): the exp pass leaves
    # them in float32 and the pairing rounds them (fc_pv_dpbf16_vec's `exact`): the same products
    # without the exp pass's integer rounding
    cdef int rp_exp = 0 if (o.round_p == 1 and lds == BC and vrow16 == NULL and vbase == NULL
                            and o.vt16 == NULL) else o.round_p
    # round_p's bf16 weights where P V runs on the tiles with V's pairs: the exp pass writes them
    # paired into Pp (fc_exp_lanes_bf16p), and P V loads them as they are, in tiles whose rows,
    # keys and columns fill whole blocks (fc_pv_paired_whole; the others keep the float32 weights)
    cdef bint p16_ok = (rnd_t is RoundNone and real_t is float and kpp != NULL and vpp != NULL
                        and o.round_p == 1 and lds == BC and _paired_weights_allowed
                        and (o.vt16 != NULL or (vbase != NULL and o.ktable == NULL)))
    # (o.vt16) V's bf16 rows, for what the tiles leave
    cdef const unsigned short* vtrow16 = o.vt16 + row_offset(&sh.lv, kvh, 0) if o.vt16 != NULL else NULL
    cdef bint p16 = False
    cdef bint slabbed = False
    # (fc_uarch.h fc_qk_fused_max) the tile's scores came with their rows' maxima in rmax, rows
    # from the slab's first
    cdef bint fused = False, fuse_ok
    cdef real_t rmax[BR_FLASH * NL]
    cdef unsigned short* P16 = <unsigned short*>Pp
    fc_amx_hold()   # (the tile kernels below configure the tiles once for the task)
    for t in range(ntiles):
        j0 = t * BC
        if j0 >= kend:
            break
        nc = kend - j0
        if nc > BC:
            nc = BC
        cls = tile_class(ifirst, ilast, j0, j0 + nc - 1, o)   # (positions shift inside: admissible_range)
        if cls == 0:
            continue
        # a key tile the boolean mask masks whole is skipped like a causal one; one it masks
        # nowhere takes the unmasked path
        tmask = arow0 != NULL
        mtile = NULL
        if mrow0 != NULL:
            mcls = mask_tile_class(mrow0 + j0, mstep, nr, nc)
            if mcls == 0:
                continue
            if mcls == 1:
                tmask = True
                mtile = mrow0 + j0
        # Tiles with nothing but a positive scale take a fused path: the row max of the raw dots
        # gives the max of the scores (rounding, to f32 or to T, is monotonic), then one pass
        # computes exp(scale * x - m), stores it and sums it.  Same math, two passes instead of
        # four.  A causal diagonal tile is such a tile too: row r attends the prefix j < qpos + 1
        # of it, and no row attends past the last row's prefix, so for f32/f64 neither dots nor
        # weights are computed there (they would be masked to p = 0).  Math in T keeps those
        # columns, as the emulation does within a tile: their p = 0 enter O's rounded sums,
        # where R(-0 + R(0 * v)) can be +0.
        plain = (not tmask and cap == 0 and slopes == NULL and scale > 0
                 and (cls == 2 or (o.causal and o.wl < 0 and o.wr < 0)))
        if rnd_t is RoundNone and plain and cls == 1 and ilast + o.shift + 1 - j0 < nc:
            nc = ilast + o.shift + 1 - j0
        p16 = p16_ok and fc_pv_paired_whole(nr4, nc, D)
        slabbed = False
        fused = False
        fuse_ok = (rnd_t is RoundNone and plain and fc_qk_fused_max
                   and (fc_qk_max_whole_f32(nc) if real_t is float else fc_qk_max_whole_f64(nc)))
        if lds != BC:   # a decode step: this tile's dots are in S already, or the run starts here
            if j0 >= wend:
                wbase = j0
                nw = kend - j0 if kend - j0 < lds else lds
                wend = j0 + nw
                if krow16 != NULL:
                    key_rows16(o, j0, nw, krow16, sh.lk.ss, rows16)
                    if rnd_t is RoundNone and real_t is float:
                        if qk16:
                            fc_qk_heads_dpbf16(Qp, D2, nh, rph, D, rows16, nw, nw, S, lds)
                        else:
                            fc_rowdots_heads_h16(Qs, nh, rph, D, rows16, nw, nw, S, lds, o.is_f16)
                    key_rows16(o, j0, nw, vrow16, ldv, rows16)   # (V's rows for P V from here on)
                else:
                    key_rows(o, j0, nw, krow0, sh.lk.ss, <const real_t**>rows)
                    if real_t is float:
                        fc_rowdots_heads_f32(Qs, nh, rph, D, <float**>rows, nw, nw, S, lds)
                    else:
                        fc_rowdots_heads_f64(Qs, nh, rph, D, <double**>rows, nw, nw, S, lds)
                    key_rows(o, j0, nw, vbase, ldv, <const real_t**>rows)
            toff = j0 - wbase
        elif kpp != NULL:
            if pair_tiles:
                # this tile's K pairs from its rows and V's rows asked for, as k_tiles' K^T below
                # (spread16: V's rows during the scores, the next K rows during P V)
                key_rows16(o, j0, nc, kprow16, sh.lk.ss, rows16)
                if kpf != j0:
                    fc_prefetch_keys(<void**>rows16, nc, D * sizeof(unsigned short))
                fc_pack_k_pairs_b16(rows16, nc, D, <unsigned int*>kpp)
                kpf = j0 + BC
                npf = kend - kpf if kend - kpf < BC else BC
                if spread16:
                    key_rows16(o, kpf, npf, kprow16, sh.lk.ss, <const unsigned short**>pf_rows)
                else:
                    key_rows16(o, kpf, npf, kprow16, sh.lk.ss, rows16)
                    if npf > 0:
                        fc_prefetch_keys(<void**>rows16, npf, D * sizeof(unsigned short))
                key_rows16(o, j0, nc, vprow16, ldv, rows16)
                if not spread16:
                    fc_prefetch_keys(<void**>rows16, nc, D * sizeof(unsigned short))
            if rnd_t is RoundNone and real_t is float:
                if spread16:
                    fc_pf_init(&pfs, <void**>rows16, nc, D * sizeof(unsigned short))
                    fc_qk_dpbf16_pf(Qp, nr4, D2, kpp, S, BC, nc, &pfs)
                    fc_pf_rest(&pfs)
                else:
                    fc_qk_dpbf16(Qp, nr4, D2, kpp if pair_tiles else kpp + ((kvh - kv0) * ntiles + t) * D2 * BC,
                                 S, BC, nc)
        elif krow16 != NULL:
            key_rows16(o, j0, nc, krow16, sh.lk.ss, rows16)
            if rnd_t is RoundNone and real_t is float:
                fc_rowdots_heads_h16(Qs, 1, nr4, D, rows16, nc, nc, S, BC, o.is_f16)
        elif krow0 != NULL:
            key_rows(o, j0, nc, krow0, sh.lk.ss, <const real_t**>rows)
            if real_t is float:
                fc_rowdots_heads_f32(Qs, 1, nr4, D, <float**>rows, nc, nc, S, BC)
            else:
                fc_rowdots_heads_f64(Qs, 1, nr4, D, <double**>rows, nc, nc, S, BC)
        else:
            if ktile != NULL:
                # this tile's K^T from its rows, whose blocks lie in any order (the hardware
                # prefetcher stops at each): asked for into L2 one tile ahead, so that packing
                # reads them there while the next tile's arrive.  The same packed values as
                # pack_heads' for keys < nc, the only dots the tile uses.
                key_rows(o, j0, nc, ktp + row_offset(&sh.lk, kvh, 0), sh.lk.ss, <const real_t**>rows)
                if kpf != j0:   # (the first tile visited: nothing asked for it yet)
                    fc_prefetch_keys(<void**>rows, nc, D * sizeof(real_t))
                pack_kt(rows, nc, D, ktile)
                kpf = j0 + BC
                npf = kend - kpf if kend - kpf < BC else BC
                if not spread:
                    key_rows(o, kpf, npf, ktp + row_offset(&sh.lk, kvh, 0), sh.lk.ss, <const real_t**>rows)
                    if npf > 0:
                        fc_prefetch_keys(<void**>rows, npf, D * sizeof(real_t))
            # V's rows of a paged pool asked into L2 while the dots run, so that P V, reading them
            # through the table, finds them there (its own prefetch runs only FC_PREFETCH keys ahead)
            npr = 0
            if (o.ktable != NULL or spread) and vbase != NULL:
                key_rows(o, j0, nc, vbase, ldv, <const real_t**>pf_rows)
                npr = nc
                if not spread:
                    fc_prefetch_keys(pf_rows, nc, D * sizeof(real_t))
            if rnd_t is RoundNone and spread:   # V's rows during the scores, the next K rows during P V
                fc_pf_init(&pfs, pf_rows, npr, D * sizeof(real_t))
                qk_tile_pf(Qs, nr4, D, ktile, S, BC, nc, &pfs)
                fc_pf_rest(&pfs)
                key_rows(o, kpf, npf, ktp + row_offset(&sh.lk, kvh, 0), sh.lk.ss, <const real_t**>pf_rows)
            elif rnd_t is RoundNone and ktile == NULL and fc_qk_slab > 0:
                slabbed = True   # (the scores slab by slab in the rows' loop: fc_uarch.h fc_qk_slab)
                fused = fuse_ok
            elif fuse_ok:
                fused = True
                qk_tile_max(Qs, nr4, D, ktile if ktile != NULL else kth + t * D * BC, S, BC, nc, rmax)
            else:
                qk_tile(tag, Qs, nr4, D, ktile if ktile != NULL else kth + t * D * BC, S, BC, nc)
        for r in range(nr):
            if slabbed and r % fc_qk_slab == 0:
                if fused:
                    qk_tile_max(Qs + r * D, nr4 - r if nr4 - r < fc_qk_slab else fc_qk_slab, D,
                                kth + t * D * BC, S + r * BC, BC, nc, rmax)
                else:
                    qk_tile(tag, Qs + r * D, nr4 - r if nr4 - r < fc_qk_slab else fc_qk_slab, D,
                            kth + t * D * BC, S + r * BC, BC, nc)
            srow = S + r * lds + toff
            nrow = nc
            if plain and cls == 1:
                nrow = rp[r] + o.shift + 1 - j0
                nrow = 0 if nrow < 0 else (nc if nrow > nc else nrow)
            if fused and nrow == nc:   # (the max kept as the row's scores were stored)
                mt = R(tag, scale * qk_tile_row_max(rmax, r % fc_qk_slab if slabbed else r, srow, nc))
            elif plain:
                mt = R(tag, scale * row_max(srow, nrow)) if nrow > 0 else -INFINITY
            else:
                slope = slopes[rh[r]] if slopes != NULL else 0
                transform_row(tag, srow, nc, j0, rp[r], scale, cap, slope, slopes != NULL, o, cls == 1, NULL)
                if tmask:
                    apply_masks(tag, srow, nc, mtile + r * mstep if mtile != NULL else NULL,
                                arow0 + r * astep + j0 if arow0 != NULL else NULL)
                mt = row_max(srow, nc)
            mn = mt if (mt > m[r] or mt != mt) else m[r]
            live[r] = False
            mnew[r] = m[r]
            if mn == -INFINITY or nrow == 0:  # nothing attended yet, or nothing in this tile
                zero(srow, nc)
                if p16:
                    memset(P16 + r * BC, 0, nc * sizeof(unsigned short))
                if rnd_t is not RoundNone or defer:  # defined partials for the rows' sums (unused)
                    zero(lanes + r * NL, NL)
                continue
            # (a max that stayed put: exp(0) is 1 exactly; a row's first scores: exp(-inf) is 0;
            # so no scalar exp on most rows; float32 compute takes them after the rows)
            if not defer:
                alpha = 1 if mn == m[r] else (0 if m[r] == -INFINITY and mn > m[r] else EXP(tag, R(tag, m[r] - mn)))
            # scale 1 is exact (transformed rows: nrow == nc)
            if rnd_t is not RoundNone:  # l[r] after the rows (below)
                exp_scaled_lanes(tag, srow, nrow, scale if plain else 1, mn, lanes + r * NL)
                alphas[r] = alpha
                live[r] = True
            else:
                # (float32: vector exp in C, fc_exp.h, its lane partials summed after the rows)
                if real_t is float and p16:   # (the weights in bf16 pairs, for the tiles)
                    fc_exp_lanes_bf16p(srow, nrow, scale if plain else 1, mn, P16 + r * BC, not plain, lanes + r * NL)
                    memset(P16 + r * BC + nrow, 0, (nc - nrow) * sizeof(unsigned short))
                elif real_t is float:
                    # (round_p: the weights stored rounded to T for P V, their sum unrounded)
                    fc_exp_lanes_rp_f32(srow, nrow, scale if plain else 1, mn, rp_exp, not plain, lanes + r * NL)
                else:
                    li = exp_scaled_sum(tag, srow, nrow, scale if plain else 1, mn)
                if defer:
                    mnew[r] = mn
                    live[r] = True
                else:
                    l[r] = R(tag, R(tag, l[r] * alpha) + li)
            zero(srow + nrow, nc - nrow)
            if defer:
                continue
            if alpha != 1:
                scale_row(tag, O + r * D, D, alpha)
            m[r] = mn
        if rnd_t is RoundNone and real_t is float:
            fc_sum16_rows(lanes, nr, totals)
            fc_rescale_factors_f32(m, mnew, nr, alphas)
            for r in range(nr):
                if live[r]:
                    l[r] = R(tag, R(tag, l[r] * alphas[r]) + totals[r])
                    if alphas[r] != 1:
                        scale_row(tag, O + r * D, D, alphas[r])
                    m[r] = mnew[r]
        if rnd_t is not RoundNone:
            lane_totals(tag, lanes, nr, totals)
            for r in range(nr):
                if live[r]:
                    l[r] = R(tag, R(tag, l[r] * alphas[r]) + totals[r])
        for r in range(nr, nr4):
            zero(S + r * lds + toff, nc)
            if p16:
                memset(P16 + r * BC, 0, nc * sizeof(unsigned short))
        if lds != BC:   # V's rows of the run, from this tile's (prefetched up to the run's end)
            if rnd_t is RoundNone and real_t is float:
                if pv16:   # (round_p's weights: V's pairs on vdpbf16ps)
                    fc_pv_heads_dpbf16(S + toff, lds, nh, rph, nc, wend - j0, rows16 + toff, D, O, D, Pp)
                elif vrow16 != NULL:
                    fc_pv_heads_h16(S + toff, lds, nh, rph, nc, wend - j0, rows16 + toff, D, O, D, o.is_f16)
                else:
                    fc_pv_heads_f32(S + toff, lds, nh, rph, nc, wend - j0, <float**>rows + toff, D, O, D)
            elif rnd_t is RoundNone:
                fc_pv_heads_f64(S + toff, lds, nh, rph, nc, wend - j0, <double**>rows + toff, D, O, D)
            continue
        if vrow16 != NULL:
            key_rows16(o, j0, nc, vrow16, ldv, rows16)
            if rnd_t is RoundNone and real_t is float:
                if pv16:
                    fc_pv_heads_dpbf16(S, BC, 1, nr4, nc, nc, rows16, D, O, D, Pp)
                else:
                    fc_pv_heads_h16(S, BC, 1, nr4, nc, nc, rows16, D, O, D, o.is_f16)
            continue
        if vtrow16 != NULL:   # (the tiles on V's pairs, and its bf16 rows at their edges)
            if rnd_t is RoundNone and real_t is float and o.f16s:   # (P's and V's split words)
                key_rows16(o, j0, nc, vtrow16, ldv, rows16)
                fc_split_p_f16(S, BC, nr4, nc, Pp, BC, BR_FLASH * BC)
                fc_pv_f16s(S, BC, Pp, BC, BR_FLASH * BC, nr4, nc, vpp + ((kvh - kv0) * ntiles + t) * BC * D, rows16,
                           NULL, D, O, D)
            elif rnd_t is RoundNone and real_t is float:
                vtile = vpp + ((kvh - kv0) * ntiles + t) * (BC // 2) * D
                if p16:
                    fc_pv_bf16_paired(Pp, BC // 2, nr4, nc, vtile, D, O, D)
                else:   # (round_p: S holds the weights rounded already, rp_exp)
                    key_rows16(o, j0, nc, vtrow16, ldv, rows16)
                    fc_pv_bf16v16(S, BC, nr4, nc, rows16, D, O, D, vtile, 1 if o.round_p else 3)
            continue
        if vbase == NULL:   # (only V's bf16 pairs are at hand: the round_p product on them)
            if rnd_t is RoundNone and real_t is float:
                if pair_tiles:   # (rows16 holds this tile's V rows, asked for before or during the dots)
                    fc_pack_v_pairs_b16(rows16, nc, D, <unsigned int*>vpp)
                if spread16:
                    fc_pf_init(&pfs, pf_rows, npf, D * sizeof(unsigned short))
                    fc_pv_dpbf16_pf(S, BC, nr4, nc, vpp, D, O, D, Pp, rp_exp != o.round_p, &pfs)
                    fc_pf_rest(&pfs)
                else:
                    fc_pv_dpbf16_vec(S, BC, nr4, nc,
                                     vpp if pair_tiles else vpp + ((kvh - kv0) * ntiles + t) * (BC // 2) * D,
                                     D, O, D, Pp, rp_exp != o.round_p)
            continue
        key_rows(o, j0, nc, vbase, ldv, <const real_t**>rows)
        if rnd_t is RoundNone and spread and (o.ktable != NULL or kpp == NULL):   # (the next K rows as it goes)
            fc_pf_init(&pfs, pf_rows, npf, D * sizeof(real_t))
            pv_accum_pf(S, BC, nr4, nc, rows, D, O, D, &pfs)
            fc_pf_rest(&pfs)
        elif o.ktable != NULL:   # a paged pool's rows: by their pointers
            pv_accum(tag, S, BC, nr4, nc, rows, D, O, D)
        elif kpp != NULL:  # bf16 V under float32 compute: on the tiles too where the scores are
            if rnd_t is RoundNone and real_t is float:
                vtile = vpp + ((kvh - kv0) * ntiles + t) * (BC // 2) * D if vpp != NULL else NULL
                if p16:   # (Pp holds the weights paired)
                    fc_pv_bf16_paired(Pp, BC // 2, nr4, nc, vtile, D, O, D)
                elif o.round_p:   # (S holds the weights rounded already)
                    pv_bf16_rounded(S, BC, nr4, nc, vbase + j0 * ldv, ldv, rows, D, O, D, vtile, Pp, False)
                else:
                    fc_pv_bf16v(S, BC, nr4, nc, vbase + j0 * ldv, ldv, rows, D, O, D, vtile, 3)
        else:   # (round_p without AVX512-BF16, or f16: the rounded weights on the float32 loops)
            pv_accum_contig(tag, S, BC, nr4, nc, vbase + j0 * ldv, ldv, rows, D, O, D)
    fc_amx_unhold()
    for r in range(nr):
        # (out16: the row in Q's buffer, free now, then rounded to T where it belongs)
        orow = Qs if o.out16 != NULL else out + row_offset(&sh.lo, b * sh.Hq + rh[r], rp[r])
        li = l[r]
        for d in range(D):
            orow[d] = R(tag, O[r * D + d] / li) if li != 0 else 0
        if real_t is float and o.out16 != NULL:
            fc_narrow_half(<float*>orow, o.out16 + row_offset(&sh.lo, b * sh.Hq + rh[r], rp[r]), D, o.is_f16)
        if o.lse != NULL:   # log of the row's softmax denominator: sum exp(s - m) = l, so m + log l
            o.lse[(b * sh.Hq + rh[r]) * o.lse_ld + rp[r]] = (
                <float>(<double>m[r] + log(<double>li)) if li > 0 else INFINITY)


cdef void flash_forward_core(rnd_t tag, Py_ssize_t kv0, Py_ssize_t nkv, real_t* q, real_t* ktp,
                             const unsigned int* kpp, const unsigned int* vpp, real_t* v, real_t* slopes,
                             real_t* out, Shape* sh, AttnOpts* o, real_t* scratch, Py_ssize_t per_thread,
                             int nthreads) noexcept nogil:
    """Every query row served by kv heads [kv0, kv0 + nkv) (of the flattened B * Hkv)."""
    cdef Py_ssize_t ntasks = flash_tasks(sh, nkv)
    cdef Py_ssize_t task
    for task in prange(ntasks, schedule='dynamic', num_threads=nthreads):
        if fc_stopped(o.it):
            continue
        flash_task(tag, task, kv0, q, ktp, kpp, vpp, v, slopes, out, sh, o, scratch + threadid() * per_thread)


cdef void decodes_core(rnd_t tag, Py_ssize_t ntasks, const Py_ssize_t* task_seq, const Py_ssize_t* task_local,
                       real_t** qs, real_t** ks, real_t** vs, real_t** slopes, real_t** outs, Shape* shapes,
                       AttnOpts* opts, real_t* scratch, Py_ssize_t per_thread, int nthreads) noexcept nogil:
    """Many independent decode steps (one query row per head each, attention_varlen's sequences of
    one query) as one task list: task t is task task_local[t] of sequence task_seq[t], whose
    operands, shape and options are qs[s] .. opts[s] (flash_task, with kv0 = 0)."""
    cdef Py_ssize_t t, s
    for t in prange(ntasks, schedule='dynamic', num_threads=nthreads):
        s = task_seq[t]
        if fc_stopped(opts[s].it):
            continue
        flash_task(tag, task_local[t], 0, qs[s], ks[s], NULL, NULL, vs[s], slopes[s], outs[s], &shapes[s], &opts[s],
                   scratch + threadid() * per_thread)


cdef inline void naive_task(rnd_t tag, Py_ssize_t task, Py_ssize_t kv0, real_t* q, real_t* ktp, real_t* v,
                            real_t* slopes, real_t* out, Shape* sh, AttnOpts* o, real_t* buf) noexcept nogil:
    # task -> (kv head kv0 + i, its query head g, query tile); ktp holds the packed K of kv heads from kv0
    cdef Py_ssize_t D = sh.D, Sq = sh.Sq, Sk = sh.Sk
    cdef Py_ssize_t nqt = ceil_div(Sq, BR_NAIVE), ntiles = ceil_div(Sk, BC), Skp = ntiles * BC
    cdef Py_ssize_t G = sh.Hq // sh.Hkv
    cdef Py_ssize_t qt = task % nqt, rest = task // nqt
    cdef Py_ssize_t kvh = kv0 + rest // G
    cdef Py_ssize_t b = kvh // sh.Hkv, hk = kvh % sh.Hkv, h = hk * G + rest % G
    cdef Py_ssize_t i0 = qt * BR_NAIVE, nr, nr4, t, j0, nc, r, jj, d, kend, ka, kb, lo, hi, t0, t1, kofs, n
    cdef real_t* Qs = buf
    cdef real_t* O = Qs + BR_NAIVE * D
    cdef real_t* S = O + BR_NAIVE * D
    cdef real_t* rows[BC]
    cdef real_t* vbase = v + (b * sh.Hkv + hk) * Sk * D
    cdef real_t* kth = ktp + (kvh - kv0) * ntiles * D * BC
    cdef real_t scale = R(tag, <real_t>o.scale)
    cdef real_t cap = R(tag, <real_t>o.softcap)
    cdef real_t slope = slopes[h] if slopes != NULL else 0
    cdef bint masked = o.causal or o.wl >= 0 or o.wr >= 0
    nr = Sq - i0
    if nr > BR_NAIVE:
        nr = BR_NAIVE
    nr4 = (nr + NR - 1) // NR * NR
    kend = o.k_len if o.k_len < Sk else Sk
    copy_rows_padded(q + ((b * sh.Hq + h) * Sq + i0) * D, nr, nr4, D, Qs)
    zero(O, nr4 * D)
    # Only key tiles some row of this task can attend: masked keys have p = 0 exactly, and tiles
    # start at multiples of 128, so the lane order of every sum is the one over the full row.
    admissible_range(i0, o, &ka, &kb)
    admissible_range(i0 + nr - 1, o, &lo, &hi)
    kb = hi
    if kb > ka:
        t0 = ka // BC
        t1 = ceil_div(kb, BC)
        kofs = t0 * BC
        n = (t1 * BC if t1 * BC < kend else kend) - kofs
        for t in range(t0, t1):
            qk_tile(tag, Qs, nr4, D, kth + t * D * BC, S + (t - t0) * BC, Skp, BC)
        for r in range(nr):
            transform_row(tag, S + r * Skp, n, kofs, i0 + r, scale, cap, slope, slopes != NULL, o, masked, NULL)
            softmax_row(tag, S + r * Skp, n, masked)
        for r in range(nr, nr4):
            zero(S + r * Skp, n)
        for t in range(t0, t1):
            j0 = t * BC
            nc = kend - j0
            if nc > BC:
                nc = BC
            for jj in range(nc):
                rows[jj] = vbase + (j0 + jj) * D
            pv_accum_contig(tag, S + (j0 - kofs), Skp, nr4, nc, vbase + j0 * D, D, rows, D, O, D)
    for r in range(nr):
        for d in range(D):
            out[((b * sh.Hq + h) * Sq + i0 + r) * D + d] = O[r * D + d]


cdef void naive_forward_core(rnd_t tag, Py_ssize_t kv0, Py_ssize_t nkv, real_t* q, real_t* ktp, real_t* v,
                             real_t* slopes, real_t* out, Shape* sh, AttnOpts* o, real_t* scratch,
                             Py_ssize_t per_thread, int nthreads) noexcept nogil:
    """Every query row served by kv heads [kv0, kv0 + nkv) (of the flattened B * Hkv)."""
    cdef Py_ssize_t ntasks = nkv * (sh.Hq // sh.Hkv) * ceil_div(sh.Sq, BR_NAIVE)
    cdef Py_ssize_t task
    for task in prange(ntasks, schedule='dynamic', num_threads=nthreads):
        if fc_stopped(o.it):
            continue
        naive_task(tag, task, kv0, q, ktp, v, slopes, out, sh, o, scratch + threadid() * per_thread)


cdef struct PagedShape:
    Py_ssize_t B, Hq, Hkv, Sq, D, block_size, max_blocks, num_blocks
    Py_ssize_t max_keys         # the longest context (< 2**32): the score rows' extent, never the
                                # table's capacity max_blocks * block_size, which may pass 2**63
    Py_ssize_t heads_per_task   # kv heads one task serves together (see paged_split)
    Py_ssize_t rows_per_head    # query rows of each of those heads per task (<= G * Sq)
    fc_interrupt* it            # this call's Ctrl-C state, polled between tasks


cdef inline void paged_split(PagedShape* sh, int nthreads) noexcept nogil:
    """Choose the task shape.  A key's rows for all kv heads are adjacent in the pool, so serving
    several heads per task reads the pool front to back; decode has few query rows per head,
    so up to 64 rows fit one task.  Keep >= 4 tasks per thread for balance.  (Results do not
    depend on the split: each score and output element is computed the same way.)"""
    cdef Py_ssize_t rph = (sh.Hq // sh.Hkv) * sh.Sq, nh
    if rph >= BR_NAIVE:
        sh.heads_per_task = 1
        sh.rows_per_head = BR_NAIVE
        return
    sh.rows_per_head = rph
    nh = 64 // ((rph + NR - 1) // NR * NR)
    if nh > sh.Hkv:
        nh = sh.Hkv
    while nh > 1 and sh.B * ceil_div(sh.Hkv, nh) < 4 * nthreads:
        nh = (nh + 1) // 2
    sh.heads_per_task = nh


cdef inline Py_ssize_t paged_tasks(PagedShape* sh) noexcept nogil:
    return (sh.B * ceil_div(sh.Hkv, sh.heads_per_task)
            * ceil_div((sh.Hq // sh.Hkv) * sh.Sq, sh.rows_per_head))


cdef inline Py_ssize_t paged_rows(PagedShape* sh) noexcept nogil:
    """Query rows a task holds at most: heads_per_task heads of rows_per_head rows, padded to NR."""
    return sh.heads_per_task * ((sh.rows_per_head + NR - 1) // NR * NR)


cdef inline Py_ssize_t paged_scratch(PagedShape* sh, bint widen_rows) noexcept nogil:
    """Per task: Q rows, O rows, K^T, the score rows, and (widen_rows: math in T on a 16-bit
    pool) a tile's keys or values widened (widen_tile)."""
    cdef Py_ssize_t rows = paged_rows(sh)
    return (2 * rows * sh.D + sh.D * BC + rows * ceil_div(sh.max_keys, BC) * BC
            + (sh.heads_per_task * BC * sh.D if widen_rows else 0))


cdef inline void paged_gather(real_t* pool, const unsigned short* pool16, unsigned int* table_b,
                              Py_ssize_t bs, Py_ssize_t Hkv, Py_ssize_t hk0, Py_ssize_t D, Py_ssize_t j0,
                              Py_ssize_t n, real_t** rows, const unsigned short** rows16) noexcept nogil:
    """The pool rows (at kv head hk0) of keys j0 .. j0 + n of one sequence, through its block table
    row, into rows16 when the pool is 16-bit (pool16 not NULL), else into rows."""
    if pool16 != NULL:
        table_rows(table_b, bs, j0, n, <const char*>(pool16 + hk0 * D), Hkv * D * <Py_ssize_t>sizeof(unsigned short),
                   <const char**>rows16)
    else:
        table_rows(table_b, bs, j0, n, <const char*>(pool + hk0 * D), Hkv * D * <Py_ssize_t>sizeof(real_t),
                   <const char**>rows)


cdef inline void widen_tile(const unsigned short** rows16, Py_ssize_t n, Py_ssize_t width, int is_f16,
                            float* W) noexcept nogil:
    """The gathered 16-bit rows (width elements each: every head a task serves) widened into
    W [n][width], exactly.  All heads of a key at once: one pass over each block's contiguous
    bytes, which the hardware prefetchers stream; a head at a time read 2 * D bytes a key's whole
    row apart, and its decode took 10% longer on Zen 4 (software prefetches of the next head's or
    the next tile's rows did not help either way)."""
    cdef Py_ssize_t jj
    for jj in range(n):
        fc_widen_half(rows16[jj], W + jj * width, width, is_f16)


cdef inline void head_rows(real_t** rows, real_t* W, Py_ssize_t hl, Py_ssize_t nh, Py_ssize_t D,
                           Py_ssize_t n, real_t** hrows) noexcept nogil:
    """hrows[j]: key j's row for head hl of the tile, in the work type: in the pool (W NULL), or
    in W [n][nh][D], the tile widened from a 16-bit pool (widen_tile)."""
    cdef Py_ssize_t jj
    for jj in range(n):
        hrows[jj] = rows[jj] + hl * D if W == NULL else W + (jj * nh + hl) * D


cdef inline void paged_task(rnd_t tag, Py_ssize_t task, real_t* q, real_t* kc, real_t* vc,
                            const unsigned short* kc16, const unsigned short* vc16, int is_f16,
                            unsigned int* table, unsigned int* ctx_lens, real_t* slopes, real_t* out,
                            PagedShape* sh, double scale_in, double cap_in, real_t* buf) noexcept nogil:
    """kc16/vc16, when not NULL, are a bf16/f16 pool read in place (kc/vc are then unused): under
    float32 compute widened in registers, under math in T a tile's keys or values at a time into
    W (exact, so the same bits as the loops on a widened pool)."""
    cdef Py_ssize_t D = sh.D, Sq = sh.Sq, bs = sh.block_size, G = sh.Hq // sh.Hkv
    cdef Py_ssize_t Skp = ceil_div(sh.max_keys, BC) * BC
    cdef Py_ssize_t nch = ceil_div(G * Sq, sh.rows_per_head), ngr = ceil_div(sh.Hkv, sh.heads_per_task)
    cdef Py_ssize_t ch = task % nch, gr = (task // nch) % ngr, b = task // (nch * ngr)
    cdef Py_ssize_t hk0 = gr * sh.heads_per_task, nh = sh.Hkv - hk0
    cdef Py_ssize_t r0 = ch * sh.rows_per_head, nr, nr4, r, x, t, j0, nc, na, d, rr, h, hl, qp, kend
    if nh > sh.heads_per_task:
        nh = sh.heads_per_task
    nr = G * Sq - r0
    if nr > sh.rows_per_head:
        nr = sh.rows_per_head
    nr4 = (nr + NR - 1) // NR * NR
    # rows are head-major: row x = hl * nr4 + r is query row r0 + r of kv head hk0 + hl
    cdef real_t* Qs = buf
    cdef real_t* O = Qs + nh * nr4 * D
    cdef real_t* Kt = O + nh * nr4 * D
    cdef real_t* S = Kt + D * BC
    cdef real_t* W = S + paged_rows(sh) * Skp  # as paged_scratch lays it out
    cdef unsigned int* tb = table + b * sh.max_blocks   # this sequence's block table row
    cdef real_t* rows[BC + FC_PAGED_LOOKAHEAD]
    cdef const unsigned short* rows16[BC + FC_PAGED_LOOKAHEAD]
    cdef real_t* hrows[BC]
    cdef real_t scale = R(tag, <real_t>scale_in)
    cdef real_t cap = R(tag, <real_t>cap_in)
    cdef AttnOpts o
    kend = ctx_lens[b]
    o.causal = 1
    o.wl = -1
    o.wr = -1
    o.shift = 0   # the paged rows carry their absolute positions themselves (qp below)
    o.k_len = kend
    o.alibi_abs = 0
    zero(Qs, nh * nr4 * D)
    zero(O, nh * nr4 * D)
    for hl in range(nh):
        for r in range(nr):
            rr = r0 + r
            h = (hk0 + hl) * G + rr // Sq
            qp = rr % Sq
            for d in range(D):
                Qs[(hl * nr4 + r) * D + d] = q[((b * sh.Hq + h) * Sq + qp) * D + d]
    for t in range(ceil_div(kend, BC)):
        j0 = t * BC
        nc = kend - j0
        if nc > BC:
            nc = BC
        na = kend - j0   # the computed rows and those the heads loops prefetch
        if na > nc + FC_PAGED_LOOKAHEAD:
            na = nc + FC_PAGED_LOOKAHEAD
        if rnd_t is RoundNone:  # dot each gathered key row directly (no K^T packing)
            paged_gather(kc, kc16, tb, bs, sh.Hkv, hk0, D, j0, na, rows, rows16)
            if real_t is float:
                if kc16 != NULL:
                    fc_rowdots_heads_h16(Qs, nh, nr4, D, rows16, nc, na, S + j0, Skp, is_f16)
                else:
                    fc_rowdots_heads_f32(Qs, nh, nr4, D, rows, nc, na, S + j0, Skp)
            else:
                fc_rowdots_heads_f64(Qs, nh, nr4, D, rows, nc, na, S + j0, Skp)
        else:
            paged_gather(kc, kc16, tb, bs, sh.Hkv, hk0, D, j0, nc, rows, rows16)
            if real_t is float:
                if kc16 != NULL:
                    widen_tile(rows16, nc, nh * D, is_f16, W)
            for hl in range(nh):
                head_rows(rows, W if kc16 != NULL else NULL, hl, nh, D, nc, hrows)
                pack_kt(hrows, nc, D, Kt)
                qk_tile(tag, Qs + hl * nr4 * D, nr4, D, Kt, S + hl * nr4 * Skp + j0, Skp, nc)
    for hl in range(nh):
        for r in range(nr4):
            x = hl * nr4 + r
            if r >= nr:
                zero(S + x * Skp, kend)
                continue
            rr = r0 + r
            h = (hk0 + hl) * G + rr // Sq
            # query slot qp sits at absolute position saturating_sub(ctx, Sq) + qp
            qp = (kend - Sq if kend > Sq else 0) + rr % Sq
            transform_row(tag, S + x * Skp, kend, 0, qp, scale, cap, slopes[h] if slopes != NULL else 0,
                          slopes != NULL, &o, 1, NULL)
            softmax_row(tag, S + x * Skp, kend, True)
    for t in range(ceil_div(kend, BC)):
        j0 = t * BC
        nc = kend - j0
        if nc > BC:
            nc = BC
        na = kend - j0   # the computed rows and those the heads loops prefetch
        if na > nc + FC_PAGED_LOOKAHEAD:
            na = nc + FC_PAGED_LOOKAHEAD
        if rnd_t is RoundNone:
            paged_gather(vc, vc16, tb, bs, sh.Hkv, hk0, D, j0, na, rows, rows16)
            if real_t is float:
                if vc16 != NULL:
                    fc_pv_heads_h16(S + j0, Skp, nh, nr4, nc, na, rows16, D, O, D, is_f16)
                else:
                    fc_pv_heads_f32(S + j0, Skp, nh, nr4, nc, na, rows, D, O, D)
            else:
                fc_pv_heads_f64(S + j0, Skp, nh, nr4, nc, na, rows, D, O, D)
        else:
            paged_gather(vc, vc16, tb, bs, sh.Hkv, hk0, D, j0, nc, rows, rows16)
            if real_t is float:
                if vc16 != NULL:
                    widen_tile(rows16, nc, nh * D, is_f16, W)
            for hl in range(nh):
                head_rows(rows, W if vc16 != NULL else NULL, hl, nh, D, nc, hrows)
                pv_accum(tag, S + hl * nr4 * Skp + j0, Skp, nr4, nc, hrows, D, O + hl * nr4 * D, D)
    for hl in range(nh):
        for r in range(nr):
            rr = r0 + r
            h = (hk0 + hl) * G + rr // Sq
            qp = rr % Sq
            for d in range(D):
                out[((b * sh.Hq + h) * Sq + qp) * D + d] = O[(hl * nr4 + r) * D + d]


cdef void paged_forward_core(rnd_t tag, real_t* q, real_t* kc, real_t* vc,
                             const unsigned short* kc16, const unsigned short* vc16, int is_f16,
                             unsigned int* table, unsigned int* ctx_lens, real_t* slopes, real_t* out,
                             PagedShape* sh, double scale, double cap, real_t* scratch,
                             Py_ssize_t per_thread, int nthreads) noexcept nogil:
    cdef Py_ssize_t ntasks = paged_tasks(sh)
    cdef Py_ssize_t task
    for task in prange(ntasks, schedule='dynamic', num_threads=nthreads):
        if fc_stopped(sh.it):
            continue
        paged_task(tag, task, q, kc, vc, kc16, vc16, is_f16, table, ctx_lens, slopes, out, sh, scale,
                   cap, scratch + threadid() * per_thread)


cdef inline void transpose_pad(real_t* src, Py_ssize_t lds, Py_ssize_t nrows4, Py_ssize_t ncols,
                               Py_ssize_t ncols4, real_t* dst) noexcept nogil:
    """dst[j, r] = src[r, j] for j < ncols; rows ncols..ncols4 of dst are zero."""
    cdef Py_ssize_t r, j
    if real_t is float:  # in register blocks (fc_pack.h)
        fc_transpose_f32(src, lds, nrows4, ncols, dst, nrows4)
    else:
        for j in range(ncols):
            for r in range(nrows4):
                dst[j * nrows4 + r] = src[r * lds + j]
    zero(dst + ncols * nrows4, (ncols4 - ncols) * nrows4)


cdef inline void backward_task(rnd_t tag, Py_ssize_t task, Py_ssize_t kv0, real_t* q, real_t* k, real_t* ktp, real_t* vtp,
                               const unsigned int* kpp, const unsigned int* vpp, const unsigned int* kvp,
                               real_t* dout, real_t* slopes, real_t* dq, real_t* dk, real_t* dv,
                               Shape* sh, AttnOpts* o, real_t* buf) noexcept nogil:
    # kpp/vpp, when not NULL (bf16 inputs under float32 compute), hold K and V as bf16 pairs
    # instead of ktp/vtp: S = Q K^T and dP = dO V^T come from fc_qk_dpbf16, dQ = dS K from
    # fc_pv_bf16v; where those take the tiles, dV and dK do too (fc_tn_bf16t), their accumulators
    # held transposed ([D][Skp]) so that P and dS are read in the tiles' layout.  With round_p
    # (AttnOpts), P and dS are rounded to T before the three products they enter; for bf16 beside
    # vdpbf16ps scores (kvp: K's keys paired per column, as V's for the forward's P V) all five
    # products then run on vdpbf16ps, dV and dK held transposed as on the tiles; on the tiles kvp
    # (the same pairs) serves dQ = dS K's tiles, packed once per kv head.  o.f16s (f16 with
    # round_p on the tiles): kpp/vpp hold K's and V's split words (2D per key) and kvp K's again
    # per key ([BC][D] per tile), and all five products run from split words (fc_f16_tiles.h).
    cdef Py_ssize_t D = sh.D, Sq = sh.Sq, Sk = sh.Sk, G = sh.Hq // sh.Hkv
    cdef Py_ssize_t ntiles = ceil_div(Sk, BC), Skp = ntiles * BC, Sk4 = (Sk + NR - 1) // NR * NR
    cdef Py_ssize_t kvh = kv0 + task
    cdef Py_ssize_t hk = kvh % sh.Hkv, b = kvh // sh.Hkv
    cdef Py_ssize_t g, h, qt, i0, nr, nr4, t, j0, nc, r, j, d, ka, kb, lo, hi, t0, t1, kofs, kend, n, n4
    cdef Py_ssize_t br = o.bwd_rows   # rows per step (_backward carved buf for them)
    cdef real_t* Qs = buf
    cdef real_t* dOs = Qs + br * D
    cdef real_t* dQa = dOs + br * D
    cdef real_t* S = dQa + br * D
    cdef real_t* dP = S + br * Skp
    cdef real_t* Tt = dP + br * Skp
    cdef real_t* Pt = Tt + br * Skp
    cdef real_t* dSt = Pt + br * Skp
    cdef real_t* dKa = dSt + br * Skp
    cdef real_t* dVa = dKa + Skp * D
    # (o.f16s: 2D words per row, Q's and dO's split words, the scores' operands with D2 = 2D)
    cdef Py_ssize_t D2 = 2 * D if o.f16s else (D + 1) // 2
    cdef unsigned int* Qp = <unsigned int*>(dVa + Skp * D)   # br * D2 each: Q and dO as bf16 pairs
    cdef unsigned int* dOp = Qp + br * D2
    cdef real_t* rows[BC]
    cdef real_t* kbase = k + (b * sh.Hkv + hk) * Sk * D
    cdef real_t* kth = ktp + task * ntiles * D * BC
    cdef real_t* vth = vtp + task * ntiles * D * BC
    cdef real_t* srow
    cdef real_t* dprow
    cdef real_t* trow
    cdef real_t scale = R(tag, <real_t>o.scale)
    cdef real_t cap = R(tag, <real_t>o.softcap)
    cdef real_t delta, ds
    cdef const unsigned char* mrow
    cdef const real_t* arow
    cdef bint masked = o.causal or o.wl >= 0 or o.wr >= 0
    cdef bint tiles = kpp != NULL and fc_bf16_on_tiles()
    cdef bint rvec = kvp != NULL and not tiles   # round_p's vdpbf16ps products (D even: _backward)
    cdef int nterms = 1 if o.round_p else 3
    cdef Py_ssize_t R2, nct
    # dK's and dV's accumulators past L2: C += A^T B asks for their rows ahead (fc_uarch.h)
    cdef int tn_pf = fc_tn_ahead >= 0 and 2 * Skp * D * <Py_ssize_t>sizeof(real_t) > fc_tn_ahead
    cdef bint split = False   # (o.f16s: this step's dS split too, every value finite)
    # dK and dV accumulate [key][D], or [D][Skp] (held transposed) on the tiles and under rvec
    cdef bint transposed = tiles or rvec
    cdef Py_ssize_t per_key = 1 if transposed else D, per_col = Skp if transposed else 1
    zero(dKa, Skp * D if transposed else Sk4 * D)
    zero(dVa, Skp * D if transposed else Sk4 * D)
    fc_amx_hold()   # (the tile kernels below configure the tiles once for the task)
    for g in range(G):
        h = hk * G + g
        for qt in range(ceil_div(Sq, br)):
            if fc_stopped(o.it):   # a task is a whole kv head: poll inside it too
                fc_amx_unhold()
                return
            i0 = qt * br
            nr = Sq - i0
            if nr > br:
                nr = br
            nr4 = (nr + NR - 1) // NR * NR
            # keys any row of this tile may attend: [ka, kb), since the admissible interval only
            # moves right as the query moves down; tiles outside it contribute exact zeros
            admissible_range(i0, o, &ka, &kb)
            admissible_range(i0 + nr - 1, o, &lo, &hi)
            kb = hi
            if o.mask != NULL and kb > ka:   # and the keys attn_mask admits for some row of the tile:
                mask_key_range(<const unsigned char*>o.mask + b * o.m_sb + h * o.m_sh + i0 * o.m_si, o.m_si,
                               nr, &ka, &kb)   # a padded tail costs nothing, as in the forward
            if kb <= ka:
                for r in range(nr):
                    for d in range(D):
                        dq[((b * sh.Hq + h) * Sq + i0 + r) * D + d] = 0
                continue
            t0 = ka // BC
            t1 = ceil_div(kb, BC)
            kofs = t0 * BC
            # keys [kofs, kend): the last tile's keys past kb are masked in every row of the step,
            # so the float32/float64 policies leave them out (a causal step's diagonal tile: 5% of
            # the products at Sk = 2048); math in T keeps whole tiles, as the emulation does
            kend = kb if rnd_t is RoundNone else (t1 * BC if t1 * BC < Sk else Sk)
            n = kend - kofs
            n4 = (n + NR - 1) // NR * NR
            copy_rows_padded(q + ((b * sh.Hq + h) * Sq + i0) * D, nr, nr4, D, Qs)
            copy_rows_padded(dout + ((b * sh.Hq + h) * Sq + i0) * D, nr, nr4, D, dOs)
            if kpp != NULL:
                if rnd_t is RoundNone and real_t is float:
                    if o.f16s:
                        fc_split_q_rows_f32(Qs, D, nr4, D, Qp, D2)
                        fc_split_q_rows_f32(dOs, D, nr4, D, dOp, D2)
                    else:
                        fc_pair_rows_bf16(Qs, nr4, D, Qp, D2)
                        fc_pair_rows_bf16(dOs, nr4, D, dOp, D2)
                    for t in range(t0, t1):
                        nct = min(kend - t * BC, BC)
                        fc_qk_dpbf16(Qp, nr4, D2, kpp + (task * ntiles + t) * D2 * BC, S + (t - t0) * BC, Skp, nct)
                        fc_qk_dpbf16(dOp, nr4, D2, vpp + (task * ntiles + t) * D2 * BC, dP + (t - t0) * BC, Skp, nct)
            else:
                for t in range(t0, t1):
                    nct = min(kend - t * BC, BC)
                    qk_tile(tag, Qs, nr4, D, kth + t * D * BC, S + (t - t0) * BC, Skp, nct)
                    qk_tile(tag, dOs, nr4, D, vth + t * D * BC, dP + (t - t0) * BC, Skp, nct)
            for r in range(nr):
                srow = S + r * Skp
                dprow = dP + r * Skp
                trow = Tt + r * Skp
                transform_row(tag, srow, n, kofs, i0 + r, scale, cap, slopes[h] if slopes != NULL else 0,
                              slopes != NULL, o, masked, trow if cap != 0 else NULL)
                if o.mask != NULL or o.bias != NULL:   # attention_masked's: after softcap, as its forward
                    mrow = NULL
                    arow = NULL
                    if o.mask != NULL:
                        mrow = <const unsigned char*>o.mask + b * o.m_sb + h * o.m_sh + (i0 + r) * o.m_si + kofs
                    if o.bias != NULL:
                        arow = <const real_t*>o.bias + b * o.a_sb + h * o.a_sh + (i0 + r) * o.a_si + kofs
                    apply_masks(tag, srow, n, mrow, arow)
                softmax_row(tag, srow, n, masked or o.mask != NULL or o.bias != NULL)
                # dS = P * (dP - sum_j P dP), times 1 - tanh^2(s_pre / c) under softcap
                delta = dot16(tag, srow, dprow, n)
                if o.lse != NULL:   # the lse's gradient: d lse / d s_j = P_j joins dP_j (AttnOpts.lse)
                    delta = R(tag, delta - <real_t>o.lse[(b * sh.Hq + h) * o.lse_ld + i0 + r])
                if not (cap == 0 and ds_row_c(tag, srow, dprow, n, delta)):  # rounded: on vectors (fc_exp.h)
                    for j in range(n):
                        ds = R(tag, srow[j] * R(tag, dprow[j] - delta))
                        if cap != 0:
                            ds = R(tag, ds * R(tag, 1 - R(tag, trow[j] * trow[j])))
                        dprow[j] = ds
                if rnd_t is RoundNone and real_t is float:
                    # the row's P and dS rounded to T before the products they enter, while the
                    # row is in L1 (rvec: as they are paired)
                    if o.round_p and not rvec:
                        fc_round_rows_half(srow, 0, 1, n, o.round_p == 2)
                        fc_round_rows_half(dprow, 0, 1, n, o.round_p == 2)
            for r in range(nr, nr4):
                zero(S + r * Skp, Skp)
                zero(dP + r * Skp, Skp)
            if rnd_t is RoundNone and real_t is float and o.f16s:
                # dS rounded to f16 may overflow to an infinity, which has no split: such a step
                # keeps the float32 loops for dQ and dK (P is within [0, 1], dV's always split)
                split = True
                for r in range(nr):
                    if not fc_f32_all_finite(dP + r * Skp, n):
                        split = False
                        break
            # dQ = scale * dS K
            zero(dQa, nr4 * D)
            for t in range(t0, t1):
                j0 = t * BC
                nc = kend - j0
                if nc > BC:
                    nc = BC
                for j in range(nc):
                    rows[j] = kbase + (j0 + j) * D
                if kpp != NULL:  # bf16 K: on the tiles too where the scores are
                    if rnd_t is RoundNone and real_t is float:
                        if split:   # dS's planes in Pt and dSt (unused under float32 compute)
                            fc_split_p_f16(dP + (j0 - kofs), Skp, nr4, nc, <unsigned int*>Pt, BC, br * BC)
                            fc_pv_f16s(dP + (j0 - kofs), Skp, <unsigned int*>Pt, BC, br * BC, nr4, nc,
                                       kvp + (task * ntiles + t) * BC * D, NULL, rows, D, dQa, D)
                        elif o.f16s:
                            fc_pv_f16s_loops(dP + (j0 - kofs), Skp, 0, nr4, nc, NULL, rows, 0, D, dQa, D)
                        elif rvec:   # (Tt is free once dS is done: it holds dS's pairs)
                            fc_pv_dpbf16_vec(dP + (j0 - kofs), Skp, nr4, nc, kvp + (task * ntiles + t) * (BC // 2) * D,
                                             D, dQa, D, <unsigned int*>Tt, False)
                        else:
                            fc_pv_bf16v(dP + (j0 - kofs), Skp, nr4, nc, kbase + j0 * D, D, rows, D, dQa, D,
                                        kvp + (task * ntiles + t) * (BC // 2) * D if kvp != NULL else NULL, nterms)
                else:
                    pv_accum_contig(tag, dP + (j0 - kofs), Skp, nr4, nc, kbase + j0 * D, D, rows, D, dQa, D)
            for r in range(nr):
                for d in range(D):
                    dq[((b * sh.Hq + h) * Sq + i0 + r) * D + d] = R(tag, scale * dQa[r * D + d])
            # dV += P^T dO and dK += dS^T Q (scaled once at the end), owned by this (b, kv head)
            if rnd_t is RoundNone:  # read P and dS transposed in place (fc_gemm.h)
                for r in range(nr):  # keys n..n4 are padding rows of dK/dV: give them zeros
                    for j in range(n, n4):
                        S[r * Skp + j] = 0
                        dP[r * Skp + j] = 0
                # Qp is free once the scores are done: it holds X's pairs (at most D * br / 2
                # words, within its br * D2)
                if real_t is float and o.f16s:   # (xt: D * min(nr, FC_AMX_TN_ROWS) words in Qp)
                    fc_tn_f16s(S, Skp, nr, n4, dOs, D, D, dVa + kofs, Skp, Qp)
                    if split:
                        fc_tn_f16s(dP, Skp, nr, n4, Qs, D, D, dKa + kofs, Skp, Qp)
                    else:
                        fc_tn_part_f32(dP, Skp, 0, nr, 0, n4, Qs, D, 0, D, dKa + kofs, Skp)
                elif real_t is float and tiles:
                    fc_tn_bf16t(S, Skp, nr, n4, dOs, D, D, dVa + kofs, Skp, Qp, nterms)
                    fc_tn_bf16t(dP, Skp, nr, n4, Qs, D, D, dKa + kofs, Skp, Qp, nterms)
                elif real_t is float and rvec:
                    # dV^T += dO^T P and dK^T += Q^T dS as score products, the query rows paired:
                    # dO^T and Q^T pairs in Qp and dOp (free once the scores are done), each key
                    # tile's P and dS pairs in Pt and dSt (unused under float32 compute)
                    R2 = (nr + 1) // 2
                    fc_pair_rows_t_bf16(dOs, D, nr, D, Qp)
                    fc_pair_rows_t_bf16(Qs, D, nr, D, dOp)
                    for t in range(t0, t1):
                        nct = n - (t - t0) * BC
                        if nct > BC:
                            nct = BC
                        fc_pair_cols_bf16(S + (t - t0) * BC, Skp, nr, nct, <unsigned int*>Pt)
                        fc_pair_cols_bf16(dP + (t - t0) * BC, Skp, nr, nct, <unsigned int*>dSt)
                        fc_qk_dpbf16_part(Qp, 0, D, R2, 0, <unsigned int*>Pt, dVa + t * BC, Skp, 0, BC, 1)
                        fc_qk_dpbf16_part(dOp, 0, D, R2, 0, <unsigned int*>dSt, dKa + t * BC, Skp, 0, BC, 1)
                elif real_t is float:
                    fc_gemm_tn_f32(S, Skp, n4, nr, dOs, D, D, dVa + kofs * D, D, tn_pf)
                    fc_gemm_tn_f32(dP, Skp, n4, nr, Qs, D, D, dKa + kofs * D, D, tn_pf)
                else:
                    fc_gemm_tn_f64(S, Skp, n4, nr, dOs, D, D, dVa + kofs * D, D, tn_pf)
                    fc_gemm_tn_f64(dP, Skp, n4, nr, Qs, D, D, dKa + kofs * D, D, tn_pf)
            else:
                transpose_pad(S, Skp, nr4, n, n4, Pt)
                transpose_pad(dP, Skp, nr4, n, n4, dSt)
                for r in range(nr):
                    rows[r] = dOs + r * D
                pv_accum(tag, Pt, nr4, n4, nr, rows, D, dVa + kofs * D, D)
                for r in range(nr):
                    rows[r] = Qs + r * D
                pv_accum(tag, dSt, nr4, n4, nr, rows, D, dKa + kofs * D, D)
    fc_amx_unhold()
    for j in range(Sk):
        for d in range(D):
            dk[((b * sh.Hkv + hk) * Sk + j) * D + d] = R(tag, scale * dKa[j * per_key + d * per_col])
            dv[((b * sh.Hkv + hk) * Sk + j) * D + d] = dVa[j * per_key + d * per_col]


cdef void backward_core(rnd_t tag, Py_ssize_t kv0, Py_ssize_t nkv, real_t* q, real_t* k, real_t* ktp,
                        real_t* vtp, const unsigned int* kpp, const unsigned int* vpp, const unsigned int* kvp,
                        real_t* dout, real_t* slopes, real_t* dq, real_t* dk, real_t* dv, Shape* sh, AttnOpts* o,
                        real_t* scratch, Py_ssize_t per_thread, int nthreads) noexcept nogil:
    """Gradients for kv heads [kv0, kv0 + nkv): each task owns one (batch, kv head)'s dK/dV."""
    cdef Py_ssize_t task
    for task in prange(nkv, schedule='dynamic', num_threads=nthreads):
        if fc_stopped(o.it):
            continue
        backward_task(tag, task, kv0, q, k, ktp, vtp, kpp, vpp, kvp, dout, slopes, dq, dk, dv, sh, o,
                      scratch + threadid() * per_thread)


cdef inline void backward_task_saved(rnd_t tag, Py_ssize_t task, Py_ssize_t kv0, real_t* q, real_t* k,
                                     real_t* ktp, real_t* vtp, const unsigned int* kpp, const unsigned int* vpp,
                                     const unsigned int* kvp, real_t* dout, real_t* fout,
                                     const float* flse, Py_ssize_t flse_ld, real_t* slopes, real_t* dq,
                                     real_t* dk, real_t* dv, Shape* sh, AttnOpts* o, real_t* buf) noexcept nogil:
    # The backward given the forward's out and lse (float32 compute: _backward), in
    # FlashAttention-2's order: key tiles outer, each tile's dK and dV held in [BC][D] accumulators
    # (in L2) while every query row of the kv head's G heads visits it, instead of a [Sk][D] pair
    # swept from L3 by every query step.  The statistics a step would take from whole rows come
    # from the forward: P = exp(s - lse) and delta = dO . O (minus dlse).  dQ is summed in dq
    # itself, tile after tile in key order, and scaled once at the end: a fixed order, no atomics.
    # kpp/vpp (bf16 inputs: _saved_stats) hold K's and V's bf16 pairs per tile, as backward_task
    # takes them: S and dP from fc_qk_dpbf16, dQ += dS K from fc_pv_bf16v (kvp: K's keys paired,
    # on the tiles), and on the tiles dV and dK from fc_tn_bf16t into accumulators held
    # transposed ([D][BC]).  With round_p, P and dS are rounded to T before those products; on
    # vdpbf16ps without the tiles (rvec, D even: kvp given) all three take backward_task's rvec
    # forms instead, P and dS rounded as they are paired, dV and dK held transposed too.
    cdef Py_ssize_t D = sh.D, Sq = sh.Sq, Sk = sh.Sk, G = sh.Hq // sh.Hkv
    cdef Py_ssize_t ntiles = ceil_div(Sk, BC), ncs
    cdef Py_ssize_t kvh = kv0 + task
    cdef Py_ssize_t hk = kvh % sh.Hkv, b = kvh // sh.Hkv
    cdef Py_ssize_t g, h, qt, i0, nr, nr4, t, j0, nc, n4, r, j, d, x, ka, kb, lo, hi, row
    cdef Py_ssize_t br = o.bwd_rows
    cdef real_t* Qs = buf
    cdef real_t* dOs = Qs + br * D
    cdef real_t* dQa = dOs + br * D
    cdef real_t* S = dQa + br * D
    cdef real_t* dP = S + br * BC
    cdef real_t* Tt = dP + br * BC
    cdef real_t* dKa = Tt + br * BC
    cdef real_t* dVa = dKa + BC * D
    cdef real_t* dl = dVa + BC * D   # delta of each of the task's G * Sq rows
    cdef Py_ssize_t D2 = (D + 1) // 2
    cdef unsigned int* Qp = <unsigned int*>(dl + G * Sq)   # br * D2 each: the step's Q and dO as bf16 pairs
    cdef unsigned int* dOp = Qp + br * D2
    cdef unsigned int* Pt = dOp + br * D2   # (rvec) br/2 * BC words each: a step's P and dS paired by rows
    cdef unsigned int* dSt = Pt + (br // 2) * BC
    cdef bint tiles = kpp != NULL and fc_bf16_on_tiles()
    cdef bint rvec = kvp != NULL and not tiles
    cdef int nterms = 1 if o.round_p else 3
    cdef Py_ssize_t R2
    # dK and dV accumulate [key][D], or [D][BC] (held transposed) on the tiles and under rvec
    cdef bint transposed = tiles or rvec
    cdef Py_ssize_t per_key = 1 if transposed else D, per_col = BC if transposed else 1
    cdef real_t* rows[BC]
    cdef real_t* kbase = k + (b * sh.Hkv + hk) * Sk * D
    cdef real_t* kth = ktp + task * ntiles * D * BC
    cdef real_t* vth = vtp + task * ntiles * D * BC
    cdef real_t* srow
    cdef real_t* dprow
    cdef real_t* trow
    cdef real_t* dqh
    cdef real_t* Qr
    cdef real_t* dOr
    cdef real_t* dQr
    cdef const unsigned char* mrow
    cdef const real_t* arow
    cdef real_t scale = R(tag, <real_t>o.scale)
    cdef real_t cap = R(tag, <real_t>o.softcap)
    cdef real_t delta, ds, m
    cdef bint masked = o.causal or o.wl >= 0 or o.wr >= 0
    cdef bint sparse = masked or o.mask != NULL or o.bias != NULL
    fc_amx_hold()   # (the tile kernels below configure the tiles once for the task)
    for g in range(G):
        h = hk * G + g
        zero(dq + (b * sh.Hq + h) * Sq * D, Sq * D)
        for i0 in range(Sq):   # delta = dO . O (minus the lse's gradient, AttnOpts.lse)
            row = (b * sh.Hq + h) * Sq + i0
            delta = dot16(tag, dout + row * D, fout + row * D, D)
            if o.lse != NULL:
                delta = R(tag, delta - <real_t>o.lse[(b * sh.Hq + h) * o.lse_ld + i0])
            dl[g * Sq + i0] = delta
    for t in range(ntiles):
        j0 = t * BC
        nc = Sk - j0
        if nc > BC:
            nc = BC
        for j in range(nc):
            rows[j] = kbase + (j0 + j) * D
        zero(dKa, BC * D)
        zero(dVa, BC * D)
        for g in range(G):
            h = hk * G + g
            dqh = dq + (b * sh.Hq + h) * Sq * D
            for qt in range(ceil_div(Sq, br)):
                if fc_stopped(o.it):
                    fc_amx_unhold()
                    return
                i0 = qt * br
                nr = Sq - i0
                if nr > br:
                    nr = br
                nr4 = (nr + NR - 1) // NR * NR
                # the step's rows admit keys in [ka, hi) at most (both ends move right with the
                # query): a step that admits none of this tile's keys contributes exact zeros,
                # and its keys from hi on (a causal step's diagonal) are left out, as the
                # recomputing backward leaves them
                admissible_range(i0, o, &ka, &kb)
                admissible_range(i0 + nr - 1, o, &lo, &hi)
                if hi <= j0 or ka >= j0 + nc or hi <= ka:
                    continue
                if o.mask != NULL:   # and the tile's keys attn_mask admits for some row of the step
                    ka = ka if ka > j0 else j0
                    hi = hi if hi < j0 + nc else j0 + nc
                    mask_key_range(<const unsigned char*>o.mask + b * o.m_sb + h * o.m_sh + i0 * o.m_si, o.m_si,
                                   nr, &ka, &hi)
                    if hi <= ka:
                        continue
                # (rounded up to 16 keys: each key's score then comes from the same vector loop
                # whatever the step's rows, as a scalar tail column rounds its dot differently
                # below AVX-512; the keys added are masked in every row, exact zeros)
                ncs = (hi - j0 + 15) // 16 * 16
                if ncs > nc:
                    ncs = nc
                n4 = (ncs + NR - 1) // NR * NR
                row = (b * sh.Hq + h) * Sq + i0
                # a whole step reads its rows where they lie; a last step's are padded to nr4
                Qr = q + row * D
                dOr = dout + row * D
                dQr = dqh + i0 * D
                if nr4 != nr:
                    copy_rows_padded(Qr, nr, nr4, D, Qs)
                    copy_rows_padded(dOr, nr, nr4, D, dOs)
                    copy_rows_padded(dQr, nr, nr4, D, dQa)
                    Qr = Qs
                    dOr = dOs
                    dQr = dQa
                if kpp != NULL:
                    if rnd_t is RoundNone and real_t is float:
                        fc_pair_rows_bf16(Qr, nr4, D, Qp, D2)
                        fc_pair_rows_bf16(dOr, nr4, D, dOp, D2)
                        fc_qk_dpbf16(Qp, nr4, D2, kpp + (task * ntiles + t) * D2 * BC, S, BC, ncs)
                        fc_qk_dpbf16(dOp, nr4, D2, vpp + (task * ntiles + t) * D2 * BC, dP, BC, ncs)
                else:
                    qk_tile(tag, Qr, nr4, D, kth + t * D * BC, S, BC, ncs)
                    qk_tile(tag, dOr, nr4, D, vth + t * D * BC, dP, BC, ncs)
                for r in range(nr):
                    srow = S + r * BC
                    dprow = dP + r * BC
                    trow = Tt + r * BC
                    transform_row(tag, srow, ncs, j0, i0 + r, scale, cap, slopes[h] if slopes != NULL else 0,
                                  slopes != NULL, o, masked, trow if cap != 0 else NULL)
                    if o.mask != NULL or o.bias != NULL:   # attention_masked's: after softcap, as its forward
                        mrow = NULL
                        arow = NULL
                        if o.mask != NULL:
                            mrow = <const unsigned char*>o.mask + b * o.m_sb + h * o.m_sh + (i0 + r) * o.m_si + j0
                        if o.bias != NULL:
                            arow = <const real_t*>o.bias + b * o.a_sb + h * o.a_sh + (i0 + r) * o.a_si + j0
                        apply_masks(tag, srow, ncs, mrow, arow)
                    # P = exp(s - lse): a row with no admissible key has lse = +inf, so P = 0
                    m = <real_t>flse[(b * sh.Hq + h) * flse_ld + i0 + r]
                    if rnd_t is RoundNone and real_t is float:
                        fc_exp_shift_sum16_f32(srow, ncs, m, sparse)
                    else:
                        for j in range(ncs):
                            srow[j] = EXP(tag, R(tag, srow[j] - m))
                    delta = dl[g * Sq + i0 + r]
                    if not (cap == 0 and ds_row_c(tag, srow, dprow, ncs, delta)):
                        for j in range(ncs):
                            ds = R(tag, srow[j] * R(tag, dprow[j] - delta))
                            if cap != 0:
                                ds = R(tag, ds * R(tag, 1 - R(tag, trow[j] * trow[j])))
                            dprow[j] = ds
                    if rnd_t is RoundNone and real_t is float:
                        if o.round_p and not rvec:   # P and dS rounded to T before the products they enter
                            fc_round_rows_half(srow, 0, 1, ncs, o.round_p == 2)
                            fc_round_rows_half(dprow, 0, 1, ncs, o.round_p == 2)
                    for j in range(ncs, n4):   # keys ncs..n4 are padding rows of dK/dV
                        srow[j] = 0
                        dprow[j] = 0
                for r in range(nr, nr4):
                    zero(S + r * BC, n4)
                    zero(dP + r * BC, n4)
                # dQ += dS K over this tile's keys, continuing each row's sum in dq
                if kpp != NULL:
                    if rnd_t is RoundNone and real_t is float:
                        if rvec:   # (Tt is free once dS is done: it holds dS's pairs)
                            fc_pv_dpbf16_vec(dP, BC, nr4, ncs, kvp + (task * ntiles + t) * (BC // 2) * D, D, dQr, D,
                                             <unsigned int*>Tt, False)
                        else:
                            fc_pv_bf16v(dP, BC, nr4, ncs, kbase + j0 * D, D, rows, D, dQr, D,
                                        kvp + (task * ntiles + t) * (BC // 2) * D if kvp != NULL else NULL, nterms)
                else:
                    pv_accum_contig(tag, dP, BC, nr4, ncs, kbase + j0 * D, D, rows, D, dQr, D)
                if dQr == dQa:
                    for x in range(nr * D):
                        dqh[i0 * D + x] = dQa[x]
                # dV += P^T dO and dK += dS^T Q over the step's rows (Qp is free: X's pairs)
                if rnd_t is RoundNone and real_t is float and tiles:
                    fc_tn_bf16t(S, BC, nr, n4, dOr, D, D, dVa, BC, Qp, nterms)
                    fc_tn_bf16t(dP, BC, nr, n4, Qr, D, D, dKa, BC, Qp, nterms)
                elif rnd_t is RoundNone and real_t is float and rvec:
                    # dV^T += dO^T P and dK^T += Q^T dS as score products over the step's rows in
                    # pairs: dO^T's and Q^T's pairs in Qp and dOp, P's and dS's in Pt and dSt
                    R2 = (nr + 1) // 2
                    fc_pair_rows_t_bf16(dOr, D, nr, D, Qp)
                    fc_pair_rows_t_bf16(Qr, D, nr, D, dOp)
                    fc_pair_cols_bf16(S, BC, nr, ncs, Pt)
                    fc_pair_cols_bf16(dP, BC, nr, ncs, dSt)
                    fc_qk_dpbf16_part(Qp, 0, D, R2, 0, Pt, dVa, BC, 0, ncs, 1)
                    fc_qk_dpbf16_part(dOp, 0, D, R2, 0, dSt, dKa, BC, 0, ncs, 1)
                elif rnd_t is RoundNone and real_t is float:
                    fc_gemm_tn_f32(S, BC, n4, nr, dOr, D, D, dVa, D, 0)
                    fc_gemm_tn_f32(dP, BC, n4, nr, Qr, D, D, dKa, D, 0)
                elif rnd_t is RoundNone:
                    fc_gemm_tn_f64(S, BC, n4, nr, dOr, D, D, dVa, D, 0)
                    fc_gemm_tn_f64(dP, BC, n4, nr, Qr, D, D, dKa, D, 0)
        for j in range(nc):
            for d in range(D):
                dk[((b * sh.Hkv + hk) * Sk + j0 + j) * D + d] = R(tag, scale * dKa[j * per_key + d * per_col])
                dv[((b * sh.Hkv + hk) * Sk + j0 + j) * D + d] = dVa[j * per_key + d * per_col]
    fc_amx_unhold()
    for g in range(G):
        dqh = dq + (b * sh.Hq + hk * G + g) * Sq * D
        for x in range(Sq * D):
            dqh[x] = R(tag, scale * dqh[x])


cdef void backward_core_saved(rnd_t tag, Py_ssize_t kv0, Py_ssize_t nkv, real_t* q, real_t* k, real_t* ktp,
                              real_t* vtp, const unsigned int* kpp, const unsigned int* vpp,
                              const unsigned int* kvp, real_t* dout, real_t* fout, const float* flse, Py_ssize_t flse_ld,
                              real_t* slopes, real_t* dq, real_t* dk, real_t* dv, Shape* sh, AttnOpts* o,
                              real_t* scratch, Py_ssize_t per_thread, int nthreads) noexcept nogil:
    """backward_core given the forward's out and lse (backward_task_saved): one task per (batch,
    kv head), which owns its dK/dV and its query heads' dQ."""
    cdef Py_ssize_t task
    for task in prange(nkv, schedule='dynamic', num_threads=nthreads):
        if fc_stopped(o.it):
            continue
        backward_task_saved(tag, task, kv0, q, k, ktp, vtp, kpp, vpp, kvp, dout, fout, flse, flse_ld, slopes, dq, dk,
                            dv, sh, o, scratch + threadid() * per_thread)
