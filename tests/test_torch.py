"""fuel_cy.torch: the kernels as torch.library custom ops on CPU tensors.  Gradients against
finite differences (float64) and SDPA's autograd (float32), torch.compile(fullgraph=True) with a
backward, a small training run against SDPA's, zero-copy conversion, and the errors."""
from __future__ import annotations

import inspect
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from functorch.compile import make_boxed_func
from torch._dynamo.backends.common import aot_autograd

import fuel_cy
import fuel_cy.torch as ft


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    # Every problem here is tiny, so a parallel region's barrier dominates: on a shared 2-core
    # machine under load it cost milliseconds per call and made this file 10x slower.  Results do
    # not depend on the thread count.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    fuel_cy.set_num_threads(1)
    yield
    torch.set_num_threads(before)
    fuel_cy.set_num_threads(0)


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """Relative error in norm: ||a - b|| / ||b||, in float64."""
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).norm() / b.norm())


def allowed(sq: int, sk: int, causal=False, window_size_left=None, window_size_right=None, **_) -> torch.Tensor:
    """site/semantics.md's mask as SDPA's boolean attn_mask (True = key j takes part for query i)."""
    i, j = torch.arange(sq)[:, None], torch.arange(sk)[None, :]
    ok = torch.ones(sq, sk, dtype=torch.bool)
    if causal:
        ok &= j <= i  # top-left aligned, also for Sq != Sk
    if window_size_left is not None:
        ok &= j + window_size_left >= i
    if window_size_right is not None:
        ok &= j <= i + window_size_right
    return ok


def sdpa(q, k, v, **params):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed(q.shape[2], k.shape[2], **params),
                                          enable_gqa=True)


def qkv(b, hq, hkv, sq, sk, d, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=g, dtype=torch.float64).to(dtype).requires_grad_()
            for shape in ((b, hq, sq, d), (b, hkv, sk, d), (b, hkv, sk, d))]


# ---- the API mirrors the numpy one ------------------------------------------------------------

def test_every_kernel_is_a_custom_op_with_the_numpy_signature():
    assert ft.__all__ == [*fuel_cy.registry, "scaled_dot_product_attention"]
    for name in fuel_cy.registry:
        public = getattr(ft, name)
        assert list(inspect.signature(public).parameters) == list(inspect.signature(getattr(fuel_cy, name)).parameters)
        assert public.__name__ == name and f"torch.ops.fuel_cy.{name}" in public.__doc__
        assert hasattr(torch.ops.fuel_cy, name)


def test_import_fuel_cy_does_not_import_torch():
    code = "import sys, fuel_cy; fuel_cy.attention_flash; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


# opcheck: schema, fake implementation, autograd registration and AOT dispatch agree with the op
def _opcheck_cases():
    x, kv = torch.randn(1, 2, 5, 4), torch.randn(1, 1, 7, 4)
    table, lens = torch.tensor([[0, 1, 2], [3, 4, 0]], dtype=torch.int32), torch.tensor([9, 5], dtype=torch.int32)
    pool = torch.randn(5, 4, 1, 4)
    for dtype, suffix in ((torch.float32, ""), (torch.bfloat16, "_mixed")):
        q, k = x.to(dtype), kv.to(dtype)
        grads = [t.clone().requires_grad_() for t in (q, k, k)]
        yield f"attention_flash{suffix}", tuple(grads), {"causal": True, "k_len": 6}
        yield f"attention_flash_backward{suffix}", (q, k, k, q), {"softcap": 3.0}
        yield f"attention_paged{suffix or '_naive'}", (torch.randn(2, 2, 1, 4).to(dtype), pool.to(dtype),
                                                      pool.to(dtype), table, lens), {}
    yield "attention_naive", (x, kv, kv), {"window_size_left": 1}
    cu_q, cu_k = torch.tensor([0, 4, 9], dtype=torch.int32), torch.tensor([0, 7, 12], dtype=torch.int32)
    vq, vk = torch.randn(9, 2, 4), torch.randn(12, 1, 4)
    yield "attention_varlen", (vq.clone().requires_grad_(), vk.clone().requires_grad_(), vk.clone().requires_grad_(),
                               cu_q, cu_k), {"causal": True, "return_lse": True}
    yield "attention_varlen_backward", (vq, vk, vk, vq, cu_q, cu_k, None, None, torch.randn(2, 9)), {"causal": True}
    mq, mk, mask = torch.randn(2, 2, 5, 4), torch.randn(2, 1, 7, 4), torch.rand(2, 1, 1, 7) < 0.6
    yield "attention_masked", (mq.clone().requires_grad_(), mk.clone().requires_grad_(), mk.clone().requires_grad_(),
                               mask, torch.randn(1, 2, 5, 7)), {"softcap": 4.0}
    yield "attention_masked_backward", (mq, mk, mk, mq, mask, torch.randn(1, 2, 5, 7)), {"softcap": 4.0}


OPCHECK = {name: (args, kwargs) for name, args, kwargs in _opcheck_cases()}


def test_opcheck_covers_every_kernel():
    assert sorted(OPCHECK) == sorted(fuel_cy.registry)


@pytest.mark.parametrize("name", list(OPCHECK))
def test_opcheck(name):
    args, kwargs = OPCHECK[name]
    torch.library.opcheck(getattr(torch.ops.fuel_cy, name).default, args, kwargs)


# ---- zero-copy conversion ---------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_conversion_is_zero_copy_both_ways(dtype):
    t = torch.randn(2, 3, 4, 8).to(dtype)
    a = ft._as_numpy("attention_flash", "q", t, ("F32", "F64", "BF16", "F16"))
    assert a.ctypes.data == t.data_ptr() and a.shape == tuple(t.shape)
    assert np.array_equal(np.asarray(a, np.float64), t.double().numpy())
    back = ft._as_tensor(a)
    assert back.data_ptr() == a.ctypes.data and back.dtype == dtype and torch.equal(back, t)
    if dtype == torch.bfloat16:
        assert a.dtype == ml_dtypes.bfloat16


def test_offset_tensors_are_not_copied_and_strided_ones_are():
    q = torch.randn(3, 2, 5, 4)[1:]  # storage_offset > 0, contiguous
    assert q.storage_offset() > 0
    assert ft._as_numpy("attention_flash", "q", q, ("F32",)).ctypes.data == q.data_ptr()
    kv = torch.randn(2, 1, 4, 6).transpose(2, 3)  # [2, 1, 6, 4], not contiguous
    copied = ft._as_numpy("attention_flash", "k", kv, ("F32",))
    assert copied.ctypes.data != kv.data_ptr() and copied.flags.c_contiguous
    expected = ft.attention_flash(q.clone(), kv.contiguous(), kv.contiguous(), causal=True)
    assert torch.equal(ft.attention_flash(q, kv, kv, causal=True), expected)


def test_outputs_keep_dtype_and_are_contiguous():
    for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
        q, k, v = (t.detach() for t in qkv(1, 2, 1, 3, 5, 8, dtype))
        out = ft.attention_flash(q, k, v)
        assert out.dtype == dtype and out.is_contiguous() and out.shape == q.shape
        expected = fuel_cy.attention_flash(*(ft._as_numpy("attention_flash", "x", t, ()) for t in (q, k, v)))
        assert np.array_equal(ft._as_numpy("attention_flash", "out", out, ()), expected)


# ---- eager calls skip the dispatcher, traced and differentiated ones do not ------------------------

def _dispatched(fn) -> bool:
    """Whether a call went through torch's dispatcher as the op fuel_cy::<kernel> (the profiler
    records every dispatched op; it sets no dispatch mode, so it does not change the path)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    return any(e.name.startswith("fuel_cy::") for e in prof.events())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_an_eager_call_without_gradient_goes_straight_to_the_kernel(dtype):
    q, k, v = (t.detach() for t in qkv(1, 4, 2, 3, 7, 8, dtype))
    name = "attention_flash" if dtype == torch.float32 else "attention_flash_mixed"
    direct = getattr(ft, name)
    op = getattr(torch.ops.fuel_cy, name)
    assert not _dispatched(lambda: direct(q, k, v, causal=True))
    assert not _dispatched(lambda: direct(q=q, k=k, v=v, causal=True))   # inputs by keyword
    assert _dispatched(lambda: op(q, k, v, causal=True))
    # the same kernel either way: the same bits (the mixed op returns its lse too, empty unless asked)
    raw = op(q, k, v, causal=True)
    raw = raw[0] if isinstance(raw, tuple) else raw
    assert torch.equal(direct(q, k, v, causal=True).view(torch.int16 if dtype == torch.bfloat16 else dtype),
                       raw.view(torch.int16 if dtype == torch.bfloat16 else dtype))
    # a tensor that requires grad goes through the op (autograd records it), unless grad is off
    qg = q.clone().requires_grad_()
    assert _dispatched(lambda: direct(qg, k, v))
    with torch.no_grad():
        assert not _dispatched(lambda: direct(qg, k, v))
        assert direct(qg, k, v).grad_fn is None


def test_fake_tensors_still_reach_the_fake_implementation():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q, k = torch.empty(1, 4, 3, 8), torch.empty(1, 2, 7, 8)
        out = ft.attention_flash(q, k, k)
    assert out.shape == (1, 4, 3, 8) and type(out) is not torch.Tensor


# ---- errors -----------------------------------------------------------------------------------

def test_non_cpu_and_non_tensor_inputs_are_rejected_with_kernel_and_input():
    q, k, v = (t.detach() for t in qkv(1, 2, 1, 3, 5, 4))
    meta = torch.empty(1, 1, 5, 4, device="meta")
    with pytest.raises(fuel_cy.InputError, match=r"attention_flash: input 'v': fuel_cy.torch: CPU tensors only: .*meta"):
        ft.attention_flash(q, k, meta)
    with pytest.raises(fuel_cy.InputError, match=r"attention_flash_backward: input 'do_grad'.*meta"):
        ft.attention_flash_backward(q, k, v, do_grad=torch.empty_like(q, device="meta"))
    with pytest.raises(TypeError, match=r"fuel_cy.torch.attention_naive: input 'q' must be a torch.Tensor, "
                                        r"received ndarray \(fuel_cy.attention_naive takes numpy arrays\)"):
        ft.attention_naive(q.numpy(), k, v)
    with pytest.raises(TypeError, match="input 'alibi_slopes' must be a torch.Tensor, received list"):
        ft.attention_flash(q, k, v, [0.5, 0.25])


def test_the_kernels_own_errors_propagate():
    q, k, v = (t.detach() for t in qkv(1, 3, 2, 3, 5, 4))
    with pytest.raises(fuel_cy.InputError, match="divisible"):
        ft.attention_flash(q, k, v)
    q, k, v = (t.detach() for t in qkv(1, 2, 1, 3, 5, 4))
    with pytest.raises(fuel_cy.InputError, match="k_len <= Sk"):
        ft.attention_flash(q, k, v, k_len=6)
    with pytest.raises(fuel_cy.InputError, match="all float inputs share one element type"):
        ft.attention_flash(q, k.double(), v)
    with pytest.raises(fuel_cy.InputError, match=r"dtypes \['BF16', 'F16'\]"):
        ft.attention_flash_mixed(q, k, v)


def test_paged_index_dtypes():
    q, pool = torch.randn(2, 2, 1, 4), torch.randn(5, 4, 1, 4)
    table, lens = torch.tensor([[0, 1, 2], [3, 4, 0]], dtype=torch.int32), torch.tensor([9, 5], dtype=torch.int32)
    out = ft.attention_paged_naive(q, pool, pool, table, lens)
    assert torch.equal(out, ft.attention_paged_naive(q, pool, pool, table.to(torch.uint32), lens.to(torch.uint32)))
    with pytest.raises(fuel_cy.InputError, match=r"input 'context_lens'.*int32 indices stand for U32: a negative value -1"):
        ft.attention_paged_naive(q, pool, pool, table, torch.tensor([9, -1], dtype=torch.int32))
    with pytest.raises(fuel_cy.InputError, match=r"input 'block_table'.*dtypes \['U32'\]: received dtype int64"):
        ft.attention_paged_naive(q, pool, pool, table.long(), lens)


def test_kernels_without_a_gradient_say_so_on_backward():
    q, k, v = qkv(1, 2, 1, 3, 5, 4)
    out = ft.attention_naive(q, k, v)
    with pytest.raises(RuntimeError, match="no autograd formula"):
        out.sum().backward()


# ---- gradients --------------------------------------------------------------------------------

GRAD_CASES = [
    ("causal", {"causal": True}),
    ("causal Sq<Sk", {"causal": True}),
    ("window", {"window_size_left": 2, "window_size_right": 1}),
    ("softcap", {"softcap": 1.5}),
    ("all", {"causal": True, "window_size_left": 3, "softcap": 2.0, "softmax_scale": 0.3}),
    ("k_len", {"causal": True, "k_len": 5}),
]


@pytest.mark.parametrize("case,params", GRAD_CASES, ids=[c[0] for c in GRAD_CASES])
@pytest.mark.parametrize("alibi", [False, True], ids=["", "alibi"])
def test_gradcheck_float64(case, params, alibi):
    sq, sk = (5, 9) if "Sq<Sk" in case else (7, 7)
    q, k, v = qkv(1, 2, 1, sq, sk, 4, torch.float64)  # GQA: two query heads share a kv head
    slopes = torch.tensor([0.5, 0.25], dtype=torch.float64) if alibi else None
    assert torch.autograd.gradcheck(lambda q, k, v: ft.attention_flash(q, k, v, slopes, **params), (q, k, v))


SDPA_CASES = [
    ("plain", (2, 4, 4, 20, 20, 16), {}),
    ("causal gqa", (2, 4, 2, 20, 20, 16), {"causal": True}),
    ("causal Sq<Sk", (1, 4, 2, 12, 40, 16), {"causal": True}),
    ("causal Sq>Sk", (1, 2, 1, 40, 12, 16), {"causal": True}),
    ("window, a key tile edge", (1, 4, 1, 30, 150, 32), {"window_size_left": 100, "window_size_right": 20}),
]


@pytest.mark.parametrize("shape,params", [c[1:] for c in SDPA_CASES], ids=[c[0] for c in SDPA_CASES])
def test_float32_gradients_equal_sdpa_autograd(shape, params):
    ours, theirs = qkv(*shape), qkv(*shape)
    g = torch.randn(shape[0], shape[1], shape[3], shape[5], generator=torch.Generator().manual_seed(1))
    out = ft.attention_flash(*ours, **params)
    expected = sdpa(*theirs, **params)
    assert rel(out, expected) < 1e-5
    out.backward(g)
    expected.backward(g)
    for a, b in zip(ours, theirs):
        assert rel(a.grad, b.grad) < 1e-4


@pytest.mark.parametrize("sq,sk", [(5, 9), (9, 5)])
def test_causal_is_sdpa_is_causal_also_when_sq_differs_from_sk(sq, sk):
    q, k, v = (t.detach() for t in qkv(1, 2, 2, sq, sk, 8))
    assert rel(ft.attention_flash(q, k, v, causal=True), F.scaled_dot_product_attention(q, k, v, is_causal=True)) < 1e-6


def test_k_len_gradient_equals_the_sliced_problem():
    q, k, v = qkv(1, 2, 1, 6, 20, 8)
    qs, ks, vs = (t.detach()[:, :, :n].clone().requires_grad_() for t, n in ((q, 6), (k, 13), (v, 13)))
    g = torch.randn(1, 2, 6, 8)
    ft.attention_flash(q, k, v, causal=True, k_len=13).backward(g)
    ft.attention_flash(qs, ks, vs, causal=True).backward(g)
    assert torch.equal(q.grad, qs.grad)
    assert torch.equal(k.grad[:, :, :13], ks.grad) and not k.grad[:, :, 13:].any()
    assert torch.equal(v.grad[:, :, :13], vs.grad) and not v.grad[:, :, 13:].any()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "f16"])
def test_mixed_forward_and_backward_equal_float32_sdpa_on_the_same_values(dtype):
    ours = qkv(2, 4, 2, 24, 40, 16, dtype)
    theirs = [t.detach().float().requires_grad_() for t in ours]  # the same (T-rounded) values
    g = torch.randn(2, 4, 24, 16, generator=torch.Generator().manual_seed(1)).to(dtype)
    out = ft.attention_flash_mixed(*ours, causal=True, window_size_left=9)
    expected = sdpa(*theirs, causal=True, window_size_left=9)
    assert out.dtype == dtype and rel(out, expected) < 1e-2
    out.backward(g)
    expected.backward(g.float())
    for a, b in zip(ours, theirs):
        assert a.grad.dtype == dtype and rel(a.grad, b.grad) < 1e-2


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "f16"])
def test_mixed_autograd_with_return_lse_hands_the_backward_out_and_lse(dtype):
    """attention_flash_mixed(return_lse=True) under autograd: the backward gets the forward's
    out and lse (the direct call's bits given them) and the lse's gradient as dlse; the
    gradients stay within the bound of float32 SDPA on the same values, through out and lse."""
    ours = qkv(1, 4, 2, 40, 200, 32, dtype)
    theirs = [t.detach().float().requires_grad_() for t in ours]
    gen = torch.Generator().manual_seed(2)
    g, g_lse = torch.randn(1, 4, 40, 32, generator=gen).to(dtype), torch.randn(1, 4, 40, generator=gen)
    out, lse = ft.attention_flash_mixed(*ours, causal=True, round_p=True, return_lse=True)
    got = torch.autograd.grad((out, lse), ours, (g, g_lse))
    def n(t: torch.Tensor) -> np.ndarray:   # the tensor's memory as numpy (bf16 as ml_dtypes')
        t = t.detach()
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16) if t.dtype == torch.bfloat16 else t.numpy()

    want = fuel_cy.attention_flash_backward_mixed(*map(n, ours), n(g), dlse=n(g_lse), out=n(out), lse=n(lse),
                                                  causal=True, round_p=True)
    for a, w in zip(got, want):
        assert a.dtype == dtype and n(a).tobytes() == w.tobytes()
    scale = 1 / 32 ** 0.5
    s = (theirs[0] @ theirs[1].repeat_interleave(2, 1).transpose(-1, -2)) * scale
    s = s.masked_fill(~torch.ones(40, 200, dtype=torch.bool).tril(), -torch.inf)
    ref_out = torch.softmax(s, -1) @ theirs[2].repeat_interleave(2, 1)
    ref_lse = torch.logsumexp(s, -1)
    assert rel(out, ref_out) < 1e-2 and float((lse - ref_lse).detach().abs().max()) < 1e-3
    expected = torch.autograd.grad((ref_out, ref_lse), theirs, (g.float(), g_lse))
    for a, b in zip(got, expected):
        assert rel(a, b) < 2e-2


# ---- paged (forward only) ---------------------------------------------------------------------

def paged_reference(q, pool_k, pool_v, table, lens):
    """Gather each sequence's keys from the pool, then SDPA with the paged kernel's implicit causal
    mask: query slot i of Sq sits at position max(len - Sq, 0) + i."""
    sq, block = q.shape[2], pool_k.shape[1]
    rows = []
    for b, n in enumerate(lens.tolist()):
        pos = torch.arange(n)
        slots = table[b].long()[pos // block], pos % block
        k, v = (p[slots].permute(1, 0, 2)[None] for p in (pool_k, pool_v))  # [1, Hkv, n, D]
        mask = pos[None, :] <= max(n - sq, 0) + torch.arange(sq)[:, None]
        rows.append(F.scaled_dot_product_attention(q[b:b + 1], k, v, attn_mask=mask, enable_gqa=True))
    return torch.cat(rows)


@pytest.mark.parametrize("name,dtype,bound", [("attention_paged_naive", torch.float32, 1e-5),
                                              ("attention_paged_mixed", torch.bfloat16, 1e-2)],
                         ids=["naive-f32", "mixed-bf16"])
@pytest.mark.parametrize("sq", [1, 3])
def test_paged_forward_equals_gather_then_sdpa(name, dtype, bound, sq):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(3, 4, sq, 16, generator=g).to(dtype)
    pool_k, pool_v = (torch.randn(12, 4, 2, 16, generator=g).to(dtype) for _ in range(2))
    table = torch.tensor([[7, 2, 9, 0], [1, 3, 5, 11], [4, 6, 8, 10]], dtype=torch.int32)
    lens = torch.tensor([10, 16, 3], dtype=torch.int32)
    out = getattr(ft, name)(q, pool_k, pool_v, table, lens)
    expected = paged_reference(*(t.float() for t in (q, pool_k, pool_v)), table, lens)
    assert out.dtype == dtype and rel(out, expected) < bound


# ---- torch.compile ----------------------------------------------------------------------------

def test_compiled_fullgraph_with_backward_equals_eager():
    # AOT autograd with eager compilers (what backend="aot_eager" is) rather than inductor: it
    # traces the same full graph through the fake implementations and the registered backward,
    # lets the test read both graphs, and skips inductor's C++ compile (~20 s on this machine).
    graphs = []

    def keep(gm, example_inputs):
        graphs.append(gm)
        return make_boxed_func(gm.forward)

    def loss(q, k, v, slopes):
        return ft.attention_flash(q * 2, k, v, slopes, causal=True, softcap=5.0, k_len=7).sin().sum()

    compiled = torch.compile(loss, fullgraph=True, backend=aot_autograd(fw_compiler=keep, bw_compiler=keep))
    slopes = torch.tensor([0.5, 0.25, 0.125, 0.0625])
    for shape in ((2, 4, 2, 9, 11, 8), (1, 4, 2, 5, 8, 8)):  # the second shape recompiles with symbolic sizes
        ours, theirs = qkv(*shape), qkv(*shape)
        compiled(*ours, slopes).backward()
        loss(*theirs, slopes).backward()
        for a, b in zip(ours, theirs):
            assert torch.equal(a.grad, b.grad)
    targets = [{n.target for n in gm.graph.nodes} for gm in graphs]
    assert torch.ops.fuel_cy.attention_flash.default in targets[0]
    assert torch.ops.fuel_cy.attention_flash_backward.default in targets[1]


# ---- training ---------------------------------------------------------------------------------

class AttentionLayer(torch.nn.Module):
    def __init__(self, attention, e=32, h=4, hkv=2):
        super().__init__()
        self.attention, self.h, self.hkv, self.d = attention, h, hkv, e // h
        self.q = torch.nn.Linear(e, e)
        self.kv = torch.nn.Linear(e, 2 * hkv * self.d)
        self.o = torch.nn.Linear(e, e)

    def forward(self, x):
        b, s, e = x.shape
        q = self.q(x).view(b, s, self.h, self.d).transpose(1, 2)
        k, v = self.kv(x).view(b, s, 2, self.hkv, self.d).permute(2, 0, 3, 1, 4)  # strided: copied once
        return self.o(self.attention(q, k, v).transpose(1, 2).reshape(b, s, e))


def _losses(attention, steps=300):
    torch.manual_seed(0)  # the same initial weights for both runs
    teacher, student = AttentionLayer(lambda q, k, v: sdpa(q, k, v, causal=True)), AttentionLayer(attention)
    x = torch.randn(8, 16, 32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        y = teacher(x)
    opt = torch.optim.Adam(student.parameters(), lr=1e-2)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = F.mse_loss(student(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return torch.tensor(losses, dtype=torch.float64)


def test_training_loss_curve_matches_sdpa():
    ours = _losses(lambda q, k, v: ft.attention_flash(q, k, v, causal=True))
    theirs = _losses(lambda q, k, v: sdpa(q, k, v, causal=True))
    assert theirs[-1] < theirs[0] / 100  # it learns
    assert float(((ours - theirs).abs() / theirs).max()) < 1e-3
