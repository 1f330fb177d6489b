"""The canonical spelling of an FKC document: schema-indented YAML, comments and prose kept."""
from __future__ import annotations

from .build import canonical_lines
from .document import split_document
from .errors import Collector, ContractError, Problem
from .loader import parse_document
from .recover import reindent
from .schema import FRONT_MATTER
from .yamlload import YamlProblem


def format_document(text: str, path: str = "<contract>") -> str:
    """Return the canonical form; raises ContractError if the text cannot be placed or the
    formatted text would not parse to the same model (a formatter must never change meaning)."""
    problems = Collector()
    split = split_document(text, path, problems)
    problems.raise_if_any()
    lines = text.splitlines()
    regions = [(split.front_matter, FRONT_MATTER)] + [(b, None) for s in split.sections for b in s.blocks]
    for block, schema in regions:
        try:
            flat = [line.strip() for line in block.lines]
            new = reindent(flat, schema) if schema is not None else canonical_lines(list(block.lines))
        except YamlProblem as exc:
            raise ContractError([Problem(path, block.first_line + exc.line - 1, exc.keypath, exc.message)]) from None
        start = block.first_line - 1
        lines[start:start + len(new)] = new
    out = "\n".join(lines) + "\n"
    if parse_document(out, path) != parse_document(text, path):
        raise ContractError([Problem(path, 1, "", "formatting would change the contract's meaning; not formatted")])
    return out
