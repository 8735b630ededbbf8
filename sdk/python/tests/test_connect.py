"""Connecting: hello/welcome, the token header, redirects, refused sockets."""

import asyncio
from http import HTTPStatus

import pytest
from websockets.asyncio.server import serve

from durablecache_client import ConnectFailedError, FatalConnectionError, Welcome

pytestmark = pytest.mark.asyncio


async def test_max_queued_goes_in_the_hello_only_when_given(fake_server, make_client):
    _, conn = await fake_server.connect(make_client(durable_id="a", max_queued=500))
    assert conn.hello["max_queued"] == 500
    _, conn = await fake_server.connect(make_client(durable_id="b"))
    assert "max_queued" not in conn.hello  # the server's default
    with pytest.raises(ValueError, match="max_queued"):
        make_client(durable_id="c", max_queued=0)


async def test_connect_sends_hello_with_token_header_and_returns_welcome(
    fake_server, make_client
):
    client = make_client(
        durable_id="app-1", timeout=60, redundancy=1, conflate=True, token="s3cret"
    )

    welcome, conn = await fake_server.connect(
        client,
        node="node-2",
        primary="node-2",
        secondaries=["node-3"],
        pending_events=7,
        redundancy_satisfied=False,
    )

    assert conn.headers["Authorization"] == "Token s3cret"
    assert "Origin" not in conn.headers  # no Origin header is always accepted
    assert conn.hello == {
        "type": "hello",
        "durable_id": "app-1",
        "timeout": 60,
        "redundancy": 1,
        "conflate": "true",
    }
    assert isinstance(welcome, Welcome)
    assert welcome.durable_id == "app-1"
    assert welcome.node == "node-2"
    assert welcome.primary == "node-2"
    assert welcome.secondaries == ["node-3"]
    assert welcome.pending_event_count == 7
    assert welcome.redundancy_satisfied is False
    assert welcome.url == fake_server.url
    assert client.connected


async def test_non_durable_client_says_durable_id_null(fake_server, make_client):
    welcome, conn = await fake_server.connect(make_client())

    assert conn.hello["durable_id"] is None
    assert conn.hello["conflate"] == "server"
    assert welcome.pending_event_count == -2


async def test_connect_follows_redirect_with_same_token_and_hello(
    fake_server, server_factory, make_client
):
    primary = await server_factory()
    client = make_client(durable_id="app-1")

    task = asyncio.create_task(client.connect())
    first = await fake_server.accept()
    await first.recv("hello")
    await first.send({"type": "redirect", "url": primary.url})
    second = await primary.accept()
    await second.welcome(node="node-2")
    welcome = await asyncio.wait_for(task, 5)

    assert welcome.node == "node-2"
    assert welcome.url == primary.url
    assert second.headers["Authorization"] == "Token tok-1"
    assert second.hello["durable_id"] == "app-1"
    # The redirecting socket is not kept open.
    await asyncio.wait_for(first.closed.wait(), 5)


async def test_connect_tries_the_next_url_when_a_node_is_down(
    fake_server, server_factory, make_client
):
    dead = await server_factory()
    dead_url = dead.url
    await dead.stop()
    client = make_client([dead_url, fake_server.url])

    welcome, _ = await fake_server.connect(client)

    assert welcome.url == fake_server.url


async def test_invalid_token_close_4401_is_fatal(fake_server, make_client):
    client = make_client()

    task = asyncio.create_task(client.connect())
    conn = await fake_server.accept()
    await conn.recv("hello")
    await conn.close(4401, "invalid token")

    with pytest.raises(FatalConnectionError) as info:
        await asyncio.wait_for(task, 5)
    assert info.value.close_code == 4401
    assert client.closed
    # No second attempt: the supervisor has stopped for good.
    with pytest.raises(FatalConnectionError):
        await asyncio.wait_for(client.wait_closed(), 5)
    assert fake_server.accepted.empty()


async def test_already_connected_4409_is_retried_until_welcome(
    fake_server, make_client
):
    client = make_client(durable_id="app-1")

    task = asyncio.create_task(client.connect())
    for _ in range(2):
        conn = await fake_server.accept()
        await conn.recv("hello")
        await conn.close(4409, "already connected")
    conn = await fake_server.accept()
    await conn.welcome()

    welcome = await asyncio.wait_for(task, 5)
    assert welcome.durable_id == "app-1"


async def test_already_connected_4409_gives_up_after_conflict_retries(
    fake_server, make_client
):
    client = make_client(durable_id="app-1", conflict_retries=1)

    task = asyncio.create_task(client.connect())
    for _ in range(2):
        conn = await fake_server.accept()
        await conn.recv("hello")
        await conn.close(4409, "already connected")

    with pytest.raises(FatalConnectionError) as info:
        await asyncio.wait_for(task, 5)
    assert info.value.close_code == 4409


async def test_4409_is_retried_every_conflict_delay_not_the_growing_backoff(
    fake_server, make_client, monkeypatch
):
    # A crashed node's socket still counts as connected until the server
    # takes the node for dead: retry at a steady pace, not with a backoff
    # that would grow past that moment.
    from durablecache_client import _connection as client_module

    monkeypatch.setattr(client_module, "backoff_delay", lambda *args: 5.0)
    slept: list[float] = []
    real_sleep = asyncio.sleep

    async def sleep(delay: float, *args: object) -> None:
        slept.append(delay)
        await real_sleep(0)

    monkeypatch.setattr(client_module.asyncio, "sleep", sleep)
    client = make_client(durable_id="app-1", conflict_delay=0.25)

    task = asyncio.create_task(client.connect())
    for _ in range(3):
        conn = await fake_server.accept()
        await conn.recv("hello")
        await conn.close(4409, "already connected")
    conn = await fake_server.accept()
    await conn.welcome()

    await asyncio.wait_for(task, 5)
    assert slept.count(0.25) == 3
    assert 5.0 not in slept


async def test_connect_gives_up_after_connect_timeout(server_factory, make_client):
    dead = await server_factory()
    dead_url = dead.url
    await dead.stop()
    client = make_client(dead_url, connect_timeout=0.1)

    with pytest.raises(ConnectFailedError):
        await asyncio.wait_for(client.connect(), 5)


@pytest.mark.parametrize(("status", "fatal"), [(401, True), (503, False)])
async def test_refused_handshake_is_fatal_only_for_bad_credentials(
    make_client, status, fatal
):
    def refuse(connection, request):
        return connection.respond(HTTPStatus(status), "refused\n")

    async with serve(
        lambda ws: ws.wait_closed(), "127.0.0.1", 0, process_request=refuse
    ) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        client = make_client(
            f"ws://127.0.0.1:{port}/ws/v1/subscribe", connect_timeout=0.1
        )

        with pytest.raises(
            FatalConnectionError if fatal else ConnectFailedError
        ) as info:
            await asyncio.wait_for(client.connect(), 5)

    if fatal:
        assert info.value.close_code == status
