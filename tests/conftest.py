from __future__ import annotations

import os
import shutil
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


def system_tool(*names: str, why: str) -> str:
    """The path of the first of `names` on PATH.  A Debian tool some checks need (chromium,
    chromedriver, qemu-x86_64) that is missing fails the test where CI promised it
    (FUEL_CY_REQUIRE_SYSTEM_TOOLS=1: .ci/run installs the tools and sets it), and otherwise skips
    it saying what to install, so the README's test command passes on a fresh machine."""
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    message = f"{' / '.join(names)} not installed ({why}): apt-get install it, as .ci/run does"
    if os.environ.get("FUEL_CY_REQUIRE_SYSTEM_TOOLS") == "1":
        pytest.fail(message + " [FUEL_CY_REQUIRE_SYSTEM_TOOLS=1]")
    pytest.skip(message)


def input_error_of(fn, *args, **kwargs):
    """str() of the fuel_cy.InputError that fn(*args, **kwargs) raises; None when it returns."""
    import fuel_cy

    try:
        fn(*args, **kwargs)
    except fuel_cy.InputError as exc:
        return str(exc)
    return None


def each_bf16_score_form():
    """Run the loop body once per form the bf16 products take at this CPU level (vdpbf16ps, the
    tiles emulated, AMX where granted), then restore the CPU's choice; at a level without
    AVX512-BF16 (a lower level forced on any CPU) once, as None: the kernels take the float32
    loops there and there is no form to switch."""
    from fuel_cy.runtime.cpu import core

    c = core()
    if not c._test_bf16_score_forms():
        yield None
        return
    chosen = c._test_bf16_score_form()
    try:
        for form in c._test_bf16_score_forms():
            assert c._test_bf16_score_form(form) == form
            yield form
    finally:
        c._test_bf16_score_form(chosen)
