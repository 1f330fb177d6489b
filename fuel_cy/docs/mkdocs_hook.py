"""mkdocs hook: add the contract-rendered pages to the site at build time (nothing committed)."""
from __future__ import annotations

import sys
from pathlib import Path

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]
# This checkout's fuel_cy (codegen, contracts) renders the pages, whether the package is installed
# editable, installed from a wheel, or not at all: the docs need its pure-Python parts only.
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
# imported now: mkdocs restores sys.path once this module has run, and the hooks below import
# fuel_cy's submodules later, through the package this import leaves in sys.modules
import fuel_cy  # noqa: E402,F401

# api.md marks where the generated entries go, so a kernel added to a contract is documented
# there without editing the page
API_MARKERS = {"<!-- fuel_cy:kernels -->": "fuel_cy", "<!-- fuel_cy:torch -->": "fuel_cy.torch",
               "<!-- fuel_cy:dask -->": "fuel_cy.dask"}


def on_files(files: Files, config) -> Files:
    from fuel_cy.docs.pages import render_pages, render_results

    pages = {**render_pages(ROOT), **render_results(ROOT)}
    for path, content in pages.items():
        existing = files.get_file_from_path(path)
        if existing is not None:
            files.remove(existing)
        files.append(File.generated(config, path, content=content))
    return files


def on_page_markdown(markdown: str, page, config, files) -> str:
    if page.file.src_uri != "api.md":
        return markdown
    from fuel_cy.docs.pages import api_entries

    for marker, module in API_MARKERS.items():
        markdown = markdown.replace(marker, api_entries(ROOT, module))
    return markdown


def on_config(config):
    from fuel_cy.codegen.pydocs import contract_title, python_api
    from fuel_cy.contract import load_contracts
    from fuel_cy.contract.loader import FUSED_OPS_FILE, parse_fused_ops

    # one nav section per contract, one entry per kernel in contract order, so a new contract or
    # kernel appears without editing mkdocs.yml; contracts in the order of their fused-op ids
    # (the founding contract's first)
    fused = parse_fused_ops((ROOT / "contracts" / FUSED_OPS_FILE).read_text(encoding="utf-8"))

    def first_id(doc) -> int:
        ids = [k.fused_op_id if k.fused_op_id is not None else getattr(fused.get(k.fused_op), "id", None)
               for k in doc.kernels]
        return min((i for i in ids if i is not None), default=1 << 30)

    # (sections named for what their kernels do: python-api.yaml's `contracts`, else the provider)
    api = python_api(ROOT / "contracts")
    groups = [{contract_title(api, Path(d.path).name) or d.provider.name or d.path:
               [{k.name: f"kernels/{k.name}.md"} for k in d.kernels]}
              for d in sorted(load_contracts(ROOT / "contracts"), key=first_id)]
    for i, entry in enumerate(config["nav"] or []):
        if isinstance(entry, dict) and entry.get("Kernels") == "kernels/index.md":
            config["nav"][i] = {"Kernels": ["kernels/index.md", *groups]}
    # every page's footer shows the version (overrides/partials/copyright.html): pyproject.toml's
    from fuel_cy.workspace import project_version

    config["extra"]["fuel_cy_version"] = project_version(ROOT)
    # `mkdocs serve` should rebuild when a contract, a docs template or a result file changes
    for folder in ("contracts", "templates/docs", "benchmarks/results"):
        path = ROOT / folder
        if path.exists() and str(path) not in config["watch"]:
            config["watch"].append(str(path))
    return config
