"""A socket whose handler fails unexpectedly still releases its client."""

import asyncio

import pytest
from channels.testing import WebsocketCommunicator

from clients import services
from durablecache.asgi import application

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
    monkeypatch.setattr(services, "interest_register", broken)
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
