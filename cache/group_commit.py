"""Single puts of a process's request threads, written together.

Every writer takes the event log's lock first, so PUTs written alone
queue behind one another, each a transaction of its own (five statements
under the lock and a commit). Here the PUTs that arrive while a round is
being written wait for the next round, and a round is one
``services.entries_put_many`` (one transaction, one lock of the log, one
statement per kind of row, one commit), each PUT still its own event in
the order it joined. The thread that finds no round running writes one
(the leader); the others wait, and the leader hands the next round to the
first of them (docs/decisions/0011-group-commit.md).

The websocket's ``put`` frames do the same on the event loop
(``sockets.put_rounds``); this is the threads' side of it.
"""

import threading
from typing import Any

from django.db import connection

from cache import services
from cache.services import WrittenEvent
from common.errors import DomainError


class _Put:
    """One caller's put, its result, and whether it leads the next round."""

    __slots__ = ("done", "leads", "put", "result")

    def __init__(self, put: tuple[str, str, Any]) -> None:
        self.put = put
        self.done = threading.Event()
        self.leads = False
        self.result: WrittenEvent | BaseException | None = None


class PutGroup:
    """Rounds of concurrent single puts; one round written at a time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: list[_Put] = []
        self._writing = False

    def put(self, *, region: str, key: str, value: Any) -> WrittenEvent:
        """Write one key in the next round and return its event once
        committed; raise the DomainError that refused it, or the round's
        error if the round failed (then nothing of the round was written).
        """
        if connection.in_atomic_block:
            # Inside the caller's transaction: a round's commit would be
            # the caller's to make, so this put is written alone, in it.
            return _unwrap(services.entries_put_many(puts=[(region, key, value)])[0])
        mine = _Put((region, key, value))
        with self._lock:
            self._waiting.append(mine)
            leads = not self._writing
            self._writing = True
        if not leads:
            mine.done.wait()
        if mine.leads or leads:
            self._write_round()
        return _unwrap(mine.result)

    def _write_round(self) -> None:
        """Write every waiting put (up to a round's size) as one round, then
        hand the next round to the first put still waiting."""
        with self._lock:
            size = services.MAX_PUTS_PER_ROUND
            round_, self._waiting = self._waiting[:size], self._waiting[size:]
        error: BaseException | None = None
        results: list[Any]
        try:
            results = list(services.entries_put_many(puts=[p.put for p in round_]))
        except BaseException as exc:  # the round failed: each put says so
            results, error = [exc] * len(round_), exc
        with self._lock:
            following = self._waiting[0] if self._waiting else None
            if following is None:
                self._writing = False
            else:
                following.leads = True
        if following is not None:
            following.done.set()
        for put, result in zip(round_, results, strict=True):
            put.result = result
            put.done.set()
        if error is not None and not isinstance(error, Exception):
            raise error  # an interrupt of this thread, after the hand-over


def _unwrap(result: Any) -> WrittenEvent:
    if isinstance(result, (DomainError, BaseException)):
        raise result
    assert isinstance(result, WrittenEvent)  # noqa: S101
    return result


group = PutGroup()


def entry_put_together(*, region: str, key: str, value: Any) -> WrittenEvent:
    """``services.entry_put`` for a request thread: the PUTs of the process
    that arrive together are one transaction, each its own event."""
    return group.put(region=region, key=key, value=value)
