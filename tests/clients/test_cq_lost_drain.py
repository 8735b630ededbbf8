"""A CQ closed while the forget for one host of its client's queue is lost
(its node was down, the task went missing): that host heals before it
serves the queue, copies it, or at its next tick, so no frame names the
closed CQ and an event only it wanted is neither delivered nor counted
(docs/protocol.md, continuous queries).

This node (node-1) stands for the secondary whose forget was lost; the
close runs as if on the primary, node-2, and its task to node-1 is
recorded, never run.
"""

import pytest

from cache import services as cache_services
from cache.models import Node
from clients import fanout, maintenance, replication, services
from clients.models import ClosedCq, DurableClient
from clients.services import cqs
from queues import selectors as queue_selectors
from queues.models import QueueEntry
from tests.clients.conftest import recorder
from tests.helpers import connected_client, hello, node_row

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "node"])

BIG = [{"name": "big", "cq_op": "create"}]


def _rows(client):
    return [
        (r.key, r.cq)
        for r in QueueEntry.objects.filter(queue_id=client.id).order_by("seq")
    ]


def _names(client):
    return {c["name"] for r in _rows(client) for c in r[1] or []}


@pytest.fixture
def lost(monkeypatch, settings, user, region):
    """A durable client away, hosted by node-2 (primary) and node-1; CQ
    "big" closed on node-2, whose forget task to node-1 was lost. Node-1
    holds "kept" (an interest's, named by big too), "only" (big's alone)
    and "other" (named by the CQ "any" that stays)."""
    client = connected_client(user, "d1", keys=["kept"])
    services.cq_register(
        client=client, name="big", region="prices", query="value.q > 5", durable=True
    )
    services.cq_register(
        client=client, name="any", region="prices", query="value.q < 0", durable=True
    )
    cache_services.entry_put(region="prices", key="kept", value={"q": 7})
    cache_services.entry_put(region="prices", key="only", value={"q": 7})
    cache_services.entry_put(region="prices", key="other", value={"q": -1})
    fanout.fanout_node("node-1")
    services.client_disconnected(client_id=client.id, socket_id="d1")
    DurableClient.objects.filter(pk=client.pk).update(
        primary="node-2", node="node-2", secondaries=["node-1"]
    )
    client.refresh_from_db()
    node_row("node-1")
    node_row("node-2")
    tasks = recorder(monkeypatch, "forget_cq_on")
    with monkeypatch.context() as on_node_2:
        # node-2's own forget would run on this (node-1's) store: not here.
        on_node_2.setattr(cqs, "cq_forget_here", lambda **kwargs: 0)
        settings.DURABLECACHE_NODE_NAME = "node-2"
        assert services.cq_close(client=client, name="big") is True
        settings.DURABLECACHE_NODE_NAME = "node-1"
    assert tasks == [("node-1", client.id, "big")]  # sent, never run
    assert "big" in _names(client)  # the drain node-1 missed
    assert queue_selectors.queue_size(client_id=client.id) == 3
    return client


def test_the_forget_is_pending_for_every_host_until_it_ran_there(lost):
    assert set(ClosedCq.objects.filter(client=lost).values_list("name", "node")) == {
        ("big", "node-1"),
        ("big", "node-2"),
    }


def test_a_failover_to_the_host_that_missed_the_drain_heals_it_first(lost, user):
    Node.objects.filter(name="node-2").delete()
    node_row("node-2", down=True)
    result = hello(user, "d1")
    lost.refresh_from_db()
    assert lost.primary == "node-1"  # failed over here
    assert _rows(lost) == [
        ("kept", None),
        ("other", [{"name": "any", "cq_op": "create"}]),
    ]
    assert result.pending_events == 2  # "only" is neither queued nor counted
    assert not ClosedCq.objects.filter(node="node-1").exists()


def test_a_copy_page_from_the_host_that_missed_the_drain_names_no_closed_cq(lost):
    head = queue_selectors.queue_head(client_id=lost.id)
    page = replication.copy_out(
        client_id=lost.id, node="node-1", target="node-3", after=0, upto=head
    )
    assert page is not None
    assert [(e["key"], e.get("cq")) for e in page["entries"]] == [
        ("kept", None),
        ("other", [{"name": "any", "cq_op": "create"}]),
    ]


def test_the_tick_re_drives_a_lost_forget(lost):
    maintenance.tick("node-1", judge=False)
    assert "big" not in _names(lost)
    assert queue_selectors.queue_size(client_id=lost.id) == 2
    assert not ClosedCq.objects.filter(node="node-1").exists()
    maintenance.tick("node-1", judge=False)  # idempotent
    assert queue_selectors.queue_size(client_id=lost.id) == 2


def test_a_late_forget_leaves_a_new_cq_of_the_same_name_alone(lost):
    services.cq_register(
        client=lost, name="big", region="prices", query="value.q > 0", durable=True
    )
    cache_services.entry_put(region="prices", key="new", value={"q": 1})
    fanout.fanout_node("node-1")
    services.cq_forget_here(client_id=lost.id, name="big")  # the lost task, late
    assert _rows(lost) == [
        ("kept", None),
        ("other", [{"name": "any", "cq_op": "create"}]),
        ("new", BIG),
    ]


def test_a_copy_being_filled_drains_a_page_built_before_the_close(
    monkeypatch, settings, user, region
):
    """The forget reaches a copy still being filled, whose source built a
    page before the close: the forget stays pending until the copy is
    complete, then runs, so the stale page's rows name no closed CQ."""
    client = DurableClient.objects.create(
        durable_id="d1",
        owner=user,
        primary="node-2",
        secondaries=["node-1"],
        syncing=["node-1"],
    )
    services.cq_register(
        client=client, name="big", region="prices", query="value.q > 5", durable=True
    )
    _, event = cache_services.entry_put(region="prices", key="only", value={"q": 7})
    fanout.fanout_node("node-1")  # no copy here yet
    replication.adopt(client_id=client.id, node="node-1", source="node-2")
    stale = {
        "durable_id": "d1",
        "conflate": "server",
        "acked_through": 0,
        "entries": [
            {
                "seq": event.seq,
                "event_id": event.event_id,
                "region": "prices",
                "key": "only",
                "op": "create",
                "value": {"q": 7},
                "version": event.version,
                "ts": event.ts.isoformat(),
                "conflates": False,
                "cq": BIG,
            }
        ],
        "next_after": event.seq,
        "done": True,
        "upto": event.seq,
    }
    recorder(monkeypatch, "forget_cq_on")
    with monkeypatch.context() as on_node_2:
        on_node_2.setattr(cqs, "cq_forget_here", lambda **kwargs: 0)
        settings.DURABLECACHE_NODE_NAME = "node-2"
        assert services.cq_close(client=client, name="big") is True
        settings.DURABLECACHE_NODE_NAME = "node-1"
    services.cq_forget_here(client_id=client.id, name="big")  # the task, on time
    assert ClosedCq.objects.filter(node="node-1").exists()  # copy not complete
    replication.copy_in(client_id=client.id, node="node-1", source="node-2", page=stale)
    client.refresh_from_db()
    assert client.syncing == []
    assert _rows(client) == []
    assert queue_selectors.queue_size(client_id=client.id) == 0
    assert not ClosedCq.objects.filter(node="node-1").exists()
