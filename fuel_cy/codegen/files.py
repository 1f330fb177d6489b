"""One writer for every generated file: atomic, only-if-changed, with a dry-run (check) mode.

All outputs are rendered first; nothing is written unless every render succeeded, and each file
is replaced by rename, so a failure leaves the previous generation untouched.
"""
from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class FileManager:
    out_dir: Path
    pending: dict[str, str] = field(default_factory=dict)

    def add(self, relpath: str, content: str) -> None:
        if relpath in self.pending:
            raise ValueError(f"generated file {relpath} would be written twice")
        target = (self.out_dir / relpath).resolve()
        if not str(target).startswith(str(self.out_dir.resolve()) + os.sep):
            raise ValueError(f"refusing to write outside {self.out_dir}: {relpath}")
        self.pending[relpath] = content

    def changes(self) -> list[str]:
        """Relative paths whose content differs from disk (or that are missing/extra)."""
        changed = []
        for rel, content in sorted(self.pending.items()):
            path = self.out_dir / rel
            if not path.exists() or path.read_text(encoding="utf-8") != content:
                changed.append(rel)
        return changed

    def stale_extras(self) -> list[str]:
        """Files in the output folder that this generation would not produce."""
        if not self.out_dir.exists():
            return []
        keep = set(self.pending) | {"_build_info.py"}
        extras = []
        for path in self.out_dir.rglob("*"):
            rel = path.relative_to(self.out_dir).as_posix()
            if path.is_file() and rel not in keep and path.suffix in (".pyx", ".pxi", ".pyi", ".py", ".md", ".yaml", ".h"):
                extras.append(rel)
        return sorted(extras)

    def commit(self) -> list[str]:
        changed = self.changes()
        for rel in changed:
            path = self.out_dir / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=path.suffix)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as fh:
                    fh.write(self.pending[rel])
                os.replace(tmp, path)
            except BaseException:
                if os.path.exists(tmp):
                    os.unlink(tmp)
                raise
        for rel in self.stale_extras():
            (self.out_dir / rel).unlink()
        return changed
