"""The per-process wake hub: one channel-layer message wakes many sockets."""

import asyncio
import uuid

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer

from queues import notify
from sockets.wakeups import WakeFlag, WakeHub


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
    # The channel layer's wake-up alone: with Redis the hub's pub/sub
    # subscribe wakes every socket once, c1 too (test_wake_channel.py).
    settings.DURABLECACHE_REDIS_URL = ""
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
    from sockets import wakeups

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


async def test_a_wake_flag_set_before_the_wait_is_kept_until_cleared():
    flag = WakeFlag()
    flag.set()
    async with asyncio.timeout(5):
        await flag.wait()  # returns at once
    flag.clear()
    assert not flag.is_set()
    waiting = asyncio.ensure_future(flag.wait())
    await asyncio.sleep(0)
    assert not waiting.done()
    flag.set()
    async with asyncio.timeout(5):
        await waiting
    assert flag.waiter is None


async def test_a_cancelled_wait_leaves_the_wake_flag_usable():
    flag = WakeFlag()
    waiting = asyncio.ensure_future(flag.wait())
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    flag.set()  # no waiter: nothing to resolve
    async with asyncio.timeout(5):
        await flag.wait()


class _FakeSocket:
    def __init__(self, client_id):
        self.client_id = client_id
        self.woken_as = client_id
        self.closed = asyncio.get_running_loop().create_future()

    def holds(self, client_id):
        return client_id == self.client_id

    async def close_from_hub(self, code, *, gone):
        self.closed.set_result((code, gone))

    def swept(self, *, primary, head, holder):
        raise AssertionError("not swept here")


async def test_a_close_message_closes_only_the_named_clients_sockets(settings):
    hub = WakeHub()
    a, b = uuid.uuid4(), uuid.uuid4()
    a1, a2, b1 = _FakeSocket(a), _FakeSocket(a), _FakeSocket(b)
    for sock in (a1, a2, b1):
        hub.attach(sock)
    try:
        await _joined(hub)
        await sync_to_async(notify.close_client, thread_sensitive=False)(
            a, 4410, settings.DURABLECACHE_NODE_NAME
        )
        async with asyncio.timeout(5):
            assert await a1.closed == (4410, True)
            assert await a2.closed == (4410, True)
        assert not b1.closed.done()
        await sync_to_async(notify.close_node, thread_sensitive=False)(
            settings.DURABLECACHE_NODE_NAME, 4503
        )
        async with asyncio.timeout(5):
            assert await b1.closed == (4503, False)  # a shutdown keeps clients
    finally:
        hub.stop()


async def test_a_detached_socket_is_not_closed():
    hub = WakeHub()
    a = uuid.uuid4()
    sock = _FakeSocket(a)
    hub.attach(sock)
    hub.detach(sock)
    try:
        assert hub.close(4410, [a.hex]) == 0
        assert await hub.sweep() == 0
    finally:
        hub.stop()


@pytest.mark.asyncio
async def test_a_refresh_rejoins_a_forgotten_group_and_wakes_every_socket(settings):
    # Redis restarted empty without the hub's receive failing: its group
    # membership is gone and the doorbells rung meanwhile reached nobody.
    hub = WakeHub()
    a, b = uuid.uuid4(), uuid.uuid4()
    a1, b1 = asyncio.Event(), asyncio.Event()
    hub.add(a, a1)
    hub.add(b, b1)
    try:
        await _joined(hub)
        layer = get_channel_layer()
        group = notify.wake_group(settings.DURABLECACHE_NODE_NAME)
        await layer.group_discard(group, hub.channel)  # what the restart did
        await hub.refresh()
        await _all_set([a1, b1])  # each reads its queue once
        a1.clear()
        await layer.group_send(group, {"type": "queue.wakeup_many", "clients": [a.hex]})
        await _all_set([a1])  # and the doorbells reach it again
    finally:
        hub.stop()
