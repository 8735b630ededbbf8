"""The state every part of the asyncio client shares.

`AsyncDurableClient` (client.py) is built in layers, each a base class of
the next in a module of its own:

1. `_core`: this state, and the checks and callbacks every layer uses;
2. `_requests`: a request and its reply, across reconnects;
3. `_regions`: the region handles and what they registered, restored on
   each new session;
4. `_delivery`: frames read, events and markers dispatched in order, acks;
5. `_connection`: the session loop (connect, restore, reconnect with
   backoff);
6. `client`: the public API.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._dedup import SeenIds
from ._registrations import Registration
from ._session import Session
from .errors import ClientClosedError
from .events import Marker, Welcome

if TYPE_CHECKING:
    from ._cq import CqState
    from .region import Region

logger = logging.getLogger("durablecache_client")

Callback = Callable[..., Any]


async def invoke(fn: Callback | None, *args: Any) -> None:
    """Call a listener or callback, awaiting it if needed; log its failure."""
    if fn is None:
        return
    try:
        result = fn(*args)
        if inspect.isawaitable(result):
            await result
    except Exception:
        logger.exception("listener/callback %r raised", fn)


class ClientCore:
    """What a client holds, connected or not.

    The settings below are the constructor's arguments
    (`AsyncDurableClient.__init__`); `__init__` here sets the state of a
    client that has not connected yet.
    """

    message_tracking_timeout: float
    on_error: Callback | None
    on_gap: Callback | None

    def __init__(self) -> None:
        self._regions: dict[str, Region] = {}
        self._registrations: dict[tuple[Any, ...], Registration] = {}
        self._cqs: dict[str, CqState] = {}
        # Local predicates of the interests, built once per registration.
        self._matchers: dict[
            tuple[Any, ...], tuple[Registration, Callable[[str], bool] | None]
        ] = {}
        self._ready_requested = False
        self._ids = itertools.count(1)
        self._url_index = 0
        self._seen = SeenIds(self.message_tracking_timeout)
        self.duplicates_dropped = 0
        self.reconnects = 0
        # The highest seq delivered, in any region and session: the `since`
        # of a recovery by key (sdk/python/README.md, "Recovery").
        self._last_seq: int | None = None

        self._session: Session | None = None
        self._welcome: Welcome | None = None
        self._last_marker: Marker | None = None
        self._closing = False
        self._fatal: BaseException | None = None
        self._supervisor: asyncio.Task[None] | None = None
        self._dispatcher: asyncio.Task[None] | None = None
        # asyncio primitives bind to the loop that first uses them (3.10+).
        self._first_done = asyncio.Event()
        self._session_ready = asyncio.Event()
        self._stopped = asyncio.Event()
        self._dispatch_queue: asyncio.Queue[tuple[Session, str, Any]] = asyncio.Queue()

    def _check_open(self) -> None:
        if self._fatal is not None:
            raise self._fatal
        if self._closing:
            raise ClientClosedError()
