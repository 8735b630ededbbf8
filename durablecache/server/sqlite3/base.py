"""SQLite backend whose write transactions queue on a per-file process lock.

SQLite lets one writer in at a time; the others wait in its busy handler,
which sleeps with back-off (1, 2, 5, 10 ... 100 ms) and retries. A lock
freed meanwhile stays unused until a sleeper wakes, so under load the
threads of one process (Daphne's HTTP threads and its delivery thread, the
worker's threads) lose whole milliseconds at every hand-over. Here a
transaction (``BEGIN IMMEDIATE``, what Django's ``atomic`` opens) first takes
a ``threading.Lock`` for its database file, released at commit, rollback
or close, so this process's writers queue and hand over at once; only
writers of other processes still meet the busy handler
(docs/decisions/0008-sqlite-backend.md has the figures).

A transaction that cannot have the lock within the connection's timeout
goes on without it (SQLite still serialises it): never a deadlock, at
worst SQLite's own busy handler. Statements in autocommit mode do not take it.

Across processes the ``BEGIN IMMEDIATE`` itself is retried every
``BEGIN_POLL_MS`` instead of waiting in SQLite's busy handler, whose
sleeps grow to 100 ms: a process whose write transactions follow each
other closely (a node's Daphne with its delivery rounds, its worker with
its fan-outs) would take the lock again and again while the other slept,
and the fan-out would wait whole seconds for the node store.
Other statements keep the connection's timeout.
"""

import sqlite3
import threading
import time
from typing import Any

from django.db.backends.sqlite3 import base

# How long one try at BEGIN IMMEDIATE waits in SQLite's busy handler (it
# sleeps 1 ms, then 1 ms) before the next try.
BEGIN_POLL_MS = 2

_locks: dict[str, threading.Lock] = {}
_guard = threading.Lock()


def writer_lock(name: str) -> threading.Lock:
    """The process's lock for the SQLite database file ``name``."""
    with _guard:
        lock = _locks.get(name)
        if lock is None:
            lock = _locks[name] = threading.Lock()
        return lock


def _releasing(name: str) -> Any:
    """Django's method ``name``, then the writer lock released."""

    def method(self: "DatabaseWrapper") -> None:
        try:
            getattr(base.DatabaseWrapper, name)(self)
        finally:
            self._release_writer_lock()

    method.__name__ = name
    return method


class DatabaseWrapper(base.DatabaseWrapper):
    _held: Any = None

    def _start_transaction_under_autocommit(self) -> None:
        lock = writer_lock(str(self.settings_dict["NAME"]))
        timeout = float(self.settings_dict.get("OPTIONS", {}).get("timeout", 5))
        self._held = lock if lock.acquire(timeout=timeout) else None
        try:
            self._begin_polling(timeout)
        except BaseException:
            self._release_writer_lock()
            raise

    def _begin_polling(self, timeout: float) -> None:
        """BEGIN, retried every ``BEGIN_POLL_MS`` while another process
        writes; once ``timeout`` has passed, one last try through Django's
        own BEGIN, which raises its OperationalError if the file is still
        locked."""
        raw = self.connection
        begin = f"BEGIN {getattr(self, 'transaction_mode', None) or ''}"
        deadline = time.monotonic() + timeout
        raw.execute(f"PRAGMA busy_timeout = {BEGIN_POLL_MS}")
        try:
            while time.monotonic() < deadline:
                try:
                    raw.execute(begin)
                    return
                except sqlite3.OperationalError as exc:
                    if exc.sqlite_errorcode != sqlite3.SQLITE_BUSY:
                        raise
            super()._start_transaction_under_autocommit()  # type: ignore[misc]
        finally:
            raw.execute(f"PRAGMA busy_timeout = {round(timeout * 1000)}")

    def _release_writer_lock(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            held.release()

    # Every way a transaction ends releases the lock: commit, rollback,
    # and a close (a connection dropped mid-transaction).
    _commit = _releasing("_commit")
    _rollback = _releasing("_rollback")
    _close = _releasing("_close")
