"""The ``put`` frames of every socket of a process, one transaction a round.

A socket's ``put`` waits for its answer (``written``) before the socket's
next frame is handled, as every frame does; the puts of the process's
sockets that arrive while a round is being written wait for the next one,
and a round is one hop to the database thread and one transaction
(``durablecache.cache.services.entries_put_many``): what one HTTP request
and one transaction per PUT cost each write (docs/performance.md) is
shared by every write of the round.
"""

import asyncio
import weakref
from typing import Any

from channels.db import database_sync_to_async as db

from durablecache.cache import services as cache_services
from durablecache.cache.exceptions import DomainError
from durablecache.cache.services import WrittenEvent

# One batcher per event loop (tests run several loops in one process).
_batchers: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, WriteBatcher]"
_batchers = weakref.WeakKeyDictionary()


class WriteBatcher:
    def __init__(self) -> None:
        self.waiting: list[tuple[tuple[str, str, Any], asyncio.Future[Any]]] = []
        self.running = False

    async def put(self, *, region: str, key: str, value: Any) -> WrittenEvent:
        """Write ``key`` in the next round; its event once committed, or
        the DomainError that refused it."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.waiting.append(((region, key, value), future))
        if not self.running:
            self.running = True
            asyncio.get_running_loop().create_task(self._rounds())
        result = await future
        if isinstance(result, DomainError):
            raise result
        return result

    async def _rounds(self) -> None:
        size = cache_services.MAX_PUTS_PER_ROUND
        round_: list[tuple[tuple[str, str, Any], asyncio.Future[Any]]] = []
        try:
            while self.waiting:
                round_, self.waiting = self.waiting[:size], self.waiting[size:]
                try:
                    results = await db(cache_services.entries_put_many)(
                        puts=[put for put, _ in round_]
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
