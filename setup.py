"""Build: regenerate fuel_cy/_generated/ from contracts/, then cythonize it with the hand-written
core.  Environment switches (documented in the README):

  FUEL_CY_PORTABLE=1     no -march=native (a wheel that runs on any x86-64 / aarch64)
  FUEL_CY_OPT=-O1        override the optimisation level (tests use it for quick rebuilds)
  FUEL_CY_SANITIZE=1     -fsanitize=address,undefined (run with LD_PRELOAD of libasan)
  FUEL_CY_NO_OPENMP=1    build without OpenMP even where the compiler supports it
"""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import sysconfig
import tempfile
import types
from datetime import datetime, timezone
from pathlib import Path

from setuptools import Extension, setup

ROOT = Path(__file__).resolve().parent


def _load_codegen():
    # Import fuel_cy.codegen without running fuel_cy/__init__ (which needs the extension).
    pkg = types.ModuleType("fuel_cy")
    pkg.__path__ = [str(ROOT / "fuel_cy")]
    saved = sys.modules.get("fuel_cy")
    sys.modules["fuel_cy"] = pkg
    try:
        from fuel_cy.codegen import generate  # noqa: WPS433
        return generate
    finally:
        for name in [n for n in sys.modules if n == "fuel_cy" or n.startswith("fuel_cy.")]:
            del sys.modules[name]
        if saved is not None:
            sys.modules["fuel_cy"] = saved


def _compiler() -> str:
    return os.environ.get("CC") or sysconfig.get_config_var("CC").split()[0] or "cc"


def _compiles(flags: list[str], source: str) -> bool:
    """Probe a flag set by compiling and linking a tiny program (sklearn's approach)."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "probe.c"
        src.write_text(source)
        try:
            res = subprocess.run([_compiler(), *flags, str(src), "-o", str(Path(tmp) / "probe")],
                                 capture_output=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            return False
        return res.returncode == 0


OPENMP_PROBE = "#include <omp.h>\nint main(void){int n=0;\n#pragma omp parallel reduction(+:n)\nn+=1;\nreturn n>0?0:1;}\n"


def build_flags() -> dict:
    opt = os.environ.get("FUEL_CY_OPT", "-O3")
    compile_args = [opt, "-fno-math-errno", "-Wno-unused-function", "-Wno-unreachable-code"]
    link_args: list[str] = []
    portable = os.environ.get("FUEL_CY_PORTABLE") == "1"
    if not portable and _compiles(["-march=native"], "int main(void){return 0;}\n"):
        compile_args.append("-march=native")
    openmp = os.environ.get("FUEL_CY_NO_OPENMP") != "1" and _compiles(["-fopenmp"], OPENMP_PROBE)
    if openmp:
        compile_args.append("-fopenmp")
        link_args.append("-fopenmp")
    if os.environ.get("FUEL_CY_SANITIZE") == "1":
        san = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=undefined"]
        compile_args += san
        link_args += san
    return {"compile_args": compile_args, "link_args": link_args, "openmp": openmp,
            "portable": portable, "sanitize": os.environ.get("FUEL_CY_SANITIZE") == "1"}


def write_build_info(flags: dict) -> None:
    info = {
        "compile_args": flags["compile_args"], "link_args": flags["link_args"],
        "openmp": flags["openmp"], "portable": flags["portable"], "sanitize": flags["sanitize"],
        "compiler": _compiler(), "machine": platform.machine(), "python": platform.python_version(),
        "built_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    text = ("# GENERATED at build time by setup.py -- DO NOT EDIT.\n"
            f"BUILD_INFO = {json.dumps(info, indent=4)}\n").replace("true", "True").replace("false", "False")
    (ROOT / "fuel_cy" / "_generated" / "_build_info.py").write_text(text)


def extensions() -> list:
    from Cython.Build import cythonize

    _load_codegen()(ROOT)
    flags = build_flags()
    write_build_info(flags)
    core = str(ROOT / "fuel_cy" / "_core")
    ext = Extension(
        "fuel_cy._generated._kernels",
        sources=["fuel_cy/_generated/_kernels.pyx"],
        include_dirs=[core],
        extra_compile_args=flags["compile_args"],
        extra_link_args=flags["link_args"],
    )
    # Bounds checks stay on for the generated Python-level code (a shape tuple of the wrong
    # length must raise, not read past its end); the hot loops use raw pointers into buffers
    # whose extents the validators proved, so the checks cost nothing there.
    directives = {"language_level": 3, "boundscheck": True, "wraparound": True,
                  "cdivision": True, "embedsignature": True}
    return cythonize([ext], include_path=[core], compiler_directives=directives, quiet=True)


setup(ext_modules=extensions())
