"""Parse client frames and build server frames (docs/protocol.md); no I/O."""

import json
import re
from typing import Any

from cache.exceptions import NoSuchRegionError
from cache.services import WrittenEvent
from cache.validation import (
    MAX_DEPTH,
    loads_strict,
    validate_json_value,
)
from clients.exceptions import BadQueryError, BadRegexError
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

    def __init__(self, message: str, *, req_id: str | None = None) -> None:
        super().__init__(message)
        # The frame's id when it can still be read (a frame too deep to
        # parse, a binary frame holding a JSON object), for the error.
        self.req_id = req_id


class UnknownTypeError(DomainError):
    code = "unknown_type"


class NotReadyError(DomainError):
    code = "not_ready"


def frame_size(text: str | None, data: bytes | None) -> int:
    """Return a client frame's size in bytes (a text frame counts as UTF-8)."""
    if data is not None:
        return len(data)
    # surrogatepass: a lone surrogate must be refused by the frame's checks
    # (parse_frame, check_fields), not crash the size check.
    return len((text or "").encode("utf-8", "surrogatepass"))


def parse_frame(text: str) -> tuple[dict[str, Any], str | None, bool]:
    """Return (frame, id, whether ``check_fields`` must judge its fields);
    raise BadJsonError when the text is not one JSON object.

    A frame whose fields hold what storage refuses is still a JSON object
    with an id, so it is not refused here: ``check_fields`` refuses it once
    the id and type are known, with the code of the field at fault. It can
    hold that only if the text has a ``\\u`` escape (the strict decoder
    refuses a raw control character), more than MAX_DEPTH brackets, a raw
    lone surrogate, or a number out of range; walking every frame would
    cost a few percent of Daphne's event loop under put frames.
    """
    out_of_range = False
    try:
        frame = loads_strict(text)
    except json.JSONDecodeError as exc:
        raise BadJsonError(f"not valid JSON: {exc}") from exc
    except RecursionError as exc:
        raise BadJsonError(
            "nested too deeply to parse", req_id=deep_frame_id(text)
        ) from exc
    except ValueError as exc:
        # NaN or Infinity (not JSON), or a number beyond a double or an int
        # (1e999, 5000 digits): JSON, read again with it kept as infinite.
        try:
            frame = _OUT_OF_RANGE.decode(text)
        except RecursionError as deep:
            raise BadJsonError(
                "nested too deeply to parse", req_id=deep_frame_id(text)
            ) from deep
        except ValueError:
            raise BadJsonError(f"not valid JSON: {exc}") from exc
        out_of_range = True
    if not isinstance(frame, dict):
        raise BadJsonError("a frame must be a JSON object")
    needs_check = (
        out_of_range
        or "\\u" in text
        or text.count("{") + text.count("[") > MAX_DEPTH
        or not _encodable(text)
    )
    return frame, frame_id(frame), needs_check


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _out_of_range_int(text: str) -> int | float:
    try:
        return int(text)
    except ValueError:  # more digits than int() converts
        return float(text)  # inf or -inf


# The strict decoder but for numbers: one out of range becomes infinite
# (what ``check_fields`` refuses), so the frame around it is read.
_OUT_OF_RANGE = json.JSONDecoder(
    parse_constant=_reject_constant, parse_int=_out_of_range_int
)

# The error class for a field, itself a string, holding what storage
# refuses; any other field's is ValidationError (bad_field). When several
# fields are at fault, the first class here wins: the handlers check the
# fields in this order.
_FIELD_ERRORS: dict[str, type[DomainError]] = {
    "regex": BadRegexError,
    "region": NoSuchRegionError,
    "query": BadQueryError,
}
_ERROR_ORDER = [ValidationError, *_FIELD_ERRORS.values()]


def check_fields(frame: dict[str, Any]) -> None:
    """Refuse a frame whose fields hold U+0000, a lone surrogate, a number
    out of range or nesting deeper than MAX_DEPTH (what storage refuses,
    docs/protocol.md, "Selectors and limits"), with the code that fits the
    field at fault.

    The ``id`` is not judged here: it is only echoed (``reply`` keeps it
    valid UTF-8), never stored, and ``check_type`` judges its shape.
    """
    faults: list[DomainError] = []
    for name, value in frame.items():
        if name == "id":
            continue
        try:
            validate_json_value({name: value})
        except ValidationError as exc:
            fits = _FIELD_ERRORS.get(name) if isinstance(value, str) else None
            faults.append((fits or ValidationError)(f"field {name!r}: {exc.message}"))
    if faults:
        raise min(faults, key=lambda fault: _ERROR_ORDER.index(type(fault)))


# One JSON token of a skipped value: a string, a run of openers, a run of
# closers, or a run of anything else (scalars, commas, colons, blanks).
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[{]+|[\]}]+|[^"\[\]{}]+', re.DOTALL)
_BLANK = re.compile(r"[ \t\n\r]*")


def _blank(text: str, pos: int) -> int:
    """Where the blanks starting at ``pos`` end."""
    match = _BLANK.match(text, pos)
    return pos if match is None else match.end()


def deep_frame_id(text: str) -> str | None:
    """The top-level ``id`` of a JSON object nested too deeply for the
    parser, read without recursion; None when the text is not an object
    or its id is not a string of at most MAX_ID characters.

    Each top-level member's name is read; a value other than the id is
    skipped by counting brackets outside strings (~0.1 s for a 1 MiB frame
    of the worst shape, once per such frame). As the parser does, the last
    ``id`` counts.
    """
    found: str | None = None
    pos = _blank(text, 0)
    if not text.startswith("{", pos):
        return None
    pos = _blank(text, pos + 1)
    try:
        while text.startswith('"', pos):
            name, pos = _PLAIN.raw_decode(text, pos)
            pos = _blank(text, pos)
            if not text.startswith(":", pos):
                return None
            pos = _blank(text, pos + 1)
            if name == "id":
                found = None
                if text.startswith('"', pos):
                    found, pos = _PLAIN.raw_decode(text, pos)
                    pos = _blank(text, pos)
            pos = _skip_value(text, pos)
            if pos < 0 or not text.startswith(",", pos):
                break
            pos = _blank(text, pos + 1)
    except ValueError:  # a name or id that is not a JSON string
        return None
    return found if found is not None and len(found) <= MAX_ID else None


_PLAIN = json.JSONDecoder()  # reads one string where a member starts


def _skip_value(text: str, pos: int) -> int:
    """Where the JSON value starting at ``pos`` ends (-1: it does not);
    at once if ``pos`` is past a value already."""
    depth = 0
    for match in _TOKEN.finditer(text, pos):
        token = match.group()
        first = token[0]
        if first in "[{":
            depth += len(token)
        elif first in "]}":
            if depth <= len(token):
                return match.start() + depth
            depth -= len(token)
        elif depth == 0:
            if first == '"':
                return match.end()
            comma = token.find(",")
            return match.start() + (comma if comma >= 0 else len(token))
    return -1


def binary_frame_id(data: bytes) -> str | None:
    """The id of a binary frame holding a JSON object, for its error."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    try:
        return parse_frame(text)[1]
    except BadJsonError as exc:
        return exc.req_id


def _encodable(text: str) -> bool:
    """Whether ``text`` is valid Unicode (no lone surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


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
    if req_id is not None and not req_id.isascii() and not _encodable(req_id):
        return _escaped(body)
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
        f'"replay":{"true" if replay else "false"}{_cq_member(event)}}}'
    )


def _cq_member(event: dict[str, Any]) -> str:
    """The frame's ``cq`` member (the stored list's JSON text as it is),
    or nothing when no CQ of the client's is moved by the event."""
    cq = event.get("cq_json")
    return "" if cq is None else f',"cq":{cq}'


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
    if not _encodable(message):
        return _escaped(
            {"type": "error", "id": req_id, "code": code, "message": message}
        )
    return reply("error", req_id, code=code, message=message)


def _escaped(body: dict[str, Any]) -> str:
    """``body`` as ASCII JSON text: a lone surrogate the client sent (in
    its id, say) goes back escaped, as it came, and the frame stays valid
    UTF-8 (sent raw, it could not be encoded at all)."""
    if body.get("id", "") is None:
        del body["id"]
    return json.dumps(body, separators=(",", ":"))


_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def dumps(body: dict[str, Any]) -> str:
    return _ENCODER.encode(body)
