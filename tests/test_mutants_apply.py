"""tests/mutants.py (run by hand: each mutant is a rebuild) must keep applying to the core as it
changes, or the mutation check silently stops checking anything."""
from __future__ import annotations

import pytest

from conftest import ROOT
from mutants import MUTANTS


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_every_mutant_still_applies_to_the_core(name):
    for rel, old, new in MUTANTS[name]:
        text = (ROOT / rel).read_text()
        assert old in text, f"{name}: {old!r} is no longer in {rel}"
        assert old != new
