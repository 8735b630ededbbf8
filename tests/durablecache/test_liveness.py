"""The worker stall watchdog: liveness marks and runnode's decision."""

import os
import subprocess
import sys
import time

import pytest

from durablecache.supervision import liveness
from durablecache.supervision.node import Node


@pytest.fixture
def data_dir(settings, tmp_path):
    settings.DATA_DIR = tmp_path
    settings.DURABLECACHE_NODE_NAME = "node-w"
    settings.DURABLECACHE_WORKER_STALL_S = 5.0
    yield tmp_path
    liveness._path = None


def test_beat_is_a_no_op_until_enabled(data_dir):
    liveness._path = None
    liveness.beat(force=True)
    assert liveness.idle_for(liveness.alive_path()) == float("inf")


def test_beat_marks_progress_once_enabled(data_dir):
    liveness.enable()
    path = liveness.alive_path()
    os.utime(path, (time.time() - 100, time.time() - 100))
    assert liveness.idle_for(path) >= 99
    liveness.beat(force=True)
    assert liveness.idle_for(path) < 99


@pytest.fixture
def node(data_dir):
    """A Node whose 'worker' is a sleeping child process."""
    n = Node("node-w", "http://127.0.0.1:1", {"concurrency": 1})
    n.env = dict(os.environ)
    started = []

    def fake_worker():
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        started.append(proc)
        n.worker_started = time.monotonic()
        return proc

    n.start_worker = fake_worker
    n.children = [fake_worker()]
    yield n, started
    for proc in started:
        proc.kill()
        proc.wait()


def _age(n, seconds):
    """Pretend the worker and the tick stream started ``seconds`` ago."""
    n.worker_started = time.monotonic() - seconds
    return time.monotonic() - seconds


def test_a_worker_that_marks_progress_is_kept(node):
    n, started = node
    path = liveness.alive_path()
    path.touch()
    assert n.restart_worker_if_stalled(_age(n, 60)) is False
    assert len(started) == 1


def test_a_silent_worker_is_killed_and_replaced(node):
    n, started = node
    path = liveness.alive_path()
    path.touch()
    os.utime(path, (time.time() - 30, time.time() - 30))
    assert n.restart_worker_if_stalled(_age(n, 60)) is True
    assert started[0].poll() is not None  # the old one is gone
    assert n.children[0] is started[1]
    assert started[1].poll() is None


def test_no_restart_while_ticks_did_not_reach_the_broker(node):
    """A broker outage starves the worker: that is not a stall."""
    n, started = node
    liveness.alive_path().unlink(missing_ok=True)
    _age(n, 60)
    assert n.restart_worker_if_stalled(time.monotonic() - 1) is False
    assert len(started) == 1


def test_a_new_worker_gets_the_whole_limit(node, settings):
    n, started = node
    liveness.alive_path().unlink(missing_ok=True)
    n.worker_started = time.monotonic()
    assert n.restart_worker_if_stalled(time.monotonic() - 60) is False
    settings.DURABLECACHE_WORKER_STALL_S = 0  # 0 turns the watchdog off
    _age(n, 60)
    assert n.restart_worker_if_stalled(time.monotonic() - 60) is False
    assert len(started) == 1


def test_ready_is_the_mark_of_the_worker_asked_about(data_dir):
    ticks = iter(range(1000))
    liveness.mark_ready()  # this process's pid
    assert liveness.wait_ready(pid=os.getpid(), timeout=5, alive=lambda: True)
    # A mark left by an earlier worker is not this one's.
    assert not liveness.wait_ready(
        pid=os.getpid() + 1, timeout=5, alive=lambda: next(ticks) < 3
    )


def test_waiting_for_ready_stops_when_the_node_dies(data_dir):
    assert not liveness.wait_ready(pid=os.getpid(), timeout=60, alive=lambda: False)


def test_a_failing_heartbeat_stops_neither_the_ticks_nor_the_watchdog(
    node, settings, monkeypatch
):
    """A worker stopped inside a write holds the lock the heartbeat needs:
    the heartbeat fails, yet each turn still sends the tick (not judging)
    and the watchdog still counts from when the ticks began to arrive."""
    from durablecache.supervision import node as node_module

    n, _ = node
    n.alive = lambda: True
    n.shutdown = lambda: None
    settings.DURABLECACHE_HEARTBEAT_S = 0.05
    waits, ticks, watched = [], [], []

    def heartbeat(*, name, lock_wait_s):
        waits.append(lock_wait_s)
        raise RuntimeError("database is locked")

    def tick_on(name, *, judge):
        ticks.append(judge)
        return True

    def turn_ends(seconds):
        n.stopping = len(ticks) >= 3

    monkeypatch.setattr(node_module.cache_services, "node_heartbeat", heartbeat)
    monkeypatch.setattr(node_module, "tick_on", tick_on)
    monkeypatch.setattr(node_module.time, "sleep", turn_ends)
    n.restart_worker_if_stalled = lambda since: watched.append(since) or False
    n.supervise()
    assert ticks == [False, False, False]
    assert len(set(watched)) == 1  # ticks_since never moved
    assert waits == [0.05] * 3  # the wait for a lock is bounded by the turn
