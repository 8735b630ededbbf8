"""The `subscribe` command: JSON lines for where it is connected (the first
welcome, and every reconnect, so a failover shows the new node), the image's
entries, the events and the marker."""

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from durablecache_client.cli import build_parser, subscribe

pytestmark = pytest.mark.asyncio

SDK_ROOT = Path(__file__).resolve().parents[1]


class Lines:
    """A text stream whose lines can be awaited."""

    def __init__(self):
        self.queue = asyncio.Queue()

    def write(self, text):
        for line in text.splitlines():
            self.queue.put_nowait(line)

    def flush(self):
        pass

    async def next_json(self):
        return json.loads(await asyncio.wait_for(self.queue.get(), 5))


class Sink:
    def write(self, text):
        pass

    def flush(self):
        pass


async def test_subscribe_prints_events_and_marker_then_closes_on_stop(fake_server):
    args = build_parser().parse_args(
        [
            "subscribe",
            "--url",
            fake_server.url,
            "--token",
            "tok-1",
            "--durable-id",
            "cli-1",
            "--region",
            "r",
            "--keys",
            "a,b",
            "--durable",
            "--keepalive",
        ]
    )
    out = Lines()
    stop = asyncio.Event()
    command = asyncio.create_task(
        subscribe(args, stop=stop, out=out, err=Sink(), close_timeout=1.0)
    )

    conn = await fake_server.accept()
    await conn.welcome(pending_events=1)
    request = await conn.recv("register_interest")
    assert request["keys"] == ["a", "b"]
    assert request["durable"] is True
    await conn.answer_register(request, [("a", 1, 1)])
    await conn.recv("ready")
    await conn.event("e1", 1, "a", "update", {"x": 1}, 2, replay=True)
    await conn.marker(1, ["r"])
    await conn.event("e2", 2, "b", "create", "new", 1)

    assert (await out.next_json())["type"] == "connected"
    assert (await out.next_json())["type"] == "image"
    first = await out.next_json()
    marker = await out.next_json()
    live = await out.next_json()
    stop.set()
    assert await asyncio.wait_for(command, 5) == 0

    assert first == {
        "type": "event",
        "id": "e1",
        "seq": 1,
        "region": "r",
        "key": "a",
        "op": "update",
        "value": {"x": 1},
        "version": 2,
        "ts": "2025-01-01T00:00:00Z",
        "replay": True,
    }
    assert marker == {"type": "marker", "replayed": 1, "regions": ["r"]}
    assert (live["id"], live["replay"]) == ("e2", False)
    assert conn.hello["durable_id"] == "cli-1"
    assert (await conn.recv("close"))["keepalive"] is True


async def test_module_entry_point_shows_help():
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "durablecache_client",
        "subscribe",
        "--help",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=str(SDK_ROOT),
    )
    stdout, _ = await asyncio.wait_for(proc.communicate(), 10)

    assert proc.returncode == 0
    assert b"--durable-id" in stdout
    assert b"--keepalive" in stdout


def parse(*extra):
    return build_parser().parse_args(
        [
            "subscribe",
            *extra,
            "--token",
            "tok-1",
            "--durable-id",
            "cli-1",
            "--redundancy",
            "1",
            "--region",
            "r",
            "--durable",
        ]
    )


async def test_prints_the_welcome_the_image_and_the_node_after_a_failover(
    fake_server, server_factory
):
    second = await server_factory()
    args = parse("--url", fake_server.url, "--url", second.url, "--keys", "a,b,c")
    out, stop = Lines(), asyncio.Event()
    command = asyncio.create_task(
        subscribe(args, stop=stop, out=out, err=Sink(), close_timeout=1.0)
    )

    conn = await fake_server.accept()
    await conn.welcome(node="node-2", primary="node-2", secondaries=["node-1"])
    request = await conn.recv("register_interest")
    await conn.answer_register(request, [("b", 1.27, 4), ("a", {"x": 1}, 2)])
    await conn.recv("ready")
    connected = await out.next_json()
    image = await out.next_json()

    await conn.drop()  # its node died: the client goes on to the next url
    conn2 = await second.accept()
    await conn2.welcome(
        node="node-1", primary="node-1", secondaries=["node-3"], pending_events=0
    )
    await conn2.answer_register(await conn2.recv("register_interest"), [])
    await conn2.recv("ready")
    reconnected = await out.next_json()
    stop.set()
    assert await asyncio.wait_for(command, 5) == 0

    assert connected == {
        "type": "connected",
        "node": "node-2",
        "url": fake_server.url,
        "durable_id": "cli-1",
        "primary": "node-2",
        "secondaries": ["node-1"],
        "redundancy_satisfied": True,
        "pending_events": -2,
    }
    assert conn.hello["redundancy"] == 1
    assert image == {
        "type": "image",
        "region": "r",
        "count": 2,
        "entries": [
            {"key": "a", "value": {"x": 1}, "version": 2},
            {"key": "b", "value": 1.27, "version": 4},
        ],
    }
    assert reconnected == {
        **connected,
        "type": "reconnected",
        "node": "node-1",
        "url": second.url,
        "primary": "node-1",
        "secondaries": ["node-3"],
        "pending_events": 0,
    }


async def test_a_keys_image_lists_the_keys(fake_server):
    args = parse("--url", fake_server.url, "--all-keys", "--policy", "keys")
    out, stop = Lines(), asyncio.Event()
    command = asyncio.create_task(
        subscribe(args, stop=stop, out=out, err=Sink(), close_timeout=1.0)
    )

    conn = await fake_server.accept()
    await conn.welcome()
    await conn.answer_register(await conn.recv("register_interest"), keys=["y", "x"])
    await conn.recv("ready")
    await out.next_json()
    image = await out.next_json()
    stop.set()
    assert await asyncio.wait_for(command, 5) == 0

    assert image == {"type": "image", "region": "r", "count": 2, "keys": ["x", "y"]}


async def test_cq_subscribes_with_each_query_and_prints_each_event_once_with_cq(
    fake_server,
):
    args = parse(
        "--url",
        fake_server.url,
        "--keys",
        "a",
        "--cq",
        "big=value.n > 5",
        "--cq",
        "eq=value.s = 'x=y'",
    )
    out, stop = Lines(), asyncio.Event()
    command = asyncio.create_task(
        subscribe(args, stop=stop, out=out, err=Sink(), close_timeout=1.0)
    )

    conn = await fake_server.accept()
    await conn.welcome()
    await conn.answer_register(await conn.recv("register_interest"), [])
    big = await conn.recv("register_cq")
    await conn.answer_register(big, [("b", {"n": 9}, 3)])
    eq = await conn.recv("register_cq")
    await conn.answer_register(eq, [])
    await conn.recv("ready")
    both = [{"name": "big", "cq_op": "create"}, {"name": "eq", "cq_op": "create"}]
    # A CQ-only key, then a key the interest covers too: one line each.
    await conn.event("e1", 1, "c", "create", {"n": 7, "s": "x=y"}, 1, cq=both)
    await conn.event(
        "e2", 2, "a", "update", {"n": 1}, 2, cq=[{"name": "big", "cq_op": "destroy"}]
    )
    await conn.marker(0, ["r"])
    lines = [await out.next_json() for _ in range(7)]
    stop.set()
    assert await asyncio.wait_for(command, 5) == 0

    assert (big["name"], big["query"], big["durable"]) == ("big", "value.n > 5", True)
    assert (eq["name"], eq["query"]) == ("eq", "value.s = 'x=y'")
    assert [line["type"] for line in lines] == [
        "connected",
        "image",
        "image",
        "image",
        "event",
        "event",
        "marker",
    ]
    assert lines[2] == {
        "type": "image",
        "region": "r",
        "cq": "big",
        "count": 1,
        "entries": [{"key": "b", "value": {"n": 9}, "version": 3}],
    }
    assert (lines[3]["cq"], lines[3]["count"]) == ("eq", 0)
    assert (lines[4]["id"], lines[4]["key"], lines[4]["cq"]) == ("e1", "c", both)
    assert (lines[5]["id"], lines[5]["op"]) == ("e2", "update")
    assert lines[5]["cq"] == [{"name": "big", "cq_op": "destroy"}]


async def test_a_refused_cq_prints_the_servers_message_and_exits_1(fake_server):
    args = parse("--url", fake_server.url, "--cq", "q=value.a = 1; DROP TABLE x")
    err = Lines()
    command = asyncio.create_task(
        subscribe(args, stop=asyncio.Event(), out=Sink(), err=err, close_timeout=1.0)
    )

    conn = await fake_server.accept()
    await conn.welcome()
    request = await conn.recv("register_cq")
    message = "line 1, column 12: unexpected character ';'"
    await conn.send(
        {"type": "error", "id": request["id"], "code": "bad_query", "message": message}
    )

    assert await asyncio.wait_for(command, 5) == 1
    line = await asyncio.wait_for(err.queue.get(), 5)
    assert line == f"error: bad_query: {message}"


async def test_cq_arguments_need_a_name_and_a_query():
    with pytest.raises(SystemExit):
        build_parser().parse_args(
            ["subscribe", "--url", "u", "--region", "r", "--cq", "noquery"]
        )
    args = build_parser().parse_args(
        ["subscribe", "--url", "u", "--region", "r", "--cq", "n=key = 'a=b'"]
    )
    assert args.cq == [("n", "key = 'a=b'")]


async def test_a_gap_and_its_resync_are_printed_line_by_line(fake_server):
    args = parse("--url", fake_server.url, "--all-keys")
    out, stop = Lines(), asyncio.Event()
    command = asyncio.create_task(
        subscribe(args, stop=stop, out=out, err=Sink(), close_timeout=1.0)
    )

    conn = await fake_server.accept()
    gap = {"since": 15, "dropped": 9, "reason": "overflow"}
    await conn.welcome(pending_events=0, gap=gap)
    await conn.answer_register(await conn.recv("register_interest"), [("a", 1, 1)])
    await conn.recv("ready")
    await conn.send({"type": "gap", **gap})
    await conn.send(
        {
            "type": "image",
            "region": "r",
            "resync": True,
            "interest": 1,
            "entries": [
                {"key": "a", "version": 2, "destroyed": True},
                {"key": "b", "value": "new", "version": 1},
            ],
        }
    )
    await conn.send({"type": "marker", "replayed": 0, "resynced": 2, "regions": ["r"]})
    again = await conn.recv("register_interest")
    await conn.send({"type": "interest_registered", "id": again["id"], "since": 15})
    lines = [await out.next_json() for _ in range(6)]
    stop.set()
    assert await asyncio.wait_for(command, 5) == 0

    assert [line["type"] for line in lines] == [
        "connected",
        "image",
        "gap",
        "event",
        "event",
        "marker",
    ]
    assert lines[0]["gap"] == gap
    assert lines[2] == {"type": "gap", **gap}
    assert [(e["key"], e["op"], e["resync"], e["id"]) for e in lines[3:5]] == [
        ("a", "destroy", True, None),
        ("b", "create", True, None),
    ]
    assert lines[5] == {
        "type": "marker",
        "replayed": 0,
        "regions": ["r"],
        "resynced": 2,
    }
    assert again["since"] == 15, "no event yet: the gap's since"
