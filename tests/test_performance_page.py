"""The Performance page's text: every CPU's full-grid run is followed by the profiles that explain
its unmet targets (benchmarks/results/<cpu>/notes.md), in that CPU's own section.  Rendered in
Python (no browser): the site test looks at the built page."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from fuel_cy.docs.results import cpu_labels, gap_notes_path, performance_page
from fuel_cy.harness.targets import targets

from conftest import ROOT

RESULTS = ROOT / "benchmarks" / "results"


def _sections(page: str) -> dict[str, str]:
    """Each '## <cpu>: the full grid' section of the page, by CPU name."""
    parts = re.split(r"^## ", page, flags=re.M)
    return {p.split(": the full grid", 1)[0]: p for p in parts if ": the full grid" in p.splitlines()[0]}


def _first_heading(notes: Path) -> str:
    return next(line for line in notes.read_text().splitlines() if line.startswith("#"))


def test_every_cpu_with_an_unmet_target_has_its_gaps_explained_on_the_page():
    runs = sorted(RESULTS.glob("*/bench.json"))
    assert runs, "no full-grid results under benchmarks/results/<cpu>/"
    sections = _sections(performance_page(ROOT)[0])
    labels = cpu_labels([(run.parent.name, json.loads(run.read_text()), run) for run in runs]
                        + [(p.stem, json.loads(p.read_text()), p) for p in sorted((RESULTS / "levels").glob("*.json"))])
    assert len(sections) == len(runs), list(sections)   # one section per run: no two CPUs merged
    for run in runs:
        data = json.loads(run.read_text())
        cpu = labels[run]
        assert cpu.startswith(data["machine"]["cpu"])
        assert cpu in sections, (cpu, list(sections))
        if any(t["met"] is False for t in targets(data)):
            notes = gap_notes_path(run)
            assert notes == run.parent / "notes.md"
            assert notes.exists(), f"{run} misses targets and has no {notes.name} beside it"
            assert _first_heading(notes) in sections[cpu]


def test_notes_stay_with_their_cpu_and_a_cpu_without_notes_says_so(tmp_path):
    results = tmp_path / "benchmarks" / "results"
    run = json.loads((RESULTS / "amd-epyc" / "bench.json").read_text())
    run["rows"][0]["ratio"] = 0.5  # an unmet target for sure: flash f32 >= 1.2x torch
    for slug, cpu in (("cpu-a", "CPU A"), ("cpu-b", "CPU B")):
        (results / slug).mkdir(parents=True)
        (results / slug / "bench.json").write_text(json.dumps({**run, "machine": {**run["machine"], "cpu": cpu}}))
    (results / "cpu-a" / "notes.md").write_text("### What limits CPU A\n\nIts FMA ports.\n")
    shutil.copytree(ROOT / "contracts", tmp_path / "contracts")

    sections = _sections(performance_page(tmp_path)[0])
    assert "What limits CPU A" in sections["CPU A"] and "Its FMA ports." in sections["CPU A"]
    assert "What limits CPU A" not in sections["CPU B"]
    assert "not written up yet" in sections["CPU B"]
    assert "benchmarks/results/cpu-b/notes.md" in sections["CPU B"]
    assert "not written up yet" not in sections["CPU A"]


def test_two_cpus_sharing_a_model_name_keep_apart(tmp_path, monkeypatch):
    """lscpu calls a Zen 4 and a Zen 5 both "AMD EPYC": the page tells them apart by the cpuid
    family and model, each with its own section, plots (their stamps too) and notes, while a name
    only one CPU has stays as it is."""
    results = tmp_path / "benchmarks" / "results"
    run = json.loads((RESULTS / "amd-epyc" / "bench.json").read_text())
    run["rows"][0]["ratio"] = 0.5  # an unmet target for sure: flash f32 >= 1.2x torch
    for slug, cpu, cpu_id in (("zen4", "AMD EPYC", "AuthenticAMD family 25 model 17"),
                              ("zen5", "AMD EPYC", "AuthenticAMD family 26 model 2"),
                              ("xeon", "Intel Xeon", "GenuineIntel family 6 model 207")):
        (results / slug).mkdir(parents=True)
        (results / slug / "bench.json").write_text(
            json.dumps({**run, "machine": {**run["machine"], "cpu": cpu, "cpu_id": cpu_id}}))
        (results / slug / "notes.md").write_text(f"### What limits {slug}\n\nIts FMA ports.\n")
    shutil.copytree(ROOT / "contracts", tmp_path / "contracts")

    import fuel_cy.docs.results as results_module

    stamps: list[str] = []
    real_plot = results_module.dot_plot
    monkeypatch.setattr(results_module, "dot_plot",
                        lambda plt, rows, title, stamp, xlabel: stamps.append(stamp) or real_plot(plt, rows, title,
                                                                                                  stamp, xlabel))
    page, images = performance_page(tmp_path)
    sections = _sections(page)
    # in the labels' order, not the folders' (here "xeon" sorts first, as "amd-epyc-zen5" does before "amd-epyc")
    assert list(sections) == ["AMD EPYC (family 25 model 17)", "AMD EPYC (family 26 model 2)", "Intel Xeon"]
    # the line under each section and the stamp drawn in each plot name the CPU as the heading does
    for label in ("AMD EPYC (family 25 model 17)", "AMD EPYC (family 26 model 2)"):
        assert f"— {label}, " in sections[label]
    if images:
        assert {s.split(" · ")[0] for s in stamps} == set(sections)
    assert "What limits zen4" in sections["AMD EPYC (family 25 model 17)"]
    assert "What limits zen5" in sections["AMD EPYC (family 26 model 2)"]
    assert "What limits zen4" not in sections["AMD EPYC (family 26 model 2)"]
    assert page.count("### AMD EPYC (family 2") == 2   # two summaries
    if images:   # (matplotlib installed) every plot its own file, none overwritten by the other CPU
        assert any(name.startswith("amd-epyc-family-25-model-17-") for name in images)
        assert any(name.startswith("amd-epyc-family-26-model-2-") for name in images)


def test_every_plotted_race_carries_its_milliseconds_without_overprinting():
    """Each point of the peer-race plots is labelled with fuel_cy's time, and a plot line holds at
    most two timed points, labelled on opposite sides, so no label prints over another."""
    from fuel_cy.docs.results import FAMILIES, _dtype_parts, _family_points, _fmt_ms, _ms_placement

    for run in sorted(RESULTS.glob("*/bench.json")):
        rows = json.loads(run.read_text())["rows"]
        for key, _, _ in FAMILIES:
            for part, _, _ in _dtype_parts(_family_points(rows, key)):
                placed = _ms_placement(part)
                assert len(placed) == len(part), (run, key)   # every point timed and labelled
                sides: dict[str, list[bool]] = {}
                for point, above in placed:
                    assert point["ms"] > 0 and re.fullmatch(r"[\d.]+ (µs|ms|s)", _fmt_ms(point["ms"]))
                    sides.setdefault(point["label"], []).append(above)
                for label, s in sides.items():
                    assert len(s) <= 2 and len(set(s)) == len(s), (run, key, label, s)
    assert _fmt_ms(0.0048) == "5 µs" and _fmt_ms(9.53) == "9.53 ms" and _fmt_ms(1060.0) == "1.06 s"
