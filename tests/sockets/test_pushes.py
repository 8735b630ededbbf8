"""Pushed events: the fan-out's wake-up carries the plain rows it appended,
and a socket that has sent through the queue's head before them sends them
without reading its queue (``sockets.wakeups.WakeFlag``)."""

import asyncio
import concurrent.futures
import json
import uuid
from types import SimpleNamespace

import pytest
from channels.db import database_sync_to_async as db

from cache import services as cache_services
from cache.selectors import logged_events_after
from clients import fanout, services
from clients.models import DurableClient
from queues import notify
from queues import selectors as queue_selectors
from sockets import delivery_rounds, protocol, streams, wakeups
from tests.helpers import connected_client
from tests.sockets.test_wire import open_socket, parsed_all


def _events(*seqs):
    return [{"seq": seq} for seq in seqs]


# --- WakeFlag.take ---------------------------------------------------------


def test_pushes_that_follow_on_are_taken_without_a_read():
    flag = wakeups.WakeFlag()
    flag.push(4, _events(5, 7))
    flag.push(7, _events(9))
    assert flag.is_set()
    events, read = flag.take(4)
    assert [e["seq"] for e in events] == [5, 7, 9]
    assert not read
    assert flag.take(9) == ([], False)  # taken once


def test_a_push_after_a_gap_asks_for_a_read():
    flag = wakeups.WakeFlag()
    flag.push(4, _events(5))
    flag.push(6, _events(8))  # the rows after 5 up to 6 were not pushed here
    events, read = flag.take(4)
    assert [e["seq"] for e in events] == [5]
    assert read


def test_a_push_a_read_already_sent_is_dropped():
    flag = wakeups.WakeFlag()
    flag.push(4, _events(5, 6))
    assert flag.take(6) == ([], False)


def test_a_plain_wake_asks_for_a_read_as_well():
    flag = wakeups.WakeFlag()
    flag.push(0, _events(1))
    flag.set()
    events, read = flag.take(0)
    assert [e["seq"] for e in events] == [1]
    assert read


def test_a_socket_that_does_not_keep_up_reads_instead():
    flag = wakeups.WakeFlag()
    for seq in range(wakeups.MAX_PUSHES + 1):
        flag.push(seq, _events(seq + 1))
    events, read = flag.take(wakeups.MAX_PUSHES)
    assert [e["seq"] for e in events] == [wakeups.MAX_PUSHES + 1]
    assert read  # the pushes before it were dropped


def test_the_hub_shares_each_pushed_event_between_its_sockets():
    hub = wakeups.WakeHub()
    a, b, other = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    flag_a, flag_b, event = wakeups.WakeFlag(), wakeups.WakeFlag(), asyncio.Event()
    hub.sockets[a].add(flag_a)  # as ``add`` does, without starting the hub
    hub.sockets[b].add(flag_b)
    hub.sockets[other].add(event)  # a waiter that takes no pushes
    fields = ["e1", "prices", "k", "create", '{"x": 1}', 1, "2026-12-06T10:00:00Z"]
    message = {
        "push": {a.hex: [0, [3]], b.hex: [2, [3]], other.hex: [0, [3]]},
        "events": {"3": fields},
    }
    assert hub.wake_message(json.dumps(message).encode()) == 3
    (got_a,), read_a = flag_a.take(0)
    (got_b,), read_b = flag_b.take(2)
    assert got_a is got_b
    assert not read_a
    assert not read_b
    assert got_a["value_json"] == '{"x": 1}'
    assert got_a["cq_json"] is None
    assert event.is_set()
    assert hub.wake_message(f"{a.hex} {b.hex}".encode()) == 2
    assert flag_a.take(3) == ([], True)


# --- WakeFlag.direct and Stream.write_pushed --------------------------------


def _waiting_flag(direct):
    """A flag whose delivery task waits with nothing to do."""
    flag = wakeups.WakeFlag()
    flag.direct = direct
    flag.waiter = concurrent.futures.Future()  # what the flag uses of a future
    return flag


def test_a_push_to_a_waiting_task_is_written_without_waking_it():
    written = []
    flag = _waiting_flag(lambda head, events: written.append((head, events)) or 2)
    flag.push(4, _events(5, 6))
    assert written == [(4, _events(5, 6))]
    assert not flag.is_set()
    assert not flag.waiter.done()
    assert flag.take(6) == ([], False)


def test_what_the_socket_could_not_take_at_once_is_left_to_the_task():
    flag = _waiting_flag(lambda head, events: 1)
    flag.push(4, _events(5, 6, 7))
    assert flag.is_set()
    assert flag.waiter.done()
    events, read = flag.take(5)
    assert [e["seq"] for e in events] == [6, 7]
    assert not read


@pytest.mark.parametrize("busy", ["pending wake", "task running"])
def test_a_push_to_a_task_with_work_to_do_is_the_tasks(busy):
    written = []
    flag = _waiting_flag(lambda head, events: written.append(head) or len(events))
    if busy == "pending wake":
        flag.push(0, _events(1))  # written: the flag stays clear
        flag.set()
    else:
        flag.waiter = None
    flag.push(1, _events(2))
    assert 1 not in written
    events, _ = flag.take(1)
    assert [e["seq"] for e in events] == [2]


def _stream(sock, sent_through):
    stream = streams.Stream.__new__(streams.Stream)
    stream.socket = SimpleNamespace(wire=sock, node="node-1")
    stream.sent_through = sent_through
    stream.stopping = False
    stream.gate = asyncio.Lock()
    return stream


def _pushed(*seqs):
    fields = ["e", "prices", "k", "update", "1", 1, "2026-12-07T10:00:00Z"]
    return [queue_selectors.pushed_event(seq, fields) for seq in seqs]


def test_a_live_stream_writes_pushed_events_that_follow_on(server):
    sock = open_socket(server)
    sent = []
    sock.sendData = sent.append
    stream = _stream(sock, sent_through=4)
    events = _pushed(5, 6)
    assert stream.write_pushed(4, events) == 2
    assert stream.sent_through == 6
    # One write for both frames: one send, not a send and a buffered write.
    assert len(sent) == 1
    assert [json.loads(f.data)["seq"] for f in parsed_all(sent[0])] == [5, 6]
    # Each frame's bytes built once, for every socket.
    assert sent[0] == events[0]["wire:live"] + events[1]["wire:live"]


def test_a_single_pushed_event_is_written_as_built(server):
    sock = open_socket(server)
    sent = []
    sock.sendData = sent.append
    events = _pushed(5)
    assert _stream(sock, sent_through=4).write_pushed(4, events) == 1
    assert sent[0] is events[0]["wire:live"]  # built once, for every socket


async def test_rows_go_out_in_one_write_around_a_frame_that_takes_asgi(server):
    sock = open_socket(server)
    out = []
    sock.sendData = lambda data: out.append(("direct", data))
    # Frames over this size are autobahn's to write: through Channels' send.
    sock.maxMessagePayloadSize = 300
    stream = _stream(sock, sent_through=4)

    async def base_send(message):
        out.append(("asgi", message["text"]))

    stream.socket.base_send = base_send
    fields = ["e", "prices", "k", "update", json.dumps("x" * 500), 1, "2026-12-07"]
    big = queue_selectors.pushed_event(7, fields)
    rows = [*_pushed(5, 6), big, *_pushed(8, 9)]
    await stream._send_rows(rows, replay=False)
    # In order: the direct frames before the big one written first.
    assert [kind for kind, _ in out] == ["direct", "asgi", "direct"]
    assert [json.loads(f.data)["seq"] for f in parsed_all(out[0][1])] == [5, 6]
    assert json.loads(out[1][1])["seq"] == 7
    assert [json.loads(f.data)["seq"] for f in parsed_all(out[2][1])] == [8, 9]
    assert stream.sent_through == 9


def test_a_stream_writes_nothing_it_cannot_write_in_order(server):
    sock = open_socket(server)
    sock.sendData = pytest.fail
    assert _stream(sock, sent_through=3).write_pushed(4, _pushed(5)) == 0  # a gap
    held = _stream(sock, sent_through=4)
    asyncio.run(held.gate.acquire())  # a registration's image is being sent
    assert held.write_pushed(4, _pushed(5)) == 0
    assert _stream(None, sent_through=4).write_pushed(4, _pushed(5)) == 0  # no Daphne
    sock.state = sock.STATE_CLOSING
    assert _stream(sock, sent_through=4).write_pushed(4, _pushed(5)) == 0


# --- the fan-out's pushes ----------------------------------------------------


@pytest.fixture
def rung(monkeypatch):
    calls = []
    monkeypatch.setattr(
        notify,
        "ring_many",
        lambda heads, node=None, **push: calls.append((dict(heads), push)),
    )
    return calls


@pytest.mark.django_db(databases=["default", "node"])
def test_the_fan_out_pushes_plain_rows_with_the_head_before_them(user, region, rung):
    plain = connected_client(user, "plain", keys=["a", "b"])
    conflating = connected_client(user, "conflating", hello={"conflate": True})
    cache_services.entry_put(region="prices", key="a", value=1)
    fanout.fanout_node("node-1")
    first = logged_events_after(seq=0, limit=10)[-1].seq
    cache_services.entry_put(region="prices", key="a", value=2)
    cache_services.entry_put(region="prices", key="c", value=3)  # not plain's
    cache_services.entry_put(region="prices", key="b", value=4)
    fanout.fanout_node("node-1")
    events = logged_events_after(seq=first, limit=10)
    (heads, push) = rung[-1]
    assert set(heads) == {plain.id, conflating.id}
    # The conflating client's updates may conflate: it reads its queue.
    assert push["pushes"] == {plain.id: (first, [events[0].seq, events[2].seq])}
    assert set(push["events"]) == {events[0].seq, events[2].seq}


@pytest.mark.django_db(databases=["default", "node"])
def test_a_pass_with_large_values_wakes_without_pushing(user, region, rung):
    client = connected_client(user, "c1")
    big = "x" * fanout.PUSH_MAX_BYTES
    cache_services.entry_put(region="prices", key="k", value=big)
    fanout.fanout_node("node-1")
    (heads, push) = rung[-1]
    assert set(heads) == {client.id}
    assert push == {"pushes": {}, "events": {}}


@pytest.mark.django_db(databases=["default", "node"])
def test_a_backlog_pass_and_a_socket_elsewhere_are_not_pushed(user, region, rung):
    here = connected_client(user, "here")
    away = connected_client(user, "away")
    services.client_disconnected(client_id=away.id, socket_id="away")
    cache_services.entry_put(region="prices", key="k", value=1)
    fanout.fanout_node("node-1")
    (heads, push) = rung[-1]
    assert set(heads) == {here.id}
    assert set(push["pushes"]) == {here.id}
    entries = {f"k{i}": i for i in range(fanout.PUSH_MAX_EVENTS + 1)}
    cache_services.entry_putall(region="prices", entries=entries)
    fanout.fanout_node("node-1")
    (heads, push) = rung[-1]
    assert set(heads) == {here.id}
    assert push == {"pushes": {}, "events": {}}


@pytest.mark.django_db(databases=["default", "node"])
def test_a_pushed_event_makes_the_frame_its_row_makes(user, region, rung):
    client = connected_client(user, "c1")
    cache_services.entry_put(region="prices", key="k", value={"a": [1, 2.5, "é"]})
    cache_services.entry_destroy(region="prices", key="k")
    fanout.fanout_node("node-1")
    (_, push) = rung[-1]
    read = queue_selectors.queue_events_after(client_id=client.id, after=0, limit=10)
    assert [e["seq"] for e in read] == push["pushes"][client.id][1]
    for row in read:
        fields = json.loads(json.dumps(push["events"]))[str(row["seq"])]
        pushed = queue_selectors.pushed_event(row["seq"], fields)
        for replay in (False, True):
            assert protocol.event_frame(pushed, replay=replay) == protocol.event_frame(
                row, replay=replay
            )


# --- end to end, over the Redis wake-up channel ------------------------------


@pytest.mark.django_db(transaction=True, databases=["default", "node"])
async def test_a_caught_up_socket_sends_pushed_events_without_a_read(
    session, token, region, write, wake_redis, settings, monkeypatch
):
    reads = []
    real = delivery_rounds.ReadBatcher.next_batch

    async def counted(self, **kwargs):
        reads.append(kwargs["sent_through"])
        return await real(self, **kwargs)

    monkeypatch.setattr(delivery_rounds.ReadBatcher, "next_batch", counted)
    # No sweep meanwhile: it wakes a socket whose queue grew, to read.
    settings.DURABLECACHE_POLL_S = 3600
    sock, _ = await session(token, durable_id="d1")
    await sock.register(all_keys=True, durable=True)
    await sock.ready()
    channel = notify.wake_channel(settings.DURABLECACHE_NODE_NAME)
    async with asyncio.timeout(5):
        while not wake_redis.pubsub_numsub(channel)[0][1]:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
    try:
        await write(cache_services.entry_put, region="prices", key="warm", value=0)
        await sock.events(1)
        # Idle: the subscribe's wake-up of every socket read already.
        client_id = await db(lambda: DurableClient.objects.get().id)()
        (flag,) = wakeups.hub.sockets[client_id]
        async with asyncio.timeout(5):
            while flag.waiter is None or flag.is_set():  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        before = len(reads)
        for value in range(1, 4):
            await write(cache_services.entry_put, region="prices", key="k", value=value)
        frames = await sock.events(3)
        assert [f["value"] for f in frames] == [1, 2, 3]
        assert len(reads) == before  # sent from the pushes, no read of the queue
    finally:
        wakeups.hub.stop()
