"""Split an FKC document into front matter, prose sections and ``fkc`` blocks."""
from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import Collector

_SECTION_RE = re.compile(r"^##\s+([^\s(]+)\s*(?:\((.*)\))?\s*$")
_TITLE_RE = re.compile(r"^#\s+(.*)$")
MAX_DOCUMENT_CHARS = 2_000_000


@dataclass(frozen=True)
class Block:
    """An ``fkc`` fenced block: its lines and the 1-based line of its first line."""

    lines: tuple[str, ...]
    first_line: int


@dataclass(frozen=True)
class Section:
    name: str
    title: str
    description: str
    line: int
    blocks: tuple[Block, ...]


@dataclass(frozen=True)
class SplitDocument:
    front_matter: Block
    title: str
    intro: str
    sections: tuple[Section, ...]


def split_document(text: str, path: str, problems: Collector) -> SplitDocument:
    if len(text) > MAX_DOCUMENT_CHARS:
        problems.add(path, 1, "", f"document larger than {MAX_DOCUMENT_CHARS} characters")
        return SplitDocument(Block((), 1), "", "", ())
    lines = text.splitlines()
    front = Block((), 1)
    i = 0
    if lines and lines[0].strip() == "---":
        end = next((j for j in range(1, len(lines)) if lines[j].strip() == "---"), None)
        if end is None:
            problems.add(path, 1, "", "front matter opened with '---' is never closed")
            return SplitDocument(front, "", "", ())
        front = Block(tuple(lines[1:end]), 2)
        i = end + 1
    else:
        problems.add(path, 1, "", "a contract starts with YAML front matter between '---' lines")

    title = ""
    intro: list[str] = []
    sections: list[Section] = []
    current: dict | None = None
    while i < len(lines):
        line = lines[i]
        if line.startswith("```fkc"):
            start = i + 1
            end = next((j for j in range(start, len(lines)) if lines[j].strip() == "```"), None)
            if end is None:
                problems.add(path, i + 1, "", "```fkc block is never closed")
                break
            block = Block(tuple(lines[start:end]), start + 1)
            if current is None:
                problems.add(path, i + 1, "", "fkc block outside a '## kernel_name (...)' section")
            else:
                current["blocks"].append(block)
            i = end + 1
            continue
        m = _SECTION_RE.match(line)
        if m and line.startswith("## "):
            if current:
                sections.append(_section(current))
            current = {"name": m.group(1), "title": (m.group(2) or "").strip(), "prose": [],
                       "line": i + 1, "blocks": []}
        elif current is not None:
            current["prose"].append(line)
        elif not title and _TITLE_RE.match(line):
            title = _TITLE_RE.match(line).group(1).strip()  # type: ignore[union-attr]
        else:
            intro.append(line)
        i += 1
    if current:
        sections.append(_section(current))
    return SplitDocument(front, title, "\n".join(intro).strip(), tuple(sections))


def _section(d: dict) -> Section:
    return Section(d["name"], d["title"], "\n".join(d["prose"]).strip(), d["line"], tuple(d["blocks"]))
