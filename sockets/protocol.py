"""Parse client frames and build server frames (docs/protocol.md); no I/O."""

import json
from typing import Any

from cache.services import WrittenEvent
from cache.validation import loads_storable
from common.errors import DomainError, ValidationError

MAX_ID = 128
CLIENT_TYPES = {
    "hello",
    "register_interest",
    "unregister_interest",
    "register_cq",
    "close_cq",
    "ready",
    "ack",
    "close",
    "put",
}


class BadJsonError(DomainError):
    code = "bad_json"


class UnknownTypeError(DomainError):
    code = "unknown_type"


class NotReadyError(DomainError):
    code = "not_ready"


class BadQueryError(DomainError):
    code = "bad_query"


def frame_size(text: str | None, data: bytes | None) -> int:
    """Return a client frame's size in bytes (a text frame counts as UTF-8)."""
    if data is not None:
        return len(data)
    # surrogatepass: a lone surrogate must be refused as bad_json by the
    # parser, not crash the size check.
    return len((text or "").encode("utf-8", "surrogatepass"))


def parse_frame(text: str) -> tuple[dict[str, Any], str | None]:
    """Return (frame, id); raise a DomainError naming the error code.

    The id is returned even when the rest of the frame is bad, so the error
    can echo it.
    """
    try:
        frame = loads_storable(text)
    except (ValueError, RecursionError) as exc:
        raise BadJsonError(f"not valid JSON: {exc}") from exc
    except ValidationError as exc:
        raise BadJsonError(exc.message) from exc
    if not isinstance(frame, dict):
        raise BadJsonError("a frame must be a JSON object")
    return frame, frame_id(frame)


def frame_id(frame: dict[str, Any]) -> str | None:
    req_id = frame.get("id")
    if req_id is None:
        return None
    if not isinstance(req_id, str) or len(req_id) > MAX_ID:
        return None
    return req_id


def check_type(frame: dict[str, Any]) -> str:
    frame_type = frame.get("type")
    if not isinstance(frame_type, str) or frame_type not in CLIENT_TYPES:
        raise UnknownTypeError(f"unknown frame type {frame_type!r}")
    req_id = frame.get("id")
    if req_id is not None and (not isinstance(req_id, str) or len(req_id) > MAX_ID):
        raise ValidationError("id must be a string of at most 128 characters")
    return frame_type


def required_str(frame: dict[str, Any], field: str) -> str:
    value = frame.get(field)
    if not isinstance(value, str):
        raise ValidationError(f"{field} must be a string")
    return value


def ack_up_to(frame: dict[str, Any], *, sent_through: int) -> int:
    """Return the seq an ``ack`` frame acknowledges through: one already
    sent on the socket (``sent_through``)."""
    up_to = frame.get("up_to")
    if isinstance(up_to, bool) or not isinstance(up_to, int) or up_to < 0:
        raise ValidationError("up_to must be a non-negative integer seq")
    if up_to > sent_through:
        raise ValidationError(f"up_to {up_to} is beyond the last seq sent")
    return up_to


def put_fields(frame: dict[str, Any]) -> tuple[str, str, Any]:
    """Return the region, key and value of a ``put`` frame."""
    region = required_str(frame, "region")
    key = required_str(frame, "key")
    if "value" not in frame:
        raise ValidationError("value is required (null is a value)")
    return region, key, frame["value"]


def reply(frame_type: str, req_id: str | None, **fields: Any) -> str:
    body: dict[str, Any] = {"type": frame_type}
    if req_id is not None:
        body["id"] = req_id
    body.update(fields)
    return dumps(body)


def event_frame(event: dict[str, Any], *, replay: bool) -> str:
    """An ``event`` frame (docs/protocol.md) around the value's stored JSON text.

    The value is validated as RFC 8259 JSON when it is written, and stored
    as JSON text: embedding that text saves a decode and an encode per
    frame sent. The other fields are formatted directly, strings through
    the json module's C escaper: the text ``json.dumps`` gives, without
    its cost per call (docs/decisions/0009-prebuilt-event-frames.md).
    """
    return (
        f'{{"type":"event","id":{_scalar(event["id"])},"seq":{_scalar(event["seq"])},'
        f'"region":{_scalar(event["region"])},"key":{_scalar(event["key"])},'
        f'"op":{_scalar(event["op"])},"value":{event["value_json"]},'
        f'"version":{_scalar(event["version"])},"ts":{_scalar(event["ts"])},'
        f'"replay":{"true" if replay else "false"}}}'
    )


_quote = json.encoder.encode_basestring


def _scalar(value: str | int | None) -> str:
    """JSON text of a str, an int or None, as ``dumps`` writes it."""
    if value is None:
        return "null"
    if isinstance(value, str):
        return _quote(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"not a frame scalar: {value!r}")
    return str(value)


def written(req_id: str | None, region: str, event: WrittenEvent) -> str:
    """The ``written`` reply to a ``put`` frame, once its event is durable."""
    return reply(
        "written",
        req_id,
        region=region,
        key=event.key,
        op=event.op,
        version=event.version,
        event_id=event.event_id,
    )


def error(req_id: str | None, code: str, message: str) -> str:
    return reply("error", req_id, code=code, message=message)


_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def dumps(body: dict[str, Any]) -> str:
    return _ENCODER.encode(body)
