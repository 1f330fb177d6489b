"""Thread-count policy for the OpenMP cores (results never depend on it: see the semantics doc)."""
from __future__ import annotations

import os

_num_threads: int = 0      # set_num_threads(n); 0: the default below
_default_threads: int = 0  # computed once: a kernel call must not re-read the environment
# libgomp's thread team does not survive fork(): the child inherits the team's bookkeeping but
# not its threads, so its first parallel region waits for them forever.  A team exists once a
# call has run with more than one thread; a child forked after that runs every call on its one
# thread (same bits: results never depend on the thread count).
_team_may_exist: bool = False
_forked_after_team: bool = False


def _after_fork_in_child() -> None:
    global _forked_after_team
    _forked_after_team = _team_may_exist


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


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
    change of ``OMP_NUM_THREADS`` or of the process's CPU affinity).  In a process forked (``os.fork``,
    multiprocessing's "fork" start method) after fuel_cy ran a multithreaded call, it is 1 whatever
    was set: OpenMP's thread team does not survive fork.  Start workers with "spawn" or
    "forkserver" to have every core in them.
    """
    global _default_threads, _team_may_exist
    if _forked_after_team:
        return 1
    n = _num_threads
    if not n:
        if not _default_threads:
            _default_threads = _default()
        n = _default_threads
    if n > 1:
        _team_may_exist = True
    return n


def team_of(n: int) -> int:
    """The threads a parallel region asked for `n` may start: `n`, recorded as a team that fork
    does not carry over, or 1 in a process forked after one existed (as get_num_threads)."""
    global _team_may_exist
    if _forked_after_team:
        return 1
    if n > 1:
        _team_may_exist = True
    return n


def set_num_threads(n: int) -> None:
    """Use ``n`` threads (n >= 1); ``set_num_threads(0)`` restores the default, read afresh."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"set_num_threads expects an int >= 0, got {n!r}")
    global _num_threads, _default_threads
    _num_threads = n
    if n == 0:
        _default_threads = 0
