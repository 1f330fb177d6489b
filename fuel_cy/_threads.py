"""Thread-count policy for the OpenMP cores (results never depend on it: see the semantics doc)."""
from __future__ import annotations

import os

_num_threads: int = 0


def _default() -> int:
    env = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        return os.cpu_count() or 1


def get_num_threads() -> int:
    """Threads the kernels use: set_num_threads(n), else OMP_NUM_THREADS, else all usable cores."""
    return _num_threads or _default()


def set_num_threads(n: int) -> None:
    """Use ``n`` threads (n >= 1); ``set_num_threads(0)`` restores the default."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"set_num_threads expects an int >= 0, got {n!r}")
    global _num_threads
    _num_threads = n
