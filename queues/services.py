"""Write-side operations on the subscription queues of this node's store.

Delivery rules (seq, ack, replay, conflation): docs/protocol.md#delivery.
Every function here writes only the ``node`` database alias (and reads the
cluster's only for which regions conflate).
"""

import functools
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connections, transaction
from django.db.models import (
    BooleanField,
    Exists,
    ExpressionWrapper,
    F,
    OuterRef,
    Q,
    Value,
)
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from cache.selectors import LoggedEvent, region_names_conflating
from common import sql
from queues.models import FanoutCursor, QueueEntry, QueueState
from queues.routers import NODE_STORE


def _conflates(state: Any, event: Any) -> bool:
    if event.op != "update":
        return False
    if state.conflate == "true":
        return True
    if state.conflate == "false":
        return False
    return bool(event.conflate)


def queue_ensure(
    *, client_id: uuid.UUID, durable_id: str | None, conflate: str
) -> QueueState:
    """Create the client's queue on this node if missing; update its mode
    (and, with it, which of its queued updates may conflate)."""
    with transaction.atomic(using=NODE_STORE):
        state, created = QueueState.objects.select_for_update().get_or_create(
            client_id=client_id,
            defaults={"durable_id": durable_id, "conflate": conflate},
        )
        if not created and state.conflate != conflate:
            state.conflate = conflate
            state.save(update_fields=["conflate"])
            _classify_updates(client_id, conflate)
    return state


def _classify_updates(client_id: uuid.UUID, conflate: str) -> None:
    """Set ``conflates`` on every update queued for the client as its mode
    ``conflate`` has it (a mode changed by a ``hello``, here or, as the
    fan-out finds, on another host: an update queued before may conflate
    now, or no longer). Mode "server" follows each update's region, whose
    ``conflate_events`` never changes.

    Only while no socket of the client's is live (a ``hello`` is refused
    while one is, and its end forgot what it was sent): a row sent and not
    marked, because it could not conflate then, would be removable now."""
    names = region_names_conflating() if conflate == "server" else []
    conflates: Any = Value(conflate == "true")
    if names:  # (an IN of no names made Django skip the whole UPDATE)
        conflates = ExpressionWrapper(Q(region__in=names), output_field=BooleanField())
    QueueEntry.objects.filter(queue_id=client_id, op="update").update(
        conflates=conflates
    )


def queue_append_many(
    appends: dict[uuid.UUID, list[LoggedEvent]],
    *,
    modes: Mapping[uuid.UUID, str] | None = None,
    modes_now: Callable[[list[uuid.UUID]], Mapping[uuid.UUID, str]] | None = None,
) -> dict[uuid.UUID, int]:
    """Append events to queues on this node; return each queue's new head seq.

    Must run inside a transaction on the node store (the fan-out holds one
    with its cursor, so appends and cursor move together). Queues are locked
    in client id order so two appenders can never deadlock. Queues that do
    not exist on this node are skipped. A constant number of statements
    whatever the number of queues (plus one delete per conflated update):
    an event for 100 live sockets is 3 statements, not 300.

    ``modes``: each client's ``conflate`` as the caller read it from the
    cluster; a queue whose own mode differs takes its client's before
    anything is appended (``_align_modes``).
    """
    if not appends:
        return {}
    heads: dict[uuid.UUID, int] = {}
    rows: list[list[Any]] = []
    changed: list[Any] = []
    prepared = _PreparedEvents(connections[NODE_STORE])
    locked = _lock_heads(list(appends))
    if modes is not None and modes_now is not None:
        _align_modes(locked, modes, modes_now)
    for state in locked:
        added = _append(state, appends[state.client_id], prepared)
        heads[state.client_id] = state.last_seq
        if added is not None:
            rows.extend(added)
            changed.append(state)
    _insert_entries(rows)
    _save_heads(changed)
    return heads


def _align_modes(
    locked: list["_Head"],
    modes: Mapping[uuid.UUID, str],
    modes_now: Callable[[list[uuid.UUID]], Mapping[uuid.UUID, str]],
) -> None:
    """Give each locked queue its client's mode where the two differ, so
    every host of a queue conflates as the client asked, whatever reached
    it or did not: a ``hello`` that changed the mode on another node, a
    copy promoted without one, a copy page built before the change. A
    queue's mode is otherwise set only by ``hello`` here (``queue_ensure``)
    and by adoption, both from the same row.

    ``modes`` was read before the heads were locked, so it may predate a
    ``hello`` that has set this queue's mode since: the differing clients'
    rows are read again, now that the heads are locked (a ``hello``
    commits the row before it sets the queue's mode, under this lock), and
    only that read is applied. A row that is gone changes nothing."""
    differing = [
        s.client_id
        for s in locked
        if s.client_id in modes and modes[s.client_id] != s.conflate
    ]
    if not differing:
        return
    now = modes_now(differing)
    for state in locked:
        mode = now.get(state.client_id)
        if mode is not None and mode != state.conflate:
            QueueState.objects.filter(pk=state.client_id).update(conflate=mode)
            _classify_updates(state.client_id, mode)
            state.conflate = mode


# The fan-out's two hot statements, as executemany: Django's bulk_create and
# bulk_update spent more time compiling (per-value expressions, a CASE per
# row) than the database spent running them (py-spy, 100 live sockets).
_ENTRY_FIELDS = [f for f in QueueEntry._meta.concrete_fields if not f.primary_key]
# Rows are [queue, *LoggedEvent up to its version, ts, conflates].
_ROW_COLUMNS = [
    "queue",
    *LoggedEvent._fields[:5],
    "value",
    "version",
    "ts",
    "conflates",
]
assert [f.name for f in _ENTRY_FIELDS] == _ROW_COLUMNS  # noqa: S101


class _PreparedEvents:
    """Each logged event's column values in database form, computed once
    per batch: one event fans out to many queues, and building a QueueEntry
    per queue (model init, signals, per-field adaptation) was most of the
    worker's CPU with 100 live sockets (py-spy). The value is the log's JSON
    text as it is; only the timestamp is adapted, once per distinct one (a
    putall's events share theirs)."""

    def __init__(self, connection: Any) -> None:
        self.connection = connection
        self.done: dict[int, list[Any]] = {}
        self._ts_field = QueueEntry._meta.get_field("ts")
        self._ts: tuple[Any, Any] = (None, None)

    def __call__(self, event: LoggedEvent) -> list[Any]:
        values = self.done.get(event.seq)
        if values is None:
            raw, prepared = self._ts
            if event.ts is not raw:
                prepared = self._ts_field.get_db_prep_save(event.ts, self.connection)
                self._ts = (event.ts, prepared)
            values = [*event[:7], prepared]
            self.done[event.seq] = values
        return values


def _insert_entries(rows: list[list[Any]]) -> None:
    """Insert queue entries given as column values [queue, *event fields]."""
    sql.insert_rows(connections[NODE_STORE], QueueEntry, _ENTRY_FIELDS, rows)


@dataclass
class _Head:
    """What the fan-out needs of a locked QueueState row."""

    client_id: uuid.UUID
    conflate: str
    last_seq: int
    delivered_through: int
    size: int
    acked_through: int


def _lock_heads(client_ids: list[uuid.UUID]) -> list[_Head]:
    """Lock the queues' head rows, in client id order; plain rows (model
    instances for 100 queues per batch cost more than the statement)."""
    connection = connections[NODE_STORE]
    client_ids = sorted(client_ids)  # the same order in every chunk and SQL
    found: list[_Head] = []
    lock = " FOR UPDATE" if connection.features.has_select_for_update else ""
    with connection.cursor() as cursor:
        for chunk in sql.chunks(client_ids, 500):
            marks = ", ".join(["%s"] * len(chunk))
            cursor.execute(
                "SELECT client_id, conflate, last_seq, delivered_through, size,"  # noqa: S608
                " acked_through"
                f" FROM {_table(QueueState)} WHERE client_id IN ({marks})"
                f" ORDER BY client_id{lock}",
                [_state_pk(pk, connection) for pk in chunk],
            )
            found += [_Head(_as_uuid(row[0]), *row[1:]) for row in cursor.fetchall()]
    return found


def _as_uuid(value: Any) -> uuid.UUID:
    """A UUID column as read: SQLite gives its 32 hex digits."""
    return value if isinstance(value, uuid.UUID) else uuid.UUID(value)


_STATE_PK = QueueState._meta.get_field("client_id")
_HEAD_FIELDS = [QueueState._meta.get_field(f) for f in ("last_seq", "size")]
_MARK_FIELDS = [
    QueueState._meta.get_field(f)
    for f in ("acked_through", "delivered_through", "size")
]


def _save_heads(states: list[Any]) -> None:
    connection = connections[NODE_STORE]
    rows = [(s.last_seq, s.size, _state_pk(s.client_id, connection)) for s in states]
    sql.update_rows(connection, QueueState, _HEAD_FIELDS, [_STATE_PK], rows)


def _append(
    state: "_Head", events: Sequence[Any], prepared: "_PreparedEvents"
) -> list[list[Any]] | None:
    """The rows to append to one locked queue, conflating superseded
    undelivered updates; None when every event was appended already.

    Moves ``state.last_seq`` and ``state.size`` (the caller saves them). A
    queue entry's seq is its event's cluster-wide log seq: increasing in
    every queue (the fan-out appends in log order), with gaps, and the same
    on every host of a queue, so an ``ack up_to`` means the same rows
    wherever it is applied. Events at or below the head were appended
    already (a replayed fan-out) and are skipped, and so are events at or
    below what the queue has acknowledged: on a secondary the primary's
    relayed ack may come before this node's fan-out has read the events it
    names, which the client must not be given again after a failover.
    """
    new: list[list[Any] | None] = []
    pending_update: dict[tuple[str, str | None], int] = {}
    deleted = 0
    queue = _state_pk(state.client_id, prepared.connection)
    done_through = max(state.last_seq, state.acked_through)
    for event in events:
        if event.seq <= done_through:
            continue
        state.last_seq = event.seq
        ident = (event.region, event.key)
        conflates = _conflates(state, event)
        if conflates:
            if ident in pending_update:
                new[pending_update[ident]] = None
            else:
                deleted += _drop_undelivered_update(state, queue, event)
            pending_update[ident] = len(new)
        new.append([queue, *prepared(event), conflates])
    if not new:
        return None
    rows = [row for row in new if row is not None]
    state.size += len(rows) - deleted
    return rows


_CONFLATES_INDEX = "queue_entry_conflates"
assert _CONFLATES_INDEX in {i.name for i in QueueEntry._meta.indexes}  # noqa: S101


def _drop_undelivered_update(state: "_Head", queue: Any, event: Any) -> int:
    """Conflation: delete the queued, undelivered update of the event's key.
    The condition on ``conflates`` is the partial index's, as its migration
    writes it: the index serves only a statement that states it. SQLite is
    told to use it: without statistics its planner took the (queue, seq)
    index instead, every undelivered row of the queue for each update (7.4
    ms per update in a queue of 100,000 against 2 µs; docs/performance.md)."""
    connection = connections[NODE_STORE]
    quote = connection.ops.quote_name
    indexed = f" INDEXED BY {_CONFLATES_INDEX}" if connection.vendor == "sqlite" else ""
    with connection.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {_table(QueueEntry)}{indexed} WHERE queue_id = %s"  # noqa: S608
            f" AND region = %s AND {quote('key')} = %s AND {quote('conflates')}"
            f" AND {quote('seq')} > %s",
            [queue, event.region, event.key, state.delivered_through],
        )
        return max(0, cursor.rowcount)


def queue_ack(*, client_id: uuid.UUID, up_to: int) -> int:
    """Drop every entry with seq <= up_to; return how many went."""
    return queue_ack_and_mark_many(acks=[(client_id, up_to)])[0]


def commit_unflushed(connection: Any) -> None:
    """Let this node-store transaction's commit return before PostgreSQL has
    flushed it to its WAL (``SET LOCAL synchronous_commit TO OFF``).

    Only for what the node can lose without losing an event, and only a
    crash of the PostgreSQL server loses it (a node's processes dying after
    the commit returned lose nothing): the last ~0.6 s of such commits,
    never a part of one. The fan-out's appends and the cursor that moves
    with them (the appends are made again from the event log, which keeps
    events at least ``EVENT_RETENTION``), the delivery rounds' acks and
    marks (an ack lost sends its events again, which clients drop by id).
    Every commit waiting for its flush had made a round cost the disk's
    flush time, and the delivery rounds and fan-outs of a node queue on
    them (docs/performance.md, "On PostgreSQL"). SQLite's WAL with
    ``synchronous=NORMAL`` does not flush per commit either.
    """
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL synchronous_commit TO OFF")


def queue_ack_and_mark_many(
    *,
    acks: list[tuple[uuid.UUID, int]],
    marking: Collection[uuid.UUID] = (),
    read: Callable[[], Mapping[uuid.UUID, int]] | None = None,
) -> list[int]:
    """Apply many sockets' acks and record what ``read`` reads delivered,
    in one transaction (one write lock of the node store instead of one per
    ack: the fan-out's appends wait for each); return the rows each ack
    dropped.

    ``read``, when given, reads the rows the sockets of the clients
    ``marking`` are about to be sent, inside the transaction and after
    their heads are locked, and returns each client's last seq read: those
    are marked delivered in the same commit. Conflation removes only
    updates after a queue's mark, and the fan-out locks the same heads (on
    SQLite, the same write lock), so no pass can remove a row between its
    read and its mark -- marking only after the send, a round later, let
    the next update's pass remove an update the socket had been sent and
    not acked. (Reads of rows that cannot conflate need no mark, and no
    lock: ``sockets.delivery_rounds`` makes them outside any transaction.)

    1. Lock every head row the round changes, in client id order, in one
       statement: the fan-out locks the heads of its batch in that order
       too (``_lock_heads``). Locking the acked rows first and the marked
       ones after took them out of order, and PostgreSQL found deadlocks
       with the fan-out under the live fan-out benchmark.
    2. Delete each ack's entries, counted per ack (the counts keep the
       heads' sizes exact): one statement on PostgreSQL, one per ack
       elsewhere.
    3. ``read``, and mark what it read.
    4. Write every changed head at once (``sql.update_rows``: one
       statement on PostgreSQL, where each mark was a statement of its
       own).
    In SQL, not querysets: the ORM's query building cost ~0.7 ms of CPU per
    query on the benchmark machine (docs/performance.md).
    """
    if not acks and read is None:
        return []
    connection = connections[NODE_STORE]
    with transaction.atomic(using=NODE_STORE), connection.cursor() as cursor:
        commit_unflushed(connection)
        heads = _lock_marks(cursor, connection, {pk for pk, _ in acks} | set(marking))
        changed: set[uuid.UUID] = set()
        ranges = _ack_ranges(acks, heads)
        dropped = _delete_acked(cursor, connection, ranges, len(acks))
        for i, client_id, _, up_to in ranges:
            head = heads[client_id]
            head[:] = [up_to, max(head[1], up_to), max(0, head[2] - dropped[i])]
            changed.add(client_id)
        marks = read() if read is not None else {}
        for client_id, through in marks.items():
            mark = heads.get(client_id)
            if mark is not None and through > mark[1]:
                mark[1] = through
                changed.add(client_id)
        sql.update_rows(
            connection,
            QueueState,
            _MARK_FIELDS,
            [_STATE_PK],
            [[*heads[pk], _state_pk(pk, connection)] for pk in sorted(changed)],
        )
    return dropped


def _ack_ranges(
    acks: list[tuple[uuid.UUID, int]], heads: dict[uuid.UUID, list[int]]
) -> list[tuple[int, uuid.UUID, int, int]]:
    """Each ack that drops something, as ``(index, client_id, after,
    up_to)``: its entries are those with ``after < seq <= up_to``, after the
    client's earlier acks in the round (a client's first from the queue's
    start: ``after`` -1, as one DELETE per ack had it). An ack at or below
    the head's acked-through or an earlier ack drops nothing, as does one
    of a queue not hosted here."""
    acked = {pk: head[0] for pk, head in heads.items()}
    after: dict[uuid.UUID, int] = {}
    ranges = []
    for i, (client_id, up_to) in enumerate(acks):
        if client_id in acked and up_to > acked[client_id]:
            ranges.append((i, client_id, after.get(client_id, -1), up_to))
            acked[client_id] = after[client_id] = up_to
    return ranges


def _delete_acked(
    cursor: Any,
    connection: Any,
    ranges: list[tuple[int, uuid.UUID, int, int]],
    count: int,
) -> list[int]:
    """Delete the entries of each range (``_ack_ranges``); return the rows
    dropped by each of the round's ``count`` acks.

    On PostgreSQL one statement for the round (a DELETE per ack was ~4000
    statements per 20 s live fan-out, each a round trip from Daphne's
    database thread while the heads stayed locked); elsewhere one per ack,
    in order, each from the head (the earlier ranges are gone already).
    """
    dropped = [0] * count
    if not ranges:
        return dropped
    delete_one, delete_many = _ack_sql(connection.vendor)[1:]
    if connection.vendor == "postgresql":
        columns = zip(*ranges, strict=True)
        indexes, client_ids, afters, up_tos = (list(c) for c in columns)
        cursor.execute(
            delete_many,
            [indexes, [_state_pk(pk, connection) for pk in client_ids], afters, up_tos],
        )
        for i, rows in cursor.fetchall():
            dropped[i] = rows
        return dropped
    for i, client_id, _, up_to in ranges:
        cursor.execute(delete_one, [_state_pk(client_id, connection), up_to])
        dropped[i] = max(0, cursor.rowcount)
    return dropped


@functools.cache
def _ack_sql(vendor: str) -> tuple[str, str, str]:
    """Lock heads (add the id list), delete one ack's entries, delete the
    ranges of many acks and count them per ack (PostgreSQL)."""
    connection = connections[NODE_STORE]
    quote = connection.ops.quote_name
    state_table, entry_table = _table(QueueState), _table(QueueEntry)
    seq, queue = quote("seq"), quote("queue_id")
    return (
        "SELECT client_id, acked_through, delivered_through, size"  # noqa: S608
        f" FROM {state_table} WHERE client_id IN ",
        f"DELETE FROM {entry_table} WHERE {queue} = %s"  # noqa: S608
        f" AND {seq} <= %s",
        f"WITH gone AS (DELETE FROM {entry_table} e"  # noqa: S608
        " USING unnest(%s::integer[], %s::uuid[], %s::bigint[], %s::bigint[])"
        " AS a(i, queue_id, after, up_to)"
        f" WHERE e.{queue} = a.queue_id AND e.{seq} > a.after"
        f" AND e.{seq} <= a.up_to RETURNING a.i) SELECT i, count(*) FROM gone"
        " GROUP BY i",
    )


def _lock_marks(
    cursor: Any, connection: Any, client_ids: set[uuid.UUID]
) -> dict[uuid.UUID, list[int]]:
    """Lock the head rows of ``client_ids`` in id order; return each one's
    ``[acked_through, delivered_through, size]``."""
    select = _ack_sql(connection.vendor)[0]
    lock = " FOR UPDATE" if connection.features.has_select_for_update else ""
    heads: dict[uuid.UUID, list[int]] = {}
    for chunk in sql.chunks(sorted(client_ids), 500):
        cursor.execute(
            f"{select}({', '.join(['%s'] * len(chunk))}) ORDER BY client_id{lock}",
            [_state_pk(pk, connection) for pk in chunk],
        )
        for pk, *head in cursor.fetchall():
            heads[_as_uuid(pk)] = head
    return heads


def _table(model: Any) -> str:
    return sql.table(model, connections[NODE_STORE])


def _state_pk(client_id: uuid.UUID, connection: Any) -> Any:
    pk = QueueState._meta.pk
    assert pk is not None  # noqa: S101
    return pk.get_db_prep_value(client_id, connection)


def _ack_locked(state: QueueState, up_to: int) -> int:
    if up_to <= state.acked_through:
        return 0
    deleted = QueueEntry.objects.filter(queue=state, seq__lte=up_to).delete()[0]
    state.acked_through = up_to
    state.delivered_through = max(state.delivered_through, up_to)
    state.size = max(0, state.size - deleted)
    state.save(update_fields=["acked_through", "delivered_through", "size"])
    return deleted


def queue_ack_many(acks: dict[uuid.UUID, int]) -> int:
    """Apply acknowledgements relayed from a primary; return rows dropped."""
    return sum(queue_ack_and_mark_many(acks=list(acks.items())))


def queue_adopt(
    *,
    client_id: uuid.UUID,
    durable_id: str | None,
    conflate: str,
    node: str,
    source: str,
) -> QueueState:
    """Start (or restart) filling a copy of a client's queue on this node.

    Under this node's fan-out cursor lock, a new copy takes the cursor as
    ``copy_upto``: its own fan-out appends every later event, and the
    source sends the entries through ``copy_upto``. A copy that is already
    complete is left as it is.
    """
    with transaction.atomic(using=NODE_STORE):
        cursor = cursor_lock(node)
        state = QueueState.objects.select_for_update().filter(pk=client_id).first()
        now = timezone.now()
        if state is None:
            state = QueueState.objects.create(
                client_id=client_id,
                durable_id=durable_id,
                conflate=conflate,
                last_seq=cursor.fanout_through,
                delivered_through=0,
                is_synced=False,
                copy_upto=cursor.fanout_through,
                copy_after=0,
                copy_source=source,
                copy_requested_at=now,
            )
        elif not state.is_synced:
            state.copy_source = source
            state.copy_requested_at = now
            state.save(update_fields=["copy_source", "copy_requested_at"])
    return state


def queue_copy_in(*, client_id: uuid.UUID, page: dict[str, Any]) -> bool | None:
    """Store one page of a copy; return whether the copy is now complete.

    None when this node has no copy in progress for the client (dropped
    meanwhile, or complete already: a page that arrives twice is harmless).
    Entries at or below what the copy has acknowledged are skipped, and so
    are entries already present, so pages may repeat or overlap.
    """
    with transaction.atomic(using=NODE_STORE):
        state = QueueState.objects.select_for_update().filter(pk=client_id).first()
        if state is None:
            return None
        if state.is_synced:
            return True
        _ack_locked(state, int(page["acked_through"]))
        wanted = [
            e
            for e in page["entries"]
            if state.acked_through < e["seq"] <= state.copy_upto
        ]
        if wanted:
            present = set(
                QueueEntry.objects.filter(
                    queue=state,
                    seq__gte=wanted[0]["seq"],
                    seq__lte=wanted[-1]["seq"],
                ).values_list("seq", flat=True)
            )
            rows = [
                _entry_from_copy(state, e) for e in wanted if e["seq"] not in present
            ]
            QueueEntry.objects.bulk_create(rows)
            state.size += len(rows)
        # The copy keeps its own mode (its client's, from adoption, a hello
        # or the fan-out): a page built before a change of mode says the
        # old one. The page's rows were classified in the page's mode.
        if wanted and page["conflate"] != state.conflate:
            _classify_updates(client_id, state.conflate)
        if wanted and state.conflate != "false":
            state.size -= _conflate_copied(state)
        state.durable_id = page["durable_id"]
        state.copy_after = max(state.copy_after, int(page["next_after"]))
        state.copy_requested_at = timezone.now()
        state.is_synced = bool(page["done"])
        state.save()
    return state.is_synced


def _conflate_copied(state: QueueState) -> int:
    """Conflate the copied rows that this copy's own fan-out has superseded;
    return how many went.

    The copy's fan-out appends the events after ``copy_upto`` while the
    source's pages, built earlier, bring the rows up to it: an update of a
    key the source conflated away when a later one came (the same later
    one this fan-out appended, with nothing of the key to conflate yet)
    arrived below it, and a client served by the source, given only the
    later one, would be replayed the older after a failover. As the
    fan-out would have conflated it (``_drop_undelivered_update``): an
    update that may conflate, not delivered by this copy's marks, with a
    later update of its key that may conflate too."""
    later = QueueEntry.objects.filter(
        queue=state,
        conflates=True,
        seq__gt=state.copy_upto,
        region=OuterRef("region"),
        key=OuterRef("key"),
    )
    superseded = QueueEntry.objects.filter(
        Exists(later),
        queue=state,
        conflates=True,
        seq__lte=state.copy_upto,
        seq__gt=state.delivered_through,
    )
    return int(superseded.delete()[0])


def _entry_from_copy(state: QueueState, data: dict[str, Any]) -> QueueEntry:
    ts = parse_datetime(data["ts"])
    if ts is None:
        raise ValueError(f"bad timestamp in a queue copy: {data['ts']!r}")
    return QueueEntry(
        queue=state,
        seq=data["seq"],
        event_id=data["event_id"],
        region=data["region"],
        key=data["key"],
        op=data["op"],
        value=data["value"],
        version=data["version"],
        ts=ts,
        # A page from a node older than the column: an update may conflate
        # unless the queue never does (in mode "server" its region decides,
        # which the page does not say; a mark too many is harmless). A page
        # of another mode is reclassified in the copy's (``queue_copy_in``).
        conflates=data.get(
            "conflates", data["op"] == "update" and state.conflate != "false"
        ),
    )


def queue_reset_delivery(*, client_ids: Sequence[uuid.UUID]) -> None:
    """Forget what the ended sessions were sent: unacked entries are
    undelivered (one statement for them all)."""
    QueueState.objects.filter(pk__in=client_ids).update(
        delivered_through=F("acked_through")
    )


def queue_drop(*, client_id: uuid.UUID) -> bool:
    """Delete a client's queue on this node; return whether it existed."""
    return _drop_locked(client_id)


def queue_drop_many(*, client_ids: Sequence[uuid.UUID]) -> int:
    """``queue_drop`` for many queues in one transaction (their heads locked
    in id order, as the fan-out locks them); return how many existed."""
    with transaction.atomic(using=NODE_STORE):
        return sum(_drop_locked(pk) for pk in sorted(client_ids))


def _drop_locked(client_id: uuid.UUID, created_at: Any = None) -> bool:
    """Delete one queue and its entries (only the queue row created at
    ``created_at``, when given).

    The head row is locked first, as the fan-out locks it to append: an
    append in flight commits before the entries are deleted (they go too),
    one that comes later finds no queue. Deleting the entries unlocked
    left an append committed in between referencing a deleted head, and
    the drop failed at commit (foreign key). In SQL: the ORM's delete
    collects related rows first, and a queue drop per ``close`` was a
    sixth of the database thread's time in a storm of 1000 closes
    (docs/performance.md).
    """
    connection = connections[NODE_STORE]
    pk = _state_pk(client_id, connection)
    state, entries = _table(QueueState), _table(QueueEntry)
    where, params = "client_id = %s", [pk]
    if created_at is not None:
        field = QueueState._meta.get_field("created_at")
        where += " AND created_at = %s"
        params.append(field.get_db_prep_value(created_at, connection))
    lock = " FOR UPDATE" if connection.features.has_select_for_update else ""
    with transaction.atomic(using=NODE_STORE), connection.cursor() as cursor:
        cursor.execute(
            f"SELECT client_id FROM {state} WHERE {where}{lock}",  # noqa: S608
            params,
        )
        if cursor.fetchone() is None:
            return False
        cursor.execute(f"DELETE FROM {entries} WHERE queue_id = %s", [pk])  # noqa: S608
        cursor.execute(f"DELETE FROM {state} WHERE client_id = %s", [pk])  # noqa: S608
    return True


def queue_drop_orphans(*, orphans: Mapping[uuid.UUID, Any]) -> int:
    """Delete the queues judged orphaned; return how many went.

    ``orphans`` maps each client id to the ``created_at`` of the queue row
    that was judged. Only that row is deleted: a queue created since (a
    ``hello`` that starts the client afresh here after the judgement) is
    another queue, and the next sweep judges it with its client's row.
    """
    return sum(_drop_locked(pk, created_at) for pk, created_at in orphans.items())


def cursor_lock(node: str) -> FanoutCursor:
    """Lock this node's fan-out cursor (call inside a node-store transaction)."""
    cursor, _ = FanoutCursor.objects.select_for_update().get_or_create(node=node)
    return cursor


# The fan-out's cursor statements run once per fan-out, i.e. about once per
# write under a light load: as querysets (get_or_create, save) they were a
# fifth of a fan-out of one event to 10 queues (cProfile).


def cursor_read_locked(node: str) -> int:
    """Lock this node's fan-out cursor and return how far it has read
    (call inside a node-store transaction; the cursor is created at 0 if
    it is missing, as ``cursor_lock`` does)."""
    connection = connections[NODE_STORE]
    lock = " FOR UPDATE" if connection.features.has_select_for_update else ""
    through = _cursor_position(connection, node, lock=lock)
    return cursor_lock(node).fanout_through if through is None else through


def cursor_flushed(node: str) -> int:
    """How far this node's fan-out has read the log, as it stands on disk.

    Fan-outs commit without waiting for the flush on PostgreSQL
    (``commit_unflushed``), so the cursor they leave may be ahead of what
    a crash of the server keeps. This writes the cursor back in a commit
    that does wait, which flushes the WAL through every commit before it:
    the value returned survives. (SQLite: its value as is.)
    """
    connection = connections[NODE_STORE]
    if connection.vendor != "postgresql":
        return _cursor_position(connection, node, lock="") or 0
    with transaction.atomic(using=NODE_STORE):
        through = _cursor_position(connection, node, lock=" FOR UPDATE") or 0
        cursor_move(node, through)  # nothing when there is no cursor yet
    return through


def _cursor_position(connection: Any, node: str, *, lock: str) -> int | None:
    """The cursor's position, None when the node has none yet (not made
    here: ``cursor_init`` places a new one, ``cursor_lock`` a missing one)."""
    with connection.cursor() as cursor:
        cursor.execute(_cursor_sql(connection.vendor, "read") + lock, [node])
        row = cursor.fetchone()
    return None if row is None else int(row[0])


def cursor_move(node: str, through: int) -> None:
    """Move this node's locked fan-out cursor to ``through``."""
    connection = connections[NODE_STORE]
    at = FanoutCursor._meta.get_field("updated_at").get_db_prep_save(
        timezone.now(), connection
    )
    with connection.cursor() as cursor:
        cursor.execute(_cursor_sql(connection.vendor, "move"), [through, at, node])


@functools.cache
def _cursor_sql(vendor: str, which: str) -> str:
    table = sql.table(FanoutCursor, connections[NODE_STORE])
    if which == "read":
        return f"SELECT fanout_through FROM {table} WHERE node = %s"  # noqa: S608
    return f"UPDATE {table} SET fanout_through = %s, updated_at = %s WHERE node = %s"  # noqa: S608


def cursor_init(*, node: str, head: int, oldest: int | None) -> int:
    """Place this node's fan-out cursor at start; return queues dropped.

    A new store gets its cursor at ``head``: it hosts no queue yet, so
    events before ``head`` concern no one here. So does a store that hosts
    no queue (a node that handed its queues over when it stopped): it was
    reading every event it missed, up to the log's retention, before its
    first useful fan-out. A store whose cursor fell
    behind the oldest event still in the log (``oldest``; or behind
    ``head`` when the log is empty) missed events that were pruned
    meanwhile, which the cluster allows only for a node
    that was down and hosted nothing: its queues are stale copies, so they
    are dropped and the cursor jumps to ``head`` (a copy placed here later
    starts from there).
    """
    with transaction.atomic(using=NODE_STORE):
        cursor, created = FanoutCursor.objects.select_for_update().get_or_create(
            node=node, defaults={"fanout_through": head}
        )
        if created:
            return 0
        if not QueueState.objects.exists():
            if cursor.fanout_through < head:
                cursor.fanout_through = head
                cursor.save(update_fields=["fanout_through", "updated_at"])
            return 0
        # Every event after the cursor is still in the log, or none was
        # written: an emptied log with the head past the cursor was pruned
        # past it, as much a gap as an oldest event beyond it.
        first_kept = head + 1 if oldest is None else oldest
        if cursor.fanout_through >= first_kept - 1:
            return 0
        dropped = QueueState.objects.count()
        QueueEntry.objects.all().delete()
        QueueState.objects.all().delete()
        cursor.fanout_through = head
        cursor.save(update_fields=["fanout_through", "updated_at"])
    return dropped


def node_store_vacuum() -> list[str]:
    """Vacuum the node store's queue tables once their dead rows pile up:
    every queued event is a row inserted, then deleted once acked, and
    every append or ack rewrites its queue's head (``sql.vacuum_bloated``;
    PostgreSQL only). The tables vacuumed."""
    return sql.vacuum_bloated(connections[NODE_STORE], [QueueEntry, QueueState])
