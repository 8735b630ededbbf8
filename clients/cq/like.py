"""LIKE patterns: ``%`` any run, ``_`` one character, ``\\`` escapes the next.

Matching never backtracks. The pattern is cut at each ``%`` into segments;
the first must match at the start, the last at the end, and each one
between at its leftmost place after the previous one (leftmost is always
safe: it leaves the most room for the rest). A segment without ``_`` is
found with ``str.find``; one with ``_`` with the bit-parallel Shift-And
scan. Each character of the value is looked at a bounded number of times,
so a match costs time linear in the value's length, whatever the pattern.
"""

from collections.abc import Callable

ESCAPE = "\\"
_ANY_RUN = "%"
_ONE = "_"


def check_pattern(pattern: str) -> str | None:
    """Return why ``pattern`` is not a valid LIKE pattern, or None."""
    at = 0
    while at < len(pattern):
        if pattern[at] == ESCAPE:
            if at + 1 == len(pattern):
                return "a LIKE pattern may not end with a lone \\ (write \\\\)"
            at += 1
        at += 1
    return None


class _Segment:
    """A run of the pattern between two ``%``: characters and ``_``."""

    def __init__(self, chars: tuple[str | None, ...]) -> None:
        self.size = len(chars)  # None in ``chars`` stands for ``_``
        # The fixed stretches, as (offset, text).
        self.pieces: list[tuple[int, str]] = []
        start = 0
        for at, char in enumerate((*chars, None)):
            if char is None:
                if at > start:
                    text = "".join(c for c in chars[start:at] if c is not None)
                    self.pieces.append((start, text))
                start = at + 1
        self.plain = None if None in chars else "".join(c for c in chars if c)
        # Shift-And tables: bit i of masks[c] is set when position i of the
        # segment accepts c; ``wild`` has the bits of the ``_`` positions.
        self.wild = sum(1 << at for at, char in enumerate(chars) if char is None)
        self.masks: dict[str, int] = {}
        for at, char in enumerate(chars):
            if char is not None:
                self.masks[char] = self.masks.get(char, self.wild) | 1 << at

    def matches_at(self, value: str, at: int) -> bool:
        if at < 0 or at + self.size > len(value):
            return False
        return all(value.startswith(text, at + offset) for offset, text in self.pieces)

    def find(self, value: str, start: int) -> int:
        """Return the leftmost place at or after ``start`` where the segment
        matches, or -1."""
        if self.plain is not None:
            return value.find(self.plain, start)
        return self.shift_and(value, start)

    def shift_and(self, value: str, start: int) -> int:
        """Scan ``value`` once from ``start``: bit i of ``state`` says the
        first i+1 positions of the segment match the text ending here."""
        masks, wild = self.masks, self.wild
        goal = 1 << (self.size - 1)
        state = 0
        for at in range(start, len(value)):
            state = ((state << 1) | 1) & masks.get(value[at], wild)
            if state & goal:
                return at - self.size + 1
        return -1


def _segments(pattern: str) -> list[_Segment]:
    """Cut a checked pattern at each unescaped ``%``."""
    segments: list[_Segment] = []
    chars: list[str | None] = []
    at = 0
    while at < len(pattern):
        char = pattern[at]
        if char == ESCAPE:
            at += 1
            chars.append(pattern[at])
        elif char == _ANY_RUN:
            segments.append(_Segment(tuple(chars)))
            chars = []
        else:
            chars.append(None if char == _ONE else char)
        at += 1
    segments.append(_Segment(tuple(chars)))
    return segments


def compile_like(pattern: str) -> Callable[[str], bool]:
    """Return a function telling whether a whole string matches ``pattern``
    (checked with ``check_pattern`` first), case-sensitively."""
    segments = _segments(pattern)
    if len(segments) == 1:
        only = segments[0]
        exact = only.plain
        if exact is not None:
            return exact.__eq__
        return lambda value: len(value) == only.size and only.matches_at(value, 0)
    first, *middle, last = segments
    middle = [segment for segment in middle if segment.size]

    def matches(value: str) -> bool:
        if not first.matches_at(value, 0):
            return False
        at = first.size
        for segment in middle:
            found = segment.find(value, at)
            if found < 0:
                return False
            at = found + segment.size
        tail = len(value) - last.size
        return tail >= at and last.matches_at(value, tail)

    return matches
