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

import contextlib
import faulthandler
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

BEAT_EVERY_S = 0.5

_path: Path | None = None
_last = 0.0


def alive_path() -> Path:
    from durablecache.supervision import processes

    return processes.log_dir() / "worker.alive"


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


def ready_path() -> Path:
    from durablecache.supervision import processes

    return processes.log_dir() / "worker.ready"


def mark_ready() -> None:
    """In the worker process: it consumes tasks now (Celery's worker_ready)."""
    with contextlib.suppress(OSError):
        ready_path().write_text(str(os.getpid()))


def wait_ready(*, pid: int, timeout: float, alive: Callable[[], bool]) -> bool:
    """Until the worker ``pid`` marked itself ready, the deadline passes or
    alive() fails."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and alive():
        try:
            if ready_path().read_text() == str(pid):
                return True
        except OSError:
            pass
        time.sleep(0.05)
    return False
