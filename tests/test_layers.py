"""The package's layers are its folder names, and the imports between them go one way.

    dtypes.py      the dtype vocabulary                        standard library only
    contract/      contracts -> frozen model                   + dtypes
    errors.py      the exceptions                              + contract's ContractError
    runtime/       what a kernel call goes through; with the modules it loads: _generated/
                   (compiled from templates/cython/ and the hand-written _core/) and _cpuid
    sdpa.py        torch's SDPA arguments mapped onto a generated kernel (numpy or torch arrays)
    __init__.py    the public API: re-exports runtime/, the generated kernels and sdpa
    codegen/       contracts -> generated code, stubs, the Python-facing text   no harness
    harness/       measuring and checking (bench, demo, references, tolerances, targets)
    workspace.py   which checkout, which install mode
    docs/          the site's renderer: pages from the contracts and the results, mkdocs hooks
    cli.py, torch.py, dask.py   the command line and the optional integrations, on top
    transformers.py             the transformers backend, over torch.py
    __main__.py    `python -m fuel_cy`

An import may only go down this list (or stay inside its own layer), with the few lazy exceptions
listed in UPWARD; a module or folder added to fuel_cy/ must be given a layer here.  Every import
counts: at module level, inside a function, under TYPE_CHECKING, through importlib with a literal
name, and the Python-level imports of the Cython sources (templates/cython/*.j2, _core/*.pxi,
_cpuid.pyx) -- read with the standard library's ast (and a regular expression for Cython).
"""
from __future__ import annotations

import ast
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from conftest import ROOT

# Lowest first.  Layers in one tier never import each other.
TIERS: list[set[str]] = [
    {"dtypes"},
    {"contract"},
    {"errors"},
    {"runtime"},
    {"sdpa"},
    {"fuel_cy"},
    {"codegen"},
    {"harness"},
    {"workspace"},
    {"docs"},
    {"cli", "torch", "dask"},
    {"transformers"},
    {"__main__"},
]
RANK = {layer: i for i, tier in enumerate(TIERS) for layer in tier}
FOLDERS = {"contract", "codegen", "runtime", "harness", "docs"}
# the runtime layer: runtime/ and what it loads (the build output _generated/, compiled from the
# templates and the hand-written _core/, and the cpuid probe _cpuid)
RUNTIME_PARTS = {"runtime", "_generated", "_core", "_cpuid"}

# Imports that go up, each one a function-local import on a path that a kernel call never takes.
UPWARD: dict[tuple[str, str], str] = {
    ("fuel_cy/__init__.py", "fuel_cy.workspace"):
        "the repair advice in the error raised when the compiled extension is missing or stale",
}

# Where a layer reaches into a lower one for a few modules only, those modules.
NARROW: dict[tuple[str, str], tuple[set[str], str]] = {
    ("errors", "contract"): ({"fuel_cy.contract.errors"}, "ContractError is the contract layer's"),
    ("codegen", "runtime"): ({"fuel_cy.runtime.cpu_levels", "fuel_cy.runtime.kernel_entry"},
                             "its two standard-library-only data modules, which load before anything is built"),
    ("workspace", "codegen"): ({"fuel_cy.codegen.buildinfo"}, "the build record"),
}


@dataclass(frozen=True)
class Import:
    source: str   # importing file, relative to the checkout
    line: int
    target: str   # the fuel_cy module imported (a submodule when `from pkg import submodule`)
    lazy: bool    # inside a function


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "fuel_cy":
        return None
    if len(parts) == 1:
        return "fuel_cy"
    head = parts[1]
    if head in RUNTIME_PARTS:
        return "runtime"
    if head in FOLDERS or head in RANK:
        return head
    return None


def _known_modules(root: Path) -> set[str]:
    pkg = root / "fuel_cy"
    found = {module_name(root, p) for p in pkg.rglob("*.py") if "__pycache__" not in p.parts}
    found |= {module_name(root, p) for p in pkg.rglob("*.pyx")}
    found |= {"fuel_cy._generated._kernels", "fuel_cy._generated._tables", "fuel_cy._generated._build_info"}
    return found


def _target(base: str, names: list[str], known: set[str]) -> list[str]:
    subs = [f"{base}.{n}" for n in names if f"{base}.{n}" in known]
    return subs or [base]


def _resolve(package: str, level: int, module: str | None) -> str:
    base = package.split(".")
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def _calls_import_module(call: ast.Call) -> bool:
    name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", None)
    return name == "import_module" and bool(call.args)


def _import_module_target(arg: ast.expr, package: str) -> list[str]:
    """importlib.import_module("name") or (f"name.{x}"): the module, or the package it names."""
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        literal, whole = arg.value, True
    elif isinstance(arg, ast.JoinedStr):
        first = arg.values[0] if arg.values else None
        literal = first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else ""
        whole = False
    else:
        return []
    dots = len(literal) - len(literal.lstrip("."))
    rest = literal[dots:] if whole else literal[dots:].rpartition(".")[0]
    return [_resolve(package, dots, rest or None) if dots else rest]


def _python_imports(root: Path, path: Path, known: set[str]) -> list[Import]:
    rel = path.relative_to(root).as_posix()
    name = module_name(root, path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: list[Import] = []

    def visit(node: ast.AST, lazy: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = lazy or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            targets: list[str] = []
            if isinstance(child, ast.Import):
                targets = [a.name for a in child.names]
            elif isinstance(child, ast.ImportFrom):
                base = _resolve(package, child.level, child.module) if child.level else (child.module or "")
                targets = _target(base, [a.name for a in child.names], known)
            elif isinstance(child, ast.Call) and _calls_import_module(child):
                targets = _import_module_target(child.args[0], package)
            for t in targets:
                if t == "fuel_cy" or t.startswith("fuel_cy."):
                    out.append(Import(rel, getattr(child, "lineno", 0), t, inner))
            visit(child, inner)

    visit(tree, False)
    return out


_CY_FROM = re.compile(r"^[ \t]*from[ \t]+(fuel_cy(?:\.\w+)*)[ \t]+import[ \t]+([^#\n]+)", re.MULTILINE)
_CY_IMPORT = re.compile(r"^[ \t]*import[ \t]+(fuel_cy(?:\.\w+)*)", re.MULTILINE)


def _cython_imports(root: Path, path: Path, known: set[str]) -> list[Import]:
    """Python-level imports of a Cython source: they run when the compiled module is imported."""
    rel = path.relative_to(root).as_posix()
    text = path.read_text(encoding="utf-8")
    out = []
    for m in _CY_FROM.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        names = [n.split()[0] for n in m.group(2).strip("() \t").split(",") if n.split()]
        out += [Import(rel, line, t, False) for t in _target(m.group(1), names, known)]
    for m in _CY_IMPORT.finditer(text):
        out.append(Import(rel, text.count("\n", 0, m.start()) + 1, m.group(1), False))
    return out


def cython_sources(root: Path) -> list[Path]:
    return sorted([*(root / "templates" / "cython").glob("*.j2"), *(root / "fuel_cy" / "_core").glob("*.pxi"),
                   *(root / "fuel_cy").glob("*.pyx")])


def python_sources(root: Path) -> list[Path]:
    pkg = root / "fuel_cy"
    return sorted(p for p in pkg.rglob("*.py")
                  if "__pycache__" not in p.parts and "_generated" not in p.relative_to(pkg).parts)


def all_imports(root: Path) -> list[Import]:
    known = _known_modules(root)
    out = []
    for path in python_sources(root):
        out += _python_imports(root, path, known)
    for path in cython_sources(root):
        out += _cython_imports(root, path, known)
    return out


def importer_layer(root: Path, source: str) -> str | None:
    path = root / source
    if path.suffix == ".py":
        return layer_of(module_name(root, path))
    return "runtime"  # the Cython sources are compiled into _generated/ and _cpuid


def violations(root: Path) -> list[str]:
    """Every import that breaks the layering, as 'file:line: message'."""
    problems = []
    used_upward = set()
    for imp in all_imports(root):
        src, dst = importer_layer(root, imp.source), layer_of(imp.target)
        where = f"{imp.source}:{imp.line}: imports {imp.target}"
        if src is None or dst is None:
            problems.append(f"{where}: {imp.source if src is None else imp.target} has no layer (see TIERS)")
            continue
        if src == dst:
            continue
        if RANK[dst] >= RANK[src]:
            reason = UPWARD.get((imp.source, imp.target))
            if reason is None:
                problems.append(f"{where}: {src} may not import {dst} (a layer imports only the ones below it)")
            elif not imp.lazy:
                problems.append(f"{where}: the allowed upward import ({reason}) must stay inside a function")
            else:
                used_upward.add((imp.source, imp.target))
            continue
        narrow = NARROW.get((src, dst))
        if narrow is not None and imp.target not in narrow[0]:
            problems.append(f"{where}: {src} uses only {sorted(narrow[0])} of {dst} ({narrow[1]})")
    for key in sorted(set(UPWARD) - used_upward):
        problems.append(f"{key[0]}: no longer imports {key[1]}: drop it from UPWARD")
    return problems


def layer_graph(imports: list[Import], root: Path, *, eager_only: bool = False) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for imp in imports:
        if eager_only and imp.lazy:
            continue
        src, dst = importer_layer(root, imp.source), layer_of(imp.target)
        if src and dst and src != dst:
            graph.setdefault(src, set()).add(dst)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


# ---- the checks ------------------------------------------------------------------------------

def test_every_module_and_folder_has_a_layer():
    pkg = ROOT / "fuel_cy"
    folders = {p.name for p in pkg.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders == FOLDERS | {"_core", "_generated"}, "a new folder of fuel_cy/ needs a layer in TIERS"
    unplaced = [p.relative_to(ROOT).as_posix() for p in python_sources(ROOT)
                if layer_of(module_name(ROOT, p)) is None]
    assert not unplaced, f"modules without a layer (add them to TIERS): {unplaced}"


def test_imports_go_down_the_layers():
    problems = violations(ROOT)
    assert not problems, "\n".join(problems)


def test_no_import_cycle_between_the_layers():
    imports = all_imports(ROOT)
    upward = {(i.source, i.target) for i in imports if (i.source, i.target) in UPWARD}
    # the folders among themselves: no cycle through any import at all
    folders = {k: v & FOLDERS for k, v in layer_graph(imports, ROOT).items() if k in FOLDERS}
    assert find_cycle(folders) is None, find_cycle(folders)
    # every layer, counting every import but the lazy UPWARD ones
    rest = [i for i in imports if (i.source, i.target) not in upward]
    assert find_cycle(layer_graph(rest, ROOT)) is None, find_cycle(layer_graph(rest, ROOT))
    # what runs at import time (module-level imports only): no cycle either
    assert find_cycle(layer_graph(imports, ROOT, eager_only=True)) is None


def test_the_named_rules():
    """The layering rules a reader looks for, stated on their own (TIERS implies them)."""
    edges = [(importer_layer(ROOT, i.source), layer_of(i.target), i) for i in all_imports(ROOT)]
    # contract/ is the bottom layer but for the dtype vocabulary
    assert {d for s, d, _ in edges if s == "contract"} <= {"contract", "dtypes"}
    # codegen/ renders code only: the contract model, dtypes and the runtime's data modules; never
    # the harness, the workspace or the CLI (the site's renderer, docs/, reads those)
    assert {d for s, d, _ in edges if s == "codegen"} <= {"codegen", "contract", "dtypes", "runtime"}
    # nothing in the package imports the site's renderer (mkdocs loads it)
    assert not [i for s, d, i in edges if d == "docs" and s != "docs"]
    # a kernel call never loads the harness, the generator, the CLI or an integration
    assert not [i for s, d, i in edges if s == "runtime" and d in {"harness", "codegen", "cli", "torch", "dask",
                                                                   "workspace", "fuel_cy"}]
    assert not [i for s, d, i in edges if s == "harness" and d in {"cli", "codegen", "workspace", "torch", "dask"}]
    # the CLI sits on top: only __main__ imports it; nothing imports the optional integrations
    # but the transformers backend, which runs on fuel_cy.torch
    assert {i.source for s, d, i in edges if d == "cli" and s != "cli"} == {"fuel_cy/__main__.py"}
    assert not [i for s, d, i in edges if d in {"torch", "dask", "transformers"} and s != d
                and (s, d) != ("transformers", "torch")]
    # the generated and hand-written Cython reach only the runtime
    assert {layer_of(i.target) for i in all_imports(ROOT) if not i.source.endswith(".py")} == {"runtime"}


def test_layer_packages_import_nothing():
    """setup.py loads runtime.cpu_levels (and the generator runtime.kernel_entry) from a tree that
    is not built: the layer packages' __init__ must not pull in the rest of their layer."""
    for folder in ("runtime", "harness"):
        tree = ast.parse((ROOT / "fuel_cy" / folder / "__init__.py").read_text(encoding="utf-8"))
        assert not [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))], folder


def test_a_violation_is_reported(tmp_path):
    """The checker itself: a copy of the package with imports that break the layers."""
    shutil.copytree(ROOT / "fuel_cy", tmp_path / "fuel_cy",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.c", "_generated"))
    shutil.copytree(ROOT / "templates", tmp_path / "templates")
    assert violations(tmp_path) == []
    dispatch = tmp_path / "fuel_cy" / "runtime" / "dispatch.py"
    dispatch.write_text(dispatch.read_text() + "\n\ndef _late():\n    from ..harness import tables\n")
    bench = tmp_path / "fuel_cy" / "harness" / "bench.py"
    bench.write_text(bench.read_text() + "\nfrom ..cli import main\n")
    view = tmp_path / "fuel_cy" / "codegen" / "view.py"
    view.write_text(view.read_text() + "\nfrom ..runtime.registry import registry\n")
    template = tmp_path / "templates" / "cython" / "_kernels.pyx.j2"
    template.write_text(template.read_text() + "\nfrom fuel_cy.harness import bench as _bench\n")
    (tmp_path / "fuel_cy" / "extra.py").write_text("")
    found = violations(tmp_path)
    assert [p for p in found if p.startswith("fuel_cy/runtime/dispatch.py") and "runtime may not import harness" in p]
    assert [p for p in found if p.startswith("fuel_cy/harness/bench.py") and "harness may not import cli" in p]
    assert [p for p in found if p.startswith("fuel_cy/codegen/view.py") and "fuel_cy.runtime.registry" in p]
    assert [p for p in found if p.startswith("templates/cython/_kernels.pyx.j2") and "runtime may not import harness" in p]
    assert len(found) == 4, found
    assert find_cycle(layer_graph(all_imports(tmp_path), tmp_path)) is not None
    # a module outside the layers
    (tmp_path / "fuel_cy" / "extra.py").write_text("from .runtime import cpu\n")
    assert [p for p in violations(tmp_path) if p.startswith("fuel_cy/extra.py") and "has no layer" in p]
