"""A socket's hold on its client: taken by ``hello``, released at its end.

A socket marks its client connected to it through ``client_hello`` and
unmarks it through ``clients_ended``, in a read round
(sockets.delivery_rounds). Daphne cancels an instance still running
``--application-close-timeout`` after its socket closed, and again every
second until it ends, so both run on tasks of their own that no cancel of
the instance reaches: a client left marked would answer 4409 to its next
``hello``. A release that fails all the same is retried by the hub's
reconcile (sockets.wakeups).
"""

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

from channels.db import database_sync_to_async as db

from clients import selectors, services
from sockets import delivery_rounds, protocol

log = logging.getLogger(__name__)

# The detached tasks, held until done: the event loop keeps only weak
# references to its tasks.
_detached: set[asyncio.Future[Any]] = set()


@dataclass(frozen=True, slots=True)
class HeldClient:
    """What a socket keeps of its client: its id and durability. Services
    load the row when they need more, so an idle socket does not carry a
    model instance (docs/decisions/0012-one-wake-hub-per-process.md)."""

    id: uuid.UUID
    is_durable: bool

    @classmethod
    def of(cls, hello: services.HelloResult) -> "HeldClient":
        """What to keep of the client a successful hello attached."""
        client = hello.client
        assert client is not None  # noqa: S101
        return cls(client.id, client.is_durable)


def detach(coro: Coroutine[Any, Any, Any]) -> asyncio.Future[Any]:
    """Run ``coro`` on its own task, which no cancel of the caller reaches."""
    task = asyncio.ensure_future(coro)
    _detached.add(task)
    task.add_done_callback(_detach_done)
    return task


def _detach_done(task: asyncio.Future[Any]) -> None:
    _detached.discard(task)
    if not task.cancelled():
        # Retrieved here, as no one awaits it once its instance is killed:
        # a failed release is retried by the hub's reconcile.
        task.exception()


async def hello(
    *, user: Any, socket_id: str, options: dict[str, Any]
) -> services.HelloResult:
    """Attach the socket to its client (``client_hello``).

    If the caller is cancelled meanwhile the hello still runs to its end,
    and a client it attached is released again.
    """
    attaching = detach(
        db(services.client_hello)(user=user, socket_id=socket_id, options=options)
    )
    try:
        return await asyncio.shield(attaching)
    except asyncio.CancelledError:
        detach(_release_late(attaching, socket_id))
        raise


async def welcome(hello: services.HelloResult, req_id: str | None) -> str:
    """The ``welcome`` frame answering a successful hello."""
    assert hello.client is not None  # noqa: S101
    fields = await db(selectors.welcome_fields)(client=hello.client)
    return protocol.reply(
        "welcome", req_id, pending_events=hello.pending_events, **fields
    )


async def _release_late(hello: asyncio.Future[Any], socket_id: str) -> None:
    """Release what a hello did after its socket's instance was killed."""
    with contextlib.suppress(Exception):
        result = await hello
        if result.client is not None:
            await release(result.client.id, socket_id)


async def release(client_id: uuid.UUID, socket_id: str) -> None:
    """Release the client of a socket that ended, keeping its queue; a
    failure is logged and left to the hub's reconcile."""
    try:
        await delivery_rounds.batcher().release(
            client_id=client_id, socket_id=socket_id
        )
    except Exception:
        log.warning(
            "releasing client %s failed; the hub's reconcile retries",
            client_id,
            exc_info=True,
        )


async def release_detached(client_id: uuid.UUID, socket_id: str) -> None:
    """``release``, run to its end even if the caller is cancelled."""
    await asyncio.shield(detach(release(client_id, socket_id)))


async def close(client_id: uuid.UUID, socket_id: str, *, keep: bool) -> None:
    """Release the client for a ``close`` frame: kept for its timeout, or
    deleted (``keep`` false); run to its end even if the caller is
    cancelled, and a failure raised to the caller."""
    await asyncio.shield(
        detach(
            delivery_rounds.batcher().release(
                client_id=client_id, socket_id=socket_id, keep=keep
            )
        )
    )
