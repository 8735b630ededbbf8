"""End to end on one real node: runnode (Daphne + Celery worker + Redis)."""

import asyncio
import json

import pytest
import websockets

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


async def _recv(ws, wait=15):
    return json.loads(await asyncio.wait_for(ws.recv(), wait))


async def _recv_type(ws, frame_type, wait=15):
    while True:
        frame = await _recv(ws, wait)
        if frame["type"] == frame_type:
            return frame


def _connect(cluster, token, node="node-1"):
    return websockets.connect(
        cluster.ws_url(node), additional_headers={"Authorization": f"Token {token}"}
    )


async def _hello(ws, **fields):
    await ws.send(json.dumps({"type": "hello", **fields}))
    return await _recv_type(ws, "welcome")


def test_sigkill_restart_keeps_offline_queue(node1):
    """A node crash while a durable client is away loses none of its events."""
    cluster = node1
    operator = cluster.token("ops", operator=True)
    user = cluster.token("app")
    assert cluster.rest("POST", "/api/v1/regions/", operator, {"name": "r"})[0] == 201

    async def subscribe_and_leave():
        async with _connect(cluster, user) as ws:
            welcome = await _hello(ws, durable_id="d1", timeout=600)
            assert welcome["pending_events"] == -2
            await ws.send(
                json.dumps(
                    {
                        "type": "register_interest",
                        "region": "r",
                        "all_keys": True,
                        "durable": True,
                        "id": "i1",
                    }
                )
            )
            await _recv_type(ws, "interest_registered")
            await ws.send(json.dumps({"type": "close", "keepalive": True}))
            assert (await _recv_type(ws, "closed"))["keepalive"] is True

    asyncio.run(subscribe_and_leave())
    for i in range(50):
        status, _ = cluster.rest(
            "PUT", f"/api/v1/regions/r/entries/k{i % 5}/", user, {"value": i}
        )
        assert status in (200, 201)
    # The events are durable once the puts answered; crash and restart now.
    cluster.kill_node("node-1")
    cluster.start_node("node-1")

    async def come_back():
        async with _connect(cluster, user) as ws:
            welcome = await _hello(ws, durable_id="d1", timeout=600)
            assert welcome["pending_events"] in range(51)
            await ws.send(json.dumps({"type": "ready"}))
            events = []
            while True:
                frame = await _recv(ws)
                if frame["type"] == "marker":
                    break
                events.append(frame)
            # The fan-out may still be moving the log into the queue after the
            # restart; what is not replayed arrives live.
            while len(events) < 50:
                frame = await _recv_type(ws, "event")
                events.append(frame)
            return events

    events = asyncio.run(come_back())
    assert len({e["id"] for e in events}) == 50
    values = [e["value"] for e in events]
    assert sorted(values) == list(range(50))
    for key in {e["key"] for e in events}:
        versions = [e["version"] for e in events if e["key"] == key]
        assert versions == sorted(versions)


def _worker_pids(cluster):
    import psutil

    runnode = psutil.Process(cluster.nodes["node-1"]["proc"].pid)
    pids = set()
    for child in runnode.children():
        try:
            if "celery" in " ".join(child.cmdline()):
                pids.add(child.pid)
        except psutil.Error:  # a zombie not reaped yet
            continue
    return pids


def _delivery_goes_on(cluster, user, durable_id):
    """A new subscriber gets a live event for a PUT: fan-out runs."""

    async def scenario():
        async with _connect(cluster, user) as ws:
            await _hello(ws, durable_id=durable_id)
            await ws.send(
                json.dumps(
                    {
                        "type": "register_interest",
                        "region": "w",
                        "keys": ["k"],
                        "policy": "none",
                        "id": "r",
                    }
                )
            )
            await _recv_type(ws, "interest_registered")
            await ws.send(json.dumps({"type": "ready"}))
            await _recv_type(ws, "marker")
            status, _ = await asyncio.to_thread(
                cluster.rest, "PUT", "/api/v1/regions/w/entries/k/", user, {"value": 1}
            )
            assert status == 200
            return await _recv_type(ws, "event", wait=30)

    event = asyncio.run(scenario())
    assert (event["key"], event["value"], event["replay"]) == ("k", 1, False)


def test_a_dead_worker_is_replaced_and_delivery_goes_on(node1):
    """The Celery worker holds no state: runnode starts a new one."""
    import os
    import signal

    from tests.integration.harness import wait_for

    cluster = node1
    operator = cluster.token("ops", operator=True)
    user = cluster.token("app")
    assert cluster.rest("POST", "/api/v1/regions/", operator, {"name": "w"})[0] == 201
    # The worker may be between a start and its cmdline (a loaded machine).
    old = wait_for(lambda: _worker_pids(cluster), timeout=30)
    for pid in old:
        os.kill(pid, signal.SIGKILL)
    new = wait_for(lambda: _worker_pids(cluster) - old, timeout=30)
    assert new
    _delivery_goes_on(cluster, user, "after-worker-death")


def test_a_wedged_worker_is_restarted_and_delivery_goes_on(cluster):
    """A worker that runs but does nothing (SIGSTOP stands for every pool
    thread stuck) is killed and replaced once it has done nothing for
    DURABLECACHE_WORKER_STALL_S while ticks were sent to it."""
    import os
    import signal

    from tests.integration.harness import wait_for

    cluster.env["DURABLECACHE_WORKER_STALL_S"] = "3"
    cluster.start_node("node-1")
    operator = cluster.token("ops", operator=True)
    user = cluster.token("app")
    assert cluster.rest("POST", "/api/v1/regions/", operator, {"name": "w"})[0] == 201
    # The worker may be between a start and its cmdline (a loaded machine).
    old = wait_for(lambda: _worker_pids(cluster), timeout=30)
    # A working worker marks progress and is left alone past the limit.
    alive = cluster.workdir / "logs" / "node-1" / "worker.alive"
    first = wait_for(lambda: alive.exists() and alive.stat().st_mtime, timeout=30)
    wait_for(lambda: alive.stat().st_mtime > first + 4, timeout=30)
    assert "did nothing for" not in cluster.log_tail("node-1", 400)
    assert _worker_pids(cluster) == old
    for pid in old:
        os.kill(pid, signal.SIGSTOP)
    new = wait_for(lambda: _worker_pids(cluster) - old, timeout=60)
    assert new
    assert "did nothing for" in cluster.log_tail("node-1", 400)
    assert not _worker_pids(cluster) & old  # the stopped one was killed
    _delivery_goes_on(cluster, user, "after-worker-stall")


def test_sigterm_closes_sockets_with_4503_and_the_queue_survives(node1):
    """A graceful stop: 4503 to connected clients, exit within 30 s."""
    import time

    cluster = node1
    operator = cluster.token("ops", operator=True)
    user = cluster.token("app")
    assert cluster.rest("POST", "/api/v1/regions/", operator, {"name": "g"})[0] == 201

    async def connected_until_stop():
        async with _connect(cluster, user) as ws:
            await _hello(ws, durable_id="graceful")
            await ws.send(
                json.dumps(
                    {
                        "type": "register_interest",
                        "region": "g",
                        "all_keys": True,
                        "durable": True,
                        "policy": "none",
                        "id": "r",
                    }
                )
            )
            await _recv_type(ws, "interest_registered")
            started = time.monotonic()
            stopping = asyncio.create_task(
                asyncio.to_thread(cluster.stop_node, "node-1")
            )
            with pytest.raises(websockets.ConnectionClosed) as closed:
                await _recv(ws, wait=30)
            exit_code = await stopping
            return closed.value.rcvd.code, exit_code, time.monotonic() - started

    close_code, exit_code, took = asyncio.run(connected_until_stop())
    assert close_code == 4503
    assert exit_code == 0
    assert took < 30
    # Back on the same node: the durable client and its interest are kept.
    cluster.start_node("node-1")
    assert (
        cluster.rest("PUT", "/api/v1/regions/g/entries/k/", user, {"value": "after"})[0]
        == 200
    )

    async def come_back():
        async with _connect(cluster, user) as ws:
            await _hello(ws, durable_id="graceful")
            await ws.send(json.dumps({"type": "ready"}))
            return await _recv_type(ws, "event", wait=30)

    event = asyncio.run(come_back())
    assert (event["key"], event["value"]) == ("k", "after")
