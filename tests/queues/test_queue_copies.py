"""Node-store side of redundant queues: adopting a copy, paging, filling, acks.

Source and target of a copy are two client ids in this one store: a page is
plain JSON and names no client, so it can be stored into any queue.
"""

import uuid
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from cache.models import Event
from cache.selectors import LoggedEvent
from queues import selectors as queue_selectors
from queues import services as queue_services
from queues.models import FanoutCursor, QueuedEvent, QueueEntry, QueueState
from tests.helpers import queued_rows

pytestmark = pytest.mark.django_db(databases=["default", "node"])

NODE = "node-1"


def event(seq, key=None, op="create"):
    return Event(
        seq=seq,
        event_id=f"ev{seq:06d}",
        region="prices",
        key=key or f"k{seq}",
        op=op,
        value={"n": seq},
        version=seq,
        conflate=False,
        ts=timezone.now() - timedelta(seconds=1000 - seq),
    )


def source_queue(seqs, *, durable_id="src", conflate="false"):
    """A complete queue holding one entry per seq (distinct keys)."""
    client_id = uuid.uuid4()
    queue_services.queue_ensure(
        client_id=client_id, durable_id=durable_id, conflate=conflate
    )
    append(client_id, seqs)
    return client_id


def append(client_id, seqs):
    """What this node's own fan-out does for the queue."""
    with transaction.atomic(using="node"):
        queue_services.queue_append_many(
            {client_id: [LoggedEvent.of(event(s)) for s in seqs]}
        )


def set_cursor(through):
    FanoutCursor.objects.update_or_create(
        node=NODE, defaults={"fanout_through": through}
    )


def adopt(client_id=None, *, source="node-2", durable_id="copy", conflate="false"):
    return queue_services.queue_adopt(
        client_id=client_id or uuid.uuid4(),
        durable_id=durable_id,
        conflate=conflate,
        node=NODE,
        source=source,
    )


def rows(client_id):
    return [(r.seq, r.event_id) for r in queued_rows(client_id)]


_EVENT_FIELDS = ("seq", "event_id", "region", "key", "op", "value", "version", "ts")


def held(e):
    """An entry dict as a queue row with its event, as a source reads it."""
    row = QueueEntry(seq=e["seq"], region=e["region"], key=e["key"], op=e["op"])
    return queue_selectors.HeldEntry(
        row, QueuedEvent(**{k: e[k] for k in _EVENT_FIELDS})
    )


def page(entries, *, acked_through=0, next_after=0, done=False):
    return {
        "durable_id": "copy",
        "conflate": "false",
        "acked_through": acked_through,
        "entries": [queue_selectors.entry_to_copy(held(e)) for e in entries],
        "next_after": next_after,
        "done": done,
    }


def entry(seq):
    e = event(seq)
    return {
        "seq": seq,
        "event_id": e.event_id,
        "region": e.region,
        "key": e.key,
        "op": e.op,
        "value": e.value,
        "version": e.version,
        "ts": e.ts,
    }


def test_adopt_creates_unsynced_copy_at_the_fanout_cursor():
    set_cursor(42)
    state = adopt(source="node-2")
    stored = QueueState.objects.get(pk=state.pk)
    assert stored.is_synced is False
    assert stored.copy_upto == 42
    assert stored.last_seq == 42
    assert stored.copy_after == 0
    assert stored.copy_source == "node-2"
    assert stored.copy_requested_at is not None
    assert stored.durable_id == "copy"
    assert stored.size == 0


def test_adopt_without_cursor_row_starts_at_zero_and_creates_the_cursor():
    state = adopt()
    assert (state.copy_upto, state.last_seq) == (0, 0)
    assert queue_selectors.fanout_cursor(node=NODE) == 0
    assert FanoutCursor.objects.filter(node=NODE).exists()


def test_second_adopt_keeps_the_copy_and_only_changes_its_source():
    set_cursor(10)
    first = adopt(source="node-2")
    queue_services.queue_copy_in(
        client_id=first.pk, page=page([entry(3)], next_after=3)
    )
    QueueState.objects.filter(pk=first.pk).update(
        copy_requested_at=timezone.now() - timedelta(hours=1)
    )
    set_cursor(20)
    second = adopt(first.pk, source="node-3")
    stored = QueueState.objects.get(pk=first.pk)
    assert second.pk == first.pk
    assert (stored.copy_upto, stored.last_seq, stored.copy_after) == (10, 10, 3)
    assert stored.copy_source == "node-3"
    assert stored.copy_requested_at > timezone.now() - timedelta(minutes=1)
    assert stored.is_synced is False
    assert rows(first.pk) == [(3, "ev000003")]
    assert QueueState.objects.count() == 1


def test_adopt_leaves_a_complete_queue_as_it_is():
    client_id = source_queue([1, 2])
    set_cursor(50)
    state = adopt(client_id, source="node-9")
    stored = QueueState.objects.get(pk=client_id)
    assert state.is_synced is True
    assert (stored.is_synced, stored.last_seq, stored.copy_upto) == (True, 2, 0)
    assert stored.copy_source == ""
    assert stored.size == 2


def test_copy_page_is_none_without_a_complete_copy():
    assert (
        queue_selectors.queue_copy_page(
            client_id=uuid.uuid4(), after=0, upto=10, limit=5
        )
        is None
    )
    set_cursor(10)
    unsynced = adopt()
    assert (
        queue_selectors.queue_copy_page(
            client_id=unsynced.pk, after=0, upto=10, limit=5
        )
        is None
    )


def test_copy_page_pages_by_limit_with_next_after_and_done():
    client_id = source_queue([2, 4, 6, 8, 10], durable_id="src-d", conflate="true")
    queue_services.queue_ack(client_id=client_id, up_to=2)

    def get(after):
        return queue_selectors.queue_copy_page(
            client_id=client_id, after=after, upto=8, limit=2
        )

    first = get(0)
    assert [e["seq"] for e in first["entries"]] == [4, 6]
    assert (first["next_after"], first["done"]) == (6, False)
    assert first["acked_through"] == 2
    assert (first["durable_id"], first["conflate"]) == ("src-d", "true")
    assert first["entries"][0] == {
        "seq": 4,
        "event_id": "ev000004",
        "region": "prices",
        "key": "k4",
        "op": "create",
        "value": {"n": 4},
        "version": 4,
        "ts": first["entries"][0]["ts"],
        "conflates": False,
    }
    # A full page is not the last, even when it reaches upto.
    second = get(6)
    assert [e["seq"] for e in second["entries"]] == [8]
    assert (second["next_after"], second["done"]) == (8, True)
    # Nothing is sent past upto (the target's own fan-out has those).
    last = get(8)
    assert (last["entries"], last["next_after"], last["done"]) == ([], 8, True)


def test_copy_page_full_last_page_is_followed_by_an_empty_done_page():
    client_id = source_queue([1, 2, 3, 4])
    first = queue_selectors.queue_copy_page(
        client_id=client_id, after=0, upto=4, limit=2
    )
    second = queue_selectors.queue_copy_page(
        client_id=client_id, after=first["next_after"], upto=4, limit=2
    )
    third = queue_selectors.queue_copy_page(
        client_id=client_id, after=second["next_after"], upto=4, limit=2
    )
    assert [(p["next_after"], p["done"]) for p in (first, second, third)] == [
        (2, False),
        (4, False),
        (4, True),
    ]
    assert [len(p["entries"]) for p in (first, second, third)] == [2, 2, 0]


def test_copy_in_stores_only_entries_between_acked_and_copy_upto():
    set_cursor(6)
    copy = adopt()
    done = queue_services.queue_copy_in(
        client_id=copy.pk,
        page=page([entry(s) for s in (1, 2, 4, 6, 8)], acked_through=2, next_after=8),
    )
    stored = QueueState.objects.get(pk=copy.pk)
    assert done is False
    assert [seq for seq, _ in rows(copy.pk)] == [4, 6]
    assert stored.size == 2
    assert stored.acked_through == 2
    assert stored.delivered_through == 2
    assert stored.copy_after == 8
    assert stored.is_synced is False


def test_copy_in_skips_entries_present_when_a_page_repeats():
    set_cursor(9)
    copy = adopt()
    repeated = page([entry(s) for s in (3, 5, 7)], next_after=7)
    assert queue_services.queue_copy_in(client_id=copy.pk, page=repeated) is False
    assert queue_services.queue_copy_in(client_id=copy.pk, page=repeated) is False
    # An overlapping page adds only what is new.
    overlap = page([entry(s) for s in (7, 9)], next_after=9)
    assert queue_services.queue_copy_in(client_id=copy.pk, page=overlap) is False
    assert [seq for seq, _ in rows(copy.pk)] == [3, 5, 7, 9]
    assert QueueState.objects.get(pk=copy.pk).size == 4


def test_copy_in_applies_the_page_ack_to_copied_and_fanned_out_entries():
    set_cursor(6)
    copy = adopt()
    # The copy's own fan-out appends after copy_upto meanwhile.
    append(copy.pk, [7, 8])
    assert QueueState.objects.get(pk=copy.pk).size == 2
    first = page([entry(s) for s in (2, 4)], next_after=4)
    queue_services.queue_copy_in(client_id=copy.pk, page=first)
    assert QueueState.objects.get(pk=copy.pk).size == 4
    # The client acked through 7 on the primary before the next page.
    second = page([entry(6)], acked_through=7, next_after=6, done=True)
    assert queue_services.queue_copy_in(client_id=copy.pk, page=second) is True
    stored = QueueState.objects.get(pk=copy.pk)
    assert [seq for seq, _ in rows(copy.pk)] == [8]
    assert stored.acked_through == 7
    assert stored.size == 1 == QueueEntry.objects.filter(queue_id=copy.pk).count()
    assert stored.last_seq == 8


def test_copy_in_marks_synced_on_the_last_page_and_ignores_late_pages():
    set_cursor(5)
    copy = adopt()
    last = page([entry(5)], next_after=5, done=True)
    assert queue_services.queue_copy_in(client_id=copy.pk, page=last) is True
    stored = QueueState.objects.get(pk=copy.pk)
    assert stored.is_synced is True
    assert (stored.durable_id, stored.conflate) == ("copy", "false")
    late = page([entry(4), entry(5)], acked_through=5, next_after=5)
    assert queue_services.queue_copy_in(client_id=copy.pk, page=late) is True
    stored.refresh_from_db()
    assert stored.is_synced is True
    assert rows(copy.pk) == [(5, "ev000005")]
    assert stored.acked_through == 0


def test_copy_in_for_an_unknown_queue_returns_none():
    assert (
        queue_services.queue_copy_in(
            client_id=uuid.uuid4(), page=page([entry(1)], next_after=1, done=True)
        )
        is None
    )
    assert not QueueEntry.objects.exists()


def test_copy_in_refuses_a_bad_timestamp():
    set_cursor(5)
    copy = adopt()
    bad = page([entry(1)], next_after=1)
    bad["entries"][0]["ts"] = "yesterday"
    with pytest.raises(ValueError, match="bad timestamp"):
        queue_services.queue_copy_in(client_id=copy.pk, page=bad)


def test_page_round_trip_yields_the_same_queue():
    source = source_queue([3, 5, 8, 13, 21, 34, 55])
    queue_services.queue_ack(client_id=source, up_to=5)
    set_cursor(55)
    target = adopt().pk
    state = QueueState.objects.get(pk=target)
    after, done, pages = state.copy_after, False, 0
    while not done:
        got = queue_selectors.queue_copy_page(
            client_id=source, after=after, upto=state.copy_upto, limit=2
        )
        done = queue_services.queue_copy_in(client_id=target, page=got)
        after = got["next_after"]
        pages += 1
    assert pages == 3
    assert rows(target) == rows(source)
    assert [seq for seq, _ in rows(target)] == [8, 13, 21, 34, 55]
    copied, original = (
        QueueState.objects.get(pk=target),
        QueueState.objects.get(pk=source),
    )
    assert copied.is_synced is True
    assert copied.size == original.size == 5
    assert copied.acked_through == original.acked_through == 5
    assert copied.durable_id == original.durable_id == "src"
    fields = ("region", "key", "op", "value", "version", "ts", "conflates", "cq")
    assert [[getattr(r, f) for f in fields] for r in queued_rows(target)] == [
        [getattr(r, f) for f in fields] for r in queued_rows(source)
    ]


def test_queue_ack_many_acks_each_queue_and_counts_dropped_rows():
    first = source_queue([1, 2, 3, 4])
    second = source_queue([2, 5])
    dropped = queue_services.queue_ack_many({first: 3, second: 1, uuid.uuid4(): 9})
    assert dropped == 3
    assert [seq for seq, _ in rows(first)] == [4]
    assert [seq for seq, _ in rows(second)] == [2, 5]
    assert queue_selectors.queue_acked_through()[first] == 3
    assert queue_selectors.queue_acked_through()[second] == 1
    assert queue_selectors.queue_size(client_id=first) == 1
    # An ack at or below what was acked changes nothing.
    assert queue_services.queue_ack_many({first: 2, second: 1}) == 0
    assert queue_selectors.queue_size(client_id=second) == 2


def test_a_round_counts_each_ack_even_when_a_client_acks_twice():
    # A client's acks in one round drop their rows in turn, each counted
    # apart: the first from the queue's start, each next from the one
    # before; an ack below an earlier one drops nothing.
    first = source_queue([1, 2, 3, 4, 5])
    second = source_queue([2, 5, 6])
    twice = queue_services.queue_ack_and_mark_many(
        acks=[(first, 2), (second, 5), (first, 4), (first, 3)],
        marking=[second],
        read=lambda: {second: 6},
    )
    assert twice == [2, 2, 2, 0]
    once = queue_services.queue_ack_and_mark_many(
        acks=[(first, 5), (second, 6), (uuid.uuid4(), 1)]
    )
    assert once == [1, 1, 0]
    assert rows(first) == rows(second) == []
    sizes = queue_selectors.queue_sizes()
    assert (sizes[first], sizes[second]) == (0, 0)
    assert queue_selectors.queue_acked_through()[second] == 6


def test_copy_in_keeps_which_rows_may_conflate():
    set_cursor(9)
    copy = adopt(conflate="true")
    updates = [{**entry(s), "op": "update"} for s in (3, 5)]
    sent = page([*updates, entry(7)], next_after=7)
    sent["conflate"] = "true"
    sent["entries"][0]["conflates"] = True
    # A page from a node that does not send the field says nothing: an
    # update may conflate unless the queue never does.
    del sent["entries"][1]["conflates"]
    del sent["entries"][2]["conflates"]
    queue_services.queue_copy_in(client_id=copy.pk, page=sent)
    stored = QueueEntry.objects.filter(queue_id=copy.pk).order_by("seq")
    assert list(stored.values_list("seq", "conflates")) == [
        (3, True),
        (5, True),
        (7, False),
    ]


def test_a_copy_page_of_another_mode_is_classified_in_the_copys():
    set_cursor(2)
    copy = adopt()  # mode "false", as the client's row said
    with transaction.atomic(using="node"):
        queue_services.queue_append_many(
            {copy.pk: [LoggedEvent.of(event(3, op="update"))]}
        )
    # Built on the source before a hello there changed the mode: the page
    # neither sets the copy's mode nor leaves its rows in its own.
    sent = page(
        [{**entry(2), "op": "update", "conflates": True}], next_after=2, done=True
    )
    sent["conflate"] = "true"
    assert queue_services.queue_copy_in(client_id=copy.pk, page=sent) is True
    stored = QueueEntry.objects.filter(queue_id=copy.pk).order_by("seq")
    assert list(stored.values_list("seq", "conflates")) == [(2, False), (3, False)]
    assert QueueState.objects.get(pk=copy.pk).conflate == "false"
