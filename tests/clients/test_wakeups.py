"""The per-process wake hub: one channel-layer message wakes many sockets."""

import asyncio
import uuid

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer

from clients.wakeups import WakeHub
from queues import notify


async def _joined(hub):
    """The hub joined its group (a flag set by its own task: polled)."""
    async with asyncio.timeout(5):
        while not hub.joined:  # noqa: ASYNC110
            await asyncio.sleep(0.01)


async def _all_set(events):
    async with asyncio.timeout(5):
        await asyncio.gather(*(event.wait() for event in events))


@pytest.mark.asyncio
async def test_one_message_wakes_every_socket_of_the_named_clients(settings):
    hub = WakeHub()
    a, b, c = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    a1, a2, b1, c1 = (asyncio.Event() for _ in range(4))
    hub.add(a, a1)
    hub.add(a, a2)  # two sockets of one client (a takeover in progress)
    hub.add(b, b1)
    hub.add(c, c1)
    try:
        await _joined(hub)
        layer = get_channel_layer()
        await layer.group_send(
            notify.wake_group(settings.DURABLECACHE_NODE_NAME),
            {"type": "queue.wakeup_many", "clients": [a.hex, b.hex]},
        )
        await _all_set([a1, a2, b1])
        assert not c1.is_set()
    finally:
        hub.stop()


@pytest.mark.asyncio
async def test_ring_many_from_a_sync_worker_thread_reaches_the_hub(settings):
    """The fan-out runs in a worker thread: one send for all its clients."""
    from clients import wakeups

    ids = [uuid.uuid4() for _ in range(2500)]  # more than one chunk
    events = [asyncio.Event() for _ in ids]
    for client_id, event in zip(ids, events, strict=True):
        wakeups.hub.add(client_id, event)
    try:
        await _joined(wakeups.hub)
        heads = dict.fromkeys(ids, 1)
        await sync_to_async(notify.ring_many, thread_sensitive=False)(heads)
        await _all_set(events)
    finally:
        for client_id, event in zip(ids, events, strict=True):
            wakeups.hub.discard(client_id, event)
        assert not wakeups.hub.sockets
        wakeups.hub.stop()


def test_discard_forgets_a_socket():
    hub = WakeHub()
    client_id = uuid.uuid4()
    event = asyncio.Event()
    hub.sockets[client_id].add(event)
    hub.discard(client_id, event)
    hub.discard(client_id, event)  # twice is harmless
    assert client_id not in hub.sockets
    assert hub.wake([client_id.hex]) == 0
