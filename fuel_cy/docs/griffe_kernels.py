"""Griffe extension for the API reference (mkdocstrings): the contract kernels as griffe sees them.

The kernels are defined by the compiled extension (`from ._generated._kernels import *`) and
`fuel_cy.torch` / `fuel_cy.dask` make their functions at import time, so static analysis of the
source tree finds none of them -- and a source tree that was not built has no `_generated/` at
all. This extension adds them from the contracts instead, through the same pipeline that writes
the kernels' docstrings (`codegen.view.kernel_view` + `codegen.pydocs`): `fuel_cy.<kernel>` with
its Python signature and NumPy docstring, `fuel_cy.torch.<kernel>` and `fuel_cy.dask.<kernel>`
with their signatures and a pointer to it. So `mkdocs build` documents the public names whether
or not the package is built or installed.

mkdocs.yml: `extensions: [fuel_cy/docs/griffe_kernels.py:ContractKernels]`.
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import Any

import griffe

ROOT = Path(__file__).resolve().parents[2]


def _codegen():
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from fuel_cy.codegen import stubs

    return stubs


class ContractKernels(griffe.Extension):
    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        if pkg.name != "fuel_cy":
            return
        stubs = _codegen()
        # the wildcard import of the compiled module: expanded (built tree) or dangling (not built)
        for name, member in list(pkg.members.items()):
            if member.is_alias and (getattr(member, "wildcard", None) or "_generated" in getattr(member, "target_path", "")):
                pkg.del_member(name)
        gradients = self._literal(pkg, "torch", "_GRADIENTS") or {}
        modules = {"fuel_cy": stubs.numpy_stub_source(ROOT),
                   "fuel_cy.torch": stubs.torch_stub_source(ROOT, gradients),
                   "fuel_cy.dask": stubs.dask_stub_source(ROOT)}
        for path, code in modules.items():
            target = pkg if path == "fuel_cy" else pkg.members.get(path.split(".")[1])
            if target is None or target.is_alias:
                continue
            stub = griffe.visit(path, filepath=Path(str(target.filepath)), code=code,
                                docstring_parser=loader.docstring_parser, docstring_options=loader.docstring_options)
            for name, member in stub.members.items():
                if not member.is_alias and member.is_function:
                    if name in target.members:
                        target.del_member(name)
                    target.set_member(name, member)
                    member.runtime = False

    @staticmethod
    def _literal(pkg: griffe.Module, module: str, name: str) -> Any:
        try:
            return ast.literal_eval(str(getattr(pkg.members[module].members[name], "value")))
        except (KeyError, ValueError, SyntaxError, AttributeError):
            return None
