"""Send work to a node's worker: Celery tasks by name on the queue
``node.<name>``, and the fan-out doorbell (a Redis list per node).

The one module of ``clients`` that reaches Celery or the broker's Redis.
It imports nothing of ``clients``, so every service may use it, and the
worker's side (``clients.tasks``) is imported by none of them. Every send
is a doorbell: a lost one delays the work to the next ``tick``, which
heals from the rows (docs/operations.md).
"""

import logging
import threading
import time
import uuid
from typing import Any

import redis
from celery import current_app
from django.conf import settings

from common import redis_clients, trace

log = logging.getLogger(__name__)

# The task names, registered by ``clients.tasks``: they are the wire
# between nodes, so a node of one version can send to a node of another.
FANOUT = "clients.fanout"
ADOPT = "clients.adopt"
COPY_OUT = "clients.copy_out"
COPY_IN = "clients.copy_in"
ACK = "clients.ack"
DROP_QUEUE = "clients.drop_queue"
FORGET_CQ = "clients.forget_cq"
TICK = "clients.tick"
TASK_NAMES = (FANOUT, ADOPT, COPY_OUT, COPY_IN, ACK, DROP_QUEUE, FORGET_CQ, TICK)


def node_queue(node: str) -> str:
    return f"node.{node}"


# After a failed send, skip sends for a while: a broker outage must not make
# every write wait for a connect timeout. The periodic tick heals what is
# skipped (rows are the truth).
BREAKER_S = 2.0
_broken_until = 0.0


def _send(name: str, node: str, *args: Any, expires: float | None = None) -> bool:
    """Ring a node's worker with the task ``name``; a broker outage only
    delays the work. Returns whether the message reached the broker."""
    global _broken_until
    if time.monotonic() < _broken_until:
        return False
    try:
        current_app.send_task(
            name,
            args=list(args),
            queue=node_queue(node),
            retry=False,
            expires=expires,
            ignore_result=True,
        )
    except Exception as exc:  # the periodic tick heals a lost doorbell
        _broken_until = time.monotonic() + BREAKER_S
        log.warning("could not enqueue %s for %s: %s", name, node, exc)
        return False
    return True


# The fan-out doorbell is a Redis list per node holding at most one item
# (LPUSH then LTRIM, one round trip for every node rung): the node's worker
# waits on it with BLPOP in a thread of its own (``FanoutListener`` in
# ``clients.tasks``) and fans out when it pops. A write committed after the
# pop pushes again, so none is missed; a write committed before it is read
# by that fan-out. A Celery task per write would cost the writer and the
# worker more CPU than the write itself
# (docs/decisions/0013-fanout-doorbell-on-redis.md). A lost item (Redis
# restarted) is healed by the tick, which fans out first.
_redis = redis_clients.new_slot()


def _redis_client() -> Any:
    """Redis of the broker, or None when the broker is not Redis (tests)."""
    url = str(settings.CELERY_BROKER_URL or "")
    if not url.startswith(("redis://", "rediss://", "unix://")):
        return None
    return redis_clients.client(_redis, url)


def ring_key(node: str) -> str:
    return f"durablecache:fanout:{node}"


def _ring(nodes: list[str]) -> None:
    """Ring the fan-out doorbell of ``nodes`` (a Celery task each without
    a Redis broker); a failure only delays the fan-out to the next tick."""
    global _broken_until
    client = _redis_client()
    if client is None:
        for node in nodes:
            _send(FANOUT, node, node)
        return
    if time.monotonic() < _broken_until:
        return
    try:
        pipe = client.pipeline(transaction=False)
        for node in nodes:
            pipe.lpush(ring_key(node), "1")
            pipe.ltrim(ring_key(node), 0, 0)
        for node in nodes:  # before: the pop may come before execute returns
            trace.mark("rung", node)
        pipe.execute()
    except redis.RedisError as exc:
        _broken_until = time.monotonic() + BREAKER_S
        log.warning("could not ring the fan-out of %s: %s", nodes, exc)


# A process rings at most once per this many seconds; the nodes marked
# meanwhile wait for the next ring, so a stream of small writes costs each
# node's worker a fan-out pass per ring, not one per write. A write after
# a quiet spell still rings at once; under load the fan-out waits at most
# this long more.
RING_SPACING_S = 0.005


class FanoutDoorbell:
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

    def ring(self, *nodes: str) -> None:
        with self.lock:
            self.pending.update(nodes)
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(
                    target=self._run, name="fanout-doorbell", daemon=True
                )
                self.thread.start()
        if not self.wake.is_set():  # setting it takes its condition's lock
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


doorbell = FanoutDoorbell()


def fanout_on(*nodes: str) -> None:
    """Ask ``nodes`` to fan out (marked at once: one wake of the doorbell)."""
    doorbell.ring(*nodes)


def adopt_on(node: str, client_id: uuid.UUID, source: str) -> None:
    _send(ADOPT, node, client_id.hex, source)


def copy_out_on(
    node: str, client_id: uuid.UUID, target: str, after: int, upto: int
) -> None:
    _send(COPY_OUT, node, client_id.hex, target, after, upto)


def copy_in_on(
    node: str, client_id: uuid.UUID, source: str, page: dict[str, Any]
) -> None:
    _send(COPY_IN, node, client_id.hex, source, page)


def ack_on(node: str, acks: dict[str, int]) -> None:
    _send(ACK, node, acks)


def drop_queue_on(node: str, client_id: uuid.UUID) -> None:
    _send(DROP_QUEUE, node, str(client_id))


def forget_cq_on(node: str, client_id: uuid.UUID, name: str) -> None:
    _send(FORGET_CQ, node, str(client_id), name)


def tick_on(node: str | None = None, *, judge: bool = True) -> bool:
    """Send a node's worker its periodic tick; return whether it was sent."""
    node = node or settings.DURABLECACHE_NODE_NAME
    # A tick nobody ran in time is superseded by the next one.
    return _send(
        TICK,
        node,
        node,
        judge,
        expires=max(2.0, settings.DURABLECACHE_HEARTBEAT_S * 3),
    )
