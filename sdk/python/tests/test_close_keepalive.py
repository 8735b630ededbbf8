"""close(): what reaches the listener is acked, and nothing reaches it after
the final ack (found by a review of the client library; the test failed
before ``Session.final_ack_sent``)."""

import asyncio

import pytest
from conftest import WAIT, register_answered

pytestmark = pytest.mark.asyncio


async def round_trips(conn, n=3):
    """Let the client's loop turn: n ping/pong round trips (bounded)."""
    for _ in range(n):
        await asyncio.wait_for(await conn.ws.ping(), WAIT)


async def test_an_event_arriving_after_close_s_final_ack_is_not_handed_over(
    fake_server, make_client, recorder
):
    """Contract (docs/protocol.md, "close"; sdk README "Acks", "Close"): the library
    acks what it handed to the listener, and "close() first lets already
    received events reach the listener, then sends a final ack"; with
    ``keepalive=True`` the server keeps the unacked events and replays
    them on the next connection -- so an event the application's listener
    has handled must be acked, or it reaches the application twice.

    Sequence: ``close(keepalive=True)`` drains the dispatch queue, sends its
    final ack (``up_to`` 1) and then ``close``. An event the server sent
    before it read ``close`` (e2, seq 2) arrives while ``close()`` waits for
    ``closed``: the dispatcher still hands it to the listener
    (``AsyncDurableClient._dispatch_loop`` runs until ``_stop_tasks``), but
    no ack follows (the server handles nothing after ``close``). The kept
    queue replays e2 to the application's next client, whose id tracking
    is new: the listener gets e2 twice.
    """
    client = make_client(durable_id="app-1", ack_interval=60)
    _, conn = await fake_server.connect(client)
    conn.auto_close = False
    region = client.region("r", recorder)
    await register_answered(conn, region.register_all_keys(durable=True))
    await client.ready_for_events()
    await conn.recv("ready")
    await conn.marker(0, ["r"])
    await conn.event("e1", 1, "a", "create", 1, 1)
    await recorder.wait_calls(2)  # after_region_live, after_create e1

    closing = asyncio.create_task(client.close(keepalive=True))
    close = await conn.recv("close")
    assert close["keepalive"] is True
    # Sent by the server before it read `close` (already on the wire).
    await conn.event("e2", 2, "a", "update", 2, 2)
    await round_trips(conn)
    await conn.send({"type": "closed", "id": close["id"], "keepalive": True})
    await conn.ws.close(1000)
    await asyncio.wait_for(closing, WAIT)
    acked = max(conn.ack_log, default=0)

    # The application starts its client again: the kept queue replays
    # every event the first session did not ack.
    again = make_client(durable_id="app-1", ack_interval=60)
    _, conn2 = await fake_server.connect(again, pending_events=2 - acked)
    region2 = again.region("r", recorder)
    await register_answered(conn2, region2.register_all_keys(durable=True))
    await again.ready_for_events()
    await conn2.recv("ready")
    unacked = [("e1", 1, "create", 1), ("e2", 2, "update", 2)][acked:]
    for event_id, seq, op, version in unacked:
        await conn2.event(event_id, seq, "a", op, version, version, replay=True)
    await conn2.marker(len(unacked), ["r"])
    await again.wait_for_marker(WAIT)

    handled = [e.id for name, e in recorder.calls if name != "after_region_live"]
    assert handled == ["e1", "e2"], (
        f"the application's listener handled {handled}; acks sent on the "
        f"first socket: {conn.ack_log}"
    )
