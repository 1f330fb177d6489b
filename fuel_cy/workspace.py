"""Where the command line works, and what it can do there.

`fuel-cy validate`, `fmt`, `generate` and `build` act on a *checkout* (a folder with contracts/ and a
pyproject.toml naming fuel_cy): the one around the current folder when there is one.  What they can
promise depends on how this Python's fuel_cy is installed:

- editable (`pip install -e .`), or run from the checkout itself: `import fuel_cy` loads the
  checkout's own fuel_cy/, so `fuel-cy build` rebuilds it in place;
- a regular install (`pip install .`, a wheel): `import fuel_cy` loads a copy in site-packages that
  no in-place build touches; a change reaches it only by reinstalling.

Everything here is pure Python and never imports the compiled extension.
"""
from __future__ import annotations

import importlib.machinery
import importlib.metadata
import importlib.util
import json
import os
import re
import shlex
import shutil
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from .codegen.buildinfo import BUILD_INFO_FILE, SOURCES_KEY, compiled_sources, read_build_info
from .errors import UsageError

PACKAGE_DIR = Path(__file__).resolve().parent
"""The fuel_cy this Python imports (this very package)."""

BUILD_REQUIREMENTS = (("Cython", "Cython", (3, 0, 8)), ("setuptools", "setuptools", (77,)), ("numpy", "numpy", (1, 25)))
"""(import name, pip name, minimum version) of what compiling the extension needs, as in
pyproject.toml's [build-system] requires."""


def python() -> str:
    """This interpreter, quoted for a shell: the commands we suggest must reach this environment."""
    return shlex.quote(sys.executable)


def pip_install(root: Path, editable: bool = False) -> str:
    """The exact command that (re)installs the checkout `root` into this Python."""
    return f"cd {shlex.quote(str(root))} && {python()} -m pip install {'-e ' if editable else ''}."


def _project_value(text: str, key: str) -> str:
    """A string in pyproject.toml's [project] table ("" when absent); ValueError: not TOML."""
    try:
        import tomllib  # Python 3.11+

        return str(tomllib.loads(text).get("project", {}).get(key, ""))
    except ImportError:  # pragma: no cover - Python 3.10: the [project] table's `key = "..."` line
        table = re.search(r"^\[project\][ \t]*$(.*?)(?=^\[|\Z)", text, re.M | re.S)
        match = re.search(rf'^\s*{key}\s*=\s*["\']([^"\']+)["\']', table.group(1) if table else "", re.M)
        return match.group(1) if match else ""


def _names_fuel_cy(pyproject: Path) -> bool:
    try:
        name = _project_value(pyproject.read_text(encoding="utf-8"), "name")
    except (OSError, ValueError):
        return False
    return re.sub(r"[-_.]+", "_", name).lower() == "fuel_cy"


def project_version(root: Path) -> str:
    """The version in `root`/pyproject.toml's [project] table: the one place fuel_cy's version is
    written (fuel_cy.__version__ repeats it, and a test checks the two agree; the site's footer
    shows it)."""
    version = _project_value((root / "pyproject.toml").read_text(encoding="utf-8"), "version")
    if not version:
        raise ValueError(f"{root / 'pyproject.toml'} states no [project] version")
    return version


def is_checkout(path: Path) -> bool:
    """A fuel_cy source checkout: contracts/ next to a pyproject.toml whose project is fuel_cy."""
    return (path / "contracts").is_dir() and _names_fuel_cy(path / "pyproject.toml")


def find_checkout(start: Optional[Path] = None) -> Optional[Path]:
    """The checkout around `start` (default: the current folder), searching upwards."""
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if is_checkout(candidate):
            return candidate
    return None


def can_generate(root: Path) -> bool:
    return (root / "contracts").is_dir() and (root / "templates" / "cython").is_dir() \
        and (root / "fuel_cy" / "_core").is_dir()


@dataclass(frozen=True)
class Install:
    """The fuel_cy this Python imports."""

    package_dir: Path
    checkout: Optional[Path]  # the checkout it is imported from (editable, or run from source)
    origin: Optional[str] = None  # where pip installed it from, when pip recorded that

    @property
    def editable(self) -> bool:
        return self.checkout is not None

    def describe(self) -> str:
        if self.checkout is not None:
            return f"the checkout {self.checkout} (editable)"
        where = f"a regular, non-editable install at {self.package_dir}"
        return where + (f", installed from {self.origin}" if self.origin else "")


def installed() -> Install:
    checkout = PACKAGE_DIR.parent if is_checkout(PACKAGE_DIR.parent) else None
    origin = None
    try:
        dist = importlib.metadata.distribution("fuel_cy")
        # only the record that belongs to this package (not another copy's, further down sys.path)
        mine = Path(str(dist.locate_file("fuel_cy"))).resolve() == PACKAGE_DIR
        raw = dist.read_text("direct_url.json") if mine else None
        if raw:
            url = json.loads(raw).get("url", "")
            origin = url[len("file://"):] if url.startswith("file://") else url or None
    except (importlib.metadata.PackageNotFoundError, ValueError, OSError):
        pass
    return Install(PACKAGE_DIR, checkout, origin)


def repair_advice(inst: Optional[Install] = None) -> str:
    """What makes the compiled extension of the fuel_cy this Python imports current again, for
    the way it is installed: a build in place from its checkout (editable, or run from source),
    else a reinstall (`fuel-cy build` cannot change a regular install).  `import fuel_cy` says it
    when the extension is missing or stale; it imports this module on that path only."""
    inst = inst or installed()
    if inst.checkout is not None:
        root = shlex.quote(str(inst.checkout))
        return (f"rebuild it in place: cd {root} && fuel-cy build   "
                f"(or: {pip_install(inst.checkout, editable=True)})")
    source = Path(inst.origin) if inst.origin else None
    if source is not None and is_checkout(source):
        how = f"reinstall it from {source}: {pip_install(source)}"
    else:
        how = f"reinstall it from your checkout: cd CHECKOUT && {python()} -m pip install ."
    return (f"{how}   (this fuel_cy is a regular, non-editable install at {inst.package_dir}, which `fuel-cy build` cannot change; "
            "install the checkout with `pip install -e .` and `fuel-cy build` rebuilds it in place)")


@dataclass(frozen=True)
class Workspace:
    """The checkout a command works on, how it was chosen, and the fuel_cy this Python imports."""

    root: Path
    how: str
    install: Install
    explicit: bool = False

    @property
    def imported_here(self) -> bool:
        """True when `import fuel_cy` loads this checkout's package (editable / in place)."""
        return (self.root / "fuel_cy").resolve() == self.install.package_dir

    def describe(self) -> str:
        return f"checkout: {self.root} -- {self.how}"

    def build_command(self) -> str:
        """What rebuilds the extension `import fuel_cy` uses from this checkout."""
        if self.imported_here:
            return "fuel-cy build"
        if self.explicit:
            return f"fuel-cy build --root {shlex.quote(str(self.root))}"
        return pip_install(self.root)


def workspace(root: Optional[str] = None) -> Workspace:
    """The checkout to generate/build: --root, else the one around the current folder, else the
    checkout this fuel_cy is an editable install of; a UsageError saying what to do otherwise."""
    inst = installed()
    if root:
        given = Path(root).resolve()
        for candidate in (given, *given.parents):  # the checkout around the folder given, never another
            if can_generate(candidate):
                return Workspace(candidate, "given by --root", inst, explicit=True)
        raise UsageError(f"--root {root}: not in a fuel_cy checkout "
                         "(need contracts/, templates/cython/ and fuel_cy/_core/)")
    here = find_checkout()
    if here is not None:
        if not can_generate(here):
            raise UsageError(f"{here} has contracts/ but not templates/cython/ and fuel_cy/_core/: "
                             "generate and build need a full source checkout")
        return Workspace(here, "the checkout in the current folder", inst)
    if inst.checkout is not None and can_generate(inst.checkout):
        return Workspace(inst.checkout, "the checkout fuel_cy is installed from (editable); "
                                        "the current folder is not in a checkout", inst)
    raise UsageError(f"no fuel_cy checkout in {Path.cwd()} or above, and this Python's fuel_cy is "
                     f"{inst.describe()}, which holds no templates: generate and build work on a source "
                     "checkout -- cd into your clone (or pass --root DIR)")


def contracts_to_check() -> tuple[Path, str]:
    """The contracts validate/fmt default to: the checkout's around the current folder, else the
    installed fuel_cy's (its packaged copy, or its checkout when editable); and which one it is."""
    from .contract.loader import default_contracts_dir

    here = find_checkout()
    if here is not None:
        return here / "contracts", f"the checkout in the current folder ({here})"
    inst = installed()
    folder = default_contracts_dir()
    if inst.checkout is not None:
        return folder, f"the installed fuel_cy, {inst.describe()}; the current folder is not in a checkout"
    return folder, (f"the contracts packaged with the installed fuel_cy ({inst.package_dir}); "
                    "the current folder is not in a checkout")


# ---- build tools --------------------------------------------------------------------------------

def compiler() -> str:
    """The C compiler a build would use (as setup.py chooses it)."""
    return os.environ.get("CC") or (sysconfig.get_config_var("CC") or "cc").split()[0] or "cc"


def _version(dist: str) -> Optional[tuple[int, ...]]:
    try:
        text = importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None
    return tuple(int(p) for p in re.findall(r"\d+", text)[:3])


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def missing_build_tools() -> list[str]:
    """What stops this Python from compiling the extension, one sentence each (empty: nothing)."""
    problems = []
    for module, dist, minimum in BUILD_REQUIREMENTS:
        if not _importable(module):
            problems.append(f"{module} is not installed in {sys.executable}")
            continue
        have = _version(dist)
        if have is not None and have < minimum:
            problems.append(f"{module} {'.'.join(map(str, have))} is older than the "
                            f"{'.'.join(map(str, minimum))} the build needs")
    cc = compiler()
    if shutil.which(cc) is None:
        problems.append(f"no C compiler: `{cc}` is not on PATH (set CC to use another)")
    include = Path(sysconfig.get_paths()["include"])
    if not (include / "Python.h").is_file():
        problems.append(f"the Python headers are missing (no Python.h in {include})")
    return problems


def build_tools_advice(problems: list[str], root: Path) -> str:
    requirements = " ".join(shlex.quote(f"{dist}>={'.'.join(map(str, m))}") for _, dist, m in BUILD_REQUIREMENTS)
    lines = []
    if any(p.startswith(module + " ") for p in problems for module, _, _ in BUILD_REQUIREMENTS):
        lines.append(f"  install the build tools:  {python()} -m pip install {requirements}")
    if any("compiler" in p for p in problems):
        lines.append("  install a C compiler:     sudo apt-get install gcc   (macOS: xcode-select --install)")
    if any("Python.h" in p for p in problems):
        minor = f"{sys.version_info.major}.{sys.version_info.minor}"
        lines.append(f"  install the headers:      sudo apt-get install python{minor}-dev")
    if not any("compiler" in p or "Python.h" in p for p in problems):
        lines.append(f"  or rebuild through pip:   {pip_install(root, editable=True)}   "
                     "(pip fetches Cython for that build only)")
    return "\n".join(lines)


# ---- is the compiled extension built from these sources? ----------------------------------------

def _module_file(folder: Path, name: str) -> Optional[Path]:
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = folder / (name + suffix)
        if path.is_file():
            return path
    return None


@dataclass
class ExtensionStatus:
    """The verdict on one compiled extension: fresh True / False, or None when it cannot be told."""

    fresh: Optional[bool]
    where: Path
    lines: list[str] = field(default_factory=list)


def extension_status(ws: Workspace) -> ExtensionStatus:
    """Whether the extension `import fuel_cy` would use was compiled from the sources now in the
    checkout: in place (editable) the checkout's own modules, else the installed copy's record."""
    gen = ws.root / "fuel_cy" / "_generated"
    current = compiled_sources(ws.root)
    if ws.imported_here or ws.explicit:  # --root names a tree: judge that tree's own modules
        return _in_place_status(ws, gen, current)
    inst_gen = ws.install.package_dir / "_generated"
    info = read_build_info(inst_gen / BUILD_INFO_FILE)
    how = ws.install.describe()
    if info is None or SOURCES_KEY not in info:
        return ExtensionStatus(None, inst_gen, [
            f"note: this Python imports fuel_cy from {how}; its build records no source digest, so whether "
            f"it matches {ws.root} cannot be told (to be sure: {pip_install(ws.root)})"])
    changed = _differences(info[SOURCES_KEY], current)
    if not changed:
        return ExtensionStatus(True, inst_gen, [f"the fuel_cy this Python imports ({how}) was built from these sources"])
    if ws.install.checkout is not None:
        fix = (f"build {ws.root} with `fuel-cy build --root {ws.root}` and import it from there, "
               f"or install it: {pip_install(ws.root, editable=True)}")
    else:
        fix = f"reinstall it from the checkout: {pip_install(ws.root)}"
    return ExtensionStatus(False, inst_gen, [
        f"stale extension: this Python imports fuel_cy from {how}, built from other sources than {ws.root} "
        f"({_listing(changed)}); {fix}"])


def _in_place_status(ws: Workspace, gen: Path, current: dict[str, str]) -> ExtensionStatus:
    info = read_build_info(gen / BUILD_INFO_FILE)
    if info is None or _module_file(gen, "_kernels") is None:
        return ExtensionStatus(False, gen, [f"stale extension: {gen} holds no compiled extension; run `{ws.build_command()}`"])
    wanted = [("fuel_cy/_generated", "_kernels"), ("fuel_cy", "_cpuid")] + \
        [("fuel_cy/_generated", f"_core_{level}") for level in info.get("cpu_capabilities", [])]
    modules = {f"{folder}/{name}": _module_file(ws.root / folder, name) for folder, name in wanted}
    missing = [name for name, path in modules.items() if path is None]
    if missing:
        return ExtensionStatus(False, gen, [f"stale extension: compiled module(s) missing: {', '.join(missing)}; "
                                            f"run `{ws.build_command()}`"])
    recorded = info.get(SOURCES_KEY)
    if recorded is not None:
        changed = _differences(recorded, current)
        if changed:
            return ExtensionStatus(False, gen, [
                f"stale extension: the compiled modules in {gen} were built from other sources "
                f"({_listing(changed)}); run `{ws.build_command()}`"])
        return ExtensionStatus(True, gen, [f"the compiled extension in {gen} was built from these sources "
                                           f"({info.get('built_at', 'build time unknown')})"])
    # a record from before source digests: judge by file times (a module older than a source it
    # is compiled from, following its include / extern-from lines)
    found: set[str] = set()
    for name, path in modules.items():
        built = path.stat().st_mtime  # type: ignore[union-attr]
        found.update(rel for rel in _module_sources(ws.root, name + ".pyx") if (ws.root / rel).stat().st_mtime > built)
    newer = sorted(found)
    if newer:
        return ExtensionStatus(False, gen, [
            f"stale extension: sources changed after the compiled modules in {gen} were built "
            f"({_listing(newer, 'newer')}); run `{ws.build_command()}`"])
    return ExtensionStatus(True, gen, [f"the compiled extension in {gen} is newer than its sources "
                                       "(its build recorded no source digest: judged by file times)"])


_INCLUDE = re.compile(r'^\s*(?:include|cdef\s+extern\s+from)\s+"([^"]+)"', re.M)


def _module_sources(root: Path, pyx: str) -> list[str]:
    """The files a module's .pyx compiles from (itself and what it includes), relative to `root`."""
    search = [root / "fuel_cy" / "_core", root / "fuel_cy" / "_generated"]  # setup.py's include path
    seen: list[str] = []
    todo = [root / pyx]
    while todo:
        path = todo.pop()
        if not path.is_file():
            continue
        rel = path.relative_to(root).as_posix()
        if rel in seen:
            continue
        seen.append(rel)
        text = path.read_text(encoding="utf-8", errors="replace") if path.suffix != ".h" else ""
        for name in _INCLUDE.findall(text):
            for folder in (path.parent, *search):
                if (folder / name).is_file():
                    todo.append(folder / name)
                    break
    return seen


def _differences(recorded: dict[str, str], current: dict[str, str]) -> list[str]:
    return sorted(rel for rel in set(recorded) | set(current) if recorded.get(rel) != current.get(rel))


def _listing(paths: list[str], word: str = "changed since the build") -> str:
    shown = ", ".join(paths[:10]) + (f" and {len(paths) - 10} more" if len(paths) > 10 else "")
    return f"{word}: {shown}"
