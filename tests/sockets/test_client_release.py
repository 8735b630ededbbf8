"""A socket releases its client however it ends: a handler that raised, an
instance killed in its disconnect or its hello, a release that failed."""

import asyncio
import threading

import pytest
from channels.db import database_sync_to_async as db
from channels.testing import WebsocketCommunicator

from clients import services
from clients.models import ClientHistory, DurableClient
from durablecache.asgi import application
from sockets import wakeups
from tests.helpers import hello

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "node"])
PATH = "/ws/v1/subscribe"


async def test_a_crashed_handler_does_not_leave_the_id_connected(
    token, region, monkeypatch, session
):
    def broken(**kwargs):
        raise RuntimeError("database went away")

    headers = [(b"authorization", f"Token {token}".encode())]
    comm = WebsocketCommunicator(application, PATH, headers=headers)
    connected, _ = await comm.connect(timeout=10)
    assert connected
    await comm.send_json_to({"type": "hello", "durable_id": "fragile"})
    assert (await comm.receive_json_from(timeout=10))["type"] == "welcome"
    monkeypatch.setattr("clients.services.interests.interest_register", broken)
    await comm.send_json_to(
        {"type": "register_interest", "region": "prices", "all_keys": True}
    )
    with pytest.raises(RuntimeError):
        await asyncio.wait_for(comm.future, timeout=10)
    monkeypatch.undo()
    # The durable id is free again: a new socket is welcomed, not 4409.
    _sock, welcome = await session(token, durable_id="fragile")
    assert welcome["type"] == "welcome"
    assert welcome["pending_events"] == 0


# Daphne cancels an application instance still running
# --application-close-timeout after its socket closed, and again every second
# until it ends: in a storm of disconnects, behind a busy database thread.
WAIT_S = 10


async def _until(predicate, what):
    """Wait, bounded, for an async ``predicate`` to hold."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_S
    while not await predicate():
        assert loop.time() < deadline, f"still not {what} after {WAIT_S}s"
        await asyncio.sleep(0.02)


def _is_connected(durable_id):
    return DurableClient.objects.get(durable_id=durable_id).is_connected


async def _kill(comm):
    """What Daphne does to an instance that took too long to end."""
    comm.future.cancel()
    await asyncio.wait([comm.future], timeout=WAIT_S)
    assert comm.future.done()


async def test_a_killed_disconnect_still_releases_the_client(token, region, session):
    sock, _ = await session(token, durable_id="storm", timeout=600)
    await sock.ready()
    consumer = next(s for s in wakeups.hub.open if s.client is not None)
    gate = threading.Event()
    busy = asyncio.ensure_future(db(gate.wait)(WAIT_S))  # the storm's queue
    await sock.comm.send_input({"type": "websocket.disconnect", "code": 1006})

    async def releasing():
        return consumer.has_ended and consumer.client is None

    await _until(releasing, "waiting for its release")
    await _kill(sock.comm)
    gate.set()
    await busy

    async def released():
        return not await db(_is_connected)("storm")

    await _until(released, "released")
    _sock, welcome = await session(token, durable_id="storm")
    assert welcome["type"] == "welcome"


async def test_a_hello_killed_in_flight_does_not_leave_the_id_connected(
    token, region, session, ws, monkeypatch
):
    started, gate = threading.Event(), threading.Event()
    real_hello = services.client_hello

    def slow_hello(**kwargs):
        result = real_hello(**kwargs)
        started.set()
        gate.wait(WAIT_S)  # committed; the socket dies before it hears so
        return result

    monkeypatch.setattr(services, "client_hello", slow_hello)
    connected, sock = await ws(token)
    assert connected
    await sock.send(type="hello", durable_id="late", timeout=600)

    async def hello_committed():
        return started.is_set()

    await _until(hello_committed, "committed")
    await sock.comm.send_input({"type": "websocket.disconnect", "code": 1006})
    await _kill(sock.comm)
    gate.set()
    monkeypatch.undo()

    async def released():
        return not await db(_is_connected)("late")

    await _until(released, "released")
    _sock, welcome = await session(token, durable_id="late")
    assert welcome["type"] == "welcome"


async def test_the_reconcile_releases_only_clients_of_sockets_this_process_lost(
    token, user, region, session
):
    # A socket whose release failed (the database away as it ended), one
    # still open here, and one of another process of the cluster.
    await db(hello)(user, "lost", wakeups.hub.new_socket_id())
    _sock, _ = await session(token, durable_id="open")
    await db(hello)(user, "elsewhere", "node-2!0123456789ab.0f")

    assert await wakeups.hub.reconcile() == 1

    assert not await db(_is_connected)("lost")
    assert await db(_is_connected)("open")
    assert await db(_is_connected)("elsewhere")
    last = await db(
        lambda: (
            ClientHistory.objects.filter(durable_id="lost")
            .order_by("-id")
            .values_list("kind", "detail")
            .first()
        )
    )()
    assert last == ("disconnected", "its socket ended unreleased")
    _sock, welcome = await session(token, durable_id="lost")
    assert welcome["type"] == "welcome"
    assert await wakeups.hub.reconcile() == 0
