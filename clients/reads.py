"""Delivery reads of every socket of a process, in one trip per round.

Each streaming socket asks for "the rows after what I sent" once per
batch. Done one by one, each ask is a hop from the event loop to the
database thread and back (``database_sync_to_async``), and those hops are
serial on that one thread: with 100 live sockets and 100 writes/s that was
10,000 hops a second, more than the thread can turn, so sockets fell
behind and the backlog became latency (docs/performance.md). Here the
asks that arrive while a round runs wait for the next round, and a round
runs all of them in one hop: the same statements, one thread switch.
"""

import asyncio
import weakref
from typing import Any

from channels.db import database_sync_to_async as db

from queues import selectors as queue_selectors
from queues import services as queue_services

# One batcher per event loop (tests run several loops in one process).
_batchers: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, ReadBatcher]"
_batchers = weakref.WeakKeyDictionary()


def _run_round(asks: list[dict[str, Any]]) -> list[tuple[bool, Any]]:
    """The database thread's side: record in one statement what every
    socket sent, then read each socket's next rows (each read on its own:
    one failing does not fail the others)."""
    marks = {
        ask["client_id"]: ask["sent_through"]
        for ask in asks
        if ask["sent_through"] > ask["marked_through"]
    }
    try:
        queue_services.queue_mark_delivered_many(marks)
    except Exception as exc:
        return [(False, exc)] * len(asks)
    results: list[tuple[bool, Any]] = []
    for ask in asks:
        try:
            rows = queue_selectors.queue_events_after(
                client_id=ask["client_id"],
                after=ask["sent_through"],
                limit=ask["limit"],
                through=ask["through"],
            )
            results.append((True, rows))
        except Exception as exc:  # handed to the asking socket
            results.append((False, exc))
    return results


class ReadBatcher:
    def __init__(self) -> None:
        self.waiting: list[tuple[dict[str, Any], asyncio.Future[Any]]] = []
        self.running = False

    async def next_batch(
        self,
        *,
        client_id: Any,
        sent_through: int,
        marked_through: int,
        limit: int,
        through: int | None = None,
    ) -> list[dict[str, Any]]:
        """In the next round: record ``sent_through`` as delivered (unless
        ``marked_through`` has it already), then read up to ``limit`` rows
        after it (through ``through``) -- one trip for the socket's batch."""
        ask = {
            "client_id": client_id,
            "sent_through": sent_through,
            "marked_through": marked_through,
            "limit": limit,
            "through": through,
        }
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.waiting.append((ask, future))
        if not self.running:
            self.running = True
            asyncio.get_running_loop().create_task(self._rounds())
        return await future

    async def _rounds(self) -> None:
        round_: list[tuple[dict[str, Any], asyncio.Future[Any]]] = []
        try:
            while self.waiting:
                round_, self.waiting = self.waiting, []
                try:
                    results = await db(_run_round)([ask for ask, _ in round_])
                except Exception as exc:
                    results = [(False, exc)] * len(round_)
                for (_, future), (ok, value) in zip(round_, results, strict=True):
                    if future.done():  # the socket stopped waiting
                        continue
                    if ok:
                        future.set_result(value)
                    else:
                        future.set_exception(value)
        except asyncio.CancelledError:  # the loop is shutting down
            for _, future in [*round_, *self.waiting]:
                future.cancel()
            self.waiting = []
            raise
        finally:
            self.running = False


def batcher() -> ReadBatcher:
    loop = asyncio.get_running_loop()
    found = _batchers.get(loop)
    if found is None:
        found = _batchers[loop] = ReadBatcher()
    return found
