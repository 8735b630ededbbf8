"""``register_cq`` and ``close_cq`` on the websocket (docs/protocol.md,
continuous queries), through the ASGI app."""

import asyncio

import pytest
from channels.db import database_sync_to_async as db

from cache import services as cache_services
from clients import services
from clients.models import DurableClient
from tests.conftest import WAIT_S

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "node"])

BIG = "SELECT * FROM /prices p WHERE p.qty > 5"


async def test_register_cq_sends_its_members_then_cq_registered(session, token, region):
    entries = {"a": {"qty": 7}, "b": {"qty": 1}, "c": {"qty": 9}, "d": None}
    await db(cache_services.entry_putall)(region="prices", entries=entries)
    sock, _ = await session(token, durable_id="d1")
    await sock.send(type="register_cq", id="q", name="big", region="prices", query=BIG)
    assert await sock.recv() == {
        "type": "image",
        "id": "q",
        "region": "prices",
        "cq": "big",
        "entries": [
            {"key": "a", "value": {"qty": 7}, "version": 1},
            {"key": "c", "value": {"qty": 9}, "version": 1},
        ],
    }
    assert await sock.recv() == {
        "type": "cq_registered",
        "id": "q",
        "name": "big",
        "count": 2,
    }


async def test_events_carry_their_cq_list_and_the_marker_names_the_region(
    session, token, region, write
):
    sock, _ = await session(token, durable_id="d1")
    await sock.send(type="register_cq", name="big", region="prices", query=BIG)
    await sock.until("cq_registered")
    marker, _ = await sock.ready()
    assert marker["regions"] == ["prices"]
    await write(cache_services.entry_put, region="prices", key="k", value={"qty": 7})
    await write(cache_services.entry_put, region="prices", key="j", value={"qty": 1})
    await write(cache_services.entry_put, region="prices", key="k", value={"qty": 2})
    events = await sock.events(2)
    assert [(e["key"], e["cq"]) for e in events] == [
        ("k", [{"name": "big", "cq_op": "create"}]),
        ("k", [{"name": "big", "cq_op": "destroy"}]),
    ]


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"name": "bad name", "region": "nowhere", "query": "("}, "bad_field"),
        ({"name": "ok", "region": "prices"}, "bad_field"),
        ({"name": "ok", "region": "prices", "query": 5}, "bad_field"),
        (
            {"name": "ok", "region": "prices", "query": BIG, "durable": True},
            "bad_field",
        ),
        ({"name": "ok", "region": "nowhere", "query": "("}, "no_such_region"),
        ({"name": "ok", "region": "prices", "query": "value.qty >"}, "bad_query"),
        (
            {"name": "ok", "region": "prices", "query": "SELECT * FROM /other"},
            "bad_query",
        ),
    ],
)
async def test_register_cq_refusals_come_in_their_order(
    session, token, region, fields, code
):
    sock, _ = await session(token)  # non-durable: durable CQs are refused
    reply = await sock.request(type="register_cq", id="q", **fields)
    assert (reply["type"], reply["id"], reply["code"]) == ("error", "q", code)
    if code == "bad_query":
        assert "line 1, column" in reply["message"]


async def test_register_again_is_idempotent_and_another_definition_is_bad_field(
    session, token, region, write
):
    await write(cache_services.entry_put, region="prices", key="m", value={"qty": 9})
    sock, _ = await session(token, durable_id="d1")
    for query in (BIG, "value.qty > 5"):  # the same query, written otherwise
        await sock.send(type="register_cq", name="big", region="prices", query=query)
        reply, images = await sock.until("cq_registered")
        assert reply["name"] == "big"
        # A fresh image each time.
        assert [e["key"] for i in images for e in i["entries"]] == ["m"]
    await sock.ready()
    await write(cache_services.entry_put, region="prices", key="k", value={"qty": 7})
    # One event, naming the CQ once: no second copy of it.
    [event] = await sock.events(1)
    assert (event["key"], event["cq"]) == ("k", [{"name": "big", "cq_op": "create"}])
    assert await sock.barrier() == []
    reply = await sock.request(
        type="register_cq", name="big", region="prices", query="value.qty > 6"
    )
    assert (reply["type"], reply["code"]) == ("error", "bad_field")


async def test_close_cq_answers_even_for_a_name_not_held(session, token, region):
    sock, _ = await session(token, durable_id="d1")
    await sock.send(type="register_cq", name="big", region="prices", query=BIG)
    await sock.until("cq_registered")
    for _ in range(2):
        reply = await sock.request(type="close_cq", id="c", name="big")
        assert reply == {"type": "cq_closed", "id": "c", "name": "big"}
    assert (
        await db(lambda: DurableClient.objects.get(durable_id="d1").cqs.count())() == 0
    )


async def test_an_operator_close_reaches_the_connected_client_unsolicited(
    session, token, region
):
    sock, _ = await session(token, durable_id="d1")
    await sock.send(type="register_cq", name="big", region="prices", query=BIG)
    await sock.until("cq_registered")
    client = await db(DurableClient.objects.get)(durable_id="d1")
    assert await db(services.cq_close)(client=client, name="big", by_operator=True)
    assert await sock.recv() == {"type": "cq_closed", "name": "big"}


async def test_a_writer_during_register_cq_loses_nothing_and_nothing_comes_early(
    session, token, region, write
):
    """Keys written while the CQ registers reach the client through its
    image or its events, none naming the CQ before ``cq_registered``, and
    an event no newer than the image's version of its key is droppable."""
    sock, _ = await session(token, durable_id="d1")
    await sock.ready()
    keys = [f"k{i}" for i in range(8)]

    async def writer():
        for round_ in range(6):
            for key in keys:
                await write(
                    cache_services.entry_put,
                    region="prices",
                    key=key,
                    value={"qty": 10 + round_},
                )

    task = asyncio.create_task(writer())
    await sock.send(type="register_cq", id="q", name="big", region="prices", query=BIG)
    seen: dict[str, int] = {}
    while True:
        frame = await sock.recv()
        assert "cq" not in frame or frame["type"] == "image", frame
        if frame["type"] == "image":
            seen.update({e["key"]: e["version"] for e in frame["entries"]})
        if frame["type"] == "cq_registered":
            break
    await task
    await write(cache_services.entry_put, region="prices", key="zz", value={"qty": 99})
    while seen.get("zz") is None:
        frame = await sock.recv()
        if frame["type"] == "event" and "cq" in frame:
            seen[frame["key"]] = max(seen.get(frame["key"], 0), frame["version"])
    # Every key's last version reached the client, one way or the other.
    assert {k: seen.get(k) for k in keys} == dict.fromkeys(keys, 6)


@pytest.mark.parametrize("how", ["keepalive", "drop"])
async def test_durable_cqs_keep_matching_while_away_and_non_durable_ones_end(
    session, token, region, write, how
):
    sock, _ = await session(token, durable_id="d1")
    for name, durable in (("kept", True), ("ends", False)):
        await sock.send(
            type="register_cq", name=name, region="prices", query=BIG, durable=durable
        )
        await sock.until("cq_registered")
    if how == "keepalive":
        await sock.request(type="close", keepalive=True)
    else:
        await sock.drop()

    def names():
        client = DurableClient.objects.get(durable_id="d1")
        return list(client.cqs.values_list("name", flat=True))

    await wait_until(lambda: db(names)(), ["kept"])
    await write(cache_services.entry_put, region="prices", key="k", value={"qty": 7})
    back, welcome = await session(token, durable_id="d1")
    assert welcome["pending_events"] == 1
    _, replayed = await back.ready()
    assert [e["cq"] for e in replayed] == [[{"name": "kept", "cq_op": "create"}]]


async def wait_until(read, wanted):
    """Poll ``read()`` until it gives ``wanted`` (at most WAIT_S)."""
    async with asyncio.timeout(WAIT_S):
        while await read() != wanted:  # noqa: ASYNC110 (a row, no event to await)
            await asyncio.sleep(0.02)


async def test_close_cq_while_connected_drains_even_what_was_sent_unacked(
    session, token, region, write
):
    """A delivered, unacked event stays queued; once its only CQ is closed
    it is gone, and one an interest wants too is replayed without the
    CQ's name."""
    sock, _ = await session(token, durable_id="d1")
    await sock.register(keys=["kept"], durable=True, policy="none")
    await sock.send(
        type="register_cq", name="big", region="prices", query=BIG, durable=True
    )
    await sock.until("cq_registered")
    await sock.ready()
    for key in ("kept", "only"):
        await write(
            cache_services.entry_put, region="prices", key=key, value={"qty": 7}
        )
    sent = await sock.events(2)
    assert [e["cq"] for e in sent] == [[{"name": "big", "cq_op": "create"}]] * 2
    reply = await sock.request(type="close_cq", id="c", name="big")
    assert reply == {"type": "cq_closed", "id": "c", "name": "big"}
    await sock.request(type="close", keepalive=True)
    back, welcome = await session(token, durable_id="d1")
    assert welcome["pending_events"] == 1
    _, replayed = await back.ready()
    assert [(e["key"], "cq" in e) for e in replayed] == [("kept", False)]
