"""Single-key writes: put, destroy, invalidate, each its own transaction
and its own event."""

import json
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction
from django.utils import timezone

from cache.models import Entry, Event, Op, Region
from cache.services.log import append_events, insert_sql, lock_log
from cache.services.regions import region_by_name
from cache.validation import validate_json_value, validate_key
from common import sql
from common.errors import NotFoundError

ENTRY_FIELDS = [f for f in Entry._meta.concrete_fields if not f.primary_key]


def _table(model: Any) -> str:
    return sql.table(model, connection)


def _locked_entry(region: Region, key: str) -> Entry | None:
    """The entry row of ``key``, locked (inside the write transaction)."""
    lock = sql.for_update(connection)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT id, version, is_destroyed, {connection.ops.quote_name('value')}"  # noqa: S608
            f" FROM {_table(Entry)}"
            f" WHERE region_id = %s AND {connection.ops.quote_name('key')} = %s{lock}",
            [region.pk, key],
        )
        row = cursor.fetchone()
    if row is None:
        return None
    # The stored value (its JSON text) becomes the event's prior value.
    value = None if row[2] or row[3] is None else json.loads(row[3])
    entry = Entry.from_db(
        connection.alias,
        ["id", "region_id", "key", "value", "version", "is_destroyed"],
        [row[0], region.pk, key, value, row[1], bool(row[2])],
    )
    entry.region = region
    return entry


def _update_entry_sql() -> str:
    quote = connection.ops.quote_name
    sets = ", ".join(f"{quote(f.column)} = %s" for f in ENTRY_FIELDS)
    return f"UPDATE {_table(Entry)} SET {sets} WHERE id = %s"  # noqa: S608


def _save_entry(entry: Entry) -> None:
    """Insert or update one entry row after ``_change``."""
    [values] = sql.prepared_rows([entry], ENTRY_FIELDS, connections[DEFAULT_DB_ALIAS])
    with connection.cursor() as cursor:
        if entry.pk is None:
            cursor.execute(insert_sql(Entry, ENTRY_FIELDS) + " RETURNING id", values)
            entry.pk = cursor.fetchone()[0]
            entry._state.adding = False
        else:
            cursor.execute(_update_entry_sql(), [*values, entry.pk])


def _change(
    region: Region, entry: Entry | None, key: str, op: str, value: Any, seq: int
) -> tuple[Entry, dict[str, Any]]:
    """Apply one change, the event ``seq``, to an entry row (created when
    missing, above the region's pruned tombstones' versions)."""
    now = timezone.now()
    if entry is None:
        entry = Entry(region=region, key=key, version=region.pruned_version)
    prior = None if entry.is_destroyed else entry.value
    entry.version += 1
    entry.value = value
    entry.is_destroyed = op == Op.DESTROY
    entry.updated_at = now
    entry.seq = seq
    spec = {
        "region": region.name,
        "key": key,
        "op": op,
        "value": value,
        "version": entry.version,
        "conflate": region.conflate_events,
        "prior_value": prior,
    }
    return entry, spec


def entry_put(*, region: str, key: str, value: Any) -> tuple[Entry, Event]:
    """Create or update one key; return the entry and its event."""
    validate_key(key)
    validate_json_value(value)
    with transaction.atomic():
        before = lock_log(1)
        reg = region_by_name(region)
        old = _locked_entry(reg, key)
        op = Op.CREATE if old is None or old.is_destroyed else Op.UPDATE
        entry, spec = _change(reg, old, key, op, value, before + 1)
        _save_entry(entry)
        (event,) = append_events(before, [spec])
    return entry, event


def _existing_change(region: str, key: str, op: str) -> tuple[Entry, Event]:
    validate_key(key)
    with transaction.atomic():
        before = lock_log(1)
        reg = region_by_name(region)
        old = _locked_entry(reg, key)
        if old is None or old.is_destroyed:
            raise NotFoundError(f"no entry {key!r} in region {region!r}")
        entry, spec = _change(reg, old, key, op, None, before + 1)
        _save_entry(entry)
        (event,) = append_events(before, [spec])
    return entry, event


def entry_destroy(*, region: str, key: str) -> tuple[Entry, Event]:
    """Destroy one key (its version goes on if it is created again)."""
    return _existing_change(region, key, Op.DESTROY)


def entry_invalidate(*, region: str, key: str) -> tuple[Entry, Event]:
    """Set a key's value to null, keeping the key."""
    return _existing_change(region, key, Op.INVALIDATE)
