"""A client whose queue overflowed, on the websocket: ``welcome`` with the
gap, then after ``ready`` the ``gap`` frame, the resync images, the
marker with ``resynced``, and live events (docs/protocol.md, "Bounded
queues, gaps and resync")."""

import random

import pytest
from channels.db import database_sync_to_async as db

from cache import services as cache_services
from cache.models import Entry, EventLog, Region
from clients import fanout
from clients.models import DurableClient
from queues.models import QueueEntry
from sockets import wakeups

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "node"])


def head():
    return EventLog.objects.get().last_seq


async def _away_with_a_limit(session, token, max_queued=3, **interest):
    sock, welcome = await session(
        token, durable_id="d1", max_queued=max_queued, conflate=False
    )
    assert "gap" not in welcome
    await sock.register(durable=True, **(interest or {"all_keys": True}))
    await sock.request(type="close", keepalive=True)
    return sock


async def test_hello_max_queued_out_of_range_is_bad_field(ws, token):
    for bad in (0, 10000001, "5", 2.5, True):
        _, sock = await ws(token)
        reply = await sock.request(type="hello", durable_id="d1", max_queued=bad)
        assert reply["type"] == "error"
        assert reply["code"] == "bad_field"


async def test_an_overflowed_client_is_welcomed_with_its_gap_and_resynced(
    session, token, region, write
):
    await _away_with_a_limit(session, token, max_queued=3)
    await write(cache_services.entry_put, region="prices", key="a", value=1)
    since = await db(head)()
    await write(
        cache_services.entry_putall,
        region="prices",
        entries={"b": 1, "c": 1, "d": 1},
    )
    await write(cache_services.entry_put, region="prices", key="a", value=2)
    await write(cache_services.entry_destroy, region="prices", key="b")
    # Three queued (a, b, c) and d overflows: since is before a's create.
    gap = {"since": since - 1, "dropped": 3, "reason": "overflow"}
    assert await db(lambda: DurableClient.objects.get().gap)() == gap
    assert await db(QueueEntry.objects.count)() == 0

    sock, welcome = await session(token, durable_id="d1", max_queued=3)
    assert welcome["gap"] == gap
    assert welcome["pending_events"] == 0
    interest = await db(lambda: DurableClient.objects.get().interests.get().pk)()
    marker, before = await sock.ready()
    assert before == [
        {"type": "gap", **gap},
        {
            "type": "image",
            "region": "prices",
            "resync": True,
            "interest": interest,
            "entries": [
                {"key": "c", "value": 1, "version": 1},
                {"key": "d", "value": 1, "version": 1},
                {"key": "a", "value": 2, "version": 2},
                {"key": "b", "version": 2, "destroyed": True},
            ],
        },
    ]
    assert marker == {
        "type": "marker",
        "replayed": 0,
        "resynced": 4,
        "regions": ["prices"],
    }
    assert await db(lambda: DurableClient.objects.get().gap)() is None
    # The queue works as before: live events, then a replay after a drop.
    await write(cache_services.entry_put, region="prices", key="e", value=1)
    (event,) = await sock.events(1)
    assert (event["key"], event["replay"]) == ("e", False)


async def test_a_cq_is_resynced_with_members_and_leavers(session, token, region, write):
    sock, _ = await session(token, durable_id="d1", max_queued=1)
    await sock.request(
        type="register_cq",
        name="big",
        region="prices",
        query="value > 5",
        durable=True,
    )
    await sock.request(type="close", keepalive=True)
    await write(cache_services.entry_put, region="prices", key="a", value=9)
    await write(cache_services.entry_put, region="prices", key="b", value=9)
    await write(cache_services.entry_put, region="prices", key="b", value=1)
    sock, welcome = await session(token, durable_id="d1", max_queued=1)
    assert welcome["gap"]["dropped"] == 1
    marker, before = await sock.ready()
    assert [f["type"] for f in before] == ["gap", "image"]
    assert before[1]["cq"] == "big"
    assert before[1]["resync"] is True
    assert before[1]["entries"] == [
        {"key": "a", "value": 9, "version": 1},
        {"key": "b", "version": 2, "cq_op": "destroy"},
    ]
    assert marker["resynced"] == 2


async def test_events_written_after_the_resync_began_are_queued_again(
    session, token, region, write
):
    await _away_with_a_limit(session, token, max_queued=1)
    await write(cache_services.entry_put, region="prices", key="a", value=1)
    await write(cache_services.entry_put, region="prices", key="b", value=1)
    sock, _ = await session(token, durable_id="d1", max_queued=1)
    marker, _ = await sock.ready()
    assert marker["resynced"] == 2
    await sock.request(type="close", keepalive=True)
    await write(cache_services.entry_put, region="prices", key="c", value=1)
    sock, welcome = await session(token, durable_id="d1", max_queued=1)
    assert "gap" not in welcome
    assert welcome["pending_events"] == 1
    marker, replayed = await sock.ready()
    assert [(e["key"], e["replay"]) for e in replayed] == [("c", True)]
    assert marker["resynced"] == 0


KEYS = [f"k{i}" for i in range(600)]
OPERATIONS = 10_000  # events per seed (a putall of n keys writes n)
MAX_QUEUED = 1000
FANOUT_EVERY = 25  # service calls between two fan-outs


@pytest.mark.parametrize("seed", range(3))
async def test_a_resync_brings_the_client_to_the_entries_as_they_are(
    session, token, region, seed
):
    """Whatever mix of writes overflowed the queue (over ten thousand
    creates, updates, destroys, invalidates and a few region clears on six
    hundred keys), the client's copy as of the gap plus the resync equals
    the region now, key for key (value and version), for each of its
    interests (every key, a key list) and its CQ."""
    rng = random.Random(seed)
    listed = sorted(rng.sample(KEYS, 100))
    sock, _ = await session(
        token, durable_id="d1", max_queued=MAX_QUEUED, conflate=False
    )
    await sock.register(durable=True, all_keys=True)
    await sock.register(durable=True, keys=listed)
    await sock.request(
        type="register_cq",
        name="big",
        region="prices",
        query="value > 50",
        durable=True,
    )
    await sock.ready()
    writer = _Writer(rng)
    # The client keeps up for a few rounds (it receives and acks every
    # event), then stops acking: the rest piles up past the limit.
    for _ in range(rng.randrange(2, 8)):
        await db(writer.run)(rng.randrange(300, MAX_QUEUED - 100))
        last = await db(head)()
        while (frame := await sock.recv())["seq"] < last:
            assert frame["type"] == "event", frame
        await sock.send(type="ack", up_to=last)
        await sock.barrier()
    acked = last
    await db(writer.run)(OPERATIONS - writer.done)
    await sock.drop()
    assert await db(head)() == writer.done >= OPERATIONS
    gap = await db(lambda: DurableClient.objects.get().gap)()
    assert gap["since"] == acked
    # What the client holds: every change through ``since`` (the rest of
    # what it was sent is newer, and the resync overwrites it).
    then = await db(_entries_through)(gap["since"])
    ids = await db(
        lambda: sorted(
            DurableClient.objects.get().interests.values_list("pk", flat=True)
        )
    )()
    copies = {
        ("interest", ids[0]): dict(then),
        ("interest", ids[1]): {k: v for k, v in then.items() if k in listed},
        ("cq", "big"): {k: v for k, v in then.items() if _big(v)},
    }
    named: dict[tuple[str, object], set[str]] = {target: set() for target in copies}
    sock, _ = await session(token, durable_id="d1", max_queued=100)
    marker, before = await sock.ready()
    assert before[0] == {"type": "gap", **gap}
    for frame in before[1:]:
        assert frame["resync"] is True
        target = (
            ("cq", frame["cq"]) if "cq" in frame else ("interest", frame["interest"])
        )
        copy = copies[target]
        for item in frame["entries"]:
            named[target].add(item["key"])
            if item.get("destroyed") or item.get("cq_op") == "destroy":
                copy.pop(item["key"], None)
            else:
                copy[item["key"]] = (item["value"], item["version"])
    now = await db(_entries_now)()
    assert copies[("interest", ids[0])] == now
    assert copies[("interest", ids[1])] == {k: v for k, v in now.items() if k in listed}
    assert copies[("cq", "big")] == {k: v for k, v in now.items() if _big(v)}
    assert marker["resynced"] == sum(len(f["entries"]) for f in before[1:])
    # A resync names each key once, whatever the number of events written.
    assert marker["resynced"] == sum(len(keys) for keys in named.values())


def _big(entry):
    value, _version = entry
    return value is not None and value > 50


class _Writer:
    """Random writes: putalls of a few keys (creates and updates, one event
    each), destroys, invalidates, a rare region clear; fanned out every
    ``FANOUT_EVERY`` service calls, as a node does."""

    def __init__(self, rng):
        self.rng = rng
        self.live: set[str] = set()
        self.done = 0  # events written

    def run(self, events):
        rng, target, calls = self.rng, self.done + events, 0
        while self.done < target:
            roll = rng.random()
            if roll < 0.5 or not self.live:
                count = min(rng.randrange(1, 20), target - self.done)
                entries = {k: rng.randrange(99) for k in rng.sample(KEYS, count)}
                cache_services.entry_putall(region="prices", entries=entries)
                self.live.update(entries)
                self.done += count
            elif roll < 0.75:
                key = rng.choice(sorted(self.live))
                cache_services.entry_destroy(region="prices", key=key)
                self.live.discard(key)
                self.done += 1
            elif roll < 0.997:
                key = rng.choice(sorted(self.live))
                cache_services.entry_invalidate(region="prices", key=key)
                self.done += 1
            else:
                cache_services.region_clear(name="prices")
                self.live.clear()
                self.done += 1
            calls += 1
            if calls % FANOUT_EVERY == 0:
                fanout.fanout_node("node-1")
        fanout.fanout_node("node-1")


def _entries_now():
    return {
        e.key: (e.value, e.version)
        for e in Entry.objects.filter(region__name="prices", is_destroyed=False)
    }


def _entries_through(seq):
    """The region as it was just after log seq ``seq`` (replaying the log)."""
    from cache.models import Event

    state: dict[str, tuple[object, int]] = {}
    for op, key, value, version in (
        Event.objects.filter(seq__lte=seq)
        .order_by("seq")
        .values_list("op", "key", "value", "version")
    ):
        if op == "region_clear":
            state.clear()
        elif op == "destroy":
            state.pop(key, None)
        else:  # create, update, invalidate (value null, the key kept)
            state[key] = (value, version)
    return state


async def test_a_socket_whose_queue_overflows_while_live_is_closed_to_resync(
    session, token, region, write
):
    """Events pile up unacked on a live socket past its limit: the hub's
    sweep closes it 4503, and its next hello and ready resync it."""
    sock, _ = await session(token, durable_id="d1", max_queued=2)
    await sock.register(durable=True, all_keys=True)
    await sock.ready()
    for key in ("a", "b", "c"):
        await write(cache_services.entry_put, region="prices", key=key, value=1)
    assert await db(lambda: DurableClient.objects.get().gap)() is not None
    await wakeups.hub.sweep()
    while True:  # the events sent before the overflow, then the close
        out = await sock.comm.receive_output(timeout=5)
        if out["type"] == "websocket.close":
            assert out["code"] == 4503
            break
    await sock.comm.wait()
    sock, welcome = await session(token, durable_id="d1", max_queued=2)
    assert welcome["gap"]["dropped"] == 2
    marker, before = await sock.ready()
    assert before[0]["type"] == "gap"
    assert marker["resynced"] == 3


async def test_a_gap_older_than_the_pruned_tombstones_resyncs_a_full_image(
    session, token, region, write
):
    await _away_with_a_limit(session, token, max_queued=1, keys=["a", "b"])
    await write(cache_services.entry_put, region="prices", key="a", value=1)
    await write(cache_services.entry_put, region="prices", key="b", value=1)
    await write(cache_services.entry_destroy, region="prices", key="b")
    pruned = await db(head)()
    await db(lambda: Region.objects.update(tombstones_pruned_through=pruned))()
    sock, _ = await session(token, durable_id="d1", max_queued=1)
    marker, before = await sock.ready()
    assert [f["type"] for f in before] == ["gap", "image"]
    assert before[1]["entries"] == [{"key": "a", "value": 1, "version": 1}]
    assert marker["resynced"] == 1
