"""The kernel registry, built at import from the generated tables (one entry per kernel)."""
from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType
from typing import Any, Callable, Mapping

from .._generated import _kernels, _tables
from .kernel_entry import KernelEntry

__all__ = ["ENTRY_POINTS", "FUSED_OPS", "KernelEntry", "registry"]

if not all(isinstance(e, KernelEntry) for e in _tables.KERNELS):  # tables of an older generator
    raise ImportError("fuel_cy/_generated/_tables.py was generated for another fuel_cy: regenerate and rebuild")



def _not_built(name: str) -> Callable[..., Any]:
    """A kernel the tables list but the compiled extension lacks: the tables (Python) are written
    before the extension compiles, so a failed or interrupted build leaves them ahead of it.  The
    package must still import then (``fuel-cy build`` itself imports it to rebuild)."""
    def fn(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"fuel_cy.{name}: the compiled extension predates this kernel (its last build "
                           "failed or was interrupted); rebuild it: fuel-cy build")
    fn.__name__ = fn.__qualname__ = name
    return fn


registry: Mapping[str, KernelEntry] = MappingProxyType(
    {e.name: replace(e, fn=getattr(_kernels, e.name, None) or _not_built(e.name)) for e in _tables.KERNELS})
"""Kernel name -> KernelEntry, in contract order."""

ENTRY_POINTS: Mapping[str, Callable[..., Any]] = MappingProxyType(
    {e.entry_point: e.fn for e in registry.values()})
"""The provider's ``link_registry``: contract ``entry_point`` string -> callable."""

FUSED_OPS: Mapping[str, Mapping[str, Any]] = MappingProxyType(
    {name: MappingProxyType(dict(info)) for name, info in _tables.FUSED_OPS.items()})
