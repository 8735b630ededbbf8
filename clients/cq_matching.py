"""The fan-out's side of continuous queries: judge each event against the
CQs of its region and give each client its ``cq`` list (docs/protocol.md).

One ``CqSet`` per region holds every hosted client's CQs on it, compiled
once and kept while the region's CQs stay the same; membership before a
change is read from the event's prior value (``Event.prior_value``), so
every host of a queue gives it the same list.
"""

import json
import uuid
from collections import defaultdict
from typing import Any

from clients.cq import CqSet, compile_query
from clients.selectors import InterestRow as CqRow
from queues.services import CqList

REGION_OPS = {"region_clear", "region_destroy"}
# Ops whose event leaves the key with no value (never a member after).
_GONE = {"destroy", "invalidate"}

# region -> (the rows' definitions, their CqSet): rebuilt when they change.
_sets: dict[str, tuple[frozenset[tuple[str, str]], CqSet]] = {}


def _tag(row: CqRow) -> str:
    """A row's name inside its region's CqSet, unique in the region (a
    CQ's row carries its name as ``selector``)."""
    until = "" if row.until_seq is None else row.until_seq
    return f"{row.client_id.hex}/{row.selector}/{until}"


class RegionCqs:
    """One region's CQs among the hosted clients, judged together."""

    def __init__(self, region: str, rows: list[CqRow]) -> None:
        self.rows = {_tag(row): row for row in rows}
        definitions = frozenset(
            (tag, row.query or "") for tag, row in self.rows.items()
        )
        cached = _sets.get(region)
        if cached is None or cached[0] != definitions:
            queries = {
                tag: compile_query(row.query or "", region=region)
                for tag, row in self.rows.items()
            }
            cached = _sets[region] = (definitions, CqSet(queries))
        self.cq_set = cached[1]

    def judge(self, event: Any) -> dict[uuid.UUID, CqList]:
        """Each client's ``cq`` list for ``event`` (clients without one
        are absent): its CQs that existed when it was written."""
        seq = event.seq
        if event.op in REGION_OPS:
            moved = [(tag, event.op) for tag in self.rows]
        else:
            before = None if event.prior_json is None else json.loads(event.prior_json)
            after = None
            if event.op not in _GONE and event.value_json is not None:
                after = json.loads(event.value_json)
            moved = self.cq_set.judge(event.key, before, after)
        lists: dict[uuid.UUID, list[tuple[str, str]]] = defaultdict(list)
        for tag, op in moved:
            row = self.rows[tag]
            if seq > row.since_seq and (row.until_seq is None or seq <= row.until_seq):
                lists[row.client_id].append((row.selector, op))
        return {client_id: cq_list(pairs) for client_id, pairs in lists.items()}


def cq_list(pairs: list[tuple[str, str]]) -> CqList:
    """The stored form of a ``cq`` list, sorted by name."""
    pairs = sorted(pairs)
    return CqList(
        json.dumps(
            [{"name": name, "cq_op": op} for name, op in pairs],
            separators=(",", ":"),
            ensure_ascii=False,
        ),
        all(op == "update" for _, op in pairs),
    )
