"""Delivery: replay, marker, live events, the cache rule, duplicates, acks."""

import asyncio

import pytest

from durablecache_client import CacheListener, EntryEvent, RegionLiveEvent

pytestmark = pytest.mark.asyncio


async def connect_registered(fake_server, make_client, run, listener, **options):
    """Connect, register all keys of region "r" with an image, return both."""
    client = make_client(**options)
    _, conn = await fake_server.connect(client, pending_events=2)
    region = client.region("r", listener)

    async def script():
        request = await conn.recv("register_interest")
        await conn.answer_register(request, [("k", "v3", 3)])

    await run(region.register_all_keys(durable=True), script)
    return client, conn, region


async def test_replayed_events_then_marker_then_live_events_in_order(
    fake_server, make_client, run, recorder
):
    client, conn, region = await connect_registered(
        fake_server, make_client, run, recorder, durable_id="app-1"
    )
    other = type(recorder)()
    client.region("s", other)

    await client.ready_for_events()
    assert (await conn.recv())["type"] == "ready"
    await conn.event("e1", 1, "a", "create", "x", 1, replay=True)
    await conn.event("e2", 2, "k", "update", "v4", 4, replay=True)
    await conn.marker(2, ["r", "s"])
    await conn.event("e3", 3, "a", "destroy", None, 2)
    await conn.event("e4", 4, None, "region_clear", None, None)
    calls = await recorder.wait_calls(5)

    assert [name for name, _ in calls] == [
        "after_create",
        "after_update",
        "after_region_live",
        "after_destroy",
        "after_region_clear",
    ]
    replayed = [event.is_replay for _, event in calls if isinstance(event, EntryEvent)]
    assert replayed == [True, True, False, False]
    assert calls[2][1] == RegionLiveEvent(region="r", replayed=2)
    first = calls[0][1]
    assert (first.id, first.seq, first.region, first.key) == ("e1", 1, "r", "a")
    assert (first.op, first.value, first.version) == ("create", "x", 1)
    assert first.ts == "2025-01-01T00:00:00Z"
    assert first.timestamp.year == 2025
    assert calls[4][1].key is None
    # The marker names "s" too: its listener hears that it is live.
    assert [name for name, _ in other.calls] == ["after_region_live"]
    assert (await client.wait_for_marker(5)).replayed == 2
    assert region.snapshot() == {}


async def test_old_replay_does_not_overwrite_newer_cached_value(
    fake_server, make_client, run, recorder
):
    client, conn, region = await connect_registered(
        fake_server, make_client, run, recorder
    )

    await client.ready_for_events()
    await conn.event("e1", 1, "k", "update", "v2", 2, replay=True)
    await conn.event("e2", 2, "k", "invalidate", None, 3, replay=True)
    await conn.event("e3", 3, "k", "update", "v5", 5)
    await conn.event("e4", 4, "k", "destroy", None, 6)
    await conn.event("e5", 5, "k", "update", "v4", 4, replay=True)
    calls = await recorder.wait_calls(5)

    # Listeners see every event; the cache only the newer ones.
    assert [e.version for _, e in calls] == [2, 3, 5, 6, 4]
    assert "k" not in region
    assert region.version_of("k") == 6


async def test_image_fills_cache_and_newer_live_event_replaces_it(
    fake_server, make_client, run, recorder
):
    client, conn, region = await connect_registered(
        fake_server, make_client, run, recorder
    )

    await client.ready_for_events()
    await conn.event("e1", 1, "k", "invalidate", None, 4)
    await recorder.wait_calls(1)

    assert region.get_entry("k") == (None, 4)


async def test_duplicate_event_ids_are_dropped_but_still_acked(
    fake_server, make_client, run, recorder
):
    client, conn, _ = await connect_registered(fake_server, make_client, run, recorder)

    await client.ready_for_events()
    await conn.event("e1", 1, "a", "create", 1, 1)
    await conn.event("e1", 2, "a", "create", 1, 1)
    await conn.event("e2", 3, "a", "update", 2, 2)
    await conn.wait_ack(3)

    assert [event.id for _, event in recorder.calls] == ["e1", "e2"]
    assert client.duplicates_dropped == 1


async def test_ack_names_highest_seq_and_is_sent_only_when_it_advances(
    fake_server, make_client, run, recorder
):
    client, conn, _ = await connect_registered(fake_server, make_client, run, recorder)

    await client.ready_for_events()
    for seq, version in ((3, 4), (5, 5), (9, 6)):  # gaps in seq are allowed
        await conn.event(f"e{seq}", seq, "k", "update", seq, version)
    await conn.wait_ack(9)
    await conn.event("e12", 12, "k", "update", 12, 7)
    await conn.wait_ack(12)

    assert conn.ack_log[-1] == 12
    # Many ack intervals went by: an unchanged high-water is never re-sent.
    assert conn.ack_log == sorted(set(conn.ack_log))
    assert set(conn.ack_log) <= {3, 5, 9, 12}


async def test_event_frame_with_cq_matches_is_passed_through(
    fake_server, make_client, run, recorder
):
    client, conn, _ = await connect_registered(fake_server, make_client, run, recorder)

    await client.ready_for_events()
    await conn.event(
        "e1",
        1,
        "o1",
        "create",
        {"total": 150},
        1,
        cq=[{"name": "big", "cq_op": "create"}],
    )
    (_, event), *_ = await recorder.wait_calls(1)

    assert event.cq == [{"name": "big", "cq_op": "create"}]
    assert event.to_json_dict()["cq"] == [{"name": "big", "cq_op": "create"}]


async def test_async_listener_can_await_client_requests(fake_server, make_client, run):
    registered = asyncio.Event()

    class Chaining(CacheListener):
        async def after_create(self, event):
            # Runs off the socket reader, so the reply can still arrive.
            await client.region("r").register_keys([event.value])
            registered.set()

    client, conn, _ = await connect_registered(
        fake_server, make_client, run, Chaining()
    )

    await client.ready_for_events()
    await conn.recv("ready")
    await conn.event("e1", 1, "a", "create", "b", 1)
    request = await conn.recv("register_interest")
    await conn.answer_register(request, [("b", 1, 1)])

    await asyncio.wait_for(registered.wait(), 5)
    assert request["keys"] == ["b"]


async def test_listener_exception_does_not_stop_delivery(
    fake_server, make_client, run, recorder
):
    class Failing(type(recorder)):
        def after_create(self, event):
            super().after_create(event)
            raise RuntimeError("boom")

    listener = Failing()
    client, conn, _ = await connect_registered(fake_server, make_client, run, listener)

    await client.ready_for_events()
    await conn.event("e1", 1, "a", "create", 1, 1)
    await conn.event("e2", 2, "a", "update", 2, 2)

    assert [n for n, _ in await listener.wait_calls(2)] == [
        "after_create",
        "after_update",
    ]
    await conn.wait_ack(2)


async def test_malformed_and_unknown_frames_are_ignored(
    fake_server, make_client, run, recorder
):
    client, conn, _ = await connect_registered(fake_server, make_client, run, recorder)

    await client.ready_for_events()
    await conn.ws.send("not json")
    await conn.ws.send(b"\x00binary")
    await conn.send({"type": "mystery"})
    await conn.send({"type": "image", "id": "nobody", "region": "bad name!"})
    await conn.send({"type": "event", "id": "broken"})  # no seq, region, op
    await conn.event("e1", 1, "a", "create", 1, 1)

    (_, event), *_ = await recorder.wait_calls(1)
    assert event.id == "e1"
    assert client.connected


async def test_async_listener_may_close_the_client(fake_server, make_client, run):
    class Closing(CacheListener):
        async def after_create(self, event):
            await client.close(keepalive=True)

    client, conn, _ = await connect_registered(
        fake_server, make_client, run, Closing(), durable_id="app-1"
    )

    await client.ready_for_events()
    await conn.recv("ready")
    await conn.event("e1", 1, "a", "create", 1, 1)

    assert (await conn.recv("close"))["keepalive"] is True
    await asyncio.wait_for(client.wait_closed(), 5)
    assert client.closed
