"""Every Python example on the site and in the README runs, and prints what the page says it
prints: `>>>` blocks are doctests (ELLIPSIS, NORMALIZE_WHITESPACE), other ```python blocks are
scripts that must run, and a ```text block that shows a `>>>` call followed by an `InputError`
must raise that error with that message.  So a number on a page cannot go stale."""
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


def _examples():
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for m in FENCE.finditer(text):
            kind, body = m.groups()
            line = text[: m.start()].count("\n") + 1
            if kind == "python" or body.lstrip().startswith(">>> "):
                yield pytest.param(kind, body, id=f"{page.name}:{line}")


def _namespace() -> dict:
    return {"fuel_cy": fuel_cy, "np": np, "numpy": np, "ml_dtypes": ml_dtypes, "rng": np.random.default_rng(0)}


@pytest.mark.parametrize("kind,body", list(_examples()))
def test_example_runs_as_shown(kind, body):
    if kind == "python" and ">>> " not in body:
        exec(compile(body, "<example>", "exec"), _namespace())
        return
    if kind == "python":
        test = doctest.DocTestParser().get_doctest(body, _namespace(), "example", None, 0)
        runner = doctest.DocTestRunner(optionflags=FLAGS)
        runner.run(test, out=lambda s: None)
        assert runner.failures == 0, body
        return
    # a ```text block: ">>> call" (after setup lines, if any) then "InputError: message"
    calls = [line[4:] for line in body.splitlines() if line.startswith(">>> ")]
    message = body.split("InputError: ", 1)[1] if "InputError: " in body else None
    assert message is not None, "a text block with >>> must show the InputError it raises"
    ns = _namespace()
    # the arrays of the page's own example (site/index.md): q [1, 8, 1024, 64], k and v [1, 2, 1024, 64]
    ns.update(q=np.zeros((1, 8, 1024, 64), np.float32), k=np.zeros((1, 2, 1024, 64), np.float32),
              v=np.zeros((1, 2, 1024, 64), np.float32))
    for call in calls[:-1]:
        exec(call, ns)
    with pytest.raises(fuel_cy.InputError) as info:
        eval(calls[-1], ns)
    assert doctest.OutputChecker().check_output(message.strip() + "\n", str(info.value) + "\n", FLAGS), \
        (message, str(info.value))
