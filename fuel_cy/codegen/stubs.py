"""Python source of documentation stubs for the contract kernels (read by the griffe extension of
the API reference): `fuel_cy.<kernel>` with the docstring the compiled kernel carries, and the
`fuel_cy.torch` / `fuel_cy.dask` functions that are made at import time."""
from __future__ import annotations

from pathlib import Path

from .generate import Layout, views
from .pydocs import PyArg
from .view import KernelView


def kernel_views(root: Path) -> tuple[KernelView, ...]:
    """The view of every contract kernel (its docstring included), in contract order."""
    return views(Layout(root), check_core=False).kernels


def _quote(text: str) -> str:
    body = text.replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    return '    """' + body.replace("\n", "\n    ") + '\n    """'


def _function(view: KernelView, array: str, returns: str, doc: str) -> str:
    py = view.py

    def arg(a: PyArg) -> str:
        t = a.type.replace("numpy.ndarray", array)
        return f"    {a.name}: {t}" + ("" if a.default is None else f" = {a.default}") + ","

    lines = [f"def {view.name}("] + [arg(a) for a in py.inputs]
    if py.params:
        lines += ["    *,"] + [arg(p) for p in py.params]
    lines += [f") -> {returns}:", _quote(doc), "    ...", "", ""]
    return "\n".join(lines)


def _returns(view: KernelView, array: str) -> str:
    outs = view.py.outputs
    if view.py.bundle:
        return f"tuple[{', '.join(array for _ in outs)}]"
    if len(outs) > 1:   # outputs returned on request (the contract's `when`): the first, or all
        return f"{array} | tuple[{', '.join(array for _ in outs)}]"
    return array


def numpy_stub_source(root: Path) -> str:
    parts = ["import numpy", "", ""]
    for v in kernel_views(root):
        parts.append(_function(v, "numpy.ndarray", _returns(v, "numpy.ndarray"), v.docstring))
    return "\n".join(parts)


def torch_stub_source(root: Path, gradients: dict[str, str]) -> str:
    parts = ["import torch", "", ""]
    for v in kernel_views(root):
        name = v.name
        grad = (f" Differentiable in `q`, `k` and `v` through [`fuel_cy.{gradients[name]}`][fuel_cy.{gradients[name]}]"
                f" (ALiBi slopes get no gradient)." if name in gradients else "")
        doc = (f"{v.py.summary}\n\n[`fuel_cy.{name}`][fuel_cy.{name}] on CPU `torch.Tensor`s, registered as the "
               f"custom op `torch.ops.fuel_cy.{name}`, so autograd and `torch.compile(fullgraph=True)` see it. "
               f"Arguments, defaults and outputs are those of `fuel_cy.{name}`, as tensors that own the kernel's "
               f"output memory; a non-contiguous tensor is copied once, and int32 block tables and context lengths "
               f"are read as uint32.{grad}")
        parts.append(_function(v, "torch.Tensor", _returns(v, "torch.Tensor"), doc))
    return "\n".join(parts)


def dask_stub_source(root: Path) -> str:
    parts = ["import dask.array", "import numpy", "", ""]
    for v in kernel_views(root):
        name = v.name
        batch = v.py.inputs[0].shape[0] if v.py.inputs[0].shape else "B"
        doc = (f"{v.py.summary}\n\nDask version of [`fuel_cy.{name}`][fuel_cy.{name}], one task per chunk of "
               f"`{v.py.inputs[0].name}` along `{batch}`: inputs whose first dim is `{batch}` are cut at those "
               f"chunks, the others go whole to every task. Same arguments and defaults (arrays may be Dask or "
               f"NumPy); returns Dask arrays" + (" (a tuple)." if v.py.bundle else "."))
        parts.append(_function(v, "dask.array.Array | numpy.ndarray", _returns(v, "dask.array.Array"), doc))
    return "\n".join(parts)
