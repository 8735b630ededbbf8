"""The `subscribe` command: JSON lines for events and the marker."""

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
