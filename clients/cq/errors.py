"""The one error of the CQ language and the limits a query must stay within.

The websocket and REST doors answer a ``QueryError`` with ``bad_query``
; docs/cq.md, "Refusals", lists the messages.
"""

MAX_QUERY_CHARS = 4096
MAX_COMPARISONS = 64
MAX_NESTING = 32
MAX_IN_ITEMS = 64
MAX_PATH_SEGMENTS = 16
MAX_STRING_CHARS = 512


class QueryError(Exception):
    """A query the server refuses, with the 1-based line and column of the
    place that made it refuse and the reason, in words."""

    def __init__(self, line: int, column: int, reason: str) -> None:
        super().__init__(f"line {line}, column {column}: {reason}")
        self.line = line
        self.column = column
        self.reason = reason
