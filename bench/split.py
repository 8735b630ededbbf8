"""``make bench-split``: where a put's CPU goes, by process and by thread.

``make bench`` says how fast; this says where the time goes. It starts one
node (``tests.integration.harness.Cluster``: the embedded defaults, or
PostgreSQL/Redis when DURABLECACHE_DATABASE_URL/REDIS_URL are set), makes
a durable client interested in every key of a region and sends it away,
then measures, ``--repeat`` times each:

* ``idle``: the node doing nothing for ``--idle-s`` seconds (what its
  processes burn in the background, which would inflate the others);
* ``put frames, window 1``: ``--puts`` put frames from one socket, each
  after the previous one's ``written`` (``bench.dc``'s writer);
* ``put frames, window N``: the same with ``--window`` in flight;
* ``replay``: ``--replay`` events queued by putall, then replayed to a
  plain websocket reader that acks as it goes.

For each: the rate, and the CPU time per put (or per replayed event) of
every process of the node and of this process (the writer or reader), and
of every thread of the node's Daphne, read from ``/proc`` (psutil). A
thread is named from ``py-spy dump`` when py-spy is installed (it is in
``bench/requirements.txt``; Python 3.11 does not name its threads for
the kernel), else shown by its id. Per-thread CPU is what
docs/performance.md splits a put's cost by: a sampler's stacks decide
whether a thread is idle by their own rules, ``/proc`` does not.

Every process it starts is ended by its pid or process group
(``Cluster.close``); everything listens on 127.0.0.1.
"""

import argparse
import asyncio
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from bench import dc
from bench.common import SHIPPED_TIMINGS, daphne_process, first_node, out
from tests.integration.harness import Cluster

REGION = "split"

# `py-spy dump`'s thread lines: Thread 5670 (idle): "MainThread"
_THREAD_LINE = re.compile(r'^Thread (0x[0-9a-fA-F]+|\d+) \(\w+\): "([^"]*)"', re.M)


def thread_names(dump: str) -> dict[int, str]:
    """``{thread id: name}`` from the text of ``py-spy dump``."""
    return {int(tid, 0): name for tid, name in _THREAD_LINE.findall(dump)}


def spy_names(pid: int) -> dict[int, str]:
    """The names of ``pid``'s Python threads, or nothing without py-spy."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy).exists():
        return {}
    try:
        done = subprocess.run(
            [spy, "dump", "--pid", str(pid)],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return thread_names(done.stdout)


def role(proc: psutil.Process) -> str:
    """A node process's part, from its command line."""
    try:
        line = " ".join(proc.cmdline())
    except psutil.Error:
        return f"pid {proc.pid}"
    for needle, name in (
        ("daphne", "daphne"),
        ("celery", "worker"),
        ("runnode", "runnode"),
        ("redis", "redis"),
    ):
        if needle in line:
            return name
    return Path(line.split(" ", 1)[0]).name or f"pid {proc.pid}"


def cpu_s(proc: psutil.Process) -> float:
    try:
        times = proc.cpu_times()
    except psutil.Error:
        return 0.0
    return float(times.user + times.system)


def thread_cpu_s(proc: psutil.Process) -> dict[int, float]:
    try:
        return {t.id: t.user_time + t.system_time for t in proc.threads()}
    except psutil.Error:
        return {}


def per_unit(
    before: dict[Any, float], after: dict[Any, float], units: float
) -> dict[Any, float]:
    """Microseconds of CPU per unit of work, by key, from two snapshots
    (a key that appeared between them started at zero)."""
    return {key: (after[key] - before.get(key, 0.0)) / units * 1e6 for key in after}


class Node:
    """One node and what is measured of it."""

    def __init__(self, workdir: Path) -> None:
        self.cluster = Cluster(workdir / "cluster", settings=SHIPPED_TIMINGS)
        self.ws_url, self.token, self.rest = first_node(self.cluster, REGION, "split")
        root = psutil.Process(self.cluster.nodes["node-1"]["proc"].pid)
        self.procs = [root, *root.children(recursive=True)]
        self.daphne = daphne_process(root.pid)

    def snapshot(self) -> tuple[dict[str, float], dict[int, float], float]:
        by_role: dict[str, float] = {}
        for proc in self.procs:
            name = role(proc)
            by_role[name] = by_role.get(name, 0.0) + cpu_s(proc)
        return by_role, thread_cpu_s(self.daphne), time.process_time()

    def measure(self, work: Callable[[], tuple[float, int]]) -> dict[str, Any]:
        """Run ``work`` (which returns its rate and its units of work) and
        the CPU per unit of each process and Daphne thread meanwhile."""
        roles0, threads0, mine0 = self.snapshot()
        start = time.monotonic()
        rate, units = work()
        elapsed = time.monotonic() - start
        roles1, threads1, mine1 = self.snapshot()
        units_or_s = units if units else elapsed  # idle: per second
        processes = per_unit(roles0, roles1, units_or_s)
        processes["this process"] = (mine1 - mine0) / units_or_s * 1e6
        return {
            "rate": rate,
            "units": units,
            "seconds": elapsed,
            "processes_us": processes,
            "threads_us": per_unit(threads0, threads1, units_or_s),
        }

    def close(self) -> None:
        self.cluster.close()


def scenarios(node: Node, args: argparse.Namespace) -> dict[str, Callable[[int], Any]]:
    rests = {"node-1": node.rest}

    def idle(_: int) -> tuple[float, int]:
        time.sleep(args.idle_s)
        return 0.0, 0

    def puts(window: int) -> Callable[[int], tuple[float, int]]:
        def run(r: int) -> tuple[float, int]:
            rate = dc.enqueue_ws_puts(
                node.ws_url, rests, node.token, REGION, f"w{window}-{r}",
                args.puts, 1, window,
            )  # fmt: skip
            return rate, args.puts

        return run

    def replay(r: int) -> tuple[float, int]:
        rate = asyncio.run(
            dc.replay(node.ws_url, node.token, f"replay-{r}", args.replay)
        )
        return rate, args.replay

    return {
        "idle (per second)": idle,
        "put frames, window 1": puts(1),
        f"put frames, window {args.window}": puts(args.window),
        "replay": replay,
    }


def fill_for_replay(node: Node, r: int, count: int) -> None:
    """Queue ``count`` events for an offline client, before its replay."""
    did = f"replay-{r}"
    asyncio.run(dc.make_offline(node.ws_url, node.token, did, REGION))
    dc.fill_putall(node.rest, REGION, f"{did}-", count)
    dc.wait_pending(node.rest, did, count, timeout=120)


def summarise(runs: list[dict[str, Any]], names: dict[int, str]) -> dict[str, Any]:
    """Median [min, max] of the rate; median CPU per unit of each process
    and thread (threads named where py-spy named them)."""

    def medians(key: str) -> dict[str, float]:
        keys = {k for run in runs for k in run[key]}
        return {
            str(names.get(k, k) if key == "threads_us" else k): statistics.median(
                run[key].get(k, 0.0) for run in runs
            )
            for k in keys
        }

    rates = [run["rate"] for run in runs]
    return {
        "rate": {
            "median": statistics.median(rates),
            "min": min(rates),
            "max": max(rates),
        },
        "processes_us": medians("processes_us"),
        "threads_us": medians("threads_us"),
        "runs": runs,
    }


def table(results: dict[str, dict[str, Any]], top: int) -> list[str]:
    lines = []
    for name, s in results.items():
        rate = s["rate"]
        head = f"== {name}"
        if rate["median"]:
            head += (
                f": {rate['median']:.0f}/s [{rate['min']:.0f}-{rate['max']:.0f}]"
                ", CPU in us per unit"
            )
        else:
            head += ": CPU in us per second (cores x 1e6)"
        lines.append(head)
        for label, values in (
            ("process", "processes_us"),
            ("daphne thread", "threads_us"),
        ):
            # Rows under 0.05 us (a thread idle throughout) are left out.
            busy = [kv for kv in s[values].items() if kv[1] >= 0.05]
            ordered = sorted(busy, key=lambda kv: -kv[1])[:top]
            for key, us in ordered:
                lines.append(f"  {label:<14} {key:<36} {us:10.1f}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--puts", type=int, default=3000)
    parser.add_argument("--window", type=int, default=20)
    parser.add_argument("--replay", type=int, default=20000)
    parser.add_argument("--idle-s", type=float, default=3.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--top", type=int, default=8, help="rows per group")
    parser.add_argument("--output", type=Path, help="write the figures as JSON")
    args = parser.parse_args(argv)
    for name in ("puts", "window", "replay", "repeat"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    workdir = Path(tempfile.mkdtemp(prefix="durablecache-split-"))
    node = None
    try:
        node = Node(workdir)
        # Warm the paths once (imports, statement caches, connections).
        dc.enqueue_ws_puts(
            node.ws_url, {"node-1": node.rest}, node.token, REGION, "warm", 200, 1, 20
        )
        runs: dict[str, list[dict[str, Any]]] = {}
        for r in range(args.repeat):
            for name, work in scenarios(node, args).items():
                if name == "replay":
                    fill_for_replay(node, r, args.replay)
                result = node.measure(lambda work=work, r=r: work(r))
                runs.setdefault(name, []).append(result)
                out(f"  round {r + 1} {name}: {result['rate']:.0f}/s")
        names = spy_names(node.daphne.pid)
        results = {name: summarise(rs, names) for name, rs in runs.items()}
    finally:
        if node is not None:
            node.close()
        shutil.rmtree(workdir, ignore_errors=True)
    out("\n".join(table(results, args.top)))
    if not names:
        out("(threads by id: install py-spy to name them)")
    if args.output:
        args.output.write_text(json.dumps(results, indent=1, default=str) + "\n")
        out(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
