"""The parsed form of a CQ query: small frozen nodes that compare by value.

A literal keeps its JSON kind beside its value, so ``true`` and ``1`` (equal
in Python) are different nodes while ``1`` and ``1.0`` are the same.
"""

from dataclasses import dataclass
from typing import Final, Literal, TypeAlias

KEY: Final = "key"
VALUE: Final = "value"

# The JSON kinds of a literal.
NULL: Final = "null"
BOOLEAN: Final = "boolean"
NUMBER: Final = "number"
STRING: Final = "string"

Scalar: TypeAlias = bool | int | float | str | None
Step: TypeAlias = str | int  # a member name, or an array index
CompareOp: TypeAlias = Literal["=", "!=", "<", "<=", ">", ">="]
ORDERED_OPS: Final = frozenset({"<", "<=", ">", ">="})
# The operator that means the same with its operands swapped.
SWAPPED: Final[dict[str, CompareOp]] = {
    "=": "=",
    "!=": "!=",
    "<": ">",
    "<=": ">=",
    ">": "<",
    ">=": "<=",
}


@dataclass(frozen=True, slots=True)
class Path:
    """``key``, or ``value`` followed by member names and array indexes."""

    root: Literal["key", "value"]
    steps: tuple[Step, ...] = ()


@dataclass(frozen=True, slots=True)
class Const:
    kind: str  # NULL, BOOLEAN, NUMBER or STRING
    value: Scalar


Operand: TypeAlias = Path | Const


@dataclass(frozen=True, slots=True)
class Compare:
    op: CompareOp  # ``<>`` is read as ``!=``
    left: Operand
    right: Operand


@dataclass(frozen=True, slots=True)
class InList:
    operand: Operand
    items: tuple[Const, ...]
    negated: bool = False


@dataclass(frozen=True, slots=True)
class Like:
    operand: Operand
    pattern: str  # as written between the quotes, '' already read as '
    negated: bool = False


@dataclass(frozen=True, slots=True)
class IsNull:
    operand: Operand
    negated: bool = False


@dataclass(frozen=True, slots=True)
class Truth:
    """A bare operand used as a condition: true when it is JSON ``true``."""

    operand: Operand


@dataclass(frozen=True, slots=True)
class Not:
    operand: "Condition"


@dataclass(frozen=True, slots=True)
class And:
    parts: tuple["Condition", ...]


@dataclass(frozen=True, slots=True)
class Or:
    parts: tuple["Condition", ...]


Condition: TypeAlias = Compare | InList | Like | IsNull | Truth | Not | And | Or
Leaf: TypeAlias = Compare | InList | Like | IsNull | Truth


@dataclass(frozen=True, slots=True)
class Query:
    """A parsed query: the region it is on, the text it was parsed from,
    the alias its SELECT form gave (already read as ``value`` in the
    condition), and the condition."""

    region: str
    text: str
    condition: Condition
    alias: str | None = None
