"""mkdocs hook: add the contract-rendered pages to the site at build time (nothing committed)."""
from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]


def on_files(files: Files, config) -> Files:
    from fuel_cy.codegen.docs import render_pages, render_results

    pages = {**render_pages(ROOT), **render_results(ROOT)}
    for path, content in pages.items():
        existing = files.get_file_from_path(path)
        if existing is not None:
            files.remove(existing)
        files.append(File.generated(config, path, content=content))
    return files


def on_config(config):
    from fuel_cy.contract import load_contracts

    # one nav section per contract, one entry per kernel in contract order, so a new contract or
    # kernel appears without editing mkdocs.yml
    groups = [{d.provider.name or d.path: [{k.name: f"kernels/{k.name}.md"} for k in d.kernels]}
              for d in load_contracts(ROOT / "contracts")]
    for i, entry in enumerate(config["nav"] or []):
        if isinstance(entry, dict) and entry.get("Kernels") == "kernels/index.md":
            config["nav"][i] = {"Kernels": ["kernels/index.md", *groups]}
    # `mkdocs serve` should rebuild when a contract, a docs template or a result file changes
    for folder in ("contracts", "templates/docs", "benchmarks/results"):
        path = ROOT / folder
        if path.exists() and str(path) not in config["watch"]:
            config["watch"].append(str(path))
    return config
