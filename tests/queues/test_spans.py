"""Spans: one queue row for a run of a queue's plain events that a pass
read one after another (``QueueEntry.through``). Reads, acks, the prune,
a change of mode and copies see the events it holds, one by one."""

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
from queues.services import CqList
from queues.services.append import Overflow
from tests.helpers import queued_seqs

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "node"])

NODE = "node-1"
NOW = timezone.now()


def event(seq, *, key=None, op="create", region="prices"):
    return LoggedEvent.of(
        Event(
            seq=seq,
            event_id=f"ev{seq:06d}",
            region=region,
            key=f"k{seq}" if key is None else key,
            op=op,
            value={"n": seq},
            version=seq,
            conflate=False,
            ts=NOW - timedelta(seconds=1000 - seq),
        )
    )


def queue(conflate="false"):
    pk = uuid.uuid4()
    queue_services.queue_ensure(client_id=pk, durable_id=None, conflate=conflate)
    return pk


def fan_out(read, appends, **options):
    """One pass that read ``read`` (events) and appends, per queue, the
    events of those seqs."""
    by_seq = {e.seq: e for e in read}
    with transaction.atomic(using="node"):
        FanoutCursor.objects.get_or_create(node=NODE)
        return queue_services.queue_append_many(
            {pk: [by_seq[s] for s in seqs] for pk, seqs in appends.items()},
            read=read,
            **options,
        )


def rows(pk):
    return list(
        QueueEntry.objects.filter(queue_id=pk)
        .order_by("seq")
        .values_list("seq", "through")
    )


def size(pk):
    return QueueState.objects.get(pk=pk).size


def read_seqs(pk, after=0, limit=100, through=None):
    got = queue_selectors.queue_events_after(
        client_id=pk, after=after, limit=limit, through=through
    )
    return [e["seq"] for e in got]


def test_a_run_of_plain_events_read_together_is_one_row_holding_them_all():
    pk = queue()
    fan_out([event(s) for s in range(1, 6)], {pk: [1, 2, 3, 4, 5]})
    assert rows(pk) == [(1, 5)]
    assert size(pk) == 5
    assert read_seqs(pk) == [1, 2, 3, 4, 5]
    held = queue_selectors.queue_entries_after(client_id=pk, after=0, limit=10)
    assert [(h.seq, h.key, h.entry.through) for h in held] == [
        (s, f"k{s}", s) for s in range(1, 6)
    ]


def test_a_run_breaks_where_the_pass_read_an_event_the_queue_does_not_want():
    mine, other = queue(), queue()
    read = [event(s) for s in range(1, 7)]
    fan_out(read, {mine: [1, 2, 4, 5, 6], other: [3]})
    assert rows(mine) == [(1, 2), (4, 6)]
    assert rows(other) == [(3, 3)]
    assert read_seqs(mine) == [1, 2, 4, 5, 6]
    assert read_seqs(other) == [3]


def test_a_run_breaks_at_a_row_that_may_conflate_or_names_a_cq():
    pk = queue(conflate="true")
    read = [event(1), event(2, op="update"), event(3), event(4), event(5)]
    cqs = {pk: {4: CqList('[{"name": "c", "cq_op": "entered"}]', False)}}
    fan_out(read, {pk: [1, 2, 3, 4, 5]}, cqs=cqs)
    assert rows(pk) == [(1, 1), (2, 2), (3, 3), (4, 4), (5, 5)]
    assert list(
        QueueEntry.objects.filter(queue_id=pk)
        .order_by("seq")
        .values_list("conflates", flat=True)
    ) == [False, True, False, False, False]
    assert read_seqs(pk) == [1, 2, 3, 4, 5]


def test_reads_page_through_a_span_from_inside_it():
    pk = queue()
    fan_out([event(s) for s in range(1, 11)], {pk: list(range(1, 11))})
    assert read_seqs(pk, after=3, limit=4) == [4, 5, 6, 7]
    assert read_seqs(pk, after=7, limit=4) == [8, 9, 10]
    assert read_seqs(pk, after=3, limit=10, through=6) == [4, 5, 6]
    many = queue_selectors.queue_reads_after_many(
        [(pk, 0, 2, None), (pk, 5, 3, 7), (pk, 10, 5, None)]
    )
    assert [[e["seq"] for e in events] for events, _ in many] == [[1, 2], [6, 7], []]
    page = queue_selectors.queue_copy_page(client_id=pk, after=2, upto=10, limit=3)
    assert [e["seq"] for e in page["entries"]] == [3, 4, 5]
    assert page["next_after"] == 5


def test_an_ack_inside_a_span_cuts_its_front_and_counts_its_events():
    pk, other = queue(), queue()
    fan_out([event(s) for s in range(1, 9)], {pk: list(range(1, 9)), other: [8]})
    assert queue_services.queue_ack(client_id=pk, up_to=3) == 3
    assert rows(pk) == [(4, 8)]
    assert size(pk) == 5
    assert read_seqs(pk) == [4, 5, 6, 7, 8]
    # Two acks of one queue in one round: each counts its own range.
    dropped = queue_services.queue_ack_and_mark_many(acks=[(pk, 5), (pk, 7)])
    assert dropped == [2, 2]
    assert rows(pk) == [(8, 8)]
    assert size(pk) == 1
    assert queue_services.queue_ack(client_id=pk, up_to=8) == 1
    assert rows(pk) == []
    assert size(pk) == 0
    assert rows(other) == [(8, 8)]


def test_an_ack_past_several_rows_drops_them_all_and_cuts_the_last():
    pk, other = queue(), queue()
    read = [event(s) for s in range(1, 11)]
    fan_out(read, {pk: [1, 2, 3, 5, 6, 7, 8, 9, 10], other: [4]})
    assert rows(pk) == [(1, 3), (5, 10)]
    assert queue_services.queue_ack(client_id=pk, up_to=6) == 5
    assert rows(pk) == [(7, 10)]
    assert size(pk) == 4
    assert read_seqs(pk) == [7, 8, 9, 10]


def test_the_prune_keeps_every_event_a_span_holds():
    pk, other = queue(), queue()
    read = [event(s) for s in range(1, 11)]
    fan_out(read, {pk: [1, 2, 3, 4, 5, 6], other: [8, 9, 10]})
    queue_services.queue_ack(client_id=pk, up_to=2)
    queue_services.queue_ack(client_id=other, up_to=9)
    # 1-2 and 8-9 are acked, 7 no queue wanted (never stored): the first
    # queue's span holds 3-6, the second's 10.
    queue_services.queued_events_prune(NODE, force=True)
    assert list(QueuedEvent.objects.order_by("seq").values_list("seq", flat=True)) == [
        3, 4, 5, 6, 10,
    ]  # fmt: skip
    assert read_seqs(pk) == [3, 4, 5, 6]
    queue_services.queue_drop(client_id=pk)
    queue_services.queue_drop(client_id=other)
    queue_services.queued_events_prune(NODE, force=True)
    assert not QueuedEvent.objects.exists()


def test_a_change_of_mode_splits_spans_so_their_updates_may_conflate():
    pk = queue(conflate="false")
    read = [event(1, key="a", op="update"), event(2, key="b"), event(3, key="c")]
    fan_out(read, {pk: [1, 2, 3]})
    assert rows(pk) == [(1, 3)]
    queue_services.queue_ensure(client_id=pk, durable_id=None, conflate="true")
    assert list(
        QueueEntry.objects.filter(queue_id=pk)
        .order_by("seq")
        .values_list("seq", "through", "key", "op", "conflates")
    ) == [
        (1, 1, "a", "update", True),
        (2, 2, "b", "create", False),
        (3, 3, "c", "create", False),
    ]
    # A later update of "a" conflates the one that was in the span.
    fan_out([event(4, key="a", op="update")], {pk: [4]})
    assert queued_seqs(pk) == [2, 3, 4]
    assert size(pk) == 3


def test_a_copy_of_a_queue_with_spans_holds_the_same_events_one_by_one():
    source = queue()
    fan_out([event(s) for s in range(1, 7)], {source: list(range(1, 7))})
    copy = uuid.uuid4()
    with transaction.atomic(using="node"):
        FanoutCursor.objects.update_or_create(node=NODE, defaults={"fanout_through": 6})
    queue_services.queue_adopt(
        client_id=copy, durable_id=None, conflate="false", node=NODE, source="n2"
    )
    page = queue_selectors.queue_copy_page(client_id=source, after=0, upto=6, limit=4)
    page["acked_through"] = 2
    assert queue_services.queue_copy_in(client_id=copy, page=page) is False
    # Pages repeat and overlap: what a row holds is not stored again.
    assert queue_services.queue_copy_in(client_id=copy, page=page) is False
    rest = queue_selectors.queue_copy_page(client_id=source, after=4, upto=6, limit=4)
    assert queue_services.queue_copy_in(client_id=copy, page=rest) is True
    assert queued_seqs(copy) == [3, 4, 5, 6]
    assert size(copy) == 4


def test_a_copy_page_ack_cuts_a_span_the_copy_fanned_out_itself():
    copy = uuid.uuid4()
    queue_services.queue_adopt(
        client_id=copy, durable_id=None, conflate="false", node=NODE, source="n2"
    )
    fan_out([event(s) for s in range(1, 6)], {copy: [1, 2, 3, 4, 5]})
    assert rows(copy) == [(1, 5)]
    page = {
        "durable_id": None,
        "conflate": "false",
        "acked_through": 3,
        "entries": [],
        "next_after": 0,
        "done": False,
    }
    queue_services.queue_copy_in(client_id=copy, page=page)
    assert rows(copy) == [(4, 5)]
    assert size(copy) == 2


def test_an_overflow_empties_a_queue_of_spans_and_says_since_when():
    pk = queue()
    fan_out([event(s) for s in range(1, 5)], {pk: [1, 2, 3, 4]})
    queue_services.queue_ack(client_id=pk, up_to=2)
    overflows = []
    fan_out(
        [event(s) for s in range(5, 8)],
        {pk: [5, 6, 7]},
        limits={pk: 3},
        overflows=overflows,
    )
    assert overflows == [Overflow(pk, 2, 3, 6)]
    assert rows(pk) == []
    assert size(pk) == 0


def test_a_pushed_queue_gets_spans_and_its_push_names_every_event():
    pushed, other = queue(), queue()
    plain = {}
    read = [event(s) for s in range(1, 4)]
    fan_out(
        read, {pushed: [1, 2, 3], other: [1, 2, 3]}, plain=plain, plain_for={pushed}
    )
    assert plain == {pushed: (0, [1, 2, 3])}
    assert rows(pushed) == [(1, 3)]
    assert rows(other) == [(1, 3)]
    assert read_seqs(pushed, after=0) == [1, 2, 3]


def test_a_push_names_only_the_events_after_what_the_queue_acked():
    # A relayed ack ahead of this host's fan-out: the push starts after it.
    pushed = queue()
    queue_services.queue_ack(client_id=pushed, up_to=2)
    plain = {}
    read = [event(s) for s in range(1, 5)]
    fan_out(read, {pushed: [1, 2, 3, 4]}, plain=plain, plain_for={pushed})
    assert plain == {pushed: (0, [3, 4])}
    assert rows(pushed) == [(3, 4)]


def test_acks_inside_a_span_over_a_gap_in_the_log_count_only_its_events():
    # The log's seqs have a gap (6-8: rolled back writes): the span holds
    # events 5 and 9, and an ack may land where it holds nothing.
    pk = queue()
    fan_out([event(5), event(9)], {pk: [5, 9]})
    assert rows(pk) == [(5, 9)]
    assert queue_services.queue_ack(client_id=pk, up_to=7) == 1
    assert queue_services.queue_ack(client_id=pk, up_to=8) == 0
    assert size(pk) == 1
    assert read_seqs(pk, after=8) == [9]
    assert queue_services.queue_ack(client_id=pk, up_to=9) == 1
    assert rows(pk) == []
    assert size(pk) == 0


def test_a_span_an_ack_cut_down_to_one_event_splits_into_that_events_own_row():
    # The span's row names its first event's key: once the ack leaves
    # only event 2 in it, nothing must take it for an update of "K".
    pk = queue(conflate="false")
    fan_out([event(1, key="K", op="update"), event(2, key="J")], {pk: [1, 2]})
    assert queue_services.queue_ack(client_id=pk, up_to=1) == 1
    assert rows(pk) == [(2, 2)]
    assert QueueEntry.objects.get(queue_id=pk).op == QueueEntry.SPAN
    queue_services.queue_ensure(client_id=pk, durable_id=None, conflate="true")
    assert list(
        QueueEntry.objects.filter(queue_id=pk).values_list(
            "seq", "through", "key", "op", "conflates"
        )
    ) == [(2, 2, "J", "create", False)]
    fan_out([event(3, key="K", op="update")], {pk: [3]})
    assert queued_seqs(pk) == [2, 3]
    assert size(pk) == 2
