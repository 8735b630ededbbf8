"""The websocket door, protocol v1 (docs/protocol.md), through the ASGI app."""

import pytest
from channels.db import database_sync_to_async as db
from channels.layers import get_channel_layer
from django.conf import settings
from django.test import Client

from cache import selectors as cache_selectors
from cache import services as cache_services
from cache.models import Event
from clients import fanout, services
from clients.models import DurableClient, Interest
from queues import notify
from queues import selectors as queue_selectors
from sockets import put_rounds
from tests.helpers import node_row

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "node"])


def _client(durable_id):
    return DurableClient.objects.filter(durable_id=durable_id).first()


def _queue_size(durable_id):
    return queue_selectors.queue_size(client_id=_client(durable_id).id)


def _interests(durable_id):
    return sorted(
        Interest.objects.filter(client__durable_id=durable_id).values_list(
            "selector", "is_durable"
        )
    )


# --- handshake: token and Origin ------------------------------------------


async def test_no_token_closes_4401(ws):
    connected, sock = await ws()
    assert connected  # closed after the handshake so the client reads the code
    await sock.closed_with(4401)


@pytest.mark.parametrize(
    "how", ["header", "query", "scheme"], ids=["header", "query", "bad-scheme"]
)
async def test_bad_token_closes_4401(ws, token, how):
    if how == "header":
        _, sock = await ws("not-a-token")
    elif how == "query":
        _, sock = await ws(query="token=not-a-token")
    else:
        _, sock = await ws(headers=[(b"authorization", f"Bearer {token}".encode())])
    await sock.closed_with(4401)


async def test_token_of_an_inactive_user_closes_4401(ws, user, token):
    user.is_active = False
    await db(user.save)()
    _, sock = await ws(token)
    await sock.closed_with(4401)


async def test_header_and_query_naming_different_users_close_4401(
    ws, token, other_token
):
    _, sock = await ws(token, query=f"token={other_token}")
    await sock.closed_with(4401)


async def test_header_and_query_naming_the_same_user_are_accepted(ws, token):
    _, sock = await ws(token, query=f"token={token}")
    assert (await sock.hello())["durable_id"] is None


async def test_query_token_is_accepted(ws, token):
    _, sock = await ws(query=f"token={token}")
    assert (await sock.hello())["type"] == "welcome"


async def test_foreign_origin_is_refused_at_the_handshake(ws, token):
    headers = [(b"origin", b"https://evil.example"), (b"host", b"node.example")]
    connected, _ = await ws(token, headers=headers)
    assert connected is False


@pytest.mark.parametrize(
    "origin", [b"http://node.example:8000", b"https://app.example"]
)
async def test_own_host_and_listed_origins_are_accepted(ws, token, settings, origin):
    settings.DURABLECACHE_ALLOWED_ORIGINS = ["https://app.example"]
    headers = [(b"origin", origin), (b"host", b"node.example:8000")]
    connected, sock = await ws(token, headers=headers)
    assert connected
    assert (await sock.hello())["type"] == "welcome"


async def test_no_origin_is_accepted(ws, token):
    connected, sock = await ws(token)
    assert connected
    assert (await sock.hello())["type"] == "welcome"


def _session_cookie(user):
    """A ``Cookie`` header carrying a dashboard session of ``user``."""
    browser = Client()
    browser.force_login(user)
    key = browser.cookies[settings.SESSION_COOKIE_NAME].value
    return (b"cookie", f"{settings.SESSION_COOKIE_NAME}={key}".encode())


SAME_ORIGIN = [
    (b"origin", b"http://node.example:8000"),
    (b"host", b"node.example:8000"),
]


async def test_operator_session_on_a_same_origin_handshake_is_accepted(ws, operator):
    cookie = await db(_session_cookie)(operator)
    _, sock = await ws(headers=[*SAME_ORIGIN, cookie])
    assert (await sock.hello())["type"] == "welcome"


async def test_session_of_a_plain_user_closes_4401(ws, user):
    cookie = await db(_session_cookie)(user)
    _, sock = await ws(headers=[*SAME_ORIGIN, cookie])
    await sock.closed_with(4401)


@pytest.mark.parametrize("origin", [None, b"https://app.example"])
async def test_operator_session_from_another_origin_closes_4401(
    ws, operator, settings, origin
):
    """A cookie goes with any page's request: only the node's own origin
    may use it, not one merely allowed for token clients."""
    settings.DURABLECACHE_ALLOWED_ORIGINS = ["https://app.example"]
    cookie = await db(_session_cookie)(operator)
    headers = [(b"host", b"node.example:8000"), cookie]
    if origin is not None:
        headers.append((b"origin", origin))
    connected, sock = await ws(headers=headers)
    assert connected
    await sock.closed_with(4401)


# --- bad frames -------------------------------------------------------------


@pytest.mark.parametrize(
    "frame",
    ['{"type": "ready"}', '{"type": "nope"}', "not json", "[1]"],
    ids=["ready", "unknown", "bad-json", "array"],
)
async def test_first_frame_not_hello_is_an_error_then_4400(ws, token, frame):
    _, sock = await ws(token)
    await sock.comm.send_to(text_data=frame)
    assert (await sock.recv())["type"] == "error"
    await sock.closed_with(4400)


@pytest.mark.parametrize(
    "fields",
    [
        {"durable_id": "no spaces"},
        {"durable_id": 7},
        {"timeout": "60"},
        {"timeout": -1},
        {"redundancy": -2},
        {"conflate": "maybe"},
    ],
)
async def test_bad_hello_is_a_bad_frame_and_a_good_hello_may_follow(ws, token, fields):
    _, sock = await ws(token)
    error = await sock.request(type="hello", id="h1", **fields)
    assert (error["type"], error["code"], error["id"]) == ("error", "bad_field", "h1")
    assert (await sock.hello(durable_id="d1"))["pending_events"] == -2


async def test_hello_with_a_bad_id_is_bad_field_and_not_fatal(ws, token):
    _, sock = await ws(token)
    error = await sock.request(type="hello", id=5)
    assert (error["code"], "id" in error) == ("bad_field", False)
    assert (await sock.hello())["type"] == "welcome"


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ('{"type": "ready", "x": ' + "[" * 300 + "]" * 300 + "}", "bad_field"),
        ("[" * 100_000, "bad_json"),
        (r'{"type": "ready", "x": "\ud800"}', "bad_field"),  # a lone surrogate
        (r'{"type": "ready", "x": "\u0000"}', "bad_field"),
        ('{"type": "ready", "x": NaN}', "bad_json"),
        ('{"type": "ready", "x": "\ud800"}', "bad_field"),  # a raw lone surrogate
        ('{"type": "ready", "x": [-1E999]}', "bad_field"),  # beyond a double
        (r'{"type": "ready", "k\u0000": 1}', "bad_field"),  # in a field name
        (r'{"type": "ready", "x": "\uDBFF"}', "bad_field"),  # upper-case escape
    ],
    ids=[
        "deep-value",
        "deeper-than-the-parser",
        "surrogate",
        "nul",
        "nan",
        "raw",
        "overflow",
        "nul-key",
        "upper-escape",
    ],
)
async def test_json_that_is_not_rfc_8259_or_not_storable_is_refused(
    session, token, text, code
):
    # Not JSON (or not an object): bad_json. JSON holding what storage
    # refuses: bad_field, naming the field (tests/clients/test_hostile_frames).
    sock, _ = await session(token)
    await sock.comm.send_to(text_data=text)
    assert (await sock.recv())["code"] == code
    marker, _ = await sock.ready()  # the socket stays open, nothing changed
    assert marker["replayed"] == 0


async def test_binary_frame_is_bad_json_and_the_socket_stays_open(session, token):
    sock, _ = await session(token)
    await sock.comm.send_to(bytes_data=b'{"type": "ready"}')
    assert (await sock.recv())["code"] == "bad_json"
    marker, _ = await sock.ready()
    assert marker["replayed"] == 0


async def test_frame_over_the_byte_limit_closes_4413(session, token, settings):
    settings.DURABLECACHE_MAX_FRAME_BYTES = 2048
    sock, _ = await session(token)
    # 1000 characters but 3000 bytes: the limit counts UTF-8 bytes.
    await sock.send(type="unknown", pad="€" * 1000)
    await sock.closed_with(4413)


async def test_frame_under_the_byte_limit_is_handled(session, token, settings):
    settings.DURABLECACHE_MAX_FRAME_BYTES = 2048
    sock, _ = await session(token)
    reply = await sock.request(type="unknown", pad="x" * 1900)
    assert reply["code"] == "unknown_type"


async def test_tenth_bad_frame_in_a_row_closes_4400(session, token, region):
    sock, _ = await session(token)
    for _ in range(9):
        assert (await sock.request(type="nope"))["code"] == "unknown_type"
    await sock.barrier()  # a good frame resets the count
    for n in range(9):
        reply = await sock.request(type="ack", id=f"a{n}", up_to=1)
        assert (reply["code"], reply["id"]) == ("not_ready", f"a{n}")
    await sock.barrier()
    for _ in range(9):
        await sock.request(type="nope")
    await sock.comm.send_to(text_data="{")
    assert (await sock.recv())["code"] == "bad_json"  # the error comes first
    await sock.closed_with(4400)


async def test_second_hello_and_second_ready_are_bad_field(session, token):
    sock, _ = await session(token, durable_id="d1")
    reply = await sock.request(type="hello", id="again", durable_id="d1")
    assert (reply["type"], reply["code"], reply["id"]) == (
        "error",
        "bad_field",
        "again",
    )
    await sock.ready()
    assert (await sock.request(type="ready"))["code"] == "bad_field"


async def test_an_overlong_id_is_bad_field_and_not_echoed(session, token):
    sock, _ = await session(token)
    reply = await sock.request(type="ready", id="x" * 129)
    assert reply["code"] == "bad_field"
    assert "id" not in reply


# --- hello and welcome ------------------------------------------------------


async def test_welcome_of_a_new_durable_client(session, token):
    _, welcome = await session(token, id="w", durable_id="d1", timeout=60)
    assert welcome == {
        "type": "welcome",
        "id": "w",
        "durable_id": "d1",
        "node": "node-1",
        "primary": "node-1",
        "secondaries": [],
        "pending_events": -2,
        "redundancy_satisfied": True,
    }
    client = await db(_client)("d1")
    assert (client.timeout, client.is_connected) == (60, True)


@pytest.mark.parametrize("hello", [{}, {"durable_id": None}])
async def test_welcome_of_a_non_durable_client(session, token, hello):
    _, welcome = await session(token, **hello)
    assert welcome["durable_id"] is None
    assert welcome["pending_events"] == -2
    assert welcome["node"] == welcome["primary"] == "node-1"


async def test_redundancy_above_the_live_nodes_is_accepted_unsatisfied(session, token):
    _, welcome = await session(token, durable_id="d1", redundancy=2)
    assert (welcome["secondaries"], welcome["redundancy_satisfied"]) == ([], False)


async def test_client_whose_primary_is_another_live_node_is_redirected(ws, token, user):
    await db(node_row)("node-2", url="http://10.0.0.2:8002")
    await db(DurableClient.objects.create)(
        durable_id="d1", owner=user, primary="node-2"
    )
    _, sock = await ws(token)
    reply = await sock.request(type="hello", id="h", durable_id="d1")
    assert reply == {
        "type": "redirect",
        "id": "h",
        "url": "ws://10.0.0.2:8002/ws/v1/subscribe",
    }
    await sock.closed_with(1000)


async def test_durable_id_of_another_user_is_4403_while_connected(
    session, ws, token, other_token
):
    await session(token, durable_id="d1")
    _, sock = await ws(other_token)
    await sock.send(type="hello", durable_id="d1")
    await sock.closed_with(4403)  # ownership is checked before 4409


async def test_durable_id_of_another_user_is_4403_while_away(
    session, ws, token, other_token
):
    sock, _ = await session(token, durable_id="d1")
    await sock.drop()
    _, sock = await ws(other_token)
    await sock.send(type="hello", durable_id="d1")
    await sock.closed_with(4403)


async def test_durable_id_already_connected_is_4409(session, ws, token, region):
    first, _ = await session(token, durable_id="d1")
    _, second = await ws(token)
    await second.send(type="hello", durable_id="d1")
    await second.closed_with(4409)
    await second.drop()
    await first.barrier()  # the first socket is untouched
    assert (await db(_client)("d1")).is_connected


# --- register_interest and images --------------------------------------------


async def test_register_keys_sends_values_of_existing_keys(session, token, region):
    await db(cache_services.entry_putall)(region="prices", entries={"a": 1, "b": 2})
    sock, _ = await session(token)
    await sock.send(type="register_interest", id="r", region="prices", keys=["b", "x"])
    image = await sock.recv()
    assert image == {
        "type": "image",
        "id": "r",
        "region": "prices",
        "entries": [{"key": "b", "value": 2, "version": 1}],
    }
    assert await sock.recv() == {"type": "interest_registered", "id": "r", "count": 1}


async def test_register_regex_with_policy_keys_sends_keys(session, token, region):
    entries = {"apple": 1, "apricot": 2, "banana": 3, "xapple": 4}
    await db(cache_services.entry_putall)(region="prices", entries=entries)
    sock, _ = await session(token)
    await sock.send(
        type="register_interest", region="prices", regex="ap.*", policy="keys"
    )
    assert (await sock.recv())["keys"] == ["apple", "apricot"]  # whole-key match
    assert (await sock.recv())["count"] == 2


async def test_register_with_policy_none_sends_no_image(session, token, region):
    await db(cache_services.entry_put)(region="prices", key="a", value=1)
    sock, _ = await session(token)
    await sock.send(
        type="register_interest", region="prices", all_keys=True, policy="none"
    )
    assert await sock.recv() == {"type": "interest_registered", "count": 0}


async def test_a_large_image_comes_in_chunks_of_at_most_500(session, token, region):
    entries = {f"k{n:04d}": n for n in range(1200)}
    await db(cache_services.entry_putall)(region="prices", entries=entries)
    sock, _ = await session(token)
    await sock.send(type="register_interest", id="big", region="prices", all_keys=True)
    reply, images = await sock.until("interest_registered")
    assert [len(i["entries"]) for i in images] == [500, 500, 200]
    assert {i["id"] for i in images} == {"big"}
    keys = [e["key"] for i in images for e in i["entries"]]
    assert keys == sorted(entries)
    assert reply["count"] == 1200


@pytest.mark.parametrize("regex", ["(a)\\1", 5, "(?=a)", "a{1001}", ""])
async def test_unusable_regex_is_bad_regex(session, token, region, regex):
    sock, _ = await session(token)
    reply = await sock.request(type="register_interest", region="prices", regex=regex)
    assert (reply["type"], reply["code"]) == ("error", "bad_regex")
    assert await db(Interest.objects.count)() == 0


async def test_regex_of_a_list_is_bad_regex(session, token, region):
    sock, _ = await session(token)
    reply = await sock.request(type="register_interest", region="prices", regex=["a"])
    assert (reply["type"], reply["code"]) == ("error", "bad_regex")


async def test_register_in_a_missing_region_is_no_such_region(session, token):
    sock, _ = await session(token, durable_id="d1")
    reply = await sock.request(type="register_interest", region="nope", all_keys=True)
    assert reply["code"] == "no_such_region"


@pytest.mark.parametrize(
    "frame",
    [
        {"keys": ["a"], "regex": "a"},
        {"keys": []},
        {"all_keys": False},
        {"all_keys": True, "policy": "values"},
        {"all_keys": True, "durable": "yes"},
    ],
)
async def test_bad_selector_or_policy_is_bad_field(session, token, region, frame):
    sock, _ = await session(token, durable_id="d1")
    reply = await sock.request(type="register_interest", region="prices", **frame)
    assert reply["code"] == "bad_field"


async def test_durable_interest_from_a_non_durable_client_is_bad_field(
    session, token, region
):
    sock, _ = await session(token)
    reply = await sock.request(
        type="register_interest", region="prices", all_keys=True, durable=True
    )
    assert reply["code"] == "bad_field"
    assert await db(Interest.objects.count)() == 0


async def test_registering_twice_is_idempotent_with_a_fresh_image(
    session, token, region, write
):
    await db(cache_services.entry_put)(region="prices", key="a", value=1)
    sock, _ = await session(token, durable_id="d1")
    assert await sock.register(keys=["a", "b"], durable=True) == 1
    await write(cache_services.entry_put, region="prices", key="a", value=2)
    assert await sock.register(keys=["a", "b"], durable=True) == 1
    assert await db(_interests)("d1") == [("a", True), ("b", True)]
    _, replayed = await sock.ready()
    assert [(e["key"], e["value"]) for e in replayed] == [("a", 2)]
    await write(cache_services.entry_put, region="prices", key="a", value=3)
    await write(cache_services.entry_put, region="prices", key="b", value=1)
    # A second copy of a's event would arrive before b's.
    events = await sock.events(2)
    assert [(e["key"], e["value"]) for e in events] == [("a", 3), ("b", 1)]


async def test_unregister_stops_events(session, token, region, write):
    sock, _ = await session(token)
    await sock.register(keys=["a"], policy="none")
    await sock.register(keys=["b"], policy="none")
    await sock.ready()
    reply = await sock.request(
        type="unregister_interest", id="u", region="prices", keys=["a"]
    )
    assert reply == {"type": "interest_unregistered", "id": "u"}
    await write(cache_services.entry_put, region="prices", key="a", value=1)
    await write(cache_services.entry_put, region="prices", key="b", value=1)
    assert [e["key"] for e in await sock.events(1)] == ["b"]


# --- ready, replay, marker, live --------------------------------------------


async def test_ready_replays_then_marker_then_live_events(
    session, token, region, write
):
    sock, _ = await session(token, durable_id="d1")
    await sock.register(keys=["a", "b"], durable=True, policy="none")
    await write(cache_services.entry_put, region="prices", key="a", value=1)
    await write(cache_services.entry_put, region="prices", key="c", value=1)
    await write(cache_services.entry_put, region="prices", key="b", value=2)
    assert await sock.comm.receive_nothing(timeout=0.3)  # nothing before ready
    marker, replayed = await sock.ready()
    assert [(e["key"], e["replay"]) for e in replayed] == [("a", True), ("b", True)]
    assert marker == {
        "type": "marker",
        "replayed": 2,
        "resynced": 0,
        "regions": ["prices"],
    }
    await write(cache_services.entry_put, region="prices", key="a", value=3)
    (live,) = await sock.events(1)
    assert set(live) == {
        *("type", "id", "seq", "region", "key", "op", "value", "version", "ts"),
        "replay",
    }
    assert {k: live[k] for k in ("key", "op", "value", "version", "replay")} == {
        "key": "a",
        "op": "update",
        "value": 3,
        "version": 2,
        "replay": False,
    }
    assert live["seq"] > replayed[-1]["seq"] > replayed[0]["seq"]
    assert len(live["id"]) > 0
    assert live["ts"].endswith(("Z", "+00:00"))


async def test_live_events_come_by_doorbell_alone(
    session, token, region, write, settings
):
    """No sweep to fall back on: every live event is read because its
    fan-out rang, including writes made while the socket was sending."""
    settings.DURABLECACHE_POLL_S = 3600
    sock, _ = await session(token, durable_id="bell")
    await sock.register(keys=["a"], durable=True, policy="none")
    await sock.ready()
    for round_ in range(3):
        for value in range(round_ + 1):
            await write(cache_services.entry_put, region="prices", key="a", value=value)
        events = await sock.events(round_ + 1)
        assert [e["value"] for e in events] == list(range(round_ + 1))


async def test_first_time_client_gets_an_empty_marker(session, token):
    sock, _ = await session(token)
    marker, replayed = await sock.ready()
    assert (marker, replayed) == (
        {"type": "marker", "replayed": 0, "resynced": 0, "regions": []},
        [],
    )


async def test_region_ops_reach_key_interests_with_a_null_key(
    session, token, region, write
):
    await db(cache_services.entry_put)(region="prices", key="a", value=1)
    sock, _ = await session(token)
    await sock.register(keys=["zzz"], policy="none")
    await sock.ready()
    await write(cache_services.region_clear, name="prices")
    await write(cache_services.region_destroy, name="prices")
    events = await sock.events(2)
    assert [(e["op"], e["key"]) for e in events] == [
        ("region_clear", None),
        ("region_destroy", None),
    ]


# --- ack ------------------------------------------------------------------


async def test_ack_before_ready_is_not_ready(session, token):
    sock, _ = await session(token, durable_id="d1")
    reply = await sock.request(type="ack", id="k", up_to=0)
    assert (reply["code"], reply["id"]) == ("not_ready", "k")


@pytest.mark.parametrize("up_to", [99, -1, "1", True])
async def test_ack_beyond_sent_or_not_a_seq_is_bad_field(
    session, token, region, write, up_to
):
    sock, _ = await session(token, durable_id="d1")
    await sock.register(all_keys=True, durable=True, policy="none")
    await write(cache_services.entry_put, region="prices", key="a", value=1)
    await sock.ready()
    assert (await sock.request(type="ack", up_to=up_to))["code"] == "bad_field"
    assert await db(_queue_size)("d1") == 1  # nothing changed


async def test_ack_drops_rows_through_up_to(session, token, region, write):
    sock, _ = await session(token, durable_id="d1")
    await sock.register(all_keys=True, durable=True, policy="none")
    await write(cache_services.entry_putall, region="prices", entries={"a": 1, "b": 2})
    _, replayed = await sock.ready()
    await write(cache_services.entry_put, region="prices", key="c", value=3)
    (live,) = await sock.events(1)
    assert await db(_queue_size)("d1") == 3  # delivered but unacked stays queued
    await sock.send(type="ack", up_to=replayed[0]["seq"])
    await sock.barrier()
    assert await db(_queue_size)("d1") == 2
    await sock.send(type="ack", up_to=live["seq"])
    await sock.barrier()
    assert await db(_queue_size)("d1") == 0


async def test_unacked_events_are_replayed_after_reconnect(
    session, token, region, write
):
    sock, _ = await session(token, durable_id="d1")
    await sock.register(all_keys=True, durable=True, policy="none")
    await sock.ready()
    await write(cache_services.entry_putall, region="prices", entries={"a": 1, "b": 2})
    await write(cache_services.entry_put, region="prices", key="c", value=3)
    first = await sock.events(3)
    assert {e["replay"] for e in first} == {False}
    await sock.send(type="ack", up_to=first[0]["seq"])
    await sock.barrier()
    await sock.drop()

    sock, welcome = await session(token, durable_id="d1")
    assert welcome["pending_events"] == 2
    marker, replayed = await sock.ready()
    assert [e["id"] for e in replayed] == [e["id"] for e in first[1:]]
    assert {e["replay"] for e in replayed} == {True}
    assert marker["replayed"] == 2


# --- close, drop, expiry, operator delete ------------------------------------


async def test_close_keepalive_keeps_queue_and_durable_interests(
    session, token, region, write
):
    sock, _ = await session(token, durable_id="d1")
    await sock.register(keys=["a"], durable=True, policy="none")
    await sock.register(keys=["b"], policy="none")
    await write(cache_services.entry_putall, region="prices", entries={"a": 1, "b": 1})
    reply = await sock.request(type="close", id="c", keepalive=True)
    assert reply == {"type": "closed", "id": "c", "keepalive": True}
    await sock.closed_with(1000)
    assert await db(_interests)("d1") == [("a", True)]
    await write(cache_services.entry_putall, region="prices", entries={"a": 2, "b": 2})

    sock, welcome = await session(token, durable_id="d1")
    assert welcome["pending_events"] == 3  # b's queued event stays
    marker, replayed = await sock.ready()
    assert [(e["key"], e["value"]) for e in replayed] == [("a", 1), ("b", 1), ("a", 2)]
    assert marker["regions"] == ["prices"]


async def test_close_without_keepalive_deletes_the_client(
    session, token, region, write
):
    sock, _ = await session(token, durable_id="d1")
    await sock.register(all_keys=True, durable=True, policy="none")
    await write(cache_services.entry_put, region="prices", key="a", value=1)
    reply = await sock.request(type="close", keepalive=False)
    assert reply == {"type": "closed", "keepalive": False}
    await sock.closed_with(1000)
    assert await db(_client)("d1") is None

    _, welcome = await session(token, durable_id="d1")
    assert welcome["pending_events"] == -2


async def test_durable_id_is_free_for_others_once_closed_for_good(
    session, token, other_token
):
    sock, _ = await session(token, durable_id="d1")
    await sock.request(type="close", keepalive=False)
    await sock.closed_with(1000)
    _, welcome = await session(other_token, durable_id="d1")
    assert welcome["pending_events"] == -2


async def test_dropped_socket_is_keepalive(session, token, region, write):
    sock, _ = await session(token, durable_id="d1")
    await sock.register(keys=["a"], durable=True, policy="none")
    await sock.register(keys=["b"], policy="none")
    await sock.drop()
    await write(cache_services.entry_putall, region="prices", entries={"a": 1, "b": 1})
    client = await db(_client)("d1")
    assert client.is_connected is False
    assert client.expires_at is not None
    assert await db(_interests)("d1") == [("a", True)]

    sock, welcome = await session(token, durable_id="d1")
    assert welcome["pending_events"] == 1
    _, replayed = await sock.ready()
    assert [e["key"] for e in replayed] == ["a"]


async def test_non_durable_client_is_gone_with_its_socket(session, token, region):
    sock, _ = await session(token)
    await sock.register(all_keys=True)
    await sock.drop()
    assert await db(DurableClient.objects.count)() == 0
    assert await db(Interest.objects.count)() == 0


async def test_expired_client_hears_minus_one_once(session, token, region, write):
    sock, _ = await session(token, durable_id="d1", timeout=0)
    await sock.register(all_keys=True, durable=True, policy="none")
    await write(cache_services.entry_put, region="prices", key="a", value=1)
    await sock.drop()
    assert await db(services.clients_expire)() == 1

    sock, welcome = await session(token, durable_id="d1")
    assert welcome["pending_events"] == -1
    marker, _ = await sock.ready()
    assert marker == {"type": "marker", "replayed": 0, "resynced": 0, "regions": []}
    await sock.drop()
    # The -1 session got a new (empty) queue: the next hello counts it.
    sock, welcome = await session(token, durable_id="d1")
    assert welcome["pending_events"] == 0
    await sock.request(type="close", keepalive=False)
    await sock.closed_with(1000)
    _, welcome = await session(token, durable_id="d1")
    assert welcome["pending_events"] == -2


async def test_operator_delete_closes_the_socket_4410(session, token, user, region):
    sock, _ = await session(token, durable_id="d1")
    await sock.register(all_keys=True, durable=True)
    await db(services.client_delete)(user=user, durable_id="d1")
    await sock.closed_with(4410)
    await sock.drop()
    assert await db(_client)("d1") is None
    _, welcome = await session(token, durable_id="d1")
    assert welcome["pending_events"] == -2


async def test_node_shutdown_closes_its_sockets_4503(session, token):
    sock, _ = await session(token, durable_id="d1")
    await db(notify.close_node)("node-1", 4503)
    await sock.closed_with(4503)


async def test_a_socket_whose_queue_moved_to_another_primary_is_closed_4503(
    session, token
):
    # This node was taken for dead (or handed the queue over): the client
    # must reconnect and be sent to its new primary.
    sock, _ = await session(token, durable_id="d1")
    await sock.ready()
    await db(DurableClient.objects.filter(durable_id="d1").update)(primary="node-2")
    await sock.closed_with(4503)


async def test_a_socket_whose_client_another_node_released_is_closed_4503(
    session, token, region, write
):
    # Another node took this one for dead (its heartbeat late) and released
    # the client as if its socket had dropped: its durable timeout runs, and
    # would expire it while it is still connected here. The sweep closes the
    # socket 4503; the client's hello attaches it again, nothing lost.
    sock, _ = await session(token, durable_id="d1")
    await sock.register(keys=["k"], durable=True, policy="none")
    await sock.ready()
    client = await db(DurableClient.objects.get)(durable_id="d1")
    await db(services.clients_ended)(
        ended=[(client.pk, client.socket_id, True)], why="node-1 down"
    )
    await sock.closed_with(4503)
    await write(cache_services.entry_put, region="prices", key="k", value=1)
    again, welcome = await session(token, durable_id="d1")
    assert welcome["pending_events"] == 1
    _, [event] = await again.ready()
    assert (event["key"], event["value"], event["replay"]) == ("k", 1, True)


async def test_a_lost_doorbell_is_healed_by_the_hub_sweep(
    session, token, region, write, monkeypatch
):
    # The fan-out's wake-up never arrives (Redis lost it): the process's
    # sweep sees the queue head move and wakes the socket.
    sock, _ = await session(token, durable_id="d1")
    await sock.register(all_keys=True, durable=True, policy="none")
    await sock.ready()
    monkeypatch.setattr(notify, "ring_many", lambda heads, node=None, **push: None)
    await write(cache_services.entry_put, region="prices", key="a", value=1)
    [event] = await sock.events(1)
    assert (event["key"], event["value"]) == ("a", 1)


async def test_a_client_deleted_without_its_close_message_is_closed_4410(
    session, token
):
    # The operator's close message was lost: the sweep finds the row gone.
    sock, _ = await session(token, durable_id="d1")
    await sock.ready()
    await db(DurableClient.objects.filter(durable_id="d1").delete)()
    await sock.closed_with(4410)


async def test_a_socket_joins_no_channel_layer_group_of_its_own(
    session, token, settings
):
    # Doorbells and closes reach sockets through the process's hub: the
    # only group is the hub's (docs/decisions/0012-one-wake-hub-per-process.md).
    socks = [(await session(token, durable_id=f"d{i}"))[0] for i in range(3)]
    for sock in socks:
        await sock.ready()
    layer = get_channel_layer()
    assert set(layer.groups) == {notify.wake_group(settings.DURABLECACHE_NODE_NAME)}


# --- conflation and ordering -------------------------------------------------


@pytest.mark.parametrize(
    ("region_conflates", "conflate", "expected"),
    [
        (True, "server", [1, 5]),
        (True, False, [1, 2, 3, 4, 5]),
        (False, "server", [1, 2, 3, 4, 5]),
        (False, True, [1, 5]),
    ],
)
async def test_conflation_of_updates_queued_while_away(
    session, token, write, region_conflates, conflate, expected
):
    await db(cache_services.region_create)(
        name="conf", conflate_events=region_conflates
    )
    sock, _ = await session(token, durable_id="d1", conflate=conflate)
    await sock.register(region="conf", keys=["k"], durable=True, policy="none")
    await sock.drop()
    for value in range(1, 6):
        await write(cache_services.entry_put, region="conf", key="k", value=value)

    sock, welcome = await session(token, durable_id="d1", conflate=conflate)
    assert welcome["pending_events"] == len(expected)
    _, replayed = await sock.ready()
    assert [e["version"] for e in replayed] == expected
    assert replayed[0]["op"] == "create"


async def test_an_update_sent_and_not_acked_is_not_conflated(session, token, write):
    # docs/protocol.md, "Conflation": only an update still undelivered is
    # removed by a newer one; a
    # delivered one stays queued until acked. Each update here is sent
    # before the next is written, and none is acked.
    await db(cache_services.region_create)(name="conf", conflate_events=True)
    sock, _ = await session(token, durable_id="d1")
    await sock.register(region="conf", keys=["k"], durable=True, policy="none")
    await sock.ready()
    for value in (1, 2, 3):
        await write(cache_services.entry_put, region="conf", key="k", value=value)
        [event] = await sock.events(1)
        assert event["version"] == value
    await sock.drop()
    sock, welcome = await session(token, durable_id="d1")
    assert welcome["pending_events"] == 3
    _, replayed = await sock.ready()
    assert [e["version"] for e in replayed] == [1, 2, 3]


async def test_events_of_a_key_arrive_in_version_order(session, token, region, write):
    sock, _ = await session(token, durable_id="d1")
    await sock.register(all_keys=True, durable=True, policy="none")
    await write(cache_services.entry_put, region="prices", key="a", value=0)
    await sock.ready()
    await write(cache_services.entry_putall, region="prices", entries={"a": 1, "b": 1})
    await write(cache_services.entry_invalidate, region="prices", key="a")
    await write(cache_services.entry_put, region="prices", key="b", value=2)
    await write(cache_services.entry_destroy, region="prices", key="a")
    await write(cache_services.entry_put, region="prices", key="a", value=9)
    events = await sock.events(6)
    seqs = [e["seq"] for e in events]
    assert seqs == sorted(set(seqs))
    by_key = {
        key: [(e["op"], e["version"]) for e in events if e["key"] == key]
        for key in ("a", "b")
    }
    assert by_key == {
        "a": [("update", 2), ("invalidate", 3), ("destroy", 4), ("create", 5)],
        "b": [("create", 1), ("update", 2)],
    }


# --- put frames ---------------------------------------------------------------


async def test_put_frame_writes_and_its_event_reaches_subscribers(
    session, token, region
):
    watcher, _ = await session(token, durable_id="watcher")
    await watcher.register(keys=["a"], durable=True, policy="none")
    await watcher.ready()
    writer, _ = await session(token)
    reply = await writer.request(type="put", id="w1", region="prices", key="a", value=1)
    assert reply == {
        "type": "written",
        "id": "w1",
        "region": "prices",
        "key": "a",
        "op": "create",
        "version": 1,
        "event_id": reply["event_id"],
    }
    reply = await writer.request(type="put", region="prices", key="a", value=None)
    assert (reply["op"], reply["version"]) == ("update", 2)
    await db(fanout.fanout_node)("node-1")
    events = await watcher.events(2)
    assert [(e["value"], e["version"]) for e in events] == [(1, 1), (None, 2)]
    assert events[0]["id"] != events[1]["id"] == reply["event_id"]
    entry = await db(lambda: cache_selectors.entry_get(region="prices", key="a"))()
    assert (entry.value, entry.version) == (None, 2)


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        ({"region": "nowhere", "key": "a", "value": 1}, "no_such_region"),
        ({"region": "prices", "key": "a"}, "bad_field"),
        ({"region": "prices", "value": 1}, "bad_field"),
        ({"region": "prices", "key": "", "value": 1}, "bad_field"),
        ({"region": "prices", "key": "a\x07", "value": 1}, "bad_field"),
        ({"key": "a", "value": 1}, "bad_field"),
    ],
)
async def test_a_refused_put_is_a_bad_frame_and_writes_nothing(
    session, token, region, frame, code
):
    sock, _ = await session(token)
    reply = await sock.request(type="put", id="p", **frame)
    assert (reply["type"], reply["id"], reply["code"]) == ("error", "p", code)
    assert not await db(lambda: Event.objects.exists())()
    ok = await sock.request(type="put", region="prices", key="fine", value=1)
    assert ok["type"] == "written"  # the socket stays open


@pytest.fixture
def write_rounds(monkeypatch):
    """The sizes of the write rounds run, in order."""
    rounds = []
    real = put_rounds.cache_services.entries_put_many

    def counting(*, puts):
        rounds.append(len(puts))
        return real(puts=puts)

    monkeypatch.setattr(put_rounds.cache_services, "entries_put_many", counting)
    return rounds


async def test_puts_of_many_sockets_share_write_rounds(
    session, token, region, write_rounds
):
    socks = [(await session(token))[0] for _ in range(5)]
    # All five frames are queued before any is handled; the round that the
    # first one starts runs after the others have joined it.
    for i, sock in enumerate(socks):
        await sock.send(type="put", region="prices", key=f"k{i}", value=i)
    replies = [await sock.recv() for sock in socks]
    assert sorted((r["type"], r["key"]) for r in replies) == [
        ("written", f"k{i}") for i in range(5)
    ]
    assert sum(write_rounds) == 5
    assert len(write_rounds) < 5  # puts of several sockets in one transaction


async def test_a_sockets_puts_pipeline_and_are_answered_in_order(
    session, token, region, write_rounds, monkeypatch
):
    monkeypatch.setattr(put_rounds, "MAX_PUTS_IN_FLIGHT", 3)  # the socket waits too
    sock, _ = await session(token)
    for i in range(8):
        await sock.send(type="put", id=f"p{i}", region="prices", key="k", value=i)
    await sock.send(type="put", id="bad", region="nowhere", key="k", value=0)
    await sock.send(type="put", id="p8", region="prices", key="k", value=8)
    # Any other frame is answered after every put sent before it.
    await sock.send(type="unregister_interest", id="u", region="prices", all_keys=True)
    replies = [await sock.recv() for _ in range(11)]
    assert [r["id"] for r in replies] == [
        *(f"p{i}" for i in range(8)),
        "bad",
        "p8",
        "u",
    ]
    assert [r["version"] for r in replies[:8]] == list(range(1, 9))
    assert (replies[8]["type"], replies[8]["code"]) == ("error", "no_such_region")
    assert (replies[9]["type"], replies[9]["version"]) == ("written", 9)
    assert replies[10]["type"] == "interest_unregistered"
    assert sum(write_rounds) == 10
    assert len(write_rounds) < 10  # one socket's puts share transactions
    entry = await db(lambda: cache_selectors.entry_get(region="prices", key="k"))()
    assert (entry.value, entry.version) == (8, 9)


async def test_a_failed_write_round_closes_the_socket_and_frees_its_id(
    session, token, region, monkeypatch
):
    def broken(*, puts):
        raise RuntimeError("database went away")

    sock, _ = await session(token, durable_id="writer")
    monkeypatch.setattr(put_rounds.cache_services, "entries_put_many", broken)
    await sock.send(type="put", region="prices", key="a", value=1)
    closed = await sock.comm.receive_output(timeout=10)
    assert closed == {"type": "websocket.close", "code": 1011}
    await sock.comm.disconnect()
    monkeypatch.undo()
    _again, welcome = await session(token, durable_id="writer")
    assert welcome["type"] == "welcome"
