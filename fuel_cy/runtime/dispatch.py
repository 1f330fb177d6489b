"""Route a fused op to its implementation as the contract wires it, planning awkward layouts."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Union

import numpy as np

from ..errors import InputError
from ._validation import LAYOUT_PREDICATES, dtype_code
from .registry import FUSED_OPS, KernelEntry, registry


@dataclass(frozen=True)
class Plan:
    """What dispatch will run: the kernel, the output it returns, and the copies it inserts.

    Attributes
    ----------
    fused_op : str
        The fused op asked for, by name (`"FLASH_ATTN"`).
    kernel : str
        The kernel that serves it (`"attention_naive"`, or the `impl=` asked for).
    output : str or None
        For the single-gradient ops (`FLASH_ATTN_BACKWARD_Q`, `_K`, `_V`): which output of the
        backward bundle is returned; None otherwise.
    copies : tuple of (str, int)
        Each input dispatch makes C-contiguous first, with the bytes of that copy.
    """

    fused_op: str
    kernel: str
    output: Optional[str]  # for single-gradient ops: which bundle member is returned
    copies: tuple[tuple[str, int], ...] = field(default=())  # (input, bytes) made contiguous

    @property
    def copy_bytes(self) -> int:
        """Bytes read + written by the contiguous copies made of strided inputs."""
        return sum(2 * n for _, n in self.copies)


def resolve_op(fused_op: Union[str, int]) -> str:
    if isinstance(fused_op, (int, np.integer)) and not isinstance(fused_op, bool):
        for name, info in FUSED_OPS.items():
            if info["id"] == int(fused_op):
                return name
        raise InputError("dispatch", "fused_op", "contracts/fused_ops.yaml", f"no fused op has id {int(fused_op)}")
    if isinstance(fused_op, str) and fused_op in FUSED_OPS:
        return fused_op
    raise InputError("dispatch", "fused_op", "contracts/fused_ops.yaml",
                     f"unknown fused op {fused_op!r} (known: {', '.join(FUSED_OPS)})")


def _kernel_for(op: str, impl: Optional[str]) -> tuple[KernelEntry, Optional[str]]:
    info = FUSED_OPS[op]
    if info["bundle_of"]:
        target, output = info["bundle_of"], info["bundle_output"]
    else:
        target, output = info["exec_arm"], None
    if impl is not None:
        entry = registry.get(impl)
        siblings = [k.name for k in registry.values() if k.fused_op == op or k.name == target]
        if entry is None or impl not in siblings:
            raise InputError("dispatch", "impl", f"fused op {op}",
                             f"{impl!r} is not an implementation at this key (choose from {siblings})")
        target = impl
    if target is None or target not in registry:
        raise InputError("dispatch", "fused_op", "contracts/fused_ops.yaml", f"{op} is wired to no kernel")
    return registry[target], output


def plan(fused_op: Union[str, int], *inputs: Any, impl: Optional[str] = None) -> Plan:
    """How `dispatch` would run ``fused_op`` on ``inputs``, without running it: the kernel it
    picks (or ``impl``), the inputs it would copy to contiguous arrays and what those copies cost."""
    op = resolve_op(fused_op)
    entry, output = _kernel_for(op, impl)
    exec_dtypes = FUSED_OPS[op]["exec_dtypes"]
    first = next((x for x in inputs if isinstance(x, np.ndarray)), None)
    if exec_dtypes and first is not None and dtype_code(first.dtype) not in exec_dtypes:
        raise InputError("dispatch", "input 'q'", f"{op} exec dtypes {list(exec_dtypes)}",
                         f"received {first.dtype}; call fuel_cy.{entry.name} directly for other dtypes")
    copies = []
    if entry.awkward_layout_strategy == "requires_contiguous":
        for name, x in zip(entry.inputs, inputs):
            if isinstance(x, np.ndarray) and _awkward(x):
                copies.append((name, int(x.nbytes)))
    return Plan(op, entry.name, output, tuple(copies))


def _awkward(x: np.ndarray) -> bool:
    return any(LAYOUT_PREDICATES[key](x) for key in ("strided", "broadcast_stride0", "reverse_strides", "start_offset"))


def dispatch(fused_op: Union[str, int], *inputs: Any, impl: Optional[str] = None,
             return_plan: bool = False, **params: Any) -> Any:
    """Run ``fused_op`` (its name, or its numeric id) on ``inputs`` the way the contract wires it.

    FLASH_ATTN runs the kernel the contract wires to it, ``attention_naive`` (f32/f64 only), or a
    sibling implementation at the same key via ``impl="attention_flash"``; the three backward ids return
    their one gradient of the shared bundle.  Inputs in an awkward layout are copied to fresh
    contiguous arrays first (one copy each, counted in the plan); ``return_plan=True`` returns
    ``(result, plan)`` so the copies' cost is visible.
    """
    p = plan(fused_op, *inputs, impl=impl)
    entry = registry[p.kernel]
    copied = {name for name, _ in p.copies}
    args = [np.array(x, order="C", copy=True) if name in copied else x
            for name, x in zip(entry.inputs, inputs)]
    args += list(inputs[len(entry.inputs):])
    result = entry.fn(*args, **params)
    if p.output is not None:
        result = result[entry.outputs.index(p.output)]
    return (result, p) if return_plan else result
