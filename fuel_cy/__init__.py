"""fuel_cy: Cython CPU attention kernels generated from declarative kernel contracts.

>>> import numpy as np, fuel_cy
>>> q = np.random.rand(1, 8, 128, 64).astype(np.float32)
>>> out = fuel_cy.attention_flash(q, q, q, causal=True)
"""
from __future__ import annotations

import warnings

from .errors import ContractError, CpuCapabilityError, InputError, StaleBuildWarning

from .runtime._threads import get_num_threads, set_num_threads

__version__ = "0.1.0"  # pyproject.toml's [project] version, stated again (tests/test_cli.py checks they agree)


def _repair_advice() -> str:
    """The command that makes the compiled extension current for the way fuel_cy is installed
    (`fuel-cy build` in place from an editable checkout, a reinstall for a regular install).
    Only the missing/stale paths call it, so `import fuel_cy` never loads fuel_cy.workspace."""
    from .workspace import repair_advice

    return repair_advice()


def _rebuild_message() -> str:
    return f"fuel_cy's compiled extension is missing or was built from other sources: {_repair_advice()}"

try:
    from ._generated import _kernels as _ext  # noqa: F401  (the import is the check; it picks the CPU level)
    from ._generated import _tables
    from .runtime import registry as _registry  # noqa: F401  (built from the tables: stale ones fail here)
except (ImportError, CpuCapabilityError, KeyError) as _exc:
    # Keep the pure-Python layers (contract, codegen, cli) importable so `fuel-cy build` can
    # repair the install and the CLI can say what is wrong; everything compiled raises instead:
    # with the rebuild command, or with the CPU-level error (no level this CPU can run, or
    # FUEL_CY_CPU_CAPABILITY naming one it cannot).
    _BUILD_ERROR: "Exception | None" = _exc

    def __getattr__(name: str):  # noqa: D401
        if isinstance(_BUILD_ERROR, CpuCapabilityError):
            raise CpuCapabilityError(str(_BUILD_ERROR))
        raise ImportError(f"{_rebuild_message()} (while importing fuel_cy.{name}: {_BUILD_ERROR})")
else:
    _BUILD_ERROR = None
    from ._generated._kernels import *  # noqa: F401,F403  (the contract's kernels)
    from ._generated._kernels import __all__ as _kernel_names
    from .runtime.cost import CostReport, cost
    from .runtime.dispatch import Plan, dispatch, plan
    from .runtime.registry import ENTRY_POINTS, FUSED_OPS, KernelEntry, registry
    from .sdpa import scaled_dot_product_attention



def build_info() -> dict:
    """How the extension was built and which CPU level runs here.

    ``cpu_capabilities`` lists the compiled levels (most portable first) and ``levels`` gives each
    one's compiler flags and the CPU features it needs; ``cpu_capability`` is the level in use in
    this process (the fastest this CPU supports, or ``FUEL_CY_CPU_CAPABILITY``), and ``cpu`` /
    ``cpu_features`` describe the CPU it was chosen for.
    """
    import copy

    from ._generated._build_info import BUILD_INFO
    from .runtime import cpu

    info = copy.deepcopy(BUILD_INFO)
    info["cpu_capability"] = cpu.capability()
    info["supported_capabilities"] = list(cpu.supported_levels())
    info["cpu"] = cpu.cpu_name()
    info["cpu_features"] = sorted(cpu.cpu_features())
    return info


def _check_stale() -> None:
    from .contract.files import default_contracts_dir, text_hash

    try:
        folder = default_contracts_dir()
    except ContractError:
        return
    for name, digest in _tables.CONTRACT_HASHES.items():
        path = folder / name
        if path.exists() and text_hash(path.read_text(encoding="utf-8")) != digest:
            warnings.warn(f"contract {path} changed since the extension was built; to make code and "
                          f"contract agree, {_repair_advice()}",
                          StaleBuildWarning, stacklevel=3)


if _BUILD_ERROR is None:
    _check_stale()

__all__ = [*(_kernel_names if _BUILD_ERROR is None else []), "ContractError", "CostReport", "CpuCapabilityError",
           "ENTRY_POINTS", "FUSED_OPS", "InputError",
           "KernelEntry", "Plan", "StaleBuildWarning", "build_info", "cost", "dispatch",
           "get_num_threads", "plan", "registry", "set_num_threads"]
