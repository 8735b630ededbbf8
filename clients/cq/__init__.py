"""Continuous-query language: parse, compile and judge CQ queries (§3.1).

Pure Python, no Django: the doors and the fan-out call it.
"""

from clients.cq.errors import (
    MAX_COMPARISONS,
    MAX_IN_ITEMS,
    MAX_NESTING,
    MAX_PATH_SEGMENTS,
    MAX_QUERY_CHARS,
    MAX_STRING_CHARS,
    QueryError,
)
from clients.cq.parser import parse_query
from clients.cq.tree import Query

__all__ = [
    "MAX_COMPARISONS",
    "MAX_IN_ITEMS",
    "MAX_NESTING",
    "MAX_PATH_SEGMENTS",
    "MAX_QUERY_CHARS",
    "MAX_STRING_CHARS",
    "Query",
    "QueryError",
    "parse_query",
]
