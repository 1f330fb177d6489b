"""Every Python example on the site and in the README runs, and prints what the page says it
prints: `>>>` blocks are doctests (ELLIPSIS, NORMALIZE_WHITESPACE), other ```python blocks are
scripts that must run, and a ```text block that shows a `>>>` call followed by an `InputError`
must raise that error with that message.  So a number on a page cannot go stale.

The kernel pages are generated at docs-build time: their examples are rendered here from the
contracts (fuel_cy.docs.pages) and run the same way.  A page that says
`<!-- examples: one session -->` (the paged-cache walkthrough) runs its blocks in order in one
namespace, as a reader typing them one after another would."""
from __future__ import annotations

import doctest
import re

import ml_dtypes
import numpy as np
import pytest

import fuel_cy
from conftest import ROOT

PAGES = sorted((ROOT / "site").glob("*.md")) + [ROOT / "README.md"]
FENCE = re.compile(r"```(python|text)\n(.*?)```", re.S)
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
SESSION = "<!-- examples: one session"


def _blocks(text: str):
    for m in FENCE.finditer(text):
        kind, body = m.groups()
        if kind == "python" or body.lstrip().startswith(">>> "):
            yield kind, body, text[: m.start()].count("\n") + 1


def _kernel_pages() -> dict[str, str]:
    from fuel_cy.docs.pages import render_pages

    return {path: text for path, text in render_pages(ROOT).items() if path.endswith(".md")}


def _examples():
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        if SESSION in text:
            continue  # run whole by test_session_page_runs_in_order
        for kind, body, line in _blocks(text):
            yield pytest.param(kind, body, id=f"{page.name}:{line}")
    for path, text in sorted(_kernel_pages().items()):
        for kind, body, line in _blocks(text):
            yield pytest.param(kind, body, id=f"{path}:{line}")


def _namespace() -> dict:
    return {"fuel_cy": fuel_cy, "np": np, "numpy": np, "ml_dtypes": ml_dtypes, "rng": np.random.default_rng(0)}


def _run(kind: str, body: str, ns: dict) -> None:
    if kind == "python" and ">>> " not in body:
        exec(compile(body, "<example>", "exec"), ns)
        return
    if kind == "python":
        test = doctest.DocTestParser().get_doctest(body, ns, "example", None, 0)
        runner = doctest.DocTestRunner(optionflags=FLAGS)
        failures: list[str] = []
        runner.run(test, out=failures.append, clear_globs=False)
        ns.update(test.globs)  # DocTest works on a copy; a session page goes on from here
        assert runner.failures == 0, body + "\n" + "".join(failures)
        return
    # a ```text block: ">>> call" (a call may go on over "... " lines; setup calls first), then
    # "InputError: message" (which may wrap over several lines)
    calls: list[str] = []
    for line in body.splitlines():
        if line.startswith(">>> "):
            calls.append(line[4:])
        elif line.startswith("... ") and calls:
            calls[-1] += "\n" + line[4:]
    message = body.split("InputError: ", 1)[1] if "InputError: " in body else None
    assert message is not None, "a text block with >>> must show the InputError it raises"
    # the arrays of the page's own example (site/index.md): q [1, 8, 1024, 64], k and v [1, 2, 1024, 64]
    ns.update(q=np.zeros((1, 8, 1024, 64), np.float32), k=np.zeros((1, 2, 1024, 64), np.float32),
              v=np.zeros((1, 2, 1024, 64), np.float32))
    for call in calls[:-1]:
        exec(call, ns)
    with pytest.raises(fuel_cy.InputError) as info:
        eval(calls[-1], ns)
    assert doctest.OutputChecker().check_output(message.strip() + "\n", str(info.value) + "\n", FLAGS), \
        (message, str(info.value))


@pytest.mark.parametrize("kind,body", list(_examples()))
def test_example_runs_as_shown(kind, body):
    _run(kind, body, _namespace())


@pytest.mark.parametrize("page", [p for p in PAGES if SESSION in p.read_text(encoding="utf-8")],
                         ids=lambda p: p.name)
def test_session_page_runs_in_order(page):
    ns = _namespace()
    blocks = list(_blocks(page.read_text(encoding="utf-8")))
    assert blocks, f"{page.name} promises examples but has none"
    for kind, body, line in blocks:
        try:
            _run(kind, body, ns)
        except BaseException as exc:
            raise AssertionError(f"{page.name}:{line}: {exc}") from exc


def test_every_kernel_page_has_a_runnable_example():
    pages = _kernel_pages()
    kernels = [p for p in pages if p != "kernels/index.md"]
    assert kernels
    for path in kernels:
        bodies = [body for kind, body, _ in _blocks(pages[path]) if ">>> " in body]
        name = path.split("/")[-1][:-3]
        assert any(f"fuel_cy.{name}(" in body for body in bodies), f"{path} has no example calling fuel_cy.{name}"


# ---- the docstrings speak Python -----------------------------------------------------------------

RUST = re.compile(r"Option<|\busize\b|DynScalar|DimRef\(|\bf32,|keyword - only|Contract: ")


def _docstrings():
    from fuel_cy.codegen.stubs import kernel_views

    return {v.name: v for v in kernel_views(ROOT)}


@pytest.mark.parametrize("name", sorted(_docstrings()))
def test_docstring_describes_every_argument_in_python_terms(name):
    """What help(fuel_cy.<kernel>) says after a rebuild (built by the same codegen)."""
    view = _docstrings()[name]
    doc, py = view.docstring, view.py
    assert not RUST.search(doc), RUST.search(doc)
    section = doc.split("Parameters\n----------\n", 1)[1].split("\n\nReturns", 1)[0]
    heads = [line.split(" : ")[0] for line in section.splitlines() if line and not line.startswith(" ")]
    assert heads == [a.name for a in py.inputs + py.params]
    for a in py.inputs + py.params:
        assert a.doc and "not described" not in a.doc, (name, a.name)
        assert a.example, (name, a.name)
        assert "Option" not in a.type and a.type.split(" | ")[0] in ("numpy.ndarray", "float", "int", "bool")
    returns = doc.split("Returns\n-------\n", 1)[1].split("\n\nRaises", 1)[0]
    assert [line.split(" : ")[0] for line in returns.splitlines() if not line.startswith(" ")] == \
        [o.name for o in py.outputs]
    raises = doc.split("Raises\n------\n", 1)[1].split("\n\nNotes", 1)[0]
    assert [line for line in raises.splitlines() if not line.startswith(" ")] == ["fuel_cy.InputError", "MemoryError"]


def test_backward_docstring_lists_each_gradient():
    doc = _docstrings()["attention_flash_backward"].docstring
    for grad in ("dq : numpy.ndarray", "dk : numpy.ndarray", "dv : numpy.ndarray"):
        assert grad in doc
    assert "Returns the tuple (dq, dk, dv)." in doc
