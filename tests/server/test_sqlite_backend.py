"""durablecache.server.sqlite3: a process's writers of one SQLite file queue
on a lock."""

import sqlite3
import threading

import pytest
from django.db import OperationalError, connections

from durablecache.server.sqlite3.base import DatabaseWrapper, writer_lock


@pytest.fixture
def make(tmp_path, django_db_blocker):
    """Connections to a scratch file (not the test database, so outside
    pytest-django's transaction)."""
    opened = []

    def wrapper():
        settings = {
            **connections["default"].settings_dict,
            "ENGINE": "durablecache.server.sqlite3",
            "NAME": str(tmp_path / "db.sqlite3"),
            "OPTIONS": {"transaction_mode": "IMMEDIATE", "timeout": 30},
        }
        conn = DatabaseWrapper(settings, alias=f"scratch{len(opened)}")
        opened.append(conn)
        return conn

    with django_db_blocker.unblock():
        yield wrapper
        for conn in opened:
            conn.close()


def begin(conn):
    # What transaction.atomic does on entry.
    conn.set_autocommit(False, force_begin_transaction_with_broken_autocommit=True)


def end(conn, how):
    getattr(conn, how)()
    if how != "close":
        conn.set_autocommit(True)


@pytest.mark.parametrize("how", ["commit", "rollback", "close"])
def test_a_transaction_holds_the_file_lock_until_it_ends(make, how):
    conn = make()
    lock = writer_lock(conn.settings_dict["NAME"])
    assert not lock.locked()
    begin(conn)
    assert lock.locked()
    with conn.cursor() as cursor:
        cursor.execute("CREATE TABLE IF NOT EXISTS t (n integer)")
    end(conn, how)
    assert not lock.locked()


def test_a_second_writer_of_the_process_waits_for_the_first(make):
    first, second = make(), make()
    second.inc_thread_sharing()  # used by the other thread below
    with first.cursor() as cursor:
        cursor.execute("CREATE TABLE t (n integer)")
    order = []
    began = threading.Event()

    def other():
        began.set()
        begin(second)  # waits on the lock, not in SQLite's busy handler
        with second.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM t")
            order.append(("second saw", cursor.fetchone()[0]))
        end(second, "commit")

    begin(first)
    with first.cursor() as cursor:
        cursor.execute("INSERT INTO t VALUES (1)")
    thread = threading.Thread(target=other)
    thread.start()
    began.wait(10)
    order.append(("first commits", None))
    end(first, "commit")
    thread.join(30)
    assert order == [("first commits", None), ("second saw", 1)]


def _other_process_writer(path):
    """A connection outside this backend (its locks), as another process's:
    only SQLite's own locking stands between it and ours."""
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("PRAGMA journal_mode=WAL")
    return other


def test_a_begin_meeting_another_writer_retries_until_it_is_done(make):
    conn = make()
    with conn.cursor() as cursor:
        cursor.execute("CREATE TABLE t (n integer)")
    other = _other_process_writer(conn.settings_dict["NAME"])
    other.execute("BEGIN IMMEDIATE")
    other.execute("INSERT INTO t VALUES (1)")
    tries = []
    real = conn._begin_polling

    def counting(timeout):
        tries.append(timeout)
        real(timeout)

    conn._begin_polling = counting
    done = threading.Timer(0.2, other.execute, ["COMMIT"])
    done.start()
    try:
        begin(conn)  # polls while the other holds the write lock
        with conn.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM t")
            assert cursor.fetchone()[0] == 1  # in after the other's commit
        end(conn, "commit")
    finally:
        done.join()
        other.close()
    assert tries == [30.0]
    with conn.cursor() as cursor:  # statements keep the connection's timeout
        cursor.execute("PRAGMA busy_timeout")
        assert cursor.fetchone()[0] == 30000


def test_a_begin_out_of_time_says_so(make):
    conn = make()
    with conn.cursor() as cursor:
        cursor.execute("CREATE TABLE t (n integer)")
    other = _other_process_writer(conn.settings_dict["NAME"])
    other.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(OperationalError, match="locked"):
            conn._begin_polling(0.05)
        assert not conn.in_atomic_block
        assert not conn.connection.in_transaction
    finally:
        other.execute("ROLLBACK")
        other.close()
    conn._begin_polling(0.05)  # free again: in at once
    assert conn.connection.in_transaction
    conn.connection.execute("ROLLBACK")
