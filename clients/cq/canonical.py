"""The normal form of a condition and a canonical text for comparing queries.

``normalize`` rewrites what the language lets one say two ways into one
way (a literal on the left, ``NOT`` over a form that has a negation, a
double ``NOT``, an ``AND`` inside an ``AND``, a repeated part, the order
of ``IN`` items); the compiler works on it. ``canonical_text`` goes
further, for comparison only: it also sorts the parts of ``AND``/``OR``.
"""

import hashlib
from dataclasses import replace

from clients.cq.tree import (
    BOOLEAN,
    NULL,
    NUMBER,
    SWAPPED,
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


def normalize(condition: Condition) -> Condition:
    """Return the normal form of ``condition``; it means the same."""
    if isinstance(condition, Compare):
        if isinstance(condition.left, Const) and isinstance(condition.right, Path):
            op = SWAPPED[condition.op]
            return Compare(op, condition.right, condition.left)
        return condition
    if isinstance(condition, InList):
        items = {render_operand(item): item for item in condition.items}
        return replace(condition, items=tuple(items[text] for text in sorted(items)))
    if isinstance(condition, Not):
        return _negate(normalize(condition.operand))
    if isinstance(condition, And | Or):
        parts = _flatten(condition.parts, type(condition))
        if len(parts) == 1:  # ``a AND a`` is ``a``
            return parts[0]
        return And(parts) if isinstance(condition, And) else Or(parts)
    return condition


def _flatten(
    parts: tuple[Condition, ...], kind: type[And | Or]
) -> tuple[Condition, ...]:
    """Normalize the parts of an AND (OR), lifting the parts of an AND (OR)
    among them (``a AND (b AND c)`` is ``a AND b AND c``) and dropping
    repeated ones (evaluation has no side effects, so ``a AND a`` is
    ``a``). Parts repeat when their canonical texts are one: ``(a OR b)
    AND (b OR a)`` is ``a OR b``, which ``canonical_text`` must write as it
    writes ``a OR b``, not as an AND of one part."""
    flat: dict[str, Condition] = {}
    for part in map(normalize, parts):
        lifted = (
            part.parts if isinstance(part, And | Or) and type(part) is kind else (part,)
        )
        for each in lifted:
            flat.setdefault(_render(each), each)
    return tuple(flat.values())


def _negate(condition: Condition) -> Condition:
    """Return the normal form of ``NOT condition`` (condition normalized).
    Only exact negations are folded: ``NOT a < b`` is not ``a >= b``, since
    both are false for a string and a number."""
    if isinstance(condition, Not):
        return condition.operand
    if isinstance(condition, Compare) and condition.op in ("=", "!="):
        return replace(condition, op="!=" if condition.op == "=" else "=")
    if isinstance(condition, InList | Like | IsNull):
        return replace(condition, negated=not condition.negated)
    return Not(condition)


def canonical_text(condition: Condition) -> str:
    """Return one text for every condition that differs from ``condition``
    only in the rewrites of ``normalize``, spacing, keyword case, aliases,
    and the order or repetition of ``AND``/``OR`` parts and ``IN`` items."""
    return _render(normalize(condition))


def fingerprint(query: Query) -> str:
    """Return a short stable digest of the query's region and canonical text."""
    text = f"{query.region}\n{canonical_text(query.condition)}"
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def same_query(first: Query, second: Query) -> bool:
    """Tell whether two queries are on one region and mean the same by
    their canonical text."""
    return first.region == second.region and canonical_text(
        first.condition
    ) == canonical_text(second.condition)


def _render(condition: Condition) -> str:
    if isinstance(condition, And | Or):
        rendered = sorted({_render_part(part, condition) for part in condition.parts})
        joiner = " AND " if isinstance(condition, And) else " OR "
        return joiner.join(rendered)
    if isinstance(condition, Not):
        inner = _render(condition.operand)
        if isinstance(condition.operand, And | Or):
            inner = f"({inner})"
        return f"NOT {inner}"
    return _render_leaf(condition)


def _render_part(part: Condition, parent: And | Or) -> str:
    text = _render(part)
    return f"({text})" if isinstance(parent, And) and isinstance(part, Or) else text


def _render_leaf(leaf: Compare | InList | Like | IsNull | Truth) -> str:
    if isinstance(leaf, Compare):
        return f"{render_operand(leaf.left)} {leaf.op} {render_operand(leaf.right)}"
    subject = render_operand(leaf.operand)
    negated = "NOT " if getattr(leaf, "negated", False) else ""
    if isinstance(leaf, InList):
        items = ", ".join(render_operand(item) for item in leaf.items)
        return f"{subject} {negated}IN ({items})"
    if isinstance(leaf, Like):
        return f"{subject} {negated}LIKE {_quote(leaf.pattern)}"
    if isinstance(leaf, IsNull):
        return f"{subject} IS {negated}NULL"
    return subject


def render_operand(operand: Operand) -> str:
    """Write a path or literal back as query text."""
    if isinstance(operand, Path):
        return operand.root + "".join(map(_render_step, operand.steps))
    if operand.kind == NULL:
        return "null"
    if operand.kind == BOOLEAN:
        return "true" if operand.value else "false"
    if operand.kind == NUMBER:
        value = operand.value
        if isinstance(value, float) and value.is_integer():
            return str(int(value))
        return repr(value)
    return _quote(str(operand.value))


def _render_step(step: str | int) -> str:
    if isinstance(step, int):
        return f"[{step}]"
    if (
        step
        and (step[0] == "_" or step[0].isalpha())
        and all(char == "_" or char.isalnum() for char in step)
    ):
        return f".{step}"
    return f"[{_quote(step)}]"


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
