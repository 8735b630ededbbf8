"""clients.fanout: which hosted queues an event goes to, and whose sockets
are woken for it."""

import pytest

from clients import fanout, services
from clients.models import DurableClient
from durablecache.cache import services as cache_services
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
        notify, "ring_many", lambda heads, node=None: rung.append((set(heads), node))
    )
    here = connected_client(user, "here", keys=["k"])
    away = connected_client(user, "away", keys=["k"])
    services.client_disconnected(client_id=away.id, channel_name="away")
    elsewhere = connected_client(user, "elsewhere", keys=["k"])  # a copy kept here
    DurableClient.objects.filter(pk=elsewhere.pk).update(node="node-2")
    cache_services.entry_put(region="prices", key="k", value=1)
    fanout.fanout_node("node-1")
    for client in (here, away, elsewhere):
        assert _keys(client) == [("create", "k")]  # every queue gets the event
    assert rung == [({here.id}, "node-1")]  # one socket to wake
