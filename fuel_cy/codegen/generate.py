"""contracts/ + templates/ -> fuel_cy/_generated/ (the only writer of generated files)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Optional

import jinja2

from ..contract.loader import FUSED_OPS_FILE, contract_files
from ..dtypes import DTYPES
from ..runtime.cpu_levels import all_level_names
from . import core_dtypes
from .files import FileManager
from .view import Views, build_views

GENERATOR_VERSION = "1"
TEMPLATES = ("_kernels.pyx.j2", "_kernels.pyi.j2", "_tables.py.j2")
LEVEL_TEMPLATE = "_core_level.pyx.j2"
"""Rendered once per known CPU level as `_core_<level>.pyx`; the build compiles the levels it
targets (setup.py), so what is generated does not depend on the machine."""


@dataclass(frozen=True)
class Layout:
    """Where a project checkout keeps each part of the pipeline."""

    root: Path

    @property
    def contracts(self) -> Path:
        return self.root / "contracts"

    @property
    def templates(self) -> Path:
        return self.root / "templates"

    @property
    def core(self) -> Path:
        return self.root / "fuel_cy" / "_core"

    @property
    def generated(self) -> Path:
        return self.root / "fuel_cy" / "_generated"


def find_root(start: Optional[Path] = None) -> Path:
    """The checkout that holds contracts/, templates/ and fuel_cy/ (searching upwards)."""
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / "contracts").is_dir() and (candidate / "templates" / "cython").is_dir() \
                and (candidate / "fuel_cy" / "_core").is_dir():
            return candidate
    pkg_root = Path(__file__).resolve().parents[2]
    if (pkg_root / "templates" / "cython").is_dir():
        return pkg_root
    raise FileNotFoundError("not inside a fuel_cy checkout (need contracts/, templates/cython/, fuel_cy/_core/)")


def _py(value: Any) -> str:
    """Python source of a value: repr(), and a dataclass (fuel_cy.KernelEntry) as the call of its
    constructor with the fields it takes (read-only mappings as dict literals)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        args = ", ".join(f"{f.name}={_py(getattr(value, f.name))}" for f in dataclasses.fields(value)
                         if f.init and f.repr)
        return f"{type(value).__name__}({args})"
    if isinstance(value, (dict, MappingProxyType)):
        return "{" + ", ".join(f"{_py(k)}: {_py(v)}" for k, v in value.items()) + "}"
    return repr(value)


def _py_record(value: Any, indent: int = 4) -> str:
    """_py of a dataclass, one field a line (the call starts `indent` columns in)."""
    pad = " " * (indent + 4)
    args = [f"{pad}{f.name}={_py(getattr(value, f.name))}," for f in dataclasses.fields(value) if f.init and f.repr]
    return f"{type(value).__name__}(\n" + "\n".join(args) + "\n" + " " * indent + ")"


def _pydoc(text: str) -> str:
    body = text.replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    return '"""' + body.replace("\n", "\n    ") + '\n    """'


def npy_typenum(ctype: str) -> str:
    """numpy's type number (Cython spelling) of a core work type: that of the dtype stored as it."""
    for d in DTYPES.values():
        if d.ctype == ctype and d.npy_typenum is not None:
            return f"cnp.{d.npy_typenum}"
    raise KeyError(ctype)


def environment(templates: Path) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates)), undefined=jinja2.StrictUndefined,
        trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, autoescape=False,
    )
    env.filters["py"] = _py
    env.filters["pyrecord"] = _py_record
    env.filters["pydoc"] = _pydoc
    env.filters["npy_typenum"] = npy_typenum
    return env


def header(comment: str, sources: list[tuple[str, str]], template: str, *, label: str = "Contract",
           edit: str = "the contract") -> str:
    """The lines every generated file starts with: generated, from which template and which
    sources (each with its sha256, so a reader can tell what it was made from), and what to edit
    instead.  `label` names the kind of source: "Contract", or "Source" for a non-contract input
    such as fuel_cy/dtypes.py."""
    lines = [f"{comment} GENERATED FILE -- DO NOT EDIT.",
             f"{comment} Template: templates/cython/{template} (fuel_cy.codegen v{GENERATOR_VERSION})"]
    for path, digest in sources:
        lines.append(f"{comment} {label}: {path} sha256:{digest}")
    lines.append(f"{comment} Edit {edit} (or template) and run `fuel-cy generate` / `fuel-cy build`.")
    return "\n".join(lines)


def c_header(sources: list[tuple[str, str]], template: str, **kwargs: str) -> str:
    """header() as a C comment, for the generated C headers."""
    return "/*" + header(" *", sources, template, **kwargs)[2:] + " */"


def views(layout: Layout, check_core: bool = True) -> Views:
    """The views of every contract kernel of a checkout (raises ContractError); `check_core`:
    also check that each kernel bound to a core driver still fits it (view.check_bindings)."""
    return build_views(layout.contracts, layout.core, layout.root, check_core)


def render(layout: Layout, out_dir: Optional[Path] = None) -> FileManager:
    """Render everything in memory; raises ContractError before anything is written."""
    v = views(layout)
    sources = [(Path(d.path).resolve().relative_to(layout.root.resolve()).as_posix(), d.text_hash) for d in v.docs]
    env = environment(layout.templates / "cython")
    context = {
        "kernels": v.kernels, "generator_version": GENERATOR_VERSION,
        "contract_hashes": [(Path(p).name, h) for p, h in sources],
        "providers": v.providers, "fused_ops": list(v.fused_ops.values()),
    }
    fm = FileManager(out_dir or layout.generated)
    fm.add("__init__.py", header("#", sources, "(package marker)") + "\n")
    for template in TEMPLATES:
        text = env.get_template(template).render(header=header("#", sources, template), **context)
        fm.add(template[:-3], text)
    for level in all_level_names():
        # no contract in its header: the level modules read none, and a changed line would
        # recompile every level for nothing
        top = header("#", [], LEVEL_TEMPLATE, edit="the hand-written core in fuel_cy/_core/")
        text = env.get_template(LEVEL_TEMPLATE).render(header=top, level=level)
        fm.add(f"_core_{level}.pyx", text)
    for path in contract_files(layout.contracts) + [layout.contracts / FUSED_OPS_FILE]:
        fm.add(f"contracts/{path.name}", path.read_text(encoding="utf-8"))
    for name, text in render_dtype_lists(layout, env).items():
        fm.add(name, text)
    return fm


def render_dtype_lists(layout: Layout, env: jinja2.Environment) -> dict[str, str]:
    """The core's dtype lists (core_dtypes.TEMPLATES), rendered from the dtype record alone, after
    checking that the hand-written core defines every C helper they name (ContractError)."""
    lists, text, digest = core_dtypes.render_context(DTYPES)
    source = [(core_dtypes.DTYPES_FILE, digest)]
    edit = core_dtypes.DTYPES_FILE
    out: dict[str, str] = {}
    for template in core_dtypes.TEMPLATES:
        if template.endswith(".h.j2"):
            top = c_header(source, template, label="Source", edit=edit)
        else:
            top = header("#", source, template, label="Source", edit=edit)
        out[template[:-3]] = env.get_template(template).render(header=top, lists=lists)
    core_dtypes.check_core_helpers(lists, layout.core, [t for name, t in out.items() if name.endswith(".h")], text)
    return out


@dataclass(frozen=True)
class Result:
    changed: list[str]
    extras: list[str]

    @property
    def stale(self) -> bool:
        return bool(self.changed or self.extras)


def generate_all(root: Path, out_dir: Optional[Path] = None, *, check: bool = False) -> Result:
    """The generator's one entry point: the checkout `root`'s contracts/ and templates/ ->
    `root`/fuel_cy/_generated/ (or `out_dir`).  `fuel-cy generate`, `fuel-cy build` and setup.py
    all call this.

    Everything is rendered in memory first, so a contract error (ContractError) leaves every file
    as it was; then only the files whose content changed are replaced, each atomically.  With
    ``check=True`` nothing is written: the Result lists what would change.
    """
    fm = render(Layout(Path(root)), out_dir)
    if check:
        return Result(fm.changes(), fm.stale_extras())
    extras = fm.stale_extras()
    return Result(fm.commit(), extras)


def generate(root: Optional[Path] = None, out_dir: Optional[Path] = None, check: bool = False) -> Result:
    """generate_all for the checkout `root`, by default the one around the current folder."""
    return generate_all(root or find_root(), out_dir, check=check)
