"""Continuous queries through the Python client library against a real node.

What the application sees (docs/protocol.md, continuous queries;
sdk/python/README.md, "Continuous queries"): the initial result, events
with ``base_op``/``query_op``, the region's cache left alone by CQ-only
events, a typed ``bad_query``, a durable CQ's events queued while away and
replayed, an operator's close and a ``region_destroy`` ending CQs, and the
CLI's ``--cq``.

A node that refuses a valid query with ``bad_query`` has no CQs: the
``cqs`` fixture then skips these tests, saying so.
"""

import asyncio
import itertools
import time

import pytest

from durablecache_client import (
    AsyncDurableClient,
    BadQueryError,
    CqListener,
)
from tests.integration.harness import create_region, wait_for
from tests.integration.recording import Recorder
from tests.integration.test_client_library import Cli

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
_names = itertools.count()
WAIT_S = 20


def fresh(prefix: str) -> str:
    return f"cq-{prefix}-{next(_names)}"


class CqRecorder(CqListener):
    def __init__(self) -> None:
        self.events = []
        self.errors = []
        self.closes = 0

    def on_event(self, event):
        self.events.append(event)

    def on_error(self, error):
        self.errors.append(error)

    def on_close(self):
        self.closes += 1

    def ops(self):
        return [(e.key, e.base_op, e.query_op) for e in self.events]


def put(cluster, token, region, key, value):
    status, body = cluster.rest(
        "PUT", f"/api/v1/regions/{region}/entries/{key}/", token, {"value": value}
    )
    assert status == 200, body
    return body


async def aput(cluster, region, key, value):
    return await asyncio.to_thread(put, cluster, cluster.user, region, key, value)


async def until(predicate, within=WAIT_S, interval=0.05):
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"condition not met within {within}s")
        await asyncio.sleep(interval)


@pytest.fixture(scope="module")
def region(live):
    return create_region(live, "cqlib")


@pytest.fixture(scope="module")
def cqs(live, region):
    """Skip the module's tests when the node has no CQs (it refuses a valid
    query with ``bad_query``)."""

    async def probe():
        client = AsyncDurableClient(live.ws_url("node-1"), token=live.user)
        try:
            await client.connect()
            await client.region(region).register_cq("probe", "key = 'probe'")
            await client.close_cq("probe")
            return None
        except BadQueryError as exc:
            return exc.message
        finally:
            await client.close()

    refused = asyncio.run(probe())
    if refused is not None:
        pytest.skip(f"the node refuses a valid CQ query with bad_query: {refused}")


async def test_cq_events_carry_query_ops_and_leave_the_cache_alone(live, region, cqs):
    tag = fresh("ops")
    inside, outside, shared = f"{tag}-in", f"{tag}-out", f"{tag}-shared"
    seeded = await aput(live, region, inside, {"n": 10})
    await aput(live, region, outside, {"n": 1})

    client = AsyncDurableClient(live.ws_url("node-1"), token=live.user)
    cache_events = Recorder()
    cq = CqRecorder()
    try:
        await client.connect()
        handle = client.region(region, cache_events)
        assert await handle.register_keys([shared]) == 0
        assert await handle.register_cq("big", "value.n > 5", cq) >= 1
        results = handle.cq_results("big")
        assert results[inside] == ({"n": 10}, seeded["version"])
        assert outside not in results
        with pytest.raises(BadQueryError) as refused:
            await handle.register_cq("bad", "value.a = 1; DROP TABLE x")
        assert refused.value.message.startswith("line 1, column ")
        await client.ready_for_events()
        await client.wait_for_marker(timeout=WAIT_S)

        await aput(live, region, outside, {"n": 7})  # enters
        await aput(live, region, inside, {"n": 2})  # leaves
        await aput(live, region, shared, {"n": 9})  # enters; the interest's too
        await aput(live, region, shared, {"n": 1})  # leaves
        await aput(live, region, f"{tag}-never", {"n": 0})  # no CQ, no interest
        await until(lambda: len(cq.events) >= 4)
        await until(lambda: len(cache_events.events()) >= 2)
    finally:
        await client.close()

    assert cq.ops() == [
        (outside, "update", "create"),
        (inside, "update", "destroy"),
        (shared, "create", "create"),
        (shared, "update", "destroy"),
    ]
    assert all(e.cq_name == "big" and not e.is_replay for e in cq.events)
    assert [e.key for e in cache_events.events()] == [shared, shared]
    assert handle.keys() == [shared]  # CQ-only keys never reach the cache
    assert handle.get(shared) == {"n": 1}
    assert set(handle.cq_results("big")) == {outside}


async def test_a_durable_cqs_events_while_away_are_replayed(live, region, cqs):
    durable_id = fresh("away")
    url = live.ws_url("node-1")
    first = AsyncDurableClient(url, durable_id=durable_id, token=live.user)
    try:
        await first.connect()
        await first.region(region).register_cq(
            "hot", f"key LIKE '{durable_id}-%' AND value.t > 30", durable=True
        )
        await first.ready_for_events()
        await first.wait_for_marker(timeout=WAIT_S)
    finally:
        await first.close(keepalive=True)

    entered = await aput(live, region, f"{durable_id}-a", {"t": 35})
    await aput(live, region, f"{durable_id}-b", {"t": 20})  # never a member
    left = await aput(live, region, f"{durable_id}-a", {"t": 10})

    def queued():
        status, body = live.rest("GET", f"/api/v1/clients/{durable_id}/", live.user)
        return status == 200 and body["pending_events"] == 2

    await asyncio.to_thread(wait_for, queued, timeout=WAIT_S)

    cq = CqRecorder()
    second = AsyncDurableClient(url, durable_id=durable_id, token=live.user)
    try:
        welcome = await second.connect()
        assert welcome.pending_event_count == 2
        handle = second.region(region)
        await handle.register_cq(
            "hot", f"key LIKE '{durable_id}-%' AND value.t > 30", cq, durable=True
        )
        await second.ready_for_events()
        marker = await second.wait_for_marker(timeout=WAIT_S)
        await until(lambda: len(cq.events) >= 2)
    finally:
        await second.close(keepalive=False)

    assert marker.replayed == 2
    assert [(e.entry.id, e.query_op, e.is_replay) for e in cq.events] == [
        (entered["event_id"], "create", True),
        (left["event_id"], "destroy", True),
    ]
    assert len(handle) == 0


async def test_an_operators_close_and_a_region_destroy_end_cqs(live, cqs):
    name = create_region(live, fresh("doomed"))
    durable_id = fresh("ends")
    first, second = CqRecorder(), CqRecorder()
    client = AsyncDurableClient(
        live.ws_url("node-1"), durable_id=durable_id, token=live.user
    )
    try:
        await client.connect()
        handle = client.region(name)
        await handle.register_cq("first", "value.n > 0", first)
        await handle.register_cq("second", "value.n > 0", second)
        await client.ready_for_events()
        await client.wait_for_marker(timeout=WAIT_S)

        status, body = await asyncio.to_thread(
            live.rest,
            "DELETE",
            f"/api/v1/clients/{durable_id}/cqs/first/",
            live.operator,
        )
        assert status in (200, 204), body
        await until(lambda: first.closes == 1)
        await aput(live, name, "k", {"n": 1})
        await until(lambda: len(second.events) == 1)
        status, body = await asyncio.to_thread(
            live.rest, "DELETE", f"/api/v1/regions/{name}/", live.operator
        )
        assert status in (200, 204), body
        await until(lambda: second.closes == 1)
    finally:
        await client.close()

    assert first.events == []  # closed before the put
    assert [e.query_op for e in second.events] == ["create", "region_destroy"]
    assert handle.cq_results("first") is None
    assert handle.cq_results("second") is None


def test_cli_cq_prints_each_cq_event_with_its_cq_list(live, region, cqs, tmp_path):
    tag = fresh("cli")
    args = [
        "--url",
        live.ws_url("node-1"),
        "--token",
        live.user,
        "--region",
        region,
        "--cq",
        f"mine=key LIKE '{tag}-%'",
        "--cq",
        f"big=key LIKE '{tag}-%' AND value.n > 5",
    ]
    cli = Cli(args, tmp_path / "cli.err")
    try:
        events, _ = cli.read_until_marker()
        assert events == []
        small = put(live, live.user, region, f"{tag}-a", {"n": 1})
        large = put(live, live.user, region, f"{tag}-b", {"n": 9})
        lines = [cli.next_json() for _ in range(2)]
        assert cli.stop() == 0
    finally:
        cli.kill()

    assert [(ln["id"], ln["type"]) for ln in lines] == [
        (small["event_id"], "event"),
        (large["event_id"], "event"),
    ]
    assert lines[0]["cq"] == [{"name": "mine", "cq_op": "create"}]
    assert lines[1]["cq"] == [
        {"name": "big", "cq_op": "create"},
        {"name": "mine", "cq_op": "create"},
    ]
