"""``register_interest`` and ``register_cq`` with ``since`` on the
websocket (docs/protocol.md, "Catching up by key"), through the ASGI app."""

from datetime import timedelta

import pytest
from channels.db import database_sync_to_async as db
from django.utils import timezone

from cache import services as cache_services
from cache.models import Entry, EventLog
from clients import selectors
from clients.models import DurableClient
from sockets import registrations

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "node"])

BIG = "value.qty > 5"


def head():
    return EventLog.objects.get().last_seq


async def changed_since(write):
    """Write a, b, c; return the seq after them, then change b, destroy c
    and create d."""
    await write(
        cache_services.entry_putall,
        region="prices",
        entries={"a": {"qty": 9}, "b": {"qty": 9}, "c": {"qty": 9}},
    )
    since = await db(head)()
    await write(cache_services.entry_put, region="prices", key="b", value={"qty": 1})
    await write(cache_services.entry_destroy, region="prices", key="c")
    await write(cache_services.entry_put, region="prices", key="d", value={"qty": 7})
    return since


async def test_an_interest_with_since_gets_what_changed_and_since_back(
    session, token, region, write
):
    since = await changed_since(write)
    sock, _ = await session(token, durable_id="d1")
    await sock.send(
        type="register_interest", id="r", region="prices", all_keys=True, since=since
    )
    assert await sock.recv() == {
        "type": "image",
        "id": "r",
        "region": "prices",
        "entries": [
            {"key": "b", "value": {"qty": 1}, "version": 2},
            {"key": "c", "version": 2, "destroyed": True},
            {"key": "d", "value": {"qty": 7}, "version": 1},
        ],
    }
    assert await sock.recv() == {
        "type": "interest_registered",
        "id": "r",
        "count": 3,
        "since": since,
    }


async def test_policy_keys_with_since_sends_keys_and_destroyed_keys(
    session, token, region, write
):
    since = await changed_since(write)
    sock, _ = await session(token)
    await sock.send(
        type="register_interest",
        id="r",
        region="prices",
        keys=["d", "c", "a"],
        policy="keys",
        since=since,
    )
    assert await sock.recv() == {
        "type": "image",
        "id": "r",
        "region": "prices",
        "keys": ["d"],
        "destroyed": ["c"],
    }
    reply = await sock.recv()
    assert (reply["type"], reply["count"], reply["since"]) == (
        "interest_registered",
        2,
        since,
    )


async def test_a_cq_with_since_gets_members_leavers_and_destroyed_keys(
    session, token, region, write
):
    since = await changed_since(write)
    sock, _ = await session(token, durable_id="d1")
    await sock.send(
        type="register_cq", id="q", name="big", region="prices", query=BIG, since=since
    )
    assert await sock.recv() == {
        "type": "image",
        "id": "q",
        "region": "prices",
        "cq": "big",
        "entries": [
            {"key": "b", "version": 2, "cq_op": "destroy"},
            {"key": "c", "version": 2, "destroyed": True},
            {"key": "d", "value": {"qty": 7}, "version": 1},
        ],
    }
    assert await sock.recv() == {
        "type": "cq_registered",
        "id": "q",
        "name": "big",
        "count": 3,
        "since": since,
    }


async def test_without_since_the_replies_say_no_since(session, token, region):
    sock, _ = await session(token, durable_id="d1")
    reply = await sock.request(type="register_interest", region="prices", all_keys=True)
    assert reply == {"type": "interest_registered", "count": 0}
    reply = await sock.request(type="register_cq", name="q", region="prices", query=BIG)
    assert reply == {"type": "cq_registered", "name": "q", "count": 0}


async def test_a_large_since_image_comes_in_chunks_of_at_most_500(
    session, token, region, write
):
    entries = {f"k{i:04}": i for i in range(1200)}
    await write(cache_services.entry_putall, region="prices", entries=entries)
    await write(cache_services.region_clear, name="prices")  # 1200 of one seq
    sock, _ = await session(token)
    await sock.send(type="register_interest", region="prices", all_keys=True, since=0)
    reply, images = await sock.until("interest_registered")
    assert [len(i["entries"]) for i in images] == [500, 500, 200]
    keys = {e["key"] for i in images for e in i["entries"] if e["destroyed"]}
    assert keys == set(entries)
    assert (reply["count"], reply["since"]) == (1200, 0)


@pytest.mark.parametrize(
    "fields",
    [
        {"since": -1},
        {"since": "3"},
        {"since": 1.5},
        {"since": True},
        {"since": [1]},
        {"since": 2**63},
        {"since": 0, "policy": "none"},
        {"since": 10**6},  # beyond the log's head
        {"since": 10**6, "region": "nowhere"},  # bad_field comes first
    ],
)
async def test_a_bad_since_is_bad_field_and_registers_nothing(
    session, token, region, fields
):
    sock, _ = await session(token, durable_id="d1")
    frame = {"region": "prices", "all_keys": True, **fields}
    reply = await sock.request(type="register_interest", id="r", **frame)
    assert (reply["type"], reply["id"], reply["code"]) == ("error", "r", "bad_field")
    if "policy" not in fields:  # a CQ has no policy: its image is its own
        cq = {"name": "q", "region": fields.get("region", "prices"), "query": "("}
        since = fields["since"]
        reply = await sock.request(type="register_cq", id="q", since=since, **cq)
        assert (reply["type"], reply["code"]) == ("error", "bad_field")
    client = await db(DurableClient.objects.get)(durable_id="d1")
    assert await db(lambda: client.interests.count() + client.cqs.count())() == 0


async def test_a_since_before_a_pruned_tombstone_is_too_old(
    session, token, region, write
):
    since = await changed_since(write)
    await db(
        lambda: Entry.objects.filter(is_destroyed=True).update(
            updated_at=timezone.now() - timedelta(days=2)
        )
    )()
    assert await db(cache_services.tombstones_prune)(keep_s=86400) == 1
    sock, _ = await session(token, durable_id="d1")
    frame = {"region": "prices", "all_keys": True, "since": since}
    reply = await sock.request(type="register_interest", id="r", **frame)
    assert (reply["type"], reply["id"], reply["code"]) == (
        "error",
        "r",
        "since_too_old",
    )
    cq = {"name": "q", "region": "prices", "query": BIG}
    reply = await sock.request(type="register_cq", id="q", since=since, **cq)
    assert (reply["type"], reply["code"]) == ("error", "since_too_old")
    client = await db(DurableClient.objects.get)(durable_id="d1")
    assert await db(lambda: client.interests.count() + client.cqs.count())() == 0
    # The way on: a full image, or a since from the pruned tombstone on.
    assert await sock.register(all_keys=True) == 3
    now = await db(head)()
    await sock.send(type="register_interest", region="prices", all_keys=True, since=now)
    reply, images = await sock.until("interest_registered")
    assert (images, reply["count"], reply["since"]) == ([], 0, now)


async def test_an_event_already_in_a_since_image_is_no_newer_than_it(
    session, token, region, write, monkeypatch
):
    """A write that commits after the registration, while the image is
    read, is in the image and also comes as an event, whose version is
    no newer than the image's: the client drops it."""
    since = await changed_since(write)
    read_page = selectors.since_image_page

    def page_after_a_write(**fields):
        if fields["after"] is None:
            cache_services.entry_put(region="prices", key="b", value={"qty": 3})
        return read_page(**fields)

    monkeypatch.setattr(selectors, "since_image_page", page_after_a_write)
    sock, _ = await session(token, durable_id="d1")
    await sock.send(
        type="register_interest", region="prices", all_keys=True, since=since
    )
    _, [image] = await sock.until("interest_registered")
    in_image = {e["key"]: e["version"] for e in image["entries"]}
    assert in_image["b"] == 3
    _, replayed = await sock.ready()
    await write(cache_services.entry_put, region="prices", key="z", value=1)
    events = replayed + await sock.events(1 if replayed else 2)
    assert [(e["key"], e["version"]) for e in events] == [("b", 3), ("z", 1)]
    assert events[0]["version"] <= in_image["b"]


def test_the_reply_says_since_only_when_given():
    assert registrations.since_field(None) == {}
    assert registrations.since_field(0) == {"since": 0}


async def test_registering_again_with_since_sends_a_since_image(
    session, token, region, write
):
    sock, _ = await session(token, durable_id="d1")
    assert await sock.register(all_keys=True) == 0
    await sock.send(type="register_cq", name="big", region="prices", query=BIG)
    await sock.until("cq_registered")
    since = await changed_since(write)
    frame = {"region": "prices", "all_keys": True, "since": since}
    await sock.send(type="register_interest", **frame)
    reply, images = await sock.until("interest_registered")
    assert [e["key"] for i in images for e in i["entries"]] == ["b", "c", "d"]
    assert (reply["count"], reply["since"]) == (3, since)
    await sock.send(
        type="register_cq", name="big", region="prices", query=BIG, since=since
    )
    reply, images = await sock.until("cq_registered")
    assert [e["key"] for i in images for e in i["entries"]] == ["b", "c", "d"]
    assert (reply["count"], reply["since"]) == (3, since)
    # Another definition under the name is bad_field, even with a since
    # the region no longer covers.
    await db(
        lambda: Entry.objects.filter(is_destroyed=True).update(
            updated_at=timezone.now() - timedelta(days=2)
        )
    )()
    await db(cache_services.tombstones_prune)(keep_s=86400)
    reply = await sock.request(
        type="register_cq",
        name="big",
        region="prices",
        query="value.qty > 1",
        since=since,
    )
    assert (reply["type"], reply["code"]) == ("error", "bad_field")
