"""Mutation check: does the suite fail on a subtly wrong core?

Each mutant is one small source edit of the hand-written core (a dropped or off-by-one mask, a
wrong scale, a skipped tile, rounding once instead of per operation).  For each, this script copies
the repository's tracked files to a temporary directory, applies the edit, builds the core for
this CPU's level only, and runs the numeric suites there; a mutant is caught when they fail.  A
baseline copy without an edit must pass, or nothing is proven.

    python tests/mutants.py            # all mutants (about a minute each on 2 cores)
    python tests/mutants.py scale-x1.1 # some of them

Not part of CI (each mutant is a rebuild); run it after changing the tests or the core.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUITES = ["tests/test_kernels_forward.py", "tests/test_paged_and_backward.py", "tests/test_half_precision.py",
          "tests/test_mixed.py", "tests/test_robustness.py::test_fuzz_valid_forward_matches_reference",
          "tests/test_robustness.py::test_fuzz_valid_backward_matches_reference",
          "tests/test_robustness.py::test_fuzz_across_tiles_matches_reference_in_every_dtype"]

# name -> [(file, exact text, replacement)]
MUTANTS: dict[str, list[tuple[str, str, str]]] = {
    "ignore-window-left": [(
        "fuel_cy/_core/drivers.pxi",
        'o.wl = _window(params.get("window_size_left"), max(shift + Sq, 0))',
        "o.wl = -1")],
    "window-left-off-by-one": [(
        "fuel_cy/_core/blocks.pxi",
        "        a = qpos - o.wl\n",
        "        a = qpos - o.wl + 1\n")],
    "scale-x1.1": [(
        "fuel_cy/_core/drivers.pxi",
        'o.scale = params["softmax_scale"]',
        'o.scale = params["softmax_scale"] * 1.1')],
    "drop-k-len": [(
        "fuel_cy/_core/drivers.pxi",
        'o.k_len = Sk if params.get("k_len") is None else min(params["k_len"], Sk)',
        "o.k_len = Sk")],
    # naive and backward start at the first key tile a query tile can see; start one later
    "skip-leading-tile-naive-backward": [(
        "fuel_cy/_core/kernels.pxi",
        "t0 = ka // BC\n",
        "t0 = ka // BC + (1 if ka >= BC else 0)\n")],
    # flash skips tiles no row can see; also skip the first partly visible one after them
    "skip-leading-tile-flash": [(
        "fuel_cy/_core/kernels.pxi",
        "        if cls == 0:\n            continue\n",
        "        if cls == 0 or (cls == 1 and t > 0 and tile_class(i0, i0 + nr - 1, j0 - BC, j0 - 1, o) == 0):\n"
        "            continue\n")],
    # bf16 "math in T" computed in float32 with one rounding at the end: R(), generated from the
    # dtype record (templates/cython/_core_dtypes.pxi.j2), returns bf16's operands unrounded
    "round-once-bf16": [(
        "templates/cython/_core_dtypes.pxi.j2",
        "        return fc_round_{{ r.suffix }}(<{{ r.work_ctype }}>x)\n",
        "        return {{ 'x' if r.code == 'BF16' else 'fc_round_' ~ r.suffix ~ '(<' ~ r.work_ctype ~ '>x)' }}\n")],
}


def _copy_tree(dest: Path) -> None:
    # tracked files and new ones not yet added (a core file created since the last commit), but
    # nothing .gitignore excludes (builds, generated code)
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split()
    for rel in files:
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def _apply(dest: Path, edits: list[tuple[str, str, str]]) -> None:
    for rel, old, new in edits:
        path = dest / rel
        text = path.read_text()
        if old not in text:
            raise SystemExit(f"mutant does not apply: {old!r} not in {rel} (update tests/mutants.py)")
        path.write_text(text.replace(old, new))


def run(name: str, edits: list[tuple[str, str, str]], level: str) -> tuple[bool, str, float]:
    """(suite failed, summary line, seconds) for one mutant (or the baseline, edits = [])."""
    start = time.time()
    with tempfile.TemporaryDirectory(prefix=f"fuel-cy-mutant-{name}-") as tmp:
        dest = Path(tmp)
        _copy_tree(dest)
        _apply(dest, edits)
        env = {**os.environ, "FUEL_CY_CPU_LEVELS": level, "FUEL_CY_CPU_CAPABILITY": level,
               "PYTHONPATH": str(dest), "FUEL_CY_FUZZ_EXAMPLES": "40"}
        build = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=dest, env=env,
                               capture_output=True, text=True)
        if build.returncode != 0:
            return True, "build failed: " + build.stderr.strip().splitlines()[-1], time.time() - start
        tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *SUITES],
                               cwd=dest, env=env, capture_output=True, text=True)
        lines = [line for line in tests.stdout.splitlines() if " passed" in line or " failed" in line]
        return tests.returncode != 0, (lines[-1] if lines else tests.stdout[-200:]).strip("= "), time.time() - start


def main(argv: list[str]) -> int:
    from fuel_cy.runtime import cpu

    level = cpu.capability()
    chosen = argv or list(MUTANTS)
    unknown = [n for n in chosen if n not in MUTANTS]
    if unknown:
        raise SystemExit(f"unknown mutant(s) {unknown}; known: {', '.join(MUTANTS)}")
    print(f"CPU level {level}; suites: {', '.join(Path(s).name for s in SUITES)}", flush=True)
    failed, summary, secs = run("baseline", [], level)
    print(f"{'baseline (no edit)':36s} {'FAILS: the harness is broken' if failed else 'passes'}  {summary}  ({secs:.0f} s)",
          flush=True)
    if failed:
        return 2
    survivors = []
    for name in chosen:
        failed, summary, secs = run(name, MUTANTS[name], level)
        print(f"{name:36s} {'caught' if failed else 'SURVIVED'}  {summary}  ({secs:.0f} s)", flush=True)
        if not failed:
            survivors.append(name)
    print("every mutant caught" if not survivors else f"survivors: {', '.join(survivors)}")
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
