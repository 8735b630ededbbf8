"""A node never takes itself for dead, however late its own heartbeat.

One node (``node-1``), the test settings' SQLite stores and in-memory
channel layer; sockets through channels' WebsocketCommunicator, as
tests/sockets/test_consumers.py drives them.
"""

from datetime import timedelta

import pytest
from channels.db import database_sync_to_async as db
from django.utils import timezone

from cache import services as cache_services
from cache.models import Node
from clients import maintenance
from clients.models import DurableClient
from tests.conftest import WAIT_S

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "node"])


def _heartbeat_stalled(name: str, seconds: float) -> None:
    Node.objects.filter(name=name).update(
        last_heartbeat=timezone.now() - timedelta(seconds=seconds)
    )


async def test_a_node_whose_own_heartbeat_lagged_keeps_its_connected_clients(
    session, token, region, write, settings
):
    """docs/protocol.md, "Disconnects, keepalive, expiry": a durable
    client is expired only when it "stays away
    longer than timeout"; a connected client's queue and interests stay.

    node-1's tick judges the other nodes by heartbeat age and takes itself
    for up (``Membership.read_here``). runnode's supervise loop may lag
    the node timeout once (its heartbeat UPDATE waiting on a busy cluster
    database, a slow broker send in tick_on, a VM pause) while the worker
    runs a tick that may judge. Were node-1 judged by its own heartbeat,
    ``clients_of_dead_nodes_disconnect`` would release its own live
    sockets' clients: rows marked disconnected with ``expires_at`` = last
    heartbeat + timeout, delivered marks reset under a live session.
    Nothing re-attaches them once the heartbeat is back (the hub's sweep
    looks only at primary and queue head), so the client would expire
    while still connected: queue and durable interests dropped, the socket
    closed 4410, and events written meanwhile never delivered (a short
    timeout shows it in one tick).
    """
    settings.DURABLECACHE_NODE_TIMEOUT_S = 5
    await db(cache_services.node_register)(name="node-1", url="http://127.0.0.1:1")
    sock, welcome = await session(token, durable_id="d1", timeout=5)
    assert welcome["pending_events"] == -2
    await sock.register(keys=["k"], durable=True, policy="none")
    await sock.ready()

    # One heartbeat 10 s late, then a tick that may judge (runnode sent it
    # with judge=True: the node had heartbeaten steadily before the stall).
    await db(_heartbeat_stalled)("node-1", 10)
    await db(maintenance.tick)("node-1", True)
    await db(cache_services.node_heartbeat)(name="node-1")  # the node is fine

    # The socket never left: an event written now must reach it.
    await write(cache_services.entry_put, region="prices", key="k", value=1)
    out = await sock.comm.receive_output(timeout=WAIT_S)
    client = await db(DurableClient.objects.filter(durable_id="d1").first)()
    assert out["type"] == "websocket.send", (
        f"the connected client was expired: {out}; client row {client}"
    )
    assert '"type":"event"' in out["text"].replace(" ", ""), out
