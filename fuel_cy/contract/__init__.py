"""Pure-Python contract layer: FKC documents -> validated frozen model (no Cython, no numpy)."""
from .errors import ContractError, Problem
from .expr import ExprError, Formula, parse_constraint
from .loader import (
    contract_files, default_contracts_dir, load_contract, load_contracts, parse_document,
    parse_fused_ops, text_hash,
)
from .model import ContractDoc, InputSpec, Kernel, ParamField, Provider

__all__ = [
    "ContractDoc", "ContractError", "ExprError", "Formula", "InputSpec", "Kernel", "ParamField",
    "Problem", "Provider", "contract_files", "default_contracts_dir", "load_contract",
    "load_contracts", "parse_constraint", "parse_document", "parse_fused_ops", "text_hash",
]
