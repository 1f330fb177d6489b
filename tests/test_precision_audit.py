"""The Precision page's audit (benchmarks/results/precision.json, written by `fuel-cy demo --json`)
is of the kernels as they are: it covers every kernel and dtype, both P V modes where a kernel has
them, and torch's error beside fuel_cy's (flash-attn's rule); and its commit is not older than the
last change to the kernels' code or contracts, so a core change without a fresh audit fails here."""
from __future__ import annotations

import json
import subprocess

from conftest import ROOT

import fuel_cy
from fuel_cy.harness import peer_accuracy
from fuel_cy.harness.runner import _demo_modes

AUDIT = ROOT / "benchmarks" / "results" / "precision.json"
# what the audited numbers depend on: the math, the glue that binds it, the contracts
KERNEL_PATHS = ["fuel_cy/_core", "fuel_cy/codegen/cores.py", "contracts/*.md"]


def _audit() -> dict:
    return json.loads(AUDIT.read_text())


def test_the_audit_covers_every_kernel_dtype_and_mode():
    data = _audit()
    have = {(r["kernel"], r["dtype"], r.get("round_p")) for r in data["rows"]}
    want = {(name, dtype, round_p) for name, entry in fuel_cy.registry.items() for dtype, round_p in _demo_modes(entry)}
    assert want <= have, sorted(want - have)
    assert all(r["ok"] for r in data["rows"])


def test_the_audit_holds_flash_attns_rule_against_torch():
    """Each half-precision row: fuel_cy's error at most twice torch SDPA's in the same dtype, in the
    default mode (P in T) and the exact one, on every shape of the grid."""
    peer = _audit()["peer"]
    grid = {(d, f"B={peer_accuracy.BATCH} H={peer_accuracy.HEADS} Sq={sq} Sk={sk} D={h}", c)
            for d in ("BF16", "F16") for sq, sk in peer_accuracy.SEQLENS for h in peer_accuracy.HEAD_DIMS
            for c in (False, True)}
    assert {(r["dtype"], r["shape"], r["causal"]) for r in peer} == grid
    for r in peer:
        assert r["p_in_t_ok"] and r["p_in_t_error"] <= peer_accuracy.RATIO * r["torch_error"], r
        assert r["p_in_f32_ok"], r


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30)


def test_the_audit_is_not_older_than_the_kernels():
    commit = _audit().get("commit")
    assert commit, "the audit names the commit it measured (fuel-cy demo --json writes it)"
    if _git("rev-parse", "--git-dir").returncode != 0:   # an unpacked release: no history to compare
        return
    last = _git("log", "-1", "--format=%H", "--", *KERNEL_PATHS).stdout.strip()
    assert last, "the kernels' paths have a history"
    known = _git("cat-file", "-e", f"{commit}^{{commit}}")
    assert known.returncode == 0, f"the audit's commit {commit} is not in this history"
    fresh = _git("merge-base", "--is-ancestor", last, commit)
    assert fresh.returncode == 0, (
        f"the kernels changed in {last[:10]} after the audit's commit {commit[:10]}: rerun "
        "`fuel-cy demo --json benchmarks/results/precision.json` and commit the file")
