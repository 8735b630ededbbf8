"""Service tests for hello, disconnect, expiry and interests (no sockets)."""

from datetime import timedelta

import pytest
from django.db import connections
from django.utils import timezone

from cache import services as cache_services
from clients import fanout, services
from clients.exceptions import ClientConnectedError, ClientOwnedError
from clients.matching import parse_selector
from clients.models import ClientHistory, DurableClient, Interest, LostQueue
from common.errors import ValidationError
from queues import selectors as queue_selectors
from queues.models import QueueState
from tests.helpers import hello

pytestmark = pytest.mark.django_db(databases=["default", "node"])


def register(client, region="prices", durable=True, **selector):
    return services.interest_register(
        client=client,
        region=region,
        selector=parse_selector(selector or {"all_keys": True}),
        is_durable=durable,
        policy="none",
    )


def test_pending_events_is_minus_two_then_count(user, region):
    first = hello(user)
    assert first.pending_events == -2
    register(first.client)
    cache_services.entry_put(region="prices", key="a", value=1)
    fanout.fanout_node("node-1")
    services.client_disconnected(client_id=first.client.id, socket_id="ch-1")
    assert hello(user, socket_id="ch-2").pending_events == 1


def test_durable_id_of_another_user_is_refused_even_offline(user, other_user):
    result = hello(user)
    services.client_disconnected(client_id=result.client.id, socket_id="ch-1")
    with pytest.raises(ClientOwnedError):
        hello(other_user, socket_id="ch-2")


def test_second_connection_of_a_connected_durable_id_is_refused(user):
    hello(user)
    with pytest.raises(ClientConnectedError):
        hello(user, socket_id="ch-2")


def test_expiry_tombstones_the_id_then_minus_one_then_minus_two(
    user, region, django_capture_on_commit_callbacks
):
    result = hello(user, timeout=5)
    register(result.client)
    services.client_disconnected(client_id=result.client.id, socket_id="ch-1")
    assert services.clients_expire() == 0
    DurableClient.objects.filter(pk=result.client.pk).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    with django_capture_on_commit_callbacks(execute=True):
        assert services.clients_expire() == 1
    assert LostQueue.objects.filter(durable_id="d1").exists()
    assert not Interest.objects.exists()
    assert queue_selectors.queue_size(client_id=result.client.id) == -2
    again = hello(user, socket_id="ch-2")
    assert again.pending_events == -1
    services.client_close(client_id=again.client.id, socket_id="ch-2", keepalive=False)
    assert hello(user, socket_id="ch-3").pending_events == -2


def test_keepalive_drops_only_non_durable_interests_and_keeps_their_events(
    user, region
):
    result = hello(user)
    register(result.client, durable=True, keys=["a"])
    register(result.client, durable=False, keys=["b"])
    cache_services.entry_put(region="prices", key="b", value=1)
    fanout.fanout_node("node-1")
    services.client_disconnected(client_id=result.client.id, socket_id="ch-1")
    assert list(Interest.objects.values_list("selector", flat=True)) == ["a"]
    cache_services.entry_put(region="prices", key="b", value=2)
    cache_services.entry_put(region="prices", key="a", value=3)
    fanout.fanout_node("node-1")
    rows = queue_selectors.queue_entries_after(
        client_id=result.client.id, after=0, limit=10
    )
    assert [(r.key, r.value) for r in rows] == [("b", 1), ("a", 3)]


def test_non_durable_client_leaves_nothing_behind(user, region):
    result = hello(user, durable_id=None)
    assert result.pending_events == -2
    register(result.client, durable=False)
    services.client_disconnected(client_id=result.client.id, socket_id="ch-1")
    assert not DurableClient.objects.exists()
    assert not Interest.objects.exists()


def test_durable_interest_from_non_durable_client_is_bad_field(user, region):
    result = hello(user, durable_id=None)
    with pytest.raises(ValidationError):
        register(result.client, durable=True)


def test_reregistering_is_idempotent(user, region):
    result = hello(user)
    register(result.client, keys=["a", "b"])
    register(result.client, keys=["a"])
    cache_services.entry_put(region="prices", key="a", value=1)
    fanout.fanout_node("node-1")
    assert Interest.objects.count() == 2
    assert queue_selectors.queue_size(client_id=result.client.id) == 1


def test_events_before_an_interest_are_not_queued(user, region):
    result = hello(user)
    cache_services.entry_put(region="prices", key="a", value=1)
    register(result.client)
    cache_services.entry_put(region="prices", key="a", value=2)
    fanout.fanout_node("node-1")
    rows = queue_selectors.queue_entries_after(
        client_id=result.client.id, after=0, limit=10
    )
    assert [r.value for r in rows] == [2]


def test_regex_interest_matches_whole_key_and_region_ops_reach_everyone(user, region):
    result = hello(user)
    register(result.client, regex="EU.")
    cache_services.entry_put(region="prices", key="EUR", value=1)
    cache_services.entry_put(region="prices", key="EURO", value=2)
    cache_services.region_clear(name="prices")
    fanout.fanout_node("node-1")
    rows = queue_selectors.queue_entries_after(
        client_id=result.client.id, after=0, limit=10
    )
    assert [(r.key, r.op) for r in rows] == [("EUR", "create"), (None, "region_clear")]


def test_node_restart_forgets_its_sockets(user):
    result = hello(user)
    assert services.clients_node_restarted(node="node-1") == 1
    result.client.refresh_from_db()
    assert not result.client.is_connected
    assert result.client.expires_at is not None
    assert hello(user, socket_id="ch-2").pending_events == 0


def test_hello_options_are_validated():
    for bad in (
        {"durable_id": "bad id"},
        {"timeout": -1},
        {"timeout": "10"},
        {"redundancy": -2},
        {"conflate": "maybe"},
        {"max_queued": 0},
        {"max_queued": -1},
        {"max_queued": 10000001},
        {"max_queued": "10"},
        {"max_queued": 1.5},
        {"max_queued": True},
    ):
        with pytest.raises(ValidationError):
            services.parse_hello_options(bad)
    assert services.parse_hello_options({"conflate": True})["conflate"] == "true"
    assert services.parse_hello_options({})["max_queued"] == 1000000
    for good in (1, 10000000):
        assert services.parse_hello_options({"max_queued": good})["max_queued"] == good


def test_hello_stores_max_queued(user):
    client = hello(user, max_queued=7).client
    assert client.max_queued == 7
    services.client_disconnected(client_id=client.id, socket_id="ch-1")
    assert hello(user, socket_id="ch-2").client.max_queued == 1000000


def test_many_ends_at_once_keep_close_or_drop_each_client(
    user, region, django_capture_on_commit_callbacks
):
    kept = hello(user, "kept", "s1").client
    closed = hello(user, "closed", "s2").client
    register(kept, durable=False, keys=["x"])
    plain = services.client_hello(
        user=user, socket_id="s3", options=services.parse_hello_options({})
    ).client
    moved = hello(user, "moved", "s4").client
    hello(user, "twice", "s5")
    twice = DurableClient.objects.get(durable_id="twice")
    cache_services.entry_put(region="prices", key="a", value=1)
    with django_capture_on_commit_callbacks(execute=True):
        released = services.clients_ended(
            ended=[
                (kept.id, "s1", True),
                (closed.id, "s2", False),
                (plain.id, "s3", True),
                (moved.id, "s4-older", True),  # a socket it no longer has
                (twice.id, "s5", True),
                (twice.id, "s5", False),  # its close wins over its drop
            ]
        )
    assert released == 4
    rows = {c.durable_id: c for c in DurableClient.objects.all()}
    assert set(rows) == {"kept", "moved"}
    assert not rows["kept"].is_connected
    assert rows["kept"].expires_at is not None
    assert not rows["kept"].interests.exists()  # its non-durable interest went
    assert rows["moved"].is_connected
    for gone in (closed, plain, twice):
        assert queue_selectors.queue_size(client_id=gone.id) == -2
    assert queue_selectors.queue_size(client_id=kept.id) == 0
    kinds = dict(
        ClientHistory.objects.filter(kind__in=["closed", "disconnected"]).values_list(
            "durable_id", "kind"
        )
    )
    assert kinds == {"kept": "disconnected", "closed": "closed", "twice": "closed"}


def test_a_sessions_delivered_marks_are_forgotten_before_its_client_is_released(
    user,
):
    """The reset runs while the client's row is locked and still says
    connected: a hello, which waits for that row, can only start its
    session (and mark what it sends) after it."""
    client = hello(user, "marked").client
    QueueState.objects.filter(pk=client.pk).update(delivered_through=7)
    seen = []

    def watch(execute, sql, params, many, context):
        if "delivered_through" in sql and sql.lstrip().upper().startswith("UPDATE"):
            row = DurableClient.objects.get(pk=client.pk)
            seen.append((connections["default"].in_atomic_block, row.is_connected))
        return execute(sql, params, many, context)

    with connections["node"].execute_wrapper(watch):
        services.client_disconnected(client_id=client.id, socket_id="ch-1")
    assert seen == [(True, True)]
    assert QueueState.objects.get(pk=client.pk).delivered_through == 0


def test_ending_interests_locks_their_clients_then_them_then_the_event_log(
    user, region
):
    """The order a socket's end, an expiry and a delete take too (clients
    first), and the event log last, held to the commit, so that the head
    read is every write that will be the interest's."""
    client = hello(user, "locks").client
    register(client, durable=True, keys=["a"])
    cache_services.entry_put(region="prices", key="a", value=1)
    selects = []

    def watch(execute, sql, params, many, context):
        statement = sql.lstrip().upper()
        if statement.startswith("SELECT"):
            for table in ("clients_durableclient", "clients_interest"):
                if f'FROM "{table}"' in sql:
                    selects.append((table, "FOR " in statement))
        elif statement.startswith("UPDATE CACHE_EVENTLOG"):  # an UPDATE locks
            selects.append(("cache_eventlog", True))
        return execute(sql, params, many, context)

    with connections["default"].execute_wrapper(watch):
        assert (
            services.interest_unregister(
                client=client, region="prices", selector=parse_selector({"keys": ["a"]})
            )
            == 1
        )
    tables = [table for table, _ in selects]
    clients_at = tables.index("clients_durableclient")
    interests_at = len(tables) - 1 - tables[::-1].index("clients_interest")
    log_at = tables.index("cache_eventlog")
    assert clients_at < interests_at < log_at
    if connections["default"].features.has_select_for_update:
        assert all(selects[i][1] for i in (clients_at, interests_at, log_at))
