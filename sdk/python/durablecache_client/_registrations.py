"""What the application registered, kept to be re-sent after a reconnect."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Registration:
    """One interest or CQ; `frame` is the request as first sent (no `id`)."""

    region: str
    frame: dict[str, Any]
    durable: bool
    policy: str


def interest_key(region: str, selector: dict[str, Any]) -> tuple[Any, ...]:
    """Identify an interest by region and selector (a key list as a set)."""
    if "keys" in selector:
        return ("interest", region, "keys", frozenset(selector["keys"]))
    if "regex" in selector:
        return ("interest", region, "regex", selector["regex"])
    return ("interest", region, "all_keys")


def cq_key(name: str) -> tuple[Any, ...]:
    """Identify a CQ: its name is unique per client."""
    return ("cq", name)


def selector_matcher(frame: dict[str, Any]) -> Callable[[str], bool] | None:
    """Return a local predicate for an interest selector, if one is possible."""
    if "keys" in frame:
        return set(frame["keys"]).__contains__
    if "regex" in frame:
        try:
            pattern = re.compile(frame["regex"])
        except re.error:
            return None  # syntax only the server knows: do not guess
        return lambda key: pattern.fullmatch(key) is not None
    if frame.get("all_keys"):
        return lambda key: True
    return None
