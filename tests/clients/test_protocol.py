"""Frames built by clients.protocol."""

import json

import pytest

from clients import protocol


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
