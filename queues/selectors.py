"""Reads of this node's store, shaped for the consumer and the API."""

import functools
import json
import uuid
from datetime import datetime
from typing import Any, NamedTuple

from django.db import connections
from django.utils.dateparse import parse_datetime

from cache.events import event_to_dict, format_ts
from common import sql
from queues.models import FanoutCursor, QueuedEvent, QueueEntry, QueueState
from queues.routers import NODE_STORE

NO_QUEUE = -2


def queue_get(*, client_id: uuid.UUID) -> QueueState | None:
    return QueueState.objects.filter(pk=client_id).first()


def queue_size(*, client_id: uuid.UUID) -> int:
    """Return the pending count in constant time, or -2 when there is no queue."""
    size = QueueState.objects.filter(pk=client_id).values_list("size", flat=True)
    return size[0] if size else NO_QUEUE


def queue_head(*, client_id: uuid.UUID) -> int:
    head = QueueState.objects.filter(pk=client_id).values_list("last_seq", flat=True)
    return head[0] if head else 0


def queue_heads(*, client_ids: list[uuid.UUID]) -> dict[uuid.UUID, int]:
    """The last seq of each of these queues (absent: no queue here)."""
    return sql.values_by_pk(QueueState.objects, client_ids, "last_seq")


class HeldEntry(NamedTuple):
    """One event a queue holds: a row of its own (a span's rows are made
    one per event, each with the event's seq, region, key and op) and the
    event; reads as both (the row's seq, ``conflates`` and ``cq``, the
    event's fields)."""

    entry: QueueEntry
    event: QueuedEvent

    def __getattr__(self, name: str) -> Any:
        if name in _ROW_FIELDS:
            return getattr(self.entry, name)
        return getattr(self.event, name)


_ROW_FIELDS = frozenset({"seq", "queue", "queue_id", "conflates", "cq"})


def queue_entries_after(
    *, client_id: uuid.UUID, after: int, limit: int, through: int | None = None
) -> list[HeldEntry]:
    """A queue's events after ``after`` (through ``through``), in seq
    order, each with its row (for the API, the dashboard and copies, not
    the delivery loop: model instances). One statement: the rows and the
    events they hold are read together."""
    connection = connections[NODE_STORE]
    quote = connection.ops.quote_name
    columns = ", ".join(
        f"{t}.{quote(c)}" + (f" AS {quote('row_' + c)}" if t == _ENTRY else "")
        for t, c in _HELD_COLUMNS
    )
    statement, params = _read(connection, client_id, after, limit, through, columns)
    got = QueuedEvent.objects.using(NODE_STORE).raw(statement, params)
    held = []
    for event in got:
        # The row's columns, which ``raw`` sets as they come (``_HELD_COLUMNS``).
        cq = getattr(event, "row_cq")  # noqa: B009
        entry = QueueEntry(
            queue_id=client_id,
            seq=event.seq,
            region=event.region,
            key=event.key,
            op=event.op,
            conflates=bool(getattr(event, "row_conflates")),  # noqa: B009
            cq=json.loads(cq) if isinstance(cq, str) else cq,
            through=event.seq,
        )
        held.append(HeldEntry(entry, event))
    return held


# A held event's columns: the event's, then its row's (named apart).
_HELD_COLUMNS = (
    *(("v", f.column) for f in QueuedEvent._meta.concrete_fields),
    ("e", "conflates"), ("e", "cq"),
)  # fmt: skip


# An event's columns (of its ``QueuedEvent``), then the queue row's
# ``conflates`` (read, not sent) and ``cq`` list (sent when not null), as
# ``(table, column)`` in the order ``_events`` unpacks them.
_EVENT, _ENTRY = "v", "e"
_EVENT_COLUMNS = (
    (_EVENT, "event_id"), (_EVENT, "seq"), (_EVENT, "region"), (_EVENT, "key"),
    (_EVENT, "op"), (_EVENT, "value"), (_EVENT, "version"), (_EVENT, "ts"),
    (_ENTRY, "conflates"), (_ENTRY, "cq"),
)  # fmt: skip


# ISO-8601 in UTC with a Z, as ts_text writes it for SQLite's stored text.
_PG_WIRE_TS = """'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'"""


@functools.cache
def _event_columns(vendor: str) -> str:
    """The selected columns of a read, in ``_EVENT_COLUMNS``' order (the
    queue rows as ``e`` joined with their events as ``v``)."""
    quote = connections[NODE_STORE].ops.quote_name
    columns = [f"{t}.{quote(c)} AS {quote(c)}" for t, c in _EVENT_COLUMNS]
    ts = f"{_EVENT}.{quote('ts')}"
    if vendor == "sqlite":
        # The timestamp as its stored text: the column's declared type makes
        # sqlite3 parse it into a datetime per row fetched (a converter
        # Django registers), only for ts_text to format it back.
        stamp = f"CAST({ts} AS TEXT)"
    elif vendor == "postgresql":
        # The wire's text, made by the server: psycopg would parse each
        # row's timestamptz into a datetime for ts_text to format it back.
        stamp = f"to_char({ts} AT TIME ZONE 'UTC', {_PG_WIRE_TS})"
    else:
        stamp = ts
    return ", ".join(
        f"{stamp} AS {quote('ts')}" if c == "ts" else column
        for (_, c), column in zip(_EVENT_COLUMNS, columns, strict=True)
    )


def _read(
    connection: Any,
    client_id: uuid.UUID,
    after: int,
    limit: int,
    through: int | None,
    columns: str,
) -> tuple[str, list[Any]]:
    """One queue's read: the statement selecting ``columns`` of its rows
    (``e``) and their events (``v``) after ``after`` (through ``through``),
    in seq order, at most ``limit``; and its parameters."""
    queue = sql.uuid_param(client_id, connection)
    params = _read_params(connection.vendor, queue, after, limit, through)
    if connection.vendor == "postgresql":
        return _pg_read_sql().format(columns=columns), params
    return _read_sql(through is not None).format(columns=columns), params


def _read_params(
    vendor: str, queue: Any, after: int, limit: int, through: int | None
) -> list[Any]:
    """The parameters of ``_read_sql`` or ``_pg_read_sql``, in order."""
    if vendor == "postgresql":
        upto = _NO_BOUND if through is None else through
        return [queue, queue, after, after, upto, limit, after, upto, limit, limit]
    if through is None:
        return [after, queue, queue, after, after, limit]
    return [after, through, queue, queue, after, after, through, limit]


@functools.cache
def _read_sql(bounded: bool) -> str:
    """A queue's read in one statement, with ``{columns}`` to fill in.

    A row that holds events after ``after`` starts at or after the last
    row that starts at or below it (rows do not overlap): that lower bound
    keeps the walk of the queue's index from the rows read before and not
    acked yet. Each row's events are one range of their key, bounded by
    one expression each way (two bounds on a side would let SQLite pick
    the page's, and walk from it to each row). SQLite answers ``ORDER BY
    e.seq, v.seq`` by the order of its loops (the rows by the queue's
    index, each row's events by their key), with no sort, and stops at
    the LIMIT."""
    connection = connections[NODE_STORE]
    quote = connection.ops.quote_name
    seq, queue, through = quote("seq"), quote("queue_id"), quote("through")
    entries = sql.table(QueueEntry, connection)
    events = sql.table(QueuedEvent, connection)
    last = f"min(e.{through}, %s)" if bounded else f"e.{through}"
    upper = f" AND e.{seq} <= %s" if bounded else ""
    return (
        f"SELECT {{columns}} FROM {entries} e JOIN {events} v"  # noqa: S608
        f" ON v.{seq} >= max(e.{seq}, %s + 1) AND v.{seq} <= {last}"
        f" WHERE e.{queue} = %s AND e.{seq} >= (SELECT COALESCE(MAX(s.{seq}), 0)"
        f" FROM {entries} s WHERE s.{queue} = %s AND s.{seq} <= %s)"
        f" AND e.{through} > %s{upper}"
        f" ORDER BY e.{seq}, v.{seq} LIMIT %s"
    )


def _pg_read(queue: str, after: str, upto: str, limit: str) -> str:
    """PostgreSQL's form of a queue's read (``_read_sql``), with
    ``{columns}`` to fill in and its bounds as SQL expressions
    (placeholders, or the columns of a LATERAL's outer row).

    The page's rows first, at most ``limit`` of them by the queue's index
    (each holds an event of the page but maybe the last: rows do not
    overlap), then each row's events as a LATERAL subquery on their key
    with its own LIMIT. The planner does not know that the rows' order
    gives the events', so it sorts what the two give: at most ``limit``
    events per row, where a plain join would walk every row of the queue
    and every event of a span before its sort."""
    connection = connections[NODE_STORE]
    quote = connection.ops.quote_name
    seq, queue_id, through = quote("seq"), quote("queue_id"), quote("through")
    entries = sql.table(QueueEntry, connection)
    events = sql.table(QueuedEvent, connection)
    return (
        f"SELECT {{columns}} FROM (SELECT * FROM {entries} r0"  # noqa: S608
        f" WHERE r0.{queue_id} = {queue}"
        f" AND r0.{seq} >= (SELECT COALESCE(MAX(s.{seq}), 0) FROM {entries} s"
        f" WHERE s.{queue_id} = {queue} AND s.{seq} <= {after})"
        f" AND r0.{through} > {after} AND r0.{seq} <= {upto}"
        f" ORDER BY r0.{seq} LIMIT {limit}) e CROSS JOIN LATERAL"
        f" (SELECT w.* FROM {events} w WHERE w.{seq} >= GREATEST(e.{seq}, {after} + 1)"
        f" AND w.{seq} <= LEAST(e.{through}, {upto})"
        f" ORDER BY w.{seq} LIMIT {limit}) v"
        f" ORDER BY e.{seq}, v.{seq} LIMIT {limit}"
    )


@functools.cache
def _pg_read_sql() -> str:
    """``_pg_read`` with placeholders, in the order of ``_read``'s
    parameters."""
    return _pg_read(*["%s"] * 4)


def ts_text(ts: datetime | str) -> str:
    """A stored timestamp as the wire wants it: PostgreSQL hands back aware
    datetimes, or ``_PG_WIRE_TS``'s text when the statement formats it;
    SQLite naive UTC ones (USE_TZ), or the text it stores them as
    (``YYYY-MM-DD HH:MM:SS[.ffffff]``, what ``str()`` of the naive datetime
    writes) when the statement reads it as text."""
    if isinstance(ts, str):
        if len(ts) in (19, 26) and ts[10] == " ":
            return f"{ts[:10]}T{ts[11:]}Z"
        if len(ts) == 27 and ts[10] == "T" and ts[-1] == "Z":  # _PG_WIRE_TS
            # Whole seconds without their zeros, as isoformat writes them.
            return ts[:19] + "Z" if ts.endswith(".000000Z") else ts
        parsed = parse_datetime(ts)
        if parsed is None:
            raise ValueError(f"not a stored timestamp: {ts!r}")
        ts = parsed
    if ts.tzinfo is None:
        return ts.isoformat() + "Z"
    return format_ts(ts)


def queue_events_after(
    *,
    client_id: uuid.UUID,
    after: int,
    limit: int,
    through: int | None = None,
    shared: dict[tuple[Any, ...], dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Like ``queue_entries_after`` but as public event fields, for the
    delivery loop; the value stays the JSON text stored (``value_json``),
    which the frame embeds as is (``sockets.protocol.event_frame``).

    One statement in SQL, without a queryset or model instances: this runs
    once per socket per batch (docs/decisions/0010-hot-statements-in-sql.md).

    ``shared`` maps ``(event id, seq)`` to an event already built: every
    queue holding an event names the same stored one (``QueuedEvent``), so
    the reads of one delivery round, one per socket, build each event once
    and hand the sockets the same dict (which lets a socket reuse the frame
    another built: ``SubscriptionConsumer._send_rows``).
    """
    connection = connections[NODE_STORE]
    columns = _event_columns(connection.vendor)
    statement, params = _read(connection, client_id, after, limit, through, columns)
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        rows = cursor.fetchall()
    return _events(rows, {} if shared is None else shared)


# Reads per statement of ``queue_events_after_many`` (SQLite allows 500
# members in a compound SELECT).
READS_PER_STATEMENT = 200


def queue_events_after_many(
    reads: list[tuple[uuid.UUID, int, int, int | None]],
    shared: dict[tuple[Any, ...], dict[str, Any]] | None = None,
) -> list[list[dict[str, Any]]]:
    """``queue_events_after`` for many ``(client_id, after, limit, through)``
    at once: one statement per ``READS_PER_STATEMENT`` reads (each read its
    own member of a UNION ALL, with its own bounds and LIMIT on the queue's
    index; on PostgreSQL a LATERAL subquery per element of the bounds'
    arrays, ``_lateral_sql``), the events in the order of ``reads``.

    A delivery round asks this once for all its sockets: its statements
    are constant in the number of sockets up to ``READS_PER_STATEMENT``,
    where a statement per socket would be a round trip per socket on
    PostgreSQL.
    """
    return [events for events, _ in queue_reads_after_many(reads, shared)]


def queue_reads_after_many(
    reads: list[tuple[uuid.UUID, int, int, int | None]],
    shared: dict[tuple[Any, ...], dict[str, Any]] | None = None,
) -> list[tuple[list[dict[str, Any]], bool]]:
    """``queue_events_after_many``, each read's events with whether any of
    them may conflate (``QueueEntry.conflates``): only those reads need
    their rows marked delivered (``sockets.delivery_rounds``)."""
    if shared is None:
        shared = {}
    results: list[tuple[list[dict[str, Any]], bool]] = []
    for chunk in sql.chunks(reads, READS_PER_STATEMENT):
        results.extend(_read_chunk(list(chunk), shared))
    return results


def _read_chunk(
    reads: list[tuple[uuid.UUID, int, int, int | None]],
    shared: dict[tuple[Any, ...], dict[str, Any]],
) -> list[tuple[list[dict[str, Any]], bool]]:
    connection = connections[NODE_STORE]
    queue_ids = [sql.uuid_param(r[0], connection) for r in reads]
    if connection.vendor == "postgresql":
        statement = _lateral_sql()
        params: list[Any] = [
            sql.array_param(column)
            for column in (
                queue_ids,
                [after for _, after, _, _ in reads],
                [_NO_BOUND if through is None else through for *_, through in reads],
                [limit for _, _, limit, _ in reads],
            )
        ]
    else:
        members: list[str] = []
        params = []
        for i, ((_, after, limit, through), queue_id) in enumerate(
            zip(reads, queue_ids, strict=True)
        ):
            members.append(_member_sql(through is not None, i))
            params += _read_params(connection.vendor, queue_id, after, limit, through)
        statement = " UNION ALL ".join(members)
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        rows = cursor.fetchall()
    found: list[list[tuple[Any, ...]]] = [[] for _ in reads]
    for row in rows:
        found[row[0]].append(row[1:])
    return [
        (_events(sorted(got, key=lambda r: r[1]), shared), any(r[8] for r in got))
        for got in found
    ]


# The upper bound of an unbounded read in the PostgreSQL statement (bigint).
_NO_BOUND = 2**63 - 1


@functools.cache
def _lateral_sql() -> str:
    """PostgreSQL's form of a chunk of reads: one statement of the same text
    whatever the number of reads, the reads' bounds as arrays, each read a
    LATERAL subquery (``_pg_read``) on the queue's index. A UNION ALL of
    one member per read changes text with every count of reads, so
    PostgreSQL would parse and plan it afresh every round, at a cost
    growing with its members."""
    read = _pg_read("r.queue_id", "r.after", "r.upto", "r.lim")
    return (
        "SELECT r.i - 1 AS i, q.* FROM unnest("  # noqa: S608
        "%s::uuid[], %s::bigint[], %s::bigint[], %s::integer[]"
        ") WITH ORDINALITY AS r(queue_id, after, upto, lim, i)"
        f" CROSS JOIN LATERAL ({read.format(columns=_event_columns('postgresql'))}) q"
    )


@functools.cache
def _member_sql(bounded: bool, i: int) -> str:
    """One read of a compound statement (SQLite): its rows tagged with its
    index."""
    columns = f"{i} AS i, {_event_columns('sqlite')}"
    return f"SELECT * FROM ({_read_sql(bounded).format(columns=columns)}) q{i}"  # noqa: S608


def _events(
    rows: list[tuple[Any, ...]], shared: dict[tuple[Any, ...], dict[str, Any]]
) -> list[dict[str, Any]]:
    events = []
    for row in rows:
        # One event reaches different clients with different ``cq`` lists:
        # only those with the same list share its dict (and its frame).
        event = shared.get((row[0], row[1], row[9]))
        if event is None:
            event_id, seq, region, key, op, value, version, ts, _, cq = row
            event = shared[event_id, seq, cq] = _event_dict(
                seq,
                [event_id, region, key, op, value, version, ts_text(ts)],
                cq,
            )
        events.append(event)
    return events


def _event_dict(seq: int, fields: list[Any], cq: str | None) -> dict[str, Any]:
    """The dict a socket builds an event frame from (``protocol.event_frame``):
    ``fields`` as ``push_fields`` lists them, the timestamp as text."""
    event_id, region, key, op, value_json, version, ts = fields
    return {
        "id": event_id,
        "seq": seq,
        "region": region,
        "key": key,
        "op": op,
        "value_json": "null" if value_json is None else value_json,
        "version": version,
        "ts": ts,
        "cq_json": cq,
    }


def push_fields(event: Any) -> list[Any]:
    """A logged event's frame fields as a push message carries them
    (``queues.notify.ring_many``): what a queue row of it reads as, for
    ``pushed_event`` to make the dict ``_events`` makes of the row."""
    return [
        event.event_id,
        event.region,
        event.key,
        event.op,
        event.value_json,
        event.version,
        ts_text(event.ts),
    ]


def pushed_event(seq: int, fields: list[Any]) -> dict[str, Any]:
    """The event dict of a pushed event (``push_fields``): a plain row's,
    without a ``cq`` list."""
    return _event_dict(seq, fields, None)


def queue_sizes() -> dict[uuid.UUID, int]:
    return dict(QueueState.objects.values_list("client_id", "size"))


def queue_client_ids() -> list[uuid.UUID]:
    """The clients whose queue this node hosts (one statement: the fan-out
    reads it once per pass)."""
    connection = connections[NODE_STORE]
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT client_id FROM {sql.table(QueueState, connection)}")  # noqa: S608
        rows = cursor.fetchall()
    return [sql.uuid_read(pk) for (pk,) in rows]


def queue_created_at() -> dict[uuid.UUID, Any]:
    """When each queue on this node was created: a queue dropped and created
    again is told from the one before (``queues.services.queue_drop_orphans``)."""
    return dict(QueueState.objects.values_list("client_id", "created_at"))


def fanout_cursor(*, node: str) -> int:
    """How far this node's fan-out has read the cluster event log."""
    found = FanoutCursor.objects.filter(node=node).values_list(
        "fanout_through", flat=True
    )
    return found[0] if found else 0


def entry_to_event(held: HeldEntry) -> dict[str, Any]:
    """Return the public event object of a queued entry (without session fields)."""
    entry, event = held
    fields = event_to_dict(event)
    return {
        "id": fields.pop("id"),
        "seq": entry.seq,
        **fields,
        **({} if entry.cq is None else {"cq": entry.cq}),
    }


def entry_to_copy(held: HeldEntry) -> dict[str, Any]:
    """One queued entry as plain JSON, for copying it to another host."""
    entry, event = held
    return {
        "seq": entry.seq,
        "event_id": event.event_id,
        "region": event.region,
        "key": event.key,
        "op": event.op,
        "value": event.value,
        "version": event.version,
        "ts": event.ts.isoformat(),
        "conflates": entry.conflates,
        # Only when the row names a CQ (``_entry_from_copy`` reads it so).
        **({} if entry.cq is None else {"cq": entry.cq}),
    }


def queue_copy_page(
    *, client_id: uuid.UUID, after: int, upto: int, limit: int
) -> dict[str, Any] | None:
    """One page of a complete queue for a new copy: entries in (after, upto].

    None when this node holds no complete copy (the caller picks another
    source). ``done`` says the page reaches ``upto``.
    """
    state = QueueState.objects.filter(pk=client_id, is_synced=True).first()
    if state is None:
        return None
    rows = queue_entries_after(
        client_id=client_id, after=after, through=upto, limit=limit
    )
    done = len(rows) < limit
    return {
        "durable_id": state.durable_id,
        "conflate": state.conflate,
        "acked_through": state.acked_through,
        "entries": [entry_to_copy(row) for row in rows],
        "next_after": upto if done else rows[-1].seq,
        "done": done,
    }


def queue_copies_stalled(*, before: Any) -> list[QueueState]:
    """Copies still being filled whose last page came before ``before``."""
    return list(
        QueueState.objects.filter(is_synced=False, copy_requested_at__lt=before)
    )


def queue_states() -> list[QueueState]:
    return list(QueueState.objects.all())


def queue_size_and_acked() -> dict[uuid.UUID, tuple[int, int]]:
    """``{client_id: (size, acked_through)}`` of every queue hosted here,
    in one statement (no model instances: the tick reads it for every
    hosted queue)."""
    return {
        client_id: (size, acked)
        for client_id, size, acked in QueueState.objects.values_list(
            "client_id", "size", "acked_through"
        )
    }


def queue_acked_through() -> dict[uuid.UUID, int]:
    return dict(QueueState.objects.values_list("client_id", "acked_through"))
