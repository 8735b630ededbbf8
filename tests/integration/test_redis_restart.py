"""Redis carries doorbells only: restarting it (empty) loses no event."""

import asyncio

import pytest
import websockets

from tests.integration.harness import Cluster, wait_for
from tests.integration.wsclient import RawClient

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


@pytest.fixture
def own_redis_node(tmp_path):
    # A poll far longer than the waits below: events must come by doorbell,
    # which proves the sockets re-joined their groups in the new Redis.
    c = Cluster(tmp_path, own_redis=True, settings={"DURABLECACHE_POLL_S": "120"})
    try:
        c.migrate()
        c.start_node("node-1")
        yield c
    finally:
        c.close()


def test_redis_restart_mid_stream_loses_nothing(own_redis_node):
    cluster = own_redis_node
    operator = cluster.token("ops", operator=True)
    user = cluster.token("app")
    assert cluster.rest("POST", "/api/v1/regions/", operator, {"name": "r"})[0] == 201

    def put(i):
        status, body = cluster.rest(
            "PUT", f"/api/v1/regions/r/entries/k{i % 7}/", user, {"value": i}
        )
        assert status == 200, body

    async def scenario():
        async with RawClient(cluster.ws_url("node-1"), user) as ws:
            await ws.hello(durable_id="through-redis-restart")
            await ws.register("r", all_keys=True, durable=True, policy="none")
            await ws.ready_and_replay()
            for i in range(100):
                await asyncio.to_thread(put, i)
            first = await ws.events(100)
            await ws.ack(first[-1]["seq"])
            await asyncio.to_thread(cluster.redis.restart)
            # Writes answer while Redis is (re)starting; the socket stays up.
            for i in range(100, 200):
                await asyncio.to_thread(put, i)
            second = await ws.events(100, wait=60)
            await ws.ack(second[-1]["seq"])
            # An operator close reaches the same socket through its group.
            status, _ = await asyncio.to_thread(
                cluster.rest,
                "DELETE",
                "/api/v1/clients/through-redis-restart/",
                operator,
            )
            assert status == 204
            with pytest.raises(websockets.ConnectionClosed) as closed:
                await ws.recv(wait=60)
            assert closed.value.rcvd.code == 4410
            return first + second

    events = asyncio.run(scenario())
    assert sorted(e["value"] for e in events) == list(range(200))
    assert len({e["id"] for e in events}) == 200
    # Per key, versions only grow.
    for key in {e["key"] for e in events}:
        versions = [e["version"] for e in events if e["key"] == key]
        assert versions == sorted(versions)
    # Closed by the operator: gone everywhere.
    wait_for(
        lambda: (
            cluster.rest("GET", "/api/v1/clients/through-redis-restart/", user)[0]
            == 404
        ),
        timeout=20,
    )
