"""Celery door: each node's worker consumes the queue ``node.<name>``.

Tasks carry ids only and are idempotent; a lost one is healed by the next
``tick`` (rows are the truth; docs/operations.md).
"""

import logging
import os
import threading
import time
import uuid
from typing import Any

import redis
from celery import shared_task
from django.conf import settings

from clients import fanout, maintenance, replication
from common import threads
from queues import services as queue_services

log = logging.getLogger(__name__)


def node_queue(node: str) -> str:
    return f"node.{node}"


# After a failed send, skip sends for a while: a broker outage must not make
# every write wait for a connect timeout. The periodic tick heals what is
# skipped (rows are the truth).
BREAKER_S = 2.0
_broken_until = 0.0


def _send(task, node: str, *args, expires: float | None = None) -> bool:
    """Ring a node's worker; a broker outage only delays the work.

    Returns whether the message reached the broker.
    """
    global _broken_until
    if time.monotonic() < _broken_until:
        return False
    try:
        task.apply_async(
            args=list(args), queue=node_queue(node), retry=False, expires=expires
        )
    except Exception as exc:  # the periodic tick heals a lost doorbell
        _broken_until = time.monotonic() + BREAKER_S
        log.warning("could not enqueue %s for %s: %s", task.name, node, exc)
        return False
    return True


@shared_task(name="clients.fanout", ignore_result=True)
def fanout_task(node: str) -> int:
    """The fan-out doorbell when the broker is not Redis (no listener)."""
    return fanout.fanout_node(node)


# The fan-out doorbell is a Redis list per node holding at most one item
# (LPUSH then LTRIM, one round trip for every node rung): the node's worker
# process waits on it with BLPOP in one thread of its own (FanoutListener)
# and fans out when it pops. A write committed after the pop pushes again,
# so none is missed; a write committed before it is read by that fan-out.
# As a Celery task per write this cost ~1 ms of Daphne's CPU to publish and
# about 2 ms of the worker's to receive, trace and ack
# (docs/performance.md). A lost item (Redis restarted) is healed by the
# tick, which fans out first.
_redis: dict[str, Any] = {"pid": 0, "client": None}
LISTEN_S = 1  # each BLPOP waits this long (whole seconds) before the next


def _redis_client() -> Any:
    """Redis of the broker, or None when the broker is not Redis (tests)."""
    url = str(settings.CELERY_BROKER_URL or "")
    if not url.startswith(("redis://", "rediss://", "unix://")):
        return None
    if _redis["pid"] != os.getpid():
        _redis["client"] = redis.Redis.from_url(
            url, socket_timeout=1, socket_connect_timeout=1
        )
        _redis["pid"] = os.getpid()
    return _redis["client"]


def ring_key(node: str) -> str:
    return f"durablecache:fanout:{node}"


def _ring(nodes: list[str]) -> None:
    """Ring the fan-out doorbell of ``nodes`` (a Celery task each without
    a Redis broker); a failure only delays the fan-out to the next tick."""
    global _broken_until
    client = _redis_client()
    if client is None:
        for node in nodes:
            _send(fanout_task, node, node)
        return
    if time.monotonic() < _broken_until:
        return
    try:
        pipe = client.pipeline(transaction=False)
        for node in nodes:
            pipe.lpush(ring_key(node), "1")
            pipe.ltrim(ring_key(node), 0, 0)
        pipe.execute()
    except redis.RedisError as exc:
        _broken_until = time.monotonic() + BREAKER_S
        log.warning("could not ring the fan-out of %s: %s", nodes, exc)


class FanoutListener:
    """The worker's side of the fan-out doorbell: one daemon thread that
    pops this node's ring and fans out, whatever Celery's pool is doing."""

    def __init__(self, node: str) -> None:
        self.node = node
        self.thread: threading.Thread | None = None
        self.stopping = threading.Event()
        self.connections = threads.Connections()  # used by the thread only

    def start(self) -> bool:
        """Start listening; False without a Redis broker (nothing to hear)."""
        if _redis_client() is None:
            return False
        self.thread = threading.Thread(
            target=self._run, name="fanout-listener", daemon=True
        )
        self.thread.start()
        return True

    def _run(self) -> None:
        url = str(settings.CELERY_BROKER_URL)
        # The read outlives the BLPOP's own wait; a Redis that stops
        # answering ends it and the loop tries again.
        client = redis.Redis.from_url(
            url, socket_timeout=LISTEN_S + 5, socket_connect_timeout=1
        )
        while not self.stopping.is_set():
            try:
                popped = client.blpop([ring_key(self.node)], timeout=LISTEN_S)
            except redis.RedisError as exc:
                log.warning("fan-out listener of %s: %s", self.node, exc)
                self.stopping.wait(LISTEN_S)
                continue
            if popped is not None:
                self.fan_out()

    def stop(self, timeout: float = LISTEN_S + 6) -> None:
        """End the thread (within one BLPOP wait); the worker never needs
        to: the thread dies with its process."""
        self.stopping.set()
        if self.thread is not None:
            self.thread.join(timeout)

    def fan_out(self) -> None:
        # The connections are checked as around a task (durablecache.celery)
        # but health-checked only after an idle second: closing them "as
        # old" around every pass made each pass's first statements on each
        # database a SELECT 1 (~18 % of a pass on PostgreSQL;
        # docs/performance.md).
        try:
            self.connections.call(fanout.fanout_node, self.node)
        except Exception:  # the tick fans out too: delayed, not lost
            log.exception("fan-out of %s failed", self.node)


def listen_for_fanout(node: str) -> FanoutListener:
    """Start this worker process's fan-out listener (``worker_ready``)."""
    listener = FanoutListener(node)
    listener.start()
    return listener


@shared_task(name="clients.drop_queue", ignore_result=True)
def drop_queue_task(client_id: str) -> bool:
    return queue_services.queue_drop(client_id=uuid.UUID(client_id))


@shared_task(name="clients.adopt", ignore_result=True)
def adopt_task(client_id: str, source: str) -> None:
    replication.adopt(
        client_id=uuid.UUID(client_id),
        node=settings.DURABLECACHE_NODE_NAME,
        source=source,
    )


@shared_task(name="clients.copy_out", ignore_result=True)
def copy_out_task(client_id: str, target: str, after: int, upto: int) -> None:
    node = settings.DURABLECACHE_NODE_NAME
    page = replication.copy_out(
        client_id=uuid.UUID(client_id), node=node, target=target, after=after, upto=upto
    )
    if page is not None:
        _send(copy_in_task, target, client_id, node, page)


@shared_task(name="clients.copy_in", ignore_result=True)
def copy_in_task(client_id: str, source: str, page: dict[str, Any]) -> None:
    replication.copy_in(
        client_id=uuid.UUID(client_id),
        node=settings.DURABLECACHE_NODE_NAME,
        source=source,
        page=page,
    )


@shared_task(name="clients.ack", ignore_result=True)
def ack_task(acks: dict[str, int]) -> int:
    return queue_services.queue_ack_many(
        {uuid.UUID(pk): int(up_to) for pk, up_to in acks.items()}
    )


@shared_task(name="clients.tick", ignore_result=True)
def tick_task(node: str, judge: bool = True) -> None:
    maintenance.tick(node, judge=judge)


# A process rings at most once per this many seconds: the nodes marked
# meanwhile wait for the next ring. With a ring per write, a writer of one
# put frame at a time (~500/s) cost its Daphne ~270 us of CPU per put in
# the doorbell thread and every node's worker a fan-out pass per put
# (~0.9 ms of CPU each), on two cores (docs/performance.md). A write after
# a quiet spell still rings at once; under load the fan-out waits at most
# this long more.
RING_SPACING_S = 0.005


class Doorbell:
    """Coalesce fan-out doorbells: writers only mark the nodes and return,
    so a REST write never waits for Redis; one daemon thread per process
    rings them, all nodes marked meanwhile in one round trip, at most once
    per ``RING_SPACING_S``. A doorbell lost with the process is healed by
    the next tick.
    """

    def __init__(self) -> None:
        self.pending: set[str] = set()
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.thread: threading.Thread | None = None
        self.pause = time.sleep  # the wait between two rings

    def ring(self, node: str) -> None:
        with self.lock:
            self.pending.add(node)
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(
                    target=self._run, name="fanout-doorbell", daemon=True
                )
                self.thread.start()
        self.wake.set()

    def _run(self) -> None:
        rang = float("-inf")
        while True:
            self.wake.wait()
            self.pause(max(0.0, rang + RING_SPACING_S - time.monotonic()))
            self.wake.clear()  # a node marked from now on wakes the next turn
            with self.lock:
                nodes, self.pending = self.pending, set()
            if nodes:
                rang = time.monotonic()
                _ring(sorted(nodes))


doorbell = Doorbell()


def fanout_on(node: str) -> None:
    doorbell.ring(node)


def adopt_on(node: str, client_id: uuid.UUID, source: str) -> None:
    _send(adopt_task, node, client_id.hex, source)


def copy_out_on(
    node: str, client_id: uuid.UUID, target: str, after: int, upto: int
) -> None:
    _send(copy_out_task, node, client_id.hex, target, after, upto)


def ack_on(node: str, acks: dict[str, int]) -> None:
    _send(ack_task, node, acks)


def drop_queue_on(node: str, client_id: uuid.UUID) -> None:
    _send(drop_queue_task, node, str(client_id))


def tick_on(node: str | None = None, *, judge: bool = True) -> bool:
    """Send a node's worker its periodic tick; return whether it was sent."""
    node = node or settings.DURABLECACHE_NODE_NAME
    # A tick nobody ran in time is superseded by the next one.
    return _send(
        tick_task,
        node,
        node,
        judge,
        expires=max(2.0, settings.DURABLECACHE_HEARTBEAT_S * 3),
    )
