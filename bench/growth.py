"""Node memory while one offline durable queue grows, and the pending count.

Issue 5, scenario 4b: one durable client with interest in every key goes
away; writers fill its queue by ``putall`` while this samples, at every
``step`` queued events, the node's RSS (the whole process group: runnode,
Daphne and the Celery worker) and how long ``GET /api/v1/clients/<id>/``
takes to answer ``pending_events``. The fill stops at ``target`` events or
at ``deadline`` (monotonic), whichever comes first, so ``make bench`` stays
bounded; the result says how far it got.
"""

import asyncio
import statistics
import threading
import time
from typing import Any

import psutil

from bench import dc
from bench.common import Rest

BATCH = 5000
# Keys repeat (updates, not creates), so the cluster's entry table stays
# small and what grows is the queue; the region does not conflate.
KEYS = 20000


def group_rss(root_pid: int) -> int:
    """RSS of a node's process tree, summed."""
    root = psutil.Process(root_pid)
    total = 0
    for proc in [root, *root.children(recursive=True)]:
        try:
            total += proc.memory_info().rss
        except psutil.Error:
            continue
    return total


def pending_time(rest: Rest, durable_id: str, calls: int = 5) -> tuple[int, float]:
    """The pending count and the median seconds one REST read of it took."""
    times, count = [], 0
    for _ in range(calls):
        start = time.perf_counter()
        count = dc.pending(rest, durable_id)
        times.append(time.perf_counter() - start)
    return count, statistics.median(times)


class Filler(threading.Thread):
    """Writes putall batches until told to stop."""

    def __init__(self, rest: Rest, region: str, writer: int) -> None:
        super().__init__(daemon=True)
        self.rest, self.region, self.writer = rest, region, writer
        self.stopping = threading.Event()
        self.go = threading.Event()  # cleared: pause between batches
        self.go.set()
        self.paused = threading.Event()
        self.written = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        n = 0
        try:
            while not self.stopping.is_set():
                if not self.go.is_set():
                    self.paused.set()
                    self.go.wait()
                    self.paused.clear()
                    continue
                entries = {
                    f"g{self.writer}-{(n + i) % KEYS}": {"n": n + i}
                    for i in range(BATCH)
                }
                path = f"/api/v1/regions/{self.region}/putall/"
                self.rest.ok("POST", path, {"entries": entries})
                n += BATCH
                self.written = n
        except BaseException as exc:  # reported by run()
            self.error = exc


def pause(fillers: list[Filler]) -> None:
    for filler in fillers:
        filler.go.clear()
    for filler in fillers:
        while filler.is_alive() and not filler.paused.wait(0.1):
            pass


def run(
    ws_url: str,
    rest: Rest,
    token: str,
    region: str,
    node_pid: int,
    durable_id: str,
    *,
    target: int,
    step: int,
    deadline: float,
    writers: int = 2,
    log: Any = print,
) -> dict[str, Any]:
    # The queue must hold the target and the writes in flight past it: a
    # client's default bound (DURABLECACHE_DEFAULT_MAX_QUEUED, 1,000,000)
    # would overflow it at the last step and empty it.
    asyncio.run(
        dc.make_offline(ws_url, token, durable_id, region, max_queued=2 * target)
    )
    fillers = [Filler(rest, region, w) for w in range(writers)]
    start = time.monotonic()
    for filler in fillers:
        filler.start()
    points: list[dict[str, float]] = []
    next_mark = step
    try:
        while next_mark <= target and time.monotonic() < deadline:
            errors = [f.error for f in fillers if f.error is not None]
            if errors:
                raise RuntimeError(f"putall writer failed: {errors[0]}")
            queued = dc.pending(rest, durable_id)
            if queued < next_mark:
                time.sleep(0.25)
                continue
            if queued >= target:
                for filler in fillers:
                    filler.stopping.set()
            # The pending count is read while the writers pause, so its time
            # is the read's own, not a wait behind a putall.
            pause(fillers)
            rss = group_rss(node_pid)
            count, seconds = pending_time(rest, durable_id)
            for filler in fillers:
                filler.go.set()
            point = {
                "events": count,
                "elapsed_s": round(time.monotonic() - start, 1),
                "rss_mib": round(rss / 2**20, 1),
                "pending_ms": round(seconds * 1000, 2),
            }
            points.append(point)
            log(f"  queue_growth     durablecache  {point}")
            while next_mark <= count:
                next_mark += step
    finally:
        for filler in fillers:
            filler.stopping.set()
        for filler in fillers:
            filler.join(timeout=60)
    reached = points[-1]["events"] if points else 0
    result: dict[str, Any] = {
        "target_events": target,
        "reached_events": reached,
        "rate_ev_s": round(reached / points[-1]["elapsed_s"], 1) if points else 0,
        "points": points,
    }
    if len(points) >= 2:
        first, last = points[0], points[-1]
        result["rss_change"] = round(last["rss_mib"] / first["rss_mib"] - 1, 3)
        result["pending_ms_ratio"] = round(last["pending_ms"] / first["pending_ms"], 2)
    return result
