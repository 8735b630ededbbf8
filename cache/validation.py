"""Validation of names, keys and JSON values
(docs/protocol.md, "Selectors and limits")."""

import json
import math
import re
from typing import Any

from common.errors import ValidationError
from common.names import NAME_RE

MAX_KEY_LEN = 512
MAX_DEPTH = 200
# Unicode's category Cc, all of it (unicodedata.category(ch) == "Cc").
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


def validate_name(value: Any, *, what: str = "name") -> str:
    """Return ``value`` when it is a valid region name or durable id."""
    if not isinstance(value, str) or not NAME_RE.fullmatch(value):
        raise ValidationError(f"{what} must be 1-128 characters of A-Z a-z 0-9 . _ : -")
    return value


def validate_key(value: Any) -> str:
    """Return ``value`` when it is a valid entry key (1-512 chars, no Cc)."""
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_KEY_LEN:
        raise ValidationError("key must be a string of 1-512 characters")
    if _CONTROL.search(value):
        raise ValidationError("key must not contain control characters")
    if _has_surrogate(value):
        raise ValidationError("key must not contain lone surrogates")
    return value


def _has_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def validate_json_value(value: Any) -> Any:
    """Return ``value`` when it is RFC 8259 JSON storable everywhere.

    Refuses NaN/Infinity, U+0000 and lone surrogates (PostgreSQL's jsonb
    cannot hold U+0000, and neither is valid UTF-8 JSON text).
    """
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ValidationError("value is nested too deeply")
        if isinstance(item, bool) or item is None:
            continue
        if isinstance(item, int):
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                raise ValidationError("value must not contain NaN or Infinity")
            continue
        if isinstance(item, str):
            _check_string(item)
        elif isinstance(item, list):
            stack.extend((child, depth + 1) for child in item)
        elif isinstance(item, dict):
            for key, child in item.items():
                if not isinstance(key, str):
                    raise ValidationError("object keys must be strings")
                _check_string(key)
                stack.append((child, depth + 1))
        else:
            raise ValidationError("value is not JSON")
    return value


def json_text(value: Any) -> str | None:
    """The JSON text to store for ``value`` (None for null), refusing what
    ``validate_json_value`` refuses.

    One encode checks most values: the text can hold U+0000, a lone
    surrogate, a nesting over MAX_DEPTH or a non-string key only if it has
    an escape starting ``\\u0000`` or ``\\ud``, more than MAX_DEPTH brackets, or
    (keys) the value has a non-string key, which the encode would turn
    into a string; ``validate_json_value`` decides each of those, so the
    walk over every value runs only for such a text, not for every value.
    """
    if value is None:
        return None
    try:
        text = json.dumps(value, allow_nan=False)
    except (ValueError, TypeError, RecursionError):
        validate_json_value(value)  # says why
        raise ValidationError("value is not JSON") from None
    if (
        "\\u0000" in text
        or "\\ud" in text
        or text.count("{") + text.count("[") > MAX_DEPTH
        or ("{" in text and _has_other_keys(value))
    ):
        validate_json_value(value)
    return text


def _has_other_keys(value: Any) -> bool:
    """Whether an object in ``value`` has a key that is not a string."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if not all(isinstance(key, str) for key in item):
                return True
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _check_string(text: str) -> None:
    if "\x00" in text:
        raise ValidationError("strings must not contain U+0000")
    if _has_surrogate(text):
        raise ValidationError("strings must not contain lone surrogates")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError("a number is out of range (not a finite number)")
    return number


# One decoder for every call: ``json.loads`` with a hook builds a new one
# each time, which costs as much as parsing a frame.
_STRICT = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite_float)


def loads_strict(text: str | bytes) -> Any:
    """Parse RFC 8259 JSON text, refusing NaN and Infinity literals and
    numbers too large for a float (``1e999``)."""
    if isinstance(text, bytes):  # in its encoding, as json.loads reads bytes
        text = text.decode(json.detect_encoding(text), "surrogatepass")
    return _STRICT.decode(text)


def loads_storable(text: str) -> Any:
    """``loads_strict``, then refuse what ``validate_json_value`` refuses.

    The walk runs only when the text could hold what it looks for: parsed
    by ``loads_strict`` a value holds no NaN, Infinity or non-string key,
    and U+0000 or a lone surrogate only from a ``\\u`` escape (the strict
    decoder refuses a raw control character) or from the text itself; it
    is nested deeper than MAX_DEPTH only if the text has more brackets.
    So most frames, which hold none of these, are not walked at all.
    """
    value = loads_strict(text)
    if (
        "\\u" in text
        or text.count("{") + text.count("[") > MAX_DEPTH
        or _has_surrogate(text)
    ):
        validate_json_value(value)
    return value
