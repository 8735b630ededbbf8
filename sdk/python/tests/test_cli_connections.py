"""The `subscribe` command says where it is connected and what the image held:
a JSON line for the first welcome, one after every reconnect (a failover
shows the new node), and the image's entries."""

import asyncio
import json

import pytest

from durablecache_client.cli import build_parser, subscribe

pytestmark = pytest.mark.asyncio


class Lines:
    """A text stream whose JSON lines can be awaited."""

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
