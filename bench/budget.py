"""The latency budget of the live path, from the trace files of a run.

The nodes of a ``bench.live --budget`` run write a line per trace mark
(``common.trace``); the subscribers return ``(seq, sent, received, node)``
per frame. For each event and each node delivering it, a stage's time is
the first mark of that node covering the event's seq (stages that know no
seq -- the doorbell's ring and pop, the hub's wake -- the first such mark
at or after the stage before), and a stage's cost is its time minus the
previous stage's. docs/performance.md, "Live fan-out, many subscribers
and the latency budget".
"""

import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench.common import percentile

# In path order: (stage, knows its seqs, what it covers).
STAGES = [
    ("committed", True, "PUT handling and commit (from the scheduled send)"),
    ("rung", False, "doorbell pushed to the node's Redis list"),
    ("popped", False, "the node's fan-out listener pops it"),
    ("claimed", True, "fan-out pass reads the events (cursor locked)"),
    ("appended", True, "matched, queue rows appended, committed"),
    ("rang_sockets", True, "wake-up sent to the node's Daphne"),
    ("woken", False, "Daphne's hub receives the wake-up"),
    ("read", True, "the rows in hand: pushed with the wake-up, or read"),
    ("written", True, "the first socket's frame written"),
]
GLOBAL = {"committed"}


def _read_marks(directory: Path) -> dict[tuple[str, str], list[tuple[float, int, int]]]:
    marks: dict[tuple[str, str], list[tuple[float, int, int]]] = defaultdict(list)
    for path in directory.glob("*.trace"):
        for line in path.read_text().splitlines():
            t, node, stage, first, last = line.split()
            if stage in GLOBAL:
                node = "*"
            marks[(stage, node)].append((float(t), int(first), int(last)))
    for found in marks.values():
        found.sort()
    return marks


def _covering(found: list[tuple[float, int, int]], seq: int) -> float | None:
    for t, first, last in found:
        if first <= seq <= last:
            return t
    return None


def _after(found: list[tuple[float, int, int]], t0: float) -> float | None:
    lo, hi = 0, len(found)
    while lo < hi:  # the first mark at or after t0
        mid = (lo + hi) // 2
        if found[mid][0] < t0:
            lo = mid + 1
        else:
            hi = mid
    return found[lo][0] if lo < len(found) else None


def statements(directory: Path, events: int) -> dict[str, float]:
    """Statements per event by database alias and thread, over the run:
    the last cumulative count of each process minus its first."""
    first: dict[tuple[str, str, str], int] = {}
    last: dict[tuple[str, str, str], int] = {}
    for path in directory.glob("*.trace"):
        for line in path.read_text().splitlines():
            _, node, stage, count, _ = line.split()
            if stage.startswith("stmts:"):
                key = (path.name, node, stage)
                first.setdefault(key, int(count))
                last[key] = int(count)
    per: dict[str, float] = defaultdict(float)
    for key, count in last.items():
        _, node, stage = key
        per[f"{node} {stage[6:]}"] += (count - first[key]) / max(1, events)
    return dict(sorted(per.items()))


def budget(
    directory: Path, samples: list[list[Any]], nodes: list[str]
) -> dict[str, Any]:
    """Per node (the primary of the subscribers it serves): each stage's
    p50 / p99 in ms, and the end-to-end figure they add up to."""
    marks = _read_marks(directory)
    by_seq: dict[tuple[int, int], list[tuple[float, float]]] = defaultdict(list)
    for seq, sent, received, node_index in samples:
        by_seq[(seq, node_index)].append((sent, received))
    result: dict[str, Any] = {}
    for index, node in enumerate(nodes):
        costs: dict[str, list[float]] = defaultdict(list)
        for (seq, at), got in by_seq.items():
            if at != index:
                continue
            sent = got[0][0]
            previous = sent
            event: list[tuple[str, float]] = []
            for stage, knows_seq, _ in STAGES:
                found = marks.get((stage, "*" if stage in GLOBAL else node), [])
                t = _covering(found, seq) if knows_seq else _after(found, previous)
                if t is None:
                    break
                event.append((stage, t - previous))
                previous = t
            if len(event) < len(STAGES):
                continue  # a stage unmarked (the trace began after it)
            for stage, cost in event:
                costs[stage].append(cost)
            received = sorted(r for _, r in got)
            costs["first frame received"].append(received[0] - previous)
            costs["last frame received"].append(received[-1] - previous)
            costs["total (first subscriber)"].append(received[0] - sent)
            costs["total (median subscriber)"].append(
                statistics.median(received) - sent
            )
            costs["total (last subscriber)"].append(received[-1] - sent)
        result[node] = {
            stage: {
                "p50_ms": percentile(values, 0.5) * 1000,
                "p99_ms": percentile(values, 0.99) * 1000,
                "events": len(values),
            }
            for stage, values in costs.items()
        }
    return result


def describe(stage: str) -> str:
    for name, _, text in STAGES:
        if name == stage:
            return text
    return ""
