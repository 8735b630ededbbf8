"""The Python client recovers by key by itself against a real node: after
its queue overflowed while it was away (a ``gap``), and after its queue was
lost to expiry (``-1``). Either way its local cache ends equal to the
node's entries, and the listener hears each changed key once as a resync
event (docs/protocol.md, "Bounded queues, gaps and resync" and "Catching up
by key"; sdk/python/README.md, "Recovery")."""

import asyncio

import pytest

from durablecache_client import AsyncDurableClient
from tests.integration.harness import create_region, wait_for
from tests.integration.recording import Recorder
from tests.integration.test_client_library import (
    WAIT_S,
    TcpProxy,
    client_state,
    fresh,
    put,
    until,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


class ClosableProxy(TcpProxy):
    """A ``TcpProxy`` that can also refuse new connections, as a network
    that stays down: the client keeps trying, and is away meanwhile."""

    refusing = False

    async def _relay(self, reader, writer) -> None:
        if self.refusing:
            writer.transport.abort()
            return
        await super()._relay(reader, writer)

    def go_down(self) -> None:
        self.refusing = True
        self.cut()


def server_entries(live, region):
    """The region's live entries as the client's cache holds them."""
    status, body = live.rest(
        "GET", f"/api/v1/regions/{region}/entries/?limit=1000", live.user
    )
    assert status == 200, body
    assert body["next"] is None
    return {e["key"]: (e["value"], e["version"]) for e in body["results"]}


def destroy(live, region, key):
    status, body = live.rest(
        "DELETE", f"/api/v1/regions/{region}/entries/{key}/", live.user
    )
    assert status in (200, 204), body


def write_while_away(live, region):
    """Seven changes of six keys: more than a queue of three holds."""
    put(live, live.user, region, "k0", 1)
    put(live, live.user, region, "k1", 1)
    put(live, live.user, region, "k3", 1)
    put(live, live.user, region, "k4", 1)
    destroy(live, region, "k2")
    put(live, live.user, region, "k5", 1)
    put(live, live.user, region, "k0", 2)


async def subscribed(client, region, recorder):
    await client.connect()
    cache = client.region(region, recorder)
    assert await cache.register_all_keys(durable=True) == 3
    await client.ready_for_events()
    await client.wait_for_marker(timeout=WAIT_S)
    return cache


def resynced_keys(recorder):
    return {e.key: e.op for e in recorder.events() if e.is_resync}


CHANGED_WHILE_AWAY = {
    "k0": "update",
    "k1": "update",
    "k2": "destroy",
    "k3": "create",
    "k4": "create",
    "k5": "create",
}


async def away_and_back(live, name, back_when, **options):
    """A durable client of a new region (k0..k2) goes away (its network
    down), ``write_while_away`` runs, and it comes back once
    ``back_when(durable_id)`` holds; a live write follows. Returns the
    recorder, the reconnect welcomes and the marker after the return;
    asserts the local cache equals the node's entries."""
    region = create_region(live, name)
    for key in ("k0", "k1", "k2"):
        put(live, live.user, region, key, 0)
    durable_id = fresh(name)
    proxy = await ClosableProxy(live.nodes["node-1"]["port"]).start()
    recorder, reconnected = Recorder(), []
    client = AsyncDurableClient(
        proxy.url,
        durable_id=durable_id,
        token=live.user,
        on_reconnect=reconnected.append,
        reconnect_max_delay=0.2,
        **options,
    )
    try:
        cache = await subscribed(client, region, recorder)
        proxy.go_down()
        await asyncio.to_thread(write_while_away, live, region)
        await asyncio.to_thread(wait_for, lambda: back_when(durable_id), timeout=WAIT_S)
        proxy.refusing = False
        await until(lambda: reconnected)
        marker = await client.wait_for_marker(timeout=WAIT_S)
        await asyncio.to_thread(put, live, live.user, region, "k4", 2)
        await until(lambda: cache.get("k4") == 2)
        expected = await asyncio.to_thread(server_entries, live, region)
        assert cache.snapshot() == expected
    finally:
        await client.close(keepalive=False)
        await proxy.close()
    return recorder, reconnected, marker


async def test_an_overflowed_queue_is_recovered_by_key(live):
    gaps = []

    def gap_recorded(durable_id):
        status, body = client_state(live, live.user, durable_id)
        return status == 200 and body["gap"] is not None

    recorder, reconnected, marker = await away_and_back(
        live, "overflow", gap_recorded, max_queued=3, on_gap=gaps.append
    )
    assert reconnected[0].gap is not None
    assert marker.resynced > 0
    [gap] = gaps
    assert (gap.reason, gap.dropped) == ("overflow", 3)
    assert resynced_keys(recorder) == CHANGED_WHILE_AWAY
    assert recorder.events()[-1].value == 2  # then live events, as before


async def test_a_queue_lost_to_expiry_is_recovered_by_key(live):
    def expired(durable_id):
        return client_state(live, live.user, durable_id)[0] == 404

    # timeout 0: expires as soon as the expiry check sees it away
    recorder, reconnected, _ = await away_and_back(live, "expired", expired, timeout=0)
    assert reconnected[0].pending_event_count == -1
    assert resynced_keys(recorder) == CHANGED_WHILE_AWAY
