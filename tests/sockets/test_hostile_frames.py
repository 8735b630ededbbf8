"""Hostile frames on the subscriber socket: every frame that is a JSON
object with a readable ``id`` is answered with that id (docs/protocol.md,
"Hostile input"), with
the code of the field that is wrong, and changes nothing."""

import json

import pytest

from sockets import protocol

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "node"])

NUL = "\\u0000"  # as the frame's JSON text spells it
LONE = "\\ud800"


def text(**fields: object) -> str:
    """A frame's JSON text, with ``@`` standing for an escaped U+0000."""
    return json.dumps(fields).replace("@", "\\u0000")


# (frame text, the code its error must carry); every frame has id "q".
AFTER_HELLO = [
    ('{"id": "q", "type": "re' + NUL + 'ady"}', "unknown_type"),
    ('{"id": "q", "type": "ready", "junk": "' + NUL + '"}', "bad_field"),
    ('{"id": "q", "type": "ready", "j' + NUL + 'unk": 1}', "bad_field"),
    ('{"id": "q", "type": "ready", "junk": "' + LONE + '"}', "bad_field"),
    (
        text(id="q", type="register_interest", region="pri@ces", all_keys=True),
        "no_such_region",
    ),
    (text(id="q", type="register_interest", region="prices", keys=["a@"]), "bad_field"),
    (text(id="q", type="register_interest", region="prices", regex="a@"), "bad_regex"),
    (
        text(
            id="q",
            type="register_interest",
            region="prices",
            all_keys=True,
            policy="keys@",
        ),
        "bad_field",
    ),
    (
        text(
            id="q",
            type="register_interest",
            region="prices",
            all_keys=True,
            durable="@",
        ),
        "bad_field",
    ),
    (
        text(id="q", type="unregister_interest", region="prices", keys=["@"]),
        "bad_field",
    ),
    (text(id="q", type="put", region="prices", key="k@", value=1), "bad_field"),
    (text(id="q", type="put", region="prices", key="k", value={"a": "@"}), "bad_field"),
    (
        text(id="q", type="register_cq", name="n", region="prices", query="@"),
        "bad_query",
    ),
    (text(id="q", type="close_cq", name="@"), "bad_field"),
    (text(id="q", type="ack", up_to="@"), "bad_field"),
    (text(id="q", type="close", keepalive="@"), "bad_field"),
    ('{"id": "q", "type": "ack", "up_to": 1e999}', "bad_field"),
    ('{"id": "q", "type": "ack", "up_to": ' + "9" * 5000 + "}", "bad_field"),
    ('{"id": "q", "type": "ready", "x": -1E999}', "bad_field"),
    ('{"id": "q", "type": "ready", "x": ' + "[" * 300 + "]" * 300 + "}", "bad_field"),
    (
        '{"id": "q", "type": "ready", "x": ' + "[" * 50_000 + "]" * 50_000 + "}",
        "bad_json",
    ),
    (
        '{"type": "ready", "x": ' + "[" * 50_000 + "]" * 50_000 + ', "id": "q"}',
        "bad_json",
    ),
    (  # out of range, then too deep for the parser (found by the fuzz)
        '{"id": "q", "type": "ready", "n": 1e999, "x": '
        + "[" * 50_000
        + "]" * 50_000
        + "}",
        "bad_json",
    ),
]


@pytest.mark.parametrize(("frame", "code"), AFTER_HELLO)
async def test_a_bad_field_is_answered_with_the_frames_id(
    session, token, region, frame, code
):
    sock, _ = await session(token, durable_id="d1")
    await sock.comm.send_to(text_data=frame)
    reply = await sock.recv()
    assert (reply["type"], reply.get("id"), reply["code"]) == ("error", "q", code)
    # Nothing changed and the socket stays open: a later frame is answered.
    marker, replayed = await sock.ready()
    assert (marker["replayed"], replayed) == (0, [])


@pytest.mark.parametrize(
    "fields",
    [
        {"durable_id": "d@"},
        {"conflate": "@"},
        {"timeout": "@"},
        {"x": "@"},
    ],
)
async def test_a_hello_with_a_bad_field_is_answered_with_its_id_and_not_fatal(
    ws, token, fields
):
    _, sock = await ws(token)
    await sock.comm.send_to(text_data=text(type="hello", id="h", **fields))
    reply = await sock.recv()
    assert (reply["type"], reply.get("id"), reply["code"]) == (
        "error",
        "h",
        "bad_field",
    )
    assert (await sock.hello(durable_id="d1"))["pending_events"] == -2


async def test_a_first_frame_other_than_hello_is_fatal_with_its_id(ws, token):
    _, sock = await ws(token)
    await sock.comm.send_to(text_data=text(type="ready", id="r", x="@"))
    reply = await sock.recv()
    assert (reply.get("id"), reply["type"]) == ("r", "error")
    await sock.closed_with(4400)


@pytest.mark.parametrize("req_id", ["@", "a@b", LONE, "\\udfff" + "x"])
async def test_an_id_holding_nul_or_a_lone_surrogate_is_echoed_as_sent(
    session, token, req_id
):
    sock, _ = await session(token)
    sent = '{"type": "nope", "id": "' + req_id.replace("@", NUL) + '"}'
    await sock.comm.send_to(text_data=sent)
    raw = await sock.comm.receive_from(timeout=3)
    raw.encode("utf-8")  # the reply itself is valid UTF-8
    reply = json.loads(raw)
    assert reply["id"] == json.loads(sent)["id"]
    assert reply["code"] == "unknown_type"


async def test_a_binary_frame_is_bad_json_with_its_id(session, token):
    sock, _ = await session(token)
    await sock.comm.send_to(bytes_data=b'{"type": "ready", "id": "b"}')
    reply = await sock.recv()
    assert (reply["code"], reply.get("id")) == ("bad_json", "b")
    marker, _ = await sock.ready()
    assert marker["replayed"] == 0


@pytest.mark.parametrize(
    "frame",
    ['{"id": "q", "type": "ready"', "[1]", '"q"', " ", '{"id": "q", "x": NaN}'],
)
async def test_what_is_not_a_json_object_is_bad_json_without_an_id(
    session, token, frame
):
    sock, _ = await session(token)
    await sock.comm.send_to(text_data=frame)
    reply = await sock.recv()
    assert (reply["code"], "id" in reply) == ("bad_json", False)


def test_the_id_of_a_frame_too_deep_to_parse_is_read_at_the_top_level_only():
    deep = "[" * 50_000 + "]" * 50_000
    assert protocol.deep_frame_id('{"id": "a", "x": ' + deep + "}") == "a"
    assert protocol.deep_frame_id('{"x": ' + deep + ', "id": "b"}') == "b"
    nested = '{"x": [{"id": "no"}, ' + deep + "]}"
    assert protocol.deep_frame_id(nested) is None
    in_a_string = '{"x": "\\"id\\": \\"no\\"", "y": ' + deep + "}"
    assert protocol.deep_frame_id(in_a_string) is None
    assert protocol.deep_frame_id('{"id": 7, "x": ' + deep + "}") is None
    assert protocol.deep_frame_id('{"id": "' + "x" * 129 + '"}') is None
    assert protocol.deep_frame_id("[" + deep) is None
