"""PyTorch front end: every fuel_cy kernel as a ``torch.library`` custom op on CPU tensors.

``fuel_cy.torch.<kernel>`` has the name and signature of ``fuel_cy.<kernel>`` but takes and
returns ``torch.Tensor`` (float32, float64, bfloat16, float16; int32 or uint32 for block tables and
context lengths).  Behind it is the op ``torch.ops.fuel_cy.<kernel>``, with a fake implementation
so ``torch.compile(fullgraph=True)`` traces it; ``attention_flash``, ``attention_flash_mixed``,
``attention_varlen`` and ``attention_masked`` (so ``scaled_dot_product_attention``) are
differentiable in ``q``, ``k`` and ``v``.  An eager call with nothing for torch to record (plain
CPU tensors, no gradient, no tracing) calls the numpy kernel directly instead: the same kernel and
bits, without the dispatcher's ~30 us (a decode-sized call costs ~8 us more than the numpy entry).

Everything is built from the contracts (the kernels' inputs, param kinds and outputs), so a kernel
added to a contract appears here without code.  Importing this module imports torch; ``import
fuel_cy`` alone never does.
"""
from __future__ import annotations

import inspect
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

import ml_dtypes
import numpy as np
import torch

from . import _generated
from ._generated._kernels import array_view
from .contract.loader import load_contracts
from .dtypes import DTYPES
from .contract.model import Kernel
from .errors import InputError
from .runtime.registry import registry
from .sdpa import NAME, NUMPY_OPS, ArrayOps, sdpa

_BF16 = np.dtype(ml_dtypes.bfloat16)
_TORCH_DTYPES = {"F32": torch.float32, "F64": torch.float64, "BF16": torch.bfloat16, "F16": torch.float16}
_PARAM_TYPES: dict[str, type] = {"f32": float, "f64": float, "bool": bool}  # usize, DynScalar: int

# The backward kernel of each differentiable forward.  The pairing is stated in the contracts'
# prose only, so it is written here once; the wiring below reads everything else from them.
_GRADIENTS = {"attention_flash": "attention_flash_backward",
              "attention_flash_mixed": "attention_flash_backward_mixed",
              "attention_varlen": "attention_varlen_backward",
              "attention_masked": "attention_masked_backward"}
# k_len = n reads only the first n keys, which is the forward on the slice [..., :n, :] of every
# input with this dim; the backward kernels have no k_len, so they run on that slice.
_KEY_DIM = "Sk"


def _contract_kernels() -> dict[str, Kernel]:
    # The copy of the contracts the extension was generated from (not ./contracts, which may
    # have been edited since the last build).
    docs = load_contracts(Path(_generated.__file__).parent / "contracts")
    return {k.name: k for d in docs for k in d.kernels}


def _check_tensor(kernel: str, name: str, x: object) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        hint = f" (fuel_cy.{kernel} takes numpy arrays)" if isinstance(x, np.ndarray) else ""
        raise TypeError(f"fuel_cy.torch.{kernel}: input {name!r} must be a torch.Tensor, "
                        f"received {type(x).__name__}{hint}")
    if x.device.type != "cpu":
        raise InputError(kernel, f"input {name!r}", "fuel_cy.torch: CPU tensors only",
                         f"a tensor on device {x.device}; move it with .cpu()")
    return x


def _as_numpy(kernel: str, name: str, t: torch.Tensor, dtypes: tuple[str, ...], strided: bool = False) -> np.ndarray:
    """The tensor's memory as a numpy array: a view, or one copy when it is not C-contiguous and
    the kernel's contract does not accept strided views of this input (`strided`)."""
    if type(t) is not torch.Tensor or not t.is_cpu:
        _check_tensor(kernel, name, t)
    if t.requires_grad:
        t = t.detach()  # .numpy() refuses tensors that require grad
    if not strided and not t.is_contiguous():
        t = t.contiguous()  # these kernels read C-contiguous memory only
    # An offset (storage_offset > 0) tensor needs no copy: its numpy view starts at the tensor's
    # first element and is owned by the tensor, so the kernels' start_offset check does not fire.
    if t.dtype == torch.bfloat16:  # numpy has no bf16: its memory, read as ml_dtypes.bfloat16
        return array_view(t.data_ptr(), t.shape, t.stride(), _BF16, t)
    if t.dtype == torch.int32 and dtypes == ("U32",):  # torch's usual index dtype, as the contract's U32
        if t.numel() and int(t.min()) < 0:
            raise InputError(kernel, f"input {name!r}", "fuel_cy.torch: int32 indices stand for U32",
                             f"a negative value {int(t.min())}")
        return t.numpy().view(np.uint32)
    return t.numpy()  # other dtypes pass through for the kernel to accept or reject


def _direct_view(t: Any, grad: bool) -> Optional[np.ndarray]:
    """A plain CPU tensor's memory as a numpy view, for a direct call of a numpy kernel; None
    when the op must run instead (another type or device, or a gradient to record)."""
    if type(t) is not torch.Tensor or not t.is_cpu:
        return None
    if t.requires_grad:
        if grad:
            return None
        t = t.detach()  # .numpy() refuses tensors that require grad
    if t.dtype is torch.bfloat16:  # numpy has no bf16: its memory, read as ml_dtypes.bfloat16
        return array_view(t.data_ptr(), t.shape, t.stride(), _BF16, t)
    return t.numpy()


def _as_tensor(a: np.ndarray) -> torch.Tensor:
    """A tensor over the kernel's fresh output array (no copy)."""
    if a.dtype == _BF16:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def _op_signature(kernel: Kernel, fn: Callable[..., Any]) -> inspect.Signature:
    """The numpy kernel's signature, annotated for torch.library's schema inference."""
    inputs = {spec.name: spec for spec in kernel.inputs}
    kinds = {f.name: f.base_kind for f in kernel.op_params.fields}
    buffers = {o.caller_buffer for o in kernel.returns.items if o.caller_buffer}
    params = []
    for p in inspect.signature(fn).parameters.values():
        if p.name in buffers:   # (an op returns fresh tensors; the public call copies into a given one)
            continue
        if p.name in inputs:
            ann: Any = Optional[torch.Tensor] if inputs[p.name].optional else torch.Tensor
        else:
            ann = _PARAM_TYPES.get(kinds[p.name], int)
            if p.default is None:
                ann = Optional[ann]
        params.append(p.replace(annotation=ann))
    n_out = len(kernel.returns.items)
    returns: Any = torch.Tensor if n_out == 1 else tuple[(torch.Tensor,) * n_out]  # type: ignore[misc]
    return inspect.Signature(params, return_annotation=returns)


def _strided_inputs(kernel: Kernel) -> frozenset[str]:
    """The inputs whose contract layout accepts strided views (read in place, not copied)."""
    return frozenset(spec.name for spec in kernel.inputs if spec.layout_policy("strided") == "accepted")


def _define(kernel: Kernel) -> tuple[Any, inspect.Signature]:
    """Register ``torch.ops.fuel_cy.<kernel>``: the CPU implementation and the fake one."""
    fn = registry[kernel.name].fn
    sig = _op_signature(kernel, fn)
    dtypes = {spec.name: spec.dtypes for spec in kernel.inputs}
    strided = _strided_inputs(kernel)

    requested = [o for o in kernel.returns.items if o.when]   # outputs returned on request

    def impl(*args: Any, **kwargs: Any) -> Any:
        call = sig.bind(*args, **kwargs).arguments
        for name, value in call.items():
            if name in dtypes and value is not None:
                call[name] = _as_numpy(kernel.name, name, value, dtypes[name], name in strided)
        out = fn(**call)
        if requested and not isinstance(out, tuple):
            # an op returns the same outputs every call: an output not asked for is an empty tensor
            out = (out, *(np.empty(0, call[o.dtype_source].dtype if o.dtype_source
                                   else DTYPES[o.dtype_fixed or "F32"].numpy_dtype()) for o in requested))
        return tuple(map(_as_tensor, out)) if isinstance(out, tuple) else _as_tensor(out)

    def fake(*args: Any, **kwargs: Any) -> Any:
        call = sig.bind(*args, **kwargs).arguments
        # every output is fresh and contiguous, with the shape and dtype its rules give
        first = call[kernel.inputs[0].name]
        outs = []
        for o in kernel.returns.items:
            dtype = _TORCH_DTYPES[o.dtype_fixed] if o.dtype_fixed else call[o.dtype_source].dtype
            if o.when and not call.get(o.when):
                outs.append(first.new_empty((0,), dtype=dtype))
            elif o.shape_dims is not None:
                shapes = {spec.name: tuple(call[spec.name].shape) for spec in kernel.inputs
                          if call.get(spec.name) is not None}
                outs.append(first.new_empty(tuple(f.evaluate({}, shapes) for f in o.shape_dims), dtype=dtype))
            else:
                outs.append(call[o.shape_source].new_empty(call[o.shape_source].shape, dtype=dtype))
        return tuple(outs) if len(outs) > 1 else outs[0]

    impl.__signature__ = sig  # type: ignore[attr-defined]
    op = torch.library.custom_op(f"fuel_cy::{kernel.name}", impl, mutates_args=())
    op.register_fake(fake)
    return op, sig


def _register_gradient(forward: Kernel, backward: Kernel, backward_op: Any, op: Any) -> None:
    """Make ``op`` differentiable in its tensor inputs through ``backward_op``.

    The backward kernel takes the forward's inputs plus the output's gradient (its one input the
    forward lacks) and returns one gradient per input its output rules name (dq for q, ...).
    Other inputs get no gradient: index inputs never need one; a float input (ALiBi slopes,
    attn_bias) that requires one is an error at backward, not a silent None.  A forward input
    the backward kernel does not take (block_table) must be absent.  A second output's gradient
    (attention_varlen's lse) goes to the backward's input named d<output> (dlse); a backward
    without one refuses a nonzero gradient there.  A backward input named after a forward output
    (attention_varlen_backward's out and lse) gets that output, saved, when the forward returned
    every such output (lse only with return_lse), else none of them.
    """
    names = [spec.name for spec in forward.inputs]
    taken = {spec.name for spec in backward.inputs}
    grad_input = next(spec.name for spec in backward.inputs if spec.name not in names)
    grad_of = {o.shape_source: i for i, o in enumerate(backward.returns.items)}
    params = [f.name for f in backward.op_params.fields]
    key_axis = {spec.name: spec.dims.index(_KEY_DIM) for spec in forward.inputs if _KEY_DIM in spec.dims}
    floats = {spec.name for spec in forward.inputs if any(DTYPES[d].is_float for d in spec.dtypes)}
    extra_outputs = [o.name for o in forward.returns.items[1:]]
    extra_grads = {f"d{name}" for name in extra_outputs} & taken
    output_names = [o.name for o in forward.returns.items]
    outputs_taken = [name for name in output_names if name in taken and name not in names]

    def refuse(clause: str, received: str) -> None:
        raise InputError(backward.name, "autograd", clause, received, "fuel_cy.torch")

    def setup_context(ctx: Any, inputs: tuple[Any, ...], keyword_only_inputs: dict[str, Any], output: Any) -> None:
        outs = dict(zip(output_names, output if isinstance(output, (tuple, list)) else (output,)))
        saved = [outs[name] for name in outputs_taken]
        if any(t is None or t.numel() == 0 for t in saved):   # (an output not asked for is empty)
            saved = []
        ctx.n_inputs = len(inputs)
        ctx.save_for_backward(*inputs, *saved)
        ctx.params = keyword_only_inputs

    def backward_fn(ctx: Any, grad: torch.Tensor, *more: Optional[torch.Tensor]) -> tuple[Optional[torch.Tensor], ...]:
        given: dict[str, Optional[torch.Tensor]] = dict.fromkeys(extra_grads)
        for name, g in zip(extra_outputs, more):
            if g is None or g.numel() == 0:   # (an output not asked for is an empty tensor)
                continue
            if f"d{name}" in extra_grads:
                given[f"d{name}"] = g.float().contiguous()
            elif bool(g.ne(0).any()):
                refuse(f"{forward.name}'s gradient is taken through its first output only",
                       f"a nonzero gradient for its output {name!r}")
        # (inputs after the last one the call passed are absent: their defaults, None)
        inputs: dict[str, Optional[torch.Tensor]] = dict.fromkeys(names)
        inputs.update(zip(names, ctx.saved_tensors[:ctx.n_inputs]))
        outputs = dict(zip(outputs_taken, ctx.saved_tensors[ctx.n_inputs:]))
        needs = tuple(ctx.needs_input_grad) + (False,) * len(names)
        for i, name in enumerate(names):
            if name not in taken and inputs[name] is not None:
                refuse(f"{backward.name} takes no {name!r} (see its contract's Limitations)",
                       f"a forward called with {name!r}")
            if needs[i] and name not in grad_of and name in floats:
                refuse(f"{backward.name} returns no gradient for {name!r}",
                       f"{name!r} requires grad; detach it (it is an input, not a variable, of the backward)")
        k_len = ctx.params.get("k_len")
        sliced = {name: t.narrow(key_axis[name], 0, k_len) if k_len is not None and name in key_axis
                  and t is not None else t for name, t in inputs.items()}
        args = [grad.contiguous() if spec.name == grad_input else given[spec.name] if spec.name in given
                else outputs.get(spec.name) if spec.name in outputs_taken else sliced[spec.name]
                for spec in backward.inputs]
        grads = backward_op(*args, **{p: ctx.params[p] for p in params})
        out: list[Optional[torch.Tensor]] = []
        for name in names:
            g = grads[grad_of[name]] if name in grad_of else None
            original = inputs[name]
            if g is not None and k_len is not None and name in key_axis and original is not None:
                # keys at or beyond k_len were never read: their gradient is zero
                axis = key_axis[name]
                pad = list(g.shape)
                pad[axis] = original.shape[axis] - k_len
                g = torch.cat([g, g.new_zeros(pad)], dim=axis)
            out.append(g)
        return tuple(out)

    op.register_autograd(backward_fn, setup_context=setup_context)


def _dispatch_needed() -> bool:
    """Whether torch must see the call as its op: under torch.compile, jit tracing or a dispatch
    mode (fake tensors, flop counters)."""
    return bool(torch.compiler.is_compiling() or torch.jit.is_tracing() or torch._C._len_torch_dispatch_stack())


def _public(kernel: Kernel, op: Any, sig: inspect.Signature, statistics: bool = False) -> Callable[..., Any]:
    """``fuel_cy.torch.<kernel>``: checks that the tensor inputs are CPU tensors, then calls the op,
    or the numpy kernel directly where the op would add nothing: plain CPU tensors, no gradient to
    record, nothing tracing (_dispatch_needed).  The op does what the direct call does (the same
    numpy kernel, the same bits); its dispatch cost ~30 us against a decode call's ~5 us of work.

    statistics: the kernel's backward takes the forward's out and lse, so a call that records a
    gradient in a dtype whose backward uses them (_STATISTICS_DTYPES) asks the op for its lse too
    and returns what the caller asked for: autograd saves both, and the backward runs in
    FlashAttention-2's order (the contracts' prose) instead of recomputing each row's statistics.

    The check is here, not only in the op, because the op sends meta tensors to its fake
    implementation; plain loops keep it traceable by torch.compile.
    """
    tensors = [(i, spec.name, spec.optional) for i, spec in enumerate(kernel.inputs)]
    requested = [o for o in kernel.returns.items if o.when]
    fn = registry[kernel.name].fn
    dtypes = {spec.name: spec.dtypes for spec in kernel.inputs}
    strided = _strided_inputs(kernel)
    n_in = len(tensors)
    buffers = [(n, o.caller_buffer) for n, o in enumerate(kernel.returns.items) if o.caller_buffer]

    def call(*args: Any, **kwargs: Any) -> Any:
        given = [(n, name, kwargs.pop(name)) for n, name in buffers if kwargs.get(name, None) is not None]
        for name in [b for _, b in buffers if b in kwargs]:
            del kwargs[name]   # (None: a new tensor)
        if given:
            inputs = [t for t in (*args, *kwargs.values()) if isinstance(t, torch.Tensor)]
            return _into_tensors(kernel.name, call(*args, **kwargs), given, inputs)
        direct = not _dispatch_needed()
        grad = direct and torch.is_grad_enabled()
        for i, name, optional in tensors:
            value = args[i] if i < len(args) else kwargs.get(name)
            if value is None and optional:
                continue
            if type(value) is not torch.Tensor or not value.is_cpu:
                _check_tensor(kernel.name, name, value)  # raises unless a CPU tensor (a subclass may pass)
                direct = False
            elif grad and value.requires_grad:
                direct = False
        if not direct:
            if statistics and _records_statistics(args[:n_in], kwargs, [name for _, name, _ in tensors]):
                bound = sig.bind(*args, **kwargs)
                if not bound.arguments.get("return_lse"):
                    bound.arguments["return_lse"] = True
                    return op(*bound.args, **bound.kwargs)[0]
            out = op(*args, **kwargs)
            if requested and not all(sig.bind(*args, **kwargs).arguments.get(o.when or "") for o in requested):
                return out[0]   # (the op's outputs that were not asked for are empty)
            return out
        arrays = [a if a is None else _as_numpy(kernel.name, tensors[i][1], a, dtypes[tensors[i][1]],
                                                tensors[i][1] in strided)
                  for i, a in enumerate(args[:n_in])]
        for name in dtypes.keys() & kwargs.keys():  # inputs passed by keyword
            if kwargs[name] is not None:
                kwargs[name] = _as_numpy(kernel.name, name, kwargs[name], dtypes[name], name in strided)
        out = fn(*arrays, *args[n_in:], **kwargs)
        return tuple(map(_as_tensor, out)) if isinstance(out, tuple) else _as_tensor(out)

    call.__name__ = call.__qualname__ = kernel.name
    call.__module__ = __name__
    call.__signature__ = sig.replace(parameters=[  # type: ignore[attr-defined]
        *sig.parameters.values(),
        *(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Optional[torch.Tensor])
          for _, name in buffers)])
    grad = (f" Differentiable in q, k and v through `{_GRADIENTS[kernel.name]}` (its other float inputs get no "
            "gradient: one that requires grad is an error at backward)."
            if kernel.name in _GRADIENTS else "")
    call.__doc__ = (f"{kernel.blurb}\n\n`fuel_cy.{kernel.name}` on CPU torch tensors (the op "
                    f"`torch.ops.fuel_cy.{kernel.name}`); same parameters, returns tensors that own the "
                    f"kernel's output memory. Non-contiguous inputs are copied once, except where the contract accepts strided views.{grad}")
    return call


def _span(t: torch.Tensor) -> tuple[int, int]:
    """The bytes [start, end) a tensor's elements can reach (an empty span for no elements)."""
    if t.numel() == 0:
        return (0, 0)
    reach = sum((n - 1) * abs(st) for n, st in zip(t.shape, t.stride()))
    start = t.data_ptr() - sum((n - 1) * -st for n, st in zip(t.shape, t.stride()) if st < 0) * t.element_size()
    return (start, start + (reach + 1) * t.element_size())


def _into_tensors(kernel: str, result: Any, given: list[tuple[int, str, Any]], inputs: list[torch.Tensor]) -> Any:
    """The kernel's result with each output written into the tensor the caller gave for it (its
    contract's caller_buffer), which is returned in its place.  As torch's out= functions, not
    differentiable; the tensor must have the output's dtype and shape and share no memory with
    an input (the numpy entry checks those for arrays; here the fresh result is copied in)."""
    outs = list(result) if isinstance(result, tuple) else [result]
    for n, name, buf in given:
        buf = _check_tensor(kernel, name, buf)
        ref = outs[n]
        if ref.requires_grad:
            raise InputError(kernel, f"param {name!r}", "fuel_cy.torch: an out= tensor is not differentiable "
                             "(as torch's out= functions)", "inputs that require grad; call it without out=")
        if buf.dtype != ref.dtype or tuple(buf.shape) != tuple(ref.shape):
            raise InputError(kernel, f"param {name!r}", "fuel_cy.torch: the output's dtype and shape",
                             f"received {buf.dtype} {tuple(buf.shape)}, the output is {ref.dtype} {tuple(ref.shape)}")
        lo, hi = _span(buf)
        for t in inputs:
            a, b = _span(t)
            if t.device == buf.device and a < hi and lo < b:
                raise InputError(kernel, f"param {name!r}", "fuel_cy.torch: the out= tensor shares no memory with an "
                                 "input", f"a tensor whose memory overlaps an input of shape {tuple(t.shape)}")
        buf.copy_(ref)
        outs[n] = buf
    return tuple(outs) if isinstance(result, tuple) else outs[0]


# the dtypes whose backward takes the forward's statistics (float32 compute; float64 recomputes)
_STATISTICS_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _records_statistics(args: tuple[Any, ...], kwargs: dict[str, Any], names: list[str]) -> bool:
    """Whether autograd records this call in a dtype whose backward takes out and lse."""
    given = [*args, *(kwargs.get(name) for name in names[len(args):])]
    tensors = [t for t in given if isinstance(t, torch.Tensor)]
    return (torch.is_grad_enabled() and bool(tensors) and tensors[0].dtype in _STATISTICS_DTYPES
            and any(t.requires_grad for t in tensors))


def _takes_statistics(forward: Kernel, backward: Kernel) -> bool:
    """The forward returns lse on request and its backward takes the forward's out and lse."""
    return ({"out", "lse"} <= {spec.name for spec in backward.inputs}
            and any(f.name == "return_lse" for f in forward.op_params.fields))


def _build() -> dict[str, Callable[..., Any]]:
    kernels = _contract_kernels()
    ops = {name: _define(kernels[name]) for name in registry}
    for fwd, bwd in _GRADIENTS.items():
        _register_gradient(kernels[fwd], kernels[bwd], ops[bwd][0], ops[fwd][0])
    return {name: _public(kernels[name], op, sig,
                          name in _GRADIENTS and _takes_statistics(kernels[name], kernels[_GRADIENTS[name]]))
            for name, (op, sig) in ops.items()}


_PUBLIC = _build()
globals().update(_PUBLIC)

_NUMPY_MASKED = registry["attention_masked"].fn
TORCH_OPS = ArrayOps(
    is_array=lambda x: isinstance(x, torch.Tensor),
    is_bool=lambda x: x.dtype == torch.bool,
    dtype_name=lambda x: str(x.dtype).removeprefix("torch."),
    zero_stride=lambda x, i: x.stride(i) == 0,
    broadcast_to=lambda x, shape: x.expand(shape),
    contiguous=lambda x: x.contiguous(),
)


def scaled_dot_product_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                                 attn_mask: Optional[torch.Tensor] = None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: Optional[float] = None,
                                 enable_gqa: bool = False, *, softcap: Optional[float] = None,
                                 round_p: bool = True) -> torch.Tensor:
    """`fuel_cy.scaled_dot_product_attention` on CPU tensors: the arguments of
    `torch.nn.functional.scaled_dot_product_attention`, run by the op
    `torch.ops.fuel_cy.attention_masked` (traceable by `torch.compile(fullgraph=True)`). An
    expanded mask (`expand`, stride 0) is read without being materialized. Differentiable in
    query, key and value (`attention_masked_backward`); a float `attn_mask` that requires grad is
    an error at backward (the kernel gives the bias no gradient). `round_p`: bf16/f16 softmax
    weights rounded to the input's type before they multiply V, as torch's CPU flash attention
    (False: kept float32)."""
    if not _dispatch_needed():
        # nothing for torch to record: the numpy entry on the tensors' memory, without the op's
        # dispatch (the same kernel, the same bits; a decode step's call is dominated by that cost).
        # q, k, v and the mask as they lie: attention_masked reads strided q, k, v, and the sdpa
        # mapping reads a broadcast mask's stride-0 dims as dims of 1 (contiguous where it must)
        grad = torch.is_grad_enabled()
        q, k, v = _direct_view(query, grad), _direct_view(key, grad), _direct_view(value, grad)
        m = None if attn_mask is None else _direct_view(attn_mask, grad)
        if q is not None and k is not None and v is not None and (m is not None or attn_mask is None):
            return _as_tensor(sdpa(NUMPY_OPS, _NUMPY_MASKED, q, k, v, m, dropout_p, is_causal, scale, enable_gqa,
                                   softcap, round_p))
    # (under autograd, fuel_cy.torch.attention_masked saves its out and lse for the backward)
    return sdpa(TORCH_OPS, _PUBLIC["attention_masked"], query, key, value, attn_mask, dropout_p, is_causal, scale,
                enable_gqa, softcap, round_p)


__all__ = [*_PUBLIC, "scaled_dot_product_attention"]

if TYPE_CHECKING:
    # the kernels are module attributes made at import; this tells type checkers they exist
    def __getattr__(name: str) -> Callable[..., Any]: ...
