"""Reconnecting: restore registrations and ready, per-session acks, close."""

import asyncio

import pytest
from conftest import register_answered
from websockets.exceptions import ConnectionClosed

from durablecache_client import ClientClosedError, FatalConnectionError

pytestmark = pytest.mark.asyncio


async def test_reconnect_after_drop_restores_registrations_and_ready(
    fake_server, make_client, recorder
):
    reconnected = []
    client = make_client(durable_id="app-1", on_reconnect=reconnected.append)
    _, conn = await fake_server.connect(client)
    region = client.region("r", recorder)
    await register_answered(conn, region.register_keys(["a", "b"], durable=True))
    await register_answered(conn, region.register_regex("x.*"))
    await register_answered(conn, region.register_cq("big", "value > 1", durable=True))
    await client.ready_for_events()
    await conn.recv("ready")
    for seq in (1, 2, 3):
        await conn.event(f"e{seq}", seq, "a", "update", seq, seq)
    await conn.wait_ack(3)

    await conn.drop()
    conn2 = await fake_server.accept()
    await conn2.welcome(pending_events=1)
    restored = []
    for _ in range(3):
        request = await conn2.recv()
        restored.append(request)
        await conn2.answer_register(request)
    await conn2.recv("ready")
    # Replay of an event already delivered (same id), then a new one.
    await conn2.event("e3", 1, "a", "update", 3, 3, replay=True)
    await conn2.event("e4", 2, "a", "update", 4, 4, replay=True)
    await conn2.marker(2, ["r"])
    await conn2.wait_ack(2)

    assert conn2.hello["durable_id"] == "app-1"
    assert conn2.headers["Authorization"] == "Token tok-1"
    assert [(r["type"], r.get("keys"), r.get("regex")) for r in restored] == [
        ("register_interest", ["a", "b"], None),
        ("register_interest", None, "x.*"),
        ("register_cq", None, None),
    ]
    assert restored[0]["durable"] is True
    assert restored[2]["name"] == "big"
    ids = [event.id for name, event in recorder.calls if name == "after_update"]
    assert ids == ["e1", "e2", "e3", "e4"]  # e3's replay was dropped
    # Seqs restart per session: the second session acks from its own seqs.
    assert conn2.ack_log == [2]
    assert client.duplicates_dropped == 1
    assert [w.pending_event_count for w in reconnected] == [1]
    assert region.get_entry("a") == (4, 4)


@pytest.mark.parametrize("code", [1000, 1001, 1011, 4503])
async def test_server_close_codes_that_are_not_fatal_cause_a_reconnect(
    fake_server, make_client, code
):
    client = make_client(durable_id="app-1")
    _, conn = await fake_server.connect(client)

    await conn.close(code, "bye")
    conn2 = await fake_server.accept()
    await conn2.welcome()

    assert conn2.hello["type"] == "hello"


async def test_node_shutting_down_4503_reconnects_to_the_next_url(
    fake_server, server_factory, make_client
):
    other = await server_factory()
    client = make_client([fake_server.url, other.url])
    _, conn = await fake_server.connect(client)

    await conn.close(4503, "node shutting down")
    conn2 = await other.accept()
    await conn2.welcome(node="node-2")

    assert conn2.hello["type"] == "hello"


async def test_requests_made_while_reconnecting_go_to_the_new_session(
    fake_server, make_client
):
    client = make_client()
    _, conn = await fake_server.connect(client)
    region = client.region("r")

    await conn.drop()
    pending = asyncio.create_task(region.register_keys(["late"]))
    conn2 = await fake_server.accept()
    await conn2.welcome()
    request = await conn2.recv("register_interest")
    await conn2.answer_register(request, [("late", 1, 1)])

    assert await asyncio.wait_for(pending, 5) == 1
    assert request["keys"] == ["late"]


async def test_request_on_a_socket_closed_under_it_waits_for_the_next_session(
    fake_server, make_client
):
    client = make_client()
    _, conn = await fake_server.connect(client)
    # Simulate the window in which the socket is already closed but the
    # reader has not noticed yet: send() fails at once, without yielding.
    sends = []

    async def failing_send(message):
        sends.append(message)
        if len(sends) > 3:
            raise RuntimeError("request retried on a dead session")
        raise ConnectionClosed(None, None)

    client._session.ws.send = failing_send
    pending = asyncio.create_task(client.region("r").register_keys(["a"]))

    await conn.drop()
    conn2 = await fake_server.accept()
    await conn2.welcome()
    await conn2.answer_register(await conn2.recv("register_interest"), [("a", 1, 1)])

    assert await asyncio.wait_for(pending, 5) == 1
    assert len(sends) == 1


async def test_fatal_close_after_connect_calls_on_fatal_and_stops(
    fake_server, make_client
):
    failures = []
    client = make_client(durable_id="app-1", on_fatal=failures.append)
    _, conn = await fake_server.connect(client)

    await conn.close(4410, "closed by an operator")

    with pytest.raises(FatalConnectionError):
        await asyncio.wait_for(client.wait_closed(), 5)
    assert [f.close_code for f in failures] == [4410]
    with pytest.raises(FatalConnectionError):
        await client.region("r").register_keys(["a"])
    assert fake_server.accepted.empty()


async def test_non_durable_reconnect_drops_keys_missing_from_fresh_image(
    fake_server, make_client
):
    reconnected = asyncio.Event()
    client = make_client(on_reconnect=lambda welcome: reconnected.set())
    _, conn = await fake_server.connect(client)
    region = client.region("r")
    task = asyncio.create_task(region.register_all_keys())
    await conn.answer_register(await conn.recv(), [("a", 1, 1), ("b", 1, 1)])
    await asyncio.wait_for(task, 5)

    await conn.drop()
    conn2 = await fake_server.accept()
    await conn2.welcome(pending_events=-2)
    # "b" was destroyed while away: no queue kept that event.
    await conn2.answer_register(await conn2.recv(), [("a", 2, 2)])
    await asyncio.wait_for(reconnected.wait(), 5)

    assert region.snapshot() == {"a": (2, 2)}
    assert region.version_of("b") == 1


async def test_durable_reconnect_with_kept_queue_leaves_cache_to_replay(
    fake_server, make_client
):
    reconnected = asyncio.Event()
    client = make_client(
        durable_id="app-1", on_reconnect=lambda welcome: reconnected.set()
    )
    _, conn = await fake_server.connect(client)
    region = client.region("r")
    task = asyncio.create_task(region.register_all_keys(durable=True))
    await conn.answer_register(await conn.recv(), [("a", 1, 1), ("b", 1, 1)])
    await asyncio.wait_for(task, 5)

    await conn.drop()
    conn2 = await fake_server.accept()
    await conn2.welcome(pending_events=1)
    await conn2.answer_register(await conn2.recv(), [("a", 1, 1)])
    await asyncio.wait_for(reconnected.wait(), 5)

    # The queued destroy of "b" will come as a replay after ready.
    assert sorted(region.keys()) == ["a", "b"]


@pytest.mark.parametrize("keepalive", [True, False])
async def test_close_flushes_ack_sends_close_and_stops_reconnecting(
    fake_server, make_client, recorder, keepalive
):
    # A long ack interval: the ack seen below can only come from close().
    client = make_client(durable_id="app-1", ack_interval=60)
    _, conn = await fake_server.connect(client)
    region = client.region("r", recorder)
    await register_answered(conn, region.register_all_keys(durable=True))
    await client.ready_for_events()
    await conn.recv("ready")
    await conn.event("e1", 1, "a", "create", 1, 1)
    await conn.event("e2", 2, "a", "update", 2, 2)
    await recorder.wait_calls(2)

    await asyncio.wait_for(client.close(keepalive=keepalive), 5)

    frame = await conn.recv("close")
    assert frame["keepalive"] is keepalive
    assert conn.ack_log == [2]
    await asyncio.wait_for(client.wait_closed(), 5)  # no fatal error
    await asyncio.wait_for(conn.closed.wait(), 5)
    assert client.closed
    assert not client.connected
    assert len(fake_server.connections) == 1
    assert fake_server.accepted.empty()
    with pytest.raises(ClientClosedError):
        await client.ready_for_events()


async def test_backoff_stays_at_the_cap_after_any_number_of_failed_attempts():
    from durablecache_client._session import backoff_delay

    for attempt in (1, 2, 10, 1024, 1025, 10**6):
        delay = backoff_delay(attempt, 0.1, 5.0)
        assert 0 < delay <= 5.0
    assert backoff_delay(10**6, 0.1, 5.0) >= 2.5  # jitter keeps half the cap
    assert backoff_delay(1, 0.1, 5.0) <= 0.1
