"""The Python client library (sdk/python) against real nodes.

The client library's behaviour (sdk/python/README.md, "Behaviour") as the
application sees it: replay flag, marker and
``after_region_live`` order, the version rule of the local cache, reconnect
after a node crash with every event delivered once, duplicates dropped after
a reconnect, the ``subscribe`` CLI, and ``pending_event_count``. Both faces
are used: ``AsyncDurableClient`` (async tests) and ``DurableClient`` (sync
tests). The raw-frame life cycles are in test_durable_lifecycles.py.
"""

import asyncio
import contextlib
import itertools
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from typing import Any

import pytest

from durablecache_client import (
    AsyncDurableClient,
    DurableClient,
)
from tests.integration.harness import ROOT, create_region, wait_for
from tests.integration.recording import Recorder, assert_versions_increase

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
_names = itertools.count()
WAIT_S = 20


def fresh(prefix: str) -> str:
    return f"lib-{prefix}-{next(_names)}"


@pytest.fixture(scope="module")
def region(live):
    return create_region(live, "clientlib")


def put(cluster, token, region, key, value):
    status, body = cluster.rest(
        "PUT", f"/api/v1/regions/{region}/entries/{key}/", token, {"value": value}
    )
    assert status == 200, body
    return body


def client_state(cluster, token, durable_id):
    return cluster.rest("GET", f"/api/v1/clients/{durable_id}/", token)


def wait_queued(cluster, token, durable_id, count):
    """Wait until the REST view shows ``count`` pending events."""

    def queued():
        status, body = client_state(cluster, token, durable_id)
        return status == 200 and body["pending_events"] == count

    wait_for(queued, timeout=WAIT_S)


async def until(predicate, within=WAIT_S, interval=0.05):
    """Async twin of ``wait_for``: poll ``predicate`` up to ``within`` s."""
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"condition not met within {within}s")
        await asyncio.sleep(interval)


# 3. a node crash while events flow: reconnect, every id exactly once ----------
#
# First in the file on purpose: it runs its own cluster (function-scoped
# `node1`) and ends before the module's `live` cluster starts. On the
# production stack both would share Redis database 13 (harness.E2E_REDIS_DB):
# the second Cluster flushes it and both `node-1` workers would consume the
# same Celery queue `node.node-1`.


def test_node_crash_while_events_flow_delivers_every_event_once(node1):
    cluster = node1
    operator = cluster.token("ops", operator=True)
    user = cluster.token("app")
    status, body = cluster.rest("POST", "/api/v1/regions/", operator, {"name": "flow"})
    assert status == 201, body

    writers, per_writer, keys_per_writer = 3, 80, 4
    total = writers * per_writer
    recorder = Recorder()
    client = DurableClient(
        cluster.ws_url("node-1"), durable_id="flow-1", timeout=600, token=user
    )
    # One lock per writer: the crash takes them all, so no put is in flight
    # when the node dies and every answered put names its event. Writers
    # wait for the crash half-way, so it always comes mid-stream.
    locks = [threading.Lock() for _ in range(writers)]
    crashed = threading.Event()
    put_ids: list[str] = []
    errors: list[BaseException] = []

    def writer(w):
        try:
            for i in range(per_writer):
                if i == per_writer // 2 and not crashed.wait(timeout=60):
                    raise TimeoutError("no crash within 60 s")
                key = f"w{w}-k{i % keys_per_writer}"  # each key has one writer
                with locks[w]:
                    body = put(cluster, user, "flow", key, w * per_writer + i)
                put_ids.append(body["event_id"])
        except BaseException as exc:
            errors.append(exc)

    threads = [
        threading.Thread(target=writer, args=(w,), daemon=True) for w in range(writers)
    ]
    try:
        assert client.connect().pending_event_count == -2
        client.region("flow", recorder).register_all_keys(durable=True)
        client.ready_for_events()
        client.wait_for_marker(timeout=WAIT_S)
        for thread in threads:
            thread.start()
        wait_for(lambda: len(recorder.events()) >= 40, timeout=WAIT_S)
        with contextlib.ExitStack() as stack:
            for lock in locks:
                stack.enter_context(lock)
            cluster.kill_node("node-1")
            cluster.start_node("node-1")  # same port
            crashed.set()
        for thread in threads:
            thread.join(timeout=60)
            assert not thread.is_alive()
        assert errors == []
        expected = set(put_ids)
        assert len(expected) == total

        def received_all():
            return {e.id for e in recorder.events()} >= expected

        def state():
            received = {e.id for e in recorder.events()}
            return (
                f"received {len(recorder.events())} ({len(received)} distinct), "
                f"missing {sorted(expected - received)[:10]}, "
                f"reconnects {client.async_client.reconnects}, "
                f"connected {client.connected}, welcome {client.welcome}, "
                f"REST {client_state(cluster, user, 'flow-1')}"
            )

        try:
            wait_for(received_all, timeout=30)
        except TimeoutError:
            pytest.fail(f"not every event arrived: {state()}")
        assert client.async_client.reconnects >= 1, state()
    finally:
        crashed.set()  # never leave a writer waiting
        client.close(keepalive=False)

    events = recorder.events()
    ids = [e.id for e in events]
    assert len(ids) == len(set(ids)), "the application saw an event twice"
    assert set(ids) == expected
    assert sorted(e.value for e in events) == list(range(total))
    assert_versions_increase(events)
    by_key: dict[str, list[int]] = defaultdict(list)
    for event in events:
        by_key[event.key].append(event.value)
    assert all(values == sorted(values) for values in by_key.values())


# 1. replay flag, marker, after_region_live order (asyncio face) ---------------


async def test_replay_then_region_live_then_live_events(live, region):
    durable_id = fresh("replay")
    keys = [f"{durable_id}-{i}" for i in range(3)]
    url = live.ws_url("node-1")

    first = AsyncDurableClient(url, durable_id=durable_id, token=live.user)
    try:
        welcome = await first.connect()
        assert welcome.pending_event_count == -2
        assert await first.region(region).register_keys(keys, durable=True) == 0
        await first.ready_for_events()
        marker = await first.wait_for_marker(timeout=WAIT_S)
        assert (marker.replayed, marker.regions) == (0, [region])
    finally:
        await first.close(keepalive=True)

    away = 9
    queued_ids = []
    for i in range(away):
        body = await asyncio.to_thread(put, live, live.user, region, keys[i % 3], i)
        queued_ids.append(body["event_id"])
    await asyncio.to_thread(wait_queued, live, live.user, durable_id, away)

    recorder = Recorder()
    second = AsyncDurableClient(url, durable_id=durable_id, token=live.user)
    try:
        welcome = await second.connect()
        assert welcome.pending_event_count == away
        cache = second.region(region, recorder)
        # Idempotent re-registration; its image holds the current values.
        assert await cache.register_keys(keys, durable=True) == 3
        assert recorder.entries() == []  # nothing before ready_for_events()
        await second.ready_for_events()
        marker = await second.wait_for_marker(timeout=WAIT_S)
        assert (marker.replayed, marker.regions) == (away, [region])

        live_ids = []
        for i in range(away, away + 4):
            body = await asyncio.to_thread(put, live, live.user, region, keys[i % 3], i)
            live_ids.append(body["event_id"])
        await until(lambda: len(recorder.events()) == away + 4)
    finally:
        await second.close(keepalive=False)

    log = recorder.entries()
    kinds = [kind for kind, _ in log]
    assert kinds == ["event"] * away + ["live"] + ["event"] * 4
    replayed = [item for _, item in log[:away]]
    assert [e.id for e in replayed] == queued_ids
    assert all(e.is_replay for e in replayed)
    assert [e.op for e in replayed] == ["create"] * 3 + ["update"] * (away - 3)
    assert [e.value for e in replayed] == list(range(away))
    region_live = log[away][1]
    assert (region_live.region, region_live.replayed) == (region, away)
    after = [item for _, item in log[away + 1 :]]
    assert [e.id for e in after] == live_ids
    assert not any(e.is_replay for e in after)
    assert [e.value for e in after] == list(range(away, away + 4))
    assert cache.snapshot() == {
        keys[0]: (12, 5),
        keys[1]: (10, 4),
        keys[2]: (11, 4),
    }


# 2. the local cache keeps the newest version (blocking face) ------------------


def test_replayed_old_updates_never_overwrite_the_image(live, region):
    durable_id = fresh("version")
    key, gone = f"{durable_id}-k", f"{durable_id}-gone"
    url = live.ws_url("node-1")

    first = DurableClient(url, durable_id=durable_id, token=live.user)
    try:
        assert first.connect().pending_event_count == -2
        first.region(region).register_keys([key, gone], durable=True)
    finally:
        first.close(keepalive=True)

    for value in range(5):  # versions 1..5 of key, queued while away
        put(live, live.user, region, key, f"v{value}")
    put(live, live.user, region, gone, "soon destroyed")
    status, _ = live.rest(
        "DELETE", f"/api/v1/regions/{region}/entries/{gone}/", live.user
    )
    assert status in (200, 204)
    wait_queued(live, live.user, durable_id, 7)

    recorder = Recorder()
    second = DurableClient(url, durable_id=durable_id, token=live.user)
    try:
        assert second.connect().pending_event_count == 7
        cache = second.region(region, recorder)
        recorder.region = cache
        # keys_values image: the newest value, version 5; `gone` is absent.
        assert cache.register_keys([key, gone], durable=True) == 1
        assert cache.get_entry(key) == ("v4", 5)
        second.ready_for_events()
        marker = second.wait_for_marker(timeout=WAIT_S)
        assert marker.replayed == 7

        replayed = recorder.events()
        assert [(e.key, e.op, e.version) for e in replayed] == [
            (key, "create", 1),
            *((key, "update", v) for v in range(2, 6)),
            (gone, "create", 1),
            (gone, "destroy", 2),
        ]
        assert all(e.is_replay for e in replayed)
        assert [e.value for e in replayed[:5]] == [f"v{i}" for i in range(5)]
        # The listener saw the old values, the cache never went back.
        assert recorder.cache_seen[:5] == [("v4", 5)] * 5
        assert cache.get(key) == "v4"
        assert gone not in cache

        put(live, live.user, region, key, "newest")
        wait_for(lambda: len(recorder.events()) == 8, timeout=WAIT_S)
        newest = recorder.events()[-1]
        assert (newest.version, newest.is_replay) == (6, False)
        assert cache.get_entry(key) == ("newest", 6)
    finally:
        second.close(keepalive=False)


def test_puts_through_the_socket_come_back_as_events(live, region):
    durable_id = fresh("put")
    key = f"{durable_id}-k"
    recorder = Recorder()
    client = DurableClient(
        live.ws_url("node-1"), durable_id=durable_id, token=live.user
    )
    try:
        client.connect()
        cache = client.region(region, recorder)
        recorder.region = cache
        cache.register_keys([key], durable=True)
        client.ready_for_events()
        client.wait_for_marker(timeout=WAIT_S)
        written = [cache.put(key, {"n": n}) for n in range(3)]
        assert [(w.op, w.version) for w in written] == [
            ("create", 1),
            ("update", 2),
            ("update", 3),
        ]
        wait_for(lambda: len(recorder.events()) == 3, timeout=WAIT_S)
        events = recorder.events()
        assert [e.id for e in events] == [w.event_id for w in written]
        assert cache.get_entry(key) == ({"n": 2}, 3)
        # The same entry as REST sees it.
        status, body = live.rest(
            "GET", f"/api/v1/regions/{region}/entries/{key}/", live.user
        )
        assert (status, body["value"], body["version"]) == (200, {"n": 2}, 3)
    finally:
        client.close(keepalive=False)


# 4. unacked events come back after a reconnect and are dropped ----------------


class TcpProxy:
    """A loopback TCP relay to a node; ``cut()`` is a network failure."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.links: list[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = []
        self.accepted = 0

    async def start(self) -> "TcpProxy":
        self.server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws/v1/subscribe"

    async def _relay(self, reader, writer) -> None:
        self.accepted += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(
                "127.0.0.1", self.target_port
            )
        except OSError:
            writer.transport.abort()
            return
        self.links.append((writer, up_writer))

        async def pipe(src, dst):
            with contextlib.suppress(OSError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.transport.abort()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    def cut(self) -> None:
        """Reset every relayed connection (no close frames either way)."""
        for down, up in self.links:
            down.transport.abort()
            up.transport.abort()
        self.links.clear()

    async def close(self) -> None:
        self.cut()
        self.server.close()
        await self.server.wait_closed()


async def test_unacked_events_after_a_reconnect_are_dropped_as_duplicates(live, region):
    durable_id = fresh("dups")
    key = durable_id
    proxy = await TcpProxy(live.nodes["node-1"]["port"]).start()
    recorder = Recorder()
    reconnected = []
    # No ack before the drop: everything delivered comes back as replay.
    client = AsyncDurableClient(
        proxy.url,
        durable_id=durable_id,
        token=live.user,
        ack_interval=3600,
        on_reconnect=reconnected.append,
    )
    try:
        assert (await client.connect()).pending_event_count == -2
        await client.region(region, recorder).register_keys([key], durable=True)
        await client.ready_for_events()
        await client.wait_for_marker(timeout=WAIT_S)
        sent = 6
        for value in range(sent):
            await asyncio.to_thread(put, live, live.user, region, key, value)
        await until(lambda: len(recorder.events()) == sent)
        # Delivered but not acked: still queued.
        await asyncio.to_thread(wait_queued, live, live.user, durable_id, sent)

        proxy.cut()
        await until(lambda: reconnected)
        assert reconnected[0].pending_event_count == sent
        marker = await client.wait_for_marker(timeout=WAIT_S)
        assert marker.replayed == sent
        assert client.duplicates_dropped == sent

        body = await asyncio.to_thread(put, live, live.user, region, key, "after")
        await until(lambda: len(recorder.events()) == sent + 1)
    finally:
        await client.close(keepalive=False)
        await proxy.close()

    events = recorder.events()
    assert len({e.id for e in events}) == sent + 1
    assert [e.value for e in events] == [*range(sent), "after"]
    assert events[-1].id == body["event_id"]
    assert not any(e.is_replay for e in events)
    assert [(live_.region, live_.replayed) for live_ in recorder.lives()] == [
        (region, 0),
        (region, sent),
    ]
    assert client.duplicates_dropped == sent
    assert client.reconnects == 1


# 5. the subscribe CLI -----------------------------------------------------------


class Cli:
    """``python -m durablecache_client subscribe`` in its own session."""

    def __init__(self, args: list[str], stderr_path) -> None:
        self.stderr = open(stderr_path, "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "durablecache_client", "subscribe", *args],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
            start_new_session=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line)

    def next_json(self, timeout: float = WAIT_S) -> dict[str, Any]:
        try:
            return json.loads(self.lines.get(timeout=timeout))
        except queue.Empty:
            raise TimeoutError(f"no output line within {timeout}s") from None

    def read_until_marker(self) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """The event lines before the marker, and the marker (the CLI's
        ``connected`` and ``image`` lines come first and are skipped)."""
        events = []
        while (line := self.next_json())["type"] != "marker":
            if line["type"] == "event":
                events.append(line)
        return events, line

    def stop(self) -> int:
        """SIGTERM its own pid (a graceful close); return the exit status."""
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=WAIT_S)

    def kill(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        self.proc.stdout.close()
        self.stderr.close()


def test_cli_subscribe_prints_events_and_marker(live, region, tmp_path):
    durable_id = fresh("cli")
    a, b, other = f"{durable_id}-a", f"{durable_id}-b", f"{durable_id}-c"
    args = [
        "--url",
        live.ws_url("node-1"),
        "--token",
        live.user,
        "--durable-id",
        durable_id,
        "--region",
        region,
        "--keys",
        f"{a},{b}",
        "--durable",
        "--keepalive",
    ]
    fields = {"type", "id", "seq", "region", "key", "op", "value", "version"}
    fields |= {"ts", "replay"}

    cli = Cli(args, tmp_path / "cli.err")
    try:
        events, marker = cli.read_until_marker()
        assert events == []
        assert marker == {
            "type": "marker",
            "replayed": 0,
            "regions": [region],
        }
        answers = [
            put(live, live.user, region, a, {"n": 1}),
            put(live, live.user, region, other, "not subscribed"),
            put(live, live.user, region, b, [1, 2]),
            put(live, live.user, region, a, None),
        ]
        lines = [cli.next_json() for _ in range(3)]
        assert cli.stop() == 0  # SIGTERM: close with keepalive
    finally:
        cli.kill()

    assert all(set(line) == fields for line in lines), lines
    wanted = [answers[0], answers[2], answers[3]]
    assert [line["id"] for line in lines] == [x["event_id"] for x in wanted]
    assert [(ln["key"], ln["op"], ln["value"], ln["version"]) for ln in lines] == [
        (a, "create", {"n": 1}, 1),
        (b, "create", [1, 2], 1),
        (a, "update", None, 2),
    ]
    assert all(ln["region"] == region and ln["replay"] is False for ln in lines)
    seqs = [line["seq"] for line in lines]
    assert seqs == sorted(set(seqs))
    for line in lines:
        assert line["ts"].endswith(("Z", "+00:00")), line["ts"]

    # Kept with keepalive: what happens while away comes back as replay.
    away = put(live, live.user, region, b, "while away")
    wait_queued(live, live.user, durable_id, 1)
    cli = Cli(args, tmp_path / "cli.err")
    try:
        events, marker = cli.read_until_marker()
        assert cli.stop() == 0
    finally:
        cli.kill()
    assert [(e["id"], e["value"], e["replay"]) for e in events] == [
        (away["event_id"], "while away", True)
    ]
    assert marker == {
        "type": "marker",
        "replayed": 1,
        "regions": [region],
    }
    assert client_state(live, live.user, durable_id)[0] == 200


# 6. pending_event_count: -2, n, -1 ---------------------------------------------


def test_pending_event_count_new_queued_lost(live, region):
    durable_id = fresh("pending")
    url = live.ws_url("node-1")

    def session(timeout, *, register=False, keepalive=True):
        client = DurableClient(
            url, durable_id=durable_id, timeout=timeout, token=live.user
        )
        try:
            count = client.connect().pending_event_count
            if register:
                client.region(region).register_keys([durable_id], durable=True)
        finally:
            client.close(keepalive=keepalive)
        return count

    assert session(300, register=True) == -2
    queued = 3
    for value in range(queued):
        put(live, live.user, region, durable_id, value)
    wait_queued(live, live.user, durable_id, queued)
    # This session asks for a 1 s timeout and leaves with keepalive.
    assert session(1) == queued
    # The live node checks expiry every 0.5 s.
    wait_for(lambda: client_state(live, live.user, durable_id)[0] == 404, timeout=30)
    assert session(1, keepalive=False) == -1
    assert session(1, keepalive=False) == -2  # -1 is said once
