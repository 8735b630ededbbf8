"""Celery door: each node's worker consumes the queue ``node.<name>``.

Tasks carry ids only, call one service each and are idempotent; a lost
one is healed by the next ``tick`` (rows are the truth;
docs/operations.md). They are sent by name (``clients.dispatch``), so no
service imports this module. ``FanoutListener`` is the worker's side of
the fan-out doorbell.
"""

import itertools
import logging
import threading
import uuid
from typing import Any

import redis
from celery import shared_task
from django.conf import settings
from django.db import OperationalError

from clients import dispatch, fanout, maintenance, replication, services
from common import threads, trace
from queues import services as queue_services

log = logging.getLogger(__name__)


@shared_task(name=dispatch.FANOUT, ignore_result=True)
def fanout_task(node: str) -> int:
    """The fan-out doorbell when the broker is not Redis (no listener)."""
    return fanout.fanout_node(node)


@shared_task(name=dispatch.DROP_QUEUE, ignore_result=True)
def drop_queue_task(client_id: str) -> bool:
    return queue_services.queue_drop(client_id=uuid.UUID(client_id))


@shared_task(name=dispatch.FORGET_CQ, ignore_result=True)
def forget_cq_task(client_id: str, name: str) -> int:
    return services.cq_forget_here(client_id=uuid.UUID(client_id), name=name)


@shared_task(name=dispatch.ADOPT, ignore_result=True)
def adopt_task(client_id: str, source: str) -> None:
    replication.adopt(
        client_id=uuid.UUID(client_id),
        node=settings.DURABLECACHE_NODE_NAME,
        source=source,
    )


@shared_task(name=dispatch.COPY_OUT, ignore_result=True)
def copy_out_task(client_id: str, target: str, after: int, upto: int) -> None:
    replication.copy_page_send(
        client_id=uuid.UUID(client_id),
        node=settings.DURABLECACHE_NODE_NAME,
        target=target,
        after=after,
        upto=upto,
    )


@shared_task(name=dispatch.COPY_IN, ignore_result=True)
def copy_in_task(client_id: str, source: str, page: dict[str, Any]) -> None:
    replication.copy_in(
        client_id=uuid.UUID(client_id),
        node=settings.DURABLECACHE_NODE_NAME,
        source=source,
        page=page,
    )


@shared_task(name=dispatch.ACK, ignore_result=True)
def ack_task(acks: dict[str, int]) -> int:
    return queue_services.queue_ack_many(
        {uuid.UUID(pk): int(up_to) for pk, up_to in acks.items()}
    )


@shared_task(name=dispatch.TICK, ignore_result=True)
def tick_task(node: str, judge: bool = True) -> None:
    # One group of chores a tick, in turn (``maintenance.CHORES``).
    maintenance.tick(node, judge=judge, turn=next(_tick_turns))


_tick_turns = itertools.count()


LISTEN_S = 1  # each BLPOP waits this long (whole seconds) before the next


# A pass that meets a SQLite store still locked after its busy timeout (a
# long writer of another process) is tried again at once, this many times
# in all: contention, not a failure.
LOCKED_TRIES = 3


class FanoutListener:
    """The worker's side of the fan-out doorbell: one daemon thread that
    pops this node's ring (``dispatch.ring_key``) and fans out, whatever
    Celery's pool is doing."""

    def __init__(self, node: str) -> None:
        self.node = node
        self.thread: threading.Thread | None = None
        self.stopping = threading.Event()
        self.connections = threads.Connections()  # used by the thread only

    def start(self) -> bool:
        """Start listening; False without a Redis broker (nothing to hear)."""
        if dispatch._redis_client() is None:
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
                popped = client.blpop([dispatch.ring_key(self.node)], timeout=LISTEN_S)
            except redis.RedisError as exc:
                log.warning("fan-out listener of %s: %s", self.node, exc)
                self.stopping.wait(LISTEN_S)
                continue
            if popped is not None:
                trace.mark("popped", self.node)
                self.fan_out()

    def stop(self, timeout: float = LISTEN_S + 6) -> None:
        """End the thread (within one BLPOP wait); the worker never needs
        to: the thread dies with its process."""
        self.stopping.set()
        if self.thread is not None:
            self.thread.join(timeout)

    def fan_out(self) -> None:
        # The connections are checked as around a task (durablecache.celery)
        # but health-checked only after an idle second: a pass then starts
        # with its own statements, not a SELECT 1 on each database.
        for attempt in range(1, LOCKED_TRIES + 1):
            try:
                self.connections.call(fanout.fanout_node, self.node)
                return
            except OperationalError as exc:
                if "locked" not in str(exc):  # SQLite's busy timeout passed
                    log.exception("fan-out of %s failed", self.node)
                    return
                if attempt == LOCKED_TRIES:
                    log.warning(
                        "fan-out of %s found the store locked %d times; the "
                        "next ring or tick fans out",
                        self.node,
                        attempt,
                    )
                    return
                self.stopping.wait(0.05 * attempt)
            except Exception:  # the tick fans out too: delayed, not lost
                log.exception("fan-out of %s failed", self.node)
                return


def listen_for_fanout(node: str) -> FanoutListener:
    """Start this worker process's fan-out listener (``worker_ready``)."""
    listener = FanoutListener(node)
    listener.start()
    return listener
