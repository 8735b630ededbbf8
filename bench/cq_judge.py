"""``python -m bench.cq_judge``: CPU per event of judging one client's CQs.

One client holds 100 CQs ``value.n > K`` (K = 0..99) on a region; each
event changes one key from a value ``{"n": x}`` to another, x uniform in
[-25, 125), so about half the CQs hold each value and about three in four
get a ``cq_op``. The figure is microseconds per event for judging before
and after (``CqSet.judge``), median of ``--repeat`` blocks of ``--events``
events, beside the same CQs judged one by one (``CompiledQuery.cq_op``) and
100 CQs of mixed shapes that the indexes do not answer. Pure Python, no
node, no database; ``timeit sum(range(100))`` calibrates the host, as in
docs/performance.md.
"""

import argparse
import random
import statistics
import sys
import time
import timeit
from collections.abc import Callable
from typing import Any

from clients.cq import CompiledQuery, CqSet, compile_query

Change = tuple[str, Any, Any]


def _changes(count: int, seed: int) -> list[Change]:
    rng = random.Random(seed)  # noqa: S311 (test data, not secrets)
    values = [
        {"n": rng.uniform(-25, 125), "tag": f"t{i % 7}"} for i in range(count + 1)
    ]
    return [(f"k{i}", values[i], values[i + 1]) for i in range(count)]


def _per_event_us(judge: Callable[[Change], object], changes: list[Change]) -> float:
    start = time.perf_counter()
    for change in changes:
        judge(change)
    return (time.perf_counter() - start) / len(changes) * 1e6


def _median(
    judge: Callable[[Change], object], changes: list[Change], repeat: int
) -> str:
    runs = [_per_event_us(judge, changes) for _ in range(repeat)]
    return f"{statistics.median(runs):7.2f} us/event [{min(runs):.2f}-{max(runs):.2f}]"


def _queries(texts: list[str]) -> dict[str, CompiledQuery]:
    return {
        f"cq{i:03d}": compile_query(text, region="r") for i, text in enumerate(texts)
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    changes = _changes(args.events, seed=1)
    gt = _queries([f"value.n > {k}" for k in range(100)])
    mixed = _queries(
        [
            f"value.n > {k} AND value.tag <> 't{k % 7}'"
            if k % 2
            else f"NOT (value.n <= {k}) OR value.tag LIKE '%{k % 7}'"
            for k in range(100)
        ]
    )
    out = sys.stdout
    calibration = min(timeit.repeat("sum(range(100))", number=100000, repeat=5)) * 10
    out.write(f"host: timeit sum(range(100)) {calibration:.2f} us\n")
    out.write(f"events per block: {len(changes)}, blocks: {args.repeat}\n")
    sets = CqSet(gt)
    out.write("100 x value.n > K, CqSet.judge:       ")
    out.write(_median(lambda c: sets.judge(*c), changes, args.repeat) + "\n")
    one_by_one = sorted(gt.items())

    def each(change: Change) -> list[tuple[str, str | None]]:
        key, before, after = change
        return [(name, q.cq_op(key, before, after)) for name, q in one_by_one]

    out.write("100 x value.n > K, one by one:        ")
    out.write(_median(each, changes, args.repeat) + "\n")
    mixed_set = CqSet(mixed)
    out.write("100 mixed (AND/OR/NOT/LIKE), CqSet:   ")
    out.write(_median(lambda c: mixed_set.judge(*c), changes, args.repeat) + "\n")
    moved = sum(len(sets.judge(*c)) for c in changes) / len(changes)
    out.write(f"cq entries per event (value.n > K): {moved:.1f}\n")


if __name__ == "__main__":
    main()
