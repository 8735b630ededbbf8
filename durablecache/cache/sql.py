"""SQL text for the hot paths, from the models' metadata.

The hot paths run statements instead of querysets (building a queryset cost
~1 ms of CPU on the benchmark machine, the statement ~0.05 ms;
docs/performance.md). These helpers quote names the one way both the cache
and the node store's statements need; ``queues`` imports them too (its
arrow points here).
"""

from typing import Any


def table(model: Any, connection: Any) -> str:
    """The model's table name, quoted for ``connection``."""
    return str(connection.ops.quote_name(model._meta.db_table))


def insert_sql(model: Any, fields: list[Any], connection: Any) -> str:
    """``INSERT INTO table (columns) VALUES (%s, ...)`` for ``fields``."""
    quote = connection.ops.quote_name
    columns = ", ".join(quote(f.column) for f in fields)
    marks = ", ".join(["%s"] * len(fields))
    return f"INSERT INTO {table(model, connection)} ({columns}) VALUES ({marks})"  # noqa: S608
