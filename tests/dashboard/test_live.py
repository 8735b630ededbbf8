"""``/ws/v1/dashboard``: live updates for the operators' pages, through the
real ASGI application and the in-memory channel layer.

The services record history and, after commit, call ``notify.dashboard``,
which hands the update to a background thread (``notify._Feed``). That
thread sends on an event loop of its own, and the in-memory layer's queues
are not thread-safe: the consumer's loop is not woken and the update may
wait for some other activity (seen as missed updates in about one run in
four). So the socket tests deliver ``notify.dashboard`` from the calling
thread (a ``database_sync_to_async`` worker, which asgiref hands back to the
test's loop safely): history -> group message -> consumer -> frame, as in
production. The feed thread is tested on its own, with ``aring`` recorded.
Every wait is a bounded receive.
"""

import queue
import threading
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async as db
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model
from django.test import Client as DjangoClient
from django.utils import timezone

from clients import services
from clients.models import ClientHistory, DurableClient, LostQueue
from dashboard.consumers import CLOSE_FORBIDDEN
from durablecache.asgi import application
from queues import notify

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "node"])

HERE = "node-1"
WAIT_S = 3  # upper bound of every wait; a passing test never reaches it


@pytest.fixture(autouse=True)
def deliver_on_the_callers_loop(monkeypatch):
    """``notify.dashboard`` sends from the committing thread (see above)."""

    def dashboard(update):
        message = {"type": "dashboard.update", "update": update}
        async_to_sync(notify.aring)(notify.DASHBOARD_GROUP, message)

    monkeypatch.setattr(notify, "dashboard", dashboard)


def _session_id(user):
    browser = DjangoClient()
    browser.force_login(user)
    return browser.cookies["sessionid"].value


@pytest.fixture
async def sockets():
    """Open websockets; every one is disconnected at teardown."""
    opened = []

    async def open_socket(path, headers=()):
        comm = WebsocketCommunicator(application, path, headers=list(headers))
        opened.append(comm)
        connected, _ = await comm.connect(timeout=WAIT_S)
        return connected, comm

    yield open_socket
    for comm in opened:
        # A receive that timed out has already cancelled the application.
        if not comm.future.cancelled() and not comm.future.done():
            await comm.disconnect(timeout=WAIT_S)


@pytest.fixture
def dashboard(sockets):
    """``await dashboard(user)``: a dashboard socket with ``user``'s session."""

    async def open_for(user=None, cookie=None):
        headers = []
        if user is not None:
            cookie = f"sessionid={await db(_session_id)(user)}"
        if cookie is not None:
            headers.append((b"cookie", cookie.encode()))
        return await sockets("/ws/v1/dashboard", headers)

    return open_for


@pytest.fixture
def subscriber(sockets):
    """``await subscriber(token, **hello)``: a subscribe socket after its welcome."""

    async def open_for(token, **hello):
        auth = [(b"authorization", f"Token {token}".encode())]
        connected, comm = await sockets("/ws/v1/subscribe", auth)
        assert connected
        await comm.send_json_to({"type": "hello", **hello})
        welcome = await comm.receive_json_from(timeout=WAIT_S)
        assert welcome["type"] == "welcome", welcome
        return comm, welcome

    return open_for


async def update(comm):
    return await comm.receive_json_from(timeout=WAIT_S)


async def closed_with(comm, code):
    out = await comm.receive_output(timeout=WAIT_S)
    assert out["type"] == "websocket.close", out
    assert out.get("code") == code, out


def _client(durable_id):
    return DurableClient.objects.filter(durable_id=durable_id).first()


def listeners():
    """Channels in the in-memory layer's dashboard group."""
    return set(get_channel_layer().groups.get(notify.DASHBOARD_GROUP, {}))


# --- who may listen -----------------------------------------------------------


async def test_operator_session_follows_a_client_from_hello_to_delete(
    dashboard, subscriber, operator, token
):
    connected, dash = await dashboard(operator)
    assert connected
    sub, welcome = await subscriber(token, durable_id="live-1", timeout=120)
    assert welcome["durable_id"] == "live-1"

    assert await update(dash) == {
        "kind": "client",
        "event": "connected",
        "durable_id": "live-1",
        "state": "connected",
        "node": HERE,
        "primary": HERE,
        "secondaries": [],
        "expires_at": None,
    }

    await sub.send_json_to({"type": "close", "keepalive": True})
    assert (await sub.receive_json_from(timeout=WAIT_S))["type"] == "closed"
    await closed_with(sub, 1000)
    gone = await update(dash)
    client = await db(_client)("live-1")
    assert not client.is_connected
    assert client.expires_at - client.disconnected_at == timedelta(seconds=120)
    assert gone == {
        "kind": "client",
        "event": "disconnected",
        "durable_id": "live-1",
        "state": "disconnected",
        "node": HERE,
        "primary": HERE,
        "secondaries": [],
        "expires_at": client.expires_at.isoformat(),
    }

    await db(services.client_delete)(user=operator, durable_id="live-1")
    deleted = await update(dash)
    assert (deleted["event"], deleted["durable_id"], deleted["state"]) == (
        "deleted",
        "live-1",
        "gone",
    )
    assert await db(_client)("live-1") is None
    assert not await db(LostQueue.objects.exists)()
    kinds = await db(
        lambda: list(
            ClientHistory.objects.filter(durable_id="live-1")
            .order_by("id")
            .values_list("kind", flat=True)
        )
    )()
    assert kinds == ["connected", "disconnected", "deleted"]
    # Updates are sent in commit order: the next one seen is the new
    # hello's, so nothing else (a duplicate) was sent in between.
    await subscriber(token, durable_id="live-1")
    again = await update(dash)
    assert (again["event"], again["durable_id"]) == ("connected", "live-1")


async def test_a_dropped_socket_and_an_expiry_are_told(
    dashboard, subscriber, operator, token
):
    _, dash = await dashboard(operator)
    sub, _ = await subscriber(token, durable_id="live-2", timeout=30)
    assert (await update(dash))["event"] == "connected"
    await sub.disconnect(code=1006, timeout=WAIT_S)  # no close frame
    dropped = await update(dash)
    assert (dropped["event"], dropped["state"]) == ("disconnected", "disconnected")
    assert dropped["expires_at"] is not None

    await db(
        lambda: DurableClient.objects.filter(durable_id="live-2").update(
            expires_at=timezone.now() - timedelta(seconds=1)
        )
    )()
    assert await db(services.clients_expire)() == 1
    expired = await update(dash)
    assert (expired["event"], expired["durable_id"], expired["state"]) == (
        "expired",
        "live-2",
        "expired",
    )


async def test_closing_without_keepalive_is_told_as_closed(
    dashboard, subscriber, operator, token
):
    _, dash = await dashboard(operator)
    sub, _ = await subscriber(token, durable_id="live-3")
    assert (await update(dash))["event"] == "connected"
    await sub.send_json_to({"type": "close", "keepalive": False})
    assert (await sub.receive_json_from(timeout=WAIT_S))["keepalive"] is False
    closed = await update(dash)
    assert (closed["event"], closed["durable_id"], closed["state"]) == (
        "closed",
        "live-3",
        "gone",
    )
    assert closed["expires_at"] is None


async def test_non_durable_clients_send_no_update(
    dashboard, subscriber, operator, token
):
    _, dash = await dashboard(operator)
    anonymous, welcome = await subscriber(token)
    assert welcome["durable_id"] is None
    await anonymous.send_json_to({"type": "close", "keepalive": False})
    assert (await anonymous.receive_json_from(timeout=WAIT_S))["type"] == "closed"
    await closed_with(anonymous, 1000)
    # Updates are sent in commit order: the first one seen is the durable
    # client's, so the non-durable one sent none.
    await subscriber(token, durable_id="live-4")
    first = await update(dash)
    assert (first["event"], first["durable_id"]) == ("connected", "live-4")


async def test_every_open_dashboard_gets_the_update(
    dashboard, subscriber, operator, token
):
    other_operator = await db(get_user_model().objects.create_user)(
        "oscar", password="pw-oscar-123", is_staff=True
    )
    _, first = await dashboard(operator)
    _, second = await dashboard(other_operator)
    await subscriber(token, durable_id="live-5")
    for dash in (first, second):
        got = await update(dash)
        assert (got["event"], got["durable_id"]) == ("connected", "live-5")


async def test_the_page_sends_nothing_that_matters(
    dashboard, subscriber, operator, token
):
    _, dash = await dashboard(operator)
    await dash.send_json_to({"type": "subscribe", "anything": True})
    await subscriber(token, durable_id="live-6")
    got = await update(dash)
    assert (got["event"], got["durable_id"]) == ("connected", "live-6")


async def test_a_plain_users_session_is_closed_4403(dashboard, subscriber, user, token):
    connected, dash = await dashboard(user)
    assert connected  # accepted, then closed so a browser can read the code
    await closed_with(dash, CLOSE_FORBIDDEN)


async def test_an_anonymous_connection_is_closed_4403(dashboard):
    connected, dash = await dashboard()
    assert connected
    await closed_with(dash, CLOSE_FORBIDDEN)


async def test_a_bad_session_cookie_is_closed_4403(dashboard):
    connected, dash = await dashboard(cookie="sessionid=not-a-session")
    assert connected
    await closed_with(dash, CLOSE_FORBIDDEN)


async def test_an_inactive_operator_is_closed_4403(dashboard, operator):
    session = await db(_session_id)(operator)
    operator.is_active = False
    await db(operator.save)()
    connected, dash = await dashboard(cookie=f"sessionid={session}")
    assert connected
    await closed_with(dash, CLOSE_FORBIDDEN)


async def test_a_token_is_not_a_dashboard_login(sockets, operator_token):
    headers = [(b"authorization", f"Token {operator_token}".encode())]
    connected, dash = await sockets("/ws/v1/dashboard", headers)
    assert connected
    await closed_with(dash, CLOSE_FORBIDDEN)


async def test_only_operators_join_the_group_and_leave_it_on_disconnect(
    dashboard, operator, user
):
    assert listeners() == set()
    _, refused = await dashboard(user)
    await closed_with(refused, CLOSE_FORBIDDEN)
    _, anonymous = await dashboard()
    await closed_with(anonymous, CLOSE_FORBIDDEN)
    assert listeners() == set()
    _, dash = await dashboard(operator)
    # connect() accepts, then joins without yielding to this task.
    (joined,) = listeners()
    await dash.disconnect(timeout=WAIT_S)
    assert joined not in listeners()


async def test_a_foreign_origin_is_refused_at_the_handshake(
    dashboard, operator, sockets
):
    session = await db(_session_id)(operator)
    headers = [
        (b"cookie", f"sessionid={session}".encode()),
        (b"origin", b"https://evil.example"),
        (b"host", b"node.example"),
    ]
    connected, _ = await sockets("/ws/v1/dashboard", headers)
    assert connected is False


# --- the feed thread ----------------------------------------------------------


@pytest.fixture
def rung(monkeypatch):
    """Record what the feed thread sends, in a thread-safe queue; the
    recorder waits while ``rung.gate`` is closed."""
    sent = queue.Queue()
    sent.gate = threading.Event()
    sent.gate.set()
    sent.busy = threading.Event()

    async def aring(group, message):
        sent.busy.set()
        assert sent.gate.wait(WAIT_S)
        sent.put((group, message))

    monkeypatch.setattr(notify, "aring", aring)
    return sent


def test_the_feed_thread_sends_updates_in_order_to_the_dashboard_group(rung):
    feed = notify._Feed()
    for n in range(3):
        feed.put({"kind": "client", "event": "connected", "durable_id": f"d{n}"})
    got = [rung.get(timeout=WAIT_S) for _ in range(3)]
    assert got == [
        (
            "dashboard",
            {
                "type": "dashboard.update",
                "update": {
                    "kind": "client",
                    "event": "connected",
                    "durable_id": f"d{n}",
                },
            },
        )
        for n in range(3)
    ]
    assert feed.thread is not None
    assert feed.thread.daemon
    first = feed.thread
    feed.put({"kind": "client", "event": "deleted", "durable_id": "d0"})
    assert rung.get(timeout=WAIT_S)[1]["update"]["event"] == "deleted"
    assert feed.thread is first  # one thread, reused while alive


def test_the_feed_drops_updates_beyond_its_limit_without_blocking(rung):
    feed = notify._Feed()
    feed.pending = queue.Queue(2)  # LIMIT 2
    rung.gate.clear()
    feed.put({"n": 0})
    assert rung.busy.wait(WAIT_S)  # the thread holds n=0, waiting to send it
    for n in (1, 2, 3):  # 1 and 2 wait; 3 finds the queue full
        feed.put({"n": n})  # returns at once either way
    rung.gate.set()
    got = [rung.get(timeout=WAIT_S)[1]["update"]["n"] for _ in range(3)]
    assert got == [0, 1, 2]
    # The queue is drained now; the next update is sent, and it comes right
    # after 2: n=3 was dropped, not delayed.
    feed.put({"n": 4})
    assert rung.get(timeout=WAIT_S)[1]["update"]["n"] == 4
