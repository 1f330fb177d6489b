"""Thread-count policy for the OpenMP cores (results never depend on it: see the semantics doc)."""
from __future__ import annotations

import os

_num_threads: int = 0      # set_num_threads(n); 0: the default below
_default_threads: int = 0  # computed once: a kernel call must not re-read the environment


def _default() -> int:
    env = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        return os.cpu_count() or 1


def get_num_threads() -> int:
    """Threads the kernels use: set_num_threads(n), else OMP_NUM_THREADS, else all usable cores.

    The default is read once, at the first call; ``set_num_threads(0)`` reads it again (after a
    change of ``OMP_NUM_THREADS`` or of the process's CPU affinity).
    """
    global _default_threads
    if _num_threads:
        return _num_threads
    if not _default_threads:
        _default_threads = _default()
    return _default_threads


def set_num_threads(n: int) -> None:
    """Use ``n`` threads (n >= 1); ``set_num_threads(0)`` restores the default, read afresh."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"set_num_threads expects an int >= 0, got {n!r}")
    global _num_threads, _default_threads
    _num_threads = n
    if n == 0:
        _default_threads = 0
