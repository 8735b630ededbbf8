"""``manage.py runcluster`` as ``make run`` starts it, for end-to-end tests.

Embedded defaults whatever the environment says (SQLite files in a
temporary data directory, the embedded Redis that runcluster starts), on
127.0.0.1 ports of our own. Standard input is a pipe, so a test can press
Enter; every line runcluster and its nodes print is kept. Every process
ended here is one this cluster started, by its process group.
"""

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from durablecache.supervision import processes
from tests.integration.harness import ROOT


def embedded_env(data_dir: Path) -> dict[str, str]:
    """The environment of ``make run`` on a fresh machine, in ``data_dir``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DURABLECACHE_", "DJANGO_", "PYTEST"))
    }
    env["DJANGO_SETTINGS_MODULE"] = "durablecache.settings"
    env["DURABLECACHE_DATA_DIR"] = str(data_dir)
    env["PYTHONUNBUFFERED"] = "1"
    return env


class LocalCluster:
    """One ``runcluster`` process and the lines it prints."""

    def __init__(self, workdir: Path, *, nodes: int = 3, stdin: bool = True) -> None:
        self.workdir = workdir
        self.count = nodes
        self.base = processes.free_ports(nodes)
        self.env = embedded_env(workdir)
        self.lines: list[str] = []
        self.changed = threading.Condition()
        self.manage("migrate", "-v0")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "manage.py"),
                "runcluster",
                "--nodes",
                str(nodes),
                "--base-port",
                str(self.base),
            ],
            env=self.env,
            cwd=ROOT,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        self.readers = [
            threading.Thread(target=self._read, args=(stream,), daemon=True)
            for stream in (self.proc.stdout, self.proc.stderr)
        ]
        for reader in self.readers:
            reader.start()

    def __enter__(self) -> "LocalCluster":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _read(self, stream: Any) -> None:
        for raw in stream:
            with self.changed:
                self.lines.append(raw.decode(errors="replace").rstrip("\n"))
                self.changed.notify_all()

    def manage(self, *args: str) -> str:
        result = subprocess.run(
            [sys.executable, str(ROOT / "manage.py"), *args],
            env=self.env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{result.stderr}")
        return result.stdout

    def token(self) -> str:
        """An operator's API token, as ``make run`` issues one."""
        return self.manage("issue_token", "admin", "--operator").splitlines()[-1]

    def port(self, name: str) -> int:
        return self.base + int(name.rsplit("-", 1)[1]) - 1

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port(name)}"

    def output(self) -> str:
        with self.changed:
            return "\n".join(self.lines)

    def wait_line(self, pattern: str, *, after: int = 0, timeout: float = 120) -> int:
        """Wait for a line matching ``pattern`` (a regex) from line number
        ``after`` on; return its number."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while True:
                for number in range(after, len(self.lines)):
                    if re.search(pattern, self.lines[number]):
                        return number
                left = deadline - time.monotonic()
                ended = not any(reader.is_alive() for reader in self.readers)
                if left <= 0 or ended:
                    raise TimeoutError(
                        f"no line /{pattern}/ within {timeout}s:\n"
                        + "\n".join(self.lines[-40:])
                    )
                self.changed.wait(min(left, 0.5))

    def wait_ready(self, *, after: int = 0) -> None:
        """Wait for every node's ``ready`` line from line ``after`` on."""
        for k in range(1, self.count + 1):
            name = f"node-{k}"
            self.wait_line(rf"^{name} {re.escape(self.url(name))} ready$", after=after)

    def press_enter(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"\n")
        self.proc.stdin.flush()

    def children(self) -> dict[int, str]:
        """The live processes runcluster started: pid -> command line."""
        found = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            # The fields after the command name, which is in parentheses.
            fields = stat.rsplit(")", 1)[1].split()
            if int(fields[1]) == self.proc.pid and fields[0] != "Z":
                found[int(entry.name)] = cmdline.replace(b"\0", b" ").decode()
        return found

    def node_pid(self, name: str) -> int:
        """The pid (and process group) of node ``name``'s runnode process."""
        pids = [
            pid
            for pid, cmdline in self.children().items()
            if f" runnode --name {name} " in cmdline
        ]
        assert len(pids) == 1, pids
        return pids[0]

    def interrupt(self, *, timeout: float = 90) -> int:
        """Ctrl-C: SIGINT to runcluster; return its exit status."""
        self.proc.send_signal(signal.SIGINT)
        code = self.proc.wait(timeout=timeout)
        for reader in self.readers:
            reader.join(timeout=10)
        return code

    def close(self) -> None:
        """Stop runcluster if it runs, then anything of it still left."""
        leftovers = self.children()
        if self.proc.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.interrupt()
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
        for pid, cmdline in leftovers.items():  # each leads a group of its own
            with contextlib.suppress(OSError):
                now = Path(f"/proc/{pid}/cmdline").read_bytes()
                if now.replace(b"\0", b" ").decode() == cmdline:
                    os.killpg(pid, signal.SIGKILL)
        if self.proc.stdin is not None:
            self.proc.stdin.close()
