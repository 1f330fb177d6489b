"""Build: regenerate fuel_cy/_generated/ from contracts/, then cythonize and compile

  fuel_cy._cpuid                  cpuid/xgetbv probe                       baseline flags
  fuel_cy._generated._kernels     validators, dispatch stubs, costs        baseline flags
  fuel_cy._generated._core_<L>    the attention core, once per CPU level   the level's flags

The baseline is the compiler's default target (no -march), so `import fuel_cy` works on any CPU of
the architecture; fuel_cy.runtime.cpu then loads the fastest level the CPU supports.  Levels are
listed in fuel_cy/runtime/cpu_levels.py.  Environment switches (documented in the README):

  FUEL_CY_CPU_LEVELS=a,b  compile only these levels (quick local builds; wheels carry all)
  FUEL_CY_NATIVE=1        add a `native` level (-march=native) for this machine only
  FUEL_CY_OPT=-O1         override the optimisation level (tests use it for quick rebuilds)
  FUEL_CY_JOBS=N          parallel compile jobs (default: one per CPU)
  FUEL_CY_SANITIZE=1      -fsanitize=address,undefined (run with LD_PRELOAD of libasan)
  FUEL_CY_NO_OPENMP=1     build without OpenMP even where the compiler supports it
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import platform
import subprocess
import sys
import sysconfig
import tempfile
import types
import warnings
from datetime import datetime, timezone
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
CORE = ROOT / "fuel_cy" / "_core"
# The generated sources: the Cython the modules are built from, and the dtype lists that the
# hand-written core includes (_fastcheck_dtypes.pxi, _core_dtypes.pxi, fc_dtypes.h), so it is on
# the Cython include path and the C include path next to _core/.
GENERATED = ROOT / "fuel_cy" / "_generated"
# The C headers the level modules compile (policy.pxi and test_hooks.pxi name some; those #include
# the rest).  Cython tracks the .pxi files a module includes but not C headers, so they are the
# modules' `depends`: build_ext recompiles a level when one changes.  (fc_cpuid.h too: the
# per-micro-architecture choices read the vendor, fc_uarch.h.)
CORE_HEADERS = sorted(str(p) for p in CORE.glob("*.h"))


def core_headers() -> list[str]:
    """CORE_HEADERS and the generated headers they include (present once generate_all ran)."""
    return CORE_HEADERS + sorted(str(p) for p in GENERATED.glob("*.h"))


SOURCE_PACKAGE = "_fuel_cy_source"


def _source_module(name: str) -> types.ModuleType:
    """A pure-Python module of this checkout's fuel_cy/ (codegen, runtime.cpu_levels), imported by path.

    The build runs before fuel_cy is installed (a fresh clone, an sdist), and `import fuel_cy`
    would be wrong even when it works: it could find another installed copy, and the package's
    __init__ loads the compiled extension that this build replaces -- from a tree that may no
    longer match it (after a contract gains a kernel, the old extension lacks it and the import
    fails).  The generator needs none of that: fuel_cy.codegen, fuel_cy.contract and the two
    data modules of fuel_cy.runtime it reads (cpu_levels, kernel_entry) use only the standard
    library, Jinja2 and PyYAML.  So fuel_cy/ is opened under a private package name whose __init__
    is never executed (the module object only lends its __path__ to the import system); the
    modules' relative imports (`..contract`, `..runtime.cpu_levels`) resolve inside it, and the
    name `fuel_cy` is never touched, so nothing needs restoring afterwards.  The layer packages'
    own __init__ files do run, which is why fuel_cy/runtime/__init__.py imports nothing.
    """
    if SOURCE_PACKAGE not in sys.modules:
        spec = importlib.util.spec_from_file_location(SOURCE_PACKAGE, ROOT / "fuel_cy" / "__init__.py",
                                                      submodule_search_locations=[str(ROOT / "fuel_cy")])
        sys.modules[SOURCE_PACKAGE] = importlib.util.module_from_spec(spec)
    return importlib.import_module(f"{SOURCE_PACKAGE}.{name}")


def _compiler() -> str:
    return os.environ.get("CC") or sysconfig.get_config_var("CC").split()[0] or "cc"


def _run(args: list[str], source: str, suffix: str = ".c") -> subprocess.CompletedProcess | None:
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / f"probe{suffix}"
        src.write_text(source)
        try:
            return subprocess.run([_compiler(), *args, str(src), "-o", str(Path(tmp) / "probe")],
                                  capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            return None


def _compiles(flags: list[str], source: str) -> bool:
    """Probe a flag set by compiling and linking a tiny program (sklearn's approach)."""
    res = _run(flags, source)
    return res is not None and res.returncode == 0


def _macros(flags: list[str]) -> str:
    """The compiler's predefined macros under `flags` (what the level's code may use)."""
    try:
        res = subprocess.run([_compiler(), *flags, "-dM", "-E", "-x", "c", os.devnull],
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return ""
    return res.stdout if res.returncode == 0 else ""


OPENMP_PROBE = "#include <omp.h>\nint main(void){int n=0;\n#pragma omp parallel reduction(+:n)\nn+=1;\nreturn n>0?0:1;}\n"


def base_flags() -> dict:
    opt = os.environ.get("FUEL_CY_OPT", "-O3")
    compile_args = [opt, "-fno-math-errno", "-Wno-unused-function", "-Wno-unreachable-code",
                    "-Werror=implicit-function-declaration"]
    link_args: list[str] = []
    sanitize = os.environ.get("FUEL_CY_SANITIZE") == "1"
    if sanitize:
        san = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=undefined"]
        compile_args += san
        link_args += san
    openmp = os.environ.get("FUEL_CY_NO_OPENMP") != "1" and _compiles(["-fopenmp"], OPENMP_PROBE)
    return {"compile_args": compile_args, "link_args": link_args, "openmp": openmp, "sanitize": sanitize}


def build_levels(cpu_levels: types.ModuleType) -> list:
    """The levels this build compiles: the architecture's list (or FUEL_CY_CPU_LEVELS), minus
    those the compiler cannot target, plus `native` under FUEL_CY_NATIVE=1."""
    if os.environ.get("FUEL_CY_PORTABLE"):
        warnings.warn("FUEL_CY_PORTABLE is retired: every build is portable now (one module per CPU "
                      "level, chosen at import); it is ignored")
    levels = list(cpu_levels.levels_for(platform.machine()))
    if os.environ.get("FUEL_CY_NATIVE") == "1":
        levels.append(cpu_levels.NATIVE)
    wanted = [w.strip().lower() for w in os.environ.get("FUEL_CY_CPU_LEVELS", "").split(",") if w.strip()]
    if wanted:
        known = [lv.name for lv in levels]
        unknown = [w for w in wanted if w not in known]
        if unknown:
            raise SystemExit(f"FUEL_CY_CPU_LEVELS: unknown level(s) {', '.join(unknown)}; "
                             f"this architecture has {', '.join(known)}")
        levels = [lv for lv in levels if lv.name in wanted]
    usable = []
    for level in levels:
        if _compiles(list(level.flags), "int main(void){return 0;}\n"):
            usable.append(level)
        else:
            warnings.warn(f"the compiler {_compiler()} cannot target level {level.name} "
                          f"({' '.join(level.flags)}); building without it")
    if not usable:
        raise SystemExit("no CPU level can be compiled with " + _compiler())
    return usable


def build_info(base: dict, levels: dict, sources: dict) -> dict:
    """The build record (fuel_cy/_generated/_build_info.py): flags, levels, and the sha256 of each
    source compiled, which `fuel-cy generate --check` compares with the tree."""
    return {
        "compile_args": base["compile_args"], "link_args": base["link_args"],
        "openmp": base["openmp"], "sanitize": base["sanitize"],
        "compiler": _compiler(), "machine": platform.machine(), "python": platform.python_version(),
        "built_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "cpu_capabilities": list(levels),
        "levels": levels,
        "sources_sha256": sources,
    }


BUILD_INFO: dict = {}  # filled by extensions(), written by ParallelBuildExt once everything compiled


def _jobs() -> int:
    return max(1, int(os.environ.get("FUEL_CY_JOBS") or os.cpu_count() or 1))


class ParallelBuildExt(build_ext):
    """Compile the level modules side by side: they are independent, and each takes ~30 s."""

    def finalize_options(self) -> None:
        super().finalize_options()
        if not self.parallel:
            self.parallel = _jobs()

    def run(self) -> None:
        super().run()
        # The record is written only now that every module compiled, so it never claims sources
        # that a failed build left uncompiled.  In place (`build_ext --inplace`, editable installs)
        # it goes next to the modules in the checkout; otherwise into the build tree the wheel is
        # made from (build_py has already copied the package there).
        if BUILD_INFO:
            target = ROOT if self.inplace else Path(self.build_lib)
            _source_module("codegen.buildinfo").write_build_info(target / "fuel_cy" / "_generated", BUILD_INFO)


def extensions() -> list:
    import numpy  # the validators' typed fast path reads arrays through numpy's C API (fastcheck.pxi)
    try:
        from Cython.Build import cythonize
    except ImportError:
        raise SystemExit(f"building fuel_cy needs Cython: {sys.executable} -m pip install 'Cython>=3.0.8' "
                         "'setuptools>=77' (`pip install .` fetches its own build tools)") from None

    _source_module("codegen.generate").generate_all(ROOT)
    sources = _source_module("codegen.buildinfo").compiled_sources(ROOT)
    cpu_levels = _source_module("runtime.cpu_levels")
    base = base_flags()
    omp_c = ["-fopenmp"] if base["openmp"] else []
    omp_l = ["-fopenmp"] if base["openmp"] else []
    levels, exts = {}, []
    for level in build_levels(cpu_levels):
        args = [*base["compile_args"], *level.flags, *omp_c]
        levels[level.name] = {"compile_args": args, "summary": level.summary,
                              "features": cpu_levels.features_from_macros(_macros(list(level.flags)))}
        exts.append(Extension(f"fuel_cy._generated._core_{level.name}",
                              sources=[f"fuel_cy/_generated/_core_{level.name}.pyx"],
                              include_dirs=[str(CORE), str(GENERATED), numpy.get_include()], extra_compile_args=args,
                              extra_link_args=[*base["link_args"], *omp_l], depends=core_headers()))
    BUILD_INFO.update(build_info(base, levels, sources))
    for name, source, depends in (("fuel_cy._generated._kernels", "fuel_cy/_generated/_kernels.pyx", []),
                                  ("fuel_cy._cpuid", "fuel_cy/_cpuid.pyx", [str(CORE / "fc_cpuid.h")])):
        exts.append(Extension(name, sources=[source], include_dirs=[str(CORE), str(GENERATED), numpy.get_include()],
                              extra_compile_args=base["compile_args"], extra_link_args=base["link_args"],
                              depends=depends))
    # Bounds checks stay on for the generated Python-level code (a shape tuple of the wrong
    # length must raise, not read past its end); the hot loops use raw pointers into buffers
    # whose extents the validators proved, so the checks cost nothing there.
    directives = {"language_level": 3, "boundscheck": True, "wraparound": True,
                  "cdivision": True, "embedsignature": True}
    return cythonize(exts, include_path=[str(CORE), str(GENERATED)], compiler_directives=directives, quiet=True,
                     nthreads=_jobs() if len(exts) > 1 else 0)


setup(ext_modules=extensions(), cmdclass={"build_ext": ParallelBuildExt})
