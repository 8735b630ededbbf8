"""The events this node's queues hold, stored once per node
(``QueuedEvent``): added with the queue rows that name them, deleted by
the tick once no queue names them."""

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


def events_store(
    connection: Any, rows: Sequence[Sequence[Any]], *, new: bool = False
) -> None:
    """Store events (rows in database form) that are not here
    yet; those already held are left as they are (an event is the same
    wherever it comes from: the fan-out, or a copy's page).

    On SQLite one ``INSERT OR IGNORE`` as an ``executemany``. On
    PostgreSQL one ``INSERT ... ON CONFLICT DO NOTHING`` of one array per
    column (the same text whatever their number, planned once); or, when
    the caller expects them all ``new`` (the fan-out's events are after
    its cursor, where a copy's pages never reach), a ``COPY`` in a
    savepoint, several times cheaper per row, falling back to that
    insert if one was here after all."""
    if not rows:
        return
    with connection.cursor() as cursor:
        if connection.vendor != "postgresql":
            cursor.executemany(_store_sql(connection.vendor), rows)
            return
        if new:
            try:
                with transaction.atomic(using=NODE_STORE):
                    sql.insert_rows(connection, QueuedEvent, _EVENT_FIELDS, rows)
                return
            except (IntegrityError, connection.Database.IntegrityError):
                pass  # (the COPY goes past Django's error wrapping)
        columns = [list(column) for column in zip(*rows, strict=True)]
        cursor.execute(_pg_store_sql(), columns)


@functools.cache
def _store_sql(vendor: str) -> str:
    insert = sql.insert_sql(QueuedEvent, _EVENT_FIELDS, connections[NODE_STORE])
    return insert.replace("INSERT INTO", "INSERT OR IGNORE INTO", 1)


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


# How often the tick looks for events no queue names any more: the look
# reads every queue row's seq, and an event kept a little longer costs
# nothing but its row.
PRUNE_EVERY_S = 10.0
_pruned_at = [0.0]


def queued_events_prune(node: str, *, force: bool = False) -> int:
    """Delete the events that no queue of this node names any more; return
    how many went. At most every ``PRUNE_EVERY_S`` per process unless
    ``force``.

    Under the fan-out cursor's lock: the fan-out and a copy's pages, the
    only writers of queue rows, hold it too, so no row naming an event
    can be added between the look and the delete."""
    now = time.monotonic()
    if not force and now - _pruned_at[0] < PRUNE_EVERY_S:
        return 0
    _pruned_at[0] = now
    connection = connections[NODE_STORE]
    events, entries = (sql.table(m, connection) for m in (QueuedEvent, QueueEntry))
    with transaction.atomic(using=NODE_STORE), connection.cursor() as cursor:
        cursor_read_locked(node)
        cursor.execute(_prune_sql(connection.vendor, events, entries))
        return max(0, int(cursor.rowcount))


def _prune_sql(vendor: str, events: str, entries: str) -> str:
    """Delete the events no queue row names. Queue rows have no index by
    seq alone (it would cost every row appended a second index write), so
    each database gets the form it runs in one pass over them: PostgreSQL
    an anti-join (a ``NOT IN`` whose list outgrows ``work_mem`` is
    rescanned per event), SQLite a ``NOT IN``, which it answers from a
    temporary index of the list (its ``NOT EXISTS`` would scan the rows
    per event)."""
    if vendor == "postgresql":
        return (
            f"DELETE FROM {events} v WHERE NOT EXISTS"  # noqa: S608
            f" (SELECT 1 FROM {entries} e WHERE e.seq = v.seq)"
        )
    return f"DELETE FROM {events} WHERE seq NOT IN (SELECT seq FROM {entries})"  # noqa: S608
