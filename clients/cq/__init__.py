"""Continuous-query language: parse, compile and judge CQ queries (§3.1).

Pure Python, no Django: the doors and the fan-out call it. docs/cq.md
describes the language, its evaluation rules, limits and messages.

    query = compile_query("SELECT * FROM /orders o WHERE o.qty > 5", region="orders")
    query.cq_op("k1", None, {"qty": 7})            # "create"
    CqSet({"big": query}).judge("k1", {"qty": 7}, None)  # [("big", "destroy")]
"""

from clients.cq.canonical import canonical_text, fingerprint, normalize, same_query
from clients.cq.compile import (
    REGION_OPS,
    CompiledQuery,
    CqOp,
    RegionOp,
    compile_query,
    membership_op,
)
from clients.cq.errors import (
    MAX_COMPARISONS,
    MAX_IN_ITEMS,
    MAX_NESTING,
    MAX_PATH_SEGMENTS,
    MAX_QUERY_CHARS,
    MAX_STRING_CHARS,
    QueryError,
)
from clients.cq.judge import CqSet, judge_many
from clients.cq.parser import parse_query
from clients.cq.tree import Query

__all__ = [
    "MAX_COMPARISONS",
    "MAX_IN_ITEMS",
    "MAX_NESTING",
    "MAX_PATH_SEGMENTS",
    "MAX_QUERY_CHARS",
    "MAX_STRING_CHARS",
    "REGION_OPS",
    "CompiledQuery",
    "CqOp",
    "CqSet",
    "Query",
    "QueryError",
    "RegionOp",
    "canonical_text",
    "compile_query",
    "fingerprint",
    "judge_many",
    "membership_op",
    "normalize",
    "parse_query",
    "same_query",
]
