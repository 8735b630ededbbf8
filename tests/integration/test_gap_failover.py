"""An overflowed queue survives the SIGKILL of its primary on a real
cluster of three nodes: the overflow is one cluster fact (the client's
``gap``), so the node that takes over welcomes the client with it and
resyncs it by key (docs/protocol.md, "Bounded queues, gaps and resync").

The client's view as of the gap's ``since`` is the region read over REST
just before it went away (nothing is written between); applying the
resync's images to it must give exactly the region's entries now (values,
versions, destroyed keys) for each interest and the CQ's members."""

import asyncio
from typing import Any

import pytest
import websockets

from tests.integration.harness import Cluster, wait_for
from tests.integration.test_redundancy import (
    WAIT_S,
    client_view,
    start_cluster,
    wait_redundant,
)
from tests.integration.wsclient import RawClient

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

DURABLE_ID = "gap-away"
MAX_QUEUED = 5
KEYS = [f"k{j}" for j in range(30)]
LISTED = ["k1", "k2", "k5", "k17", "k40"]  # k40 does not exist yet
QUERY = "SELECT * FROM /r v WHERE v >= 100"

Entries = dict[str, tuple[Any, int]]


def entries_now(cluster: Cluster, token: str, node: str) -> Entries:
    status, body = cluster.rest(
        "GET", "/api/v1/regions/r/entries/?limit=1000", token, node=node
    )
    assert status == 200, body
    assert body["next"] is None
    return {e["key"]: (e["value"], e["version"]) for e in body["results"]}


def putall(cluster: Cluster, token: str, node: str, entries: dict[str, Any]) -> None:
    status, body = cluster.rest(
        "POST", "/api/v1/regions/r/putall/", token, {"entries": entries}, node=node
    )
    assert status == 200, (status, body)


def destroy(cluster: Cluster, token: str, node: str, key: str) -> None:
    status, body = cluster.rest(
        "DELETE", f"/api/v1/regions/r/entries/{key}/", token, node=node
    )
    assert status in (200, 204), (status, body)


def write_while_away(cluster: Cluster, token: str, node: str) -> None:
    """Far more events than a queue of five holds: updates that move keys
    into the CQ and out of it, destroys (one of a listed key), creates (one
    of a listed key that did not exist)."""
    putall(cluster, token, node, {k: 100 + j for j, k in enumerate(KEYS) if j % 2})
    destroy(cluster, token, node, "k5")
    destroy(cluster, token, node, "k8")
    destroy(cluster, token, node, "k9")  # was a CQ member
    putall(cluster, token, node, {"k3": 1, "k4": 200, "k40": 140, "k41": 7})
    putall(cluster, token, node, {"k1": 2, "k2": 300})


async def subscribe(ws: RawClient) -> None:
    """hello with the small limit; interest in every key and in a key
    list, a CQ; ready (nothing to replay)."""
    welcome = await ws.hello(
        durable_id=DURABLE_ID, redundancy=1, max_queued=MAX_QUEUED, timeout=600
    )
    assert welcome["pending_events"] == -2
    await ws.register("r", all_keys=True, durable=True)
    await ws.register("r", keys=LISTED, durable=True)
    await ws.send(type="register_cq", name="big", region="r", query=QUERY, durable=True)
    while (frame := await ws.recv(wait=30))["type"] != "cq_registered":
        assert frame["type"] == "image", frame
    events, marker = await ws.ready_and_replay()
    assert events == []
    assert marker["resynced"] == 0


async def subscribe_then_leave(cluster: Cluster, user: str, node: str) -> None:
    async with RawClient(cluster.ws_url(node), user) as ws:
        await subscribe(ws)
        await ws.close(keepalive=True)


async def come_back(
    cluster: Cluster, user: str, node: str, live_write: Any
) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any], dict[str, Any]]:
    """Reconnect through ``node`` (following a redirect): return the
    welcome, the frames between ``ready`` and the marker, the marker, and
    the first live event after ``live_write`` ran."""
    url = cluster.ws_url(node)
    for _ in range(3):
        async with RawClient(url, user) as ws:
            await ws.send(
                type="hello",
                durable_id=DURABLE_ID,
                redundancy=1,
                max_queued=MAX_QUEUED,
            )
            welcome = await ws.recv(wait=30)
            if welcome["type"] == "redirect":
                url = welcome["url"]
                continue
            assert welcome["type"] == "welcome", welcome
            await ws.send(type="ready")
            before = []
            while (frame := await ws.recv(wait=30))["type"] != "marker":
                before.append(frame)
            await asyncio.to_thread(live_write)
            (event,) = await ws.events(1, wait=30)
            await ws.ack(event["seq"])
            await ws.close(keepalive=False)
            return welcome, before, frame, event
    raise AssertionError("too many redirects")


def interest_ids(cluster: Cluster, operator: str, node: str) -> tuple[int, set[int]]:
    """The all-keys interest's id and the key list's rows' ids."""
    status, body = cluster.rest(
        "GET", f"/api/v1/clients/{DURABLE_ID}/interests/", operator, node=node
    )
    assert status == 200, body
    all_keys = next(i["id"] for i in body["results"] if i.get("all_keys"))
    listed = {i["id"] for i in body["results"] if i.get("keys")}
    assert len(listed) == len(LISTED)
    return all_keys, listed


def wait_gap(cluster: Cluster, operator: str) -> Any:
    def overflowed() -> Any:
        view = client_view(cluster, operator, DURABLE_ID, "node-3")
        return view if view["gap"] is not None else None

    gap = wait_for(overflowed, timeout=WAIT_S, interval=0.1)["gap"]
    assert gap["reason"] == "overflow"
    assert gap["dropped"] == MAX_QUEUED
    return gap


def test_an_overflowed_queue_is_resynced_by_the_new_primary_after_a_sigkill(
    cluster,
):
    operator, user = start_cluster(cluster, 3)
    putall(cluster, user, "node-3", {k: j for j, k in enumerate(KEYS)})
    asyncio.run(subscribe_then_leave(cluster, user, "node-1"))
    then = entries_now(cluster, user, "node-3")
    write_while_away(cluster, user, "node-3")
    gap = wait_gap(cluster, operator)
    # Both hosts read the gap and emptied their copies: nothing is left to
    # fail over but the gap itself.
    view = wait_redundant(cluster, operator, DURABLE_ID, via="node-3", size=0)
    assert view["gap"] == gap
    cluster.kill_node(view["primary"])
    fail_over_and_resync(cluster, operator, user, view["primary"], then, gap)


def test_a_queue_that_overflowed_under_an_open_socket_is_resynced_after_a_sigkill(
    cluster,
):
    """The client is connected and acks nothing when its queue overflows;
    its primary is SIGKILLed as soon as the gap is recorded (the socket is
    closed either way: 4503 from the sweep, or the node's death)."""
    operator, user = start_cluster(cluster, 3)
    putall(cluster, user, "node-3", {k: j for j, k in enumerate(KEYS)})

    async def run() -> tuple[Entries, Any, str]:
        async with RawClient(cluster.ws_url("node-1"), user) as ws:
            await subscribe(ws)
            then = await asyncio.to_thread(entries_now, cluster, user, "node-3")
            await asyncio.to_thread(write_while_away, cluster, user, "node-3")
            gap = await asyncio.to_thread(wait_gap, cluster, operator)
            view = await asyncio.to_thread(
                wait_redundant, cluster, operator, DURABLE_ID, via="node-3", size=0
            )
            assert view["gap"] == gap
            cluster.kill_node(view["primary"])
            await until_closed(ws)
            return then, gap, view["primary"]

    then, gap, primary = asyncio.run(run())
    fail_over_and_resync(cluster, operator, user, primary, then, gap)


async def until_closed(ws: RawClient) -> None:
    """Read what was sent before the overflow (events only) until the
    socket ends."""
    try:
        while True:
            frame = await ws.recv(wait=30)
            assert frame["type"] == "event", frame
    except websockets.ConnectionClosed:
        return


def fail_over_and_resync(
    cluster: Cluster,
    operator: str,
    user: str,
    primary: str,
    then: Entries,
    gap: Any,
) -> None:
    """``primary`` was killed: the new primary welcomes the client with
    ``gap``, and the resync applied to ``then`` gives the entries now."""
    survivor = next(n for n in cluster.nodes if n != primary)
    all_keys, listed = interest_ids(cluster, operator, survivor)
    view = wait_redundant(
        cluster, operator, DURABLE_ID, via=survivor, size=0, without=primary
    )
    assert view["gap"] == gap
    new_primary = view["primary"]

    def live_write() -> None:
        putall(cluster, user, survivor, {"k2": 301})

    welcome, before, marker, event = asyncio.run(
        come_back(cluster, user, survivor, live_write)
    )
    assert welcome["gap"] == gap
    assert welcome["pending_events"] == 0
    assert welcome["node"] == welcome["primary"] == new_primary
    assert before[0] == {"type": "gap", **gap}

    # The client's copies as of ``since``, then the resync applied.
    copies: dict[Any, Entries] = {
        "all": dict(then),
        "listed": {k: v for k, v in then.items() if k in LISTED},
        "big": {k: v for k, v in then.items() if v[0] >= 100},
    }
    for frame in before[1:]:
        assert frame["type"] == "image", frame
        assert frame["resync"] is True, frame
        if "cq" in frame:
            assert frame["cq"] == "big"
            copy = copies["big"]
        elif frame["interest"] == all_keys:
            copy = copies["all"]
        else:
            assert frame["interest"] in listed, frame
            copy = copies["listed"]
        for item in frame["entries"]:
            if item.get("destroyed") or item.get("cq_op") == "destroy":
                copy.pop(item["key"], None)
            else:
                copy[item["key"]] = (item["value"], item["version"])
    assert marker["replayed"] == 0
    assert marker["resynced"] == sum(len(f["entries"]) for f in before[1:])

    now = entries_now(cluster, user, survivor)
    now_before_live = {**now, "k2": (300, now["k2"][1] - 1)}
    assert copies["all"] == now_before_live
    assert copies["listed"] == {k: v for k, v in now_before_live.items() if k in LISTED}
    assert copies["big"] == {k: v for k, v in now_before_live.items() if v[0] >= 100}
    # The destroyed keys are gone from every copy, the created ones there.
    assert {"k5", "k8", "k9"}.isdisjoint(copies["all"])
    assert "k40" in copies["listed"]
    assert "k5" not in copies["listed"]
    # Then live events, each at the next version of its key.
    assert (event["key"], event["value"], event["replay"]) == ("k2", 301, False)
    assert event["version"] == copies["all"]["k2"][1] + 1 == now["k2"][1]
