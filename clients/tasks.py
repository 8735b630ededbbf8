"""Celery door: each node's worker consumes the queue ``node.<name>``.

Tasks carry ids only and are idempotent; a lost one is healed by the next
``tick`` (rows are the truth; docs/operations.md).
"""

import contextlib
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
    # Before reading the log: a write committed after this sends a new task.
    _release_fanout(node)
    return fanout.fanout_node(node)


# While a fan-out task for a node waits in the broker, writers send none:
# that task will read their events too. A Celery publish cost ~1 ms of a
# node's CPU per write (~10 % of Daphne's at 100 writes/s) and the worker
# as much per task; a claim is one Redis SET. The claim expires, so a task
# lost with its worker frees it; the tick heals such a loss meanwhile.
FANOUT_CLAIM_S = 5  # seconds; redis-py takes an int
_claims: dict[str, Any] = {"pid": 0, "client": None}


def _claim_client() -> Any:
    """Redis of the broker, or None when the broker is not Redis (tests)."""
    url = str(settings.CELERY_BROKER_URL or "")
    if not url.startswith(("redis://", "rediss://", "unix://")):
        return None
    if _claims["pid"] != os.getpid():
        _claims["client"] = redis.Redis.from_url(
            url, socket_timeout=1, socket_connect_timeout=1
        )
        _claims["pid"] = os.getpid()
    return _claims["client"]


def _claim_key(node: str) -> str:
    return f"durablecache:fanout-queued:{node}"


def _claim_fanout(node: str) -> bool:
    """Whether to send a fan-out task: none is waiting (ours is now)."""
    client = _claim_client()
    if client is None:
        return True
    try:
        return bool(client.set(_claim_key(node), "1", nx=True, ex=FANOUT_CLAIM_S))
    except redis.RedisError:
        return True  # _send's breaker decides


def _release_fanout(node: str) -> None:
    client = _claim_client()
    if client is not None:
        with contextlib.suppress(redis.RedisError):
            client.delete(_claim_key(node))


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


class Doorbell:
    """Coalesce fan-out doorbells: at most one send pending per node.

    Writers only mark the node and return, so a REST write never waits for
    the broker; one daemon thread per process sends the tasks. Under load
    many writes share one task, and one fan-out moves them all in a batch.
    A doorbell lost with the process is healed by the next tick.
    """

    def __init__(self) -> None:
        self.pending: set[str] = set()
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.thread: threading.Thread | None = None

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
        while True:
            self.wake.wait()
            self.wake.clear()
            with self.lock:
                nodes, self.pending = self.pending, set()
            for node in sorted(nodes):
                if _claim_fanout(node) and not _send(fanout_task, node, node):
                    _release_fanout(node)  # not sent: the next write tries


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
