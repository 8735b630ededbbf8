"""The hosts of a queue hold the same events, whatever order things reach
them in: a relayed ack before the fan-out, a restart after the log was
emptied, a write committed while an interest registers.

The test database's one node store stands for the store of the node named
in each test (``node-2`` unless said otherwise); the other nodes are
``Node`` rows and the recorded task senders of ``clients.dispatch``, as in
tests/clients/test_replication.py. Each test's docstring names the
contract and the race that would break it.
"""

from datetime import timedelta

import pytest
from django.conf import settings as django_settings
from django.utils import timezone

from cache import selectors as cache_selectors
from cache import services as cache_services
from cache.models import Event, Node
from clients import fanout, maintenance, replication, services, tasks
from clients.matching import parse_selector
from clients.models import DurableClient, QueueSizeReport
from queues import selectors as queue_selectors
from queues import services as queue_services
from queues.models import FanoutCursor
from tests.clients.conftest import recorder
from tests.helpers import queued_seqs

pytestmark = pytest.mark.django_db(databases=["default", "node"])


def set_node(name, *, up=True, fanout_through=0):
    """A node's row: heartbeat now (up) or well past the node timeout."""
    now = timezone.now()
    age = 0 if up else django_settings.DURABLECACHE_NODE_TIMEOUT_S * 10
    Node.objects.update_or_create(
        name=name,
        defaults={
            "url": "http://127.0.0.1:1",  # refuses connections: never probed live
            "started_at": now - timedelta(hours=1),
            "last_heartbeat": now - timedelta(seconds=age),
            "fanout_through": fanout_through,
        },
    )


def durable_client(user, *, primary, secondaries, redundancy, durable_id="d1"):
    """A durable client that is away, with durable interest in every key of
    "prices" from the log head on; its queue copy in this store (complete,
    as a fan-out-filled host's is) and this store's cursor at the head."""
    head = cache_selectors.event_log_head()
    client = DurableClient.objects.create(
        durable_id=durable_id,
        owner=user,
        primary=primary,
        secondaries=list(secondaries),
        redundancy=redundancy,
        timeout=86400,
        is_connected=False,
        disconnected_at=timezone.now(),
        expires_at=timezone.now() + timedelta(days=1),
    )
    services.interest_register(
        client=client,
        region="prices",
        selector=parse_selector({"all_keys": True}),
        is_durable=True,
        policy="none",
    )
    queue_services.queue_ensure(
        client_id=client.id, durable_id=durable_id, conflate="false"
    )
    FanoutCursor.objects.update_or_create(
        node="node-2", defaults={"fanout_through": head}
    )
    return client


def write(*keys):
    """PUT each key; return the events' seqs."""
    return [
        cache_services.entry_put(region="prices", key=k, value=k)[1].seq for k in keys
    ]


def test_a_relayed_ack_that_outruns_the_secondarys_fanout_leaves_no_acked_event_queued(
    user, region, monkeypatch
):
    """Contract (docs/protocol.md "ack", ARCHITECTURE "Life of a write" 5): an
    ``ack up_to`` names the same rows on every host, the secondaries drop
    them within a second, and a client gets each event once; after a
    failover only the acks of the last relay period may come again.

    The race: node-1 (primary) delivers events 1..3, the client acks 3,
    and the relay reaches node-2 (``clients.ack`` -> ``queue_ack_many``)
    before node-2's own fan-out has read those events (a busy worker, a
    lost doorbell healed by the tick). The ack moves the copy's
    ``acked_through`` to 3 but not its ``last_seq``, so the fan-out
    (``_append``) skips what the queue has acked, not only what it holds.
    Were it to queue the three acked events after their ack, the primary's
    ack report (``apply_reported_acks``) would not heal it (its
    acked_through is no higher than the copy's): once the client goes away
    and node-1 dies, the promoted node-2 tells the client it has 3 pending
    events and hands it, again, events it acked long ago.
    """
    set_node("node-1")
    set_node("node-2")
    client = durable_client(
        user, primary="node-1", secondaries=["node-2"], redundancy=1
    )
    seqs = write("a", "b", "c")

    # node-1 delivered them and the client acked; the relay lands on node-2
    # before node-2's fan-out reads the events.
    tasks.ack_task({client.id.hex: seqs[-1]})
    fanout.fanout_node("node-2")

    # The primary's report of its acks (node-1's queue is empty, acked
    # through 3) is applied by node-2's tick: it should heal a relay gap.
    QueueSizeReport.objects.create(
        client=client, node="node-1", size=0, acked_through=seqs[-1]
    )
    replication.apply_reported_acks("node-2")

    # node-1 is SIGKILLed while the client is away; it comes back to node-2.
    set_node("node-1", up=False)
    monkeypatch.setattr(django_settings, "DURABLECACHE_NODE_NAME", "node-2")
    options = services.parse_hello_options({"durable_id": "d1", "redundancy": 1})
    result = services.client_hello(user=user, socket_id="ch-2", options=options)
    assert result.client is not None
    assert result.client.primary == "node-2"

    assert queued_seqs(client.id) == [], "events acked on the primary are queued again"
    assert result.pending_events == 0


def test_a_node_back_after_the_log_emptied_loses_no_event_silently(
    user, region, monkeypatch, adopted, dropped, django_capture_on_commit_callbacks
):
    """Contract (protocol §4.6, operations "node crash with its store
    intact" / failure table): no matching event is missed unless the queue
    is lost, and then ``pending_events: -1`` says so; only a complete copy
    is promoted.

    The sequence: node-2 holds a copy of a redundancy -1 client's queue
    and is SIGKILLed; the repair unlists it, node-1 (the primary) queues
    three more events. Nothing is written for ten minutes, so pruning
    (which does not wait for a down node that hosts nothing) empties the
    whole event log. node-2 restarts with its store, and ``cursor_init``
    (given ``oldest=None``) takes an emptied log past its cursor for a
    gap. Were it taken for "not behind", node-2 would keep its stale copy
    and its old cursor, the repair would list node-2 again (redundancy
    -1), ``queue_adopt`` would find the copy ``is_synced`` and report it
    complete at once, and once node-1 dies the promoted node-2 would
    welcome the client with 1 pending event: the three written while
    node-2 was down gone, and the client not told (-1).
    """
    recorder(monkeypatch, "copy_out_on")
    set_node("node-1")
    set_node("node-2")
    client = durable_client(
        user, primary="node-1", secondaries=["node-2"], redundancy=-1
    )
    write("a")
    fanout.fanout_node("node-2")
    assert len(queued_seqs(client.id)) == 1

    # node-2 is SIGKILLed; node-1's tick takes it for down and unlists it.
    set_node("node-2", up=False, fanout_through=cache_selectors.event_log_head())
    replication.placement_repair()
    client.refresh_from_db()
    assert client.secondaries == []
    seqs = write("b", "c", "d")  # queued on node-1 only

    # Ten quiet minutes later, node-1's tick prunes the whole log.
    Event.objects.update(ts=timezone.now() - timedelta(minutes=11))
    set_node("node-1", fanout_through=seqs[-1])
    maintenance.prune_event_log()
    assert cache_selectors.event_log_oldest() is None

    # node-2 restarts with its store (runnode.prepare), then heartbeats.
    dropped = queue_services.cursor_init(
        node="node-2",
        head=cache_selectors.event_log_head(),
        oldest=cache_selectors.event_log_oldest(),
    )
    set_node("node-2", fanout_through=queue_selectors.fanout_cursor(node="node-2"))
    # node-1's tick places a copy on it again; node-2's worker adopts it.
    with django_capture_on_commit_callbacks(execute=True):
        replication.placement_repair()
    client.refresh_from_db()
    assert client.secondaries == ["node-2"]
    assert adopted == [("node-2", client.id, "node-1")]
    replication.adopt(client_id=client.id, node="node-2", source="node-1")
    fanout.fanout_node("node-2")
    # (Here node-2 already counts as a complete copy: ``syncing`` is empty.)

    # node-1 is SIGKILLed; the client comes back to node-2.
    set_node("node-1", up=False)
    monkeypatch.setattr(django_settings, "DURABLECACHE_NODE_NAME", "node-2")
    options = services.parse_hello_options({"durable_id": "d1", "redundancy": -1})
    result = services.client_hello(user=user, socket_id="ch-2", options=options)
    assert result.client is not None
    assert result.client.primary == "node-2"

    assert result.pending_events in (4, -1), (
        f"welcomed with {result.pending_events} pending (cursor_init dropped"
        f" {dropped}); events {seqs} were written while node-2 was down"
    )


def test_an_event_committed_while_an_interest_registers_is_queued_alike_on_every_host(
    user, region, monkeypatch, adopted
):
    """Contract (ARCHITECTURE "Life of a write" 3, protocol §4.2/§4.5): a
    queue's hosts hold the same events (an ``ack up_to`` names the same
    rows everywhere; "every host queues the same ones however late its
    fan-out"), and events of one key reach a client in version order.

    The race: ``interest_register`` reads the log head as the interest's
    ``since_seq`` with the event log locked, in the transaction that
    creates the interest. Read without the lock, a write that commits in
    between (seq above ``since_seq``) is read by the primary's fan-out
    before the interest row exists, so node-1 never queues it, while
    node-2, whose fan-out reads it after the interest committed, queues it
    (``since_seq`` says the interest wants it). The client gets K v2 live
    from node-1, node-1 dies before the ack, and node-2 replays K v1 after
    it: a version older than one already delivered, which node-1 never
    sent. (The mirror image of ``EndedInterest``, whose ``until_seq`` is
    read with the log locked.)
    """
    set_node("node-1")
    set_node("node-2")
    options = services.parse_hello_options({"durable_id": "d1", "redundancy": 1})
    client = services.client_hello(user=user, socket_id="ch-1", options=options).client
    head = cache_selectors.event_log_head()
    for node in ("node-1", "node-2"):
        FanoutCursor.objects.update_or_create(
            node=node, defaults={"fanout_through": head}
        )

    real_head = cache_selectors.event_log_head
    raced = []

    def head_then_a_write():
        seq = real_head()
        if not raced:
            # Another writer commits K v1, and node-1's doorbell fan-out
            # reads it, before this registration commits its interest.
            raced.append(write("K")[0])
            fanout.fanout_node("node-1")
        return seq

    monkeypatch.setattr(cache_selectors, "event_log_head", head_then_a_write)
    services.interest_register(
        client=client,
        region="prices",
        selector=parse_selector({"keys": ["K"]}),
        is_durable=True,
        policy="none",
    )
    monkeypatch.setattr(cache_selectors, "event_log_head", real_head)
    v2 = write("K")[0]  # K v2, after the registration
    fanout.fanout_node("node-1")
    on_node_1 = queued_seqs(client.id)

    # What node-2's fan-out (its cursor still before K v1) queues for the
    # client: the same matching, read-only here (one test store).
    events = cache_selectors.logged_events_after(seq=head, limit=100)
    on_node_2 = [
        e.seq
        for e in fanout.match_events(events, {client.id}, "node-2").appends[client.id]
    ]

    if raced:  # (with the head read under the log lock, no write races in)
        assert on_node_2 == [raced[0], v2]
    assert on_node_1 == on_node_2, (
        f"node-1 queued {on_node_1}, node-2 queues {on_node_2}: K v1 (seq"
        f" {raced}) would be replayed after K v2 on a failover"
    )
