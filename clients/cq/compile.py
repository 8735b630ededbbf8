"""Compile a parsed CQ condition into closures, and judge membership (§3.1).

A compiled condition is a function of the *slots*: the values of the
paths it reads, read once per judged value into a list. A single query
has its own slots; a ``judge.CqSet`` gives many queries one shared table,
so each distinct path is read once per value whatever the number of
queries. Evaluation never raises and never parses again.
"""

import operator
from collections.abc import Callable
from typing import Any, Final, Literal, TypeAlias

from clients.cq.canonical import normalize
from clients.cq.like import compile_like
from clients.cq.parser import parse_query
from clients.cq.tree import (
    BOOLEAN,
    NULL,
    NUMBER,
    STRING,
    And,
    Compare,
    Condition,
    Const,
    InList,
    IsNull,
    Like,
    Not,
    Operand,
    Or,
    Path,
    Query,
    Truth,
)
from clients.cq.values import Getter, getter, json_equal, json_order, scalar_tag

Predicate: TypeAlias = Callable[[list[Any]], bool]
CqOp: TypeAlias = Literal["create", "update", "destroy"]
RegionOp: TypeAlias = Literal["region_clear", "region_destroy"]
REGION_OPS: Final = frozenset({"region_clear", "region_destroy"})

_ORDER: Final[dict[str, Callable[[Any, Any], bool]]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


class Slots:
    """The distinct paths some conditions read, each at a fixed index."""

    def __init__(self) -> None:
        self.index: dict[Path, int] = {}
        self.getters: list[Getter] = []

    def of(self, path: Path) -> int:
        """Return the slot of ``path``, adding it when new."""
        slot = self.index.get(path)
        if slot is None:
            slot = self.index[path] = len(self.getters)
            self.getters.append(getter(path))
        return slot

    def read(self, key: str, value: Any) -> list[Any]:
        """Read every path of the table from one entry."""
        return [read(key, value) for read in self.getters]


def compile_condition(condition: Condition, slots: Slots) -> Predicate:
    """Compile a normalized condition to a predicate over ``slots``."""
    if isinstance(condition, Not):
        inner = compile_condition(condition.operand, slots)
        return lambda values: not inner(values)
    if isinstance(condition, And | Or):
        parts = [compile_condition(part, slots) for part in condition.parts]
        return _all(parts) if isinstance(condition, And) else _any(parts)
    predicate = _compile_leaf(condition, slots)
    if _reads_nothing(condition):
        # Literals only (``1 = 1``): decide once.
        return _TRUE if predicate([]) else _FALSE
    return predicate


def _TRUE(values: list[Any]) -> bool:  # noqa: N802 (a constant predicate)
    return True


def _FALSE(values: list[Any]) -> bool:  # noqa: N802 (a constant predicate)
    return False


def _reads_nothing(leaf: Compare | InList | Like | IsNull | Truth) -> bool:
    if isinstance(leaf, Compare):
        return isinstance(leaf.left, Const) and isinstance(leaf.right, Const)
    return isinstance(leaf.operand, Const)


def _all(parts: list[Predicate]) -> Predicate:
    if len(parts) == 2:
        first, second = parts
        return lambda values: first(values) and second(values)

    def every(values: list[Any]) -> bool:
        for part in parts:  # noqa: SIM110 (faster than all() over a generator)
            if not part(values):
                return False
        return True

    return every


def _any(parts: list[Predicate]) -> Predicate:
    if len(parts) == 2:
        first, second = parts
        return lambda values: first(values) or second(values)

    def some(values: list[Any]) -> bool:
        for part in parts:  # noqa: SIM110 (faster than any() over a generator)
            if part(values):
                return True
        return False

    return some


def _reader(operand: Operand, slots: Slots) -> Callable[[list[Any]], Any]:
    if isinstance(operand, Const):
        constant = operand.value
        return lambda values: constant
    slot = slots.of(operand)
    return lambda values: values[slot]


def _compile_leaf(
    leaf: Compare | InList | Like | IsNull | Truth, slots: Slots
) -> Predicate:
    if isinstance(leaf, Compare):
        return _compile_compare(leaf, slots)
    read = _reader(leaf.operand, slots)
    if isinstance(leaf, Truth):
        return lambda values: read(values) is True
    if isinstance(leaf, IsNull):
        if leaf.negated:
            return lambda values: read(values) is not None
        return lambda values: read(values) is None
    if isinstance(leaf, InList):
        tags = frozenset(scalar_tag(item.value) for item in leaf.items)
        if leaf.negated:
            return lambda values: scalar_tag(read(values)) not in tags
        return lambda values: scalar_tag(read(values)) in tags
    matches = compile_like(leaf.pattern)

    def like(values: list[Any]) -> bool:
        subject = read(values)
        return type(subject) is str and matches(subject)

    if leaf.negated:
        return lambda values: not like(values)
    return like


def _compile_compare(leaf: Compare, slots: Slots) -> Predicate:
    if isinstance(leaf.left, Path) and isinstance(leaf.right, Const):
        return _path_against_literal(leaf.op, slots.of(leaf.left), leaf.right)
    left, right = _reader(leaf.left, slots), _reader(leaf.right, slots)
    if leaf.op == "=":
        return lambda values: json_equal(left(values), right(values))
    if leaf.op == "!=":
        return lambda values: not json_equal(left(values), right(values))
    op = leaf.op
    return lambda values: json_order(op, left(values), right(values))


def _path_against_literal(op: str, slot: int, literal: Const) -> Predicate:
    """Compile ``path OP literal``, the commonest shape, with the literal's
    kind known in advance."""
    if op in ("=", "!="):
        equal = _equal_to(slot, literal)
        if op == "!=":
            return lambda values: not equal(values)
        return equal
    order, bound = _ORDER[op], literal.value
    if literal.kind == NUMBER:

        def numbers(values: list[Any]) -> bool:
            subject = values[slot]
            kind = type(subject)
            return (kind is int or kind is float) and order(subject, bound)

        return numbers
    if literal.kind == STRING:

        def strings(values: list[Any]) -> bool:
            subject = values[slot]
            return type(subject) is str and order(subject, bound)

        return strings
    return _FALSE  # null and booleans have no order


def _equal_to(slot: int, literal: Const) -> Predicate:
    constant = literal.value
    if literal.kind in (NULL, BOOLEAN):  # singletons: identity is equality
        return lambda values: values[slot] is constant
    if literal.kind == STRING:

        def string(values: list[Any]) -> bool:
            subject = values[slot]
            return type(subject) is str and subject == constant

        return string

    def number(values: list[Any]) -> bool:
        subject = values[slot]
        kind = type(subject)
        return (kind is int or kind is float) and subject == constant

    return number


def membership_op(before: bool, after: bool) -> CqOp | None:
    """Return the ``cq_op`` of a change from the entry's membership before
    it and after it (§3.1): create, update, destroy, or None."""
    if before:
        return "update" if after else "destroy"
    return "create" if after else None


class CompiledQuery:
    """One CQ's query, compiled once; judging parses nothing."""

    __slots__ = ("condition", "predicate", "query", "slots")

    def __init__(self, query: Query) -> None:
        self.query = query
        self.condition = normalize(query.condition)
        self.slots = Slots()
        self.predicate = compile_condition(self.condition, self.slots)

    def __repr__(self) -> str:
        return f"CompiledQuery({self.query.text!r}, region={self.query.region!r})"

    def matches(self, key: str, value: Any) -> bool:
        """Tell whether the condition is true for the entry (null or not)."""
        return self.predicate(self.slots.read(key, value))

    def is_member(self, key: str, value: Any) -> bool:
        """Tell whether the entry is in the result: a value that is not
        null (None also stands for a missing entry) and a true condition."""
        return value is not None and self.matches(key, value)

    def cq_op(self, key: str, before: Any, after: Any) -> CqOp | None:
        """Return the ``cq_op`` of a change of ``key`` from value ``before``
        to value ``after`` (None for a missing or destroyed entry)."""
        return membership_op(self.is_member(key, before), self.is_member(key, after))


def compile_query(text: str, *, region: str) -> CompiledQuery:
    """Parse and compile a CQ's query; raise QueryError if it is refused."""
    return CompiledQuery(parse_query(text, region=region))
