"""Validation of names, keys and JSON values (DESIGN §1)."""

import json
import math
import re
import unicodedata
from typing import Any

from durablecache.cache.exceptions import ValidationError

NAME_RE = re.compile(r"[A-Za-z0-9._:-]{1,128}")
MAX_KEY_LEN = 512
MAX_DEPTH = 200


def validate_name(value: Any, *, what: str = "name") -> str:
    """Return ``value`` when it is a valid region name or durable id."""
    if not isinstance(value, str) or not NAME_RE.fullmatch(value):
        raise ValidationError(f"{what} must be 1-128 characters of A-Z a-z 0-9 . _ : -")
    return value


def validate_key(value: Any) -> str:
    """Return ``value`` when it is a valid entry key (1-512 chars, no Cc)."""
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_KEY_LEN:
        raise ValidationError("key must be a string of 1-512 characters")
    if any(unicodedata.category(ch) == "Cc" for ch in value):
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


def _check_string(text: str) -> None:
    if "\x00" in text:
        raise ValidationError("strings must not contain U+0000")
    if _has_surrogate(text):
        raise ValidationError("strings must not contain lone surrogates")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def loads_strict(text: str | bytes) -> Any:
    """Parse RFC 8259 JSON text, refusing NaN and Infinity literals."""
    return json.loads(text, parse_constant=_reject_constant)
