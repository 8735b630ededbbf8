"""The doorbell: the only module that touches the channel layer.

Messages here only say "look at your rows"; losing one delays delivery
until the consumer's next poll (DURABLECACHE_POLL_S), it never loses data.
"""

import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

log = logging.getLogger(__name__)


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
            await layer.group_send(group, message)
            return
        except Exception as exc:  # a doorbell must never fail a write
            if attempt == 2:
                log.warning("channel layer send to %s failed: %s", group, exc)


def ring_many(heads: dict[Any, int]) -> None:
    async def send_all() -> None:
        for client_id, head in heads.items():
            await aring(group_for(client_id), {"type": "queue.wakeup", "head": head})

    if heads:
        async_to_sync(send_all)()


def close_client(client_id: Any, code: int) -> None:
    """Ask the consumer holding this client's socket to close it with ``code``."""
    async_to_sync(aring)(group_for(client_id), {"type": "queue.close", "code": code})


def close_node(node: str, code: int) -> None:
    """Ask every consumer on ``node`` to close its socket with ``code``."""
    async_to_sync(aring)(node_group(node), {"type": "node.close", "code": code})
