"""The fan-out's wake-ups over Redis pub/sub (``notify.wake_channel``)."""

import asyncio
import threading
import uuid

import pytest
from asgiref.sync import sync_to_async

from queues import notify
from sockets.wakeups import WakeHub


async def _subscribed(server, node):
    async with asyncio.timeout(5):
        while not server.pubsub_numsub(notify.wake_channel(node))[0][1]:  # noqa: ASYNC110
            await asyncio.sleep(0.01)


async def _all_set(events):
    async with asyncio.timeout(5):
        await asyncio.gather(*(event.wait() for event in events))


@pytest.mark.asyncio
async def test_a_published_wake_up_wakes_only_the_named_clients(wake_redis, settings):
    hub = WakeHub()
    ids = [uuid.uuid4() for _ in range(2500)]  # more than one message
    events = [asyncio.Event() for _ in ids]
    other, other_event = uuid.uuid4(), asyncio.Event()
    for client_id, event in zip(ids, events, strict=True):
        hub.add(client_id, event)
    try:
        await _subscribed(wake_redis, settings.DURABLECACHE_NODE_NAME)
        await _all_set(events)  # the subscribe woke every socket once
        for event in events:
            event.clear()
        hub.add(other, other_event)
        await sync_to_async(notify.ring_many, thread_sensitive=False)(
            dict.fromkeys(ids, 1)
        )
        await _all_set(events)
        assert not other_event.is_set()
        assert notify._wake_broken_until[0] == 0.0  # published, not sent by layer
    finally:
        hub.stop()


@pytest.mark.asyncio
async def test_another_nodes_wake_up_is_not_heard(wake_redis, settings):
    hub = WakeHub()
    client_id, event = uuid.uuid4(), asyncio.Event()
    later_id, later = uuid.uuid4(), asyncio.Event()
    hub.add(client_id, event)
    hub.add(later_id, later)
    try:
        await _subscribed(wake_redis, settings.DURABLECACHE_NODE_NAME)
        await _all_set([event, later])  # the subscribe's wake of every socket
        event.clear()
        later.clear()
        await sync_to_async(notify.ring_many, thread_sensitive=False)(
            {client_id: 1}, "some-other-node"
        )
        # A wake-up of this node published after it: once it has arrived,
        # the other node's (published first) would have too.
        await sync_to_async(notify.ring_many, thread_sensitive=False)({later_id: 1})
        await _all_set([later])
        assert not event.is_set()
    finally:
        hub.stop()


def test_without_redis_the_wake_ups_go_by_the_channel_layer(settings, monkeypatch):
    settings.DURABLECACHE_REDIS_URL = ""
    sent = []
    monkeypatch.setattr(notify, "_send_sync", lambda make: sent.append(make))
    notify.ring_many({uuid.uuid4(): 1}, "node-1")
    assert len(sent) == 1


def test_a_failed_publish_falls_back_to_the_channel_layer(settings, monkeypatch):
    settings.DURABLECACHE_REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens
    monkeypatch.setattr(notify, "_wake_redis", {"pid": 0, "client": None})
    monkeypatch.setattr(notify, "_wake_broken_until", [0.0])
    sent = []
    monkeypatch.setattr(notify, "_send_sync", lambda make: sent.append(make))
    notify.ring_many({uuid.uuid4(): 1}, "node-1")
    assert len(sent) == 1
    assert notify._wake_broken_until[0] > 0  # and the next ones skip Redis
    notify.ring_many({uuid.uuid4(): 1}, "node-1")
    assert len(sent) == 2


@pytest.mark.parametrize("delay", [0.0, 0.0005, 0.001, 0.002, 0.005])
def test_the_wake_loop_ends_when_its_event_loop_closes(wake_redis, delay):
    """A cancellation that lands while the hub connects or reads ends the
    task: an event loop's close (a Daphne's shutdown) waits for it."""
    closed = threading.Event()

    def run():
        async def main():
            WakeHub()._start(asyncio.get_running_loop())
            await asyncio.sleep(delay)

        for _ in range(5):
            asyncio.run(main())  # cancels the hub's tasks and waits for them
        closed.set()

    threading.Thread(target=run, daemon=True).start()
    assert closed.wait(30), "the event loop's close waited on the wake loop"
