"""Writes of many keys in one transaction: a putall (all or nothing) and
a round of single puts (each answered on its own)."""

import contextlib
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, cast

from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.utils import timezone

from cache import hooks
from cache.exceptions import NoSuchRegionError
from cache.models import Entry, Event, Op, Region
from cache.services.entries import ENTRY_FIELDS
from cache.services.log import EVENT_FIELDS, lock_log
from cache.services.regions import region_by_name
from cache.validation import json_text, validate_key
from common import sql
from common.errors import DomainError, ValidationError

MAX_PUTALL = 10000


class WrittenEvent(NamedTuple):
    """What a putall answers per key: the event it appended."""

    seq: int
    event_id: str
    key: str
    op: str
    version: int


# A putall's rows, in these columns (asserted against the models).
_PUTALL_ENTRY = [
    "region",
    "key",
    "value",
    "version",
    "is_destroyed",
    "updated_at",
    "seq",
]
_PUTALL_EVENT = ["seq", "event_id", "region", "key", "op", "value", "version"]
assert [f.name for f in ENTRY_FIELDS] == _PUTALL_ENTRY  # noqa: S101
assert [f.name for f in EVENT_FIELDS] == [  # noqa: S101
    *_PUTALL_EVENT,
    "conflate",
    "ts",
    "prior_value",
]


# Keys per statement when many are looked up at once (SQLite's default
# limit on host parameters is 32766; PostgreSQL's 65535).
_KEYS_PER_LOOKUP = 2000


def _locked_versions(
    region: Region, keys: list[str], cursor: Any
) -> dict[str, tuple[int, int, bool, str | None]]:
    """``{key: (id, version, is_destroyed, value)}`` of the entry rows of
    ``keys`` that exist, locked; the value as its JSON text (None: null),
    which the events keep as their ``prior_value``."""
    conn = cursor.db
    lock = sql.for_update(conn)
    quote = conn.ops.quote_name
    found: dict[str, tuple[int, int, bool, str | None]] = {}
    for chunk in sql.chunks(keys, _KEYS_PER_LOOKUP):
        marks = ", ".join(["%s"] * len(chunk))
        cursor.execute(
            f"SELECT id, {quote('key')}, version, is_destroyed,"  # noqa: S608
            f" {quote('value')}"
            f" FROM {sql.table(Entry, conn)}"
            f" WHERE region_id = %s AND {quote('key')} IN ({marks}){lock}",
            [region.pk, *chunk],
        )
        for pk, key, version, is_destroyed, value in cursor.fetchall():
            found[key] = (pk, version, bool(is_destroyed), value)
    return found


def entry_putall(*, region: str, entries: Mapping[str, Any]) -> list[WrittenEvent]:
    """Create or update many keys at once: all or nothing, one event per key.

    Rows are written as column values, each value's JSON text made once for
    its entry and its event, without a model instance per row or each
    field's adaptation per row (the JSON encoded twice, the timestamp made
    naive each time): docs/decisions/0010-hot-statements-in-sql.md.
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
        before = lock_log(len(entries), cursor)
        reg = region_by_name(region, cursor)
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
            prior = None
            seq += 1
            if old is None:
                op, version = Op.CREATE.value, reg.pruned_version + 1
                creates.append([reg.pk, key, text, version, False, updated_at, seq])
            else:
                pk, version, destroyed, stored = old
                prior = None if destroyed else stored
                op = Op.CREATE.value if destroyed else Op.UPDATE.value
                version += 1
                updates.append([text, version, False, updated_at, seq, pk])
            event_id = uuid.uuid4().hex
            events.append(
                [seq, event_id, name, key, op, text, version, conflate, ts, prior]
            )
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
    sql.insert_rows(conn, Entry, ENTRY_FIELDS, creates, cursor)
    if updates:
        cursor.executemany(_update_entry_values_sql(conn), updates)
    sql.insert_rows(conn, Event, EVENT_FIELDS, events, cursor)
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

    What a write round makes: the websocket's ``put`` frames of one round
    (``sockets.put_rounds``) and the REST PUTs that arrive together
    (``cache.group_commit``). One transaction, one lock of the log and one
    statement per kind of row for the round, not a transaction per put
    (docs/decisions/0011-group-commit.md).
    """
    if len(puts) > MAX_PUTS_PER_ROUND:
        raise ValidationError(f"at most {MAX_PUTS_PER_ROUND} puts per round")
    results: list[WrittenEvent | DomainError | None] = [None] * len(puts)
    texts = _valid_texts(puts, results)
    conn = connections[DEFAULT_DB_ALIAS]
    # One cursor for the round's statements, used without Django's
    # ``connection`` proxy: a cursor per statement costs a wrapper, the
    # connection's checks and the proxy's thread-local lookups each time.
    with transaction.atomic(), conn.cursor() as cursor:
        # The lock first, as every writer, and the seqs of every valid put
        # in the same statement; a put whose region is missing gives its
        # seq back below (no other writer can have reserved any since).
        before = lock_log(len(texts), cursor)
        regions, refused = _regions_of(cursor, puts, texts, results)
        if refused:
            lock_log(-refused, cursor)
        if texts:
            _put_rows(cursor, puts, texts, regions, results, before)
    assert None not in results  # noqa: S101 (every put has its answer)
    return cast(list[WrittenEvent | DomainError], results)


def _valid_texts(
    puts: Sequence[tuple[str, str, Any]],
    results: list[WrittenEvent | DomainError | None],
) -> dict[int, str | None]:
    """The JSON text (None for null) of each put whose key and value are
    valid, by index; each other put gets its error in ``results``."""
    texts: dict[int, str | None] = {}
    for i, (_, key, value) in enumerate(puts):
        try:
            validate_key(key)
            texts[i] = json_text(value)
        except ValidationError as exc:
            results[i] = exc
    return texts


def _regions_of(
    cursor: Any,
    puts: Sequence[tuple[str, str, Any]],
    texts: dict[int, str | None],
    results: list[WrittenEvent | DomainError | None],
) -> tuple[dict[str, Region], int]:
    """The regions of the puts in ``texts``, by name; a put whose region is
    missing leaves ``texts`` with its error in ``results``. Return the
    regions and how many puts were refused."""
    regions: dict[str, Region] = {}
    for name in sorted({puts[i][0] for i in texts}):
        with contextlib.suppress(NoSuchRegionError):  # refused below
            regions[name] = region_by_name(name, cursor)
    refused = 0
    for i in list(texts):
        if puts[i][0] not in regions:
            results[i] = NoSuchRegionError(f"region {puts[i][0]!r} does not exist")
            del texts[i]
            refused += 1
    return regions, refused


def _put_rows(
    cursor: Any,
    puts: Sequence[tuple[str, str, Any]],
    texts: dict[int, str | None],
    regions: Mapping[str, Region],
    results: list[WrittenEvent | DomainError | None],
    before: int,
) -> None:
    """``entries_put_many``'s writes: the events in order (their seqs
    reserved after ``before``), then each entry row once, as the last put
    of its key left it (its seq that put's)."""
    rows = _entry_rows(cursor, puts, texts, regions)
    conn = cursor.db
    now = timezone.now()
    updated_at = Entry._meta.get_field("updated_at").get_db_prep_save(now, conn)
    ts = Event._meta.get_field("ts").get_db_prep_save(now, conn)
    events: list[list[Any]] = []
    seq = before
    for i in sorted(texts):
        name, key, _ = puts[i]
        row = rows[name, key]
        op = Op.CREATE.value if row[2] else Op.UPDATE.value
        # The value before this put: the row's, or an earlier put's of the
        # same key in this round.
        prior = None if row[2] else row[3]
        seq += 1
        row[1], row[2], row[3], row[4] = row[1] + 1, False, texts[i], seq
        event_id = uuid.uuid4().hex
        conflate = regions[name].conflate_events
        events.append(
            [seq, event_id, name, key, op, texts[i], row[1], conflate, ts, prior]
        )
        results[i] = WrittenEvent(seq, event_id, key, op, row[1])
    creates, updates = [], []
    for (name, key), (pk, version, _, text, last) in rows.items():
        if pk is None:
            creates.append(
                [regions[name].pk, key, text, version, False, updated_at, last]
            )
        else:
            updates.append([text, version, False, updated_at, last, pk])
    _write_rows(cursor, creates, updates, events)


def _entry_rows(
    cursor: Any,
    puts: Sequence[tuple[str, str, Any]],
    texts: dict[int, str | None],
    regions: Mapping[str, Region],
) -> dict[tuple[str, str], list[Any]]:
    """``{(region, key): [entry pk or None, version, is_destroyed, text,
    seq]}`` of every key put, as its row stands, locked (a key without a
    row: a destroyed one at its region's ``pruned_version``); ``text`` is
    the stored value's JSON text and ``seq`` None until a put replaces
    them."""
    keys: dict[str, list[str]] = {}
    for i in texts:
        keys.setdefault(puts[i][0], []).append(puts[i][1])
    rows: dict[tuple[str, str], list[Any]] = {}
    for name, names in keys.items():
        found = _locked_versions(regions[name], list(dict.fromkeys(names)), cursor)
        for key in names:
            old = found.get(key)
            floor = regions[name].pruned_version
            row: list[Any] = (
                [None, floor, True, None, None] if old is None else [*old, None]
            )
            rows.setdefault((name, key), row)
    return rows


def _update_entry_values_sql(conn: Any) -> str:
    value = conn.ops.quote_name("value")
    return (
        f"UPDATE {sql.table(Entry, conn)} SET {value} = {sql.json_text_mark(conn)},"  # noqa: S608
        " version = %s, is_destroyed = %s, updated_at = %s, seq = %s WHERE id = %s"
    )
