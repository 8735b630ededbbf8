"""Client frames through a real node's Daphne: the masks and the UTF-8 of
small frames are undone in Python (durablecache.server.autobahn_unmask), larger ones
by autobahn; replies go straight to the socket (sockets.wire)."""

import asyncio
import json

import pytest
import websockets

from tests.integration.harness import create_region
from tests.integration.wsclient import RawClient

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def region(live):
    return create_region(live, "frames")


def stored(live, region, key):
    status, body = live.rest(
        "GET", f"/api/v1/regions/{region}/entries/{key}/", live.user
    )
    assert status == 200, body
    return body["value"]


async def put_frames(live, region, frames):
    """Send each (key, value, how) and return the answers in order."""
    async with RawClient(live.ws_url("node-1"), live.user) as ws:
        await ws.hello()
        for key, value, how in frames:
            text = json.dumps(
                {"type": "put", "region": region, "key": key, "value": value}
            )
            if how == "fragments":  # one message in frames of 7 bytes
                await ws.ws.send([text[i : i + 7] for i in range(0, len(text), 7)])
            else:
                await ws.ws.send(text)
        return [await ws.recv() for _ in frames]


@pytest.mark.parametrize(
    ("value", "how"),
    [
        ("é€😀", "whole"),  # multi-byte UTF-8 in a small frame
        ("é€😀", "fragments"),  # code points cut between frames
        ("x" * 4000 + "é", "whole"),  # around the small frame's bound
        ("x" * 4000 + "é", "fragments"),
        ({"big": "ü" * 60_000}, "whole"),  # autobahn's masker and validator
    ],
)
def test_a_put_frame_is_read_exactly(live, region, value, how):
    key = f"v-{how}-{len(json.dumps(value))}"
    (answer,) = asyncio.run(put_frames(live, region, [(key, value, how)]))
    assert (answer["type"], answer["key"]) == ("written", key)
    assert stored(live, region, key) == value


def test_pipelined_puts_are_answered_in_order(live, region):
    frames = [(f"p-{n}", {"n": n, "s": "ß" * n}, "whole") for n in range(50)]
    answers = asyncio.run(put_frames(live, region, frames))
    assert [(a["type"], a["key"]) for a in answers] == [
        ("written", key) for key, _, _ in frames
    ]


@pytest.mark.parametrize(
    "payload",
    [
        b'{"type":"hello","x":"\xff"}',
        b'{"type":"hello","x":"\xed\xa0\x80"}',
        b'"\xe2\x82',
    ],
    ids=["bad-byte", "surrogate", "cut-code-point"],
)
def test_a_text_frame_that_is_not_utf8_ends_the_socket(live, region, payload):
    """autobahn fails the connection (it drops it, as before the change:
    1006 on the client's side); nothing is answered, and the node goes on."""

    async def run():
        async with RawClient(live.ws_url("node-1"), live.user) as ws:
            # websockets sends bytes as a text frame without checking them.
            await ws.ws.send(payload, text=True)
            try:
                frame = await asyncio.wait_for(ws.ws.recv(), 20)
            except websockets.ConnectionClosed:
                return
            pytest.fail(f"answered {frame!r}")

    asyncio.run(run())
    (answer,) = asyncio.run(put_frames(live, region, [("after-bad", 1, "whole")]))
    assert answer["type"] == "written"
