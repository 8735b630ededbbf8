"""Judge one change against many CQs at once (one client's CQs on a region).

A ``CqSet`` reads each distinct path once per value into shared slots, and
answers the commonest queries, a single ``path OP literal`` (and ``IN``,
``IS NULL``, a bare path), from indexes instead of evaluating them one by
one: equality-like ones from a hash of the literal, ``<``/``<=``/``>``/``>=``
from a sorted list of the literals and a bisection. Memberships are bit
masks over the queries in name order, so the ``cq`` list of an event comes
out sorted by name.
"""

from bisect import bisect_left, bisect_right
from collections.abc import Mapping
from typing import Any

from clients.cq.compile import (
    CompiledQuery,
    CqOp,
    Predicate,
    RegionOp,
    Slots,
    compile_condition,
    membership_op,
)
from clients.cq.tree import (
    NUMBER,
    ORDERED_OPS,
    STRING,
    Compare,
    Condition,
    Const,
    InList,
    IsNull,
    Path,
    Truth,
)
from clients.cq.values import scalar_tag

_Tag = tuple[str, Any]


class _EqualityIndex:
    """The queries ``path = lit``, ``path != lit``, ``path [NOT] IN (...)``,
    ``path IS [NOT] NULL`` and ``path`` (bare) of one path, by literal tag."""

    def __init__(self, slot: int) -> None:
        self.slot = slot
        self.hits: dict[_Tag, int] = {}  # true when the path has this tag
        self.misses: dict[_Tag, int] = {}  # negated: false for this tag
        self.negated = 0  # every negated query's bit

    def add(self, bit: int, tags: list[_Tag], negated: bool) -> None:
        table = self.misses if negated else self.hits
        for tag in tags:
            table[tag] = table.get(tag, 0) | bit
        if negated:
            self.negated |= bit

    def mask(self, values: list[Any]) -> int:
        tag = scalar_tag(values[self.slot])
        if tag is None:  # an array or object equals no literal
            return self.negated
        return self.hits.get(tag, 0) | (self.negated & ~self.misses.get(tag, 0))


class _OrderIndex:
    """The queries ``path OP literal`` of one path, one ordered operator and
    one literal kind (numbers or strings): sorted literals and, for each
    place a value can fall among them, the mask of the queries it meets."""

    def __init__(self, slot: int, op: str, kind: str) -> None:
        self.slot = slot
        self.op = op
        self.numbers = kind == NUMBER
        self.entries: list[tuple[Any, int]] = []
        self.bounds: list[Any] = []
        self.masks: list[int] = []

    def add(self, bit: int, bound: Any) -> None:
        self.entries.append((bound, bit))

    def freeze(self) -> None:
        self.entries.sort(key=lambda entry: entry[0])
        self.bounds = [bound for bound, _ in self.entries]
        bits = [bit for _, bit in self.entries]
        # ``>``, ``>=``: the value meets the bounds below it, a prefix;
        # ``<``, ``<=``: the bounds above it, a suffix.
        masks = [0]
        for bit in bits if self.op in (">", ">=") else reversed(bits):
            masks.append(masks[-1] | bit)
        self.masks = masks if self.op in (">", ">=") else masks[::-1]

    def mask(self, values: list[Any]) -> int:
        subject = values[self.slot]
        kind = type(subject)
        if self.numbers:
            if (kind is not int and kind is not float) or subject != subject:
                return 0  # not a number, or NaN
        elif kind is not str:
            return 0
        op, bounds = self.op, self.bounds
        if op == ">":
            return self.masks[bisect_left(bounds, subject)]
        if op == ">=":
            return self.masks[bisect_right(bounds, subject)]
        if op == "<":
            return self.masks[bisect_right(bounds, subject)]
        return self.masks[bisect_left(bounds, subject)]


def _equality_shape(condition: Condition) -> tuple[Path, list[_Tag], bool] | None:
    """Return (path, tags, negated) when the condition is true exactly when
    the path's tag is (negated: is not) among the tags."""
    if isinstance(condition, Compare) and condition.op in ("=", "!="):
        path, literal = condition.left, condition.right
        if isinstance(path, Path) and isinstance(literal, Const):
            tag = scalar_tag(literal.value)
            return (path, [tag], condition.op == "!=") if tag else None
    if isinstance(condition, InList) and isinstance(condition.operand, Path):
        tags = [scalar_tag(item.value) for item in condition.items]
        return condition.operand, [tag for tag in tags if tag], condition.negated
    if isinstance(condition, IsNull) and isinstance(condition.operand, Path):
        return condition.operand, [("z", None)], condition.negated
    if isinstance(condition, Truth) and isinstance(condition.operand, Path):
        return condition.operand, [("b", True)], False
    return None


def _order_shape(condition: Condition) -> tuple[Path, str, str, Any] | None:
    """Return (path, op, literal kind, literal) for ``path < number`` and
    the like."""
    if not isinstance(condition, Compare) or condition.op not in ORDERED_OPS:
        return None
    path, literal = condition.left, condition.right
    if not isinstance(path, Path) or not isinstance(literal, Const):
        return None
    if literal.kind not in (NUMBER, STRING):
        return None
    return path, condition.op, literal.kind, literal.value


_CHUNK = 8  # queries per answer table
_CHUNK_MASK = (1 << _CHUNK) - 1
# Answer tables keep at most this many (before, after) patterns per chunk,
# so a stream of unusual values cannot grow them without bound; a pattern
# past it is worked out each time.
_MAX_PATTERNS = 1024


class _Answers:
    """Turn the membership masks before and after a change into the sorted
    ``cq`` list. Queries are taken 8 at a time; the answer for a chunk's
    (before, after) bits is worked out once and kept, so an event costs
    a table lookup per 8 queries instead of a step per query moved."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names
        self.tables: list[dict[int, tuple[tuple[str, CqOp], ...]]] = [
            {} for _ in range(0, len(names), _CHUNK)
        ]

    def pick(self, was: int, now: int) -> list[tuple[str, CqOp]]:
        judged: list[tuple[str, CqOp]] = []
        chunk = 0
        while was or now:
            pattern = (was & _CHUNK_MASK) << _CHUNK | (now & _CHUNK_MASK)
            if pattern:
                table = self.tables[chunk]
                answer = table.get(pattern)
                if answer is None:
                    answer = self.work_out(chunk, pattern)
                    if len(table) < _MAX_PATTERNS:
                        table[pattern] = answer
                judged.extend(answer)
            was >>= _CHUNK
            now >>= _CHUNK
            chunk += 1
        return judged

    def work_out(self, chunk: int, pattern: int) -> tuple[tuple[str, CqOp], ...]:
        was, now = pattern >> _CHUNK, pattern & _CHUNK_MASK
        answer: list[tuple[str, CqOp]] = []
        for offset in range(_CHUNK):
            op = membership_op(bool(was >> offset & 1), bool(now >> offset & 1))
            if op is not None:  # a set bit: a query exists at this place
                answer.append((self.names[chunk * _CHUNK + offset], op))
        return tuple(answer)


class CqSet:
    """Many compiled CQs, by name, judged together.

    Build one per client and region when its CQs change, and keep it for
    the events that follow: building costs a compilation per query.
    """

    def __init__(self, queries: Mapping[str, CompiledQuery]) -> None:
        self.names = tuple(sorted(queries))
        self.slots = Slots()
        self._equality: dict[int, _EqualityIndex] = {}
        self._order: dict[tuple[int, str, str], _OrderIndex] = {}
        self._general: list[tuple[int, Predicate]] = []
        for position, name in enumerate(self.names):
            self._add(1 << position, queries[name].condition)
        for index in self._order.values():
            index.freeze()
        self._indexes: list[_EqualityIndex | _OrderIndex] = [
            *self._equality.values(),
            *self._order.values(),
        ]
        self._answers = _Answers(self.names)

    def __len__(self) -> int:
        return len(self.names)

    def _add(self, bit: int, condition: Condition) -> None:
        equality = _equality_shape(condition)
        if equality is not None:
            path, tags, negated = equality
            slot = self.slots.of(path)
            index = self._equality.setdefault(slot, _EqualityIndex(slot))
            index.add(bit, tags, negated)
            return
        order = _order_shape(condition)
        if order is not None:
            path, op, kind, bound = order
            slot = self.slots.of(path)
            group = (slot, op, kind)
            self._order.setdefault(group, _OrderIndex(slot, op, kind)).add(bit, bound)
            return
        self._general.append((bit, compile_condition(condition, self.slots)))

    def members(self, key: str, value: Any) -> int:
        """Return the mask of the queries (bit i: the i-th name in sorted
        order) that have the entry in their result."""
        if value is None:
            return 0
        values = self.slots.read(key, value)
        mask = 0
        for index in self._indexes:
            mask |= index.mask(values)
        for bit, predicate in self._general:
            if predicate(values):
                mask |= bit
        return mask

    def judge(self, key: str, before: Any, after: Any) -> list[tuple[str, CqOp]]:
        """Return (name, cq_op) for each query the change of ``key`` from
        ``before`` to ``after`` (None: missing) moves, sorted by name."""
        return self._answers.pick(self.members(key, before), self.members(key, after))

    def region_op(self, op: RegionOp) -> list[tuple[str, RegionOp]]:
        """Return (name, op) for every query, sorted by name: a
        ``region_clear`` or ``region_destroy`` reaches each CQ on the region
        (the caller closes them after a ``region_destroy``)."""
        return [(name, op) for name in self.names]


def judge_many(
    queries: Mapping[str, CompiledQuery], key: str, before: Any, after: Any
) -> list[tuple[str, CqOp]]:
    """Judge one change against ``queries`` by name; sorted (name, cq_op).
    For a stream of events keep a ``CqSet`` instead."""
    return CqSet(queries).judge(key, before, after)
