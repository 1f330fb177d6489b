"""The real `fuel-cy` console script, in a subprocess: output and exit codes."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT, SEED

SCRIPT = Path(sys.executable).with_name("fuel-cy")
SUBCOMMANDS = ["validate", "fmt", "generate", "build", "list", "show", "cost", "run", "demo", "bench", "calibrate"]


def cli(*args, cwd=ROOT, env=None):
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, **(env or {})}, timeout=600)


def test_console_script_exists():
    assert SCRIPT.exists(), "pip install must provide the fuel-cy console script"


@pytest.mark.parametrize("sub", SUBCOMMANDS)
def test_help_for_every_subcommand(sub):
    r = cli(sub, "--help")
    assert r.returncode == 0 and "usage: fuel-cy " + sub in r.stdout


def test_python_dash_m_and_usage_errors():
    r = subprocess.run([sys.executable, "-m", "fuel_cy", "list"], capture_output=True, text=True)
    assert r.returncode == 0 and "attention_flash" in r.stdout
    assert cli().returncode == 2
    assert cli("frobnicate").returncode == 2


def test_validate_ok_and_missing_file(tmp_path):
    r = cli("validate")
    assert r.returncode == 0 and "ok (4 kernels" in r.stdout
    r = cli("validate", str(tmp_path / "missing.md"))
    assert r.returncode == 2 and "no such contract file" in r.stderr


def test_validate_reports_three_errors_with_lines(tmp_path, canonical_text):
    shutil.copy(ROOT / "contracts" / "fused_ops.yaml", tmp_path)
    bad = (canonical_text.replace("    - name: context_lens\n      dtypes: [U32]", "    - name: context_lens\n      dtypes: [U8]", 1)
           .replace('flops: "12 * b * hq * sq * sk * d"', 'flops: "12 * zz"', 1)
           .replace("kernel: attention_flash\n", "kernel: attention-flash\n", 1))
    path = tmp_path / "bad.md"
    path.write_text(bad)
    r = cli("validate", str(path))
    assert r.returncode == 1
    lines = [l for l in r.stdout.splitlines() if l.startswith(str(path) + ":")]
    assert len(lines) >= 3
    for fragment in ("U8", "zz", "attention-flash"):
        line = next(l for l in lines if fragment in l)
        number = int(line.split(":")[1])
        assert fragment in bad.splitlines()[number - 1] or "kernel" in line


def test_fmt_check_and_rewrite(tmp_path):
    shutil.copy(ROOT / "contracts" / "fused_ops.yaml", tmp_path)
    assert cli("fmt", "--check", str(ROOT / "contracts" / "fuel-reference-backend.md")).returncode == 0
    seed = tmp_path / "seed.md"
    shutil.copy(SEED, seed)
    before = seed.read_bytes()
    r = cli("fmt", "--check", str(seed))
    assert r.returncode == 1 and "would reformat" in r.stdout and seed.read_bytes() == before
    assert cli("fmt", str(seed)).returncode == 0
    assert seed.read_text() == (ROOT / "contracts" / "fuel-reference-backend.md").read_text()
    assert cli("fmt", "--check", str(seed)).returncode == 0


def test_generate_check_is_clean_after_install():
    r = cli("generate", "--check")
    assert r.returncode == 0, r.stdout + r.stderr


def test_generate_refuses_bad_contract_and_writes_nothing(tmp_path):
    proj = tmp_path / "proj"
    for part in ("contracts", "templates", "fuel_cy/_core"):
        shutil.copytree(ROOT / part, proj / part)
    out = tmp_path / "gen"
    assert cli("generate", "--root", str(proj), "--out", str(out)).returncode == 0
    snapshot = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    contract = proj / "contracts" / "fuel-reference-backend.md"
    text = contract.read_text()
    for evil in (text.replace('flops: "4 * b * hq * sq * sk * d"', "flops: \"__import__('os').system('touch pwned')\"", 1),
                 text.replace("kernel: attention_naive\n", "kernel: \"attention naive; import os\"\n", 1)):
        contract.write_text(evil)
        r = cli("generate", "--root", str(proj), "--out", str(out))
        assert r.returncode == 1 and "nothing was written" in r.stderr
        assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == snapshot
        assert not (proj / "pwned").exists() and not Path("pwned").exists()


def test_list_json_schema_is_stable():
    r = cli("list", "--json")
    data = json.loads(r.stdout)
    assert data["schema"] == "fuel-cy.list/1"
    by_contract: dict[str, list[str]] = {}
    for k in data["kernels"]:
        by_contract.setdefault(k["contract"], []).append(k["name"])
    assert by_contract == {
        "fuel-reference-backend.md": ["attention_naive", "attention_flash", "attention_paged_naive", "attention_flash_backward"],
        "fuel-cy-mixed.md": ["attention_flash_mixed", "attention_paged_mixed", "attention_flash_backward_mixed"],
        "fuel-cy-model.md": ["attention_varlen", "attention_masked", "attention_varlen_backward",
                             "attention_masked_backward"],
    }
    assert set(data["kernels"][0]) == {"name", "contract", "fused_op", "fused_op_id", "dtypes", "compute", "exec_arm",
                                       "exec_dtypes", "exec_wired", "revision_hash", "entry_point", "implemented"}
    kernels = {k["name"]: k for k in data["kernels"]}
    assert kernels["attention_paged_naive"]["fused_op_id"] == 13 and kernels["attention_naive"]["exec_wired"] is True
    assert kernels["attention_flash_mixed"]["fused_op_id"] == 40 and kernels["attention_flash_mixed"]["compute"] == "f32"
    assert kernels["attention_flash"]["compute"] == "T"
    table = cli("list").stdout
    assert "exec arm (F32/F64)" in table and "not exec-wired" in table and "exec arm (BF16/F16)" in table
    assert "fuel-cy-mixed.md" in table and "fuel-reference-backend.md" in table


def test_show(tmp_path):
    r = cli("show", "attention_paged_naive")
    assert r.returncode == 0 and "block_table" in r.stdout and "== k_cache.dim[1] == v_cache.dim[1]" in r.stdout
    data = json.loads(cli("show", "attention_flash", "--json").stdout)
    assert data["schema"] == "fuel-cy.show/1" and data["kernel"]["name"] == "attention_flash"
    assert [i["name"] for i in data["kernel"]["inputs"]] == ["q", "k", "v", "alibi_slopes"]
    r = cli("show", "attention_nope")
    assert r.returncode == 2 and "unknown kernel" in r.stderr


def test_cost_text_json_and_errors():
    r = cli("cost", "attention_flash", "--shape", "q=2,8,1024,64", "--shape", "k=2,2,1024,64",
            "--shape", "v=2,2,1024,64", "--json")
    data = json.loads(r.stdout)
    assert data["schema"] == "fuel-cy.cost/1"
    assert set(data) == {"schema", "kernel", "dtype", "flops", "bytes_moved", "host_bytes", "device_bytes",
                         "disk_bytes", "predicted_ns"}
    assert data["flops"] == 4 * 2 * 8 * 1024 * 1024 * 64 and data["dtype"] == "F32"
    r = cli("cost", "attention_flash", "--shape", "q=2,8,1024,64", "--shape", "k=2,2,1024,64",
            "--shape", "v=2,2,1024,64", "--dtype", "bf16")
    assert r.returncode == 0 and "BF16" in r.stdout
    assert cli("cost", "attention_flash", "--shape", "q=2,x").returncode == 2
    assert cli("cost", "attention_nope").returncode == 2
    r = cli("cost", "attention_flash", "--shape", "q=1,2,3,4")
    assert r.returncode == 2 and "missing" in r.stderr


def test_run_ok_mismatch_shape_and_errors():
    r = cli("run", "attention_flash", "--causal", "--alibi", "--window", "8,", "--softcap", "3", "--dtype", "bf16")
    assert r.returncode == 0 and "ok" in r.stdout and "vs naive" in r.stdout
    r = cli("run", "attention_flash", "--shape", "q=1,3,16,8", "--shape", "k=1,2,16,8")
    assert r.returncode == 2 and "divisible" in r.stderr and "shape_constraint" in r.stderr
    assert cli("run", "attention_flash", "--dtype", "int8").returncode == 2
    assert cli("run", "attention_flash", "--window", "x").returncode == 2
    r = cli("run", "attention_paged_naive", "--dtype", "f64")
    assert r.returncode == 0


def test_demo_verifies_every_kernel_and_dtype():
    r = cli("demo")
    assert r.returncode == 0, r.stdout + r.stderr
    import fuel_cy

    rows = [l for l in r.stdout.splitlines() if l.startswith("attention_")]
    # every dtype once, and bf16/f16 of the kernels with a P V mode (round_p) once in each mode
    with_modes = {n for n, e in fuel_cy.registry.items() if "round_p" in e.params}
    expected = [(name, d) for name, e in fuel_cy.registry.items() for d in e.dtypes
                for _ in range(2 if name in with_modes and d in ("BF16", "F16") else 1)]
    assert len(with_modes) == 6 and len(expected) == 38 + 12
    assert [tuple(l.split()[:2]) for l in rows] == expected
    assert sum("(P in T)" in l for l in rows) == sum("(P in f32)" in l for l in rows) == 12
    assert all(l.rstrip().endswith("yes") for l in rows)


def test_calibrate_fits_and_cost_predicts_time(tmp_path):
    target = tmp_path / "calibration.json"
    env = {"FUEL_CY_CALIBRATION": str(target)}
    r = cli("calibrate", "--quick", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    data = json.loads(target.read_text())
    assert data["version"] == 1 and "machine" in data
    fit = data["fits"]["attention_flash:F32"]
    # (how well it predicts depends on how quiet the machine is: reported, never asserted here;
    # the fit itself is tested on exact data below)
    assert fit["ns_per_flop"] > 0 and fit["heldout_max_rel_err"] >= 0
    assert "held-out" in r.stdout
    cost = json.loads(cli("cost", "attention_flash", "--shape", "q=1,4,512,64", "--shape", "k=1,2,512,64",
                          "--shape", "v=1,2,512,64", "--json", env=env).stdout)
    assert cost["predicted_ns"] is not None and cost["predicted_ns"] > 0
    assert json.loads(cli("cost", "attention_flash", "--shape", "q=1,4,512,64", "--shape", "k=1,2,512,64",
                          "--shape", "v=1,2,512,64", "--json", env={"FUEL_CY_CALIBRATION": str(tmp_path / "none.json")}).stdout)["predicted_ns"] is None


def test_time_model_fit_recovers_known_coefficients():
    """calibrate's fit: times made from known coefficients (one of them zero, which the
    non-negative fit must find) are fitted back, and a shape left out is predicted."""
    from fuel_cy.harness.bench import _fit_time_model

    truth = np.array([2500.0, 0.02, 0.0])
    shapes = [(2.0 * 4 * s * s * 64, 3.0 * 4 * s * 64 * 4) for s in (64, 128, 256, 384, 512, 768, 1024)]
    samples = [(f, b, float(truth @ [1.0, f, b])) for f, b in shapes]
    coef = _fit_time_model(samples[:-1])
    assert np.allclose(coef, truth, rtol=1e-6, atol=1e-9)
    f, b, t = samples[-1]
    assert abs(coef @ [1.0, f, b] - t) <= 1e-6 * t


def test_bench_targets_are_judged_from_the_results():
    """`fuel-cy bench` and the Performance page judge the targets from a result file."""
    from fuel_cy.harness.targets import targets

    def row(kernel, dtype, shape, ratio, peer="torch SDPA", **extra):
        return {"kernel": kernel, "dtype": dtype, "shape": shape, "ratio": ratio, "peer": peer, **extra}

    result = {"rows": [
        row("attention_flash", "F32", "B=1 H=8 S=4096 D=128", 1.25, pct_gemm=91.0),
        row("attention_flash", "F32", "B=1 H=8 S=4096 D=128 causal", 1.2, pct_gemm=90.0),
        row("attention_flash", "F32", "B=1 H=8 S=512 D=64", 6.0, peer="NumPy materialized"),
        row("attention_flash", "BF16", "B=1 H=8 S=2048 D=64", 0.3, peer="fuel_cy attention_flash f32"),
        row("attention_flash", "F16", "B=1 H=8 S=2048 D=64", 0.3, peer="fuel_cy attention_flash f32"),
        row("attention_paged_naive", "F32", "decode", 2.5, peer="torch SDPA (contiguous K/V)", pct_copy=69.0),
        row("attention_flash", "F32", "per call: decode GQA", 0.9, peer="torch SDPA (per call)"),
    ], "flash_32k_rss": {"extra_mb": 33.0}, "import_ms": 14.2, "machine": {"features": ["avx512f", "avx512_bf16"]}}
    judged = {t["target"]: t for t in targets(result)}
    assert judged["flash f32 >= 1.2x torch SDPA, non-causal points"]["met"] is True  # NumPy row not counted
    assert judged["flash f32 >= 1.3x torch SDPA, causal points"]["met"] is False
    assert judged["flash f32 >= 85% of the f32 GEMM rate, S=4096 D=128"] == {
        "target": "flash f32 >= 85% of the f32 GEMM rate, S=4096 D=128", "measured": "91%", "met": True,
        "limit": None}   # (no arithmetic peak in this result)
    assert judged["bf16 math in T within 4x of f32 (ratio >= 0.25)"]["met"] is True
    assert judged["f16 math in T within 4x of f32 (ratio >= 0.25; 2x on AVX512-FP16 CPUs, else 4x)"]["met"] is True
    assert judged["backward f32 >= 1.3x torch autograd backward (GQA included)"]["met"] is None
    assert judged["paged decode K+V read >= 70% of the copy rate"]["met"] is False
    # on a CPU with native f16 arithmetic the f16 bound is 2x
    fp16 = {t["target"]: t for t in targets({**result, "machine": {"features": ["avx512_fp16"]}})}
    assert fp16["f16 math in T within 2x of f32 (ratio >= 0.50; 2x on AVX512-FP16 CPUs, else 4x)"]["met"] is False
    assert judged["flash S=32768 D=64 peak RSS <= inputs + output + 64 MB"]["measured"] == "+33 MB"
    assert judged["per call <= torch SDPA per call (decode GQA, same process)"]["met"] is False
    assert judged["import fuel_cy adds <= 20 ms (after numpy, ml_dtypes)"] == {
        "target": "import fuel_cy adds <= 20 ms (after numpy, ml_dtypes)", "measured": "14.2 ms", "met": True}


def test_memory_bound_rows_read_against_a_copy_timed_beside_them(monkeypatch):
    """A paged decode's share of the copy rate comes from a large copy timed in its own interleaved
    group, not from the rate measured at the start of the run (a shared host's bandwidth moves);
    so does its share of a read alone on the kernels' threads."""
    import numpy as np

    from fuel_cy.harness import bench

    probe = bench.CopyProbe(mib=1)
    groups = []

    def fake_interleaved(fns, reps=5, **kw):
        groups.append(list(fns))
        return [0.004 if f is probe else 0.001 if f == probe.read else 0.002 for f in fns]

    monkeypatch.setattr(bench, "interleaved", fake_interleaved)
    monkeypatch.setattr(bench, "copy_gbps", lambda: 1.0)   # the start-of-run rate: 1 GB/s
    rows, start_rate = bench._paged_rows(None, np.random.default_rng(0), True, lambda s: None, probe)
    assert start_rate == 1.0
    (row,) = [r for r in rows if r.get("pct_copy") is not None]
    # ours, the copy and the read, side by side
    assert any(f is probe for f in groups[0]) and probe.read in groups[0] and len(groups[0]) == 3
    beside = 2 * probe.src.nbytes / 0.004 / 1e9
    assert row["copy_gbps"] == pytest.approx(beside)
    assert row["kv_gbps"] == pytest.approx(2 * 16 * 1024 * 8 * 128 * 4 / 0.002 / 1e9)
    assert row["pct_copy"] == pytest.approx(100 * row["kv_gbps"] / beside)
    assert row["read_gbps"] == pytest.approx(probe.rbuf.nbytes / 0.001 / 1e9)
    assert row["pct_read"] == pytest.approx(100 * row["kv_gbps"] / row["read_gbps"])


def test_interleaved_takes_more_rounds_of_short_calls():
    """A group of short calls takes rounds until they span the bench's minimum time (capped), so a
    median is not three samples from one slow second; a group already that long keeps `reps`."""
    import time

    from fuel_cy.harness import bench

    calls = []
    bench.interleaved([lambda: calls.append(1)], reps=3)
    assert len(calls) == 1 + bench.MAX_REPS            # the warm-up, then the cap
    calls.clear()
    bench.interleaved([lambda: calls.append(1)], reps=3, min_seconds=0.0)
    assert len(calls) == 1 + 3
    calls.clear()
    bench.interleaved([lambda: (calls.append(1), time.sleep(0.02))], reps=3, min_seconds=0.05)
    assert len(calls) == 1 + 3                          # 3 rounds of >= 20 ms already span 50 ms
    a, b = bench.interleaved([lambda: None, lambda: time.sleep(0.002)], reps=3)
    assert a < b


def test_bench_measures_each_compute_bound_miss_against_the_arithmetic_peak(capsys):
    """Issue #37's "each miss with the profile that explains it": a ratio target's worst point is
    set against the peak the run measured (our rate and the rate the goal needs, each a share of
    it), under the targets table; bf16 with exact P against the ceiling its two kinds of products
    allow; rows no measured peak bounds (memory-bound, math in T, bf16 on a CPU without its dot
    product or on AMX tiles) get no such line."""
    from fuel_cy.harness.bench import print_targets
    from fuel_cy.harness.targets import targets

    def row(kernel, dtype, shape, gflops, ratio, peer="torch SDPA", **extra):
        return {"kernel": kernel, "dtype": dtype, "shape": shape, "gflops": gflops, "ratio": ratio, "peer": peer,
                **extra}

    result = {"rows": [
        # our 150 GFLOP/s at 1.1x: the peer ran 136.4, 1.2x of it is 163.6 = 82% of a 200 peak
        row("attention_flash", "F32", "B=1 H=8 S=2048 D=128", 150.0, 1.1, pct_gemm=93.75),
        row("attention_flash", "F32", "B=1 H=8 S=4096 D=128", 150.0, 1.5, pct_gemm=93.75),
        # 1.3x a peer at 180 is 234: more than the peak
        row("attention_flash_backward", "F32", "B=1 Hq=8 Hkv=2 S=2048 D=128", 180.0, 1.0,
            peer="torch SDPA autograd bwd"),
        row("attention_flash_mixed", "BF16", "B=1 H=8 S=1024 D=64", 100.0, 1.2, peer="torch SDPA bf16", mode="P in T"),
        row("attention_flash_mixed", "F16", "B=1 H=8 S=1024 D=64", 100.0, 0.9, peer="fuel_cy attention_flash f32",
            mode="P in T", ms=11.0, peer_ms=9.9),
        # the same group's exact-P call (its row against torch): 10.0 ms, so 0.99x our f32's 9.9
        row("attention_flash_mixed", "F16", "B=1 H=8 S=1024 D=64", 110.0, 2.0, peer="torch SDPA f16", ms=10.0),
        row("attention_paged_naive", "F32", "decode", 40.0, 1.5, peer="torch SDPA (contiguous K/V)", pct_copy=60.0),
        # the same call against a read alone timed beside it (a second shape, so the lines above keep theirs)
        row("attention_paged_naive", "F32", "decode 2", 40.0, 3.0, peer="torch SDPA (contiguous K/V)", pct_copy=120.0,
            pct_read=75.0),
        row("attention_paged_naive", "F32", "decode 2", 40.0, 12.0, peer="torch gather + SDPA"),
        row("attention_paged_naive", "F32", "decode", 40.0, 10.0, peer="torch gather + SDPA"),
        # the founding f16 flash, every product and sum rounded, at 0.125x our f32 (which ran 160)
        row("attention_flash", "F16", "B=1 H=8 S=2048 D=128", 20.0, 0.125, peer="fuel_cy attention_flash f32"),
    ], "gemm_gflops": 160.0, "peak_gflops": {"f32": 200.0, "f64": 100.0, "f16 rounded": 25.0},
        "machine": {"features": ["avx512f", "avx512_bf16"]}}
    judged = {t["target"]: t for t in targets(result)}
    assert judged["flash f32 >= 1.2x torch SDPA, non-causal points"]["limit"] == (
        "worst at B=1 H=8 S=2048 D=128 (f32): ours 150 GFLOP/s = 75% of the f32 peak (200); "
        "1.20x the peer's 136 needs 164, 82% of it")
    assert judged["backward f32 >= 1.3x torch autograd backward (GQA included)"]["limit"].endswith(
        "1.30x the peer's 180 needs 234, more than the peak")
    assert judged["flash f32 >= 85% of the f32 GEMM rate, S=4096 D=128"]["limit"] == (
        "the f32 GEMM it is measured against runs at 80% of the f32 peak (200 GFLOP/s), the flash at 75%")
    # f16 on float32 FMAs (no AVX512-FP16): against the f32 peak
    f16_limit = judged["mixed f16 flash, P in T: <= 1.0x our f32 flash's time"]["limit"]
    assert "= 50% of the f32 peak" in f16_limit
    # and beside the exact-P mode timed with it: the rounding of P is what it costs
    assert f16_limit.endswith("at that point the same kernel with exact P runs 0.99x our f32: rounding P to f16 "
                              "adds 10% to its time"), f16_limit
    # on an AVX512-FP16 CPU the modes do not multiply alike: no such line (nor a peak one)
    fp16 = {t["target"]: t for t in targets({**result, "machine": {"features": ["avx512f", "avx512_fp16"]}})}
    assert fp16["mixed f16 flash, P in T: <= 1.0x our f32 flash's time"]["limit"] is None
    # the founding f16 kernels without AVX512-FP16: against the rate of their rounded multiply-adds;
    # 0.25x our f32's 160 is 40, more than that rate (on an AVX512-FP16 CPU: no line)
    in_t = "f16 math in T within 4x of f32 (ratio >= 0.25; 2x on AVX512-FP16 CPUs, else 4x)"
    assert judged[in_t]["limit"] == (
        "worst at B=1 H=8 S=2048 D=128 (f16): ours 20 GFLOP/s = 80% of the f16 rounded peak (25); "
        "0.25x the peer's 160 needs 40, more than the peak")
    assert fp16["f16 math in T within 2x of f32 (ratio >= 0.50; 2x on AVX512-FP16 CPUs, else 4x)"]["limit"] is None
    # the bf16 dot product's peak was not measured: no line, as for the memory-bound decode
    assert judged["mixed bf16 flash, P in T: >= 1.5x torch SDPA bf16 (no AMX)"]["limit"] is None
    # bf16 with exact P multiplies on both units: 2 of the backward's 5 products on vdpbf16ps (peak
    # 400), 3 in float32 (peak 200): 5 / (2/400 + 3/200) = 250; the peer at 100 / 0.8 = 125
    exact = {**result, "peak_gflops": {"f32": 200.0, "bf16": 400.0}, "rows": [
        row("attention_flash_backward_mixed", "BF16", "B=1 H=8 S=2048 D=128", 100.0, 0.8,
            peer="torch SDPA autograd bwd bf16")]}
    (bwd,) = [t for t in targets(exact) if t["target"].startswith("mixed backward >= 1.0x")]
    assert bwd["met"] is False and bwd["limit"] == (
        "worst at B=1 H=8 S=2048 D=128 (bf16): ours 100 GFLOP/s = 40% of the exact-P backward ceiling (250: 2 of "
        "its 5 products at the bf16 peak, 3 at the f32); 1.00x the peer's 125 needs 125, 50% of it")
    # on an AMX CPU the tiles take the products: no measured ceiling, no line
    amx = {**exact, "machine": {"features": ["avx512f", "avx512_bf16", "amx_bf16", "amx_tile"]}}
    assert [t for t in targets(amx) if t["target"].startswith("mixed backward >= 1.0x")][0]["limit"] is None
    # memory-bound: against the copy rate, the gather peer's row reading its shape's rate
    assert judged["paged decode >= 2x torch SDPA on contiguous K/V"]["limit"] == (
        "worst at decode (f32): ours reads K+V at 60% of the copy rate; 2.00x the peer needs 80%")
    assert judged["paged decode >= 15x torch gather + SDPA"]["limit"] == (
        "worst at decode (f32): ours reads K+V at 60% of the copy rate; 15.00x the peer needs 90%")
    # past the copy rate, within a read alone on the same threads: 15x needs 150% and 94% of them
    read = {**result, "rows": [r for r in result["rows"] if r["shape"] == "decode 2"]}
    assert {t["target"]: t for t in targets(read)}["paged decode >= 15x torch gather + SDPA"]["limit"] == (
        "worst at decode 2 (f32): ours reads K+V at 120% of the copy rate; 15.00x the peer needs 150%, more than "
        "the copy rate; against a read alone on the same threads, ours 75%, the goal 94%")
    print_targets(list(judged.values()))
    out = capsys.readouterr().out
    tail = out.split("What the misses measure against the machine:\n")[1]
    # only the misses: the flash and backward rows, the f16 row (the GEMM-rate target is met)
    assert [line.split(":")[0] for line in tail.strip().splitlines()] == [
        "- flash f32 >= 1.2x torch SDPA, non-causal points", "- backward f32 >= 1.3x torch autograd backward (GQA included)",
        "- paged decode >= 2x torch SDPA on contiguous K/V", "- paged decode >= 15x torch gather + SDPA",
        "- f16 math in T within 4x of f32 (ratio >= 0.25; 2x on AVX512-FP16 CPUs, else 4x)",
        "- mixed f16 flash, P in T"], tail


def test_bench_measures_each_read_share_miss_against_the_read_and_the_arithmetic():
    """A memory-bound call's share of the copy rate, missed, is set against a read alone on the
    same threads and against the peak of the unit its products run on (bf16 on vdpbf16ps where
    the CPU has it), so the line says whether bandwidth, arithmetic or neither holds it; its
    worst point is the lowest share, whichever the row's ratio."""
    from fuel_cy.harness.targets import targets

    def row(dtype, pct_copy, gflops, ratio):
        return {"kernel": "attention_varlen", "dtype": dtype, "shape": f"mix {dtype}", "gflops": gflops,
                "ratio": ratio, "peer": "torch SDPA per sequence (contiguous K/V)", "pct_copy": pct_copy,
                "kv_gbps": 0.25 * pct_copy, "copy_gbps": 25.0, "pct_read": pct_copy / 1.25, "read_gbps": 31.25}

    name = "varlen over a paged pool (decode-heavy) K+V read >= 70% of the copy rate"
    result = {"rows": [row("F32", 88.0, 60.0, 3.0), row("BF16", 64.0, 100.0, 14.0)],
              "peak_gflops": {"f32": 200.0, "bf16": 400.0}, "machine": {"features": ["avx512f", "avx512_bf16"]}}
    (t,) = [t for t in targets(result) if t["target"] == name]
    assert t["met"] is False and t["measured"] == "64% - 88%"
    assert t["limit"] == ("worst at mix BF16 (bf16): K+V read at 16.0 GB/s, 64% of a 25.0 GB/s copy timed beside "
                          "it and 51% of a read alone on the same threads (31.2 GB/s); its arithmetic at 100 "
                          "GFLOP/s, 25% of the bf16 peak")
    # without AVX512-BF16 the bf16 products run on float32 FMAs; with no peak measured, no such clause
    (t,) = [t for t in targets({**result, "machine": {"features": ["avx512f"]}}) if t["target"] == name]
    assert t["limit"].endswith("its arithmetic at 100 GFLOP/s, 50% of the f32 peak")
    (t,) = [t for t in targets({**result, "peak_gflops": {}}) if t["target"] == name]
    assert t["limit"].endswith("(31.2 GB/s)")
    # a record from before the read probe: the copy's rate from the row's own share, no read clause
    old = [{k: v for k, v in r.items() if k not in ("copy_gbps", "pct_read", "read_gbps")} for r in result["rows"]]
    (t,) = [t for t in targets({**result, "rows": old, "peak_gflops": {}}) if t["target"] == name]
    assert t["limit"] == "worst at mix BF16 (bf16): K+V read at 16.0 GB/s, 64% of a 25.0 GB/s copy timed beside it"


# ---- issue #16: the CLI on top of the library, and the edit workflow in both install modes ------

def _checkout(dest: Path, *, sources: bool = True) -> Path:
    """A fuel_cy checkout to work in: contracts and pyproject.toml (+ templates, core, setup.py)."""
    shutil.copytree(ROOT / "contracts", dest / "contracts")
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")
    if sources:
        shutil.copytree(ROOT / "templates", dest / "templates")
        shutil.copytree(ROOT / "fuel_cy" / "_core", dest / "fuel_cy" / "_core")
        shutil.copy(ROOT / "fuel_cy" / "_cpuid.pyx", dest / "fuel_cy" / "_cpuid.pyx")
        shutil.copy(ROOT / "setup.py", dest / "setup.py")
    return dest


def _edit_contract(root: Path) -> None:
    contract = root / "contracts" / "fuel-reference-backend.md"
    contract.write_text(contract.read_text().replace('flops: "4 * b * hq * sq * sk * d"', 'flops: "8 * b * hq * sq * sk * d"', 1))


def _snapshot(folder: Path) -> dict:
    return {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(folder.rglob("*")) if p.is_file()}


def _fake_build(root: Path, *, record_sources: bool = True) -> None:
    """What a successful in-place build leaves behind, minus the compiling: module files and the
    build record (generate --check only looks at their presence, times and the record)."""
    from importlib.machinery import EXTENSION_SUFFIXES

    from fuel_cy.codegen.buildinfo import compiled_sources, write_build_info

    for rel in ("fuel_cy/_generated/_kernels", "fuel_cy/_cpuid", "fuel_cy/_generated/_core_default"):
        (root / (rel + EXTENSION_SUFFIXES[0])).write_bytes(b"")
    info = {"cpu_capabilities": ["default"], "levels": {"default": {"compile_args": []}}, "built_at": "now"}
    if record_sources:
        info["sources_sha256"] = compiled_sources(root)
    write_build_info(root / "fuel_cy" / "_generated", info)


def _installed_copy(site: Path) -> Path:
    """A regular (non-editable) install of fuel_cy, as PYTHONPATH sees it: the package without its
    checkout around it (the compiled modules are left out: the commands tested never load them)."""
    shutil.copytree(ROOT / "fuel_cy", site / "fuel_cy",
                    ignore=shutil.ignore_patterns("*.so", "*.c", "__pycache__", "*.pyx", "*.pxi", "*.h", "calibration-*"))
    return site


def test_library_layers_do_not_import_the_cli():
    import ast

    for path in sorted((ROOT / "fuel_cy").rglob("*.py")):
        if path.name in ("cli.py", "__main__.py") or "_generated" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                assert not (node.module or "").endswith("cli"), f"{path} imports the CLI"
    from fuel_cy.errors import UsageError
    from fuel_cy.harness.tables import format_table
    from fuel_cy import cli

    assert cli.UsageError is UsageError
    assert format_table([["a", "bb"], ["ccc", "d"]]) == "a    bb\n---  --\nccc  d"


def test_build_info_is_written_as_python_not_patched_json(tmp_path):
    from fuel_cy.codegen.buildinfo import read_build_info, render_build_info, write_build_info

    info = {"compiler": "/opt/truecc/bin/gcc-\"x\"\\", "openmp": True, "sanitize": False, "note": None,
            "flags": ["-DFALSE=false", "-O3"], "levels": {"default": {"features": []}}}
    ns: dict = {}
    exec(render_build_info(info), ns)
    assert ns["BUILD_INFO"] == info
    assert read_build_info(write_build_info(tmp_path, info)) == info
    assert read_build_info(tmp_path / "missing.py") is None
    with pytest.raises(ValueError):
        render_build_info({"path": Path("/x")})


def test_cost_checks_shapes_with_the_kernels_own_validation():
    import numpy as np

    import fuel_cy

    cases = [((1, 3, 16, 8), (1, 2, 16, 8), (1, 2, 16, 8)),    # Hq not a multiple of Hkv
             ((1, 8, 16, 64), (1, 2, 16, 32), (1, 2, 16, 32)),  # D differs
             ((1, 8, 16, 64), (1, 2, 16, 64), (1, 2, 8, 64)),   # v is not k's shape
             ((1, 8, 16), (1, 2, 16, 64), (1, 2, 16, 64))]      # q's rank
    for q, k, v in cases:
        with pytest.raises(fuel_cy.InputError) as exc:
            fuel_cy.attention_flash(*(np.zeros(s, np.float32) for s in (q, k, v)))
        r = cli("cost", "attention_flash", *(f"--shape={n}={','.join(map(str, s))}" for n, s in zip("qkv", (q, k, v))))
        assert r.returncode == 2 and r.stdout == "", r.stdout + r.stderr
        assert r.stderr.strip() == f"fuel-cy cost: error: {exc.value}"
    # the dtype takes part too: the mixed kernel takes bf16/f16 only
    r = cli("cost", "attention_flash_mixed", "--shape", "q=1,8,16,64", "--shape", "k=1,2,16,64",
            "--shape", "v=1,2,16,64", "--dtype", "f32")
    assert r.returncode == 2 and "accept.inputs[0].dtypes ['BF16', 'F16']: received dtype float32" in r.stderr
    # a shape far beyond memory is still costed: the stand-ins the validators inspect hold no data
    r = cli("cost", "attention_flash", "--shape", "q=64,64,1048576,256", "--shape", "k=64,8,1048576,256",
            "--shape", "v=64,8,1048576,256", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["flops"] == 4 * 64 * 64 * 1048576 * 1048576 * 256
    r = cli("cost", "attention_paged_naive", "--shape", "q=4,8,1,64", "--shape", "k_cache=100,16,2,64",
            "--shape", "v_cache=100,16,2,64", "--shape", "block_table=4,10", "--shape", "context_lens=5")
    assert r.returncode == 2 and "attention_paged_naive: input 'context_lens'" in r.stderr


def test_run_rejects_options_the_kernel_does_not_have():
    r = cli("run", "attention_paged_naive", "--causal")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "attention_paged_naive has no option --causal" in r.stderr
    assert "options for attention_paged_naive: --shape, --dtype, --seed, --softcap, --alibi" in r.stderr
    for args, flag in ((("--window", "4,"), "--window"), (("--k-len", "8"), "--k-len")):
        r = cli("run", "attention_paged_naive", *args)
        assert r.returncode == 2 and f"attention_paged_naive has no option {flag}" in r.stderr
    r = cli("run", "attention_flash_backward", "--k-len", "8")
    assert r.returncode == 2 and "attention_flash_backward has no option --k-len" in r.stderr and "--causal" in r.stderr
    r = cli("run", "attention_flash", "--shape", "kv=1,2,16,8")
    assert r.returncode == 2 and "attention_flash has no input 'kv'" in r.stderr and "q, k, v" in r.stderr


def test_demo_skips_with_a_note_the_dtypes_an_edited_contract_removed(monkeypatch, capsys):
    import dataclasses

    import numpy as np

    import fuel_cy
    from fuel_cy import cli as cli_module
    from fuel_cy.errors import InputError

    real_naive, flash = fuel_cy.registry["attention_naive"], fuel_cy.registry["attention_flash"]

    def naive_without_bf16(q, *args, **kwargs):  # attention_naive as rebuilt after the edit
        if q.dtype not in (np.float32, np.float64, np.float16):
            raise InputError("attention_naive", "input 'q'", "accept.inputs[0].dtypes ['F32', 'F64', 'F16']",
                             f"received dtype {q.dtype}", "contracts/fuel-reference-backend.md:54")
        return real_naive.fn(q, *args, **kwargs)

    def demo(naive_dtypes):
        naive = dataclasses.replace(real_naive, dtypes=naive_dtypes, fn=naive_without_bf16)
        monkeypatch.setattr(fuel_cy, "registry", {"attention_naive": naive,
                                                  "attention_flash": dataclasses.replace(flash, dtypes=("F32", "BF16"))})
        monkeypatch.setattr(fuel_cy, "attention_naive", naive_without_bf16)
        code = cli_module.main(["demo"])
        return code, capsys.readouterr().out

    # rebuilt: naive no longer lists BF16; flash's BF16 row runs, its naive comparison is skipped
    code, out = demo(("F32", "F64", "F16"))
    assert code == 0, out
    rows = [tuple(l.split()[:2]) for l in out.splitlines() if l.startswith("attention_")]
    assert rows == [("attention_naive", "F32"), ("attention_naive", "F64"), ("attention_naive", "F16"),
                    ("attention_flash", "F32"), ("attention_flash", "BF16")]
    assert ("note: attention_flash BF16: comparison with attention_naive skipped: attention_naive does not "
            "take BF16 (its contract lists F32, F64, F16)") in out
    # generated, not yet built: the tables still list BF16 but the kernel refuses it
    code, out = demo(("F32", "BF16"))
    assert code == 0, out
    assert "note: attention_naive BF16 skipped: the compiled kernel does not take BF16" in out
    assert "fuel-cy build" in out and "all kernels verified" in out


def test_validate_uses_the_checkout_in_the_current_folder(tmp_path):
    checkout = _checkout(tmp_path / "clone", sources=False)
    contract = checkout / "contracts" / "fuel-reference-backend.md"
    contract.write_text(contract.read_text().replace('flops: "4 * b * hq * sq * sk * d"', 'flops: "4 * zz"', 1))
    for cwd in (checkout, checkout / "contracts"):
        r = cli("validate", cwd=cwd)
        assert r.returncode == 1, r.stdout + r.stderr
        assert r.stdout.splitlines()[0] == (f"contracts: {checkout / 'contracts'} -- the checkout in the current "
                                            f"folder ({checkout})")
        assert f"{contract}:" in r.stdout and "zz" in r.stdout
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    r = cli("validate", cwd=elsewhere)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "the current folder is not in a checkout" in r.stdout.splitlines()[0]
    assert str(checkout) not in r.stdout
    # a folder whose pyproject names another project is not a checkout
    (elsewhere / "contracts").mkdir()
    (elsewhere / "pyproject.toml").write_text('[project]\nname = "other"\n')
    assert "not in a checkout" in cli("validate", cwd=elsewhere).stdout


def test_validate_in_a_checkout_also_checks_what_generate_checks(tmp_path):
    """Each file can be valid on its own while the checkout would not generate: a kernel bound to a
    core driver that no longer fits it.  `fuel-cy validate` says so, as `fuel-cy generate` would."""
    checkout = _checkout(tmp_path / "clone")
    r = cli("validate", cwd=checkout)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "11 kernels fit the fused-op table, python-api.yaml and the core's drivers" in r.stdout
    mixed = checkout / "contracts" / "fuel-cy-mixed.md"
    text = mixed.read_text()
    at = text.index("kernel: attention_paged_mixed")
    mixed.write_text(text[:at] + text[at:].replace("    softmax_scale: { kind: f32 }\n", "", 1))
    r = cli("validate", cwd=checkout)
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"{mixed}: ok" in r.stdout  # the file alone is a valid contract
    assert "attention_paged_mixed.op_params.fields" in r.stdout and "BINDINGS" in r.stdout
    assert "kernels fit" not in r.stdout


def test_a_failed_build_shows_the_compilers_errors_not_just_its_tail():
    """Cython prints its error blocks first, then hundreds of warnings and a traceback per CPU
    level: `fuel-cy build` picks the errors out, each once, C compiler errors too."""
    from fuel_cy.cli import compile_errors

    block = ("Error compiling Cython file:\n" + "-" * 60 + "\n...\n        return out, lse\n" + " " * 22 + "^\n"
             + "-" * 60 + "\nfuel_cy/_core/entries.pxi:190:60: local variable 'lse' referenced before assignment")
    noise = "\n".join(f"warning: fuel_cy/_core/blocks.pxi:{n}:4: Unreachable code" for n in range(400))
    gcc = "fuel_cy/_core/fc_gemm.h:12:5: error: 'x' undeclared (first use in this function)"
    output = "\n".join([block, noise, block, noise, "Traceback (most recent call last):", "  ...", gcc, gcc,
                        "Cython.Compiler.Errors.CompileError: fuel_cy/_generated/_core_avx2.pyx"])
    assert output[-4000:].count("referenced before assignment") == 0   # what the tail alone showed
    errors = compile_errors(output)
    assert errors == block + "\n\n" + gcc
    assert compile_errors(noise) == ""
    assert compile_errors(gcc + "\n" + gcc.replace("'x'", "'y'"), limit=50) == gcc[:50] + "\n…"


def test_build_without_cython_says_what_to_run_and_writes_nothing(tmp_path):
    proj = _checkout(tmp_path / "proj")
    assert cli("generate", "--root", str(proj)).returncode == 0
    _edit_contract(proj)  # a build would now rewrite generated files
    before = _snapshot(proj)
    code = ("import sys; sys.modules['Cython'] = None  # as if Cython were not installed\n"
            "from fuel_cy.cli import main; sys.exit(main(sys.argv[1:]))")
    # FUEL_CY_CPU_LEVELS names no level: should the check ever let setup.py run, it stops at once
    r = subprocess.run([sys.executable, "-c", code, "build", "--root", str(proj)], capture_output=True, text=True,
                       env={**os.environ, "FUEL_CY_CPU_LEVELS": "no-such-level"}, timeout=300)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    assert f"Cython is not installed in {sys.executable}" in r.stderr and "Nothing was written." in r.stderr
    assert f"{sys.executable} -m pip install 'Cython>=3.0.8' 'setuptools>=77'" in r.stderr
    assert f"cd {proj} && {sys.executable} -m pip install -e ." in r.stderr
    assert _snapshot(proj) == before
    # the same without a C compiler
    r = cli("build", "--root", str(proj), env={"CC": "no-such-cc", "FUEL_CY_CPU_LEVELS": "no-such-level"})
    assert r.returncode == 1 and "no C compiler: `no-such-cc` is not on PATH" in r.stderr and "Traceback" not in r.stderr
    assert _snapshot(proj) == before


def test_build_in_a_checkout_this_python_does_not_import_explains_and_writes_nothing(tmp_path):
    proj = _checkout(tmp_path / "proj")
    before = _snapshot(proj)
    # editable install of another checkout (this suite's): building here would change nothing it runs
    r = cli("build", cwd=proj, env={"FUEL_CY_CPU_LEVELS": "no-such-level"})
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert f"this Python imports fuel_cy from the checkout {ROOT} (editable), not from {proj}" in r.stderr
    python = SCRIPT.read_text().splitlines()[0][2:]  # the console script's interpreter
    assert f"install your edits:        cd {proj} && {python} -m pip install .\n" in r.stderr
    assert f"fuel-cy build --root {proj}" in r.stderr
    assert _snapshot(proj) == before
    # a regular install: it cannot be rebuilt in place
    site = _installed_copy(tmp_path / "site")
    env = {"PYTHONPATH": str(site), "FUEL_CY_CPU_LEVELS": "no-such-level"}
    r = subprocess.run([sys.executable, "-m", "fuel_cy", "build"], capture_output=True, text=True, cwd=proj,
                       env={**os.environ, **env}, timeout=300)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert f"a regular, non-editable install at {site / 'fuel_cy'}" in r.stderr
    assert "an installed package cannot be rebuilt in place" in r.stderr
    assert f"install your edits:        cd {proj} && {sys.executable} -m pip install ." in r.stderr
    assert _snapshot(proj) == before
    # and outside any checkout there is nothing to build
    r = subprocess.run([sys.executable, "-m", "fuel_cy", "build"], capture_output=True, text=True, cwd=tmp_path,
                       env={**os.environ, **env}, timeout=300)
    assert r.returncode == 2 and "no fuel_cy checkout" in r.stderr and "cd into your clone" in r.stderr


def test_generate_check_reports_an_extension_built_from_other_sources(tmp_path):
    proj = _checkout(tmp_path / "proj")
    assert cli("generate", "--root", str(proj)).returncode == 0
    _fake_build(proj)
    r = cli("generate", "--check", "--root", str(proj))
    assert r.returncode == 0, r.stdout
    assert f"the compiled extension in {proj / 'fuel_cy' / '_generated'} was built from these sources" in r.stdout
    # edit, regenerate without compiling: the generated files are current, the extension is not
    _edit_contract(proj)
    assert cli("generate", "--root", str(proj)).returncode == 0
    r = cli("generate", "--check", "--root", str(proj))
    assert r.returncode == 1, r.stdout
    assert f"generated files in {proj / 'fuel_cy' / '_generated'} are up to date" in r.stdout
    assert "stale extension: the compiled modules in" in r.stdout and "fuel_cy/_generated/_kernels.pyx" in r.stdout
    assert f"run `fuel-cy build --root {proj}`" in r.stdout
    # a compiled module missing from the build
    _fake_build(proj)
    next(proj.glob("fuel_cy/_generated/_core_default.*")).unlink()
    r = cli("generate", "--check", "--root", str(proj))
    assert r.returncode == 1 and "compiled module(s) missing: fuel_cy/_generated/_core_default" in r.stdout


def test_generate_check_judges_an_older_record_by_file_times(tmp_path):
    proj = _checkout(tmp_path / "proj")
    assert cli("generate", "--root", str(proj)).returncode == 0
    _fake_build(proj, record_sources=False)
    assert cli("generate", "--check", "--root", str(proj)).returncode == 0
    _edit_contract(proj)
    assert cli("generate", "--root", str(proj)).returncode == 0
    past = (proj / "fuel_cy" / "_generated" / "_kernels.pyx").stat().st_mtime - 60
    for module in [*proj.glob("fuel_cy/_generated/*.so"), *proj.glob("fuel_cy/*.so")]:
        os.utime(module, (past, past))
    r = cli("generate", "--check", "--root", str(proj))
    assert r.returncode == 1 and "stale extension: sources changed after the compiled modules" in r.stdout, r.stdout


def test_generate_check_in_a_checkout_with_a_regular_install(tmp_path):
    """`pip install .`, then edit and regenerate: the installed copy no longer matches the checkout."""
    from fuel_cy.codegen.buildinfo import compiled_sources, read_build_info, write_build_info

    proj = _checkout(tmp_path / "proj")
    site = _installed_copy(tmp_path / "site")
    env = {**os.environ, "PYTHONPATH": str(site)}

    def run(*args):
        return subprocess.run([sys.executable, "-m", "fuel_cy", *args], capture_output=True, text=True, cwd=proj,
                              env=env, timeout=300)

    assert run("generate").returncode == 0
    info = read_build_info(site / "fuel_cy" / "_generated" / "_build_info.py") or {}
    write_build_info(site / "fuel_cy" / "_generated", {**info, "sources_sha256": compiled_sources(proj)})
    r = run("generate", "--check")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith(f"checkout: {proj} -- the checkout in the current folder")
    assert "was built from these sources" in r.stdout
    _edit_contract(proj)
    r = run("generate")
    assert r.returncode == 0 and f"to use them: cd {proj} && {sys.executable} -m pip install ." in r.stdout
    r = run("generate", "--check")
    assert r.returncode == 1, r.stdout
    assert f"stale extension: this Python imports fuel_cy from a regular, non-editable install at {site / 'fuel_cy'}" in r.stdout
    assert f"reinstall it from the checkout: cd {proj} && {sys.executable} -m pip install ." in r.stdout


# ---- the version, the repair advice at import, and the Editing a contract page's transcripts ----

def test_the_version_is_stated_once():
    """pyproject.toml's [project] version is the version; fuel_cy.__version__ states the same, and
    CHANGELOG.md (the site's Changelog page, whose footer shows the version) has its section."""
    import fuel_cy
    from fuel_cy.workspace import project_version

    version = project_version(ROOT)
    assert fuel_cy.__version__ == version
    assert f"\n## {version} - " in (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")


def test_import_names_the_repair_command_for_the_install_mode(tmp_path, monkeypatch):
    """A missing or stale extension: `import fuel_cy` says `fuel-cy build` in place for an editable
    install (or a checkout run from source), and a reinstall for a regular one."""
    import types

    import fuel_cy
    from fuel_cy import workspace
    from fuel_cy.contract import files
    from fuel_cy.errors import StaleBuildWarning

    clone = _checkout(tmp_path / "clone", sources=False)
    python = workspace.python()
    editable = workspace.Install(clone / "fuel_cy", clone)
    regular = workspace.Install(tmp_path / "site-packages" / "fuel_cy", None, str(clone))
    unknown = workspace.Install(tmp_path / "site-packages" / "fuel_cy", None)
    in_place = f"rebuild it in place: cd {clone} && fuel-cy build   (or: cd {clone} && {python} -m pip install -e .)"
    reinstall = f"reinstall it from {clone}: cd {clone} && {python} -m pip install ."
    # the stale check, on a contract whose recorded digest differs
    # (through the module's dict: with no compiled extension fuel_cy has no _tables to replace)
    monkeypatch.setitem(vars(fuel_cy), "_tables",
                        types.SimpleNamespace(CONTRACT_HASHES={"fuel-reference-backend.md": "0" * 64}))
    monkeypatch.setattr(files, "default_contracts_dir", lambda: clone / "contracts")
    for inst, wanted in ((editable, in_place), (regular, reinstall),
                         (unknown, f"reinstall it from your checkout: cd CHECKOUT && {python} -m pip install .")):
        monkeypatch.setattr(workspace, "installed", lambda inst=inst: inst)
        assert wanted in fuel_cy._rebuild_message()
        with pytest.warns(StaleBuildWarning) as caught:
            fuel_cy._check_stale()
        message = str(caught[0].message)
        assert message.startswith(f"contract {clone / 'contracts' / 'fuel-reference-backend.md'} changed since the "
                                  "extension was built; to make code and contract agree, ")
        assert wanted in message
        if inst.checkout is None:
            assert "&& fuel-cy build" not in message and "`fuel-cy build` cannot change" in message
    # end to end: a package without its compiled modules, imported from a checkout and as an install
    code = "import fuel_cy\ntry:\n    fuel_cy.attention_flash\nexcept ImportError as e:\n    print(e)"
    proj = _checkout(tmp_path / "proj", sources=False)
    shutil.copytree(ROOT / "fuel_cy", proj / "fuel_cy", dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("*.so", "*.c", "__pycache__"))
    site = _installed_copy(tmp_path / "site")
    for path, wanted in ((proj, f"rebuild it in place: cd {proj} && fuel-cy build"),
                         (site, f"reinstall it from your checkout: cd CHECKOUT && {sys.executable} -m pip install .")):
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                           env={**os.environ, "PYTHONPATH": str(path)}, timeout=300)
        assert r.returncode == 0 and r.stdout.startswith("fuel_cy's compiled extension is missing"), r.stdout + r.stderr
        assert wanted in r.stdout, r.stdout


PAGE = ROOT / "site" / "editing-contracts.md"
COST = "fuel-cy cost attention_naive --shape q=1,8,1024,64 --shape k=1,2,1024,64 --shape v=1,2,1024,64"
HOME, VENV = "/home/me/fuel_cy", "/home/me/.venv"
SITE_PACKAGES = f"{VENV}/lib/python3.11/site-packages/fuel_cy"


def _transcripts(text: str) -> dict[str, list[tuple[str, str]]]:
    """The page's checked console blocks, by name: (command, output) in page order."""
    import re

    out: dict[str, list[tuple[str, str]]] = {}
    for name, body in re.findall(r"<!-- transcript: ([^>]+?) -->\n```console\n(.*?)```", text, re.S):
        steps = out.setdefault(name, [])
        for line in body.splitlines():
            if line.startswith("$ "):
                steps.append((line[2:], ""))
            else:
                steps[-1] = (steps[-1][0], steps[-1][1] + line + "\n")
    return out


def _scratch_checkout(dest: Path) -> Path:
    """A checkout whose contracts are the ones the suite's compiled extension was built from."""
    _checkout(dest)
    shutil.copytree(ROOT / "fuel_cy" / "_generated" / "contracts", dest / "contracts", dirs_exist_ok=True)
    return dest


def test_editing_contracts_page_shows_what_the_cli_prints(tmp_path):
    """site/editing-contracts.md's end-to-end transcripts, run: an editable checkout (this suite's
    compiled package copied into a checkout, a setup.py that compiles nothing) and a regular
    install (the package copied to a site folder, with pip's record of where it came from)."""
    import doctest
    import json
    import re

    pages = _transcripts(PAGE.read_text(encoding="utf-8"))
    assert [c for c, _ in pages["editable"]] == [COST, "fuel-cy validate", "fuel-cy build"]
    assert [c for c, _ in pages["editable, after the build"]] == [COST]
    assert [c for c, _ in pages["regular"]] == [COST, "fuel-cy build"]
    bindir = str(Path(SCRIPT.read_text().splitlines()[0][2:]).parent)

    def run(command: str, cwd: Path, pythonpath: Path, checkout: Path, site: Path = Path("/nowhere")) -> str:
        r = cli(*command.split()[1:], cwd=cwd, env={"PYTHONPATH": str(pythonpath)})
        text = r.stderr + r.stdout
        for real, shown in ((str(site / "fuel_cy"), SITE_PACKAGES), (str(checkout), HOME), (bindir, f"{VENV}/bin")):
            text = text.replace(real, shown)
        return text

    def same(shown: str, real: str) -> bool:
        def counts(s):  # the number of generated files a build rewrites depends on the edit and the build
            return re.sub(r"\(\d+ generated file\(s\) changed", "(N generated file(s) changed", s)

        return doctest.OutputChecker().check_output(counts(shown), counts(real), doctest.ELLIPSIS)

    # editable: the checkout's own package, compiled; `fuel-cy build` regenerates and "compiles"
    home = _scratch_checkout(tmp_path / "editable")
    shutil.copytree(ROOT / "fuel_cy", home / "fuel_cy", dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__", "*.c", "calibration-*"))
    (home / "setup.py").write_text("import sys\nsys.exit(0)  # the test compiles nothing\n")
    outputs = []
    for i, (command, shown) in enumerate(pages["editable"]):
        if command == "fuel-cy validate":
            _edit_contract(home)
        real = run(command, home, home, home)
        outputs.append(real)
        assert same(shown, real), f"$ {command}\n--- the page shows:\n{shown}--- the CLI prints:\n{real}"
    # after a real build the cost is the new formula's: twice the flops
    before = re.search(r"^flops +(\d+)$", outputs[0], re.M)
    assert before, outputs[0]
    shown_after = pages["editable, after the build"][0][1]
    doubled = outputs[0].replace(before.group(0), before.group(0).replace(before.group(1), str(2 * int(before.group(1)))))
    assert same(shown_after, doubled), shown_after
    assert "StaleBuildWarning" not in shown_after

    # regular: an installed copy that pip recorded as installed from the checkout
    home = _scratch_checkout(tmp_path / "regular")
    site = tmp_path / "site"
    shutil.copytree(ROOT / "fuel_cy", site / "fuel_cy",
                    ignore=shutil.ignore_patterns("__pycache__", "*.c", "*.pyx", "calibration-*"))
    record = site / "fuel_cy-0.1.0.dist-info"
    record.mkdir()
    (record / "METADATA").write_text("Metadata-Version: 2.1\nName: fuel_cy\nVersion: 0.1.0\n")
    (record / "direct_url.json").write_text(json.dumps({"url": home.as_uri(), "dir_info": {}}))
    _edit_contract(home)
    before_build = _snapshot(home)
    for command, shown in pages["regular"]:
        real = run(command, home, site, home, site)
        assert same(shown, real), f"$ {command}\n--- the page shows:\n{shown}--- the CLI prints:\n{real}"
    assert _snapshot(home) == before_build
