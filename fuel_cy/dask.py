"""Every contract kernel over Dask arrays, one task per batch chunk (``pip install 'fuel_cy[dask]'``).

``fuel_cy.dask.attention_flash(q, k, v, causal=True)`` takes Dask (or NumPy) arrays and returns a
Dask array; ``fuel_cy.dask.call("attention_flash", q, k, v, causal=True)`` is the same for any
kernel of ``fuel_cy.registry``.  The per-kernel functions are made from the registry at import, so
a kernel added to a contract appears here with no code.

How a call is split, from the contract's dim symbols (``KernelEntry.dims``):

- an input whose first dim is the first input's batch (``B`` of ``q``) is *batched*: it is cut at
  q's batch chunks and kept whole along its other axes (``q``, ``k``, ``v``, ``do_grad``,
  ``block_table``, ``context_lens``); a kernel whose first input has no batch dim first
  (``attention_varlen``'s packed ``q [Tq, Hq, D]``, whose sequences the offsets define) runs as
  one task on whole inputs;
- every other input goes *whole* to every task (the paged pool ``k_cache``/``v_cache``,
  ``alibi_slopes``): it is one key of the graph, so each worker receives it once;
- params pass through unchanged; outputs follow q's batch chunks, and a bundle kernel (backward)
  returns a tuple of Dask arrays computed by one task per chunk.

The kernels compute each (batch, head) on its own, so the result is bitwise the result of one
local call on the whole arrays (on workers running the same build at the same CPU level).  Pass q
as a Dask array chunked along the batch to get more than one task; a NumPy input is one chunk.

When errors surface: building the graph runs the kernel's own validation on arrays of the real
dtypes and shapes with a batch of 0 (dtypes, ranks, shared dims, shape constraints, params) and
checks that every batched input has q's batch, raising ``fuel_cy.InputError`` at once.  Rules on
values (block-table indices, context lengths) are checked by the kernel in its task and raise the
same ``fuel_cy.InputError`` at compute, naming the task's batch items.
"""
from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Optional, Union

import dask
import dask.array as da
import numpy as np

import fuel_cy
from fuel_cy.contract.model import offsets_target
from fuel_cy.runtime._validation import has_start_offset  # the kernels' own offset test
from fuel_cy.runtime.registry import KernelEntry, registry

Result = Union[da.Array, tuple[da.Array, ...]]
BATCH_DIM = "B"  # the contracts' batch symbol: the one dim a call is split along


def call(kernel: str, *args: Any, **kwargs: Any) -> Result:
    """Run contract kernel ``kernel`` over Dask arrays, one task per batch chunk of its first input.

    Takes the arguments of ``fuel_cy.<kernel>`` (arrays may be Dask or NumPy) and returns a Dask
    array, or a tuple of them for a bundle kernel.
    """
    entry = registry.get(kernel)
    if entry is None:
        raise fuel_cy.InputError("fuel_cy.dask.call", "kernel", "registry",
                                 f"unknown kernel {kernel!r} (known: {', '.join(registry)})")
    bound = inspect.signature(entry.fn).bind(*args, **kwargs)
    values = {name: bound.arguments.get(name) for name in entry.inputs}
    params = {name: value for name, value in bound.arguments.items() if name not in entry.inputs}
    for output, flag in entry.requested_outputs.items():
        if params.get(flag):
            # its shape is not the batch-major shape the tasks' outputs are stacked along
            raise fuel_cy.InputError(kernel, f"param {flag!r}", "fuel_cy.dask.call",
                                     f"{flag}=True ({output!r}) is not supported through fuel_cy.dask yet; "
                                     f"call fuel_cy.{kernel} on computed arrays")
    for name, x in values.items():
        if isinstance(x, da.Array) and any(np.isnan(n) for n in x.shape):
            # (boolean indexing and the like leave chunk sizes unknown until computed)
            raise fuel_cy.InputError(kernel, f"input {name!r}", "known shape (the contract's dims)",
                                     f"a Dask array of unknown chunk sizes, shape {x.shape}; "
                                     f"call {name}.compute_chunk_sizes() first")
    batch = entry.dims[entry.inputs[0]][0]
    # only a batch dim splits: packed rows (attention_varlen's Tq) belong to sequences that the
    # offsets define, so such a kernel runs as one task on whole inputs
    batched = ({name for name in entry.inputs if entry.dims[name][:1] == (batch,)} if batch == BATCH_DIM
               else set())
    # an input that broadcasts over the batch (a mask [B or 1, ...]) splits with it where it has
    # the batch's extent, and goes whole to every task where it has 1
    first_rows = _rows(values[entry.inputs[0]])
    batched |= {name for name, targets in entry.broadcasts.items()
                if batch == BATCH_DIM and targets[:1] == (batch,) and values.get(name) is not None
                and _rows(values[name]) == first_rows != 1}

    empty = batched or _packed_rows(entry)   # the inputs a probe gives no rows
    probe = entry.fn(*(_probe(values[name], name in empty) for name in entry.inputs), **params)
    metas: tuple[np.ndarray, ...] = probe if entry.bundle else (probe,)

    arrays = {name: x if isinstance(x, da.Array) else da.from_array(x, chunks=-1)
              for name, x in values.items() if x is not None}
    first = arrays[entry.inputs[0]]
    for name in batched & arrays.keys():
        if arrays[name].shape[0] != first.shape[0]:
            raise fuel_cy.InputError(kernel, f"input {name!r}", f"dims: dim {batch} is shared",
                                     f"{name}.shape[0] = {arrays[name].shape[0]} but "
                                     f"{entry.inputs[0]}.shape[0] = {first.shape[0]}")
    splits = first.chunks[0] if batched else (first.shape[0],)
    blocks: dict[str, list[Any]] = {}  # input name -> its block for each task
    for name, x in arrays.items():
        if name in batched:
            aligned = x.rechunk({0: splits, **{axis: -1 for axis in range(1, x.ndim)}})
            blocks[name] = list(aligned.to_delayed().ravel())
        else:
            blocks[name] = [x.rechunk(-1).to_delayed().ravel()[0]] * len(splits)

    task = dask.delayed(_run, pure=True, nout=len(metas))
    columns: list[list[da.Array]] = [[] for _ in metas]
    for i, size in enumerate(splits):
        start = sum(splits[:i])
        outs = task(kernel, params, (start, start + size),
                    *(blocks[name][i] if name in blocks else None for name in entry.inputs))
        for column, out, meta in zip(columns, outs, metas):
            column.append(da.from_delayed(out, (size, *meta.shape[1:]), meta=meta))
    results = tuple(da.concatenate(column, axis=0) for column in columns)
    return results if entry.bundle else results[0]


def _rows(x: Any) -> Any:
    """The first extent of an array input (None for anything else)."""
    return x.shape[0] if isinstance(x, (np.ndarray, da.Array)) and x.ndim else None


def _packed_rows(entry: KernelEntry) -> set[str]:
    """The inputs of packed sequences (rows that offsets ``cu_seqlens_<input>`` cut) and those
    sharing their row dim: a probe gives them 0 rows and all-zero offsets, a valid empty call."""
    row_dims = {entry.dims[target][0] for name in entry.inputs
                for target in [offsets_target(name)] if target is not None and target in entry.dims}
    return {name for name in entry.inputs if entry.dims[name][:1] and entry.dims[name][0] in row_dims}


def _probe(x: Any, batched: bool) -> Any:
    """A stand-in for ``x`` with a batch (or packed rows) of 0: the kernel checks it and computes
    nothing.

    A whole input keeps its shape; np.empty reserves address space the probe never touches, and
    integer inputs are zeros (offsets, lengths, block ids that every rule on values admits).
    Anything but an array goes to the kernel as it is, to be rejected with the kernel's message.
    """
    if not isinstance(x, (np.ndarray, da.Array)):
        return x
    shape = (0, *x.shape[1:]) if batched and x.ndim else x.shape
    return np.empty(shape, x.dtype) if np.dtype(x.dtype).kind == "f" else np.zeros(shape, x.dtype)


def _run(kernel: str, params: dict[str, Any], items: tuple[int, int],
         *arrays: Optional[np.ndarray]) -> tuple[np.ndarray, ...]:
    """One task: the NumPy kernel on batch items ``items[0]:items[1]`` (and the whole inputs)."""
    try:
        out = registry[kernel].fn(*(None if a is None else _plain(a) for a in arrays), **params)
    except fuel_cy.InputError as exc:
        # a rule on values names a batch index (block_table[1, 0]) that counts from this chunk
        raise fuel_cy.InputError(exc.kernel, exc.input, exc.clause,
                                 f"{exc.received} (in the task for batch items {items[0]}:{items[1]}, "
                                 f"which counts them from {items[0]})", exc.where) from None
    return out if isinstance(out, tuple) else (out,)


def _plain(a: np.ndarray) -> np.ndarray:
    """``a`` as the kernels take it: C-contiguous and starting at its buffer's start.

    A block may be a view into a bigger array (a slice of a rechunked input), and
    np.ascontiguousarray keeps such a view as it is; copy only then, as the pool comes whole.
    """
    if a.flags.c_contiguous and not has_start_offset(a):
        return a
    return a.copy()


def _wrapper(entry: KernelEntry) -> Callable[..., Result]:
    # __wrapped__ (set by functools.wraps) gives inspect.signature the NumPy kernel's signature
    @functools.wraps(entry.fn, assigned=("__name__", "__qualname__"))
    def kernel(*args: Any, **kwargs: Any) -> Result:
        return call(entry.name, *args, **kwargs)

    head, _, rest = (entry.fn.__doc__ or "").partition("\n\n")
    kernel.__doc__ = (f"{head}\n\nDask version of ``fuel_cy.{entry.name}``: batched inputs are cut at q's "
                      f"batch chunks, the others go whole to every task (see ``fuel_cy.dask``).\n\n"
                      + rest.replace("numpy.ndarray", "dask.array.Array"))
    kernel.__module__ = __name__
    return kernel


globals().update({name: _wrapper(entry) for name, entry in registry.items()})
# registry.keys(), not *registry: the docs build (griffe) would read that as another module's __all__
__all__ = ["call", *registry.keys()]
