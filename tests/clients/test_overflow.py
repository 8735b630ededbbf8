"""Bounded queues: an event past a client's ``max_queued`` overflows its
queue into a gap, recorded once in the cluster, and every host of the
queue drops its rows and queues nothing while the gap stands
(docs/protocol.md, "Bounded queues")."""

import logging

import pytest
from django.conf import settings as django_settings
from django.db import connections

from cache import counters
from cache import services as cache_services
from clients import fanout, services
from clients.models import DurableClient
from queues import selectors as queue_selectors
from tests.clients.test_hosts_agree import durable_client, set_node, write
from tests.helpers import connected_client, hello, queued_seqs

pytestmark = pytest.mark.django_db(databases=["default", "node"])


def _limited(user, durable_id="d1", max_queued=3, conflate="false"):
    client = connected_client(user, durable_id)
    DurableClient.objects.filter(pk=client.pk).update(max_queued=max_queued)
    from queues.models import QueueState

    QueueState.objects.filter(pk=client.pk).update(conflate=conflate)
    DurableClient.objects.filter(pk=client.pk).update(conflate=conflate)
    return client


def _write(*keys):
    return [
        cache_services.entry_put(region="prices", key=k, value=k)[1].seq for k in keys
    ]


def _gap(client):
    client.refresh_from_db()
    return client.gap


def test_a_queue_holds_exactly_max_queued_events(user, region):
    client = _limited(user, max_queued=3)
    seqs = _write("a", "b", "c")
    fanout.fanout_node("node-1")
    assert queued_seqs(client.id) == seqs
    assert _gap(client) is None


def test_one_event_more_overflows_into_a_gap(user, region, caplog):
    client = _limited(user, max_queued=3)
    seqs = _write("a", "b", "c")
    fanout.fanout_node("node-1")
    counters.counter.discard()
    with caplog.at_level(logging.WARNING, logger="clients.fanout"):
        _write("d")
        fanout.fanout_node("node-1")
    assert queued_seqs(client.id) == []
    assert _gap(client) == {"since": seqs[0] - 1, "dropped": 3, "reason": "overflow"}
    assert queue_selectors.queue_size(client_id=client.id) == 0
    assert "d1: queue overflowed" in caplog.text
    assert counters.counter.counts["node-1"][counters.OVERFLOWS] == 1
    assert counters.counter.counts["node-1"][counters.DROPPED_EVENTS] == 3


def test_an_overflow_inside_one_batch_counts_what_was_queued_before_it(user, region):
    client = _limited(user, max_queued=2)
    seqs = _write("a", "b", "c", "d")
    fanout.fanout_node("node-1")
    assert queued_seqs(client.id) == []
    assert _gap(client) == {"since": seqs[0] - 1, "dropped": 2, "reason": "overflow"}


def test_conflated_updates_do_not_count_towards_the_limit(user, region):
    client = _limited(user, max_queued=2, conflate="true")
    _write("a")
    _write("a", "a", "a", "a")  # updates: each replaces the older one
    fanout.fanout_node("node-1")
    assert len(queued_seqs(client.id)) == 2
    assert _gap(client) is None


def test_nothing_is_queued_while_the_gap_stands(user, region):
    client = _limited(user, max_queued=1)
    other = connected_client(user, "other")
    _write("a", "b")
    fanout.fanout_node("node-1")
    assert _gap(client) is not None
    _write("c", "d", "e")
    fanout.fanout_node("node-1")
    assert queued_seqs(client.id) == []
    assert len(queued_seqs(other.id)) == 5  # another client's queue is untouched
    # Registrations, timeout and redundancy untouched.
    client.refresh_from_db()
    assert client.interests.count() == 1


def test_a_host_whose_rows_predate_a_gap_recorded_elsewhere_drops_them(user, region):
    """Another host recorded the overflow first (its queue was longer: the
    acks relayed to it later); this host, holding fewer rows, drops them
    at its next pass over an event of the client's, and queues nothing."""
    client = _limited(user, max_queued=100)
    seqs = _write("a", "b")
    fanout.fanout_node("node-1")
    assert queued_seqs(client.id) == seqs
    DurableClient.objects.filter(pk=client.pk).update(
        gap_since=seqs[0] - 1, gap_dropped=2, gap_reason="overflow"
    )
    _write("c")
    fanout.fanout_node("node-1")
    assert queued_seqs(client.id) == []
    assert queue_selectors.queue_size(client_id=client.id) == 0
    # The gap recorded first stays as it was.
    assert _gap(client) == {"since": seqs[0] - 1, "dropped": 2, "reason": "overflow"}


def test_a_lagging_hosts_overflow_does_not_record_a_second_gap(user, region):
    client = _limited(user, max_queued=1)
    DurableClient.objects.filter(pk=client.pk).update(
        gap_since=0, gap_dropped=7, gap_reason="overflow"
    )
    recorded = fanout.gaps_record(
        [fanout.queue_services.Overflow(client.id, 5, 1, 6)], "node-1"
    )
    assert recorded == 0
    assert _gap(client) == {"since": 0, "dropped": 7, "reason": "overflow"}


def test_an_overflow_below_the_last_resync_is_not_recorded(user, region):
    """A host far behind overflows on events that a resync since covered."""
    client = _limited(user, max_queued=1)
    DurableClient.objects.filter(pk=client.pk).update(queue_floor=10)
    recorded = fanout.gaps_record(
        [fanout.queue_services.Overflow(client.id, 5, 1, 10)], "node-1"
    )
    assert recorded == 0
    assert _gap(client) is None


def test_the_overflow_adds_no_statement_to_the_passes_before_it(
    user, region, django_assert_num_queries
):
    """Reading the limit and the gap rides on the interest rows."""
    _limited(user, max_queued=1000)
    _write("a")
    fanout.fanout_node("node-1")
    _write("b")
    # The log's events and the interest rows (with the limit and the gap).
    with django_assert_num_queries(2, connection=connections["default"]):
        fanout.fanout_node("node-1")


def _away_on_two_hosts(user, max_queued):
    """A durable client away, primary node-1, its copy on node-2 (this
    store), every key of "prices"."""
    set_node("node-1")
    set_node("node-2")
    client = durable_client(
        user, primary="node-1", secondaries=["node-2"], redundancy=1
    )
    DurableClient.objects.filter(pk=client.pk).update(max_queued=max_queued)
    return client


def _fail_over_to_node_2(user, monkeypatch):
    set_node("node-1", up=False)
    monkeypatch.setattr(django_settings, "DURABLECACHE_NODE_NAME", "node-2")
    result = hello(user, "d1", socket_id="ch-2", redundancy=1)
    assert result.client.primary == "node-2"
    return result


def test_a_copy_promoted_after_the_primarys_overflow_resyncs(user, region, monkeypatch):
    """node-1 overflowed and recorded the gap; node-2's copy, behind (its
    fan-out had read fewer events, or its acks came sooner), still holds
    rows. node-1 dies before node-2 drops them: the promoted copy welcomes
    the client with the gap, no half queue, and the resync restarts it."""
    client = _away_on_two_hosts(user, max_queued=3)
    seqs = write("a", "b")
    fanout.fanout_node("node-2")
    assert queued_seqs(client.id) == seqs
    # node-1 (its queue longer: an unrelayed ack) overflowed at c.
    DurableClient.objects.filter(pk=client.pk).update(
        gap_since=seqs[0] - 1, gap_dropped=3, gap_reason="overflow"
    )
    result = _fail_over_to_node_2(user, monkeypatch)
    assert result.pending_events == 0
    client.refresh_from_db()
    assert client.gap == {"since": seqs[0] - 1, "dropped": 3, "reason": "overflow"}

    resync = services.client_resync_start(client_id=client.id)
    assert resync is not None
    assert resync.since == seqs[0] - 1
    assert [t.region for t in resync.targets] == ["prices"]
    assert queued_seqs(client.id) == []  # the stale rows are covered
    client.refresh_from_db()
    assert client.gap is None
    assert client.queue_floor == resync.floor

    after = write("c")
    fanout.fanout_node("node-2")
    assert queued_seqs(client.id) == after  # queued normally again
    assert services.client_resync_start(client_id=client.id) is None


def test_a_secondary_that_overflows_first_records_the_gap_and_takes_over(
    user, region, monkeypatch
):
    client = _away_on_two_hosts(user, max_queued=2)
    seqs = write("a", "b", "c")
    fanout.fanout_node("node-2")
    assert queued_seqs(client.id) == []
    gap = {"since": seqs[0] - 1, "dropped": 2, "reason": "overflow"}
    client.refresh_from_db()
    assert client.gap == gap
    # node-1's fan-out, later, overflows too: the gap stays the first one.
    assert (
        fanout.gaps_record(
            [fanout.queue_services.Overflow(client.id, seqs[1] - 1, 2, seqs[2])],
            "node-1",
        )
        == 0
    )
    write("d")
    fanout.fanout_node("node-2")
    assert queued_seqs(client.id) == []  # nothing while the gap stands
    result = _fail_over_to_node_2(user, monkeypatch)
    assert result.pending_events == 0
    assert result.client.gap == gap
