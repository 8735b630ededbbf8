"""The database thread of the write rounds (common.threads)."""

import threading

import pytest
from django.db import connections

from common import threads

pytestmark = pytest.mark.django_db(transaction=True)


def _connection_state() -> tuple[str, object]:
    """This thread's name and its open default connection (None if closed)."""
    return threading.current_thread().name, connections["default"].connection


def _query() -> int:
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT 1")
        return int(cursor.fetchone()[0])


async def test_a_call_runs_on_its_own_thread_and_returns_the_result():
    runner = threads.DatabaseThread("db-test")
    name, _ = await runner.call(_connection_state)
    assert name.startswith("db-test")
    assert name != threading.current_thread().name
    assert await runner.call(_query) == 1


async def test_the_write_rounds_have_their_own_thread():
    writes, _ = await threads.writes.call(_connection_state)
    assert writes.startswith("db-writes")


async def test_an_exception_of_the_call_reaches_the_caller():
    def failing() -> None:
        raise LookupError("from the thread")

    with pytest.raises(LookupError, match="from the thread"):
        await threads.DatabaseThread("db-test").call(failing)


@pytest.fixture
def closes(monkeypatch):
    """The names of the threads whose default connection was closed (a
    close of SQLite's in-memory test database is a no-op, so the calls are
    what can be seen)."""
    seen: list[str] = []
    wrapper = type(connections["default"])
    real = wrapper.close

    def close(self) -> None:
        if self.alias == "default":
            seen.append(threading.current_thread().name)
        real(self)

    monkeypatch.setattr(wrapper, "close", close)
    return seen


async def test_a_connection_past_its_max_age_is_closed_after_the_call(closes):
    # The test settings' CONN_MAX_AGE is 0: every connection is past it at
    # once, as close_old_connections would find after a request.
    await threads.DatabaseThread("db-age").call(_query)
    assert any(name.startswith("db-age") for name in closes)


async def test_a_healthy_persistent_connection_is_kept_without_a_health_check(
    monkeypatch,
):
    monkeypatch.setitem(connections.settings["default"], "CONN_MAX_AGE", None)
    monkeypatch.setitem(connections.settings["default"], "CONN_HEALTH_CHECKS", True)
    runner = threads.DatabaseThread("db-test")

    def open_and_report() -> tuple[object, bool]:
        _query()
        conn = connections["default"]
        return conn.connection, conn.health_check_done

    def report() -> tuple[object, bool]:
        conn = connections["default"]
        return conn.connection, conn.health_check_done

    try:
        first, _ = await runner.call(open_and_report)
        # A second call right after: the same connection, and no health
        # check armed for its next statement (close_old_connections would
        # have armed one: a SELECT 1 per round on PostgreSQL).
        again, checked = await runner.call(report)
        assert again is first
        assert checked is True
    finally:
        await runner.call(lambda: connections["default"].close())


async def test_a_connection_left_in_a_transaction_is_closed_after_the_call(
    monkeypatch, closes
):
    monkeypatch.setitem(connections.settings["default"], "CONN_MAX_AGE", None)

    def leave_a_transaction_open() -> None:
        connections["default"].set_autocommit(False)
        _query()

    await threads.DatabaseThread("db-open").call(leave_a_transaction_open)
    assert any(name.startswith("db-open") for name in closes)
