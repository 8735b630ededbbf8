"""Acknowledgements and delivery marks: what a client holds is dropped
from its queue, and what it is about to be sent is marked delivered.

Delivery rules (seq, ack, replay, conflation): docs/protocol.md#delivery.
"""

import functools
import uuid
from collections.abc import Callable, Collection, Mapping
from typing import Any

from django.db import connections, transaction

from common import sql
from queues.models import QueuedEvent, QueueEntry, QueueState
from queues.routers import NODE_STORE
from queues.services.spans import cut_sql, held_between, held_count
from queues.services.store import (
    STATE_PK,
    commit_unflushed,
    state_pk,
    table,
)

_MARK_FIELDS = [
    QueueState._meta.get_field(f)
    for f in ("acked_through", "delivered_through", "size")
]


def queue_ack(*, client_id: uuid.UUID, up_to: int) -> int:
    """Drop every entry with seq <= up_to; return how many went."""
    return queue_ack_and_mark_many(acks=[(client_id, up_to)])[0]


def queue_ack_and_mark_many(
    *,
    acks: list[tuple[uuid.UUID, int]],
    marking: Collection[uuid.UUID] = (),
    read: Callable[[], Mapping[uuid.UUID, int]] | None = None,
) -> list[int]:
    """Apply many sockets' acks and mark what ``read`` reads delivered, in
    one transaction; return the rows each ack dropped.

    One transaction for the round: one write lock of the node store, which
    the fan-out's appends wait for, instead of one per ack. ``read``, when
    given, reads the rows the sockets of the clients ``marking`` are about
    to be sent, after their heads are locked, and returns each client's
    last seq read, marked delivered in the same commit. Conflation removes
    only updates after a queue's mark, and the fan-out locks the same heads
    (on SQLite, the same write lock), so no pass can remove a row between
    its read and its mark, as one could if the mark followed the send.
    (Reads of rows that cannot conflate need no mark and no lock:
    ``sockets.delivery_rounds`` makes them outside any transaction.)

    1. Lock every head the round changes in one statement, in client id
       order: the order the fan-out locks its batch in (``append``), so
       the two cannot deadlock.
    2. Drop each ack's events, counted per ack to keep the heads' sizes
       exact (``_delete_acked``): a row may hold many (a span).
    3. ``read``, and mark what it read.
    4. Write every changed head at once (``sql.update_rows``).
    Statements in SQL: docs/decisions/0010-hot-statements-in-sql.md.
    """
    if not acks and read is None:
        return []
    connection = connections[NODE_STORE]
    with transaction.atomic(using=NODE_STORE), connection.cursor() as cursor:
        commit_unflushed(connection)
        heads = _lock_marks(cursor, connection, {pk for pk, _ in acks} | set(marking))
        ranges = _ack_ranges(acks, heads)
        dropped = _delete_acked(cursor, connection, ranges, len(acks))
        changed = _apply_acks(heads, ranges, dropped)
        changed |= _apply_marks(heads, read() if read is not None else {})
        sql.update_rows(
            connection,
            QueueState,
            _MARK_FIELDS,
            [STATE_PK],
            [[*heads[pk], state_pk(pk, connection)] for pk in sorted(changed)],
        )
    return dropped


def _apply_acks(
    heads: dict[uuid.UUID, list[int]],
    ranges: list[tuple[int, uuid.UUID, int, int]],
    dropped: list[int],
) -> set[uuid.UUID]:
    """Move each acked head (``[acked_through, delivered_through, size]``)
    past its ack and shrink it by the rows dropped; return the heads moved.
    """
    changed: set[uuid.UUID] = set()
    for i, client_id, _, up_to in ranges:
        head = heads[client_id]
        head[:] = [up_to, max(head[1], up_to), max(0, head[2] - dropped[i])]
        changed.add(client_id)
    return changed


def _apply_marks(
    heads: dict[uuid.UUID, list[int]], marks: Mapping[uuid.UUID, int]
) -> set[uuid.UUID]:
    """Move each locked head's ``delivered_through`` up to its mark (never
    down); return the heads moved."""
    changed: set[uuid.UUID] = set()
    for client_id, through in marks.items():
        head = heads.get(client_id)
        if head is not None and through > head[1]:
            head[1] = through
            changed.add(client_id)
    return changed


def _ack_ranges(
    acks: list[tuple[uuid.UUID, int]], heads: dict[uuid.UUID, list[int]]
) -> list[tuple[int, uuid.UUID, int, int]]:
    """Each ack that drops something, as ``(index, client_id, after,
    up_to)``: its events are those with ``after < seq <= up_to``, after the
    client's earlier acks in the round (a client's first after the head's
    acked-through: its queue holds nothing at or below it). An ack at or
    below the head's acked-through or an earlier ack drops nothing, as
    does one of a queue not hosted here."""
    acked = {pk: head[0] for pk, head in heads.items()}
    ranges = []
    for i, (client_id, up_to) in enumerate(acks):
        if client_id in acked and up_to > acked[client_id]:
            ranges.append((i, client_id, acked[client_id], up_to))
            acked[client_id] = up_to
    return ranges


def _delete_acked(
    cursor: Any,
    connection: Any,
    ranges: list[tuple[int, uuid.UUID, int, int]],
    count: int,
) -> list[int]:
    """Drop the events of each range (``_ack_ranges``): delete the rows
    that end in it and cut the span across its end (``spans``); return
    the events dropped by each of the round's ``count`` acks.

    On PostgreSQL one statement for the round: a statement per ack would
    be a round trip each while the heads stay locked. On SQLite the
    ranges' events are counted in one statement (per
    ``RANGES_PER_COUNT``), then each ack's rows deleted and cut in one
    ``executemany`` each, in order. The round's transaction holds
    SQLite's write lock from its start (``transaction_mode`` IMMEDIATE),
    so nothing changes between the count and the deletes.
    """
    dropped = [0] * count
    if not ranges:
        return dropped
    if connection.vendor == "postgresql":
        columns = zip(*ranges, strict=True)
        indexes, client_ids, afters, up_tos = (list(c) for c in columns)
        cursor.execute(
            _ack_sql(connection.vendor)[1],
            [
                sql.array_param(column)
                for column in (
                    indexes,
                    [state_pk(pk, connection) for pk in client_ids],
                    afters,
                    up_tos,
                )
            ],
        )
        for i, rows in cursor.fetchall():
            dropped[i] = rows
        return dropped
    across = _count_ranges(cursor, connection, ranges, dropped)
    delete, cut = cut_sql()
    queues = [(i, state_pk(pk, connection), up_to) for i, pk, _, up_to in ranges]
    cursor.executemany(delete, [[queue, up_to, up_to] for _, queue, up_to in queues])
    cuts = [[up_to, queue, up_to] for i, queue, up_to in queues if i in across]
    if cuts:
        cursor.executemany(cut, cuts)
    return dropped


# Ranges per counting statement on SQLite (four parameters each, well under
# its limit on host parameters).
RANGES_PER_COUNT = 500


def _count_ranges(
    cursor: Any,
    connection: Any,
    ranges: list[tuple[int, uuid.UUID, int, int]],
    dropped: list[int],
) -> set[int]:
    """Count the events of each range (``_ack_ranges``) into ``dropped``
    at its ack's index, each range a row of a VALUES list joined to the
    queue's (queue, seq) index and the rows' events; return the indexes
    of the acks that end inside a span, which is to be cut (a span whose
    part below the ack holds no event may stay as it is: it holds nothing
    that is acked)."""
    across: set[int] = set()
    head, tail = _count_sql()
    for chunk in sql.chunks(ranges, RANGES_PER_COUNT):
        values = ", ".join(["(%s, %s, %s, %s)"] * len(chunk))
        params = [
            value
            for i, client_id, after, up_to in chunk
            for value in (i, state_pk(client_id, connection), after, up_to)
        ]
        cursor.execute(f"{head}{values}{tail}", params)
        up_tos = {i: up_to for i, _, _, up_to in chunk}
        for i, rows, reach in cursor.fetchall():
            dropped[i] = rows
            if reach > up_tos[i]:
                across.add(i)
    return across


@functools.cache
def _count_sql() -> tuple[str, str]:
    """The count of ``_count_ranges`` around its VALUES list."""
    through = connections[NODE_STORE].ops.quote_name("through")
    return (
        "WITH a(i, queue_id, after, up_to) AS (VALUES ",
        f") SELECT a.i, count(*), max(e.{through}) FROM a {_rows_in_ranges()}"  # noqa: S608
        f" JOIN {table(QueuedEvent)} v ON {held_between('a.after', 'a.up_to')}"
        " GROUP BY a.i",
    )


@functools.cache
def _rows_in_ranges(floored: bool = False) -> str:
    """The join of ranges ``a`` to their queues' rows ``e`` that hold
    events in them; ``floored``: the rows only above their queue's
    ``last.floor`` (``_ack_sql``)."""
    quote = connections[NODE_STORE].ops.quote_name
    seq, queue, through = quote("seq"), quote("queue_id"), quote("through")
    floor = f" AND e.{seq} > last.floor" if floored else ""
    join_last = "JOIN last ON last.queue_id = a.queue_id " if floored else ""
    return (
        f"{join_last}JOIN {table(QueueEntry)} e ON e.{queue} = a.queue_id{floor}"
        f" AND e.{through} > a.after AND e.{seq} <= a.up_to"
    )


@functools.cache
def _ack_sql(vendor: str) -> tuple[str, str]:
    """Lock heads (add a condition on ``client_id``); and on PostgreSQL,
    drop the ranges of many acks and count their events per ack in one
    statement: each queue's rows through its last ack are deleted and the
    span across it cut (``spans.cut_sql``), while the count reads the rows
    as they were (every part of a statement sees the same snapshot).

    Every part walks the queue's (queue, seq) index from the head's
    acked-through (``floor``: a queue holds no row at or below it, as
    every ack cuts the span across it here) to the ack: the rows' ranges
    alone are no index's, and the planner, given only those, joined a
    scan of the whole table (dead rows too, between the tick's vacuums)
    three times per round. The events each row holds are counted by a
    range of their key per row (``spans.held_count``), not a join."""
    connection = connections[NODE_STORE]
    quote = connection.ops.quote_name
    state_table, entry_table = table(QueueState), table(QueueEntry)
    seq, queue, through = quote("seq"), quote("queue_id"), quote("through")
    return (
        "SELECT client_id, acked_through, delivered_through, size"  # noqa: S608
        f" FROM {state_table} WHERE ",
        "WITH a AS (SELECT * FROM unnest(%s::integer[], %s::uuid[],"  # noqa: S608
        " %s::bigint[], %s::bigint[]) AS a(i, queue_id, after, up_to)),"
        " last AS (SELECT queue_id, min(after) AS floor, max(up_to) AS up_to"
        " FROM a GROUP BY queue_id),"
        f" gone AS (DELETE FROM {entry_table} e USING last"
        f" WHERE e.{queue} = last.queue_id AND e.{seq} > last.floor"
        f" AND e.{seq} <= last.up_to AND e.{through} <= last.up_to),"
        f" cut AS (UPDATE {entry_table} e SET {seq} = last.up_to + 1 FROM last"
        f" WHERE e.{queue} = last.queue_id AND e.{seq} > last.floor"
        f" AND e.{seq} <= last.up_to AND e.{through} > last.up_to)"
        f" SELECT a.i, SUM({held_count('a.after', 'a.up_to')})::bigint"
        f" FROM a {_rows_in_ranges(floored=True)} GROUP BY a.i",
    )


def _lock_marks(
    cursor: Any, connection: Any, client_ids: set[uuid.UUID]
) -> dict[uuid.UUID, list[int]]:
    """Lock the head rows of ``client_ids`` in id order; return each one's
    ``[acked_through, delivered_through, size]``."""
    select = _ack_sql(connection.vendor)[0]
    lock = sql.for_update(connection)
    heads: dict[uuid.UUID, list[int]] = {}
    for chunk in sql.chunks(sorted(client_ids), 500):
        ids = [state_pk(pk, connection) for pk in chunk]
        where, params = sql.in_list("client_id", ids, connection)
        cursor.execute(f"{select}{where} ORDER BY client_id{lock}", params)
        for pk, *head in cursor.fetchall():
            heads[sql.uuid_read(pk)] = head
    return heads


def queue_ack_many(acks: dict[uuid.UUID, int]) -> int:
    """Apply acknowledgements relayed from a primary; return rows dropped."""
    return sum(queue_ack_and_mark_many(acks=list(acks.items())))
