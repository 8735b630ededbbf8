"""What each extra subscriber costs the enqueue: ``python -m bench.subscribers``.

On a fresh 2-node cluster (redundancy 1, as ``make bench``'s many-subscriber
enqueue), ``--events`` (20,000) are written by ``putall`` into 1 and then
``--subscribers`` (10) offline durable clients with all-keys interest,
until every host of every queue holds them all; for each fill: events/s,
the CPU of each node's processes (on PostgreSQL, the server's too), the
queue rows and the bytes of the node stores' queue tables. Mosquitto, in
the same run: the same fills into 1 and 10 persistent sessions, its
events/s and CPU. The difference between the two fills divided by the
extra subscribers is the cost per extra subscriber per event
(docs/performance.md, "Many subscribers"). The ``DURABLECACHE_*`` URLs
of the environment select PostgreSQL and Redis.
"""

import argparse
import asyncio
import json
import shutil
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

from bench import dc, mqtt
from bench.common import SHIPPED_TIMINGS, Rest, first_node, out, postgres_cpu
from bench.live import _cpu
from tests.integration.harness import Cluster, free_port

REGION = "bench"
# The queue rows and the events they name (stored once per node).
TABLES = ("queues_queueentry", "queues_queuedevent")


def _table_bytes(cluster: Cluster, node: str) -> int:
    """Bytes of the queue tables (and their indexes) in ``node``'s store."""
    if cluster.pg_databases:
        import psycopg

        url = f"{cluster.pg_server}/dce2e_{cluster.pg_tag}_{node}"
        sizes = " + ".join(
            f"coalesce(pg_total_relation_size(to_regclass('{t}')), 0)" for t in TABLES
        )
        with psycopg.connect(url, autocommit=True) as conn:
            row = conn.execute(f"SELECT {sizes}").fetchone()
        return int(row[0]) if row else 0
    path = cluster.workdir / "nodes" / f"{node}.sqlite3"
    marks = ", ".join("?" * len(TABLES))
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        try:
            rows = conn.execute(
                "SELECT SUM(pgsize) FROM dbstat"  # noqa: S608
                f" WHERE name IN ({marks}) OR tbl_name IN ({marks})",
                (*TABLES, *TABLES),
            ).fetchone()
            return int(rows[0] or 0)
        except sqlite3.OperationalError:  # no dbstat: the whole file
            (pages,) = conn.execute("PRAGMA page_count").fetchone()
            (size,) = conn.execute("PRAGMA page_size").fetchone()
            return int(pages * size)


def _queue_rows(cluster: Cluster, node: str) -> int:
    """How many queue rows ``node``'s store holds (a row may hold a run of
    events: a span)."""
    query = "SELECT COUNT(*) FROM queues_queueentry"
    if cluster.pg_databases:
        import psycopg

        url = f"{cluster.pg_server}/dce2e_{cluster.pg_tag}_{node}"
        with psycopg.connect(url, autocommit=True) as conn:
            row = conn.execute(query).fetchone()
        return int(row[0]) if row else 0
    path = cluster.workdir / "nodes" / f"{node}.sqlite3"
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        return int(conn.execute(query).fetchone()[0])


def _server_cpu(cluster: Cluster) -> dict[str, float]:
    """On PostgreSQL, the CPU seconds of the server's processes (all of
    them: this machine runs nothing else meanwhile), which do the inserts'
    work; a backend that exits during a fill takes its share with it."""
    if not cluster.pg_databases:
        return {}
    return {"postgres server": postgres_cpu()}


def fill(
    cluster: Cluster, ws_url: str, rests: dict[str, Rest], token: str, tag: str,
    events: int, clients: int,
) -> dict[str, Any]:  # fmt: skip
    ids = [f"{tag}-{i}" for i in range(clients)]
    first = next(iter(rests.values()))
    for durable_id in ids:
        dc.offline_on(ws_url, rests, token, durable_id, REGION)
    nodes = list(rests)
    bytes_before = {n: _table_bytes(cluster, n) for n in nodes}
    rows_before = {n: _queue_rows(cluster, n) for n in nodes}
    cpu_before = _cpu(cluster) | _server_cpu(cluster)
    start = time.monotonic()
    dc.fill_putall(first, REGION, f"{tag}-k", events)
    end = max(dc.queued_everywhere(rests, d, events) for d in ids)
    cpu_after = _cpu(cluster) | _server_cpu(cluster)
    cpu = {k: v - cpu_before.get(k, 0.0) for k, v in cpu_after.items()}
    grown = {n: _table_bytes(cluster, n) - bytes_before[n] for n in nodes}
    rows = {n: _queue_rows(cluster, n) - rows_before[n] for n in nodes}
    for durable_id in ids:
        asyncio.run(dc.discard(ws_url, token, durable_id))
    return {
        "clients": clients,
        "events_per_s": events / (end - start),
        "cpu_ms_per_event": {k: v * 1000 / events for k, v in cpu.items()},
        "rows_per_event_per_host": {n: r / events for n, r in rows.items()},
        "table_bytes_per_event": {n: b / events for n, b in grown.items()},
    }


def fill_mqtt(
    broker: mqtt.Mosquitto, tag: str, events: int, clients: int
) -> dict[str, Any]:
    proc = psutil.Process(broker.proc.pid)
    before = sum(proc.cpu_times()[:2])
    rate = mqtt.enqueue_many(broker.port, tag, events, clients)
    cpu = sum(proc.cpu_times()[:2]) - before
    return {
        "clients": clients,
        "events_per_s": rate,
        "cpu_ms_per_event": cpu * 1000 / events,
    }


def per_extra(one: dict[str, Any], many: dict[str, Any]) -> dict[str, float]:
    """The cost of each subscriber past the first, per event."""
    extra = many["clients"] - one["clients"]
    cpu = sum(many["cpu_ms_per_event"].values()) - sum(one["cpu_ms_per_event"].values())
    grown = sum(many["table_bytes_per_event"].values()) - sum(
        one["table_bytes_per_event"].values()
    )
    rows = sum(many["rows_per_event_per_host"].values()) - sum(
        one["rows_per_event_per_host"].values()
    )
    return {
        "cpu_us_per_event_per_subscriber": cpu * 1000 / extra,
        "table_bytes_per_event_per_subscriber": grown / extra,
        # Both hosts' (redundancy 1); a row may hold a run of events.
        "rows_per_event_per_subscriber": rows / extra,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--subscribers", type=int, default=10)
    parser.add_argument("--output", default="")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="durablecache-subscribers-bench-"))
    cluster = Cluster(workdir / "cluster", settings=SHIPPED_TIMINGS)
    broker = None
    result: dict[str, Any] = {"args": vars(args)}
    try:
        ws_url, token, rest = first_node(cluster, REGION, "bench")
        second = cluster.start_node("node-2")
        rests = {"node-1": rest, "node-2": Rest(second, token)}
        broker = mqtt.Mosquitto(workdir / "mosquitto", free_port())
        for n in (1, args.subscribers):
            got = fill(cluster, ws_url, rests, token, f"s{n}", args.events, n)
            result[f"durablecache_{n}"] = got
            out(f"durablecache, {n} subscriber(s): {json.dumps(got)}")
            got = fill_mqtt(broker, f"m{n}", args.events, n)
            result[f"mosquitto_{n}"] = got
            out(f"mosquitto, {n} session(s): {json.dumps(got)}")
    finally:
        if broker is not None:
            broker.stop()
        cluster.close()
        shutil.rmtree(workdir, ignore_errors=True)
    n = args.subscribers
    extra = per_extra(result["durablecache_1"], result[f"durablecache_{n}"])
    mq_one, mq_many = result["mosquitto_1"], result[f"mosquitto_{n}"]
    extra_mq = (
        (mq_many["cpu_ms_per_event"] - mq_one["cpu_ms_per_event"]) * 1000 / (n - 1)
    )
    result["per_extra_subscriber"] = extra
    result["mosquitto_cpu_us_per_event_per_session"] = extra_mq
    ratio = result[f"durablecache_{n}"]["events_per_s"] / mq_many["events_per_s"]
    result["ratio"] = ratio
    out(f"\n{n} subscribers, redundancy 1: {ratio:.2f}x Mosquitto (target >= 1.0)")
    out(f"per extra subscriber, per event: {json.dumps(extra)}")
    out(f"Mosquitto per extra session, per event: CPU {extra_mq:.1f} us")
    if args.output:
        Path(args.output).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
