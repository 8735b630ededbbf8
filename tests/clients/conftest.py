"""Websocket fixtures: communicators against the real ASGI application.

Every communicator made through ``ws`` is disconnected at teardown, before
the transactional database is flushed.
"""

from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator

from clients import fanout, tasks
from durablecache.asgi import application

PATH = "/ws/v1/subscribe"
WAIT_S = 3  # upper bound of every wait; a passing test never reaches it


class Socket:
    """One communicator plus the frame helpers the tests share."""

    def __init__(self, comm: WebsocketCommunicator) -> None:
        self.comm = comm

    async def send(self, **frame: Any) -> None:
        await self.comm.send_json_to(frame)

    async def recv(self) -> dict[str, Any]:
        return await self.comm.receive_json_from(timeout=WAIT_S)

    async def request(self, **frame: Any) -> dict[str, Any]:
        """Send a frame and return the next frame received."""
        await self.send(**frame)
        return await self.recv()

    async def until(self, frame_type: str) -> tuple[dict[str, Any], list[Any]]:
        """Return the next frame of ``frame_type`` and the frames before it."""
        before = []
        while True:
            frame = await self.recv()
            if frame["type"] == frame_type:
                return frame, before
            before.append(frame)

    async def events(self, count: int) -> list[dict[str, Any]]:
        frames = [await self.recv() for _ in range(count)]
        assert [f["type"] for f in frames] == ["event"] * count, frames
        return frames

    async def hello(self, **fields: Any) -> dict[str, Any]:
        welcome = await self.request(type="hello", **fields)
        assert welcome["type"] == "welcome", welcome
        return welcome

    async def register(self, region: str = "prices", **fields: Any) -> int:
        """Register an interest; return the count of its ``interest_registered``."""
        await self.send(type="register_interest", region=region, **fields)
        reply, _ = await self.until("interest_registered")
        return reply["count"]

    async def ready(self) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Send ``ready``; return the marker and the replayed events."""
        await self.send(type="ready")
        return await self.until("marker")

    async def barrier(self, region: str = "prices") -> list[Any]:
        """Round-trip a frame that changes nothing; return frames before it.

        The consumer handles a socket's frames one at a time, so once the
        reply arrives every earlier frame (an ``ack``) has been handled.
        """
        await self.send(
            type="unregister_interest", id="barrier", region=region, keys=["~b~"]
        )
        _, before = await self.until("interest_unregistered")
        return before

    async def closed_with(self, code: int) -> None:
        """Assert that the server's next message closes the socket with ``code``."""
        out = await self.comm.receive_output(timeout=WAIT_S)
        assert out["type"] == "websocket.close", out
        assert out.get("code") == code, out

    async def drop(self) -> None:
        """Drop the socket without ``close`` (an abnormal disconnect)."""
        await self.comm.disconnect(code=1006, timeout=WAIT_S)


@pytest.fixture
async def ws():
    """Open websockets: ``await ws(token, headers=..., query=...)``.

    Returns (connected, Socket); the close code instead of True when the
    handshake was refused.
    """
    opened: list[WebsocketCommunicator] = []

    async def open_socket(
        token: str | None = None,
        *,
        headers: list[tuple[bytes, bytes]] | None = None,
        query: str = "",
    ) -> tuple[bool, Socket]:
        all_headers = list(headers or [])
        if token is not None:
            all_headers.append((b"authorization", f"Token {token}".encode()))
        path = f"{PATH}?{query}" if query else PATH
        comm = WebsocketCommunicator(application, path, headers=all_headers)
        opened.append(comm)
        connected, _ = await comm.connect(timeout=WAIT_S)
        return connected, Socket(comm)

    yield open_socket
    for comm in opened:
        # A receive that timed out has already cancelled the application.
        if not comm.future.cancelled():
            await comm.disconnect(timeout=WAIT_S)


@pytest.fixture
def session(ws):
    """Open an authenticated socket and say hello: ``await session(token, ...)``."""

    async def start(token: str, **hello: Any) -> tuple[Socket, dict[str, Any]]:
        connected, sock = await ws(token)
        assert connected
        return sock, await sock.hello(**hello)

    return start


@pytest.fixture
def write():
    """Run a cache service, then fan the new events out on node-1."""

    async def run(service: Any, **kwargs: Any) -> Any:
        result = await database_sync_to_async(service)(**kwargs)
        await database_sync_to_async(fanout.fanout_node)("node-1")
        return result

    return run


def recorder(monkeypatch: Any, name: str) -> list[tuple[Any, ...]]:
    """Replace ``clients.tasks.<name>`` with one that records its arguments."""
    calls: list[tuple[Any, ...]] = []
    monkeypatch.setattr(tasks, name, lambda *args: calls.append(args))
    return calls


@pytest.fixture
def adopted(monkeypatch):
    """The ``adopt`` tasks sent (to their node), recorded instead."""
    return recorder(monkeypatch, "adopt_on")


@pytest.fixture
def dropped(monkeypatch):
    """The ``drop_queue`` tasks sent, recorded instead."""
    return recorder(monkeypatch, "drop_queue_on")
