"""Parse a CQ query (docs/cq.md, "Grammar") into a ``tree.Query``, or refuse it.

Recursive descent over the tokens. ``AND``/``OR`` chains are read in loops,
so only parentheses and ``NOT`` recurse, and they are refused past
``MAX_NESTING``: no query can exhaust the stack, and parsing is linear in
the query's length. Every refusal is a ``QueryError`` with a position.
"""

from typing import Final

from clients.cq import lexer
from clients.cq.errors import (
    MAX_COMPARISONS,
    MAX_IN_ITEMS,
    MAX_NESTING,
    MAX_PATH_SEGMENTS,
    MAX_QUERY_CHARS,
    QueryError,
)
from clients.cq.lexer import Token
from clients.cq.like import check_pattern
from clients.cq.tree import (
    BOOLEAN,
    KEY,
    NULL,
    NUMBER,
    STRING,
    VALUE,
    And,
    Compare,
    CompareOp,
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
    Step,
    Truth,
)

# Words that are keywords in any letter case. The second group is refused
# with a message naming what it would have asked for.
KEYWORDS: Final = frozenset(
    {"SELECT", "FROM", "WHERE", "AND", "OR", "NOT", "IN", "LIKE", "IS"}
    | {"NULL", "TRUE", "FALSE"}
    | {"DISTINCT", "ORDER", "GROUP", "BY", "LIMIT", "HAVING", "JOIN", "AS"}
    | {"UNION", "ON"}
)
_AGGREGATES: Final = frozenset({"COUNT", "SUM", "AVG", "MIN", "MAX"})
_TRAILING: Final = {
    "ORDER": "ORDER BY is not supported",
    "GROUP": "GROUP BY is not supported",
    "LIMIT": "LIMIT is not supported",
    "HAVING": "HAVING is not supported",
    "UNION": "UNION is not supported",
    "JOIN": "joins are not supported",
}
_OPERATORS: Final[dict[str, CompareOp]] = {
    "=": "=",
    "!=": "!=",
    "<>": "!=",
    "<": "<",
    "<=": "<=",
    ">": ">",
    ">=": ">=",
}
_LITERAL_WORDS: Final = {
    "NULL": Const(NULL, None),
    "TRUE": Const(BOOLEAN, True),
    "FALSE": Const(BOOLEAN, False),
}


def keyword(token: Token) -> str | None:
    """Return the keyword a NAME token spells (upper case), if it is one."""
    if token.kind != lexer.NAME or not token.text.isascii():
        return None
    word = token.text.upper()
    return word if word in KEYWORDS else None


def _fail(token: Token, reason: str) -> QueryError:
    return QueryError(token.line, token.column, reason)


def parse_query(text: str, *, region: str) -> Query:
    """Parse ``text`` as a CQ on ``region``; raise QueryError if refused."""
    if not isinstance(text, str):
        raise QueryError(1, 1, "the query must be a string")
    if len(text) > MAX_QUERY_CHARS:
        line = text.count("\n", 0, MAX_QUERY_CHARS) + 1
        column = MAX_QUERY_CHARS - text.rfind("\n", 0, MAX_QUERY_CHARS)
        raise QueryError(
            line, column, f"the query is longer than {MAX_QUERY_CHARS} characters"
        )
    return _Parser(lexer.tokenize(text), text, region).query()


class _Parser:
    def __init__(self, tokens: list[Token], text: str, region: str) -> None:
        self.tokens = tokens
        self.at = 0
        self.text = text
        self.region = region
        self.alias: str | None = None
        self.depth = 0
        self.comparisons = 0

    # -- tokens ---------------------------------------------------------

    def peek(self, ahead: int = 0) -> Token:
        return self.tokens[min(self.at + ahead, len(self.tokens) - 1)]

    def take(self) -> Token:
        token = self.tokens[self.at]
        if token.kind != lexer.END:
            self.at += 1
        return token

    def at_keyword(self, word: str) -> bool:
        return keyword(self.peek()) == word

    def at_punct(self, char: str) -> bool:
        token = self.peek()
        return token.kind == lexer.PUNCT and token.text == char

    def expect_punct(self, char: str, what: str) -> Token:
        if not self.at_punct(char):
            raise self.unexpected(what)
        return self.take()

    def unexpected(self, wanted: str) -> QueryError:
        token = self.peek()
        return _fail(token, f"expected {wanted}, found {lexer.describe(token)}")

    def enter(self, token: Token) -> None:
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise _fail(
                token, f"parentheses and NOT are nested deeper than {MAX_NESTING}"
            )

    # -- the two forms ----------------------------------------------------

    def query(self) -> Query:
        if self.at_keyword("SELECT"):
            self.select_head()
        condition = self.condition()
        self.expect_end()
        return Query(self.region, self.text, condition, self.alias)

    def select_head(self) -> None:
        """Read ``SELECT * FROM /REGION [ALIAS] WHERE`` up to the condition."""
        self.take()
        if self.at_keyword("DISTINCT"):
            raise _fail(self.peek(), "DISTINCT is not supported")
        if not self.at_punct("*"):
            token = self.peek()
            if token.kind == lexer.NAME and token.text.upper() in _AGGREGATES:
                raise _fail(token, "aggregates are not supported")
            raise _fail(token, "only SELECT * is supported (no projections)")
        self.take()
        if not self.at_keyword("FROM"):
            raise self.unexpected("FROM")
        self.take()
        self.from_region()
        self.from_alias()
        if self.at_punct(","):
            raise _fail(self.peek(), "a query reads one region (no second region)")
        self.refuse_trailing()
        if not self.at_keyword("WHERE"):
            raise self.unexpected("WHERE and a condition")
        self.take()

    def from_region(self) -> None:
        token = self.peek()
        if token.kind != lexer.REGION:
            raise self.unexpected("/REGION after FROM")
        if token.text != self.region:
            raise _fail(
                token,
                f"the query reads region /{token.text}, "
                f"but the CQ is registered on region {self.region}",
            )
        self.take()

    def from_alias(self) -> None:
        token = self.peek()
        if token.kind != lexer.NAME:
            return
        word = keyword(token)
        if word == "AS":
            raise _fail(token, "AS is not supported: write FROM /region alias")
        if word is not None:
            return
        if token.text == KEY:
            raise _fail(token, "the alias may not be 'key', which names the key")
        self.alias = token.text
        self.take()

    def expect_end(self) -> None:
        token = self.peek()
        if token.kind == lexer.END:
            return
        self.refuse_trailing()
        if token.kind == lexer.PUNCT and token.text == ")":
            raise _fail(token, "unmatched ')'")
        raise self.unexpected("AND, OR or the end of the query")

    def refuse_trailing(self) -> None:
        word = keyword(self.peek())
        if word in _TRAILING:
            raise _fail(self.peek(), _TRAILING[word])

    # -- conditions ---------------------------------------------------------

    def condition(self) -> Condition:
        parts = [self.conjunction()]
        while self.at_keyword("OR"):
            self.take()
            parts.append(self.conjunction())
        return parts[0] if len(parts) == 1 else Or(tuple(parts))

    def conjunction(self) -> Condition:
        parts = [self.negation()]
        while self.at_keyword("AND"):
            self.take()
            parts.append(self.negation())
        return parts[0] if len(parts) == 1 else And(tuple(parts))

    def negation(self) -> Condition:
        nots = 0
        while self.at_keyword("NOT"):
            self.enter(self.take())
            nots += 1
        condition = self.primary()
        self.depth -= nots
        for _ in range(nots):
            condition = Not(condition)
        return condition

    def primary(self) -> Condition:
        if self.at_punct("("):
            self.enter(self.take())
            condition = self.condition()
            self.expect_punct(")", "')' or AND or OR")
            self.depth -= 1
            return condition
        return self.predicate()

    def predicate(self) -> Condition:
        start = self.peek()
        left = self.operand()
        self.comparisons += 1
        if self.comparisons > MAX_COMPARISONS:
            raise _fail(start, f"the query has more than {MAX_COMPARISONS} comparisons")
        token = self.peek()
        if token.kind == lexer.OPERATOR:
            self.take()
            return Compare(_OPERATORS[token.text], left, self.operand())
        word = keyword(token)
        negated = word == "NOT"
        if negated:
            self.take()
            word = keyword(self.peek())
            if word not in ("IN", "LIKE"):
                raise self.unexpected("IN or LIKE after NOT")
        if word == "IN":
            self.take()
            return InList(left, self.in_items(), negated)
        if word == "LIKE":
            self.take()
            return Like(left, self.like_pattern(), negated)
        if word == "IS":
            self.take()
            return self.is_null(left)
        return self.bare(start, left)

    def bare(self, start: Token, operand: Operand) -> Condition:
        if isinstance(operand, Const) and operand.kind != BOOLEAN:
            raise _fail(start, f"a {operand.kind} literal is not a condition")
        return Truth(operand)

    def is_null(self, operand: Operand) -> IsNull:
        negated = self.at_keyword("NOT")
        if negated:
            self.take()
        if not self.at_keyword("NULL"):
            raise self.unexpected("NULL after IS" + (" NOT" if negated else ""))
        self.take()
        return IsNull(operand, negated)

    def in_items(self) -> tuple[Const, ...]:
        self.expect_punct("(", "'(' and a list of literals after IN")
        if self.at_punct(")"):
            raise _fail(self.peek(), "an IN list needs at least one literal")
        items: list[Const] = []
        while True:
            token = self.peek()
            if len(items) == MAX_IN_ITEMS:
                raise _fail(token, f"an IN list has more than {MAX_IN_ITEMS} items")
            item = self.operand()
            if not isinstance(item, Const):
                raise _fail(token, "an IN list holds literals only")
            items.append(item)
            if not self.at_punct(","):
                break
            self.take()
        self.expect_punct(")", "',' or ')' in the IN list")
        return tuple(items)

    def like_pattern(self) -> str:
        token = self.peek()
        if token.kind != lexer.STRING:
            raise self.unexpected("a 'pattern' string literal after LIKE")
        self.take()
        problem = check_pattern(token.text)
        if problem:
            raise _fail(token, problem)
        return token.text

    # -- operands -----------------------------------------------------------

    def operand(self) -> Operand:
        token = self.peek()
        if token.kind == lexer.NUMBER:
            self.take()
            return Const(NUMBER, token.value)
        if token.kind == lexer.STRING:
            self.take()
            return Const(STRING, token.text)
        if token.kind != lexer.NAME:
            raise self.unexpected("a path or a literal")
        return self.named(token)

    def named(self, token: Token) -> Operand:
        if self.peek(1).kind == lexer.PUNCT and self.peek(1).text == "(":
            if token.text.upper() in _AGGREGATES:
                raise _fail(token, "aggregates are not supported")
            raise _fail(token, f"functions are not supported (found {token.text}())")
        word = keyword(token)
        if word in _LITERAL_WORDS:
            self.take()
            return _LITERAL_WORDS[word]
        if word is not None:
            raise self.unexpected("a path or a literal")
        if token.text == KEY:
            self.take()
            if self.at_punct(".") or self.at_punct("["):
                raise _fail(self.peek(), "key is a string: it takes no . or [ ]")
            return Path(KEY)
        if token.text in (VALUE, self.alias):
            self.take()
            return Path(VALUE, self.steps())
        names = f"key, value or {self.alias}" if self.alias else "key or value"
        raise _fail(token, f"unknown name {token.text!r}: a path starts with {names}")

    def steps(self) -> tuple[Step, ...]:
        steps: list[Step] = []
        while self.at_punct(".") or self.at_punct("["):
            token = self.take()
            if len(steps) == MAX_PATH_SEGMENTS:
                raise _fail(token, f"a path has more than {MAX_PATH_SEGMENTS} segments")
            steps.append(self.member() if token.text == "." else self.index())
        return tuple(steps)

    def member(self) -> str:
        token = self.peek()
        if token.kind == lexer.NAME:
            self.take()
            if self.at_punct("("):
                raise _fail(token, f"methods are not supported (found {token.text}())")
            return token.text
        if token.kind == lexer.NUMBER:
            raise _fail(
                token,
                f"write [{token.text}] for an array index "
                f"or ['{token.text}'] for a member named {token.text}",
            )
        raise self.unexpected("a member name after '.'")

    def index(self) -> Step:
        token = self.peek()
        if token.kind == lexer.STRING:
            step: Step = token.text
        elif token.kind == lexer.NUMBER and isinstance(token.value, int):
            if token.text.startswith("-"):
                raise _fail(token, "an array index may not be negative")
            step = token.value
        else:
            raise self.unexpected("an array index or a 'member name' inside [ ]")
        self.take()
        self.expect_punct("]", "']'")
        return step
