"""Delivery in the asyncio client: frames read, events handed over, acks.

A layer of `AsyncDurableClient` (see `_core`). Each session's reader turns
frames into replies, image entries, gaps and queued events; one dispatcher
task hands events, resync events and markers to the listeners in order; the
ack task acks what they were handed (sdk/python/README.md, "Acks" and
"Recovery").
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from functools import partial
from typing import Any

from websockets.exceptions import ConnectionClosed

from ._core import Callback, invoke, logger
from ._images import CqImage, RegionImage
from ._regions import ClientRegions
from ._session import Session
from .errors import error_from_frame
from .events import (
    CQ_OPS,
    LISTENER_METHODS,
    CqEvent,
    EntryEvent,
    Gap,
    Marker,
    RegionLiveEvent,
)

# Reply frames, handed to the request waiting for them.
REPLY_TYPES = (
    "interest_registered",
    "interest_unregistered",
    "cq_registered",
    "cq_closed",
    "written",
    "closed",
)


class ClientDelivery(ClientRegions):
    ack_interval: float
    on_marker: Callback | None
    _close_timeout: float

    async def _read_loop(self, session: Session) -> None:
        code, reason = 1006, ""
        try:
            while True:
                try:
                    raw = await session.ws.recv()
                except ConnectionClosed as exc:
                    if exc.rcvd is not None:
                        code, reason = exc.rcvd.code, exc.rcvd.reason
                    return
                frame = _parsed(raw)
                if frame is None:
                    continue
                try:
                    await self._handle_frame(session, frame)
                except Exception:  # one malformed frame must not end the session
                    logger.exception("could not handle frame %.200r", frame)
        finally:
            session.close_code, session.close_reason = code, reason
            if self._session is session:
                self._session_ready.clear()
            # Fail waiting requests at once: the supervisor may itself be
            # waiting on one (restoring registrations).
            session.fail_pending()
            session.closed_event.set()

    async def _handle_frame(self, session: Session, frame: dict[str, Any]) -> None:
        kind = frame.get("type")
        if kind == "event":
            try:
                event = EntryEvent.from_frame(frame)
            except (KeyError, TypeError, ValueError):
                logger.warning("ignoring a malformed event: %.200r", frame)
                return
            self._dispatch_queue.put_nowait((session, "event", event))
        elif kind == "marker":
            self._dispatch_queue.put_nowait(
                (session, "marker", Marker.from_frame(frame))
            )
        elif kind == "image":
            self._apply_image(session, frame)
        elif kind == "gap":
            gap = Gap.from_frame(frame)
            if gap is None:
                logger.warning("ignoring a malformed gap: %.200r", frame)
                return

            async def gapped() -> None:
                await self._gapped(session, gap)

            self._later(session, gapped)
        elif kind == "error":
            await self._error_frame(session, frame)
        elif kind == "cq_closed" and str(frame.get("id")) not in session.pending:
            # Unsolicited: an operator closed the CQ. In order with the
            # events: the ones before it still name the CQ.
            name = frame.get("name")
            if isinstance(name, str):

                async def end() -> None:
                    await self._end_cq(name)

                self._later(session, end)
        elif kind in REPLY_TYPES:
            _reply_frame(session, kind, frame)
        else:
            logger.debug("ignoring frame %.200r", frame)

    async def _error_frame(self, session: Session, frame: dict[str, Any]) -> None:
        pending = session.pending.get(str(frame.get("id")))
        exc = error_from_frame(str(frame.get("code")), str(frame.get("message", "")))
        if pending is not None and not pending.future.done():
            pending.future.set_exception(exc)
        else:
            logger.warning("server error: %s", exc)
            await invoke(self.on_error, exc)

    def _apply_image(self, session: Session, frame: dict[str, Any]) -> None:
        """Hand an `image` chunk to the request it answers, or apply the
        server's own resync after a gap (`resync: true`, no request)."""
        pending = session.pending.get(str(frame.get("id")))
        if pending is not None and pending.image is not None:
            pending.image.chunk(frame)
        elif frame.get("resync") is True:
            self._resync_image(session, frame)
        else:
            logger.debug("ignoring an image no request waits for: %.200r", frame)

    def _resync_image(self, session: Session, frame: dict[str, Any]) -> None:
        """Apply one chunk of the server's resync to the CQ it names, or to
        the region's cache (it holds only changes: nothing is pruned)."""
        name, region_name = frame.get("cq"), frame.get("region")
        if isinstance(name, str):
            cq = self._cqs.get(name)
            if cq is not None:
                CqImage(cq, "resync", partial(self._tell_cq, session, cq)).chunk(frame)
            return
        if not isinstance(region_name, str):
            logger.warning("ignoring a resync image without region: %.200r", frame)
            return
        region = self.region(region_name)
        tell = partial(self._tell_region, session, region)
        RegionImage(region, "resync", None, tell).chunk(frame)

    async def _gapped(self, session: Session, gap: Gap) -> None:
        """The queue overflowed: changes after `gap.since` may be missing.

        The server resyncs by itself after the `gap` frame; every
        registration is also sent again with `since` (the last seq
        delivered, else the gap's), so the local cache does not depend on
        the server's resync alone.
        """
        since = self._last_seq if self._last_seq is not None else gap.since
        self._recover_after_gap(session, since)
        await invoke(self.on_gap, gap)

    async def _dispatch_loop(self) -> None:
        """Deliver events and markers in order, off the socket reader.

        A separate task, so a listener may await client requests without
        blocking the reader that would carry their replies.
        """
        while True:
            session, kind, item = await self._dispatch_queue.get()
            if kind == "event" and session.final_ack_sent:
                self._dispatch_queue.task_done()
                continue
            try:
                if kind == "event":
                    await self._deliver_event(session, item)
                elif kind == "call":
                    await item()
                else:
                    await self._deliver_marker(session, item)
            except Exception:
                logger.exception("delivering %s failed", kind)
            finally:
                # Acked only once delivered (at-least-once to the listener),
                # and even when delivery failed, or it would come back forever.
                if kind == "event" and (
                    session.ack_high is None or item.seq > session.ack_high
                ):
                    session.ack_high = item.seq
                self._dispatch_queue.task_done()

    async def _deliver_event(self, session: Session, event: EntryEvent) -> None:
        seq = event.seq
        if seq is not None and (self._last_seq is None or seq > self._last_seq):
            self._last_seq = seq
        if event.id is not None and self._seen.check_and_add(event.id):
            self.duplicates_dropped += 1
            logger.debug("dropping duplicate event %s", event.id)
            return
        region = self.region(event.region)
        if seq is not None:
            region._note_seq(seq)
        # As in Geode, a CQ's events do not touch the region's cache: an
        # event naming CQs does only when an interest of the client covers
        # its key (a region op always does).
        if (
            event.key is None
            or not event.cq
            or self._interest_covers(region.name, event.key)
        ):
            region._apply_event(event)
            listener = region.listener or self.default_listener
            method_name = LISTENER_METHODS.get(event.op)
            if listener is not None and method_name is not None:
                await invoke(getattr(listener, method_name, None), event)
        for match in event.cq or []:
            await self._deliver_cq_match(event, match)

    async def _deliver_cq_match(self, event: EntryEvent, match: Any) -> None:
        """Hand one `{name, cq_op}` of an event to that CQ's listener."""
        if not isinstance(match, dict):
            return
        name, cq_op = match.get("name"), match.get("cq_op")
        cq = self._cqs.get(name) if isinstance(name, str) else None
        if cq is None or cq_op not in CQ_OPS:
            return  # closed here meanwhile, or an op this client does not know
        cq.apply_event(event, cq_op)
        if cq.listener is not None:
            on_event = getattr(cq.listener, "on_event", None)
            await invoke(on_event, CqEvent.of(event, cq.name, cq_op))
        if cq_op == "region_destroy":
            await self._end_cq(cq.name)  # the server closed it: no cq_closed

    async def _deliver_marker(self, session: Session, marker: Marker) -> None:
        session.marker = marker
        self._last_marker = marker
        for name in marker.regions:
            region = self._regions.get(name)
            listener = region.listener if region is not None else None
            listener = listener or self.default_listener
            if listener is not None:
                live = RegionLiveEvent(name, marker.replayed)
                await invoke(getattr(listener, "after_region_live", None), live)
        await invoke(self.on_marker, marker)
        session.marker_event.set()

    async def _drain_dispatch(self) -> None:
        """Let queued events reach the listener (unless called from one)."""
        if asyncio.current_task() is self._dispatcher:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self._close_timeout):
                await self._dispatch_queue.join()

    async def _ack_loop(self, session: Session) -> None:
        while True:
            await asyncio.sleep(self.ack_interval)
            await self._flush_ack(session)

    async def _flush_ack(self, session: Session) -> None:
        """Send `ack` with the session's highest delivered seq if it advanced."""
        high = session.ack_high
        if high is None or (session.acked is not None and high <= session.acked):
            return
        session.acked = high
        with contextlib.suppress(ConnectionClosed):
            await session.ws.send(json.dumps({"type": "ack", "up_to": high}))


def _parsed(raw: str | bytes) -> dict[str, Any] | None:
    """The JSON object a text frame holds, or None (logged) for any other."""
    if not isinstance(raw, str):
        logger.warning("ignoring a binary frame")
        return None
    try:
        frame = json.loads(raw)
    except ValueError:
        logger.warning("ignoring a frame that is not JSON: %.200r", raw)
        return None
    return frame if isinstance(frame, dict) else None


def _reply_frame(session: Session, kind: str, frame: dict[str, Any]) -> None:
    """Hand a reply to the request waiting for it; a `closed` without the
    close request's id answers that request."""
    pending = session.pending.get(str(frame.get("id")))
    if pending is None and kind == "closed":
        pending = next((p for p in session.pending.values() if p.kind == "close"), None)
    if pending is not None and not pending.future.done():
        pending.future.set_result(frame)
