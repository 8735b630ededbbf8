"""One websocket session: opening it (hello, redirects), its state, close codes.

Close-code choices are explained in sdk/python/README.md ("Fatal closes").
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus, WebSocketException

from .errors import DurableCacheError, FatalConnectionError
from .events import Marker, Welcome

if TYPE_CHECKING:
    from ._images import ImageApplier

logger = logging.getLogger("durablecache_client")

#: Close codes after which reconnecting cannot help.
FATAL_CLOSE_CODES = frozenset({4400, 4401, 4403, 4410, 4413})
#: "Durable id already connected": the old socket may still be closing.
CONFLICT_CLOSE_CODE = 4409
#: HTTP statuses of a refused handshake that mean "bad credentials".
FATAL_HTTP_STATUSES = frozenset({401, 403})
MAX_REDIRECTS = 5
MAX_MESSAGE_BYTES = 64 * 1024 * 1024


class SessionLostError(Exception):
    """The socket carrying a request went away; retry on the next session."""


class TransientError(Exception):
    """A connection attempt failed in a way a later attempt may not."""


class ConflictError(TransientError):
    """The server closed with 4409 (durable id already connected)."""


@dataclass(eq=False)
class Pending:
    """A request waiting for its reply; a register request's `image` takes
    the `image` chunks that come before the reply (`_images`)."""

    kind: str
    future: asyncio.Future[dict[str, Any]]
    image: ImageApplier | None = None


@dataclass(eq=False)
class Session:
    """One websocket, from `welcome` to its close; seqs are per session."""

    ws: ClientConnection
    url: str
    welcome: Welcome
    is_reconnect: bool = False
    pending: dict[str, Pending] = field(default_factory=dict)
    ack_high: int | None = None
    acked: int | None = None
    ready_sent: bool = False
    marker: Marker | None = None
    marker_event: asyncio.Event = field(default_factory=asyncio.Event)
    closed_event: asyncio.Event = field(default_factory=asyncio.Event)
    close_code: int | None = None
    close_reason: str = ""
    # Set once `close` has sent its final ack: events still arriving on
    # this socket are not delivered (they would never be acked; the server
    # keeps them for the next session when asked to).
    final_ack_sent: bool = False
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)

    def fail_pending(self) -> None:
        """Fail every waiting request with SessionLostError."""
        for pending in self.pending.values():
            if not pending.future.done():
                pending.future.set_exception(SessionLostError())


def backoff_delay(attempt: int, initial: float, cap: float) -> float:
    """Return the wait before attempt `attempt` (1-based): doubling, jittered.

    The exponent stops at 64 (any cap is reached long before), so any
    number of failed attempts in a row (a node down for days) keeps the
    wait at the cap instead of overflowing a float."""
    delay = min(cap, initial * 2.0 ** min(attempt - 1, 64))
    return delay / 2 + random.uniform(0, delay / 2)  # noqa: S311 - not crypto


async def open_session(
    url: str,
    hello: dict[str, Any],
    *,
    token: str | None,
    reply_timeout: float,
    websocket_options: dict[str, Any],
) -> Session:
    """Connect to `url`, say hello, follow redirects; return the session.

    Raises FatalConnectionError (or DurableCacheError when the server answers
    `hello` with `error`), ConflictError for 4409, TransientError otherwise.
    """
    headers = {} if token is None else {"Authorization": f"Token {token}"}
    options: dict[str, Any] = {
        "additional_headers": headers,
        "open_timeout": reply_timeout,
        "max_size": MAX_MESSAGE_BYTES,
        **websocket_options,
    }
    for _ in range(MAX_REDIRECTS + 1):
        try:
            ws = await connect(url, **options)
        except InvalidStatus as exc:
            status = exc.response.status_code
            if status in FATAL_HTTP_STATUSES:
                raise FatalConnectionError(status, str(exc)) from exc
            raise TransientError(f"{url}: {exc}") from exc
        except (OSError, TimeoutError, WebSocketException) as exc:
            raise TransientError(f"{url}: {exc!r}") from exc
        frame = await _hello_exchange(ws, url, hello, reply_timeout)
        if frame.get("type") == "welcome":
            return Session(ws, url, Welcome.from_frame(frame, url))
        await ws.close()
        url = str(frame.get("url") or "")
        if not url:
            raise TransientError("redirect without url")
        logger.info("redirected to %s", url)
    raise TransientError("too many redirects")


async def _hello_exchange(
    ws: ClientConnection, url: str, hello: dict[str, Any], reply_timeout: float
) -> dict[str, Any]:
    """Send hello on `ws`; return the welcome or redirect frame."""
    try:
        await ws.send(json.dumps(hello))
        async with asyncio.timeout(reply_timeout):
            while True:
                raw = await ws.recv()
                frame = json.loads(raw) if isinstance(raw, str) else None
                if isinstance(frame, dict):
                    kind = frame.get("type")
                    if kind in ("welcome", "redirect"):
                        return frame
                    if kind == "error":
                        raise DurableCacheError(
                            str(frame.get("code")), str(frame.get("message", ""))
                        )
                logger.debug("ignoring %r before welcome", raw)
    except ConnectionClosed as exc:
        code = exc.rcvd.code if exc.rcvd else 1006
        reason = exc.rcvd.reason if exc.rcvd else ""
        if code in FATAL_CLOSE_CODES:
            raise FatalConnectionError(code, reason) from exc
        if code == CONFLICT_CLOSE_CODE:
            raise ConflictError(f"{url}: closed 4409 {reason}") from exc
        raise TransientError(f"{url}: closed {code} {reason}") from exc
    except (TimeoutError, ValueError, OSError) as exc:
        await ws.close()
        raise TransientError(f"{url}: no welcome: {exc!r}") from exc
    except DurableCacheError:
        await ws.close()
        raise
    except asyncio.CancelledError:
        ws.transport.abort()  # the client is closing: do not wait for a reply
        raise
