"""One exception type for every contract problem, carrying all problems found."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Optional


@dataclass(frozen=True)
class Problem:
    """A single located complaint about a contract: ``file:line: key.path: message``."""

    path: str
    line: int
    keypath: str
    message: str

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        key = f" {self.keypath}:" if self.keypath else ""
        return f"{where}:{key} {self.message}"


class ContractError(ValueError):
    """A contract document is malformed; ``problems`` lists every located complaint."""

    def __init__(self, problems: Iterable[Problem] | str):
        if isinstance(problems, str):
            problems = [Problem("<contract>", 0, "", problems)]
        self.problems: tuple[Problem, ...] = tuple(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


def suggest(word: Any, choices: Iterable[str]) -> Optional[str]:
    """The choice ``word`` most likely misspells (case-insensitive), for "did you mean", or None."""
    if not isinstance(word, str):
        return None
    by_lower = {c.lower(): c for c in choices}
    import difflib  # only on the error path

    close = difflib.get_close_matches(word.lower(), list(by_lower), n=1, cutoff=0.75)
    return by_lower[close[0]] if close else None


class Collector:
    """Accumulates problems so a validator can report all of them, like a compiler."""

    def __init__(self) -> None:
        self.problems: list[Problem] = []

    def add(self, path: str, line: int, keypath: str, message: str) -> None:
        self.problems.append(Problem(path, line, keypath, message))

    def extend(self, err: ContractError) -> None:
        self.problems.extend(err.problems)

    def raise_if_any(self) -> None:
        if self.problems:
            raise ContractError(self.problems)
