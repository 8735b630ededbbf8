"""The fan-out's appends to a node's queues: which events a queue gets,
and which of its rows may conflate in its client's mode."""

import uuid

import pytest
from django.db import transaction

from cache import selectors as cache_selectors
from cache import services as cache_services
from clients import fanout, services
from clients.matching import parse_selector
from clients.models import DurableClient
from queues import selectors as queue_selectors
from queues import services as queue_services
from queues.models import QueueState
from tests.helpers import hello, queued_rows

pytestmark = pytest.mark.django_db(databases=["default", "node"])


def test_put_reaches_interested_durable_queue(user, region):
    result = hello(user)
    assert result.pending_events == -2
    services.interest_register(
        client=result.client,
        region="prices",
        selector=parse_selector({"keys": ["a"]}),
        is_durable=True,
        policy="keys_values",
    )
    cache_services.entry_put(region="prices", key="a", value=1)
    cache_services.entry_put(region="prices", key="b", value=2)
    assert fanout.fanout_node("node-1") == 2
    rows = queue_selectors.queue_entries_after(
        client_id=result.client.id, after=0, limit=10
    )
    assert [(r.key, r.op, r.value, r.version) for r in rows] == [("a", "create", 1, 1)]
    assert queue_selectors.queue_size(client_id=result.client.id) == 1
    assert queue_selectors.queue_size(client_id=uuid.uuid4()) == -2


def test_a_conflating_queue_keeps_the_create_and_the_last_update(user):
    cache_services.region_create(name="c", conflate_events=True)
    client = hello(user, "conf").client
    other = hello(user, "noconf", conflate=False).client
    for c in (client, other):
        services.interest_register(
            client=c,
            region="c",
            selector=parse_selector({"all_keys": True}),
            is_durable=True,
            policy="none",
        )
    for value in range(5):
        cache_services.entry_put(region="c", key="k", value=value)
    fanout.fanout_node("node-1")
    assert queue_selectors.queue_size(client_id=client.id) == 2
    assert queue_selectors.queue_size(client_id=other.id) == 5
    queue_services.queue_ack(client_id=other.id, up_to=3)
    assert queue_selectors.queue_size(client_id=other.id) == 2


def _flags(client_id):
    """Each queued row as (region, op, version, conflates), in seq order."""
    return [(r.region, r.op, r.version, r.conflates) for r in queued_rows(client_id)]


def _interested(client, *regions):
    for name in regions:
        services.interest_register(
            client=client,
            region=name,
            selector=parse_selector({"all_keys": True}),
            is_durable=True,
            policy="none",
        )


def _key_written_twice_in_each(client, *regions):
    """``client`` interested in every key of ``regions``, and their key "k"
    created, then updated."""
    _interested(client, *regions)
    for name in regions:
        cache_services.entry_put(region=name, key="k", value=1)
        cache_services.entry_put(region=name, key="k", value=2)


def test_queued_rows_say_whether_they_may_conflate(user, region):
    cache_services.region_create(name="c", conflate_events=True)
    client = hello(user, "server-mode").client
    _key_written_twice_in_each(client, "c", "prices")
    cache_services.entry_destroy(region="c", key="k")
    fanout.fanout_node("node-1")
    # Only an update in a conflating mode may go; a create or destroy never.
    assert _flags(client.id) == [
        ("c", "create", 1, False),
        ("c", "update", 2, True),
        ("prices", "create", 1, False),
        ("prices", "update", 2, False),
        ("c", "destroy", 3, False),
    ]


def test_a_mode_changed_by_hello_reclassifies_the_queued_updates(user, region):
    cache_services.region_create(name="c", conflate_events=True)
    client = hello(user, "changes").client
    _key_written_twice_in_each(client, "c", "prices")
    fanout.fanout_node("node-1")

    def updates():
        return [flag for _, op, _, flag in _flags(client.id) if op == "update"]

    def again(conflate):
        services.client_disconnected(client_id=client.id, socket_id="ch-1")
        hello(user, "changes", conflate=conflate)

    assert updates() == [True, False]
    again(False)
    assert updates() == [False, False]
    again(True)
    assert updates() == [True, True]
    # In mode "true" the update of the region that does not conflate goes
    # when the next one of its key is queued.
    cache_services.entry_put(region="prices", key="k", value=3)
    fanout.fanout_node("node-1")
    assert [(r, v) for r, op, v, _ in _flags(client.id) if op == "update"] == [
        ("c", 2),
        ("prices", 3),
    ]
    again("server")
    assert updates() == [True, False]


def test_mode_server_without_a_conflating_region_conflates_nothing(user, region):
    client = hello(user, "none-conflate", conflate=True).client
    _key_written_twice_in_each(client, "prices")
    fanout.fanout_node("node-1")
    services.client_disconnected(client_id=client.id, socket_id="ch-1")
    hello(user, "none-conflate", conflate="server")
    assert _flags(client.id) == [
        ("prices", "create", 1, False),
        ("prices", "update", 2, False),
    ]


def _away_in_mode(user, durable_id, conflate):
    """A client of mode ``conflate`` interested in every key of region "c"
    (which conflates), gone away; its queue is on node-1."""
    cache_services.region_create(name="c", conflate_events=True)
    client = hello(user, durable_id, conflate=conflate).client
    _interested(client, "c")
    services.client_disconnected(client_id=client.id, socket_id="ch-1")
    return client


def _created_and_updated_four_times(client):
    """Write c/k five times and fan out; return how many are queued."""
    for value in range(5):
        cache_services.entry_put(region="c", key="k", value=value)
    fanout.fanout_node("node-1")
    return queue_selectors.queue_size(client_id=client.id)


def _mode_here(client):
    return QueueState.objects.get(pk=client.pk).conflate


def test_a_copy_conflates_by_the_mode_its_client_has_now(user):
    client = _away_in_mode(user, "copied", True)
    # The client came back through node-2 with conflate false, and went
    # away again; node-1 holds a copy adopted in mode "true".
    DurableClient.objects.filter(pk=client.pk).update(
        primary="node-2", secondaries=["node-1"], conflate="false"
    )
    assert _created_and_updated_four_times(client) == 5
    assert _mode_here(client) == "false"


def test_a_copy_promoted_without_a_hello_conflates_by_its_clients_mode(user):
    client = _away_in_mode(user, "promoted", True)
    DurableClient.objects.filter(pk=client.pk).update(conflate="false")
    assert _created_and_updated_four_times(client) == 5


def test_a_copy_page_of_an_older_mode_leaves_the_copys_mode(user):
    client = _away_in_mode(user, "paged", False)
    QueueState.objects.filter(pk=client.pk).update(is_synced=False, copy_upto=10**9)
    page = {
        "durable_id": "paged",
        "conflate": "true",  # built on the source before its hello
        "acked_through": 0,
        "entries": [],
        "next_after": 10**9,
        "done": True,
    }
    assert queue_services.queue_copy_in(client_id=client.id, page=page) is True
    assert _mode_here(client) == "false"
    assert _created_and_updated_four_times(client) == 5


def test_a_mode_read_before_a_hello_changed_it_is_not_applied(user):
    """The fan-out read the client's mode, then a hello set another on the
    client's row and on this queue before the fan-out locked the queue:
    the queue keeps the hello's mode (the row is read again, locked)."""
    client = _away_in_mode(user, "raced", False)
    cache_services.entry_put(region="c", key="k", value=0)
    events = cache_selectors.logged_events_after(seq=0, limit=10)
    with transaction.atomic(using="node"):
        queue_services.queue_append_many(
            {client.id: events},
            modes={client.id: "true"},  # read before the hello
            modes_now=lambda ids: {client.id: "false"},
        )
    assert _mode_here(client) == "false"


def test_a_mode_of_a_client_that_is_gone_changes_nothing(user):
    client = _away_in_mode(user, "gone", True)
    cache_services.entry_put(region="c", key="k", value=0)
    with transaction.atomic(using="node"):
        queue_services.queue_append_many(
            {client.id: cache_selectors.logged_events_after(seq=0, limit=10)},
            modes={client.id: "false"},
            modes_now=lambda ids: {},
        )
    assert _mode_here(client) == "true"
