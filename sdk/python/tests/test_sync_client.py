"""The blocking DurableClient, driven from worker threads against the fake server."""

import asyncio

import pytest

from durablecache_client import DurableClient

pytestmark = pytest.mark.asyncio


async def test_sync_client_connects_registers_receives_and_closes(
    fake_server, recorder
):
    client = DurableClient(
        fake_server.url,
        durable_id="app-1",
        token="tok-1",
        ack_interval=0.02,
        close_timeout=1.0,
    )
    try:
        connecting = asyncio.create_task(asyncio.to_thread(client.connect))
        conn = await fake_server.accept()
        await conn.welcome(pending_events=0)
        welcome = await asyncio.wait_for(connecting, 5)
        assert welcome.pending_event_count == 0

        region = client.region("r", recorder)
        registering = asyncio.create_task(
            asyncio.to_thread(region.register_keys, ["a"], True)
        )
        request = await conn.recv("register_interest")
        await conn.answer_register(request, [("a", "v1", 1)])
        assert await asyncio.wait_for(registering, 5) == 1
        assert region.get("a") == "v1"
        assert client.region("r") is region

        await asyncio.to_thread(client.ready_for_events)
        await conn.recv("ready")
        await conn.event("e1", 1, "a", "update", "v2", 2)
        await conn.marker(0, ["r"])
        calls = await recorder.wait_calls(2)
        assert [name for name, _ in calls] == ["after_update", "after_region_live"]
        assert region.get_entry("a") == ("v2", 2)
        assert (await asyncio.to_thread(client.wait_for_marker, 5)).regions == ["r"]
        await conn.wait_ack(1)

        await asyncio.wait_for(asyncio.to_thread(client.close, True), 5)
        frame = await conn.recv("close")
        assert frame["keepalive"] is True
    finally:
        await asyncio.to_thread(client.close)
    assert not client._runner.thread.is_alive()


async def test_blocking_call_from_a_listener_is_refused(fake_server):
    errors = []

    class Blocking:
        def after_create(self, event):
            try:
                client.region("r").register_keys(["b"])
            except RuntimeError as exc:
                errors.append(exc)

    client = DurableClient(fake_server.url, token="tok-1", close_timeout=1.0)
    try:
        connecting = asyncio.create_task(asyncio.to_thread(client.connect))
        conn = await fake_server.accept()
        await conn.welcome()
        await asyncio.wait_for(connecting, 5)
        client.region("r", Blocking())
        await asyncio.to_thread(client.ready_for_events)
        await conn.recv("ready")
        await conn.event("e1", 1, "a", "create", 1, 1)
        await conn.wait_ack(1)
    finally:
        await asyncio.to_thread(client.close)

    assert "blocking DurableClient call" in str(errors[0])


async def test_sync_client_registers_a_cq_with_its_listener(fake_server):
    events = []

    class Listener:
        def on_event(self, event):
            events.append((event.key, event.query_op))

    client = DurableClient(fake_server.url, token="tok-1", close_timeout=1.0)
    try:
        connecting = asyncio.create_task(asyncio.to_thread(client.connect))
        conn = await fake_server.accept()
        await conn.welcome()
        await asyncio.wait_for(connecting, 5)
        region = client.region("r")
        registering = asyncio.create_task(
            asyncio.to_thread(region.register_cq, "big", "value.n > 5", Listener())
        )
        request = await conn.recv("register_cq")
        await conn.answer_register(request, [("a", {"n": 9}, 1)])
        assert await asyncio.wait_for(registering, 5) == 1
        assert region.cq_results("big") == {"a": ({"n": 9}, 1)}
        await conn.event(
            "e1",
            1,
            "a",
            "update",
            {"n": 1},
            2,
            cq=[{"name": "big", "cq_op": "destroy"}],
        )
        await conn.wait_ack(1)
        closing = asyncio.create_task(asyncio.to_thread(region.close_cq, "big"))
        request = await conn.recv("close_cq")
        await conn.send({"type": "cq_closed", "id": request["id"], "name": "big"})
        await asyncio.wait_for(closing, 5)
    finally:
        await asyncio.to_thread(client.close)

    assert events == [("a", "destroy")]
    assert region.cq_results("big") is None
    assert len(region) == 0
