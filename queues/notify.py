"""The doorbell: the only module that touches the channel layer.

Messages here only say "look at your rows"; losing one delays delivery
until the consumer's next poll (DURABLECACHE_POLL_S), it never loses data.
"""

import asyncio
import contextlib
import logging
import queue
import threading
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

log = logging.getLogger(__name__)
# A doorbell that Redis does not take in this time is given up (the poll
# heals it): a stuck send must never hold a worker thread or a request.
SEND_TIMEOUT_S = 5.0


def group_for(client_id: Any) -> str:
    return f"queue.{client_id.hex}"


def node_group(node: str) -> str:
    return f"node.{node}"


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


def wake_group(node: str) -> str:
    """The Daphne processes of ``node`` (clients.wakeups.WakeHub)."""
    return f"wake.{node}"


WAKE_CHUNK = 1000


def ring_many(heads: dict[Any, int], node: str | None = None) -> None:
    """Wake the sockets of these clients on ``node``: one message per
    ``WAKE_CHUNK`` clients, whatever the number of sockets."""
    if not heads:
        return
    from django.conf import settings

    group = wake_group(node or settings.DURABLECACHE_NODE_NAME)
    ids = [client_id.hex for client_id in heads]

    async def send_all() -> None:
        for start in range(0, len(ids), WAKE_CHUNK):
            chunk = ids[start : start + WAKE_CHUNK]
            await aring(group, {"type": "queue.wakeup_many", "clients": chunk})

    async_to_sync(send_all)()


def close_client(client_id: Any, code: int) -> None:
    """Ask the consumer holding this client's socket to close it with ``code``."""
    async_to_sync(aring)(group_for(client_id), {"type": "queue.close", "code": code})


def close_node(node: str, code: int) -> None:
    """Ask every consumer on ``node`` to close its socket with ``code``."""
    async_to_sync(aring)(node_group(node), {"type": "node.close", "code": code})


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
            async_to_sync(aring)(
                DASHBOARD_GROUP, {"type": "dashboard.update", "update": message}
            )


_feed = _Feed()


def dashboard(update: dict[str, Any]) -> None:
    """Tell open dashboard pages that something changed (best effort)."""
    _feed.put(update)
