"""Worker liveness: the Celery worker marks progress, runnode watches it.

A worker that has exited is restarted by ``runnode``; one that is still
running but no longer runs tasks (every pool thread wedged) would otherwise
stop fan-out, copies and the tick on its node for good while the node looks
up. So the worker touches ``worker.alive`` in its log directory when a task
starts, ends or is dropped as expired, and on each fan-out batch; ``runnode``
restarts a worker whose file is older than ``DURABLECACHE_WORKER_STALL_S``
while ticks were being sent to it, after asking it (SIGUSR1) to write every
thread's stack to its log. The worker holds no state (rows are the truth).
"""

import faulthandler
import os
import signal
import time
from pathlib import Path

BEAT_EVERY_S = 0.5

_path: Path | None = None
_last = 0.0


def alive_path() -> Path:
    from durablecache import nodes

    return nodes.log_dir() / "worker.alive"


def enable() -> None:
    """In the worker process: start marking progress; SIGUSR1 dumps stacks."""
    global _path
    _path = alive_path()
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    beat(force=True)


def beat(force: bool = False) -> None:
    """Mark progress (at most every ``BEAT_EVERY_S``); a no-op until enable()."""
    global _last
    if _path is None:
        return
    now = time.monotonic()
    if not force and now - _last < BEAT_EVERY_S:
        return
    _last = now
    try:
        os.utime(_path)
    except FileNotFoundError:
        _path.touch()
    except OSError:  # a full or read-only disk must not fail a task
        pass


def idle_for(path: Path) -> float:
    """Seconds since the worker last marked progress (inf if it never did)."""
    try:
        return max(0.0, time.time() - path.stat().st_mtime)
    except OSError:
        return float("inf")
