"""fuel_cy.dask on a real two-process cluster: every registry kernel, bitwise equal to one local call."""
from __future__ import annotations

import inspect
import subprocess
import sys

import dask
import dask.array as da
import ml_dtypes
import numpy as np
import pytest
from dask.distributed import Client, LocalCluster

import fuel_cy
import fuel_cy.dask as fd
from fuel_cy.errors import InputError
from fuel_cy.contract import load_contracts

from conftest import ROOT

NUMPY = {"F32": np.float32, "F64": np.float64, "BF16": ml_dtypes.bfloat16, "F16": np.float16}
SPECS = {k.name: k for doc in load_contracts(ROOT / "contracts") for k in doc.kernels}
# small extents for every dim symbol of the contracts; B = 5 is cut into the uneven chunks (2, 2, 1)
SIZES = {"B": 5, "Hq": 4, "Hkv": 2, "Sq": 3, "Sk": 7, "D": 8, "num_blocks": 12, "block_size": 4,
         "max_blocks_per_seq": 3}
CHUNKS = (2, 2, 1)
CONTEXT_LENS = [12, 5, 9, 1, 11]  # 1 < Sq: fully masked rows are part of the contract too
# each kernel with a batch dim in its first dtype (f32, or bf16 for the mixed ones), plus f64 and f16
# once; a kernel over packed sequences (no batch dim first) runs as one task (its own test below)
BATCHED = [name for name, e in fuel_cy.registry.items() if e.dims[e.inputs[0]][0] == "B"]
CASES = [(name, fuel_cy.registry[name].dtypes[0]) for name in BATCHED] + [
    ("attention_flash", "F64"), ("attention_paged_mixed", "F16")]


@pytest.fixture(scope="module")
def client():
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=None) as cluster, Client(cluster) as c:
        yield c


def make_inputs(kernel: str, dtype: str, seed: int = 0) -> dict[str, np.ndarray]:
    """Every input of `kernel` (the optional ones too), shaped from the contract's dim symbols."""
    entry = fuel_cy.registry[kernel]
    rng = np.random.default_rng(seed)
    out = {}
    for name in entry.inputs:
        # an input that broadcasts (a mask): the full extents on even axes, 1 on odd ones
        shape = (tuple(SIZES[d] if axis % 2 == 0 else 1 for axis, d in enumerate(entry.broadcasts[name]))
                 if name in entry.broadcasts else tuple(SIZES[d] for d in entry.dims[name]))
        if name == "block_table":
            out[name] = rng.integers(0, SIZES["num_blocks"], shape).astype(np.uint32)
        elif name == "context_lens":
            out[name] = np.array(CONTEXT_LENS, np.uint32)
        elif SPECS[kernel].input(name).dtypes == ("BOOL",):
            out[name] = rng.random(shape) < 0.7
        else:   # T, or an input's own float type (a backward's float32 dlse and lse)
            spec = SPECS[kernel].input(name)
            out[name] = rng.standard_normal(shape).astype(NUMPY[dtype if spec.shares_t else spec.dtypes[0]])
    return out


def params_for(kernel: str) -> dict:
    entry = fuel_cy.registry[kernel]
    return {"softmax_scale": 0.3, **({"causal": True} if "causal" in entry.params else {})}


def as_tuple(x):
    return x if isinstance(x, tuple) else (x,)


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def dask_args(kernel: str, inputs: dict[str, np.ndarray]) -> list:
    """q chunked (2, 2, 1) along B; k, v and do_grad chunked otherwise (the wrapper aligns them);
    the rest (pool, block table, context lengths, slopes) as NumPy."""
    first, out = next(iter(inputs)), []
    for name, x in inputs.items():
        if name == first:
            out.append(da.from_array(x, chunks=(CHUNKS, *x.shape[1:])))
        elif name in ("k", "v", "do_grad"):
            out.append(da.from_array(x, chunks=(3, 1, *x.shape[2:])))
        else:
            out.append(x)
    return out


@pytest.mark.parametrize("kernel,dtype", CASES, ids=[f"{k}-{d}" for k, d in CASES])
def test_every_kernel_is_bitwise_one_local_call(client, kernel, dtype):
    inputs = make_inputs(kernel, dtype)
    params = params_for(kernel)
    lazy = as_tuple(getattr(fd, kernel)(*dask_args(kernel, inputs), **params))
    assert all(isinstance(x, da.Array) and x.chunks[0] == CHUNKS for x in lazy)
    got = client.gather(client.compute(list(lazy)))
    want = as_tuple(getattr(fuel_cy, kernel)(*inputs.values(), **params))
    entry = fuel_cy.registry[kernel]
    # (an output a flag requests, attention_masked's lse, is not asked for: fuel_cy.dask refuses it)
    assert len(got) == len(want) == len(entry.outputs) - len(entry.requested_outputs)
    for g, w in zip(got, want):
        assert same_bits(g, w)
    for output, flag in entry.requested_outputs.items():
        with pytest.raises(InputError, match=rf"{kernel}: param '{flag}'.*not supported through fuel_cy.dask"):
            getattr(fd, kernel)(*dask_args(kernel, inputs), **params, **{flag: True})


@pytest.mark.parametrize("kernel", BATCHED)
def test_a_batch_item_does_not_depend_on_its_batch(client, kernel):
    # each (b, h) of the B = 5 call on the cluster equals the same item computed alone with B = 1
    entry = fuel_cy.registry[kernel]
    inputs = make_inputs(kernel, entry.dtypes[0], seed=1)
    params = params_for(kernel)
    batched = {n for n in entry.inputs if entry.dims[n][0] == "B" or entry.broadcasts.get(n, ("",))[0] == "B"}
    together = client.gather(client.compute(list(as_tuple(getattr(fd, kernel)(*dask_args(kernel, inputs), **params)))))
    for b in range(SIZES["B"]):
        alone = as_tuple(getattr(fuel_cy, kernel)(
            *(x[b:b + 1].copy() if n in batched else x for n, x in inputs.items()), **params))
        for t, a in zip(together, alone):
            for h in range(t.shape[1]):
                assert same_bits(t[b, h], a[0, h]), (b, h)


def test_backward_is_one_task_per_chunk_returning_three_arrays(client):
    inputs = make_inputs("attention_flash_backward", "F32")
    grads = fd.attention_flash_backward(*dask_args("attention_flash_backward", inputs))
    assert isinstance(grads, tuple) and len(grads) == 3
    dq, dk, dv = grads
    assert dq.shape == inputs["q"].shape and dk.shape == dv.shape == inputs["k"].shape
    graph = {**dict(dq.__dask_graph__()), **dict(dk.__dask_graph__()), **dict(dv.__dask_graph__())}
    kernel_tasks = [k for k in graph if str(k).startswith("_run-")]
    assert len(kernel_tasks) == len(CHUNKS)  # shared by dq, dk and dv: computing all three runs each once
    got = dask.compute(dq, dk, dv)  # the client is the default scheduler
    for g, w in zip(got, fuel_cy.attention_flash_backward(*inputs.values())):
        assert same_bits(g, w)


def test_the_paged_pool_goes_whole_to_every_task_and_may_be_scattered(client):
    inputs = make_inputs("attention_paged_naive", "F32")
    args = dask_args("attention_paged_naive", inputs)
    # the pool arrives in pieces along num_blocks: every task still gets all of it, as one key
    args[1], args[2] = (da.from_array(inputs[n], chunks=(5, 4, 1, 8)) for n in ("k_cache", "v_cache"))
    out = fd.attention_paged_naive(*args)
    graph = dict(out.__dask_graph__())
    tasks = [set(dask.core.get_dependencies(graph, k)) for k in graph if str(k).startswith("_run-")]
    assert len(tasks) == len(CHUNKS) and len(set.intersection(*tasks)) == 3  # k_cache, v_cache, alibi_slopes
    assert same_bits(out.compute(), fuel_cy.attention_paged_naive(*inputs.values()))
    # the pool scattered to every worker once, then passed as a Dask array
    pool = client.scatter(inputs["k_cache"], broadcast=True)
    args[1] = args[2] = da.from_delayed(pool, inputs["k_cache"].shape, dtype=inputs["k_cache"].dtype)
    inputs["v_cache"] = inputs["k_cache"]
    assert same_bits(fd.attention_paged_naive(*args).compute(), fuel_cy.attention_paged_naive(*inputs.values()))


def test_contract_errors_are_raised_before_the_graph_is_built(client):
    inputs = make_inputs("attention_flash", "F32")
    q, k, v = (da.from_array(inputs[n], chunks=(2, -1, -1, -1)) for n in ("q", "k", "v"))
    with pytest.raises(fuel_cy.InputError, match=r"^attention_flash: input 'q': .*dtypes.*int32"):
        fd.attention_flash(q.astype(np.int32), k, v)
    with pytest.raises(fuel_cy.InputError, match=r"^attention_flash: input 'k': .*rank 4: received rank 3"):
        fd.attention_flash(q, k[:, 0], v)
    with pytest.raises(fuel_cy.InputError, match=r"^attention_flash_mixed: input 'q': .*dtypes"):
        fd.attention_flash_mixed(q, k, v)
    with pytest.raises(fuel_cy.InputError, match=r"^attention_flash: param 'softcap'"):
        fd.attention_flash(q, k, v, softcap=-1.0)
    with pytest.raises(fuel_cy.InputError, match=r"^attention_flash: input 'v': .*dim B is shared: v.shape\[0\] = 4"):
        fd.attention_flash(q, k, v[:4])
    with pytest.raises(fuel_cy.InputError, match=r"unknown kernel 'attention_fast'"):
        fd.call("attention_fast", q, k, v)
    with pytest.raises(TypeError):
        fd.attention_flash(q, k, v, bogus=1)
    unknown = q[q[:, 0, 0, 0] > -np.inf]  # boolean indexing: the batch's chunk sizes are unknown
    with pytest.raises(fuel_cy.InputError, match=r"^attention_flash: input 'q': .*unknown chunk sizes.*"
                                                 r"compute_chunk_sizes\(\)"):
        fd.attention_flash(unknown, k, v)
    assert fd.attention_flash(unknown.compute_chunk_sizes(), k, v).shape == q.shape


def test_value_errors_come_back_from_the_workers_whole(client):
    inputs = make_inputs("attention_paged_naive", "F32")
    inputs["block_table"][3, 0] = 99  # batch item 3 sits in the chunk of items 2:4, as its row 1
    out = fd.attention_paged_naive(*dask_args("attention_paged_naive", inputs))  # values are not read yet
    with pytest.raises(fuel_cy.InputError, match=r"block_table\[1, 0\] = 99 but num_blocks = 12 "
                                                 r"\(in the task for batch items 2:4") as info:
        client.compute(out).result()
    assert info.value.kernel == "attention_paged_naive" and info.value.input == "input 'block_table'"


def test_numpy_inputs_and_offset_views_are_accepted():
    # NumPy q is one chunk; a NumPy k sliced from a bigger array is an offset view, which the
    # local kernel rejects and the tasks copy (no cluster needed: the threaded scheduler)
    inputs = make_inputs("attention_flash", "F32")
    big = np.concatenate([inputs["k"], inputs["k"]])
    out = fd.attention_flash(inputs["q"], big[5:], inputs["v"])
    assert out.numblocks[0] == 1
    assert same_bits(out.compute(scheduler="threads"), fuel_cy.attention_flash(inputs["q"], inputs["k"], inputs["v"]))


def test_one_function_per_registry_kernel_with_the_numpy_signature():
    assert fd.__all__ == ["call", *fuel_cy.registry]
    for name, entry in fuel_cy.registry.items():
        fn = getattr(fd, name)
        assert inspect.signature(fn) == inspect.signature(entry.fn)
        assert fn.__name__ == name and fn.__module__ == "fuel_cy.dask"
        assert f"Dask version of ``fuel_cy.{name}``" in fn.__doc__ and "numpy.ndarray" not in fn.__doc__


def test_registry_dims_mirror_the_contract():
    # fuel_cy.dask decides what is batched from these
    for doc in load_contracts(ROOT / "contracts"):
        for k in doc.kernels:
            assert dict(fuel_cy.registry[k.name].dims) == {i.name: i.dims for i in k.inputs}


def test_import_fuel_cy_does_not_import_dask():
    code = "import sys, fuel_cy; print(sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed')))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_packed_sequences_run_as_one_task_with_the_local_bits(client):
    """attention_varlen's q [Tq, Hq, D] has no batch dim: its rows belong to the sequences the
    offsets define, so the call is one task on whole inputs (q chunked or not), bitwise one local call."""
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((30, 4, 8), (50, 2, 8), (50, 2, 8)))
    cu_q, cu_k = np.array([0, 10, 10, 30], np.uint32), np.array([0, 20, 25, 50], np.uint32)
    lazy = fd.attention_varlen(da.from_array(q, chunks=(7, 4, 8)), k, v, cu_q, cu_k, causal=True)
    assert lazy.chunks[0] == (30,)
    kernel_tasks = [key for key in dict(lazy.__dask_graph__()) if str(key).startswith("_run-")]
    assert len(kernel_tasks) == 1
    assert same_bits(client.compute(lazy).result(), fuel_cy.attention_varlen(q, k, v, cu_q, cu_k, causal=True))

