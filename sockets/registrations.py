"""The registration frames of a socket: interests and CQs, and their
images: the current entries, or with ``since`` what changed after it.

docs/protocol.md; every decision is a ``clients`` service or selector.
"""

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from channels.db import database_sync_to_async as db

from cache.exceptions import SinceTooOldError
from clients import selectors, services
from clients.matching import (
    Selector,
    parse_bool,
    parse_policy,
    parse_selector,
    parse_since,
)
from clients.models import Policy
from clients.selectors.images import Cursor
from sockets import protocol

# Entries (or keys) per ``image`` frame, and per database trip.
IMAGE_CHUNK = 500

Send = Callable[[str], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Registered:
    """An interest just registered, as its image is read."""

    region: str
    selector: Selector
    policy: str
    since: int | None


async def interest_register(client_id: uuid.UUID, frame: dict[str, Any]) -> Registered:
    """Register the interest a ``register_interest`` frame asks for."""
    region = protocol.required_str(frame, "region")
    selector = parse_selector(frame)
    is_durable = parse_bool(frame.get("durable"), field="durable")
    policy = parse_policy(frame.get("policy"))
    since = parse_since(frame.get("since"), policy=policy)
    await db(services.interest_register_by_client_id)(
        client_id=client_id,
        region=region,
        selector=selector,
        is_durable=is_durable,
        policy=policy,
        since=since,
    )
    return Registered(region, selector, policy, since)


def since_field(since: int | None) -> dict[str, int]:
    """The ``since`` a registration's reply says back, when it had one."""
    return {} if since is None else {"since": since}


async def send_image(send: Send, req_id: str | None, interest: Registered) -> int:
    """Send the interest's initial image in ``image`` frames of at most
    ``IMAGE_CHUNK`` items; return how many items were sent."""
    if interest.since is not None:
        return await _send_since_image(send, req_id, interest, interest.since)
    field = "keys" if interest.policy == "keys" else "entries"
    count, after = 0, None
    while True:
        items, after = await db(selectors.image_page)(
            region=interest.region,
            selector=interest.selector,
            policy=interest.policy,
            after=after,
            size=IMAGE_CHUNK,
        )
        if items:
            count += len(items)
            await send(
                protocol.reply(
                    "image", req_id, region=interest.region, **{field: items}
                )
            )
        if after is None:
            return count


async def _send_since_image(
    send: Send, req_id: str | None, interest: Registered, since: int
) -> int:
    """Send what changed after ``since`` for the interest, a page per
    ``image`` frame; return how many items were sent."""
    count: int = 0
    after: Cursor | None = None
    while True:
        page = await db(selectors.since_image_page)(
            region=interest.region,
            selector=interest.selector,
            policy=interest.policy,
            since=since,
            after=after,
            size=IMAGE_CHUNK,
        )
        if page.items:
            count += page.items
            await send(
                protocol.reply("image", req_id, region=interest.region, **page.fields)
            )
        if page.following is None:
            return count
        after = page.following


async def interest_unregister(client_id: uuid.UUID, frame: dict[str, Any]) -> None:
    """Unregister the interest an ``unregister_interest`` frame names."""
    region = protocol.required_str(frame, "region")
    selector = parse_selector(frame)
    await db(services.interest_unregister_by_client_id)(
        client_id=client_id, region=region, selector=selector
    )


async def cq_register(
    client_id: uuid.UUID, frame: dict[str, Any]
) -> tuple[Any, int | None]:
    """Register the CQ a ``register_cq`` frame asks for (its checks, in
    order: bad_field, no_such_region, bad_query, since_too_old, are the
    service's); return it and the frame's ``since``."""
    since = parse_since(frame.get("since"))
    cq = await db(services.cq_register_by_client_id)(
        client_id=client_id,
        name=frame.get("name"),
        region=frame.get("region"),
        query=frame.get("query"),
        durable=frame.get("durable"),
        since=since,
    )
    return cq, since


async def send_cq_image(
    send: Send, req_id: str | None, cq: Any, since: int | None = None
) -> int:
    """Send a CQ's current members (with ``since``: what changed after it)
    in ``image`` frames of at most ``IMAGE_CHUNK`` entries; return how many
    were sent."""
    if since is not None:
        return await _send_cq_since_image(send, req_id, cq, since)
    count, after = 0, None
    while True:
        items, after = await db(selectors.cq_image_page)(
            region=cq.region, query=cq.query, after=after, size=IMAGE_CHUNK
        )
        if items:
            count += len(items)
            await send(
                protocol.reply(
                    "image", req_id, region=cq.region, cq=cq.name, entries=items
                )
            )
        if after is None:
            return count


async def _send_cq_since_image(
    send: Send, req_id: str | None, cq: Any, since: int
) -> int:
    count: int = 0
    after: tuple[int, int] | None = None
    while True:
        page = await db(selectors.cq_since_image_page)(
            region=cq.region, query=cq.query, since=since, after=after, size=IMAGE_CHUNK
        )
        if page.items:
            count += page.items
            await send(
                protocol.reply(
                    "image", req_id, region=cq.region, cq=cq.name, **page.fields
                )
            )
        if page.following is None:
            return count
        assert isinstance(page.following, tuple)  # noqa: S101 (a CQ's pages)
        after = page.following


async def cq_close(client_id: uuid.UUID, frame: dict[str, Any]) -> str:
    """Close the CQ a ``close_cq`` frame names; return its name."""
    name = frame.get("name")
    await db(services.cq_close_by_client_id)(client_id=client_id, name=name)
    return str(name)


async def send_resync(send: Send, resync: services.Resync) -> int:
    """The resync after a gap: for each interest and CQ of the client, what
    changed after the gap's ``since``, as ``image`` frames with ``resync:
    true`` and the ``interest`` id or ``cq`` name; return how many entries
    and markers were sent. Where the tombstones no longer reach back to
    ``since`` (``since_too_old``), the full current image is sent instead
    (every entry, without markers for the keys that went)."""
    count = 0
    for target in resync.targets:
        named: dict[str, Any] = (
            {"cq": target.cq}
            if target.cq is not None
            else {"interest": target.interest}
        )
        try:
            count += await _resync_pages(send, target, named, resync.since)
        except SinceTooOldError:
            count += await _resync_pages(send, target, named, None)
    return count


async def _resync_pages(
    send: Send, target: services.ResyncTarget, named: dict[str, Any], since: int | None
) -> int:
    count = 0
    after: Any = None
    while True:
        fields: dict[str, Any]
        if since is None:
            if target.query is not None:
                items, after = await db(selectors.cq_image_page)(
                    region=target.region,
                    query=target.query,
                    after=after,
                    size=IMAGE_CHUNK,
                )
            else:
                assert target.selector is not None  # noqa: S101
                items, after = await db(selectors.image_page)(
                    region=target.region,
                    selector=target.selector,
                    policy=Policy.KEYS_VALUES,
                    after=after,
                    size=IMAGE_CHUNK,
                )
            fields, n = {"entries": items}, len(items)
        else:
            if target.query is not None:
                page = await db(selectors.cq_since_image_page)(
                    region=target.region,
                    query=target.query,
                    since=since,
                    after=after,
                    size=IMAGE_CHUNK,
                )
            else:
                assert target.selector is not None  # noqa: S101
                page = await db(selectors.since_image_page)(
                    region=target.region,
                    selector=target.selector,
                    policy=Policy.KEYS_VALUES,
                    since=since,
                    after=after,
                    size=IMAGE_CHUNK,
                )
            fields, n, after = page.fields, page.items, page.following
        if n:
            count += n
            await send(
                protocol.reply(
                    "image", None, region=target.region, resync=True, **named, **fields
                )
            )
        if after is None:
            return count
