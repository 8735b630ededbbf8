"""What a node says when it stops with queues it could not hand over."""

import pytest

from cache import services as cache_services
from durablecache.supervision import node as supervisor

pytestmark = pytest.mark.django_db(databases=["default", "node"])


@pytest.fixture
def stopping_node(monkeypatch):
    """node-2 about to stop, one queue left after its handover."""
    monkeypatch.setattr(supervisor.replication, "node_handover", lambda **kw: 1)
    monkeypatch.setattr(supervisor.notify, "close_node", lambda *args: None)
    monkeypatch.setattr(supervisor.time, "sleep", lambda s: None)
    cache_services.node_register(name="node-2", url="http://127.0.0.1:8001")
    return supervisor.Node("node-2", "http://127.0.0.1:8001", {})


def test_when_every_node_stops_it_says_where_the_queue_waits(stopping_node, capsys):
    stopping_node.shutdown()

    assert capsys.readouterr().err == (
        "node-2: 1 queue(s) stay in node-2's store, served again when node-2 "
        "starts (no other node is up to take them)\n"
    )


def test_with_other_nodes_up_it_says_the_handover_ran_out_of_time(
    stopping_node, capsys
):
    cache_services.node_register(name="node-1", url="http://127.0.0.1:8000")

    stopping_node.shutdown()

    err = capsys.readouterr().err
    assert err.startswith(
        "node-2: 1 queue(s) stay in node-2's store, served again when node-2 "
        "starts (not handed over in time;"
    )
    assert "not handed over; kept here" not in err
