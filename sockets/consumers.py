"""The websocket door: ``/ws/v1/subscribe`` (docs/protocol.md).

Transport only: frames are parsed by ``sockets.protocol``, every decision
is a service or selector call, and each frame's handler is a few lines
calling the module of its part: ``sockets.holding`` (``hello`` and the
release of the client), ``sockets.registrations`` (interests and their
images), ``sockets.streams`` (delivery from ``ready`` on) and
``sockets.put_rounds`` (``put``). A socket has no channel-layer channel:
the process's ``WakeHub`` (sockets.wakeups) wakes its stream when the
node's fan-out grew its queue, closes it for an operator or a node
shutdown, and sweeps every delivering socket each ``DURABLECACHE_POLL_S``
(lost doorbells, a client gone or moved to another primary).
"""

import asyncio
import contextlib
import logging
import uuid
from typing import Any

from channels.consumer import get_handler_name
from channels.db import database_sync_to_async as db
from channels.exceptions import StopConsumer
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings

from cache import counters
from cache.services import WrittenEvent
from clients import replication, services
from clients.exceptions import ClientConnectedError, ClientOwnedError
from clients.matching import parse_bool
from common import logs
from common.errors import DomainError, ValidationError
from queues import selectors as queue_selectors
from sockets import (
    delivery_rounds,
    holding,
    protocol,
    put_rounds,
    registrations,
    streams,
    wakeups,
    wire,
)

log = logging.getLogger(__name__)

MAX_BAD_FRAMES = 10
CLOSE_PROTOCOL = 4400
CLOSE_UNAUTHORIZED = 4401
CLOSE_TOO_LARGE = 4413
CLOSE_SHUTDOWN = 4503


class SubscriptionConsumer(AsyncWebsocketConsumer):
    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        """Handle the socket's messages one at a time, without a channel.

        Channels' own loop gives every socket a channel-layer channel, a
        receive task and group memberships to refresh; here what reaches a
        socket from outside comes through the process's hub
        (docs/decisions/0012-one-wake-hub-per-process.md), whose closes
        take ``self.turn`` like the socket's own frames, so a close never
        runs in the middle of a frame's handler.
        """
        self.scope = scope
        self.base_send = send
        # Daphne's socket, for event frames as ready-made bytes (or None).
        self.wire = wire.daphne_socket(send)
        # What services record as the socket holding a client: unique in
        # the cluster (a late disconnect of an older socket changes nothing).
        self.socket_id = wakeups.hub.new_socket_id()
        self.turn = asyncio.Lock()
        # Made at the first put: an idle socket (most of them) carries only
        # what it uses, and most sockets never put.
        self.puts: put_rounds.PutPipeline | None = None
        self.client: holding.HeldClient | None = None  # once hello succeeded
        self.stream: streams.Stream | None = None  # once ready
        self.woken_as: uuid.UUID | None = None  # the client it delivers for
        self.is_closing = False
        self.has_ended = False
        wakeups.hub.attach(self)
        try:
            with contextlib.suppress(StopConsumer):
                while True:
                    message = await receive()
                    async with self.turn:
                        await self.dispatch(message)
        finally:
            wakeups.hub.detach(self)
            # A handler that raised (the database failing, say) ends the
            # socket without a websocket.disconnect: release the client all
            # the same, or its durable id would answer 4409 until the node
            # restarts.
            if self.client is not None:
                with contextlib.suppress(Exception):
                    await self.disconnect(1011)

    async def dispatch(self, message: dict[str, Any]) -> None:
        """Channels' dispatch, without its ``close_old_connections`` hop per
        message: a thread hop for every ``ack`` frame, queued behind the
        socket's database calls. Every database call here goes through
        ``database_sync_to_async``, which closes old connections itself."""
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"no handler for message type {message['type']}")
        await handler(message)

    async def connect(self) -> None:
        self.node = settings.DURABLECACHE_NODE_NAME
        self.bad_frames = 0
        await self.accept()
        if self.scope.get("user") is None:
            await self.close_with(CLOSE_UNAUTHORIZED)

    async def send(  # type: ignore[override]  # as Channels' own
        self,
        text_data: str | None = None,
        bytes_data: bytes | None = None,
        close: bool = False,
    ) -> None:
        """A reply frame (``written``, ``ok``, ``error``...) straight to
        Daphne's socket when it can take it (sockets.wire), as event frames
        go; otherwise, and for anything else, through ASGI."""
        sock = self.wire
        # Daphne sends no frame for empty text; neither does this.
        if sock is not None and text_data and not close:
            data = wire.text_frame(text_data)
            if wire.writable(sock, len(data)):
                sock.sendData(data)
                return
        await super().send(text_data, bytes_data, close)

    async def close_with(self, code: int) -> None:
        """Close the socket with ``code``; no frame is handled after this."""
        self.is_closing = True
        await self.close(code=code)

    async def receive(
        self, text_data: str | None = None, bytes_data: bytes | None = None
    ) -> None:
        if self.is_closing:
            return
        size = protocol.frame_size(text_data, bytes_data)
        if size > settings.DURABLECACHE_MAX_FRAME_BYTES:
            await self.close_with(CLOSE_TOO_LARGE)
            return
        req_id, frame_type = None, None
        try:
            if bytes_data is not None:
                raise protocol.BadJsonError(
                    "binary frames are not accepted",
                    req_id=protocol.binary_frame_id(bytes_data),
                )
            frame, req_id, needs_check = protocol.parse_frame(text_data or "")
            frame_type = frame.get("type")
            protocol.check_type(frame)
            if self.client is None and frame_type != "hello":
                raise ValidationError("the first frame must be hello")
            if needs_check:
                protocol.check_fields(frame)
            if frame_type != "put" and self.puts is not None:
                await self.puts.drained()  # answered after every earlier put
            await getattr(self, f"on_{frame_type}")(frame, req_id)
            self.bad_frames = 0
        except DomainError as exc:
            if isinstance(exc, protocol.BadJsonError) and exc.req_id is not None:
                req_id = exc.req_id  # read from a frame the parser refused
            # A hello with a bad field is a bad frame like any other; only a
            # first frame that is not a hello at all is fatal at once.
            fatal = self.client is None and frame_type != "hello"
            if self.puts is not None:
                await self.puts.drained()
            await self._bad_frame(req_id, exc.code, exc.message, fatal=fatal)

    async def _bad_frame(
        self, req_id: str | None, code: str, message: str, *, fatal: bool
    ) -> None:
        self.bad_frames += 1
        await self.send(protocol.error(req_id, code, message))
        if fatal or self.bad_frames >= MAX_BAD_FRAMES:
            await self.close_with(CLOSE_PROTOCOL)

    def _held(self) -> holding.HeldClient:
        """The socket's client: every frame after a successful hello has one."""
        assert self.client is not None  # noqa: S101
        return self.client

    async def on_hello(self, frame: dict[str, Any], req_id: str | None) -> None:
        if self.client is not None:
            raise ValidationError("hello was already sent")
        options = services.parse_hello_options(frame)
        # This socket's task (and what it calls) logs with its durable id.
        logs.durable_id.set(options["durable_id"])
        try:
            result = await holding.hello(
                user=self.scope["user"], socket_id=self.socket_id, options=options
            )
        except (ClientOwnedError, ClientConnectedError) as exc:
            await self.close_with(exc.close_code)
            return
        if result.redirect_url:
            await self.send(protocol.reply("redirect", req_id, url=result.redirect_url))
            await self.close_with(1000)
            return
        self.client = holding.HeldClient.of(result)
        # Not needed after a hello, so not carried by an idle socket.
        self.scope.pop("user", None)
        await self.send(await holding.welcome(result, req_id))

    async def on_register_interest(
        self, frame: dict[str, Any], req_id: str | None
    ) -> None:
        interest = await registrations.interest_register(self._held().id, frame)
        count = await registrations.send_image(self.send, req_id, interest)
        since = registrations.since_field(interest.since)
        await self.send(
            protocol.reply("interest_registered", req_id, count=count, **since)
        )

    async def on_unregister_interest(
        self, frame: dict[str, Any], req_id: str | None
    ) -> None:
        await registrations.interest_unregister(self._held().id, frame)
        await self.send(protocol.reply("interest_unregistered", req_id))

    async def on_register_cq(self, frame: dict[str, Any], req_id: str | None) -> None:
        """Register a CQ, send its image, then ``cq_registered``; the
        delivery is held meanwhile, so no event naming the CQ goes out
        before ``cq_registered``."""
        async with streams.held(self.stream):
            cq, since = await registrations.cq_register(self._held().id, frame)
            count = await registrations.send_cq_image(self.send, req_id, cq, since)
            await self.send(
                protocol.reply(
                    "cq_registered",
                    req_id,
                    name=cq.name,
                    count=count,
                    **registrations.since_field(since),
                )
            )

    async def on_close_cq(self, frame: dict[str, Any], req_id: str | None) -> None:
        name = await registrations.cq_close(self._held().id, frame)
        await self.send(protocol.reply("cq_closed", req_id, name=name))

    def cq_closed_by_operator(self, name: str) -> None:
        """An operator closed one of this socket's CQs: tell the client
        (an unsolicited ``cq_closed``, without an id)."""
        if not self.is_closing and self.client is not None:
            wakeups.hub.spawn(
                self._send_in_turn(protocol.reply("cq_closed", None, name=name))
            )

    async def _send_in_turn(self, text: str) -> None:
        async with self.turn:
            if not self.is_closing:
                await self.send(text)

    async def on_ready(self, frame: dict[str, Any], req_id: str | None) -> None:
        if self.stream is not None:
            raise ValidationError("ready was already sent")
        client_id = self._held().id
        # After a gap the queue restarts at the log head, and a resync of
        # the entries stands for what was dropped (docs/protocol.md).
        resync = await db(services.client_resync_start)(client_id=client_id)
        head = await db(queue_selectors.queue_head)(client_id=client_id)
        self.woken_as = client_id
        self.stream = streams.Stream(self, client_id, head, resync)

    async def on_ack(self, frame: dict[str, Any], req_id: str | None) -> None:
        if self.stream is None:
            raise protocol.NotReadyError("ack before ready")
        up_to = protocol.ack_up_to(frame, sent_through=self.stream.sent_through)
        client = self._held()
        acked = await delivery_rounds.batcher().ack(client_id=client.id, up_to=up_to)
        counters.counter.add(self.node, acked, counters.ACKED)
        if client.is_durable:
            replication.ack_relay.add(client.id, up_to)

    async def on_put(self, frame: dict[str, Any], req_id: str | None) -> None:
        """Create or update one key, as ``PUT .../entries/{key}/`` does;
        answered once the event is durable, the socket's next frame handled
        meanwhile (sockets.put_rounds)."""
        region, key, value = protocol.put_fields(frame)
        if self.puts is None:
            self.puts = put_rounds.PutPipeline(self._answer_put, self._puts_failed)
        await self.puts.put(req_id, region=region, key=key, value=value)

    async def _answer_put(
        self, req_id: str | None, region: str, result: WrittenEvent | DomainError
    ) -> None:
        if self.is_closing:
            return
        if isinstance(result, DomainError):
            await self._bad_frame(req_id, result.code, result.message, fatal=False)
            return
        await self.send(protocol.written(req_id, region, result))

    async def _puts_failed(self, exc: Exception) -> None:
        """A write round failed (the database, say): the socket ends as
        one whose handler raised does; its client reconnects."""
        log.error("a write round failed; closing the socket", exc_info=exc)
        if not self.is_closing:
            await self.close_with(1011)

    async def on_close(self, frame: dict[str, Any], req_id: str | None) -> None:
        keepalive = parse_bool(frame.get("keepalive"), field="keepalive")
        self.is_closing = True
        await self._stop_delivery()
        await holding.close(self._held().id, self.socket_id, keep=keepalive)
        self.client = None
        await self.send(protocol.reply("closed", req_id, keepalive=keepalive))
        await self.close(code=1000)

    def holds(self, client_id: uuid.UUID) -> bool:
        return self.client is not None and self.client.id == client_id

    def swept(self, *, primary: str | None, head: int, holder: str) -> None:
        """The hub's periodic look at this socket's client (sockets.wakeups).

        The client is gone (an operator closed it and the close message was
        lost): 4410. It has another primary (this node is taken for dead,
        or handed the queue over): 4503, so the client reconnects there.
        It is not marked held by this socket (a node that takes this one
        for dead releases it, and its durable timeout would then expire a
        client still connected here): 4503, so its ``hello`` attaches it
        again. Otherwise the stream is woken if its queue grew since the
        last look (a doorbell may be lost).
        """
        if self.is_closing:
            return
        if primary is None:
            wakeups.hub.spawn(
                self.close_from_hub(services.CLOSE_BY_OPERATOR, gone=True)
            )
        elif primary != self.node or holder != self.socket_id:
            wakeups.hub.spawn(self.close_from_hub(CLOSE_SHUTDOWN, gone=False))
        elif self.stream is not None:
            self.stream.poll(head)

    async def _stop_delivery(self) -> None:
        self.woken_as = None
        if self.stream is not None:
            await self.stream.stop()

    async def close_from_hub(self, code: int, *, gone: bool) -> None:
        """Close for an operator or a node shutdown, or after the sweep;
        ``gone``: the client row is gone, nothing to keep."""
        async with self.turn:
            if self.is_closing or self.has_ended:
                return
            await self._stop_delivery()
            if gone:
                self.client = None
            await self.close_with(code)

    async def disconnect(self, code: int) -> None:
        self.has_ended = True
        if self.puts is not None:
            self.puts.cancel()
        await self._stop_delivery()
        if self.client is not None:
            client_id, self.client = self.client.id, None
            await holding.release_detached(client_id, self.socket_id)
