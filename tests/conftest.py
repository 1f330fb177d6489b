from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SEED = Path(__file__).resolve().parent / "fixtures" / "seed_000_0c21e899a38409dc.txt"
CONTRACT = ROOT / "contracts" / "fuel-reference-backend.md"


@pytest.fixture(scope="session")
def seed_text() -> str:
    return SEED.read_text(encoding="utf-8")


@pytest.fixture(scope="session")
def canonical_text() -> str:
    return CONTRACT.read_text(encoding="utf-8")
