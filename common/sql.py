"""SQL text for the hot paths, from the models' metadata.

The hot paths run statements instead of querysets
(docs/decisions/0010-hot-statements-in-sql.md). These helpers quote names
the one way both the cache's and the node store's statements need.
"""

import functools
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any, TypeVar

from django.db import transaction

T = TypeVar("T")
# Parameters per IN (...) of a batched lookup: well under SQLite's limit on
# host parameters (32766) and PostgreSQL's (65535).
PARAMS_PER_LOOKUP = 1000


def chunks(items: Sequence[T], size: int = PARAMS_PER_LOOKUP) -> Iterator[Sequence[T]]:
    """``items`` in slices of at most ``size``, for IN (...) lookups."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


def array_param(values: Sequence[Any]) -> Any:
    """A PostgreSQL array parameter, cast in the statement (``%s::uuid[]``,
    ``= ANY(%s)``): ints or UUIDs as the array's text, which the driver
    quotes once, where a list has each element dumped and quoted in
    Python (a fifth of a fan-out pass for a hundred queues' ids);
    anything else as a list."""
    kinds = {type(value) for value in values}
    if kinds <= {int}:
        return "{" + ",".join(map(str, values)) + "}"
    if kinds <= {uuid.UUID}:
        return "{" + ",".join([value.hex for value in values]) + "}"
    return list(values)


def in_list(
    column: str, values: Sequence[Any], connection: Any
) -> tuple[str, list[Any]]:
    """``column IN values`` as SQL, and its parameters. On PostgreSQL one
    array parameter (``= ANY(%s)``): the text is then the same whatever
    the count, so psycopg parses it once per process (its cache takes only
    statements of few parameters; a text of a placeholder per value is
    split again on every call) and quotes one array, not every value."""
    if connection.vendor == "postgresql":
        return f"{column} = ANY(%s)", [array_param(values)]
    return f"{column} IN ({', '.join(['%s'] * len(values))})", list(values)


def values_by_pk(queryset: Any, pks: Sequence[Any], field: str) -> dict[Any, Any]:
    """``{pk: field}`` of the rows of ``queryset`` among ``pks``."""
    return {pk: value for pk, (value,) in rows_by_pk(queryset, pks, field).items()}


def rows_by_pk(
    queryset: Any, pks: Sequence[Any], *fields: str
) -> dict[Any, tuple[Any, ...]]:
    """``{pk: (field, ...)}`` of the rows of ``queryset`` among ``pks``."""
    found: dict[Any, tuple[Any, ...]] = {}
    for chunk in chunks(pks):
        for pk, *values in queryset.filter(pk__in=chunk).values_list("pk", *fields):
            found[pk] = tuple(values)
    return found


def uuid_param(value: uuid.UUID, connection: Any) -> Any:
    """A UUID as the driver takes it for a ``UUIDField`` column: the UUID
    itself where the database has a uuid type (PostgreSQL), its 32 hex
    digits elsewhere (SQLite). What ``UUIDField.get_db_prep_value`` gives
    for a UUID, without its per-call conversions: the fan-out and the
    delivery rounds name every hosted queue in every statement."""
    return value if connection.features.has_native_uuid_field else value.hex


def uuid_read(value: Any) -> uuid.UUID:
    """A ``UUIDField`` column as read: PostgreSQL gives a UUID, SQLite its
    hex digits, parsed once per process (``_parsed_uuid``): the same
    clients' ids come back in every pass."""
    return value if isinstance(value, uuid.UUID) else _parsed_uuid(value)


@functools.lru_cache(maxsize=1 << 16)
def _parsed_uuid(text: str) -> uuid.UUID:
    return uuid.UUID(text)


def table(model: Any, connection: Any) -> str:
    """The model's table name, quoted for ``connection``."""
    return str(connection.ops.quote_name(model._meta.db_table))


def for_update(connection: Any) -> str:
    """The clause that locks the rows a SELECT reads, where the database
    has one (SQLite locks the whole database for a write instead)."""
    return " FOR UPDATE" if connection.features.has_select_for_update else ""


@contextmanager
def lock_wait_bounded(connection: Any, seconds: float) -> Iterator[None]:
    """Statements in this block wait at most ``seconds`` for a lock another
    transaction holds, then raise the database's ``OperationalError``.

    PostgreSQL: one transaction with ``SET LOCAL lock_timeout`` (a row
    lock is otherwise waited for without end). SQLite: the block's
    statements run with ``PRAGMA busy_timeout`` lowered, then restored; a
    write there locks the whole file, so keep the block to statements that
    commit on their own (no ``atomic``: its BEGIN waits the full timeout).
    """
    ms = max(1, round(seconds * 1000))
    if connection.vendor == "postgresql":
        with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
            cursor.execute(f"SET LOCAL lock_timeout = {ms}")
            yield
        return
    if connection.vendor != "sqlite":
        yield
        return
    connection.ensure_connection()
    raw = connection.connection
    (before,) = raw.execute("PRAGMA busy_timeout").fetchone()
    raw.execute(f"PRAGMA busy_timeout = {ms}")
    try:
        yield
    finally:
        raw.execute(f"PRAGMA busy_timeout = {int(before)}")


def insert_sql(model: Any, fields: list[Any], connection: Any) -> str:
    """``INSERT INTO table (columns) VALUES (%s, ...)`` for ``fields``."""
    quote = connection.ops.quote_name
    columns = ", ".join(quote(f.column) for f in fields)
    marks = ", ".join(["%s"] * len(fields))
    return f"INSERT INTO {table(model, connection)} ({columns}) VALUES ({marks})"  # noqa: S608


# Rows above which ``insert_rows`` takes a ``COPY`` on PostgreSQL.
COPY_MIN_ROWS = 4


def insert_rows(
    connection: Any,
    model: Any,
    fields: list[Any],
    rows: Sequence[Sequence[Any]],
    cursor: Any = None,
) -> None:
    """Insert ``rows`` (each the values of ``fields``, in database form; a
    JSON column's value as its JSON text).

    On PostgreSQL in one ``COPY`` when they are more than
    ``COPY_MIN_ROWS``: ``executemany`` sends one statement per row there,
    each formatted in Python (Django binds parameters on the client);
    COPY's text format takes JSON text for ``jsonb`` as it is, as SQLite's
    text column does. A few rows (a single put's event) take
    ``executemany``: one round trip, where a ``COPY`` takes two. Elsewhere
    ``executemany``. ``cursor``: the caller's, if it has one open on
    ``connection``. Where queries are
    logged (DEBUG, query-count tests), the COPY is logged as an
    ``executemany`` is, though it goes past Django's cursor.
    """
    if not rows:
        return
    if cursor is None:
        with connection.cursor() as cursor:
            return insert_rows(connection, model, fields, rows, cursor)
    if connection.vendor != "postgresql" or len(rows) <= COPY_MIN_ROWS:
        cursor.executemany(insert_sql(model, fields, connection), rows)
        return
    quote = connection.ops.quote_name
    columns = ", ".join(quote(f.column) for f in fields)
    statement = f"COPY {table(model, connection)} ({columns}) FROM STDIN"
    debug_sql = getattr(cursor, "debug_sql", None)  # a CursorDebugWrapper's
    logged = debug_sql(statement, rows, many=True) if debug_sql else nullcontext()
    with logged, cursor.cursor.copy(statement) as copy:
        for row in rows:
            copy.write_row(row)


def update_rows(
    connection: Any,
    model: Any,
    fields: list[Any],
    keys: list[Any],
    rows: Sequence[Sequence[Any]],
) -> None:
    """``UPDATE table SET field = value, ... WHERE key = value AND ...`` for
    each row (the values of ``fields`` then of ``keys``, in database form).

    On PostgreSQL in one statement over arrays (``UPDATE ... FROM
    unnest(...)``): ``executemany`` sends a statement per row there, each
    parsed and planned by the server. Elsewhere ``executemany``. The
    caller holds the rows' locks, or the order of the updates would
    matter.
    """
    if not rows:
        return
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        if connection.vendor != "postgresql":
            sets = ", ".join(f"{quote(f.column)} = %s" for f in fields)
            where = " AND ".join(f"{quote(k.column)} = %s" for k in keys)
            cursor.executemany(
                f"UPDATE {table(model, connection)} SET {sets} WHERE {where}",  # noqa: S608
                rows,
            )
            return
        columns = [*fields, *keys]
        arrays = ", ".join(f"%s::{c.db_type(connection)}[]" for c in columns)
        names = ", ".join(f"c{i}" for i in range(len(columns)))
        sets = ", ".join(f"{quote(f.column)} = v.c{i}" for i, f in enumerate(fields))
        where = " AND ".join(
            f"t.{quote(k.column)} = v.c{len(fields) + i}" for i, k in enumerate(keys)
        )
        cursor.execute(
            f"UPDATE {table(model, connection)} AS t SET {sets}"  # noqa: S608
            f" FROM unnest({arrays}) AS v({names}) WHERE {where}",
            [array_param(column) for column in zip(*rows, strict=True)],
        )


def json_text_mark(connection: Any) -> str:
    """The placeholder of a JSON column whose value is JSON text."""
    return "%s::jsonb" if connection.vendor == "postgresql" else "%s"


def prepared_rows(
    objs: list[Any], fields: list[Any], connection: Any
) -> list[list[Any]]:
    """Each object's ``fields`` as the database takes them.

    ``connection`` must be a connection, not Django's ``connection`` proxy,
    whose every attribute read (many per field) goes through a
    thread-local. A value that is the
    very object of the previous row's (the batch's timestamp, region,
    operation) is prepared once.
    """
    last_raw: list[Any] = [_UNSET] * len(fields)
    last_prepared: list[Any] = [None] * len(fields)
    rows = []
    for obj in objs:
        row = []
        for i, field in enumerate(fields):
            raw = getattr(obj, field.attname)
            if raw is not last_raw[i]:
                last_raw[i] = raw
                last_prepared[i] = field.get_db_prep_save(raw, connection)
            row.append(last_prepared[i])
        rows.append(row)
    return rows


_UNSET = object()


# A table is vacuumed once its dead rows are at least this many and this
# share of its live ones (PostgreSQL's autovacuum waits for 50 and 0.2).
VACUUM_MIN_DEAD = 10_000
VACUUM_DEAD_SHARE = 0.2
# A table is analyzed once this many rows, plus this share of its live rows,
# changed since its last ANALYZE (PostgreSQL's autovacuum defaults: 50, 0.1).
ANALYZE_MIN_CHANGED = 1_000
ANALYZE_CHANGED_SHARE = 0.1


def due_for_vacuum(stats: Iterable[tuple[str, int, int]]) -> list[str]:
    """The tables among ``(name, live rows, dead rows)`` whose dead rows
    passed both bounds, by name."""
    return sorted(
        name
        for name, live, dead in stats
        if dead >= max(VACUUM_MIN_DEAD, VACUUM_DEAD_SHARE * live)
    )


def due_for_analyze(stats: Iterable[tuple[str, int, int]]) -> list[str]:
    """The tables among ``(name, live rows, rows changed since the last
    ANALYZE)`` whose planner statistics are stale, by name: the bounds of
    PostgreSQL's own autovacuum (a base plus a tenth of the table)."""
    return sorted(
        name
        for name, live, changed in stats
        if changed >= ANALYZE_MIN_CHANGED + ANALYZE_CHANGED_SHARE * live
    )


def vacuum_bloated(connection: Any, models: Sequence[Any]) -> list[str]:
    """``VACUUM`` the tables of ``models`` whose dead rows passed the bounds
    (``due_for_vacuum``, from the server's statistics); the tables vacuumed.

    PostgreSQL keeps a deleted or updated row as a dead one until a vacuum;
    tables whose rows churn (queued events, inserted then deleted once
    acked) grow without bound while nothing vacuums (the server's
    ``autovacuum`` may be off), and a statement that walks them walks the
    dead rows too. ``SKIP_LOCKED``: a table another vacuum holds is left
    to it. Only PostgreSQL (SQLite reuses a deleted row's space), and only
    outside a transaction, which a vacuum cannot run in.

    The same look ``ANALYZE``s the tables whose statistics are stale
    (``due_for_analyze``), which is the other half of what autovacuum does:
    on a table never analyzed the planner reads the newest events of the
    log (``WHERE seq > %s ORDER BY seq LIMIT %s``, each fan-out pass) by a
    sequential scan and a sort of the whole log.
    """
    if connection.vendor != "postgresql" or connection.in_atomic_block:
        return []
    names = [model._meta.db_table for model in models]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT relname, n_live_tup, n_dead_tup, n_mod_since_analyze"
            " FROM pg_stat_user_tables"
            " WHERE schemaname = current_schema() AND relname = ANY(%s)",
            [names],
        )
        stats = cursor.fetchall()
        vacuum = set(due_for_vacuum((n, live, dead) for n, live, dead, _ in stats))
        analyze = set(due_for_analyze((n, live, ch) for n, live, _, ch in stats))
        for name in sorted(vacuum | analyze):
            table = connection.ops.quote_name(name)
            if name not in vacuum:
                cursor.execute(f"ANALYZE (SKIP_LOCKED) {table}")
                continue
            options = "SKIP_LOCKED, ANALYZE" if name in analyze else "SKIP_LOCKED"
            cursor.execute(f"VACUUM ({options}) {table}")
    return sorted(vacuum | analyze)
