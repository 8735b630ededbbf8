"""Enqueue into an offline durable client that holds 100 CQs, next to the
same run's enqueue into one with a single all-keys interest.

One durable client registers ``CQS`` durable CQs ``value.n > K`` on the
region (K = 0 .. CQS-1, distinct) and goes away (``close`` with keepalive);
``count`` events are written by ``putall`` (batches of 1000, distinct
keys) with values ``{"n": x}``, x uniform in [0, CQS), so each event
enters about half the CQs' results (~50 ``cq`` entries per event). The
figure is events/s from the first ``putall`` until every event that
enters at least one CQ (all but a value of exactly 0) is queued. The
reference is the same fill into a durable client with one all-keys
interest (durable, ``policy: none``), with values drawn the same way; the
ratio is CQs ÷ interest (target >= 0.5).

A node without CQs refuses ``register_cq`` with ``bad_query`` even for a
valid query: the scenario then raises ``CqUnsupportedError``, whose message is
the reason ``bench.run`` prints when it skips it.
"""

import asyncio
import json
import random
import time
from typing import Any

from bench import dc
from bench.common import SHIPPED_TIMINGS, Rest

CQS = 100
BATCH = 1000


class CqUnsupportedError(RuntimeError):
    """The node refused a valid query with ``bad_query``: it has no CQs."""


def cq_queries(count: int = CQS) -> list[tuple[str, str]]:
    """``count`` (name, query) pairs ``value.n > K``, K = 0 .. count-1."""
    return [(f"n-gt-{k}", f"value.n > {k}") for k in range(count)]


def draw_values(count: int, rng: random.Random, top: int = CQS) -> list[float]:
    """``count`` values of ``n``, uniform in [0, top)."""
    return [rng.uniform(0, top) for _ in range(count)]


def thresholds(queries: list[tuple[str, str]]) -> list[float]:
    """The K of each ``value.n > K`` query."""
    return [float(query.rsplit(">", 1)[1]) for _, query in queries]


def expected_queued(values: list[float], bounds: list[float]) -> int:
    """How many events a client holding ``value.n > K`` for each K of
    ``bounds`` gets queued: those entering at least one result."""
    lowest = min(bounds)
    return sum(1 for x in values if x > lowest)


def registered(frame: dict[str, Any], name: str) -> bool:
    """Whether ``frame`` answers the ``register_cq`` of ``name`` with
    ``cq_registered``. Raises CqUnsupportedError for ``bad_query`` (the queries
    here are valid) and RuntimeError for any other error."""
    if frame.get("id") != name:
        return False
    if frame.get("type") == "error" and frame.get("code") == "bad_query":
        raise CqUnsupportedError(
            f"the node refused the valid query of CQ {name!r} with bad_query "
            f"({frame.get('message', '')}): it does not support continuous queries"
        )
    if frame.get("type") == "error":
        raise RuntimeError(f"register_cq {name!r} refused: {frame}")
    return frame.get("type") == "cq_registered"


async def make_offline_cqs(
    url: str, token: str, durable_id: str, region: str, queries: list[tuple[str, str]]
) -> None:
    """A durable client with durable CQs ``queries`` on ``region``, then away
    (close with keepalive). Refused (CqUnsupportedError), it closes without
    keepalive: nothing is left behind."""
    ws = await dc.Ws(url, token).connect()
    await ws.hello(durable_id)
    try:
        for name, query in queries:
            await ws.send(
                type="register_cq",
                id=name,
                name=name,
                region=region,
                query=query,
                durable=True,
            )
            async with asyncio.timeout(dc.WAIT_S):
                while not registered(json.loads(await ws.ws.recv()), name):
                    pass
    except CqUnsupportedError:
        await ws.close(keepalive=False)
        raise
    await ws.close(keepalive=True)


def fill_values(rest: Rest, region: str, prefix: str, values: list[float]) -> None:
    """``putall`` ``{"n": x}`` for each value, under distinct keys."""
    for start in range(0, len(values), BATCH):
        entries = {
            f"{prefix}{i}": {"n": values[i]}
            for i in range(start, min(start + BATCH, len(values)))
        }
        rest.ok("POST", f"/api/v1/regions/{region}/putall/", {"entries": entries})


def _timed_fill(
    rest: Rest, region: str, durable_id: str, values: list[float], expected: int
) -> float:
    start = time.monotonic()
    fill_values(rest, region, f"{durable_id}-", values)
    end = dc.wait_pending(rest, durable_id, expected, timeout=300)
    return expected / (end - start)


def enqueue_cqs_vs_interest(
    ws_url: str,
    rest: Rest,
    token: str,
    region: str,
    tag: str,
    count: int,
    seed: int = 5,
) -> dict[str, float]:
    """Events/s into an offline client with ``CQS`` CQs and into one with an
    all-keys interest, in this order, in a region of their own named
    ``{region}-{tag}`` (each ``register_cq`` answers with an image of the
    region: in the region the other scenarios fill, 100 of them would
    read it 100 times and time those reads, not the enqueue). Both
    clients are removed afterwards (their CQs and interest would load the
    scenarios after this one)."""
    rng = random.Random(seed)  # noqa: S311 - bench values, not secrets
    queries = cq_queries()
    region = f"{region}-{tag}"
    rest.ok("POST", "/api/v1/regions/", {"name": region, "conflate_events": False})
    cq_id, interest_id = f"{tag}-cqs", f"{tag}-all"
    asyncio.run(make_offline_cqs(ws_url, token, cq_id, region, queries))
    try:
        values = draw_values(count, rng)
        cq_rate = _timed_fill(
            rest, region, cq_id, values, expected_queued(values, thresholds(queries))
        )
    finally:
        asyncio.run(dc.discard(ws_url, token, cq_id))
    asyncio.run(dc.make_offline(ws_url, token, interest_id, region))
    try:
        values = draw_values(count, rng)
        interest_rate = _timed_fill(rest, region, interest_id, values, count)
    finally:
        asyncio.run(dc.discard(ws_url, token, interest_id))
    return {"cqs": cq_rate, "interest": interest_rate}


def main() -> None:
    """``python -m bench.cq_enqueue [--rounds N] [--events N]``: this scenario
    alone on a fresh one-node cluster (embedded defaults, or the
    ``DURABLECACHE_*`` URLs of the environment), each round's two rates and
    their ratio, then the median ratio."""
    import argparse
    import shutil
    import statistics
    import tempfile
    from pathlib import Path

    from bench.common import first_node, out
    from tests.integration.harness import Cluster

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--events", type=int, default=20000)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="durablecache-cq-bench-"))
    cluster = Cluster(workdir, settings=SHIPPED_TIMINGS)
    try:
        ws_url, token, rest = first_node(cluster, "bench", "bench")
        ratios = []
        for r in range(1, args.rounds + 1):
            rates = enqueue_cqs_vs_interest(
                ws_url, rest, token, "bench", f"r{r}-cq", args.events
            )
            ratios.append(rates["cqs"] / rates["interest"])
            out(
                f"round {r}: {CQS} CQs {rates['cqs']:.0f} ev/s, "
                f"all-keys interest {rates['interest']:.0f} ev/s, "
                f"ratio {ratios[-1]:.2f}"
            )
        out(f"median ratio {statistics.median(ratios):.2f} (target >= 0.5)")
    finally:
        cluster.close()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
