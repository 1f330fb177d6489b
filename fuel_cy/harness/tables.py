"""Plain-text tables for the command line and the reports that print them (bench, demo, calibrate).

Library code prints through this module, never through the CLI, so `fuel_cy.cli` can sit on top of
everything else without an import circle.
"""
from __future__ import annotations

from typing import Sequence

__all__ = ["format_table"]


def format_table(rows: Sequence[Sequence[str]]) -> str:
    """`rows[0]` is the header; columns are left-aligned to their widest cell, with a dashed rule
    under the header and trailing blanks stripped."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
