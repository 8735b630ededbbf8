"""Interest selectors and the linear-time regex engine (RE2) that runs them.

User-supplied patterns run under RE2, which has no backtracking: matching
is linear in the key length whatever the pattern, so no pattern can stall
a node. Patterns RE2 cannot run (backreferences, lookaround) are refused.
"""

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import re2

from cache.validation import validate_key
from clients.exceptions import BadRegexError
from clients.models import InterestKind, Policy
from common.errors import ValidationError

MAX_PATTERN = 1024
MAX_KEYS = 10000
_OPTIONS = re2.Options()
_OPTIONS.max_mem = 8 << 20
_OPTIONS.log_errors = False


@dataclass(frozen=True)
class Selector:
    kind: str
    values: tuple[str, ...]  # keys for KEY, (pattern,) for REGEX, ("",) for ALL


def compile_regex(pattern: Any) -> Any:
    """Compile a pattern with RE2; raise BadRegexError if it cannot run."""
    if not isinstance(pattern, str) or not pattern or len(pattern) > MAX_PATTERN:
        raise BadRegexError(f"regex must be a string of 1-{MAX_PATTERN} characters")
    return _compile(pattern)


@lru_cache(maxsize=4096)
def _compile(pattern: str) -> Any:
    try:
        return re2.compile(pattern, _OPTIONS)
    except Exception as exc:
        raise BadRegexError(f"regex not accepted: {exc}") from exc


def parse_selector(data: dict[str, Any]) -> Selector:
    """Read exactly one of ``keys`` / ``regex`` / ``all_keys: true``."""
    given = [f for f in ("keys", "regex", "all_keys") if data.get(f) is not None]
    if len(given) != 1:
        raise ValidationError("give exactly one of keys, regex or all_keys")
    field = given[0]
    if field == "keys":
        keys = data["keys"]
        if not isinstance(keys, list) or not keys or len(keys) > MAX_KEYS:
            raise ValidationError(f"keys must be a list of 1-{MAX_KEYS} keys")
        return Selector(InterestKind.KEY, tuple(dict.fromkeys(map(validate_key, keys))))
    if field == "regex":
        compile_regex(data["regex"])
        return Selector(InterestKind.REGEX, (data["regex"],))
    if data["all_keys"] is not True:
        raise ValidationError("all_keys must be true")
    return Selector(InterestKind.ALL_KEYS, ("",))


def parse_policy(value: Any) -> str:
    if value is None:
        return Policy.KEYS_VALUES
    if value not in Policy.values:
        raise ValidationError("policy must be keys_values, keys or none")
    return str(value)


# The largest seq a ``since`` may name (the log's seqs are 64-bit).
MAX_SEQ = 2**63 - 1


def parse_since(value: Any, *, policy: str | None = None) -> int | None:
    """Read a registration's ``since`` (None: absent): a non-negative
    integer seq; with ``policy`` ``none`` (no image to catch up) refused."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError("since must be a non-negative integer seq")
    if not 0 <= value <= MAX_SEQ:
        raise ValidationError(f"since must be a seq from 0 to {MAX_SEQ}")
    if policy == Policy.NONE:
        raise ValidationError("since needs an image: policy keys_values or keys")
    return int(value)


def parse_bool(value: Any, *, field: str, default: bool = False) -> bool:
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ValidationError(f"{field} must be a boolean")
    return value


def key_matches(kind: str, selector: str, key: str) -> bool:
    """Whether an interest row (kind, selector) wants ``key``."""
    if kind == InterestKind.ALL_KEYS:
        return True
    if kind == InterestKind.KEY:
        return key == selector
    return compile_regex(selector).fullmatch(key) is not None
