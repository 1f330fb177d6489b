"""The public API around the kernels: registry, ENTRY_POINTS, dispatch, cost, stubs, edge cases."""
from __future__ import annotations

import inspect
import subprocess
import sys

import numpy as np
import pytest

import fuel_cy
from fuel_cy.contract import load_contracts

from conftest import ROOT
import reference_impl as ref
from measures import bits, rel

rng = np.random.default_rng(0)


def arr(*shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def test_registry_mirrors_the_contract():
    kernels = [k for d in load_contracts(ROOT / "contracts") for k in d.kernels]
    assert list(fuel_cy.registry) == [k.name for k in kernels]
    for k in kernels:
        e = fuel_cy.registry[k.name]
        assert (e.fused_op, e.fused_op_id, e.backend, e.kernel_source, e.entry_point) == (
            k.fused_op, k.fused_op_id, k.backend, k.kernel_source, k.entry_point)
        assert e.dtypes == k.float_dtypes and e.determinism == "same_hardware_bitwise"
        assert len(e.revision_hash) == 16 and e.implemented
        assert e.fn is getattr(fuel_cy, k.name)
    assert fuel_cy.registry["attention_naive"].exec_wired
    assert not fuel_cy.registry["attention_flash"].exec_wired
    assert fuel_cy.registry["attention_paged_naive"].exec_dtypes == ("F32", "F64")
    assert fuel_cy.registry["attention_flash_backward"].exec_arm is None


def test_entry_points_link_registry():
    ep = fuel_cy.ENTRY_POINTS
    assert ep["fuel_reference_backend::attention::attention_flash"] is fuel_cy.attention_flash
    assert ep["fuel_cy::mixed::attention_flash_mixed"] is fuel_cy.attention_flash_mixed
    assert len(ep) == len(fuel_cy.registry) == 11


def test_revision_hashes_are_distinct_and_stable():
    hashes = {e.revision_hash for e in fuel_cy.registry.values()}
    assert len(hashes) == len(fuel_cy.registry) == 11
    from fuel_cy.codegen import render, Layout

    fm = render(Layout(ROOT))
    assert all(e.revision_hash in fm.pending["_tables.py"] for e in fuel_cy.registry.values())


def test_dispatch_flash_attn_routes_to_the_naive_oracle():
    q, k, v = arr(1, 2, 9, 8), arr(1, 1, 11, 8), arr(1, 1, 11, 8)
    out, plan = fuel_cy.dispatch("FLASH_ATTN", q, k, v, causal=True, return_plan=True)
    assert plan.kernel == "attention_naive" and plan.copies == ()
    assert np.array_equal(out, fuel_cy.attention_naive(q, k, v, causal=True))
    assert np.array_equal(fuel_cy.dispatch(12, q, k, v), fuel_cy.attention_naive(q, k, v))
    sib = fuel_cy.dispatch("FLASH_ATTN", q, k, v, impl="attention_flash")
    assert np.array_equal(sib, fuel_cy.attention_flash(q, k, v))


def test_dispatch_exec_dtypes_and_bad_impl():
    import ml_dtypes

    q = arr(1, 2, 4, 8, dtype=ml_dtypes.bfloat16)
    with pytest.raises(fuel_cy.InputError, match="exec dtypes"):
        fuel_cy.dispatch("FLASH_ATTN", q, q, q)
    with pytest.raises(fuel_cy.InputError, match="not an implementation at this key"):
        fuel_cy.dispatch("FLASH_ATTN", arr(1, 1, 2, 2), arr(1, 1, 2, 2), arr(1, 1, 2, 2), impl="attention_paged_naive")
    with pytest.raises(fuel_cy.InputError, match="unknown fused op"):
        fuel_cy.dispatch("NOPE")
    with pytest.raises(fuel_cy.InputError, match="no fused op has id 99"):
        fuel_cy.dispatch(99)


def test_dispatch_backward_ids_return_one_gradient_each():
    q, k, v, do = arr(1, 4, 6, 8, dtype=np.float64), arr(1, 2, 7, 8, dtype=np.float64), arr(1, 2, 7, 8, dtype=np.float64), arr(1, 4, 6, 8, dtype=np.float64)
    dq, dk, dv = fuel_cy.attention_flash_backward(q, k, v, do)
    for op, want in (("FLASH_ATTN_BACKWARD_Q", dq), (23, dk), ("FLASH_ATTN_BACKWARD_V", dv)):
        assert np.array_equal(fuel_cy.dispatch(op, q, k, v, do), want)


def test_dispatch_plans_contiguous_copies_for_awkward_layouts():
    q = arr(1, 2, 8, 9)[..., :8]  # strided view
    k, v = arr(1, 1, 5, 8), arr(1, 1, 5, 8)
    with pytest.raises(fuel_cy.InputError):
        fuel_cy.attention_naive(q, k, v)
    out, plan = fuel_cy.dispatch("FLASH_ATTN", q, k, v, return_plan=True)
    assert plan.copies == (("q", q.nbytes),) and plan.copy_bytes == 2 * q.nbytes
    assert np.array_equal(out, fuel_cy.attention_naive(np.ascontiguousarray(q), k, v))


def test_cost_from_shapes_and_arrays():
    c = fuel_cy.cost("attention_flash", (2, 8, 128, 64), (2, 2, 256, 64), (2, 2, 256, 64))
    assert c.flops == 4 * 2 * 8 * 128 * 256 * 64
    assert c.bytes_moved == 2 * (8 * 128 * 64 + 2 * 2 * 256 * 64 + 8 * 128 * 64) * 4
    assert c.host_bytes == 2 * 8 * 128 * 64 * 4 and c.device_bytes == 0 and c.disk_bytes == 0
    q = np.zeros((2, 8, 128, 64), np.float64)
    c64 = fuel_cy.cost("attention_flash", q, (2, 2, 256, 64), (2, 2, 256, 64))
    assert c64.dtype == "F64" and c64.bytes_moved == 2 * c.bytes_moved
    paged = fuel_cy.cost("attention_paged_naive", (4, 8, 1, 64), (100, 16, 2, 64), (100, 16, 2, 64), (4, 10), (4,))
    assert paged.flops == 4 * 4 * 8 * 1 * (10 * 16) * 64
    with pytest.raises(fuel_cy.InputError, match="missing"):
        fuel_cy.cost("attention_flash", (2, 8, 128, 64))
    with pytest.raises(fuel_cy.InputError, match="unknown kernel"):
        fuel_cy.cost("nope")
    with pytest.raises(fuel_cy.InputError, match="do not fit"):
        fuel_cy.cost("attention_flash", (2, 8), (2, 2, 256, 64), (2, 2, 256, 64))


def test_signatures_follow_the_contract():
    sig = inspect.signature(fuel_cy.attention_flash)
    assert str(sig) == ("(q, k, v, alibi_slopes=None, *, softmax_scale=None, causal=False, window_size_left=None, "
                        "window_size_right=None, softcap=None, k_len=None)")
    paged = inspect.signature(fuel_cy.attention_paged_naive)
    assert list(paged.parameters) == ["q", "k_cache", "v_cache", "block_table", "context_lens", "alibi_slopes",
                                      "softmax_scale", "block_size", "softcap"]
    assert "FlashAttention-v2 forward" in fuel_cy.attention_flash.__doc__
    assert "InputError" in fuel_cy.attention_flash.__doc__


def test_stub_matches_runtime_with_mypy_stubtest():
    proc = subprocess.run([sys.executable, "-m", "mypy.stubtest", "fuel_cy._generated._kernels",
                           "--ignore-missing-stub", "--allowlist", "/dev/null"],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_zero_size_dims_give_defined_results():
    # B, H or Sq of 0: an empty result; Sk of 0: every row fully masked -> zeros; D of 0: empty rows
    z = fuel_cy.attention_flash(arr(0, 2, 3, 4), arr(0, 1, 5, 4), arr(0, 1, 5, 4))
    assert z.shape == (0, 2, 3, 4)
    z = fuel_cy.attention_naive(arr(1, 2, 0, 4), arr(1, 1, 5, 4), arr(1, 1, 5, 4))
    assert z.shape == (1, 2, 0, 4)
    z = fuel_cy.attention_flash(arr(1, 2, 3, 4), arr(1, 1, 0, 4), arr(1, 1, 0, 4))
    assert z.shape == (1, 2, 3, 4) and np.all(z == 0)
    z = fuel_cy.attention_flash(arr(1, 2, 3, 0), arr(1, 1, 5, 0), arr(1, 1, 5, 0))
    assert z.shape == (1, 2, 3, 0)
    dq, dk, dv = fuel_cy.attention_flash_backward(arr(1, 2, 3, 4), arr(1, 1, 0, 4), arr(1, 1, 0, 4), arr(1, 2, 3, 4))
    assert np.all(dq == 0) and dk.shape == (1, 1, 0, 4)
    with pytest.raises(fuel_cy.InputError, match="divisible"):
        fuel_cy.attention_flash(arr(1, 2, 3, 4), arr(1, 0, 5, 4), arr(1, 0, 5, 4))


def test_nan_and_inf_in_data_propagate_without_hanging():
    q, k, v = arr(1, 1, 4, 8), arr(1, 1, 6, 8), arr(1, 1, 6, 8)
    q[0, 0, 1, 3] = np.nan
    v[0, 0, 2, 0] = np.inf
    finite_v = v.copy()
    finite_v[0, 0, 2, 0] = 0
    expected = ref.forward(q[:, :, [0, 2, 3]], k, finite_v)  # the rows the NaN does not reach
    for fn in (fuel_cy.attention_flash, fuel_cy.attention_naive):
        out = fn(q, k, v)
        assert np.isnan(out[0, 0, 1]).all()          # a NaN score poisons its row
        others = out[0, 0, [0, 2, 3]]
        assert np.all(others[:, 0] == np.inf)        # every weight is > 0, so V's inf reaches column 0
        assert rel(others[:, 1:], expected[0, 0, :, 1:]) < 1e-5  # the other columns are as without it


def test_semantic_param_checks():
    q, k, v = arr(1, 2, 3, 4), arr(1, 1, 5, 4), arr(1, 1, 5, 4)
    with pytest.raises(fuel_cy.InputError, match="softcap"):
        fuel_cy.attention_flash(q, k, v, softcap=0.0)
    with pytest.raises(fuel_cy.InputError, match="k_len <= Sk"):
        fuel_cy.attention_flash(q, k, v, k_len=6)
    with pytest.raises(fuel_cy.InputError, match="softmax_scale"):
        fuel_cy.attention_flash(q, k, v, softmax_scale=float("nan"))
    with pytest.raises(fuel_cy.InputError, match="window_size_left"):
        fuel_cy.attention_flash(q, k, v, window_size_left=-1)


def test_paged_bounds_are_checked_before_compute():
    q = arr(2, 2, 1, 4)
    kc = arr(5, 4, 1, 4)
    table = np.array([[0, 1, 2], [3, 4, 7]], np.uint32)
    ok = fuel_cy.attention_paged_naive(q, kc, kc, table, np.array([12, 8], np.uint32))  # slot 2 of row 1 unused
    assert ok.shape == q.shape
    with pytest.raises(fuel_cy.InputError, match=r"block_table\[1, 2\] = 7 but num_blocks = 5"):
        fuel_cy.attention_paged_naive(q, kc, kc, table, np.array([12, 9], np.uint32))
    with pytest.raises(fuel_cy.InputError, match="capacity"):
        fuel_cy.attention_paged_naive(q, kc, kc, table, np.array([13, 1], np.uint32))
    with pytest.raises(fuel_cy.InputError, match=r"block_size\.constraint"):
        fuel_cy.attention_paged_naive(q, kc, kc, table, np.array([1, 1], np.uint32), block_size=2)
    for bad in (table.astype(np.int64), table.astype(np.int32)):
        with pytest.raises(fuel_cy.InputError, match="dtypes"):
            fuel_cy.attention_paged_naive(q, kc, kc, bad, np.array([1, 1], np.uint32))


def test_default_thread_count_is_read_once_and_again_on_reset(monkeypatch):
    try:
        monkeypatch.setenv("OMP_NUM_THREADS", "3")
        fuel_cy.set_num_threads(0)
        assert fuel_cy.get_num_threads() == 3
        monkeypatch.setenv("OMP_NUM_THREADS", "5")
        assert fuel_cy.get_num_threads() == 3  # a call never re-reads the environment
        fuel_cy.set_num_threads(0)
        assert fuel_cy.get_num_threads() == 5
    finally:
        monkeypatch.undo()
        fuel_cy.set_num_threads(0)


def test_threads_api():
    assert fuel_cy.get_num_threads() >= 1
    fuel_cy.set_num_threads(1)
    assert fuel_cy.get_num_threads() == 1
    fuel_cy.set_num_threads(0)
    with pytest.raises(ValueError):
        fuel_cy.set_num_threads(-2)


def test_build_info_records_flags():
    info = fuel_cy.build_info()
    assert "-O3" in info["compile_args"] or any(a.startswith("-O") for a in info["compile_args"])
    assert isinstance(info["openmp"], bool)


@pytest.mark.parametrize("name", list(fuel_cy.registry))
def test_read_only_inputs_are_accepted_and_never_written(name):
    """No kernel writes its inputs, so read-only arrays (np.load(mmap_mode='r'), frozen buffers)
    are valid inputs: same bits as writable copies, in every dtype the kernel takes."""
    from test_validators import KERNELS, _inputs

    kernel = next(k for k in KERNELS if k.name == name)
    rng = np.random.default_rng(1)
    for dtype in kernel.float_dtypes:
        arrays = _inputs(kernel, dtype)
        for i, spec in enumerate(kernel.inputs):
            if spec.is_float:
                arrays[i] = rng.standard_normal(arrays[i].shape).astype(arrays[i].dtype)
            elif spec.name == "block_table":
                arrays[i] = (np.arange(arrays[i].size) % 6).reshape(arrays[i].shape).astype(arrays[i].dtype)
            elif spec.name == "context_lens":
                arrays[i] = np.array([5, 12], arrays[i].dtype)
        expected = getattr(fuel_cy, name)(*arrays)
        frozen = [a.copy() for a in arrays]
        for a in frozen:
            a.flags.writeable = False
        got = getattr(fuel_cy, name)(*frozen)
        assert bits(got) == bits(expected), dtype
        assert all(bits(a) == bits(b) for a, b in zip(frozen, arrays))


def test_the_advice_for_an_offset_view_works():
    """qkv[1] of a packed [3, B, H, S, D] array is C-contiguous but starts past its buffer's start,
    which the contract rejects; numpy.ascontiguousarray returns it unchanged, so the error must
    not recommend it, and what it recommends must pass."""
    qkv = arr(3, 1, 2, 5, 8)
    q, k, v = qkv[0], qkv[1], qkv[2]
    assert np.ascontiguousarray(k) is k  # why the usual advice would fail
    with pytest.raises(fuel_cy.InputError, match=r"start_offset: rejected.*x\.copy\(\)") as info:
        fuel_cy.attention_flash(q, k, v)
    assert "attention_flash" in str(info.value) and "input 'k'" in str(info.value)
    out = fuel_cy.attention_flash(q, k.copy(), v.copy())
    assert rel(out, ref.forward(q, k, v)) < 2e-5
