"""clients.fanout: which hosted queues an event goes to, and whose sockets
are woken for it."""

from datetime import timedelta

import pytest
from django.db import connections

from cache import services as cache_services
from cache.models import Node
from clients import fanout, maintenance, services
from clients.matching import parse_selector
from clients.models import DurableClient, EndedInterest, Interest
from queues import notify
from queues import selectors as queue_selectors
from tests.helpers import connected_client

pytestmark = pytest.mark.django_db(databases=["default", "node"])


def _keys(client):
    rows = queue_selectors.queue_entries_after(client_id=client.id, after=0, limit=100)
    return [(r.op, r.key) for r in rows]


def test_each_event_reaches_the_interests_that_want_it(user, region):
    a = connected_client(user, "a", keys=["a", "x"])
    b = connected_client(user, "b", keys=["b"])
    pattern = connected_client(user, "pattern", regex="a.*")
    everything = connected_client(user, "everything", all_keys=True)
    for key in ("a", "b", "ab", "x"):
        cache_services.entry_put(region="prices", key=key, value=1)
    cache_services.region_clear(name="prices")
    late = connected_client(user, "late", keys=["a"])  # after those events
    cache_services.entry_put(region="prices", key="a", value=2)
    fanout.fanout_node("node-1")
    clear = ("region_clear", None)
    assert _keys(a) == [("create", "a"), ("create", "x"), clear, ("create", "a")]
    assert _keys(b) == [("create", "b"), clear]
    assert _keys(pattern) == [("create", "a"), ("create", "ab"), clear, ("create", "a")]
    assert _keys(everything) == [
        ("create", "a"),
        ("create", "b"),
        ("create", "ab"),
        ("create", "x"),
        clear,
        ("create", "a"),
    ]
    assert _keys(late) == [("create", "a")]


def test_only_sockets_held_on_this_node_are_woken(user, region, monkeypatch):
    rung = []
    monkeypatch.setattr(
        notify,
        "ring_many",
        lambda heads, node=None, **push: rung.append((set(heads), node)),
    )
    here = connected_client(user, "here", keys=["k"])
    away = connected_client(user, "away", keys=["k"])
    services.client_disconnected(client_id=away.id, socket_id="away")
    elsewhere = connected_client(user, "elsewhere", keys=["k"])  # a copy kept here
    DurableClient.objects.filter(pk=elsewhere.pk).update(node="node-2")
    cache_services.entry_put(region="prices", key="k", value=1)
    fanout.fanout_node("node-1")
    for client in (here, away, elsewhere):
        assert _keys(client) == [("create", "k")]  # every queue gets the event
    assert rung == [({here.id}, "node-1")]  # one socket to wake


def test_a_fan_out_behind_a_socket_end_still_queues_what_was_written_before(
    user, region
):
    """The events written while the socket was up are the non-durable
    interest's on every host, however late a host's fan-out comes to them
    (a secondary behind its primary): here the fan-out runs only after the
    socket ended and the interest went."""
    client = connected_client(user, "behind", durable=False, keys=["a"])
    cache_services.entry_put(region="prices", key="a", value=1)
    services.client_disconnected(client_id=client.id, socket_id="behind")
    assert not Interest.objects.filter(client=client).exists()
    cache_services.entry_put(region="prices", key="a", value=2)  # after: not its
    fanout.fanout_node("node-1")
    assert _keys(client) == [("create", "a")]


def test_an_unregistered_interest_keeps_what_was_written_before_it_went(user, region):
    client = connected_client(user, "unreg", durable=True, regex="a.*")
    cache_services.entry_put(region="prices", key="ab", value=1)
    assert (
        services.interest_unregister(
            client=client, region="prices", selector=parse_selector({"regex": "a.*"})
        )
        == 1
    )
    cache_services.entry_put(region="prices", key="ac", value=1)
    fanout.fanout_node("node-1")
    assert _keys(client) == [("create", "ab")]


def test_an_interest_that_saw_no_event_leaves_nothing_behind(user, region):
    client = connected_client(user, "quiet", durable=False)
    services.client_disconnected(client_id=client.id, socket_id="quiet")
    assert not EndedInterest.objects.exists()


def test_ended_interests_go_once_their_events_left_the_log(user, region, monkeypatch):
    monkeypatch.setattr(maintenance, "EVENT_RETENTION", timedelta(0))
    client = connected_client(user, "pruned", durable=False)
    cache_services.entry_put(region="prices", key="a", value=1)
    services.client_disconnected(client_id=client.id, socket_id="pruned")
    ended = EndedInterest.objects.get()
    cache_services.node_register(name="node-1", url="http://127.0.0.1:1")
    fanout.fanout_node("node-1")
    maintenance.report_fanout_cursor("node-1")
    cache_services.node_register(name="node-2", url="http://127.0.0.1:2")  # behind
    maintenance.prune_event_log()
    assert EndedInterest.objects.filter(pk=ended.pk).exists()
    Node.objects.filter(name="node-2").update(fanout_through=ended.until_seq)
    # Every node is past it, but its event is still in the log (a node
    # restarting behind may fan it out): it stays while the event does.
    monkeypatch.setattr(maintenance, "EVENT_RETENTION", timedelta(hours=1))
    maintenance.prune_event_log()
    assert EndedInterest.objects.filter(pk=ended.pk).exists()
    monkeypatch.setattr(maintenance, "EVENT_RETENTION", timedelta(0))
    maintenance.prune_event_log()
    assert not EndedInterest.objects.exists()


# One pass over one event costs the same statements whatever the number of
# queues it reaches: the interests in one read, the queues' states in one,
# the event stored once, their rows in one insert and their heads in one
# update.
# The cluster database: the log read, the interests read.
PASS_STATEMENTS_CLUSTER = 2
# The node store, in the test's transaction: SAVEPOINT, the cursor read
# (locked), the hosted queues, their states, the events' insert, the rows'
# insert, the states' update, the cursor move, RELEASE; on PostgreSQL also
# ``SET LOCAL synchronous_commit`` (a live pass's few events are one
# INSERT; the rows of many queues a COPY, logged as one statement).
PASS_STATEMENTS_NODE = {"sqlite": 9, "postgresql": 10}


@pytest.mark.parametrize("hosted", [1, 12])
def test_a_pass_fans_an_event_out_to_every_queue_in_the_same_statements(
    user, region, hosted, django_assert_num_queries
):
    clients = [connected_client(user, f"c{i}", keys=["k"]) for i in range(hosted)]
    fanout.fanout_node("node-1")
    cache_services.entry_put(region="prices", key="k", value=1)
    with (
        django_assert_num_queries(PASS_STATEMENTS_CLUSTER),
        django_assert_num_queries(
            PASS_STATEMENTS_NODE[connections["node"].vendor],
            connection=connections["node"],
        ),
    ):
        assert fanout.fanout_node("node-1") == 1
    for client in clients:
        assert _keys(client) == [("create", "k")]


def test_an_all_keys_interest_that_starts_or_ends_inside_a_batch_is_judged_per_event():
    from types import SimpleNamespace

    from clients.selectors import InterestRow

    def row(pk, since, until=None):
        return InterestRow(pk, "prices", "all_keys", "", since, False, "false", until)

    interests = fanout._RegionInterests()
    for interest in (row("whole", 0), row("from-3", 2), row("to-2", 0, until=2)):
        interests.add(interest)
    interests.for_batch(1, 4)
    assert interests.all_keys == {"whole"}
    wanted = {
        seq: interests.wanting(SimpleNamespace(seq=seq, op="create", key=f"k{seq}"))
        for seq in range(1, 5)
    }
    assert wanted == {
        1: {"whole", "to-2"},
        2: {"whole", "to-2"},
        3: {"whole", "from-3"},
        4: {"whole", "from-3"},
    }
