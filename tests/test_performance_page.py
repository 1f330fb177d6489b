"""The Performance page's text: every CPU's full-grid run is followed by the profiles that explain
its unmet targets (benchmarks/results/<cpu>/notes.md), in that CPU's own section.  Rendered in
Python (no browser): the site test looks at the built page."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from fuel_cy.docs.results import gap_notes_path, performance_page
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
    for run in runs:
        data = json.loads(run.read_text())
        cpu = data["machine"]["cpu"]
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
