"""Durable client life cycles against a real node, with raw websocket frames.

After Apache Geode's durable-client tests: keepalive x reconnect before and
after the timeout, crash, durable vs non-durable interest, unacked re-send,
conflation, REST pre-registration.
"""

import asyncio
import itertools

import pytest

from tests.integration.harness import create_region, wait_for
from tests.integration.wsclient import RawClient

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
_names = itertools.count()


def fresh(prefix: str) -> str:
    return f"{prefix}-{next(_names)}"


@pytest.fixture(scope="module")
def region(live):
    return create_region(live, "lifecycle")


def put(live, region, key, value):
    status, body = live.rest(
        "PUT", f"/api/v1/regions/{region}/entries/{key}/", live.user, {"value": value}
    )
    assert status == 200, body
    return body


def client_state(live, durable_id):
    return live.rest("GET", f"/api/v1/clients/{durable_id}/", live.user)


def run(coro):
    return asyncio.run(coro)


async def subscribe(live, durable_id, region, *, expiry=300, durable=True, **sel):
    ws = await RawClient(live.ws_url("node-1"), live.user).__aenter__()
    welcome = await ws.hello(durable_id=durable_id, timeout=expiry)
    await ws.register(
        region, durable=durable, policy="none", **(sel or {"all_keys": True})
    )
    return ws, welcome


def wait_queued(live, durable_id, count):
    """Wait until the client's queue holds ``count`` events (REST view)."""

    def queued():
        status, body = client_state(live, durable_id)
        return status == 200 and body["pending_events"] == count

    wait_for(queued, timeout=20)


@pytest.mark.parametrize("keepalive", [True, False])
def test_reconnect_before_timeout(live, region, keepalive):
    durable_id = fresh("before")

    async def first():
        ws, welcome = await subscribe(live, durable_id, region, keys=[durable_id])
        assert welcome["pending_events"] == -2
        assert (await ws.close(keepalive=keepalive))["keepalive"] is keepalive

    run(first())
    put(live, region, durable_id, 1)
    put(live, region, durable_id, 2)

    async def second():
        async with RawClient(live.ws_url("node-1"), live.user) as ws:
            welcome = await ws.hello(durable_id=durable_id, timeout=300)
            events, marker = await ws.ready_and_replay()
            return welcome, events, marker

    if keepalive:
        wait_queued(live, durable_id, 2)
    welcome, events, marker = run(second())
    if keepalive:
        assert welcome["pending_events"] == 2
        assert [(e["value"], e["replay"]) for e in events] == [(1, True), (2, True)]
        assert marker == {
            "type": "marker",
            "replayed": 2,
            "resynced": 0,
            "regions": [region],
        }
    else:
        # keepalive false deleted queue and interests at once.
        assert welcome["pending_events"] == -2
        assert events == []
        assert marker["replayed"] == 0


@pytest.mark.parametrize("keepalive", [True, False])
def test_reconnect_after_timeout(live, region, keepalive):
    durable_id = fresh("after")

    async def first():
        ws, _ = await subscribe(live, durable_id, region, expiry=1, keys=[durable_id])
        await ws.close(keepalive=keepalive)

    run(first())
    put(live, region, durable_id, 1)
    # Expired (or deleted): the REST view no longer knows the client.
    wait_for(lambda: client_state(live, durable_id)[0] == 404, timeout=30)

    async def second():
        async with RawClient(live.ws_url("node-1"), live.user) as ws:
            first_hello = (await ws.hello(durable_id=durable_id))["pending_events"]
            await ws.close(keepalive=False)
        async with RawClient(live.ws_url("node-1"), live.user) as ws:
            second_hello = (await ws.hello(durable_id=durable_id))["pending_events"]
            await ws.close(keepalive=False)
        return first_hello, second_hello

    # Expired by its timeout: told once that the queue was lost (-1).
    # Closed with keepalive false: no queue at all (-2).
    assert run(second()) == ((-1, -2) if keepalive else (-2, -2))


def test_crash_then_reconnect_gets_everything(live, region):
    durable_id = fresh("crash")

    async def first():
        ws, _ = await subscribe(live, durable_id, region, keys=[durable_id])
        await ws.drop()

    run(first())
    wait_for(
        lambda: client_state(live, durable_id)[1]["state"] == "disconnected", timeout=20
    )
    for value in range(5):
        put(live, region, durable_id, value)
    wait_queued(live, durable_id, 5)

    async def second():
        async with RawClient(live.ws_url("node-1"), live.user) as ws:
            welcome = await ws.hello(durable_id=durable_id)
            events, marker = await ws.ready_and_replay()
            return welcome, events, marker

    welcome, events, marker = run(second())
    assert welcome["pending_events"] == 5
    assert [e["value"] for e in events] == list(range(5))
    assert marker["replayed"] == 5


def test_durable_and_non_durable_interest_across_a_disconnect(live, region):
    durable_id = fresh("mixed")
    keep, drop = f"{durable_id}-keep", f"{durable_id}-drop"

    async def first():
        ws, _ = await subscribe(live, durable_id, region, keys=[keep])
        await ws.register(region, keys=[drop], durable=False, policy="none")
        await ws.close(keepalive=True)

    run(first())
    put(live, region, keep, "k")
    put(live, region, drop, "d")
    wait_queued(live, durable_id, 1)

    async def second():
        async with RawClient(live.ws_url("node-1"), live.user) as ws:
            await ws.hello(durable_id=durable_id)
            events, _ = await ws.ready_and_replay()
            return events

    assert [e["key"] for e in run(second())] == [keep]


def test_unacked_events_are_sent_again_as_replay(live, region):
    durable_id = fresh("unacked")

    async def first():
        ws, _ = await subscribe(live, durable_id, region, keys=[durable_id])
        await ws.ready_and_replay()
        for value in range(4):
            await asyncio.to_thread(put, live, region, durable_id, value)
        events = await ws.events(4)
        assert [e["replay"] for e in events] == [False] * 4
        await ws.ack(events[1]["seq"])  # the first two only
        await ws.close(keepalive=True)
        return events

    sent = run(first())

    async def second():
        async with RawClient(live.ws_url("node-1"), live.user) as ws:
            welcome = await ws.hello(durable_id=durable_id)
            events, _ = await ws.ready_and_replay()
            return welcome, events

    welcome, events = run(second())
    assert welcome["pending_events"] == 2
    assert [e["id"] for e in events] == [e["id"] for e in sent[2:]]
    assert all(e["replay"] for e in events)


@pytest.mark.parametrize(("conflate", "expected"), [("true", 2), ("false", 5)])
def test_conflation_create_plus_four_updates(live, region, conflate, expected):
    durable_id = fresh(f"conflate-{conflate}")

    async def first():
        ws = await RawClient(live.ws_url("node-1"), live.user).__aenter__()
        await ws.hello(durable_id=durable_id, conflate=conflate)
        await ws.register(region, keys=[durable_id], durable=True, policy="none")
        await ws.close(keepalive=True)

    run(first())
    for value in range(5):
        put(live, region, durable_id, value)
    wait_for(
        lambda: client_state(live, durable_id)[1]["pending_events"] == expected,
        timeout=20,
    )

    async def second():
        async with RawClient(live.ws_url("node-1"), live.user) as ws:
            await ws.hello(durable_id=durable_id, conflate=conflate)
            events, _ = await ws.ready_and_replay()
            return events

    events = run(second())
    assert [e["op"] for e in events][:1] == ["create"]
    assert len(events) == expected
    assert events[-1]["value"] == 4


def test_rest_preregistered_interest_queues_for_an_offline_client(live, region):
    durable_id = fresh("prereg")
    status, body = live.rest(
        "POST",
        f"/api/v1/clients/{durable_id}/interests/",
        live.user,
        {"region": region, "keys": [durable_id], "durable": True},
    )
    assert status == 201, body
    assert client_state(live, durable_id)[1]["state"] == "disconnected"
    put(live, region, durable_id, "while-offline")
    wait_queued(live, durable_id, 1)

    async def connect():
        async with RawClient(live.ws_url("node-1"), live.user) as ws:
            welcome = await ws.hello(durable_id=durable_id)
            events, marker = await ws.ready_and_replay()
            return welcome, events, marker

    welcome, events, marker = run(connect())
    assert welcome["pending_events"] == 1
    assert [(e["value"], e["replay"]) for e in events] == [("while-offline", True)]
    assert marker["regions"] == [region]


def test_another_user_cannot_take_a_durable_id(live, region):
    durable_id = fresh("owned")

    async def scenario():
        ws, _ = await subscribe(live, durable_id, region, keys=[durable_id])
        await ws.close(keepalive=True)
        intruder = RawClient(live.ws_url("node-1"), live.other)
        async with intruder:
            await intruder.send(type="hello", durable_id=durable_id)
            try:
                await intruder.recv(wait=10)
            except Exception as exc:  # the server closes the socket
                return getattr(exc, "rcvd", None) and exc.rcvd.code
        return None

    assert run(scenario()) == 4403


def test_racing_puts_of_one_key_arrive_in_version_order(live, region):
    """Puts of the same key from parallel requests reach the client in order."""
    durable_id = fresh("race")
    key = durable_id

    def writer(start):
        for i in range(start, start + 25):
            put(live, region, key, i)

    async def scenario():
        async with RawClient(live.ws_url("node-1"), live.user) as ws:
            await ws.hello(durable_id=durable_id)
            await ws.register(region, keys=[key], durable=True, policy="none")
            await ws.ready_and_replay()
            await asyncio.gather(
                *(asyncio.to_thread(writer, start) for start in (0, 100, 200, 300))
            )
            events = await ws.events(100)
            await ws.close(keepalive=False)
            return events

    events = run(scenario())
    versions = [e["version"] for e in events]
    assert versions == sorted(versions)
    assert len(set(versions)) == 100
    assert versions[-1] - versions[0] == 99


@pytest.mark.parametrize("leave", ["keepalive", "crash"])
def test_durable_and_non_durable_cqs_across_a_keepalive_close_and_a_crash(
    live, region, leave
):
    """A durable CQ goes on matching while the client is away; a
    non-durable one ends with the socket, without a drain: the event it
    named before the end stays queued, naming it, and nothing later does.
    The same for ``close`` with keepalive and for a TCP connection that
    dies without a close frame."""
    durable_id = fresh(f"cq-{leave}")
    before, after = f"{durable_id}-before", f"{durable_id}-after"
    query = f"key LIKE '{durable_id}-%' AND value.q > 5"

    async def first():
        ws = await RawClient(live.ws_url("node-1"), live.user).__aenter__()
        await ws.hello(durable_id=durable_id, timeout=300)
        for name, durable in (("kept", True), ("ends", False)):
            await ws.send(
                type="register_cq",
                name=name,
                region=region,
                query=query,
                durable=durable,
            )
            assert (await ws.expect("cq_registered"))["name"] == name
        # Not ready: the event stays queued, undelivered, under the socket.
        await asyncio.to_thread(put, live, region, before, {"q": 7})
        await asyncio.to_thread(wait_queued, live, durable_id, 1)
        if leave == "keepalive":
            await ws.close(keepalive=True)
        else:
            await ws.drop()

    run(first())
    wait_for(
        lambda: client_state(live, durable_id)[1]["state"] == "disconnected", timeout=20
    )
    status, body = live.rest("GET", f"/api/v1/clients/{durable_id}/cqs/", live.user)
    assert status == 200
    assert [q["name"] for q in body["results"]] == ["kept"]
    put(live, region, after, {"q": 8})
    wait_queued(live, durable_id, 2)

    async def second():
        async with RawClient(live.ws_url("node-1"), live.user) as ws:
            welcome = await ws.hello(durable_id=durable_id)
            events, _ = await ws.ready_and_replay()
            return welcome, events

    welcome, events = run(second())
    assert welcome["pending_events"] == 2
    assert [(e["key"], e["cq"]) for e in events] == [
        (
            before,
            [{"name": "ends", "cq_op": "create"}, {"name": "kept", "cq_op": "create"}],
        ),
        (after, [{"name": "kept", "cq_op": "create"}]),
    ]
