"""The events this node's queues hold, stored once per node
(``QueuedEvent``): added with the queue rows that name them, deleted by
the tick once no queue row holds them."""

import functools
import time
from collections.abc import Sequence
from typing import Any

from django.db import IntegrityError, connections, transaction

from common import sql
from queues.models import QueuedEvent, QueueEntry
from queues.routers import NODE_STORE
from queues.services.cursor import cursor_read_locked

_EVENT_FIELDS = list(QueuedEvent._meta.concrete_fields)
# Rows are [seq, event_id, region, key, op, value (JSON text), version, ts].
assert [f.name for f in _EVENT_FIELDS] == [  # noqa: S101
    "seq", "event_id", "region", "key", "op", "value", "version", "ts",
]  # fmt: skip


# Events per fan-out pass above which they are stored by a ``COPY``.
COPY_MIN_EVENTS = 64
# Events at most that PostgreSQL is given as rows of one ``VALUES`` list;
# more go as one array per column. Bound on the client (Django's psycopg
# cursor), an array of text is built and quoted element by element in
# Python: for a live pass's one to three events, the rows cost half the
# CPU of the arrays.
VALUES_MAX_EVENTS = 8


def events_store(
    connection: Any, rows: Sequence[Sequence[Any]], *, new: bool = False
) -> None:
    """Store events (rows in database form) that are not here
    yet; those already held are left as they are (an event is the same
    wherever it comes from: the fan-out, or a copy's page).

    On SQLite one ``INSERT OR IGNORE`` as an ``executemany``. On
    PostgreSQL one ``INSERT ... ON CONFLICT DO NOTHING``: of the rows
    themselves, up to ``VALUES_MAX_EVENTS``, else of one array per column
    (the same text whatever their number); or, when
    the caller expects them all ``new`` (the fan-out's events are after
    its cursor, where a copy's pages never reach) and they are more than
    ``COPY_MIN_EVENTS``, a ``COPY`` in a savepoint, several times cheaper
    per row, falling back to that insert if one was here after all. A
    live pass's few events take the insert: one round trip, where the
    savepoint, the ``COPY`` and the release take four."""
    if not rows:
        return
    with connection.cursor() as cursor:
        if connection.vendor != "postgresql":
            cursor.executemany(_store_sql(connection.vendor), rows)
            return
        if new and len(rows) > COPY_MIN_EVENTS:
            try:
                with transaction.atomic(using=NODE_STORE):
                    sql.insert_rows(connection, QueuedEvent, _EVENT_FIELDS, rows)
                return
            except (IntegrityError, connection.Database.IntegrityError):
                pass  # (the COPY goes past Django's error wrapping)
        if len(rows) <= VALUES_MAX_EVENTS:
            params = [value for row in rows for value in row]
            cursor.execute(_pg_store_values_sql(len(rows)), params)
            return
        columns = [sql.array_param(column) for column in zip(*rows, strict=True)]
        cursor.execute(_pg_store_sql(), columns)


@functools.cache
def _store_sql(vendor: str) -> str:
    insert = sql.insert_sql(QueuedEvent, _EVENT_FIELDS, connections[NODE_STORE])
    return insert.replace("INSERT INTO", "INSERT OR IGNORE INTO", 1)


@functools.cache
def _pg_store_values_sql(count: int) -> str:
    connection = connections[NODE_STORE]
    row = "(" + ", ".join(["%s"] * len(_EVENT_FIELDS)) + ")"
    insert = sql.insert_sql(QueuedEvent, _EVENT_FIELDS, connection)
    head = insert[: insert.index(" VALUES ")]
    return f"{head} VALUES {', '.join([row] * count)} ON CONFLICT DO NOTHING"


@functools.cache
def _pg_store_sql() -> str:
    connection = connections[NODE_STORE]
    quote = connection.ops.quote_name
    columns = ", ".join(quote(f.column) for f in _EVENT_FIELDS)
    types = "bigint, text, text, text, text, jsonb, bigint, timestamptz"
    arrays = ", ".join(f"%s::{t}[]" for t in types.split(", "))
    return (
        f"INSERT INTO {sql.table(QueuedEvent, connection)} ({columns})"  # noqa: S608
        f" SELECT * FROM unnest({arrays}) ON CONFLICT DO NOTHING"
    )


# How often the tick looks for events no queue row holds any more: the
# look sorts every queue row by seq, and an event kept a little longer
# costs nothing but its row.
PRUNE_EVERY_S = 10.0
_pruned_at = [0.0]


def queued_events_prune(node: str, *, force: bool = False) -> int:
    """Delete the events that no queue row of this node holds any more;
    return how many went. At most every ``PRUNE_EVERY_S`` per process unless
    ``force``.

    Under the fan-out cursor's lock: the fan-out and a copy's pages, the
    only writers of queue rows, hold it too, so no row holding an event
    can be added between the look and the delete."""
    now = time.monotonic()
    if not force and now - _pruned_at[0] < PRUNE_EVERY_S:
        return 0
    _pruned_at[0] = now
    connection = connections[NODE_STORE]
    with transaction.atomic(using=NODE_STORE), connection.cursor() as cursor:
        cursor_read_locked(node)
        cursor.execute(_gaps_sql())
        gaps = cursor.fetchall()
        if not gaps:
            return 0
        if connection.vendor == "postgresql":
            cursor.execute(_pg_prune_sql(), [list(c) for c in zip(*gaps, strict=True)])
            return max(0, int(cursor.rowcount))
        cursor.executemany(_prune_sql(), gaps)  # (its rowcount: the total)
        return max(0, int(cursor.rowcount))


# An upper bound no seq reaches (bigint).
_NO_SEQ = 2**63 - 1


@functools.cache
def _gaps_sql() -> str:
    """The ranges of seqs that no queue row holds, as (after, before)
    exclusive, in one pass over the rows sorted by seq: before each row,
    the gap from the furthest any earlier row reaches; after the last,
    the rest. Rows (spans) may hold many seqs, and queue rows have no
    index by seq alone (it would cost every row appended a second index
    write), so this is the form both databases run in one sort."""
    connection = connections[NODE_STORE]
    quote = connection.ops.quote_name
    seq, through = quote("seq"), quote("through")
    entries = sql.table(QueueEntry, connection)
    return (
        f"WITH r AS (SELECT {seq} AS seq, COALESCE(MAX({through}) OVER"  # noqa: S608
        f" (ORDER BY {seq} ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0)"
        f" AS reach FROM {entries})"
        " SELECT reach, seq FROM r WHERE reach < seq - 1"
        f" UNION ALL SELECT COALESCE(MAX({through}), 0), {_NO_SEQ} FROM {entries}"
    )


@functools.cache
def _prune_sql() -> str:
    events = sql.table(QueuedEvent, connections[NODE_STORE])
    return f"DELETE FROM {events} WHERE seq > %s AND seq < %s"  # noqa: S608


@functools.cache
def _pg_prune_sql() -> str:
    events = sql.table(QueuedEvent, connections[NODE_STORE])
    return (
        f"DELETE FROM {events} v USING unnest(%s::bigint[], %s::bigint[])"  # noqa: S608
        " AS g(after, before) WHERE v.seq > g.after AND v.seq < g.before"
    )
