"""Where contracts live and how their text is fingerprinted: light enough for `import fuel_cy`,
which checks at import that the contracts did not change since the build (no YAML needed)."""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Union

from .errors import ContractError

FUSED_OPS_FILE = "fused_ops.yaml"


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def contract_files(directory: Union[str, Path]) -> list[Path]:
    return sorted(p for p in Path(directory).glob("*.md") if p.is_file())


def default_contracts_dir() -> Path:
    """The repo's ``contracts/`` in a source checkout, else the copy packaged at build time."""
    here = Path(__file__).resolve().parent.parent
    for candidate in (here.parent / "contracts", here / "_generated" / "contracts"):
        if (candidate / FUSED_OPS_FILE).is_file():
            return candidate
    raise ContractError("no contracts directory found (looked for ./contracts and the packaged copy)")
