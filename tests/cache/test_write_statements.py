"""A REST PUT of one entry is a fixed list of statements on the cluster
database, and none on the node store.

The write path's statements are SQL
(docs/decisions/0010-hot-statements-in-sql.md); one more per PUT shows
here. The PUT commits as in production: a group-commit round of one put,
outside any test transaction (docs/decisions/0011-group-commit.md).
"""

import pytest
from django.db import connections

from cache import hooks, services

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "node"])

URL = "/api/v1/regions/prices/entries/k/"

# What each statement is, in order. SQLite's BEGIN IMMEDIATE is not in the
# log: the project's backend (durablecache.server.sqlite3) issues it on the
# raw connection. An executemany or a COPY is one entry ("N times: ...").
PUT = {
    "sqlite": [
        "SELECT the token's user (common.tokens)",
        "UPDATE the event log's row RETURNING the put's seq: the writers' lock",
        "SELECT the region",
        "SELECT the key's entry row (the whole database is locked already)",
        "INSERT the entry row, or UPDATE it when the key exists",
        "INSERT the event",
        "COMMIT",
    ],
    "postgresql": [
        "SELECT the token's user (common.tokens)",
        "BEGIN",
        "UPDATE the event log's row RETURNING the put's seq: the writers' lock",
        "SELECT the region",
        "SELECT the key's entry row FOR UPDATE",
        "COPY the entry row in, or UPDATE it when the key exists",
        "COPY the event in",
        "COMMIT",
    ],
}


@pytest.fixture
def without_doorbell(monkeypatch):
    """No after-commit listener: ``clients`` rings the fan-out from there,
    reading the live nodes at most once a second (its statements, not the
    write's)."""
    monkeypatch.setattr(hooks, "_listeners", [])


@pytest.mark.parametrize("existing", [False, True], ids=["new-key", "existing-key"])
def test_a_rest_put_of_one_entry_is_a_fixed_list_of_statements(
    api, region, without_doorbell, existing, django_assert_num_queries
):
    if existing:
        services.entry_put(region="prices", key="k", value=0)
    statements = PUT[connections["default"].vendor]
    with (
        django_assert_num_queries(0, connection=connections["node"]),
        django_assert_num_queries(len(statements)),
    ):
        response = api.put(URL, {"value": 1}, format="json")
    assert response.status_code == 200
    assert response.json()["version"] == (2 if existing else 1)
