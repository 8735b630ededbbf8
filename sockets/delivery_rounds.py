"""Delivery reads, acks and ends of every socket of a process, one trip a round.

Each streaming socket asks for "the rows after what I sent" once per
batch, acks every few dozen events, and releases its client when it ends.
``database_sync_to_async`` runs a process's database calls on one thread,
in turn, so one hop there per ask does not keep up with many live
sockets. Here the asks that arrive while a round runs wait for the next
round, and a round is one hop:

1. every socket's read in one statement, without a transaction or lock;
2. the round's acks, and the marks of what it read that may conflate, in
   one node-store transaction: the fan-out's appends wait for one write
   lock per round, not one per ack;
3. the ends of the round's sockets (``services.clients_ended``: a socket
   that dropped, or a ``close`` frame's keep or delete), one transaction
   on each database, after the round's acks: what a socket acked before
   it ended stays acked.

docs/decisions/0014-batched-read-and-ack-rounds.md.
"""

import asyncio
import logging
import weakref
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from channels.db import database_sync_to_async as db
from django.conf import settings

from clients import services
from common import trace
from queues import selectors as queue_selectors
from queues import services as queue_services

log = logging.getLogger(__name__)

T = TypeVar("T")
Rows = list[dict[str, Any]]

# One batcher per event loop (tests run several loops in one process).
_batchers: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, ReadBatcher]"
_batchers = weakref.WeakKeyDictionary()


def _run_round(
    asks: list[dict[str, Any]],
    acks: list[tuple[Any, int]],
    releases: list[tuple[Any, str, bool]],
) -> tuple[list[tuple[bool, Any]], tuple[bool, Any], tuple[bool, Any]]:
    """The database thread's side: read every socket's next rows in one
    statement, then apply the acks and mark what may conflate in one
    transaction (if that fails, each read on its own: one failing does not
    fail the others); then release the ended sockets' clients."""
    results, acked = _acks_and_reads(asks, acks)
    released: tuple[bool, Any] = (True, 0)
    if releases:
        try:
            released = (True, services.clients_ended(ended=releases))
        except Exception as exc:
            released = (False, exc)
    return results, acked, released


def _acks_and_reads(
    asks: list[dict[str, Any]], acks: list[tuple[Any, int]]
) -> tuple[list[tuple[bool, Any]], tuple[bool, Any]]:
    """The round's reads and acks, together (``_together``); if that fails,
    the acks alone and then each read on its own (``_apart``), so one
    failing read fails only its socket."""
    shared: dict[tuple[Any, ...], dict[str, Any]] = {}  # one dict per event
    reads = [
        (ask["client_id"], ask["sent_through"], ask["limit"], ask["through"])
        for ask in asks
    ]
    try:
        return _together(reads, acks, shared)
    except Exception:
        log.warning(
            "a round's acks and reads failed together; the acks alone, then each read",
            exc_info=True,
        )
    shared.clear()
    return _apart(reads, acks, shared)


def _together(
    reads: list[tuple[Any, int, int, int | None]],
    acks: list[tuple[Any, int]],
    shared: dict[tuple[Any, ...], dict[str, Any]],
) -> tuple[list[tuple[bool, Any]], tuple[bool, Any]]:
    """The round's reads (one statement), then its acks and the marks of
    what it read that may conflate, in one node-store transaction.

    A row that may conflate (``QueueEntry.conflates``) is marked delivered
    before it is handed to its socket, so no fan-out pass can conflate it
    away: a socket whose read found one reads again inside the transaction,
    its head locked, and the mark commits with that read
    (``queue_ack_and_mark_many``). Every other read is all the round does,
    without a transaction or a lock, so the fan-out does not wait for the
    heads of reads that mark nothing.
    """
    found = queue_selectors.queue_reads_after_many(reads, shared) if reads else []
    every = [events for events, _ in found]
    again = [i for i, (_, conflates) in enumerate(found) if conflates]
    dropped: list[int] = []
    if acks or again:
        dropped = queue_services.queue_ack_and_mark_many(
            acks=acks,
            marking=[reads[i][0] for i in again],
            read=_read_again(reads, again, every, shared) if again else None,
        )
    return [(True, rows) for rows in every], (True, dropped)


def _apart(
    reads: list[tuple[Any, int, int, int | None]],
    acks: list[tuple[Any, int]],
    shared: dict[tuple[Any, ...], dict[str, Any]],
) -> tuple[list[tuple[bool, Any]], tuple[bool, Any]]:
    """The acks in a transaction of their own, then each read on its own
    (one that may conflate marked in a transaction of its own); a read's
    failure is handed to its socket."""
    try:
        acked: tuple[bool, Any] = (
            True,
            queue_services.queue_ack_and_mark_many(acks=acks),
        )
    except Exception as exc:
        return [(False, exc)] * len(reads), (False, exc)
    results: list[tuple[bool, Any]] = []
    for one in reads:
        try:
            results.append((True, _read_alone(one, shared)))
        except Exception as exc:
            results.append((False, exc))
    return results, acked


def _read_alone(
    one: tuple[Any, int, int, int | None],
    shared: dict[tuple[Any, ...], dict[str, Any]],
) -> list[dict[str, Any]]:
    """One socket's read outside a round, marked as a round marks it."""
    ((rows, conflates),) = queue_selectors.queue_reads_after_many([one], shared)
    if conflates:
        every = [rows]
        queue_services.queue_ack_and_mark_many(
            acks=[],
            marking=[one[0]],
            read=_read_again([one], [0], every, shared),
        )
        rows = every[0]
    return rows


def _read_again(
    reads: list[tuple[Any, int, int, int | None]],
    indexes: list[int],
    every: list[list[dict[str, Any]]],
    shared: dict[tuple[Any, ...], dict[str, Any]],
) -> Callable[[], dict[Any, int]]:
    """The ``read`` of a marking transaction: read ``reads[i]`` again for
    each i of ``indexes``, its heads locked, the rows into ``every[i]``;
    return each client's last seq read, to mark delivered."""

    def read() -> dict[Any, int]:
        again = queue_selectors.queue_events_after_many(
            [reads[i] for i in indexes], shared
        )
        marks = {}
        for i, rows in zip(indexes, again, strict=True):
            every[i] = rows
            if rows:
                marks[reads[i][0]] = rows[-1]["seq"]
        return marks

    return read


class ReadBatcher:
    """The rounds of one event loop: what its sockets ask between two
    rounds is the next round."""

    def __init__(self) -> None:
        self.waiting: list[tuple[dict[str, Any], asyncio.Future[Rows]]] = []
        self.acks: list[tuple[tuple[Any, int], asyncio.Future[int]]] = []
        self.releases: list[tuple[tuple[Any, str, bool], asyncio.Future[None]]] = []
        self.running = False

    async def release(
        self, *, client_id: Any, socket_id: str, keep: bool = True
    ) -> None:
        """In the next round, after its acks: release the client the ended
        socket held (``client_disconnected``; ``keep`` false:
        ``client_close`` without keepalive)."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.releases.append(((client_id, socket_id, keep), future))
        self._start()
        await future

    async def ack(self, *, client_id: Any, up_to: int) -> int:
        """In the next round: drop the client's entries with seq <= up_to;
        return how many went (once committed)."""
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.acks.append(((client_id, up_to), future))
        self._start()
        return await future

    def _start(self) -> None:
        if not self.running:
            self.running = True
            asyncio.get_running_loop().create_task(self._rounds())

    async def next_batch(
        self,
        *,
        client_id: Any,
        sent_through: int,
        limit: int,
        through: int | None = None,
    ) -> list[dict[str, Any]]:
        """In the next round: read up to ``limit`` rows after
        ``sent_through`` (through ``through``), recorded delivered if they
        may conflate -- one trip for the socket's batch."""
        ask = {
            "client_id": client_id,
            "sent_through": sent_through,
            "limit": limit,
            "through": through,
        }
        future: asyncio.Future[Rows] = asyncio.get_running_loop().create_future()
        self.waiting.append((ask, future))
        self._start()
        return await future

    async def _rounds(self) -> None:
        round_: list[tuple[dict[str, Any], asyncio.Future[Rows]]] = []
        acks: list[tuple[tuple[Any, int], asyncio.Future[int]]] = []
        releases: list[tuple[tuple[Any, str, bool], asyncio.Future[None]]] = []
        try:
            while self.waiting or self.acks or self.releases:
                round_, self.waiting = self.waiting, []
                acks, self.acks = self.acks, []
                releases, self.releases = self.releases, []
                try:
                    results, acked, released = await db(_run_round)(
                        [ask for ask, _ in round_],
                        [ack for ack, _ in acks],
                        [release for release, _ in releases],
                    )
                except Exception as exc:
                    results = [(False, exc)] * len(round_)
                    acked = released = (False, exc)
                if trace.enabled:
                    _trace_round(results)
                for (_, read), (ok, value) in zip(round_, results, strict=True):
                    _settle(read, ok, value)
                ok, value = acked
                for i, (_, ack) in enumerate(acks):
                    _settle(ack, ok, value[i] if ok else value)
                ok, value = released
                for _, release in releases:
                    _settle(release, ok, None if ok else value)
        except asyncio.CancelledError:  # the loop is shutting down
            for future in _futures(
                round_, self.waiting, acks, self.acks, releases, self.releases
            ):
                future.cancel()
            self.waiting, self.acks, self.releases = [], [], []
            raise
        finally:
            self.running = False


def _trace_round(results: list[tuple[bool, Any]]) -> None:
    seqs = [row["seq"] for ok, rows in results if ok for row in rows]
    if seqs:
        trace.mark("read", settings.DURABLECACHE_NODE_NAME, min(seqs), max(seqs))


def _futures(
    *batches: Iterable[tuple[object, "asyncio.Future[Any]"]],
) -> list["asyncio.Future[Any]"]:
    return [future for batch in batches for _, future in batch]


def _settle(future: "asyncio.Future[T]", ok: bool, value: Any) -> None:
    if future.done():  # the socket stopped waiting
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


def batcher() -> ReadBatcher:
    loop = asyncio.get_running_loop()
    found = _batchers.get(loop)
    if found is None:
        found = _batchers[loop] = ReadBatcher()
    return found
