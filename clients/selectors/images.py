"""The pages of a ``since`` image: what changed after a seq, for an
interest or a CQ (docs/protocol.md, "Catching up by key").

A page is read by the entries' (region, seq, id) index, or for a key list
by its keys, and is at most one ``image`` frame: the door sends each page
as it comes, so an image is never held whole. The last page checks again
that the region's tombstones still cover ``since``: one pruned while the
pages were read may have been the only word that its key went.
"""

from typing import Any, NamedTuple

from cache import selectors as cache_selectors
from cache.selectors import ChangedEntry
from clients.cq import compile_query
from clients.matching import Selector, key_matches
from clients.models import InterestKind, Policy

# Where the next page goes on from: an index into a key list, or the
# (seq, id) of the last row read.
Cursor = int | tuple[int, int]


class SincePage(NamedTuple):
    """One page: its ``image`` frame's fields, how many items they hold,
    and the cursor of the next page (None: the last page)."""

    fields: dict[str, list[Any]]
    items: int
    following: Cursor | None


def since_image_page(
    *,
    region: str,
    selector: Selector,
    policy: str,
    since: int,
    after: Cursor | None,
    size: int,
) -> SincePage:
    """One page of an interest's ``since`` image: its keys changed after
    ``since``, a live one as {key, value, version}, a destroyed one as
    {key, version, destroyed: true}; with policy ``keys``, the live keys
    under ``keys`` and the destroyed ones under ``destroyed``."""
    rows, following = _changed_page(region, selector, since, after, size)
    if following is None:
        cache_selectors.since_check(region=region, since=since)
    if policy == Policy.KEYS:
        keys = [r.key for r in rows if not r.is_destroyed]
        gone = [r.key for r in rows if r.is_destroyed]
        return SincePage({"keys": keys, "destroyed": gone}, len(rows), following)
    entries = [_tombstone(r) if r.is_destroyed else _entry(r) for r in rows]
    return SincePage({"entries": entries}, len(entries), following)


def _changed_page(
    region: str, selector: Selector, since: int, after: Cursor | None, size: int
) -> tuple[list[ChangedEntry], Cursor | None]:
    """The selector's entries changed after ``since`` among the next
    ``size`` a page reads, and the cursor after them."""
    if selector.kind == InterestKind.KEY:
        start = after if isinstance(after, int) else 0
        keys = list(selector.values[start : start + size])
        rows = cache_selectors.entries_changed_for_keys(
            region=region, keys=keys, since=since
        )
        end = start + size
        return rows, (end if end < len(selector.values) else None)
    position = after if isinstance(after, tuple) else None
    rows = cache_selectors.entries_changed_after(
        region=region, since=since, after=position, limit=size
    )
    following = rows[-1].position if len(rows) == size else None
    if selector.kind == InterestKind.REGEX:
        rows = [
            r for r in rows if key_matches(selector.kind, selector.values[0], r.key)
        ]
    return rows, following


def cq_since_image_page(
    *, region: str, query: str, since: int, after: tuple[int, int] | None, size: int
) -> SincePage:
    """One page of a CQ's ``since`` image: every key of the region changed
    after ``since``, a member as {key, value, version}, a live non-member
    as {key, version, cq_op: "destroy"} (not in the result now), a
    destroyed key as {key, version, destroyed: true}."""
    compiled = compile_query(query, region=region)
    rows = cache_selectors.entries_changed_after(
        region=region, since=since, after=after, limit=size
    )
    entries = []
    for r in rows:
        if r.is_destroyed:
            entries.append(_tombstone(r))
        elif compiled.is_member(r.key, r.value):
            entries.append(_entry(r))
        else:
            entries.append({"key": r.key, "version": r.version, "cq_op": "destroy"})
    following = rows[-1].position if len(rows) == size else None
    if following is None:
        cache_selectors.since_check(region=region, since=since)
    return SincePage({"entries": entries}, len(entries), following)


def _entry(row: ChangedEntry) -> dict[str, Any]:
    return {"key": row.key, "value": row.value, "version": row.version}


def _tombstone(row: ChangedEntry) -> dict[str, Any]:
    return {"key": row.key, "version": row.version, "destroyed": True}
