"""Pure-Python contract layer: FKC documents -> validated frozen model (no Cython, no numpy).

The names below load on first use: `import fuel_cy` needs ContractError and the file helpers
only, not the YAML parser and model builder (half of the package's import time otherwise).
"""
from __future__ import annotations

import importlib
from typing import Any

from .errors import ContractError, Problem
from .files import contract_files, default_contracts_dir, text_hash

_LAZY = {
    "ExprError": "expr", "Formula": "expr", "parse_constraint": "expr",
    "load_contract": "loader", "load_contracts": "loader", "parse_document": "loader",
    "parse_fused_ops": "loader",
    "ContractDoc": "model", "InputSpec": "model", "Kernel": "model", "ParamField": "model", "Provider": "model",
}

__all__ = [
    "ContractDoc", "ContractError", "ExprError", "Formula", "InputSpec", "Kernel", "ParamField",
    "Problem", "Provider", "contract_files", "default_contracts_dir", "load_contract",
    "load_contracts", "parse_constraint", "parse_document", "parse_fused_ops", "text_hash",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
