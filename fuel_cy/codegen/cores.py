"""How contract kernels bind to the hand-written core: which driver (drivers_api.pxi) implements
each kernel, what that driver takes (inputs, dims, outputs, params), and the element policy each
dtype runs under.  Codegen refuses to wire a kernel that is not listed here (it gets a stub that
raises NotImplementedError), and refuses to generate when a bound kernel's contract no longer fits
its driver (check_binding)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Optional

from ..contract.model import Kernel
from ..dtypes import DTYPES

CORES_FILE = "fuel_cy/codegen/cores.py"


@dataclass(frozen=True)
class DriverInput:
    """An input a driver takes, in the contract's spelling."""

    name: str
    dtype: str  # "T": a float input of the kernel's element type; else the dtype it reads (own-typed)
    optional: bool = False  # NULL when the caller leaves it out

    def __str__(self) -> str:
        return f"{self.name}: {self.dtype}" + (" (optional)" if self.optional else "")


@dataclass(frozen=True)
class Driver:
    """A `drive_<name>` function of the core (drivers_api.pxi): what it takes.  A kernel bound
    to it must declare these inputs, in this order, the dims (on its required inputs), the
    outputs and the params it reads with params[...]: checked at generate time (check_binding)."""

    name: str
    dims: tuple[str, ...]  # dim symbols (contract spelling) of the tuple it takes, in order
    inputs: tuple[DriverInput, ...]
    outputs: tuple[str, ...]
    params: tuple[str, ...]  # the params it requires (the others it reads with params.get)
    mask_alignment: str = "top_left"  # where its causal masks and windows put query i (contract schema)


_SLOPES = DriverInput("alibi_slopes", "T", optional=True)
FORWARD_DIMS = ("B", "Hq", "Hkv", "Sq", "Sk", "D")
PAGED_DIMS = ("B", "Hq", "Hkv", "Sq", "D", "block_size", "max_blocks_per_seq", "num_blocks")
FORWARD_INPUTS = (DriverInput("q", "T"), DriverInput("k", "T"), DriverInput("v", "T"), _SLOPES)
NAIVE = Driver("attention_naive", FORWARD_DIMS, FORWARD_INPUTS, ("out",), ("softmax_scale",))
FLASH = Driver("attention_flash", FORWARD_DIMS, FORWARD_INPUTS, ("out",), ("softmax_scale",))
PAGED = Driver("attention_paged_naive", PAGED_DIMS,
               (DriverInput("q", "T"), DriverInput("k_cache", "T"), DriverInput("v_cache", "T"),
                DriverInput("block_table", "U32"), DriverInput("context_lens", "U32"), _SLOPES),
               ("out",), ("softmax_scale",))
BACKWARD = Driver("attention_flash_backward", FORWARD_DIMS,
                  (DriverInput("q", "T"), DriverInput("k", "T"), DriverInput("v", "T"), DriverInput("do_grad", "T"),
                   _SLOPES),
                  ("dq", "dk", "dv"), ("softmax_scale",))

# fuel_cy's mixed flash and its backward (contracts/fuel-cy-mixed.md) take bf16/f16 only, so they
# bind to the half drivers alone: the founding FLASH and BACKWARD above are the founding
# contract's signatures, which cannot grow the forward's lse or the backward's dlse, out and lse
FLASH_HALF = Driver("attention_flash_half", FORWARD_DIMS, FORWARD_INPUTS, ("out", "lse"), ("softmax_scale",))
BACKWARD_HALF = Driver("attention_flash_backward_half", FORWARD_DIMS,
                       (*BACKWARD.inputs, DriverInput("dlse", "F32", optional=True),
                        DriverInput("out", "T", optional=True), DriverInput("lse", "F32", optional=True)),
                       ("dq", "dk", "dv"), ("softmax_scale",))

# the varlen drivers' index arrays: uint32, or int32 as flash-attn and torch make them (the entry
# hands a validated int32 array's data to the drivers as the uint32 it equals: entries.pxi)
INDEX = "U32|I32"
VARLEN = Driver("attention_varlen", ("Tq", "NB", "BS", "B1", "Hq", "Hkv", "D"),
                (DriverInput("q", "T"), DriverInput("k", "T"), DriverInput("v", "T"),
                 DriverInput("cu_seqlens_q", INDEX), DriverInput("cu_seqlens_k", INDEX),
                 DriverInput("alibi_slopes", "F32", optional=True), DriverInput("block_table", INDEX, optional=True),
                 DriverInput("seqused_k", INDEX, optional=True)),
                ("out", "lse"), ("softmax_scale",), mask_alignment="bottom_right")

MASKED = Driver("attention_masked", FORWARD_DIMS,
                (DriverInput("q", "T"), DriverInput("k", "T"), DriverInput("v", "T"),
                 DriverInput("attn_mask", "BOOL", optional=True), DriverInput("attn_bias", "T", optional=True)),
                ("out", "lse"), ("softmax_scale",))

# the backward of each model-facing forward: the forward's inputs with do_grad after v (packed
# keys only for varlen: no block_table), then the gradient of the forward's lse and, optional
# together, the forward's out and lse
VARLEN_BACKWARD = Driver("attention_varlen_backward", VARLEN.dims,
                         (DriverInput("q", "T"), DriverInput("k", "T"), DriverInput("v", "T"),
                          DriverInput("do_grad", "T"), DriverInput("cu_seqlens_q", INDEX),
                          DriverInput("cu_seqlens_k", INDEX), DriverInput("alibi_slopes", "F32", optional=True),
                          DriverInput("seqused_k", INDEX, optional=True), DriverInput("dlse", "F32", optional=True),
                          DriverInput("out", "T", optional=True), DriverInput("lse", "F32", optional=True)),
                         ("dq", "dk", "dv"), ("softmax_scale",), mask_alignment="bottom_right")

MASKED_BACKWARD = Driver("attention_masked_backward", FORWARD_DIMS,
                         (DriverInput("q", "T"), DriverInput("k", "T"), DriverInput("v", "T"),
                          DriverInput("do_grad", "T"), DriverInput("attn_mask", "BOOL", optional=True),
                          DriverInput("attn_bias", "T", optional=True), DriverInput("dlse", "F32", optional=True),
                          DriverInput("out", "T", optional=True), DriverInput("lse", "F32", optional=True)),
                         ("dq", "dk", "dv"), ("softmax_scale",))


@dataclass(frozen=True)
class CoreBinding:
    """One kernel's implementation in the core."""

    driver: Driver  # drive_<driver.name> (also the key of _prose_checks.RULES)
    # bf16/f16 calls go to drive_<half_driver> instead, which takes the driver's arguments and
    # is_f16 last, and reads the `half_storage` inputs in their 16-bit storage (uint16 views,
    # never widened copies)
    half_driver: Optional[str] = None
    half_storage: tuple[str, ...] = ()

    @property
    def dims(self) -> tuple[str, ...]:
        return self.driver.dims


BINDINGS: Mapping[str, CoreBinding] = {
    "attention_naive": CoreBinding(NAIVE),
    "attention_flash": CoreBinding(FLASH),
    # a bf16/f16 pool is read in place (decode is bound by the pool's bytes; a pool may be far
    # larger than the blocks a call reads)
    "attention_paged_naive": CoreBinding(PAGED, half_driver="attention_paged_half", half_storage=("k_cache", "v_cache")),
    "attention_flash_backward": CoreBinding(BACKWARD),
    # fuel_cy's mixed-precision kernels (contracts/fuel-cy-mixed.md): the founding kernels' loops,
    # run under the float32 policy (precision.compute: f32); the flash and its backward through
    # the half drivers' own signatures (lse, and the backward's dlse, out and lse)
    # bf16 scores by vdpbf16ps where the CPU level has AVX512-BF16, AMX tiles where the CPU has them
    "attention_flash_mixed": CoreBinding(FLASH_HALF, half_driver="attention_flash_half"),
    "attention_paged_mixed": CoreBinding(PAGED, half_driver="attention_paged_half", half_storage=("k_cache", "v_cache")),
    "attention_flash_backward_mixed": CoreBinding(BACKWARD_HALF, half_driver="attention_flash_backward_half"),
    # the model-facing kernels (contracts/fuel-cy-model.md): f32/f64 in their own type, bf16/f16
    # under the float32 policy with the bf16 scores of attention_flash_half
    # bf16/f16 q, k and v in their storage: each sequence's keys are gathered as it runs (a paged
    # pool costs only the blocks a call reads), its q read and its output rounded as the half flash's
    "attention_varlen": CoreBinding(VARLEN, half_driver="attention_varlen_half", half_storage=("q", "k", "v")),
    "attention_masked": CoreBinding(MASKED, half_driver="attention_masked_half"),
    # their backwards: bf16/f16 widened exactly, float32 math (the mixed backward's numerics)
    "attention_varlen_backward": CoreBinding(VARLEN_BACKWARD, half_driver="attention_varlen_backward_half"),
    "attention_masked_backward": CoreBinding(MASKED_BACKWARD, half_driver="attention_masked_backward_half"),
}
"""Kernel name -> its binding.  A kernel not listed gets a stub that raises NotImplementedError."""


def check_binding(kernel: Kernel, binding: CoreBinding, report: Callable[[str, str], None]) -> None:
    """Does the contract of `kernel` still fit the driver it is bound to?  Each misfit goes to
    report(key path, message), so an edited contract fails at generate time with the reason,
    not in the C compiler or at run time."""
    d = binding.driver
    bound = f"bound to drive_{d.name} ({CORES_FILE} BINDINGS)"
    have = tuple(DriverInput(s.name, "T" if s.shares_t else "|".join(s.dtypes), s.optional) for s in kernel.inputs)
    if have != d.inputs:
        report("accept.inputs", f"{bound}, which takes the inputs ({', '.join(map(str, d.inputs))}) in this order; "
                                f"the contract declares ({', '.join(map(str, have))})")
    required = {sym for s in kernel.inputs if not s.optional for sym in s.dims}
    missing = [sym for sym in d.dims if sym not in required]
    if missing:
        report("accept.inputs", f"{bound}, which takes the dims ({', '.join(d.dims)}); no required input of the "
                                f"contract has {', '.join(missing)}")
    outputs = tuple(o.name for o in kernel.returns.items)
    if outputs != d.outputs:
        report("return", f"{bound}, which writes the outputs ({', '.join(d.outputs)}); the contract returns "
                         f"({', '.join(outputs)})")
    params = {f.name for f in kernel.op_params.fields}
    for name in d.params:
        if name not in params:
            report("op_params.fields", f"{bound}, which reads the param {name!r}; the contract has none")
    if kernel.mask_alignment != d.mask_alignment:
        report("mask_alignment", f"{bound}, whose masks are aligned {d.mask_alignment}; the contract declares "
                                 f"{kernel.mask_alignment}")
    names = {s.name for s in kernel.inputs}
    for name in binding.half_storage:
        if name not in names:
            report("accept.inputs", f"{bound}, whose half driver reads the input {name!r} in 16-bit storage; "
                                    "the contract has no such input")


# contract dtype -> (rounding tag, C work type, numpy work dtype) under "math in T", and each
# integer dtype's (C type, numpy dtype) as the drivers read it: from the dtype record
POLICIES: Mapping[str, tuple[str, str, str]] = {
    code: d.policy for code, d in DTYPES.items() if d.policy is not None}
INT_WORK: Mapping[str, tuple[str, str]] = {
    code: (d.work_ctype, d.work_numpy) for code, d in DTYPES.items() if not d.is_float}

CORE_SOURCES = ("fc_math.h", "fc_simd.h", "fc_isa.h", "fc_uarch.h", "fc_cpuid.h", "fc_gemm.h", "fc_gemm_f16.h",
                "fc_amx.h", "fc_f16_tiles.h", "fc_half.h", "fc_pack.h", "fc_decode16.h", "fc_exp.h",
                "fc_testhooks.h", "fc_interrupt.h", "fastcheck.pxi", "policy.pxi", "blocks.pxi", "kernels.pxi",
                "drivers_api.pxi", "drivers.pxi", "entries.pxi", "peak.pxi", "test_hooks.pxi", "fc_peak.h")
