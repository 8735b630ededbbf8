"""The ``put`` frames of every socket of a process, one transaction a round.

A socket may have up to ``MAX_PUTS_IN_FLIGHT`` puts in flight: its next
``put`` frame is handled without waiting for the previous one's
``written``, any other frame waits until every earlier put is answered
(``PutPipeline``). The puts of the process's sockets that arrive while a
round is being written wait for the next one, and a round is one hop to the
database thread and one transaction
(``cache.services.entries_put_many``): the fixed cost of a write (the hop,
the transaction, the lock of the event log) is shared by every write of
the round (docs/decisions/0011-group-commit.md). Puts are written in the
order they arrived, and each socket's answers go out in the order of its
frames.
"""

import asyncio
import collections
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

from cache import services as cache_services
from cache.services import WrittenEvent
from common import threads
from common.errors import DomainError

# A socket with this many puts unanswered is not read until one is: a
# writer cannot queue unbounded work on the node.
MAX_PUTS_IN_FLIGHT = 1000

# Loop turns a round waits for more puts while they keep arriving.
GATHER_YIELDS = 4

# One batcher per event loop (tests run several loops in one process).
_batchers: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, WriteBatcher]"
_batchers = weakref.WeakKeyDictionary()

Put = tuple[str, str, Any]  # region, key, value
Answer = Callable[[str | None, str, "WrittenEvent | DomainError"], Awaitable[None]]


class WriteBatcher:
    def __init__(self) -> None:
        self.waiting: list[tuple[Put, asyncio.Future[Any]]] = []
        self.running = False
        self.rounds: asyncio.Task[None] | None = None  # held: not collected

    def submit(self, *, region: str, key: str, value: Any) -> "asyncio.Future[Any]":
        """Write ``key`` in the next round: a future of its event once
        committed, or of the DomainError that refused it; it fails if the
        round failed."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self.waiting.append(((region, key, value), future))
        if not self.running:
            self.running = True
            self.rounds = loop.create_task(self._rounds())
        return future

    async def _gather(self) -> None:
        """Let the put frames already read from the sockets join the
        round: yield to the loop while the waiting list still grows (at
        most ``GATHER_YIELDS`` times; no timer, so a lone put waits only a
        few loop turns). A round started at the first put of a burst would
        hold that put alone and leave the rest of the burst to the next,
        and a round's fixed cost (the thread hop, the transaction, the
        fan-out doorbell) is most of a put's
        (docs/decisions/0011-group-commit.md)."""
        seen = -1
        for _ in range(GATHER_YIELDS):
            if len(self.waiting) == seen:
                return
            seen = len(self.waiting)
            await asyncio.sleep(0)

    async def _rounds(self) -> None:
        size = cache_services.MAX_PUTS_PER_ROUND
        round_: list[tuple[Put, asyncio.Future[Any]]] = []
        try:
            while self.waiting:
                await self._gather()
                round_, self.waiting = self.waiting[:size], self.waiting[size:]
                try:
                    results = await threads.writes.call(
                        cache_services.entries_put_many,
                        puts=[put for put, _ in round_],
                    )
                except Exception as exc:  # the round failed: each put says so
                    for _, future in round_:
                        if not future.done():
                            future.set_exception(exc)
                    continue
                for (_, future), result in zip(round_, results, strict=True):
                    if not future.done():  # the socket stopped waiting
                        future.set_result(result)
        except asyncio.CancelledError:  # the loop is shutting down
            for _, future in [*round_, *self.waiting]:
                future.cancel()
            self.waiting = []
            raise
        finally:
            self.running = False


def batcher() -> WriteBatcher:
    loop = asyncio.get_running_loop()
    found = _batchers.get(loop)
    if found is None:
        found = _batchers[loop] = WriteBatcher()
    return found


class PutPipeline:
    """One socket's puts in flight, answered in the order they were sent.

    ``answer`` sends a put's ``written`` (or the error that refused it);
    ``failed`` is told when a round failed (the database, say): the puts
    after it are not answered, and the socket is expected to close.
    """

    def __init__(self, answer: Answer, failed: Callable[[Exception], Awaitable[None]]):
        self.answer = answer
        self.failed = failed
        self.in_flight: collections.deque[
            tuple[str | None, str, asyncio.Future[Any]]
        ] = collections.deque()
        self.room = asyncio.Event()
        self.room.set()
        self.answering: asyncio.Task[None] | None = None

    async def put(
        self, req_id: str | None, *, region: str, key: str, value: Any
    ) -> None:
        """Submit one put; returns at once unless the socket already has
        ``MAX_PUTS_IN_FLIGHT`` unanswered."""
        while len(self.in_flight) >= MAX_PUTS_IN_FLIGHT:
            self.room.clear()
            await self.room.wait()
        future = batcher().submit(region=region, key=key, value=value)
        self.in_flight.append((req_id, region, future))
        if self.answering is None:
            self.answering = asyncio.create_task(self._answer())

    async def drained(self) -> None:
        """Once every put submitted so far is answered (or the pipeline
        stopped)."""
        if self.answering is not None:
            await asyncio.wait({self.answering})

    def cancel(self) -> None:
        """The socket is gone: answer nothing more. Puts already submitted
        are still written, as a REST PUT whose client went away is."""
        if self.answering is not None:
            self.answering.cancel()
        self._forget()

    def _forget(self) -> None:
        for _, _, future in self.in_flight:
            if future.done() and not future.cancelled():
                future.exception()  # retrieved: no "never retrieved" warning
            else:
                future.cancel()
        self.in_flight.clear()
        self.room.set()

    async def _answer(self) -> None:
        try:
            while self.in_flight:
                req_id, region, future = self.in_flight[0]
                try:
                    result = await future
                except Exception as exc:
                    self._forget()
                    await self.failed(exc)
                    return
                self.in_flight.popleft()
                self.room.set()
                await self.answer(req_id, region, result)
        finally:
            self.answering = None
