"""The doorbell: the only module that touches the channel layer, and the
Redis pub/sub channel of the fan-out's wake-ups.

Messages here say "look at your rows", or hand a socket the rows its
queue just got (a push, which a socket uses only when they follow what it
sent); losing one delays delivery until the consumer's next poll
(DURABLECACHE_POLL_S), it never loses data.
"""

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any

import redis
from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer

from common import redis_clients

log = logging.getLogger(__name__)
# A doorbell that Redis does not take in this time is given up (the poll
# heals it): a stuck send must never hold a worker thread or a request.
SEND_TIMEOUT_S = 5.0


async def aring(group: str, message: dict[str, Any]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    # Two tries: after a Redis restart the first send may meet a pooled
    # connection that died with the old server.
    for attempt in (1, 2):
        try:
            async with asyncio.timeout(SEND_TIMEOUT_S):
                await layer.group_send(group, message)
            return
        except Exception as exc:  # a doorbell must never fail a write
            if attempt == 2:
                log.warning("channel layer send to %s failed: %s", group, exc)


class _LayerLoop:
    """One event loop per process, in a daemon thread, for the channel-layer
    sends of sync code (Celery worker threads, request threads, daemon
    threads).

    ``async_to_sync`` outside an async context makes a new event loop per
    call, and channels_redis keeps its connections per loop: every such
    doorbell would open (and close) a Redis connection, and redis-py read
    its package metadata for each. Here the loop, and so the connections,
    live as long as the process.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread: threading.Thread | None = None
        self.pid = 0

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        with self.lock:
            alive = self.thread is not None and self.thread.is_alive()
            if self.loop is None or not alive or self.pid != os.getpid():
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=loop.run_forever, name="channel-layer", daemon=True
                )
                thread.start()
                self.loop, self.thread, self.pid = loop, thread, os.getpid()
            return self.loop

    def run(self, make: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run ``make()`` on the loop and wait for it (bounded: ``aring``
        gives up after two timeouts)."""
        future = asyncio.run_coroutine_threadsafe(make(), self._running_loop())
        try:
            future.result(timeout=2 * SEND_TIMEOUT_S + 1)
        except concurrent.futures.TimeoutError:
            future.cancel()
            log.warning("channel layer send did not finish; given up")


_layer_loop = _LayerLoop()


def _send_sync(make: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Run a channel-layer coroutine from sync code and wait for it.

    The in-memory layer (tests without Redis) hands messages to queues of
    the consumer's own loop, so it keeps asgiref's ``async_to_sync``, which
    runs the coroutine on that loop when called under ``sync_to_async``.
    """
    if isinstance(get_channel_layer(), InMemoryChannelLayer):

        async def send() -> None:  # a coroutine function, as asgiref wants
            await make()

        async_to_sync(send)()
    else:
        _layer_loop.run(make)


def wake_group(node: str) -> str:
    """The Daphne processes of ``node`` (sockets.wakeups.WakeHub)."""
    return f"wake.{node}"


WAKE_CHUNK = 1000


def wake_channel(node: str) -> str:
    """The Redis pub/sub channel of ``node``'s wake-ups (its hubs subscribe)."""
    return f"durablecache:wake:{node}"


# The fan-out's wake-ups go by Redis PUBLISH from the calling thread: one
# command, where a channel-layer group send is a hop to the layer's loop
# and several commands (its group's members, then a script per member).
# Closes and the dashboard's updates stay on the channel layer.
_wake_redis = redis_clients.new_slot()
# After a failed publish, skip publishing for a while (the channel layer
# carries the wake-ups meanwhile, and the hub's sweep heals a lost one).
_WAKE_BREAKER_S = 2.0
_wake_broken_until = [0.0]


def _wake_client() -> Any:
    from django.conf import settings

    url = settings.DURABLECACHE_REDIS_URL
    if not url:
        return None
    return redis_clients.client(_wake_redis, url)


def _publish_wakes(node: str, ids: list[str], pushed: str | None = None) -> bool:
    """Publish the wake-ups (and ``pushed``, a push message, first); False
    when there is no Redis to publish to or it failed (the caller sends
    them through the channel layer)."""
    client = _wake_client()
    if client is None or time.monotonic() < _wake_broken_until[0]:
        return False
    try:
        pipe = client.pipeline(transaction=False)
        if pushed is not None:
            pipe.publish(wake_channel(node), pushed)
        for start in range(0, len(ids), WAKE_CHUNK):
            pipe.publish(wake_channel(node), " ".join(ids[start : start + WAKE_CHUNK]))
        pipe.execute()
    except redis.RedisError as exc:
        _wake_broken_until[0] = time.monotonic() + _WAKE_BREAKER_S
        log.warning("could not publish the wake-ups of %s: %s", node, exc)
        return False
    return True


def ring_many(
    heads: dict[Any, int],
    node: str | None = None,
    *,
    pushes: dict[Any, tuple[int, list[int]]] | None = None,
    events: dict[int, list[Any]] | None = None,
) -> None:
    """Wake the sockets of these clients on ``node``: one message per
    ``WAKE_CHUNK`` clients, whatever the number of sockets.

    ``pushes`` (by Redis only): for some of them, the queue's head before
    the fan-out's append and the seqs it appended, all plain rows
    (``queues.services.queue_append_many``); ``events``: those seqs'
    frame fields (``push_fields``). They go as one push message: a socket
    that has sent through that head sends those events without reading
    its queue (``sockets.streams``); any other is woken to read as usual.
    """
    if not heads:
        return
    from django.conf import settings

    node = node or settings.DURABLECACHE_NODE_NAME
    pushed = None
    if pushes and events:
        pushed = json.dumps(
            {
                "push": {pk.hex: push for pk, push in pushes.items()},
                "events": events,
            },
            separators=(",", ":"),
        )
        ids = [pk.hex for pk in heads if pk not in pushes]
    else:
        ids = [client_id.hex for client_id in heads]
    if _publish_wakes(node, ids, pushed):
        return
    ids = [client_id.hex for client_id in heads]
    group = wake_group(node)

    async def send_all() -> None:
        for start in range(0, len(ids), WAKE_CHUNK):
            chunk = ids[start : start + WAKE_CHUNK]
            await aring(group, {"type": "queue.wakeup_many", "clients": chunk})

    _send_sync(send_all)


def close_client(client_id: Any, code: int, node: str) -> None:
    """Ask the Daphne processes of ``node`` (where the client's socket is) to
    close its socket with ``code``; its client is gone (sockets.wakeups)."""
    message = {"type": "sockets.close", "code": code, "clients": [client_id.hex]}
    _send_sync(lambda: aring(wake_group(node), message))


def cq_closed(client_id: Any, name: str, node: str) -> None:
    """Tell the client's socket on ``node`` that an operator closed its CQ
    ``name`` (an unsolicited ``cq_closed``, sockets.wakeups)."""
    message = {"type": "sockets.cq_closed", "name": name, "clients": [client_id.hex]}
    _send_sync(lambda: aring(wake_group(node), message))


def close_node(node: str, code: int) -> None:
    """Ask every subscriber socket on ``node`` to close with ``code``."""
    message = {"type": "sockets.close", "code": code}
    _send_sync(lambda: aring(wake_group(node), message))


DASHBOARD_GROUP = "dashboard"


class _Feed:
    """Send dashboard updates from one daemon thread, dropping when behind.

    Updates are for eyes only (pages also refresh on their own): a caller
    never waits on Redis, and a burst beyond ``LIMIT`` pending is dropped.
    """

    LIMIT = 1000

    def __init__(self) -> None:
        self.pending: queue.Queue[dict[str, Any]] = queue.Queue(self.LIMIT)
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None

    def put(self, message: dict[str, Any]) -> None:
        with contextlib.suppress(queue.Full):
            self.pending.put_nowait(message)
        with self.lock:
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(
                    target=self._run, name="dashboard-feed", daemon=True
                )
                self.thread.start()

    def _run(self) -> None:
        while True:
            message = self.pending.get()
            update = {"type": "dashboard.update", "update": message}

            async def send(update: dict[str, Any] = update) -> None:
                await aring(DASHBOARD_GROUP, update)

            _send_sync(send)


_feed = _Feed()


def dashboard(update: dict[str, Any]) -> None:
    """Tell open dashboard pages that something changed (best effort)."""
    _feed.put(update)
