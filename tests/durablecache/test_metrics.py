"""/metrics: per-node counters from the node's row, cluster-wide figures
without a node label, and a scrape whose statements do not grow with the
event log."""

from datetime import timedelta

import pytest
from channels.db import database_sync_to_async as db
from django.db import connections
from django.test import Client as DjangoClient
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from cache import counters
from cache import services as cache_services
from clients import fanout, services
from clients.models import DurableClient
from clients.replication.failover import save_placement
from clients.services.expiry import clients_expire
from tests.helpers import connected_client

HERE = "node-1"


def scrape() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a scrape, by (name, sorted labels), after the
    counters' flush (the class's: ``node`` silences the instance's, which
    the background thread calls)."""
    type(counters.counter).flush(counters.counter)
    text = DjangoClient().get("/metrics").content.decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def here(name: str) -> float:
    return scrape()[(name, (("node", HERE),))]


def cluster(name: str, **labels: str) -> float:
    return scrape()[(name, tuple(sorted(labels.items())))]


@pytest.fixture
def node(db, counters_flush):
    cache_services.node_register(name=HERE, url="http://127.0.0.1:1")


@pytest.mark.django_db(databases=["default", "node"])
def test_events_written_is_the_event_log_head(node, region):
    before = cluster("durablecache_events_written_total")
    cache_services.entry_putall(region="prices", entries={"a": 1, "b": 2})
    assert cluster("durablecache_events_written_total") == before + 2
    assert cluster("durablecache_event_log_rows") == before + 2


@pytest.mark.django_db(databases=["default", "node"])
def test_expiries_and_failovers_count_on_the_node_that_did_them(
    node, user, django_capture_on_commit_callbacks
):
    past = timezone.now() - timedelta(seconds=1)
    DurableClient.objects.create(
        durable_id="gone", owner=user, is_connected=False, expires_at=past
    )
    assert here("durablecache_expiries_total") == 0
    with django_capture_on_commit_callbacks(execute=True):
        assert clients_expire() == 1
    assert here("durablecache_expiries_total") == 1

    moved = DurableClient.objects.create(
        durable_id="moved", owner=user, primary="node-2", secondaries=[HERE]
    )
    before = (moved.primary, list(moved.secondaries), list(moved.syncing))
    moved.primary, moved.secondaries = HERE, []
    with django_capture_on_commit_callbacks(execute=True):
        assert save_placement(moved, before)
    assert here("durablecache_failovers_total") == 1


@pytest.mark.django_db(databases=["default", "node"])
def test_cqs_by_durability_and_cq_events_queued(node, user, region):
    options = services.parse_hello_options({"durable_id": "c"})
    client = services.client_hello(user=user, socket_id="c", options=options).client
    services.cq_register(
        client=client, name="big", region="prices", query="value.qty > 5", durable=False
    )
    services.cq_register(
        client=client, name="all", region="prices", query="value.qty > 0", durable=True
    )
    assert cluster("durablecache_cqs", durable="false") == 1
    assert cluster("durablecache_cqs", durable="true") == 1
    cache_services.entry_put(region="prices", key="k", value={"qty": 7})  # both
    cache_services.entry_put(region="prices", key="j", value={"qty": 1})  # "all" alone
    fanout.fanout_node(HERE)
    # Rows queued naming a CQ, not the CQs named: the first row names two.
    assert here("durablecache_cq_events_total") == 2


@pytest.mark.django_db(databases=["default", "node"])
def test_an_overflow_and_its_resync_are_counted(node, user, region):
    connected_client(user, "c", hello={"max_queued": 2})
    assert here("durablecache_overflows_total") == 0
    cache_services.entry_putall(region="prices", entries={"a": 1, "b": 2, "c": 3})
    fanout.fanout_node(HERE)
    assert here("durablecache_overflows_total") == 1
    assert here("durablecache_dropped_events_total") == 2
    counters.counter.add(HERE, 3, counters.RESYNCED_ENTRIES)  # as a socket does
    assert here("durablecache_resynced_entries_total") == 3


@pytest.mark.django_db(transaction=True, databases=["default", "node"])
async def test_delivered_and_acked_count_a_socket_s_frames_and_acks(
    session, token, region, write
):
    await db(cache_services.node_register)(name=HERE, url="http://127.0.0.1:1")
    sock, _ = await session(token, durable_id="d1")
    await sock.register(all_keys=True, durable=True, policy="none")
    await write(cache_services.entry_putall, region="prices", entries={"a": 1, "b": 2})
    _, _replayed = await sock.ready()
    await write(cache_services.entry_put, region="prices", key="c", value=3)
    (live,) = await sock.events(1)
    assert await db(here)("durablecache_events_delivered_total") == 3
    assert await db(here)("durablecache_acks_total") == 0
    await sock.send(type="ack", up_to=live["seq"])
    await sock.barrier()
    assert await db(here)("durablecache_acks_total") == 3


def _scrape_statements() -> int:
    with (
        CaptureQueriesContext(connections["default"]) as cluster_db,
        CaptureQueriesContext(connections["node"]) as store,
    ):
        assert DjangoClient().get("/metrics").status_code == 200
    return len(cluster_db) + len(store)


@pytest.mark.django_db(databases=["default", "node"])
def test_a_scrape_s_statements_do_not_grow_with_the_event_log(node, region):
    cache_services.entry_putall(
        region="prices", entries={f"k{i}": i for i in range(10)}
    )
    with_10 = _scrape_statements()
    cache_services.entry_putall(
        region="prices", entries={f"k{i}": i for i in range(10, 1000)}
    )
    assert _scrape_statements() == with_10
    assert cluster("durablecache_event_log_rows") == 1000


@pytest.mark.django_db(databases=["default", "node"])
def test_cluster_figures_carry_no_node_label_and_process_figures_stay(node):
    samples = scrape()
    for name in (
        "durablecache_regions",
        "durablecache_durable_clients",
        "durablecache_redundancy_short",
        "durablecache_event_log_rows",
        "durablecache_events_written_total",
    ):
        assert (name, ()) in samples
    assert ("durablecache_queued_events", (("node", HERE),)) in samples
    assert any(name == "process_cpu_seconds_total" for name, _ in samples)
