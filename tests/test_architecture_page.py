"""The site's Architecture page is the project's own account of its design: it names every
hand-written core file and every folder of the package, so a file added or moved without the
page following fails here."""
from __future__ import annotations

from conftest import ROOT

PAGE = (ROOT / "site" / "architecture.md").read_text(encoding="utf-8")


def test_every_core_file_is_on_the_architecture_page():
    core = sorted(p.name for p in (ROOT / "fuel_cy" / "_core").iterdir() if p.suffix in (".h", ".pxi"))
    assert core, "no core files found"
    missing = [name for name in core if f"`{name}`" not in PAGE]
    assert not missing, f"site/architecture.md does not name {missing}"


def test_every_package_folder_is_on_the_architecture_page():
    folders = sorted(p.name for p in (ROOT / "fuel_cy").iterdir()
                     if p.is_dir() and not p.name.startswith(("__", "_generated")))
    missing = [name for name in folders if f"`fuel_cy/{name}/`" not in PAGE]
    assert not missing, f"site/architecture.md does not name the folders {missing}"
