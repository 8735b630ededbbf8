"""Split a CQ query into tokens, each with its 1-based line and column.

The lexer knows the shape of every token of the language (docs/cq.md, "Grammar")
and refuses, with its position, any character that cannot start one.
"""

from dataclasses import dataclass
from typing import Final

from clients.cq.errors import MAX_STRING_CHARS, QueryError

NAME: Final = "name"
NUMBER: Final = "number"
STRING: Final = "string"
REGION: Final = "region"
OPERATOR: Final = "operator"
PUNCT: Final = "punct"
END: Final = "end"

_WHITESPACE = frozenset(" \t\r\n")
_PUNCT = frozenset("()[],.*")
_REGION_CHARS = frozenset(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._:-"
)
_DIGITS = frozenset("0123456789")
_BIND_STARTS = frozenset("$?")


@dataclass(frozen=True, slots=True)
class Token:
    kind: str
    text: str  # the token as written (for strings: without quotes, unescaped)
    value: int | float | None  # the number of a NUMBER token
    line: int
    column: int


def describe(token: Token) -> str:
    """Say what a token is, for an error message."""
    if token.kind == END:
        return "the end of the query"
    if token.kind == STRING:
        return "a string literal"
    if token.kind == REGION:
        return f"region /{token.text}"
    return f"'{token.text}'"


def _is_name_start(char: str) -> bool:
    return char == "_" or char.isalpha()


def _is_name_char(char: str) -> bool:
    return char == "_" or char.isalnum()


def _show(char: str) -> str:
    return f"'{char}'" if char.isprintable() else f"U+{ord(char):04X}"


class _Lexer:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.line = 1
        self.line_start = 0
        self.tokens: list[Token] = []

    def column(self, pos: int) -> int:
        return pos - self.line_start + 1

    def fail(self, pos: int, reason: str) -> QueryError:
        return QueryError(self.line, self.column(pos), reason)

    def emit(
        self, kind: str, start: int, text: str, value: int | float | None = None
    ) -> None:
        self.tokens.append(Token(kind, text, value, self.line, self.column(start)))

    def run(self) -> list[Token]:
        text = self.text
        while self.pos < len(text):
            char = text[self.pos]
            if char in _WHITESPACE:
                self.pos += 1
                if char == "\n":
                    self.line += 1
                    self.line_start = self.pos
            elif _is_name_start(char):
                self.name()
            elif char in _DIGITS or (char == "-" and self.peek(1) in _DIGITS):
                self.number()
            elif char == "'":
                self.string()
            elif char in _PUNCT:
                self.emit(PUNCT, self.pos, char)
                self.pos += 1
            elif char in "=<>!":
                self.operator()
            elif char == "/":
                self.region()
            else:
                raise self.fail(self.pos, self.refusal(char))
        self.emit(END, self.pos, "")
        return self.tokens

    def peek(self, ahead: int) -> str:
        at = self.pos + ahead
        return self.text[at] if at < len(self.text) else ""

    def refusal(self, char: str) -> str:
        if char in _BIND_STARTS or (char == ":" and _is_name_start(self.peek(1))):
            return f"bind parameters are not supported (found {_show(char)})"
        if char == '"':
            return "double quotes are not supported: strings use single quotes"
        return f"unexpected character {_show(char)}"

    def name(self) -> None:
        start = self.pos
        end = start + 1
        while end < len(self.text) and _is_name_char(self.text[end]):
            end += 1
        self.emit(NAME, start, self.text[start:end])
        self.pos = end

    def digits(self, at: int) -> int:
        """Return the position after the run of ASCII digits starting at ``at``."""
        while at < len(self.text) and self.text[at] in _DIGITS:
            at += 1
        return at

    def number(self) -> None:
        """Read a JSON number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?"""
        text, start = self.text, self.pos
        first = start + 1 if text[start] == "-" else start
        at = self.digits(first)
        if text[first] == "0" and at - first > 1:
            raise self.fail(start, "a number may not start with 0 (write 7, not 07)")
        exact = True
        if self.char(at) == ".":
            after = self.digits(at + 1)
            if after == at + 1:
                raise self.fail(start, "a decimal point must be followed by digits")
            at, exact = after, False
        if self.char(at) in ("e", "E"):
            sign = at + 2 if self.char(at + 1) in ("+", "-") else at + 1
            after = self.digits(sign)
            if after == sign:
                raise self.fail(start, "an exponent must have digits")
            at, exact = after, False
        if _is_name_char(self.char(at)) or self.char(at) == ".":
            raise self.fail(start, "malformed number")
        self.emit(NUMBER, start, text[start:at], self.number_value(start, at, exact))
        self.pos = at

    def number_value(self, start: int, end: int, exact: bool) -> int | float:
        written = self.text[start:end]
        try:
            value = int(written) if exact else float(written)
        except ValueError:  # more digits than int() takes
            raise self.fail(start, "number out of range") from None
        if value in (float("inf"), float("-inf")):
            raise self.fail(start, "number out of range")
        return value

    def char(self, at: int) -> str:
        return self.text[at] if at < len(self.text) else ""

    def string(self) -> None:
        """Read a 'string' where '' stands for one quote; it may span lines."""
        text, start = self.text, self.pos
        line, column = self.line, self.column(start)
        pieces: list[str] = []
        at = start + 1
        while True:
            close = text.find("'", at)
            if close < 0:
                raise QueryError(line, column, "unterminated string literal")
            pieces.append(text[at:close])
            if self.char(close + 1) != "'":
                break
            pieces.append("'")
            at = close + 2
        value = "".join(pieces)
        if len(value) > MAX_STRING_CHARS:
            raise QueryError(
                line,
                column,
                f"string literal is longer than {MAX_STRING_CHARS} characters",
            )
        self.tokens.append(Token(STRING, value, None, line, column))
        self.skip_to(close + 1)

    def skip_to(self, end: int) -> None:
        """Move to ``end``, counting the line breaks passed over."""
        newline = self.text.rfind("\n", self.pos, end)
        if newline >= 0:
            self.line += self.text.count("\n", self.pos, end)
            self.line_start = newline + 1
        self.pos = end

    def operator(self) -> None:
        pair = self.text[self.pos : self.pos + 2]
        if pair in ("!=", "<>", "<=", ">="):
            self.emit(OPERATOR, self.pos, pair)
            self.pos += 2
        elif pair[0] == "!":
            raise self.fail(self.pos, "unexpected character '!' (write != or NOT)")
        else:
            self.emit(OPERATOR, self.pos, pair[0])
            self.pos += 1

    def region(self) -> None:
        start = self.pos
        end = start + 1
        while end < len(self.text) and self.text[end] in _REGION_CHARS:
            end += 1
        if end == start + 1:
            raise self.fail(start, "expected a region name after '/'")
        self.emit(REGION, start, self.text[start + 1 : end])
        self.pos = end


def tokenize(text: str) -> list[Token]:
    """Return the tokens of ``text``, ending with one END token."""
    return _Lexer(text).run()
