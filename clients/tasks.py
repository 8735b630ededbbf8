"""Celery door: each node's worker consumes the queue ``node.<name>``.

Tasks carry ids only and are idempotent; a lost one is healed by the next
``tick`` (rows are the truth; docs/operations.md).
"""

import logging
import time
import uuid

from celery import shared_task
from django.conf import settings

from clients import fanout, maintenance
from queues import services as queue_services

log = logging.getLogger(__name__)


def node_queue(node: str) -> str:
    return f"node.{node}"


# After a failed send, skip sends for a while: a broker outage must not make
# every write wait for a connect timeout. The periodic tick heals what is
# skipped (rows are the truth).
BREAKER_S = 2.0
_broken_until = 0.0


def _send(task, node: str, *args, expires: float | None = None) -> None:
    """Ring a node's worker; a broker outage only delays the work."""
    global _broken_until
    if time.monotonic() < _broken_until:
        return
    try:
        task.apply_async(
            args=list(args), queue=node_queue(node), retry=False, expires=expires
        )
    except Exception as exc:  # the periodic tick heals a lost doorbell
        _broken_until = time.monotonic() + BREAKER_S
        log.warning("could not enqueue %s for %s: %s", task.name, node, exc)


@shared_task(name="clients.fanout", ignore_result=True)
def fanout_task(node: str) -> int:
    return fanout.fanout_node(node)


@shared_task(name="clients.drop_queue", ignore_result=True)
def drop_queue_task(client_id: str) -> bool:
    return queue_services.queue_drop(client_id=uuid.UUID(client_id))


@shared_task(name="clients.tick", ignore_result=True)
def tick_task(node: str) -> None:
    maintenance.tick(node)


def fanout_on(node: str) -> None:
    _send(fanout_task, node, node)


def drop_queue_on(node: str, client_id: uuid.UUID) -> None:
    _send(drop_queue_task, node, str(client_id))


def tick_on(node: str | None = None) -> None:
    node = node or settings.DURABLECACHE_NODE_NAME
    # A tick nobody ran in time is superseded by the next one.
    _send(
        tick_task, node, node, expires=max(2.0, settings.DURABLECACHE_HEARTBEAT_S * 3)
    )
