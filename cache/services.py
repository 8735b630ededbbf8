"""Every write to regions and entries; each one appends to the event log.

Lock order everywhere: the EventLog row first, then entry rows. The first
lock serialises writers, which makes event seq order equal commit order and
per-key versions strictly increasing (docs/protocol.md#ordering).
"""

import uuid
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, cast

from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction
from django.utils import timezone

from cache import hooks
from cache.exceptions import NoSuchRegionError, RegionExistsError
from cache.models import Entry, Event, EventLog, Node, Op, Region
from cache.validation import json_text, validate_json_value, validate_key, validate_name
from common import sql
from common.errors import DomainError, NotFoundError, ValidationError

MAX_PUTALL = 10000


def _lock_log(reserve: int, cursor: Any = None) -> int:
    """Lock the event log and reserve ``reserve`` seqs; return the seq
    before them.

    One statement (UPDATE ... RETURNING) both takes the row lock that
    serialises writers and hands out the seqs, instead of a locking read
    and a later write. Call inside a transaction, before any other lock.
    ``cursor``: the write's own, if it has one (see ``entries_put_many``).
    """
    if cursor is None:
        with connection.cursor() as cursor:
            return _lock_log(reserve, cursor)
    table = EventLog._meta.db_table
    for _ in range(2):
        cursor.execute(
            f"UPDATE {table} SET last_seq = last_seq + %s WHERE id = 1"  # noqa: S608
            " RETURNING last_seq",
            [reserve],
        )
        row = cursor.fetchone()
        if row is not None:
            return int(row[0]) - reserve
        EventLog.objects.get_or_create(pk=1)
    raise RuntimeError("the event log row cannot be created")


# The write path's statements are SQL, not querysets: building and
# compiling an ORM query cost ~0.7-1 ms of CPU per query on the benchmark
# machine, against ~0.05 ms for the statement itself, and a PUT is five
# of them (docs/performance.md, "The ORM on the hot paths").


def event_log_head_locked() -> int:
    """Lock the event log until the caller's transaction ends and return
    its head, reserving nothing (``_lock_log``): every write that reserved
    a seq has committed, and none commits another before the caller does.
    Unlike a write, the caller may hold other locks first, none of which a
    writer takes (``clients.services._end_interests``: client rows)."""
    return _lock_log(0)


def _insert_sql(model: Any, fields: list[Any]) -> str:
    return sql.insert_sql(model, fields, connection)


_EVENT_FIELDS = list(Event._meta.concrete_fields)


def _append_events(before: int, specs: list[dict[str, Any]]) -> list[Event]:
    """Give each spec its reserved seq (after ``before``) and an id, and
    insert them in one batch."""
    now = timezone.now()
    events = [
        Event(seq=before + i, event_id=uuid.uuid4().hex, ts=now, **spec)
        for i, spec in enumerate(specs, start=1)
    ]
    rows = sql.prepared_rows(events, _EVENT_FIELDS, connections[DEFAULT_DB_ALIAS])
    with connection.cursor() as cursor:
        cursor.executemany(_insert_sql(Event, _EVENT_FIELDS), rows)
    for event in events:
        event._state.adding = False
    hooks.events_written(before + len(specs))
    return events


def _region(name: str, cursor: Any = None) -> Region:
    if cursor is None:
        with connection.cursor() as cursor:
            return _region(name, cursor)
    cursor.execute(
        f"SELECT id, conflate_events FROM {sql.table(Region, cursor.db)}"  # noqa: S608
        " WHERE name = %s",
        [name],
    )
    row = cursor.fetchone()
    if row is None:
        raise NoSuchRegionError(f"region {name!r} does not exist")
    return Region.from_db(
        connection.alias, ["id", "name", "conflate_events"], [row[0], name, row[1]]
    )


def _table(model: Any) -> str:
    return sql.table(model, connection)


def _locked_entry(region: Region, key: str) -> Entry | None:
    """The entry row of ``key``, locked (inside the write transaction)."""
    lock = " FOR UPDATE" if connection.features.has_select_for_update else ""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT id, version, is_destroyed FROM {_table(Entry)}"  # noqa: S608
            f" WHERE region_id = %s AND {connection.ops.quote_name('key')} = %s{lock}",
            [region.pk, key],
        )
        row = cursor.fetchone()
    if row is None:
        return None
    entry = Entry.from_db(
        connection.alias,
        ["id", "region_id", "key", "version", "is_destroyed"],
        [row[0], region.pk, key, row[1], bool(row[2])],
    )
    entry.region = region
    return entry


# Keys per statement when many are looked up at once (SQLite's default
# limit on host parameters is 32766; PostgreSQL's 65535).
_KEYS_PER_LOOKUP = 2000


def _locked_versions(
    region: Region, keys: list[str], cursor: Any
) -> dict[str, tuple[int, int, bool]]:
    """``{key: (id, version, is_destroyed)}`` of the entry rows of ``keys``
    that exist, locked."""
    conn = cursor.db
    lock = " FOR UPDATE" if conn.features.has_select_for_update else ""
    quote = conn.ops.quote_name
    found: dict[str, tuple[int, int, bool]] = {}
    for chunk in sql.chunks(keys, _KEYS_PER_LOOKUP):
        marks = ", ".join(["%s"] * len(chunk))
        cursor.execute(
            f"SELECT id, {quote('key')}, version, is_destroyed"  # noqa: S608
            f" FROM {sql.table(Entry, conn)}"
            f" WHERE region_id = %s AND {quote('key')} IN ({marks}){lock}",
            [region.pk, *chunk],
        )
        for pk, key, version, is_destroyed in cursor.fetchall():
            found[key] = (pk, version, bool(is_destroyed))
    return found


_ENTRY_FIELDS = [f for f in Entry._meta.concrete_fields if not f.primary_key]


def _update_entry_sql() -> str:
    quote = connection.ops.quote_name
    sets = ", ".join(f"{quote(f.column)} = %s" for f in _ENTRY_FIELDS)
    return f"UPDATE {_table(Entry)} SET {sets} WHERE id = %s"  # noqa: S608


def _save_entry(entry: Entry) -> None:
    """Insert or update one entry row after ``_change``."""
    [values] = sql.prepared_rows([entry], _ENTRY_FIELDS, connections[DEFAULT_DB_ALIAS])
    with connection.cursor() as cursor:
        if entry.pk is None:
            cursor.execute(_insert_sql(Entry, _ENTRY_FIELDS) + " RETURNING id", values)
            entry.pk = cursor.fetchone()[0]
            entry._state.adding = False
        else:
            cursor.execute(_update_entry_sql(), [*values, entry.pk])


def region_create(*, name: str, conflate_events: bool = False) -> Region:
    """Create a region; a second create of the same name is a conflict."""
    validate_name(name, what="region name")
    if not isinstance(conflate_events, bool):
        raise ValidationError("conflate_events must be a boolean")
    with transaction.atomic():
        _lock_log(0)
        if Region.objects.filter(name=name).exists():
            raise RegionExistsError(f"region {name!r} already exists")
        return Region.objects.create(name=name, conflate_events=conflate_events)


def region_destroy(*, name: str) -> Event:
    """Delete a region and its entries; emit ``region_destroy``."""
    with transaction.atomic():
        before = _lock_log(1)
        region = _region(name)
        (event,) = _append_events(
            before, [{"region": name, "key": None, "op": Op.REGION_DESTROY}]
        )
        region.delete()
    return event


def region_clear(*, name: str) -> Event:
    """Destroy every entry of a region (versions are kept); emit one event."""
    with transaction.atomic():
        before = _lock_log(1)
        region = _region(name)
        Entry.objects.filter(region=region, is_destroyed=False).update(
            is_destroyed=True, value=None, updated_at=timezone.now()
        )
        (event,) = _append_events(
            before, [{"region": name, "key": None, "op": Op.REGION_CLEAR}]
        )
    return event


def _change(
    region: Region, entry: Entry | None, key: str, op: str, value: Any
) -> tuple[Entry, dict[str, Any]]:
    """Apply one change to an entry row (created when missing)."""
    now = timezone.now()
    if entry is None:
        entry = Entry(region=region, key=key, version=0)
    entry.version += 1
    entry.value = value
    entry.is_destroyed = op == Op.DESTROY
    entry.updated_at = now
    spec = {
        "region": region.name,
        "key": key,
        "op": op,
        "value": value,
        "version": entry.version,
        "conflate": region.conflate_events,
    }
    return entry, spec


class WrittenEvent(NamedTuple):
    """What a putall answers per key: the event it appended."""

    seq: int
    event_id: str
    key: str
    op: str
    version: int


# A putall's rows, in these columns (asserted against the models).
_PUTALL_ENTRY = ["region", "key", "value", "version", "is_destroyed", "updated_at"]
_PUTALL_EVENT = ["seq", "event_id", "region", "key", "op", "value", "version"]
assert [f.name for f in _ENTRY_FIELDS] == _PUTALL_ENTRY  # noqa: S101
assert [f.name for f in _EVENT_FIELDS] == [*_PUTALL_EVENT, "conflate", "ts"]  # noqa: S101


def entry_putall(*, region: str, entries: Mapping[str, Any]) -> list[WrittenEvent]:
    """Create or update many keys at once: all or nothing, one event per key.

    Rows are written as column values, each value's JSON text made once for
    its entry and its event: a model instance per entry and per event, and
    each field's adaptation (the JSON encoded twice, the timestamp made
    naive per row) were about half of a putall's CPU (docs/performance.md).
    """
    if not isinstance(entries, Mapping) or not entries:
        raise ValidationError("entries must be a non-empty object")
    if len(entries) > MAX_PUTALL:
        raise ValidationError(f"at most {MAX_PUTALL} entries per putall")
    texts = {}
    for key, value in entries.items():
        validate_key(key)
        texts[key] = json_text(value)
    conn = connections[DEFAULT_DB_ALIAS]
    with transaction.atomic(), conn.cursor() as cursor:
        before = _lock_log(len(entries), cursor)
        reg = _region(region, cursor)
        existing = _locked_versions(reg, list(entries), cursor)
        now = timezone.now()
        updated_at = Entry._meta.get_field("updated_at").get_db_prep_save(now, conn)
        ts = Event._meta.get_field("ts").get_db_prep_save(now, conn)
        name, conflate = reg.name, reg.conflate_events
        creates: list[list[Any]] = []
        updates: list[list[Any]] = []
        events: list[list[Any]] = []
        written: list[WrittenEvent] = []
        seq = before
        for key in sorted(entries):
            text = texts[key]
            old = existing.get(key)
            if old is None:
                op, version = Op.CREATE.value, 1
                creates.append([reg.pk, key, text, version, False, updated_at])
            else:
                pk, version, destroyed = old
                op = Op.CREATE.value if destroyed else Op.UPDATE.value
                version += 1
                updates.append([text, version, False, updated_at, pk])
            seq += 1
            event_id = uuid.uuid4().hex
            events.append([seq, event_id, name, key, op, text, version, conflate, ts])
            written.append(WrittenEvent(seq, event_id, key, op, version))
        _write_rows(cursor, creates, updates, events)
    return written


def _write_rows(
    cursor: Any,
    creates: list[list[Any]],
    updates: list[list[Any]],
    events: list[Any],
) -> None:
    """Insert the new entry rows, update the others, append the events (in
    the write's transaction, with its cursor), and say so to the hooks
    after commit."""
    conn = cursor.db
    sql.insert_rows(conn, Entry, _ENTRY_FIELDS, creates, cursor)
    if updates:
        cursor.executemany(_update_entry_values_sql(conn), updates)
    sql.insert_rows(conn, Event, _EVENT_FIELDS, events, cursor)
    hooks.events_written(events[-1][0])


# Puts per write round of the websocket's ``put`` frames (one transaction).
MAX_PUTS_PER_ROUND = 1000


def entries_put_many(
    *, puts: Sequence[tuple[str, str, Any]]
) -> list[WrittenEvent | DomainError]:
    """Many single puts ``(region, key, value)`` in one transaction: each
    its own event, in the order given (a key put twice gets two events and
    two versions); a put refused for its key, value or region gets its
    error in its place and the others are written.

    What the websocket's ``put`` frames of one write round make
    (``sockets.put_rounds``): one transaction, one lock of the log and one
    statement per kind of row for the round, where a PUT each was a
    transaction of five statements.
    """
    if len(puts) > MAX_PUTS_PER_ROUND:
        raise ValidationError(f"at most {MAX_PUTS_PER_ROUND} puts per round")
    results: list[WrittenEvent | DomainError | None] = [None] * len(puts)
    texts: dict[int, str | None] = {}  # the JSON text; None for null
    for i, (_, key, value) in enumerate(puts):
        try:
            validate_key(key)
            texts[i] = json_text(value)
        except ValidationError as exc:
            results[i] = exc
    conn = connections[DEFAULT_DB_ALIAS]
    # One cursor for the round's statements, used without Django's
    # ``connection`` proxy: a cursor per statement (five for a lone put;
    # each a wrapper, the connection's checks and the proxy's thread-local
    # lookups) was ~25 us of its ~280 us of CPU (docs/performance.md).
    with transaction.atomic(), conn.cursor() as cursor:
        # The lock first, as every writer, and the seqs of every valid put
        # in the same statement; a put whose region is missing gives its
        # seq back below (no other writer can have reserved any since).
        before = _lock_log(len(texts), cursor)
        regions: dict[str, Region | None] = {}
        for name in sorted({puts[i][0] for i in texts}):
            try:
                regions[name] = _region(name, cursor)
            except NoSuchRegionError:
                regions[name] = None
        refused = 0
        for i in list(texts):
            if regions[puts[i][0]] is None:
                results[i] = NoSuchRegionError(f"region {puts[i][0]!r} does not exist")
                del texts[i]
                refused += 1
        if refused:
            _lock_log(-refused, cursor)
        if texts:
            _put_rows(cursor, puts, texts, regions, results, before)
    assert None not in results  # noqa: S101 (every put has its answer)
    return cast(list[WrittenEvent | DomainError], results)


def _put_rows(
    cursor: Any,
    puts: Sequence[tuple[str, str, Any]],
    texts: dict[int, str | None],
    regions: Mapping[str, Region | None],
    results: list[WrittenEvent | DomainError | None],
    before: int,
) -> None:
    """``entries_put_many``'s writes: the events in order (their seqs
    reserved after ``before``), then each entry row once, as the last put
    of its key left it."""
    keys: dict[str, list[str]] = {}
    for i in texts:
        keys.setdefault(puts[i][0], []).append(puts[i][1])
    # (region, key) -> [entry pk or None, version, is_destroyed, text]
    rows: dict[tuple[str, str], list[Any]] = {}
    for name, names in keys.items():
        region = regions[name]
        assert region is not None  # noqa: S101
        found = _locked_versions(region, list(dict.fromkeys(names)), cursor)
        for key in names:
            old = found.get(key)
            rows.setdefault(
                (name, key), [None, 0, True, None] if old is None else [*old, None]
            )
    conn = cursor.db
    now = timezone.now()
    updated_at = Entry._meta.get_field("updated_at").get_db_prep_save(now, conn)
    ts = Event._meta.get_field("ts").get_db_prep_save(now, conn)
    events: list[list[Any]] = []
    seq = before
    for i in sorted(texts):
        name, key, _ = puts[i]
        region = regions[name]
        assert region is not None  # noqa: S101
        row = rows[name, key]
        op = Op.CREATE.value if row[2] else Op.UPDATE.value
        row[1], row[2], row[3] = row[1] + 1, False, texts[i]
        seq += 1
        event_id = uuid.uuid4().hex
        events.append(
            [seq, event_id, name, key, op, texts[i], row[1], region.conflate_events, ts]
        )
        results[i] = WrittenEvent(seq, event_id, key, op, row[1])
    creates, updates = [], []
    for (name, key), (pk, version, _, text) in rows.items():
        region = regions[name]
        assert region is not None  # noqa: S101
        if pk is None:
            creates.append([region.pk, key, text, version, False, updated_at])
        else:
            updates.append([text, version, False, updated_at, pk])
    _write_rows(cursor, creates, updates, events)


def _update_entry_values_sql(conn: Any) -> str:
    value = conn.ops.quote_name("value")
    return (
        f"UPDATE {sql.table(Entry, conn)} SET {value} = {sql.json_text_mark(conn)},"  # noqa: S608
        " version = %s, is_destroyed = %s, updated_at = %s WHERE id = %s"
    )


def entry_put(*, region: str, key: str, value: Any) -> tuple[Entry, Event]:
    """Create or update one key; return the entry and its event."""
    validate_key(key)
    validate_json_value(value)
    with transaction.atomic():
        before = _lock_log(1)
        reg = _region(region)
        old = _locked_entry(reg, key)
        op = Op.CREATE if old is None or old.is_destroyed else Op.UPDATE
        entry, spec = _change(reg, old, key, op, value)
        _save_entry(entry)
        (event,) = _append_events(before, [spec])
    return entry, event


def _existing_change(region: str, key: str, op: str) -> tuple[Entry, Event]:
    validate_key(key)
    with transaction.atomic():
        before = _lock_log(1)
        reg = _region(region)
        old = _locked_entry(reg, key)
        if old is None or old.is_destroyed:
            raise NotFoundError(f"no entry {key!r} in region {region!r}")
        entry, spec = _change(reg, old, key, op, None)
        _save_entry(entry)
        (event,) = _append_events(before, [spec])
    return entry, event


def entry_destroy(*, region: str, key: str) -> tuple[Entry, Event]:
    """Destroy one key (its version goes on if it is created again)."""
    return _existing_change(region, key, Op.DESTROY)


def entry_invalidate(*, region: str, key: str) -> tuple[Entry, Event]:
    """Set a key's value to null, keeping the key."""
    return _existing_change(region, key, Op.INVALIDATE)


def node_register(*, name: str, url: str) -> Node:
    """Record that ``name`` (re)started at ``url``; it is up from now."""
    now = timezone.now()
    node, _ = Node.objects.update_or_create(
        name=name,
        defaults={
            "url": url,
            "started_at": now,
            "last_heartbeat": now,
            "is_draining": False,
        },
    )
    return node


def node_heartbeat(*, name: str) -> None:
    Node.objects.filter(name=name).update(last_heartbeat=timezone.now())


def node_drain(*, name: str) -> None:
    """Mark a node as stopping: it is no longer offered to clients."""
    Node.objects.filter(name=name).update(is_draining=True)
