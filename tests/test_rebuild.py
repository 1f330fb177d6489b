"""Edit a contract in a temporary copy of the project, rebuild, and see the package follow."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import ROOT

SCRIPT = Path(sys.executable).with_name("fuel-cy")
pytestmark = pytest.mark.rebuild


def _copy_project(dest: Path) -> Path:
    ignore = shutil.ignore_patterns("*.so", "*.c", "__pycache__", "build", ".venv", ".git", "*.egg-info")
    for name in ("contracts", "templates", "fuel_cy"):
        shutil.copytree(ROOT / name, dest / name, ignore=ignore)
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, dest / name)
    return dest


def _edit(contract: Path) -> None:
    text = contract.read_text()
    # 1. attention_naive's q no longer accepts BF16 (the first q input in the file is naive's)
    text = text.replace("    - name: q\n      dtypes: [F32, F64, BF16, F16]", "    - name: q\n      dtypes: [F32, F64, F16]", 1)
    # 2. attention_naive's flops formula changes
    text = text.replace('flops: "4 * b * hq * sq * sk * d"', 'flops: "8 * b * hq * sq * sk * d"', 1)
    # 3. attention_flash's q accepts views that start past their buffer's start
    at = text.index("kernel: attention_flash\n")
    text = text[:at] + text[at:].replace("start_offset: rejected", "start_offset: accepted", 1)
    contract.write_text(text)


@pytest.fixture(scope="module")
def rebuilt(tmp_path_factory):
    proj = _copy_project(tmp_path_factory.mktemp("proj"))
    _edit(proj / "contracts" / "fuel-reference-backend.md")
    # one CPU level is enough to follow a contract edit (tests/test_cpu_levels.py covers the levels)
    import fuel_cy.runtime.cpu

    env = {**os.environ, "FUEL_CY_OPT": "-O1", "FUEL_CY_CPU_LEVELS": fuel_cy.runtime.cpu.capability()}
    stale = subprocess.run([str(SCRIPT), "generate", "--check", "--root", str(proj)], capture_output=True, text=True, env=env)
    build = subprocess.run([str(SCRIPT), "build", "--root", str(proj)], capture_output=True, text=True, env=env, timeout=900)
    fresh = subprocess.run([str(SCRIPT), "generate", "--check", "--root", str(proj)], capture_output=True, text=True, env=env)
    return proj, stale, build, fresh


def _python(proj: Path, code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(proj)}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, cwd=proj, env=env)


def test_check_detects_stale_then_build_makes_it_fresh(rebuilt):
    proj, stale, build, fresh = rebuilt
    assert stale.returncode == 1 and "out of date" in stale.stdout
    assert build.returncode == 0, build.stdout + build.stderr
    assert "[3/3] compiling" in build.stderr
    assert fresh.returncode == 0, fresh.stdout
    # setup.py recorded what it compiled, once it had compiled it (not judged by file times)
    assert "the compiled extension in" in fresh.stdout and "was built from these sources" in fresh.stdout


def test_removed_dtype_is_rejected_citing_the_contract(rebuilt):
    proj = rebuilt[0]
    r = _python(proj, """
        import numpy as np, ml_dtypes, fuel_cy
        assert fuel_cy.__file__.startswith(%r), fuel_cy.__file__
        q = np.ones((1, 2, 3, 4), ml_dtypes.bfloat16)
        try:
            fuel_cy.attention_naive(q, q, q)
            print("accepted")
        except fuel_cy.InputError as e:
            print("rejected:", e)
        print("flash:", fuel_cy.attention_flash(q, q, q).dtype)
    """ % str(proj))
    assert r.returncode == 0, r.stderr
    assert "rejected: attention_naive: input 'q': accept.inputs[0].dtypes ['F32', 'F64', 'F16']" in r.stdout
    assert "fuel-reference-backend.md:" in r.stdout and "flash: bfloat16" in r.stdout


def test_cost_formula_edit_changes_cost(rebuilt):
    r = _python(rebuilt[0], """
        import fuel_cy
        s = (2, 8, 128, 64), (2, 2, 256, 64), (2, 2, 256, 64)
        print(fuel_cy.cost("attention_naive", *s).flops, fuel_cy.cost("attention_flash", *s).flops)
    """)
    naive, flash = map(int, r.stdout.split())
    assert naive == 2 * flash == 8 * 2 * 8 * 128 * 256 * 64


def test_layout_flip_admits_offset_views(rebuilt):
    r = _python(rebuilt[0], """
        import numpy as np, fuel_cy
        base = np.random.default_rng(0).standard_normal((1, 3, 5, 4)).astype(np.float32)
        view = base[:, 1:]
        k = view.copy()
        out = fuel_cy.attention_flash(view, k, k)
        assert np.array_equal(out, fuel_cy.attention_flash(k, k, k))
        try:
            fuel_cy.attention_naive(view, k, k)
        except fuel_cy.InputError as e:
            print("naive rejects:", e.clause)
        print("ok")
    """)
    assert r.returncode == 0, r.stderr
    assert "naive rejects: accept.inputs[0].layout.start_offset: rejected" in r.stdout and "ok" in r.stdout


def test_stale_build_warns_with_the_rebuild_command(rebuilt):
    proj = rebuilt[0]
    contract = proj / "contracts" / "fuel-reference-backend.md"
    original = contract.read_text()
    try:
        contract.write_text(original.replace("Materialized multi-head SDPA oracle", "Edited blurb", 1))
        r = _python(proj, "import warnings; warnings.simplefilter('always'); import fuel_cy")
        assert "StaleBuildWarning" in r.stderr and "fuel-cy build" in r.stderr
    finally:
        contract.write_text(original)


def test_tables_ahead_of_a_failed_build_still_import():
    """The tables (Python) are written before the extension compiles: after a failed build they
    list a kernel the compiled module lacks.  The package must still import (`fuel-cy build`
    imports it to rebuild), and that kernel must say how to fix it when called."""
    code = textwrap.dedent("""
        import importlib, types
        import fuel_cy._generated as gen
        import fuel_cy.runtime.registry as reg
        real = gen._kernels
        gen._kernels = types.SimpleNamespace(**{k: v for k, v in vars(real).items() if k != "attention_masked"})
        reg = importlib.reload(reg)
        assert reg.registry["attention_flash"].fn is real.attention_flash
        try:
            reg.registry["attention_masked"].fn()
        except RuntimeError as exc:
            assert "attention_masked" in str(exc) and "fuel-cy build" in str(exc), exc
        else:
            raise AssertionError("no error")
    """)
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
