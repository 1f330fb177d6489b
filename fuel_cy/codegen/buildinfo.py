"""The build record, `fuel_cy/_generated/_build_info.py`: how the extension was compiled, and from
which sources.

setup.py writes it once every module has compiled; `fuel-cy generate --check` compares the
sources it names with the ones on disk, so a tree regenerated after the last build is reported
stale even though its generated files match the contracts.  Standard library only: setup.py loads
this module before anything is installed.
"""
from __future__ import annotations

import ast
import hashlib
import pprint
from pathlib import Path
from typing import Any, Optional

BUILD_INFO_FILE = "_build_info.py"
SOURCES_KEY = "sources_sha256"
HEADER = "# GENERATED at build time by setup.py -- DO NOT EDIT.\n"

# What the compiled modules are built from, relative to the checkout: the generated Cython and C
# headers (the dtype lists), the hand-written core that includes them, and the cpuid probe.
_COMPILED = (("fuel_cy/_generated", (".pyx", ".pxi", ".pxd", ".h")), ("fuel_cy/_core", (".pyx", ".pxi", ".pxd", ".h")),
             ("fuel_cy", ("_cpuid.pyx",)))


def compiled_sources(root: Path) -> dict[str, str]:
    """sha256 of every source file the extension is compiled from, by path relative to `root`."""
    out = {}
    for folder, endings in _COMPILED:
        base = root / folder
        if not base.is_dir():
            continue
        for path in sorted(base.iterdir()):
            if path.is_file() and (path.suffix in endings or path.name in endings):
                out[path.relative_to(root).as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def render_build_info(info: dict[str, Any]) -> str:
    """The record as a Python module: one dict literal, written with repr so True, None and any
    quote or backslash in a compiler path come out as Python (never a JSON spelling)."""
    literal = pprint.pformat(info, indent=1, width=100, sort_dicts=False)
    try:
        same = ast.literal_eval(literal) == info
    except (ValueError, SyntaxError):
        same = False
    if not same:  # only plain data round-trips: the record is read back with ast.literal_eval
        raise ValueError("build info must hold only str, int, float, bool, None, lists and dicts")
    return HEADER + "BUILD_INFO = " + literal + "\n"


def write_build_info(generated: Path, info: dict[str, Any]) -> Path:
    """Write the record into the `_generated` folder `generated` (of a checkout or a build tree)."""
    generated.mkdir(parents=True, exist_ok=True)
    path = generated / BUILD_INFO_FILE
    path.write_text(render_build_info(info), encoding="utf-8")
    return path


def read_build_info(path: Path) -> Optional[dict[str, Any]]:
    """The BUILD_INFO dict of a record file, read as a literal (the file is never executed, so a
    record of another install or another Python can be read too); None if absent or unreadable."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "BUILD_INFO" for t in node.targets):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                return None
            return value if isinstance(value, dict) else None
    return None
