"""Frames built by sockets.protocol."""

import json

import pytest

from sockets import protocol


@pytest.mark.parametrize(
    "value", [{"a": [1, 2.5, None]}, None, "h\u00e9\u4e16", 7, [], {"x": {"y": "\n"}}]
)
@pytest.mark.parametrize("ensure_ascii", [True, False])
def test_event_frame_embeds_the_stored_value_text(value, ensure_ascii):
    # Stored JSON text as SQLite (json.dumps) or PostgreSQL (jsonb text,
    # not ASCII-escaped) hands it back.
    event = {
        "id": "e1",
        "seq": 3,
        "region": "r",
        "key": "k/\u00e9",
        "op": "update",
        "value_json": json.dumps(value, ensure_ascii=ensure_ascii),
        "version": 2,
        "ts": "2026-12-01T00:00:00Z",
    }
    frame = protocol.event_frame(event, replay=True)
    assert list(json.loads(frame).items()) == [
        ("type", "event"),
        ("id", "e1"),
        ("seq", 3),
        ("region", "r"),
        ("key", "k/\u00e9"),
        ("op", "update"),
        ("value", value),
        ("version", 2),
        ("ts", "2026-12-01T00:00:00Z"),
        ("replay", True),
    ]


@pytest.mark.parametrize(
    ("key", "version"),
    [(None, None), ('quote " back \\ nl \n tab \t \u2028 \x01', 0), ("", 10**15)],
)
def test_event_frame_writes_strings_ints_and_nulls_as_json_dumps_would(key, version):
    event = {
        "id": "e\u00e9",
        "seq": 2**40,
        "region": "r",
        "key": key,
        "op": "region_clear",
        "value_json": "null",
        "version": version,
        "ts": "2026-12-01T00:00:00.123456Z",
    }
    frame = protocol.event_frame(event, replay=False)
    expected = {**event, "value": None, "replay": False}
    del expected["value_json"]
    assert json.loads(frame) == {"type": "event", **expected}
    assert frame == json.dumps(
        json.loads(frame), ensure_ascii=False, separators=(",", ":")
    )


def test_event_frame_refuses_a_field_that_is_not_a_scalar():
    event = {
        "id": "e1",
        "seq": 1.5,
        "region": "r",
        "key": "k",
        "op": "update",
        "value_json": "1",
        "version": 1,
        "ts": "t",
    }
    with pytest.raises(TypeError):
        protocol.event_frame(event, replay=False)
