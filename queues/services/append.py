"""Appends to this node's queues, conflating on the way: what the fan-out
writes for each event it reads from the cluster's log.

Delivery rules (seq, ack, replay, conflation): docs/protocol.md#delivery.
"""

import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connections

from cache.selectors import LoggedEvent
from common import sql
from queues.models import QueuedEvent, QueueEntry, QueueState
from queues.routers import NODE_STORE
from queues.services.events import events_store
from queues.services.queues import classify_updates
from queues.services.store import STATE_PK, state_pk, table


def queue_append_many(
    appends: dict[uuid.UUID, list[LoggedEvent]],
    *,
    modes: Mapping[uuid.UUID, str] | None = None,
    modes_now: Callable[[list[uuid.UUID]], Mapping[uuid.UUID, str]] | None = None,
    cqs: Mapping[uuid.UUID, Mapping[int, "CqList"]] | None = None,
    limits: Mapping[uuid.UUID, int] | None = None,
    gapped: Collection[uuid.UUID] = (),
    overflows: list["Overflow"] | None = None,
    plain: dict[uuid.UUID, tuple[int, list[int]]] | None = None,
    plain_for: Collection[uuid.UUID] = (),
    read: Sequence[LoggedEvent] = (),
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

    ``cqs``: per client, per event seq, the ``cq`` list the fan-out judged
    for it (absent: no CQ of the client's is moved by the event).

    ``limits``: each client's ``max_queued``. An event that would make a
    queue hold more overflows it: the queue's rows are deleted, nothing
    of the batch is appended to it, and an ``Overflow`` is added to
    ``overflows`` for the caller to record as the client's gap.
    ``gapped``: clients whose gap stands; their queues here are emptied
    (once: a statement only while rows remain) and get nothing.

    ``plain``: filled, for each queue of ``plain_for`` whose appended rows
    are all plain (none may conflate, none has a ``cq`` list, no row was
    conflated away), with its head before the append and the appended
    seqs: its events after that head are exactly those (alone or in a
    span), which a socket that has sent through that head may be handed
    without reading them
    (``notify.ring_many``'s pushes).

    ``read``: every event the caller read from the log, in order (the
    fan-out's pass). A queue's plain events that are next to each other
    in it are appended as one row (a span, ``QueueEntry.through``): all
    the log's events in the span's range are then the queue's.
    """
    if not appends and not gapped:
        return {}
    heads: dict[uuid.UUID, int] = {}
    rows: list[list[Any]] = []
    changed: list[Any] = []
    prepared = _PreparedEvents(connections[NODE_STORE])
    position = {event.seq: i for i, event in enumerate(read)}
    locked = _lock_heads(list({*appends, *gapped}))
    if modes is not None and modes_now is not None:
        _align_modes(locked, modes, modes_now)
    for state in locked:
        if state.client_id in gapped:
            if state.size:
                _empty(state)
                changed.append(state)
            continue
        limit = (limits or {}).get(state.client_id)
        before = state.last_seq
        pushing = plain is not None and state.client_id in plain_for
        added = _append(
            state,
            appends[state.client_id],
            prepared,
            (cqs or {}).get(state.client_id),
            limit,
            position,
        )
        if isinstance(added, Overflow):
            if overflows is not None:
                overflows.append(added)
            changed.append(state)
            continue
        heads[state.client_id] = state.last_seq
        if added is not None:
            changed.append(state)
            appended, pushable = added
            if pushing and pushable is not None and plain is not None:
                plain[state.client_id] = (before, pushable)
            rows.extend(appended)
    _insert_entries(rows, prepared)
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
            classify_updates(state.client_id, mode)
            state.conflate = mode


# The fan-out's hot statements are SQL (sql.insert_rows and
# sql.update_rows), not bulk_create and bulk_update, whose per-value
# expressions and CASE per row cost more to compile than to run
# (docs/decisions/0010-hot-statements-in-sql.md).
_ENTRY_FIELDS = [f for f in QueueEntry._meta.concrete_fields if not f.primary_key]
# Queue rows are [queue, seq, region, key, op, conflates, cq, through].
_ROW_COLUMNS = ["queue", *LoggedEvent._fields[:1], *LoggedEvent._fields[2:5]]
_ROW_COLUMNS += ["conflates", "cq", "through"]
assert [f.name for f in _ENTRY_FIELDS] == _ROW_COLUMNS  # noqa: S101


class _PreparedEvents:
    """Each logged event's queue-row columns (seq, region, key, op) and its
    ``QueuedEvent`` row in database form, both computed once per batch:
    one event fans out to many queues, and a model instance per row
    (init, signals, per-field adaptation) costs more than its insert. The
    value is the log's JSON text as it is; only the timestamp is adapted,
    once per distinct one (a putall's events share theirs). An event
    prepared for a row that is not inserted after all (conflated away
    within the batch, or an overflowed queue's) is stored all the same,
    and pruned with the events no row names."""

    def __init__(self, connection: Any) -> None:
        self.connection = connection
        self.done: dict[int, list[Any]] = {}
        self.stored: list[list[Any]] = []
        self._ts_field = QueuedEvent._meta.get_field("ts")
        self._ts: tuple[Any, Any] = (None, None)

    def __call__(self, event: LoggedEvent) -> list[Any]:
        values = self.done.get(event.seq)
        if values is None:
            values = self.done[event.seq] = [event[0], *event[2:5]]
            raw, prepared = self._ts
            if event.ts is not raw:
                prepared = self._ts_field.get_db_prep_save(event.ts, self.connection)
                self._ts = (event.ts, prepared)
            self.stored.append([*event[:7], prepared])
        return values


def _insert_entries(rows: list[list[Any]], prepared: _PreparedEvents) -> None:
    """Insert queue rows given as column values [queue, seq, ...], after
    the events they name (new here: they are after the fan-out cursor)."""
    if not rows:
        return
    connection = connections[NODE_STORE]
    events_store(connection, prepared.stored, new=True)
    sql.insert_rows(connection, QueueEntry, _ENTRY_FIELDS, rows)


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
    lock = sql.for_update(connection)
    with connection.cursor() as cursor:
        for chunk in sql.chunks(client_ids, 500):
            ids = [state_pk(pk, connection) for pk in chunk]
            where, params = sql.in_list("client_id", ids, connection)
            cursor.execute(
                "SELECT client_id, conflate, last_seq, delivered_through, size,"  # noqa: S608
                " acked_through"
                f" FROM {table(QueueState)} WHERE {where}"
                f" ORDER BY client_id{lock}",
                params,
            )
            found += [
                _Head(sql.uuid_read(row[0]), *row[1:]) for row in cursor.fetchall()
            ]
    return found


_HEAD_FIELDS = [QueueState._meta.get_field(f) for f in ("last_seq", "size")]


def _save_heads(states: list[Any]) -> None:
    connection = connections[NODE_STORE]
    rows = [(s.last_seq, s.size, state_pk(s.client_id, connection)) for s in states]
    sql.update_rows(connection, QueueState, _HEAD_FIELDS, [STATE_PK], rows)


@dataclass(frozen=True, slots=True)
class Overflow:
    """A queue here overflowed: its events were deleted (``dropped`` of
    them, the oldest after ``since``) at the event ``seq`` that would
    have made it hold more than its limit."""

    client_id: uuid.UUID
    since: int
    dropped: int
    seq: int


def _empty(state: "_Head") -> int:
    """Delete every row of a locked queue; return its oldest seq, or 0
    when it held none. The head keeps its ``last_seq``."""
    connection = connections[NODE_STORE]
    queue = state_pk(state.client_id, connection)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT MIN(seq) FROM {table(QueueEntry)} WHERE queue_id = %s",  # noqa: S608
            [queue],
        )
        (oldest,) = cursor.fetchone()
        cursor.execute(
            f"DELETE FROM {table(QueueEntry)} WHERE queue_id = %s",  # noqa: S608
            [queue],
        )
    state.size = 0
    return oldest or 0


@dataclass(frozen=True, slots=True)
class CqList:
    """An event's ``cq`` list for one client: its JSON text, and whether
    every ``cq_op`` in it is ``update`` (only then may the row conflate:
    a client never loses an entered or left event to conflation)."""

    text: str
    only_updates: bool


def _append(
    state: "_Head",
    events: Sequence[Any],
    prepared: "_PreparedEvents",
    cqs: Mapping[int, CqList] | None = None,
    limit: int | None = None,
    position: Mapping[int, int] | None = None,
) -> tuple[list[list[Any]], list[int] | None] | Overflow | None:
    """The rows to append to one locked queue, conflating superseded
    undelivered updates, and the seqs of the events appended (alone or in
    a span) if they are all plain (none may conflate nor has a ``cq``
    list, and none was conflated away), else None; None
    when every event was appended already.

    ``position``: each event's place in the pass's read of the log. A
    plain event next to the last row's last event there, that row being
    plain too, joins it (a span: ``QueueEntry.through``); a plain event
    is one that may not conflate and names no CQ, which can never be
    removed from the queue alone, only acked.

    Moves ``state.last_seq`` and ``state.size`` (the caller saves them). A
    queue entry's seq is its event's cluster-wide log seq: increasing in
    every queue (the fan-out appends in log order), with gaps, and the same
    on every host of a queue, so an ``ack up_to`` means the same rows
    wherever it is applied. Events at or below the head were appended
    already (a replayed fan-out) and are skipped, and so are events at or
    below what the queue has acknowledged: on a secondary the primary's
    relayed ack may come before this node's fan-out has read the events it
    names, which the client must not be given again after a failover.

    An event that would make the queue hold more than ``limit`` events
    empties it instead (``_overflow``).
    """
    new: list[list[Any] | None] = []
    pending_update: dict[tuple[str, str | None], int] = {}
    deleted = 0
    queue = state_pk(state.client_id, prepared.connection)
    done_through = max(state.last_seq, state.acked_through)
    size = state.size
    position = position or {}
    at = -2  # where the last row's last event is in the read; -2: no span
    appended: list[int] = []
    for event in events:
        if event.seq <= done_through:
            continue
        state.last_seq = event.seq
        cq = None if cqs is None else cqs.get(event.seq)
        # A newer update removes an older removable one whatever its own
        # ``cq`` says; it is removable itself only if its ``cq_op``s are
        # all ``update``.
        supersedes = _conflates(state, event)
        if not supersedes and cq is None:
            if limit is not None and size + 1 > limit:
                return _overflow(state, new, events[-1].seq, event.seq, size)
            here = position.get(event.seq, -4)
            if here == at + 1:
                prepared(event)
                span = new[-1]
                assert span is not None  # noqa: S101 (a plain row is never dropped)
                span[4], span[7] = QueueEntry.SPAN, event.seq
            else:
                new.append([queue, *prepared(event), False, None, event.seq])
            at = here
            size += 1
            appended.append(event.seq)
            continue
        at = -2
        ident = (event.region, event.key)
        conflates = supersedes and (cq is None or cq.only_updates)
        if supersedes:
            if ident in pending_update:
                new[pending_update.pop(ident)] = None
                size -= 1
            else:
                dropped = _drop_undelivered_update(state, queue, event)
                deleted += dropped
                size -= dropped
            if conflates:
                pending_update[ident] = len(new)
        if limit is not None and size + 1 > limit:
            return _overflow(state, new, events[-1].seq, event.seq, size)
        new.append(
            [
                queue,
                *prepared(event),
                conflates,
                None if cq is None else cq.text,
                event.seq,
            ]
        )
        size += 1
        appended.append(event.seq)
    if not new:
        return None
    rows = [row for row in new if row is not None]
    state.size += len(appended) - (len(new) - len(rows)) - deleted
    plain = len(rows) == len(new) and not deleted
    if plain and not any(row[5] or row[6] is not None for row in rows):
        return rows, appended
    return rows, None


def _overflow(
    state: "_Head",
    new: list[list[Any] | None],
    last_seq: int,
    seq: int,
    size: int,
) -> Overflow:
    """The event ``seq`` would pass the queue's limit: the queue holds
    ``size`` events (its rows and this batch's ``new`` ones); delete its
    rows, append none of the batch (up to ``last_seq``, so a replayed
    pass skips it too)."""
    oldest = _empty(state)
    pending = [row[1] for row in new if row is not None]
    firsts = [s for s in (oldest, *pending[:1]) if s]
    state.last_seq = last_seq
    return Overflow(
        state.client_id, (min(firsts) - 1) if firsts else seq - 1, size, seq
    )


def _conflates(state: Any, event: Any) -> bool:
    """Whether ``event`` may conflate in this queue: only an update, and
    by the queue's mode (in mode "server", by its region's)."""
    if event.op != "update":
        return False
    if state.conflate == "true":
        return True
    if state.conflate == "false":
        return False
    return bool(event.conflate)


_CONFLATES_INDEX = "queue_entry_conflates"
assert _CONFLATES_INDEX in {i.name for i in QueueEntry._meta.indexes}  # noqa: S101


def _drop_undelivered_update(state: "_Head", queue: Any, event: Any) -> int:
    """Conflation: delete the queued, undelivered update of the event's key.
    The condition on ``conflates`` is the partial index's, as its migration
    writes it: the index serves only a statement that states it. SQLite is
    told to use it: without statistics its planner prefers the (queue,
    seq) index, which walks every undelivered row of the queue for each
    update."""
    connection = connections[NODE_STORE]
    quote = connection.ops.quote_name
    indexed = f" INDEXED BY {_CONFLATES_INDEX}" if connection.vendor == "sqlite" else ""
    with connection.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {table(QueueEntry)}{indexed} WHERE queue_id = %s"  # noqa: S608
            f" AND region = %s AND {quote('key')} = %s AND {quote('conflates')}"
            f" AND {quote('seq')} > %s",
            [queue, event.region, event.key, state.delivered_through],
        )
        deleted: int = cursor.rowcount
        return max(0, deleted)
