"""Latency trace points of the live path, for ``bench.live --budget``.

Off unless ``DURABLECACHE_TRACE_DIR`` names a directory: then each process
appends one line per mark to ``<dir>/<node>-<pid>.trace``:
``<unix time> <node> <stage> <first seq> <last seq>`` (0 0 where a stage
knows no seq, as the doorbell). ``bench/budget.py`` turns the files into
the time each stage of the path takes (docs/performance.md, "Latency
budget"). A mark costs one line write; off, one attribute test.
"""

import os
import threading
import time
from typing import IO

DIR = os.environ.get("DURABLECACHE_TRACE_DIR", "")
enabled = bool(DIR)
_lock = threading.Lock()
_file: dict[int, IO[str]] = {}


def mark(stage: str, node: str, first: int = 0, last: int = 0) -> None:
    """Record that ``stage`` happened now for the seqs ``first``..``last``."""
    if not enabled:
        return
    line = f"{time.time():.6f} {node} {stage} {first} {last}\n"
    pid = os.getpid()
    with _lock:
        out = _file.get(pid)
        if out is None:
            path = os.path.join(DIR, f"{node}-{pid}.trace")
            out = _file[pid] = open(path, "a", buffering=1)  # noqa: SIM115
        out.write(line)


# Statements per database alias and thread, written as one cumulative mark
# ``stmts:<alias>:<thread>`` per second of activity (bench.budget reads the
# difference over a run).
_statements: dict[tuple[str, str], int] = {}
_flushed = [0.0]


def count_statements() -> None:
    """Count every SQL statement Django runs in this process (trace on)."""
    if not enabled:
        return
    from django.db.backends.signals import connection_created

    connection_created.connect(_wrap, weak=False)


def _wrap(sender: object, connection: object, **_: object) -> None:
    alias = str(getattr(connection, "alias", "?"))
    node = os.environ.get("DURABLECACHE_NODE_NAME", "?")

    def counted(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        key = (alias, threading.current_thread().name.split("_")[0])
        _statements[key] = _statements.get(key, 0) + 1
        now = time.monotonic()
        if now - _flushed[0] > 1.0:
            _flushed[0] = now
            for (db, thread), count in list(_statements.items()):
                mark(f"stmts:{db}:{thread}", node, count, count)
        return execute(sql, params, many, context)

    connection.execute_wrappers.append(counted)  # type: ignore[attr-defined]
