"""Durable continuous queries on a real cluster of three nodes: a CQ is a
cluster row and its queued events, ``cq`` lists included, are copied with
the queue, so a SIGKILL of the primary loses neither."""

import asyncio

import pytest

from tests.integration.harness import Cluster
from tests.integration.test_redundancy import (
    BATCH,
    Writer,
    replay_all,
    start_cluster,
    wait_redundant,
)
from tests.integration.wsclient import RawClient

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]

BATCHES = 5  # batch b sets k<j> to b*100+j: batch 0 is below the query
QUERY = "SELECT * FROM /r v WHERE v >= 100"


async def register_cq_then_leave(cluster: Cluster, user: str, node: str) -> None:
    async with RawClient(cluster.ws_url(node), user) as ws:
        welcome = await ws.hello(durable_id="cq-away", redundancy=1, timeout=600)
        assert welcome["pending_events"] == -2
        await ws.send(
            type="register_cq", name="big", region="r", query=QUERY, durable=True
        )
        while (frame := await ws.recv(wait=30))["type"] != "cq_registered":
            assert frame["type"] == "image", frame
        await ws.ready_and_replay()
        await ws.close(keepalive=True)


def test_durable_cq_and_its_events_survive_the_primarys_sigkill_while_away(cluster):
    operator, user = start_cluster(cluster, 3)
    asyncio.run(register_cq_then_leave(cluster, user, "node-1"))
    writer = Writer(cluster, user, "r", "node-3", batches=BATCHES).start()
    written = writer.finish()
    ids = writer.ids
    # Batch 0 (values 0..99) moves no member; batch 1 enters every key,
    # later batches update them.
    expected = {
        event_id: ("create" if i < 2 * BATCH else "update")
        for i, event_id in enumerate(ids)
        if i >= BATCH
    }
    assert len(written) == BATCHES * BATCH
    size = (BATCHES - 1) * BATCH
    view = wait_redundant(cluster, operator, "cq-away", via="node-3", size=size)
    primary = view["primary"]
    cluster.kill_node(primary)
    survivor = next(n for n in cluster.nodes if n != primary)
    wait_redundant(
        cluster, operator, "cq-away", via=survivor, size=size, without=primary
    )
    status, body = cluster.rest(
        "GET", "/api/v1/clients/cq-away/cqs/", user, node=survivor
    )
    assert status == 200
    assert [q["name"] for q in body["results"]] == ["big"]
    welcome, events = asyncio.run(replay_all(cluster, user, "cq-away", survivor))
    assert welcome["pending_events"] == size
    got = {e["id"]: e["cq"] for e in events}
    assert len(got) == len(events) == size
    assert got == {
        event_id: [{"name": "big", "cq_op": op}] for event_id, op in expected.items()
    }


def test_durable_cq_events_survive_the_primarys_sigkill_while_connected(cluster):
    operator, user = start_cluster(cluster, 3)

    async def run() -> tuple[dict, list]:
        async with RawClient(cluster.ws_url("node-1"), user) as ws:
            await ws.hello(durable_id="cq-live", redundancy=1, timeout=600)
            await ws.send(
                type="register_cq", name="big", region="r", query=QUERY, durable=True
            )
            while (frame := await ws.recv(wait=30))["type"] != "cq_registered":
                assert frame["type"] == "image", frame
            await ws.ready_and_replay()
            writer = Writer(cluster, user, "r", "node-3", batches=BATCHES).start()
            await asyncio.to_thread(writer.finish)
            size = (BATCHES - 1) * BATCH
            view = await asyncio.to_thread(
                wait_redundant, cluster, operator, "cq-live", via="node-3", size=size
            )
            # Nothing acked: the whole backlog is queued on both hosts when
            # the primary dies under the open socket.
            cluster.kill_node(view["primary"])
            return view, writer.ids

    view, ids = asyncio.run(run())
    survivor = next(n for n in cluster.nodes if n != view["primary"])
    size = (BATCHES - 1) * BATCH
    wait_redundant(
        cluster, operator, "cq-live", via=survivor, size=size, without=view["primary"]
    )
    _, events = asyncio.run(replay_all(cluster, user, "cq-live", survivor))
    got = {e["id"]: e["cq"] for e in events}
    assert len(got) == len(events) == size
    assert got == {
        event_id: [{"name": "big", "cq_op": "create" if i < 2 * BATCH else "update"}]
        for i, event_id in enumerate(ids)
        if i >= BATCH
    }
