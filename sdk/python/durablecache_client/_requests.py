"""Requests of the asyncio client: a frame sent, its reply awaited.

A layer of `AsyncDurableClient` (see `_core`). A request of the application
is retried on the next session when its socket goes away before the reply.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from websockets.exceptions import ConnectionClosed

from ._core import ClientCore
from ._session import Pending, Session, SessionLostError
from .errors import DurableCacheError

if TYPE_CHECKING:
    from ._images import ImageApplier

#: Makes the applier of one attempt's image (a new one for each session).
ImageFactory = Callable[[Session], "ImageApplier"]


class ClientRequests(ClientCore):
    _request_timeout: float

    async def _app_request(
        self, frame: dict[str, Any], image: ImageFactory | None = None
    ) -> dict[str, Any]:
        """Send a request on the live session, retrying on the next one if lost."""
        self._check_open()
        async with asyncio.timeout(self._request_timeout):
            while True:
                session = await self._wait_session()
                applier = None if image is None else image(session)
                try:
                    return await self._request_on(session, dict(frame), applier)
                except SessionLostError:
                    # send() on a closed socket fails without yielding: wait
                    # for the reader to see the close, or this loop would spin
                    # and starve it.
                    await session.closed_event.wait()

    async def _request_on(
        self,
        session: Session,
        frame: dict[str, Any],
        image: ImageApplier | None = None,
        limit: float | None = None,
    ) -> dict[str, Any]:
        """Send one request on `session` and return its reply frame.

        `image` takes the request's `image` chunks, and is finished with the
        reply before this returns.
        """
        request_id = f"r{next(self._ids)}"
        frame["id"] = request_id
        future: asyncio.Future[dict[str, Any]] = (
            asyncio.get_running_loop().create_future()
        )
        pending = Pending(frame["type"], future, image)
        session.pending[request_id] = pending
        try:
            if session.closed_event.is_set():
                raise SessionLostError
            try:
                await session.ws.send(json.dumps(frame))
            except ConnectionClosed as exc:
                raise SessionLostError from exc
            async with asyncio.timeout(limit or self._request_timeout):
                reply = await future
        finally:
            session.pending.pop(request_id, None)
        if image is not None:
            image.finish(reply)
        return reply

    async def _wait_session(self) -> Session:
        """Return the live session, waiting through a reconnect if needed."""
        while True:
            self._check_open()
            if self._supervisor is None:
                raise DurableCacheError("not_connected", "call connect() first")
            session = self._session
            if (
                self._session_ready.is_set()
                and session is not None
                and not session.closed_event.is_set()
            ):
                return session
            ready = asyncio.ensure_future(self._session_ready.wait())
            stopped = asyncio.ensure_future(self._stopped.wait())
            try:
                await asyncio.wait(
                    {ready, stopped}, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                ready.cancel()
                stopped.cancel()
