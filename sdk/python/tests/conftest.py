"""Fixtures for the client library tests: a scripted in-process server.

Nothing here touches Django, so the tests run with or without pytest-django
(`-p no:django` or with DJANGO_SETTINGS_MODULE set). There is no
`__init__.py` in this directory on purpose: it keeps these modules out of the
project's own `tests` package namespace.

The fake server (`websockets.serve` on 127.0.0.1, port 0) records every frame
the client sends; each test scripts the replies. Every wait is bounded by
WAIT seconds; nothing sleeps to synchronise.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed

SDK_ROOT = Path(__file__).resolve().parents[1]
if str(SDK_ROOT) not in sys.path:  # the package need not be pip-installed
    sys.path.insert(0, str(SDK_ROOT))

from durablecache_client import (  # noqa: E402
    AsyncDurableClient,
    CacheListener,
    CqListener,
)

WAIT = 5.0


class FakeConnection:
    """The server side of one client socket."""

    def __init__(self, ws: ServerConnection) -> None:
        self.ws = ws
        self.frames: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.acks: asyncio.Queue[int] = asyncio.Queue()
        self.ack_log: list[int] = []
        self.hello: dict[str, Any] | None = None
        self.closed = asyncio.Event()
        self.auto_close = True

    @property
    def headers(self) -> Any:
        """The HTTP headers of the client's handshake."""
        return self.ws.request.headers

    async def recv(self, kind: str | None = None) -> dict[str, Any]:
        """Return the next non-ack frame, checking its type if given."""
        frame = await asyncio.wait_for(self.frames.get(), WAIT)
        if kind is not None:
            assert frame["type"] == kind, frame
        return frame

    async def next_ack(self) -> int:
        """Return the `up_to` of the next ack frame."""
        return await asyncio.wait_for(self.acks.get(), WAIT)

    async def wait_ack(self, up_to: int) -> None:
        """Wait until an ack with exactly `up_to` arrives."""
        while await self.next_ack() != up_to:
            pass

    async def send(self, frame: dict[str, Any]) -> None:
        """Send one frame as JSON text."""
        await self.ws.send(json.dumps(frame))

    async def welcome(self, **fields: Any) -> dict[str, Any]:
        """Read `hello` and answer `welcome` (fields override the defaults)."""
        self.hello = await self.recv("hello")
        frame = {
            "type": "welcome",
            "durable_id": self.hello.get("durable_id"),
            "node": "node-1",
            "primary": "node-1",
            "secondaries": [],
            "pending_events": -2,
            "redundancy_satisfied": True,
            **fields,
        }
        await self.send(frame)
        return self.hello

    async def answer_register(
        self,
        request: dict[str, Any],
        entries: list[tuple[str, Any, int]] | None = None,
        keys: list[str] | None = None,
        chunk: int = 500,
    ) -> None:
        """Send image chunks for `request`, then its *_registered reply."""
        items: list[Any]
        if keys is not None:
            items, field = list(keys), "keys"
        else:
            items = [{"key": k, "value": v, "version": n} for k, v, n in entries or []]
            field = "entries"
        cq = {"cq": request["name"]} if request["type"] == "register_cq" else {}
        for start in range(0, len(items), chunk):
            await self.send(
                {
                    "type": "image",
                    "id": request["id"],
                    "region": request["region"],
                    **cq,
                    field: items[start : start + chunk],
                }
            )
        if request["type"] == "register_cq":
            reply = {"type": "cq_registered", "name": request["name"]}
        else:
            reply = {"type": "interest_registered"}
        await self.send({**reply, "id": request["id"], "count": len(items)})

    async def event(
        self,
        event_id: str,
        seq: int,
        key: str | None,
        op: str = "update",
        value: Any = None,
        version: int | None = 1,
        *,
        replay: bool = False,
        region: str = "r",
        cq: list[dict[str, Any]] | None = None,
    ) -> None:
        """Send one `event` frame."""
        frame = {
            "type": "event",
            "id": event_id,
            "seq": seq,
            "region": region,
            "key": key,
            "op": op,
            "value": value,
            "version": version,
            "ts": "2025-01-01T00:00:00Z",
            "replay": replay,
        }
        if cq is not None:
            frame["cq"] = cq
        await self.send(frame)

    async def marker(self, replayed: int, regions: list[str]) -> None:
        """Send the replay `marker`."""
        await self.send({"type": "marker", "replayed": replayed, "regions": regions})

    async def drop(self) -> None:
        """Cut the TCP connection without a close frame (client sees 1006)."""
        self.ws.transport.abort()
        await asyncio.wait_for(self.closed.wait(), WAIT)

    async def close(self, code: int, reason: str = "") -> None:
        """Close the socket with `code`."""
        await self.ws.close(code, reason)
        await asyncio.wait_for(self.closed.wait(), WAIT)


class FakeServer:
    """A websocket server whose connections the test scripts."""

    def __init__(self) -> None:
        self.accepted: asyncio.Queue[FakeConnection] = asyncio.Queue()
        self.connections: list[FakeConnection] = []
        self.url = ""
        self._server: Server | None = None

    async def start(self) -> None:
        """Listen on 127.0.0.1, on a free port."""
        self._server = await serve(self._handler, "127.0.0.1", 0)
        port = next(iter(self._server.sockets)).getsockname()[1]
        self.url = f"ws://127.0.0.1:{port}/ws/v1/subscribe"

    async def stop(self) -> None:
        """Stop listening and close every connection."""
        if self._server is not None:
            self._server.close()
            await asyncio.wait_for(self._server.wait_closed(), WAIT)
            self._server = None

    async def accept(self) -> FakeConnection:
        """Return the next connection the client opens."""
        return await asyncio.wait_for(self.accepted.get(), WAIT)

    async def connect(
        self, client: AsyncDurableClient, **welcome: Any
    ) -> tuple[Any, FakeConnection]:
        """Connect `client` and answer its hello; return (welcome, conn)."""
        task = asyncio.create_task(client.connect())
        conn = await self.accept()
        await conn.welcome(**welcome)
        return await asyncio.wait_for(task, WAIT), conn

    async def _handler(self, ws: ServerConnection) -> None:
        conn = FakeConnection(ws)
        self.connections.append(conn)
        self.accepted.put_nowait(conn)
        try:
            async for raw in ws:
                frame = json.loads(raw)
                if frame.get("type") == "ack":
                    conn.ack_log.append(frame["up_to"])
                    conn.acks.put_nowait(frame["up_to"])
                    continue
                conn.frames.put_nowait(frame)
                if frame.get("type") == "close" and conn.auto_close:
                    keepalive = frame.get("keepalive")
                    reply = {"type": "closed", "id": frame.get("id")}
                    await ws.send(json.dumps({**reply, "keepalive": keepalive}))
                    await ws.close(1000)
        except ConnectionClosed:
            pass
        finally:
            conn.closed.set()


class Recorder(CacheListener):
    """A listener that records calls; waitable from any thread's loop."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self._lock = threading.Lock()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, int, Any]] = []

    def _record(self, name: str, event: Any) -> None:
        with self._lock:
            self.calls.append((name, event))
            count = len(self.calls)
            ready = [w for w in self._waiters if count >= w[1]]
        for loop, _, future in ready:
            loop.call_soon_threadsafe(_resolve, future)

    async def wait_calls(self, count: int) -> list[tuple[str, Any]]:
        """Wait until at least `count` calls were recorded; return them."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        with self._lock:
            if len(self.calls) >= count:
                return list(self.calls)
            self._waiters.append((loop, count, future))
        await asyncio.wait_for(future, WAIT)
        return list(self.calls)

    def names(self) -> list[str]:
        """Return the recorded method names."""
        return [name for name, _ in self.calls]

    def after_create(self, event: Any) -> None:
        self._record("after_create", event)

    def after_update(self, event: Any) -> None:
        self._record("after_update", event)

    def after_destroy(self, event: Any) -> None:
        self._record("after_destroy", event)

    def after_invalidate(self, event: Any) -> None:
        self._record("after_invalidate", event)

    def after_region_clear(self, event: Any) -> None:
        self._record("after_region_clear", event)

    def after_region_destroy(self, event: Any) -> None:
        self._record("after_region_destroy", event)

    def after_region_live(self, event: Any) -> None:
        self._record("after_region_live", event)


class CqRecorder(CqListener):
    """Records on_event / on_error / on_close; waitable."""

    def __init__(self) -> None:
        self.calls = []
        self._lock = threading.Lock()
        self._changed = None

    def _record(self, name, arg):
        with self._lock:
            self.calls.append((name, arg))
        if self._changed is not None:
            self._changed.set()

    async def wait_calls(self, count):
        self._changed = self._changed or asyncio.Event()
        async with asyncio.timeout(WAIT):
            while len(self.calls) < count:
                self._changed.clear()
                await self._changed.wait()
        return list(self.calls)

    def events(self):
        return [arg for name, arg in self.calls if name == "on_event"]

    def on_event(self, event):
        self._record("on_event", event)

    def on_error(self, error):
        self._record("on_error", error)

    def on_close(self):
        self._record("on_close", None)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


async def run_with(coro: Awaitable[Any], script: Callable[[], Awaitable[Any]]) -> Any:
    """Run a client call while `script` plays the server side; return its result."""
    task = asyncio.ensure_future(coro)
    try:
        await script()
        return await asyncio.wait_for(task, WAIT)
    finally:
        if not task.done():
            task.cancel()


async def register_answered(
    conn: FakeConnection, coro: Awaitable[Any], entries: Any = ()
) -> Any:
    """Run a client's register call while the server answers it with
    `entries`; return the call's result."""

    async def script() -> None:
        request = await conn.recv()
        await conn.answer_register(request, list(entries))

    return await run_with(coro, script)


@pytest_asyncio.fixture
async def server_factory() -> AsyncIterator[Callable[[], Awaitable[FakeServer]]]:
    """Start extra fake servers (nodes); all stop at teardown."""
    servers: list[FakeServer] = []

    async def start() -> FakeServer:
        server = FakeServer()
        await server.start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        await server.stop()


@pytest_asyncio.fixture
async def fake_server(
    server_factory: Callable[[], Awaitable[FakeServer]],
) -> FakeServer:
    """One fake node."""
    return await server_factory()


@pytest_asyncio.fixture
async def make_client(
    fake_server: FakeServer,
) -> AsyncIterator[Callable[..., AsyncDurableClient]]:
    """Build AsyncDurableClients with fast timers; closed at teardown."""
    clients: list[AsyncDurableClient] = []

    def build(urls: Any = None, **options: Any) -> AsyncDurableClient:
        options.setdefault("token", "tok-1")
        options.setdefault("ack_interval", 0.02)
        options.setdefault("reconnect_initial_delay", 0.01)
        options.setdefault("reconnect_max_delay", 0.05)
        options.setdefault("request_timeout", WAIT)
        options.setdefault("close_timeout", 1.0)
        client = AsyncDurableClient(urls or fake_server.url, **options)
        clients.append(client)
        return client

    yield build
    for client in clients:
        await client.close()


@pytest.fixture
def recorder() -> Recorder:
    """A recording CacheListener."""
    return Recorder()


@pytest.fixture
def run() -> Callable[..., Awaitable[Any]]:
    """`await run(client_call, server_script)` (see run_with)."""
    return run_with
