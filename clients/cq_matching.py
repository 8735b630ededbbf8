"""The fan-out's side of continuous queries: judge each event against the
CQs of its region and give each client its ``cq`` list (docs/protocol.md).

One ``CqSet`` per region holds every hosted client's CQs on it, compiled
once and kept while the region's CQs stay the same; membership before a
change is read from the event's prior value (``Event.prior_value``), so
every host of a queue gives it the same list.

The set's queries are ordered by (client, name), so each client's CQs are
one run of bits in the membership masks. A client's ``cq`` list is a
function of its bits before and after the change, so its stored text is
built once per (before, after) pattern and kept with the set: a stream
of events costs two mask computations and a dictionary lookup per client,
not a step per CQ moved.
"""

import json
import uuid
from typing import Any, NamedTuple

from clients.cq import CqSet, compile_query, membership_op
from clients.selectors import InterestRow as CqRow
from queues.services import CqList

REGION_OPS = {"region_clear", "region_destroy"}
# Ops whose event leaves the key with no value (never a member after).
_GONE = {"destroy", "invalidate"}
# Built ``cq`` lists kept per region set, at most this many (a stream of
# unusual patterns cannot grow it without bound; past it, lists are built
# each time).
MAX_KEPT_LISTS = 65536


def _tag(row: CqRow) -> str:
    """A row's name inside its region's CqSet, unique in the region and
    sorting by (client, CQ name): NUL sorts below every character a CQ
    name may hold (``n`` before ``n-1``)."""
    until = "" if row.until_seq is None else row.until_seq
    return f"{row.client_id.hex}\0{row.selector}\0{until}"


class _Owner(NamedTuple):
    """One client's run of bits in a region's CqSet."""

    client_id: uuid.UUID
    mask: int
    first_bit: int


class _RegionSet:
    """A region's compiled CqSet with what the fan-out derives from it,
    kept while the region's CQ rows stay the same."""

    def __init__(self, region: str, rows: dict[str, CqRow]) -> None:
        self.cq_set = CqSet(
            {
                tag: compile_query(row.query or "", region=region)
                for tag, row in rows.items()
            }
        )
        tags = self.cq_set.names
        self.rows = [rows[tag] for tag in tags]
        self.all_bits = (1 << len(tags)) - 1
        owners: dict[uuid.UUID, _Owner] = {}
        for bit, row in enumerate(self.rows):
            owner = owners.get(row.client_id)
            if owner is None:
                owners[row.client_id] = _Owner(row.client_id, 1 << bit, bit)
            else:
                owners[row.client_id] = owner._replace(mask=owner.mask | 1 << bit)
        self.owners = list(owners.values())
        # (owner's first bit, its bits before, its bits after) -> its list
        self.lists: dict[tuple[int, int, int], CqList] = {}

    def cq_list(self, owner: _Owner, was: int, now: int) -> CqList:
        """The stored ``cq`` list of ``owner`` for a change that moved its
        bits from ``was`` to ``now``."""
        pattern = (owner.first_bit, was, now)
        built = self.lists.get(pattern)
        if built is None:
            pairs: list[tuple[str, str]] = []
            moved, bit = was | now, owner.first_bit
            moved >>= bit
            while moved:
                if moved & 1:
                    op = membership_op(bool(was >> bit & 1), bool(now >> bit & 1))
                    pairs.append((self.rows[bit].selector, op or "update"))
                moved >>= 1
                bit += 1
            built = cq_list(pairs)
            if len(self.lists) < MAX_KEPT_LISTS:
                self.lists[pattern] = built
        return built


# region -> (the rows' definitions, their compiled set): rebuilt when they change.
_sets: dict[str, tuple[frozenset[tuple[str, str]], _RegionSet]] = {}


class RegionCqs:
    """One region's CQs among the hosted clients, judged together."""

    def __init__(self, region: str, rows: list[CqRow]) -> None:
        by_tag = {_tag(row): row for row in rows}
        definitions = frozenset((tag, row.query or "") for tag, row in by_tag.items())
        cached = _sets.get(region)
        if cached is None or cached[0] != definitions:
            cached = _sets[region] = (definitions, _RegionSet(region, by_tag))
        self.set = cached[1]
        # The rows of this pass (a row's ``since_seq`` is not part of its
        # definition): an event counts for a CQ written after it was
        # registered and, once ended, through its end.
        current = [by_tag[_tag(row)] for row in self.set.rows]
        self.bits = [(1 << bit, row) for bit, row in enumerate(current)]
        self.latest_since = max((row.since_seq for row in current), default=0)
        ends = [row.until_seq for row in current if row.until_seq is not None]
        self.earliest_until = min(ends) if ends else None

    def _valid(self, seq: int) -> int:
        """The bits of the CQs that existed when the event ``seq`` was written."""
        if seq > self.latest_since and (
            self.earliest_until is None or seq <= self.earliest_until
        ):
            return self.set.all_bits
        valid = 0
        for bit, row in self.bits:
            if seq > row.since_seq and (row.until_seq is None or seq <= row.until_seq):
                valid |= bit
        return valid

    def judge(self, event: Any) -> dict[uuid.UUID, CqList]:
        """Each client's ``cq`` list for ``event`` (clients without one
        are absent): its CQs that existed when it was written."""
        valid = self._valid(event.seq)
        if not valid:
            return {}
        if event.op in REGION_OPS:
            return self._region_op(event.op, valid)
        cq_set = self.set.cq_set
        was = now = 0
        if event.prior_json is not None:
            was = cq_set.members(event.key, json.loads(event.prior_json)) & valid
        if event.op not in _GONE and event.value_json is not None:
            now = cq_set.members(event.key, json.loads(event.value_json)) & valid
        moved = was | now
        if not moved:
            return {}
        return {
            owner.client_id: self.set.cq_list(owner, was & owner.mask, now & owner.mask)
            for owner in self.set.owners
            if moved & owner.mask
        }

    def _region_op(self, op: str, valid: int) -> dict[uuid.UUID, CqList]:
        lists: dict[uuid.UUID, CqList] = {}
        for owner in self.set.owners:
            names = [
                row.selector
                for bit, row in self.bits
                if bit & owner.mask and bit & valid
            ]
            if names:
                lists[owner.client_id] = cq_list([(name, op) for name in names])
        return lists


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
