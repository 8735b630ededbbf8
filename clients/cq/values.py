"""JSON semantics of the CQ language: paths, equality and order (§3.1).

Values are what ``json.loads`` gives: dict, list, str, int, float, bool,
None. Types are told apart by exact type, so ``True`` is a boolean and
never the number 1 (Python's ``True == 1`` would say otherwise); a value of
any other Python type has no JSON kind and equals nothing. Nothing here
raises or recurses on the value's depth.
"""

from collections.abc import Callable
from typing import Any

from clients.cq.tree import KEY, Path, Step


def is_number(value: Any) -> bool:
    return type(value) is int or type(value) is float


def scalar_tag(value: Any) -> tuple[str, Any] | None:
    """Return a hashable tag that two scalars share exactly when they are
    ``=`` (numbers by value, so 1 and 1.0 share one), or None for arrays,
    objects and values of no JSON kind."""
    kind = type(value)
    if kind is str:
        return ("s", value)
    if kind is int or kind is float:
        return ("n", value)
    if kind is bool:
        return ("b", value)
    if value is None:
        return ("z", None)
    return None


def json_equal(left: Any, right: Any) -> bool:
    """Tell whether two JSON values are ``=``: same kind and equal, numbers
    numerically, arrays and objects deeply by the same rule."""
    pending = [(left, right)]
    while pending:
        a, b = pending.pop()
        kind = type(a)
        if kind is dict:
            if type(b) is not dict or a.keys() != b.keys():
                return False
            pending.extend((a[name], b[name]) for name in a)
        elif kind is list:
            if type(b) is not list or len(a) != len(b):
                return False
            pending.extend(zip(a, b, strict=True))
        else:
            tag = scalar_tag(a)
            if tag is None or tag != scalar_tag(b):
                return False
    return True


def json_order(op: str, left: Any, right: Any) -> bool:
    """Apply ``<``, ``<=``, ``>`` or ``>=``: true only for two numbers or two
    strings (code-point order) that satisfy it."""
    if is_number(left):
        if not is_number(right):
            return False
    elif type(left) is not str or type(right) is not str:
        return False
    if op == "<":
        return bool(left < right)
    if op == "<=":
        return bool(left <= right)
    if op == ">":
        return bool(left > right)
    return bool(left >= right)


def step(value: Any, where: Step) -> Any:
    """Follow one path step: a member of an object or an element of an
    array; anything else (a missing member, an index past the end, a step
    into a scalar, a member name on an array) is None."""
    if isinstance(where, str):
        return value.get(where) if type(value) is dict else None
    if type(value) is list and where < len(value):
        return value[where]
    return None


Getter = Callable[[str, Any], Any]


def getter(path: Path) -> Getter:
    """Return a function of (key, value) that reads ``path``; None when
    the path is missing."""
    if path.root == KEY:
        return lambda key, value: key
    steps = path.steps
    if not steps:
        return lambda key, value: value
    name = steps[0]
    if len(steps) == 1 and isinstance(name, str):
        return lambda key, value: value.get(name) if type(value) is dict else None

    def read(key: str, value: Any) -> Any:
        for where in steps:
            value = step(value, where)
            if value is None:
                return None
        return value

    return read
