"""A database thread of its own for the write rounds of a Daphne process.

``database_sync_to_async`` runs every database call of every socket of a
process on one thread, in turn, so a round of ``put`` frames
(``sockets.put_rounds``) would wait behind the delivery round running
before it (``sockets.delivery_rounds``) and behind every ``hello``; on
PostgreSQL, where each statement is a round trip, that thread spends most
of its time waiting for the server. The write rounds get a thread and
connections of their own here. The delivery rounds stay on the shared
thread: a thread of their own costs memory per idle socket and gains
nothing measurable on the fan-out.

``database_sync_to_async`` also closes old connections before and after
every call, which arms Django's health check for the next statement (a
``SELECT 1`` on PostgreSQL, per round). Here a connection is checked
before a call only when its thread was idle for ``IDLE_CHECK_S``, and
after every call one that failed, was left in a transaction or outlived
``CONN_MAX_AGE`` is closed, as ``close_old_connections`` would
(``Connections``; the worker's fan-out listener does the same:
clients.tasks, and so do the threads of the HTTP pool around Django's
request signals: durablecache.server.pooled_http).
"""

import asyncio
import functools
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from django.db import close_old_connections, connections

T = TypeVar("T")

# A thread idle this long checks its connections before its next call.
IDLE_CHECK_S = 1.0


class Connections:
    """The connection checks of one thread that makes database calls one
    after another: before a call, Django's health check only when the
    thread was idle for ``IDLE_CHECK_S``; after it, the connections that
    failed, were left in a transaction or outlived ``CONN_MAX_AGE``
    closed."""

    def __init__(self) -> None:
        self._last_call = float("-inf")

    def call(self, func: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        if self._idle():
            close_old_connections()
        try:
            return func(*args, **kwargs)
        finally:
            self._last_call = time.monotonic()
            _close_spoiled()

    def request_started(self) -> None:
        """After ``request_started`` (whose ``close_old_connections`` arms
        the health check of every open connection): disarm it again when
        the thread served a request within ``IDLE_CHECK_S``. A thread of
        the HTTP pool calls this, and ``request_finished`` when the
        request has been served."""
        if self._idle():
            return
        for conn in connections.all(initialized_only=True):
            if conn.connection is not None:
                conn.health_check_done = True  # type: ignore[attr-defined]

    def request_finished(self) -> None:
        self._last_call = time.monotonic()

    def _idle(self) -> bool:
        return time.monotonic() - self._last_call > IDLE_CHECK_S


class DatabaseThread:
    """One thread, started on first use, that runs sync database calls."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._executor: ThreadPoolExecutor | None = None
        self._guard = threading.Lock()
        self._connections = Connections()  # used in the thread only

    async def call(self, func: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """Run ``func(*args, **kwargs)`` in the thread; its result."""
        loop = asyncio.get_running_loop()
        call = functools.partial(self._run, func, args, kwargs)
        return await loop.run_in_executor(self._thread(), call)

    def _thread(self) -> ThreadPoolExecutor:
        with self._guard:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(1, thread_name_prefix=self.name)
            return self._executor

    def _run(self, func: Callable[..., T], args: Any, kwargs: Any) -> T:
        return self._connections.call(func, *args, **kwargs)


def _close_spoiled() -> None:
    """Close the connections ``close_old_connections`` would close, without
    arming the health check of the healthy ones."""
    now = time.monotonic()
    for conn in connections.all(initialized_only=True):
        if conn.connection is None:
            continue
        if (
            conn.errors_occurred
            or conn.autocommit != conn.settings_dict["AUTOCOMMIT"]
            or (conn.close_at is not None and now >= conn.close_at)
        ):
            conn.close_if_unusable_or_obsolete()


# The write rounds of put frames.
writes = DatabaseThread("db-writes")
