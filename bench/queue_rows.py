"""The node store's inserts alone, by queue-row shape: ``python -m bench.queue_rows``.

Appends ``--events`` events (1,000 a transaction, as a fan-out pass) to
``--queues`` queues in three table shapes, on SQLite (WAL,
``synchronous=NORMAL``, as the node store) and, with ``--pg URL`` (a
server where a scratch database may be created and dropped), on
PostgreSQL by ``COPY`` as the fan-out writes: ``wide``, a row per queue
copying the whole event, with a foreign key to its head (before decision
0029); ``narrow-fk``, the event stored once and a narrow row per queue
with that foreign key (``queues.0006``); ``narrow``, the same without the
constraint (``queues.0007``). Prints events/s, wall and server CPU per queue row and
bytes per event. No Django: the statements only.
"""

import argparse
import datetime
import json
import os
import sqlite3
import tempfile
import time
import uuid
from typing import Any

from bench.common import out, postgres_cpu

SHAPES = ("wide", "narrow-fk", "narrow")
VALUE = json.dumps({"n": 12345, "name": "some value here"})
EVENT_COLUMNS = "seq, event_id, region, key, op, value, version, ts"
WIDE = (
    "CREATE TABLE e (id {serial} PRIMARY KEY, queue_id {uuid} NOT NULL{fk},"
    " seq bigint NOT NULL, event_id varchar(32) NOT NULL, region varchar(128)"
    ' NOT NULL, "key" varchar(512), op varchar(16) NOT NULL, value {json},'
    " version bigint, ts {ts} NOT NULL, conflates bool NOT NULL, cq {json})"
)
EVENTS = (
    "CREATE TABLE v (seq bigint PRIMARY KEY, event_id varchar(32) NOT NULL,"
    ' region varchar(128) NOT NULL, "key" varchar(512), op varchar(16) NOT NULL,'
    " value {json}, version bigint, ts {ts} NOT NULL)"
)
NARROW = (
    "CREATE TABLE e (id {serial} PRIMARY KEY, queue_id {uuid} NOT NULL{fk},"
    ' seq bigint NOT NULL, region varchar(128) NOT NULL, "key" varchar(512),'
    " op varchar(16) NOT NULL, conflates bool NOT NULL, cq {json})"
)


def _events(start: int, count: int, ts: Any) -> list[tuple[Any, ...]]:
    return [
        (seq, uuid.uuid4().hex, "bench", f"k-{seq}", "create", VALUE, 1, ts)
        for seq in range(start, start + count)
    ]


def _narrow(queue: Any, event: tuple[Any, ...]) -> tuple[Any, ...]:
    """A narrow queue row of ``event``: queue, seq, region, key, op, conflates, cq."""
    return (queue, event[0], event[2], event[3], event[4], False, None)


def _schema(shape: str, types: dict[str, str]) -> list[str]:
    fk = " REFERENCES s (client_id) DEFERRABLE INITIALLY DEFERRED"
    statements = ["CREATE TABLE s (client_id {uuid} PRIMARY KEY)".format(**types)]
    if shape == "wide":
        statements.append(WIDE.format(fk=fk, **types))
    else:
        statements.append(EVENTS.format(**types))
        statements.append(NARROW.format(fk=fk if shape == "narrow-fk" else "", **types))
    statements.append("CREATE UNIQUE INDEX u ON e (queue_id, seq)")
    return statements


def run_sqlite(shape: str, events: int, queues: int) -> dict[str, Any]:
    workdir = tempfile.mkdtemp(prefix="queue-rows-")
    path = os.path.join(workdir, "store.sqlite3")
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA foreign_keys=ON")
    types = {"serial": "integer", "uuid": "char(32)", "json": "text", "ts": "datetime"}
    for statement in _schema(shape, types):
        conn.execute(statement)
    ids = [uuid.uuid4().hex for _ in range(queues)]
    conn.executemany("INSERT INTO s VALUES (?)", [(q,) for q in ids])
    ts = "2026-12-06 10:00:00.000000"
    start = time.perf_counter()
    for first in range(1, events + 1, 1000):
        batch = _events(first, min(1000, events - first + 1), ts)
        conn.execute("BEGIN IMMEDIATE")
        if shape == "wide":
            conn.executemany(
                f"INSERT INTO e (queue_id, {EVENT_COLUMNS}, conflates, cq)"  # noqa: S608
                " VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                [(q, *ev, False, None) for q in ids for ev in batch],
            )
        else:
            conn.executemany(
                f"INSERT INTO v ({EVENT_COLUMNS}) VALUES (?,?,?,?,?,?,?,?)",  # noqa: S608
                batch,
            )
            conn.executemany(
                "INSERT INTO e (queue_id, seq, region, key, op, conflates, cq)"
                " VALUES (?,?,?,?,?,?,?)",
                [
                    (q, ev[0], ev[2], ev[3], ev[4], False, None)
                    for q in ids
                    for ev in batch
                ],
            )
        conn.execute("COMMIT")
    wall = time.perf_counter() - start
    size = sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))
    conn.close()
    return _result(shape, events, queues, wall, None, size)


def run_postgres(url: str, shape: str, events: int, queues: int) -> dict[str, Any]:
    import psycopg

    admin = psycopg.connect(url, autocommit=True)
    admin.execute("DROP DATABASE IF EXISTS bench_queue_rows")
    admin.execute("CREATE DATABASE bench_queue_rows")
    base, _, _ = url.rpartition("/")
    conn = psycopg.connect(f"{base}/bench_queue_rows")
    try:
        types = {
            "serial": "bigserial",
            "uuid": "uuid",
            "json": "jsonb",
            "ts": "timestamptz",
        }
        for statement in _schema(shape, types):
            conn.execute(statement)
        ids = [uuid.uuid4() for _ in range(queues)]
        with conn.cursor().copy("COPY s FROM STDIN") as copy:
            for q in ids:
                copy.write_row((q,))
        conn.commit()
        ts = datetime.datetime.now(datetime.UTC)
        cpu = postgres_cpu()
        start = time.perf_counter()
        cursor = conn.cursor()
        for first in range(1, events + 1, 1000):
            batch = _events(first, min(1000, events - first + 1), ts)
            if shape == "wide":
                columns = f"queue_id, {EVENT_COLUMNS}, conflates, cq"
                with cursor.copy(f"COPY e ({columns}) FROM STDIN") as copy:
                    for q in ids:
                        for ev in batch:
                            copy.write_row((q, *ev, False, None))
            else:
                with cursor.copy(f"COPY v ({EVENT_COLUMNS}) FROM STDIN") as copy:
                    for ev in batch:
                        copy.write_row(ev)
                columns = "queue_id, seq, region, key, op, conflates, cq"
                with cursor.copy(f"COPY e ({columns}) FROM STDIN") as copy:
                    for q in ids:
                        for ev in batch:
                            copy.write_row(_narrow(q, ev))
            conn.commit()
        wall = time.perf_counter() - start
        server = postgres_cpu() - cpu
        row = conn.execute(
            "SELECT pg_total_relation_size('e')"
            " + coalesce(pg_total_relation_size(to_regclass('v')), 0)"
        ).fetchone()
        size = int(row[0]) if row else 0
    finally:
        conn.close()
        admin.execute("DROP DATABASE IF EXISTS bench_queue_rows")
        admin.close()
    return _result(shape, events, queues, wall, server, size)


def _result(
    shape: str, events: int, queues: int, wall: float, server: float | None, size: int
) -> dict[str, Any]:
    rows = events * queues
    return {
        "shape": shape,
        "events_per_s": round(events / wall),
        "wall_us_per_row": round(wall * 1e6 / rows, 2),
        "server_cpu_us_per_row": None
        if server is None
        else round(server * 1e6 / rows, 2),
        "bytes_per_event": round(size / events),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--queues", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--pg", default="", help="postgres://... (optional)")
    args = parser.parse_args()
    for _ in range(args.rounds):
        for shape in SHAPES:
            out(f"sqlite {json.dumps(run_sqlite(shape, args.events, args.queues))}")
            if args.pg:
                got = run_postgres(args.pg, shape, args.events, args.queues)
                out(f"postgresql {json.dumps(got)}")


if __name__ == "__main__":
    main()
