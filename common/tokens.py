"""An API token's user in one SQL statement (REST and websocket doors).

Not ``Token.objects.select_related("user")``: every REST request and every
websocket handshake authenticates, and building and compiling that query
costs many times the statement itself
(docs/decisions/0010-hot-statements-in-sql.md). The user comes back with
the fields permissions read; any other field loads on first use, as a
deferred field does.
"""

import functools
from typing import Any

from django.contrib.auth import get_user_model
from django.db import connections
from rest_framework.authtoken.models import Token

from common import sql

# In the model's field order (Model.from_db maps values in that order).
_USER_FIELDS = tuple(
    f.attname
    for f in get_user_model()._meta.concrete_fields
    if f.attname in {"id", "username", "is_active", "is_staff", "is_superuser"}
)
_BOOLEANS = {"is_active", "is_staff", "is_superuser"}


@functools.cache
def _lookup_sql(vendor: str) -> str:
    connection = connections["default"]
    user_meta = get_user_model()._meta
    quote = connection.ops.quote_name
    columns = ", ".join(f"u.{quote(name)}" for name in _USER_FIELDS)
    return (
        f"SELECT {columns} FROM {sql.table(Token, connection)} t"  # noqa: S608
        f" JOIN {sql.table(get_user_model(), connection)} u"
        f" ON u.{quote(user_meta.pk.column)} = t.user_id"
        f" WHERE t.{quote('key')} = %s"
    )


def token_user(key: str) -> Any:
    """The user of the token ``key`` (active or not), or None."""
    connection = connections["default"]
    with connection.cursor() as cursor:
        cursor.execute(_lookup_sql(connection.vendor), [key])
        row = cursor.fetchone()
    if row is None:
        return None
    values = [
        bool(v) if name in _BOOLEANS else v
        for name, v in zip(_USER_FIELDS, row, strict=True)
    ]
    return get_user_model().from_db("default", list(_USER_FIELDS), values)
