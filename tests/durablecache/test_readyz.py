"""/readyz/: 200 only while the cluster database, the node store, Redis and
the node's worker answer; 503 naming each part that does not, within the
timeout."""

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from django.db import connections
from django.db.utils import ConnectionHandler
from django.test import Client as DjangoClient

from durablecache import readiness
from durablecache.supervision import liveness

pytestmark = pytest.mark.django_db(databases=["default", "node"])

TIMEOUT_S = 0.5


@pytest.fixture
def ready(settings: Any, tmp_path: Path, redis_server: Any) -> Path:
    """Every part up: a real Redis, and a worker (this process) that marked
    itself ready and made progress just now."""
    settings.DATA_DIR = tmp_path
    settings.DURABLECACHE_READY_TIMEOUT_S = TIMEOUT_S
    settings.DURABLECACHE_REDIS_URL = f"unix://{redis_server.socket_file}"
    liveness.ready_path().write_text(str(os.getpid()))
    liveness.alive_path().touch()
    return tmp_path


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def readyz() -> tuple[int, dict[str, Any]]:
    response = DjangoClient().get("/readyz/")
    return response.status_code, response.json()


def test_ready_when_every_part_answers(ready: Path) -> None:
    status, body = readyz()
    assert (status, body["status"], body["failing"]) == (200, "ready", [])
    assert body["checks"] == dict.fromkeys(readiness.CHECKS, "ok")
    assert body["node"] == "node-1"


def test_healthz_stays_the_cheap_liveness_check(ready: Path, settings: Any) -> None:
    settings.DURABLECACHE_REDIS_URL = f"redis://127.0.0.1:{closed_port()}/0"
    assert DjangoClient().get("/healthz/").status_code == 200


def test_redis_on_a_closed_port_is_named(ready: Path, settings: Any) -> None:
    settings.DURABLECACHE_REDIS_URL = f"redis://127.0.0.1:{closed_port()}/0"
    status, body = readyz()
    assert (status, body["status"], body["failing"]) == (503, "unready", ["redis"])
    assert "ConnectionError" in body["checks"]["redis"]


def test_a_redis_that_never_answers_fails_within_the_timeout(
    ready: Path, settings: Any
) -> None:
    # Listening, never accepting: the connection is made, no reply comes.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        port = silent.getsockname()[1]
        settings.DURABLECACHE_REDIS_URL = f"redis://127.0.0.1:{port}/0"
        started = time.monotonic()
        status, body = readyz()
        took = time.monotonic() - started
    assert (status, body["failing"]) == (503, ["redis"])
    assert took < TIMEOUT_S + 1.0


class _OneBroken:
    """``django.db.connections`` with one alias pointed at PostgreSQL on a
    closed port (each thread gets its own connection, as with Django's)."""

    def __init__(self, alias: str) -> None:
        self.alias = alias
        self.broken = ConnectionHandler(
            {
                "default": {
                    "ENGINE": "django.db.backends.postgresql",
                    "HOST": "127.0.0.1",
                    "PORT": closed_port(),
                    "NAME": "readyz",
                    "USER": "nobody",
                }
            }
        )

    def __getitem__(self, alias: str) -> Any:
        if alias == self.alias:
            return self.broken["default"]
        return connections[alias]


@pytest.mark.parametrize(
    ("alias", "part"), [("default", "database"), ("node", "node_store")]
)
def test_a_database_on_a_closed_port_is_named(
    ready: Path, monkeypatch: pytest.MonkeyPatch, alias: str, part: str
) -> None:
    monkeypatch.setattr(readiness, "connections", _OneBroken(alias))
    status, body = readyz()
    assert (status, body["failing"]) == (503, [part])
    assert "OperationalError" in body["checks"][part]


def test_no_worker_is_named(ready: Path) -> None:
    liveness.ready_path().unlink()
    status, body = readyz()
    assert (status, body["failing"]) == (503, ["worker"])
    assert body["checks"]["worker"] == "RuntimeError: no worker has marked itself ready"


def test_a_stopped_worker_is_named(ready: Path) -> None:
    ended = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    liveness.ready_path().write_text(ended.stdout.strip())
    status, body = readyz()
    assert (status, body["failing"]) == (503, ["worker"])
    assert "is not running" in body["checks"]["worker"]


def test_a_worker_without_progress_is_named(ready: Path) -> None:
    stale = time.time() - readiness.worker_idle_limit() - 1
    os.utime(liveness.alive_path(), (stale, stale))
    status, body = readyz()
    assert (status, body["failing"]) == (503, ["worker"])
    assert "made no progress" in body["checks"]["worker"]


def test_every_failing_part_is_named(
    ready: Path, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.DURABLECACHE_REDIS_URL = f"redis://127.0.0.1:{closed_port()}/0"
    monkeypatch.setattr(readiness, "connections", _OneBroken("node"))
    liveness.ready_path().unlink()
    status, body = readyz()
    assert (status, body["failing"]) == (503, ["node_store", "redis", "worker"])
