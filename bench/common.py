"""Small helpers shared by the benchmark scenarios."""

import http.client
import json
import statistics
import sys
import threading
import time
from typing import Any
from urllib.parse import urlsplit

import psutil

# The nodes of a benchmark run with the shipped timings
# (docs/configuration.md), not the integration harness's faster ones
# (heartbeat and expiry check every 0.5 s, node timeout 3 s): a tick twice
# a second would be measured as the product's cost.
SHIPPED_TIMINGS = {
    "DURABLECACHE_HEARTBEAT_S": "1",
    "DURABLECACHE_EXPIRY_CHECK_S": "1",
    "DURABLECACHE_NODE_TIMEOUT_S": "5",
}


def summary(values: list[float]) -> dict[str, Any]:
    """Median, min and max of one figure over its runs."""
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "runs": len(values),
        "values": values,
    }


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


class Rest:
    """A keep-alive JSON REST client, one HTTP connection per thread."""

    def __init__(self, base_url: str, token: str) -> None:
        parts = urlsplit(base_url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.headers = {
            "Authorization": f"Token {token}",
            "Content-Type": "application/json",
        }
        self.local = threading.local()

    def _conn(self) -> http.client.HTTPConnection:
        conn = getattr(self.local, "conn", None)
        if conn is None:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
            self.local.conn = conn
        return conn

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        for attempt in range(2):
            conn = self._conn()
            try:
                conn.request(method, path, body=data, headers=self.headers)
                response = conn.getresponse()
                raw = response.read()
                break
            except (http.client.HTTPException, OSError):
                conn.close()
                self.local.conn = None
                if attempt:
                    raise
        return response.status, json.loads(raw) if raw else None

    def ok(self, method: str, path: str, body: Any = None) -> Any:
        status, payload = self.call(method, path, body)
        if status >= 300:
            raise RuntimeError(f"{method} {path}: {status} {payload}")
        return payload


def out(line: str = "") -> None:
    """Print ``line`` now (a bench's progress is read as it runs)."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def first_node(cluster: Any, region: str, user: str) -> tuple[str, str, Rest]:
    """Migrate ``cluster`` (tests.integration.harness.Cluster), start its
    node-1 and create ``region`` (events not conflated) as the operator
    ``user``: node-1's websocket URL, the token and a REST client."""
    cluster.migrate()
    base = cluster.start_node("node-1")
    token = cluster.token(user, operator=True)
    rest = Rest(base, token)
    rest.ok("POST", "/api/v1/regions/", {"name": region, "conflate_events": False})
    return cluster.ws_url("node-1"), token, rest


def wait_until(predicate: Any, *, timeout: float, interval: float = 0.02) -> float:
    """Poll until predicate() is truthy; return the monotonic time it was."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return time.monotonic()
        if time.monotonic() > deadline:
            raise TimeoutError(f"condition not met within {timeout}s")
        time.sleep(interval)


def daphne_process(root_pid: int) -> psutil.Process:
    """The Daphne process in the process tree rooted at ``root_pid``."""
    root = psutil.Process(root_pid)
    for proc in [root, *root.children(recursive=True)]:
        try:
            if "daphne" in " ".join(proc.cmdline()):
                return proc
        except psutil.Error:
            continue
    raise RuntimeError(f"no daphne process under pid {root_pid}")


def rss_settled(proc: psutil.Process, settle: float = 1.5) -> int:
    """RSS after letting the process settle (a few samples, the last one)."""
    time.sleep(settle)
    return int(proc.memory_info().rss)


def postgres_cpu() -> float:
    """CPU seconds (user + system) of this machine's PostgreSQL processes,
    the server's and its backends' (a backend that has exited is not
    counted)."""
    import psutil

    total = 0.0
    for proc in psutil.process_iter(["name"]):
        if (proc.info["name"] or "").startswith("postgres"):
            try:
                times = proc.cpu_times()
            except psutil.Error:
                continue
            total += times.user + times.system
    return total
