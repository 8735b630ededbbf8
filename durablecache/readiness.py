"""Readiness of a node (``/readyz/``): every part it needs answers.

Four checks, run at once, each given ``DURABLECACHE_READY_TIMEOUT_S``:

* ``database``: ``SELECT 1`` on the cluster database;
* ``node_store``: ``SELECT 1`` on this node's store;
* ``redis``: ``PING`` to ``DURABLECACHE_REDIS_URL`` (skipped, and ready,
  when it is unset: nothing then reaches other processes anyway);
* ``worker``: this node's Celery worker marked itself ready (its pid in
  ``worker.ready``) and is still running, and it marked progress
  (``worker.alive``, touched as tasks start and end: ``runnode`` sends it a
  tick every heartbeat) within ``worker_idle_limit()`` seconds. Two file
  reads and a signal-0, no broker round trip.

The database checks run on threads of their own, each on a connection of
its own that is closed after, so a database that does not answer holds no
request thread past the timeout (the thread ends when the driver gives up).
"""

import os
import threading
import time
from collections.abc import Callable

import redis
from django.conf import settings
from django.db import connections

from durablecache.supervision import liveness

OK = "ok"
CHECKS = ("database", "node_store", "redis", "worker")


def worker_idle_limit() -> float:
    """Seconds without a worker's progress mark after which it is not ready:
    five heartbeats (each sends it a tick), at least 5 s."""
    return max(5.0, 5 * settings.DURABLECACHE_HEARTBEAT_S)


def _database(alias: str, timeout: float) -> Callable[[], str]:
    def check() -> str:
        connection = connections[alias]
        try:
            with connection.cursor() as cursor:
                if connection.vendor == "postgresql":
                    ms = max(1, int(timeout * 1000))
                    cursor.execute(f"SET statement_timeout = {ms}")
                cursor.execute("SELECT 1")
                cursor.fetchone()
        finally:
            connection.close()
        return OK

    return check


def _redis(timeout: float) -> Callable[[], str]:
    def check() -> str:
        url = settings.DURABLECACHE_REDIS_URL
        if not url:
            return "ok (DURABLECACHE_REDIS_URL unset: none to check)"
        client = redis.Redis.from_url(
            url, socket_timeout=timeout, socket_connect_timeout=timeout
        )
        try:
            client.ping()
        finally:
            client.close()
        return OK

    return check


def _worker() -> str:
    try:
        pid = int(liveness.ready_path().read_text())
    except (OSError, ValueError):
        raise RuntimeError("no worker has marked itself ready") from None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        raise RuntimeError(f"worker {pid} is not running") from None
    except PermissionError:
        pass  # it runs, as another user
    idle = liveness.idle_for(liveness.alive_path())
    limit = worker_idle_limit()
    if idle > limit:
        raise RuntimeError(f"worker {pid} made no progress for over {limit:g} s")
    return OK


def check_all() -> dict[str, tuple[bool, str]]:
    """Every check by name: (ready, what it said). Takes at most about
    ``DURABLECACHE_READY_TIMEOUT_S``: the checks run at once, each on a
    thread of its own, and one that has not answered by then fails."""
    timeout = settings.DURABLECACHE_READY_TIMEOUT_S
    checks: dict[str, Callable[[], str]] = {
        "database": _database("default", timeout),
        "node_store": _database("node", timeout),
        "redis": _redis(timeout),
        "worker": _worker,
    }
    results: dict[str, tuple[bool, str]] = {}

    def run(name: str, check: Callable[[], str]) -> None:
        try:
            results[name] = (True, check())
        except Exception as exc:
            results[name] = (False, f"{type(exc).__name__}: {exc}")

    threads = [
        threading.Thread(target=run, args=item, name=f"readyz-{item[0]}", daemon=True)
        for item in checks.items()
    ]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    late = (False, f"no answer within {timeout:g} s")
    return {name: results.get(name, late) for name in checks}
