"""Delivery in the asyncio client: frames read, events handed over, acks.

A layer of `AsyncDurableClient` (see `_core`). Each session's reader turns
frames into replies, image entries and queued events; one dispatcher task
hands events and markers to the listeners in order; the ack task acks what
they were handed (sdk/python/README.md, "Acks").
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from websockets.exceptions import ConnectionClosed

from ._core import Callback, invoke, logger
from ._regions import ClientRegions
from ._session import Pending, Session
from .errors import error_from_frame
from .events import (
    CQ_OPS,
    LISTENER_METHODS,
    CacheListener,
    CqEvent,
    EntryEvent,
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
    default_listener: CacheListener | None
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
        pending = session.pending.get(str(frame.get("id")))
        name = frame.get("region") or (
            pending.region.name if pending and pending.region else None
        )
        if not name:
            logger.warning("ignoring an image without region: %.200r", frame)
            return
        region = self.region(str(name))
        keys = pending.image_keys if pending is not None else set()
        if frame.get("cq") is not None or (pending is not None and pending.cq):
            self._apply_cq_image(session, pending, frame, keys)
            return
        for entry in frame.get("entries") or []:
            key = entry.get("key")
            if key is None:
                continue
            keys.add(key)
            region._apply_image_entry(
                key, entry.get("value"), int(entry.get("version", 0))
            )
        for key in frame.get("keys") or []:
            keys.add(key)
            region._apply_image_key(key)

    def _apply_cq_image(
        self,
        session: Session,
        pending: Pending | None,
        frame: dict[str, Any],
        keys: set[str],
    ) -> None:
        """Put a CQ's image in its result set, never in the region's cache."""
        cq = pending.cq if pending is not None else None
        if cq is None:
            cq = self._cqs.get(str(frame.get("cq")))
        if cq is None:
            logger.debug("ignoring the image of an unknown CQ: %.200r", frame)
            return
        # A re-registration no replay covers, or the server's own resync
        # after a gap: the listener hears what changed.
        resync = (pending is not None and pending.resync) or frame.get("resync") is True
        for entry in frame.get("entries") or []:
            key, version = entry.get("key"), entry.get("version")
            if not isinstance(key, str) or version is None:
                continue
            if entry.get("cq_op") == "destroy" or entry.get("destroyed") is True:
                # A left marker or a tombstone: not in the result now.
                if cq.apply_left(key, int(version)) and resync:
                    base_op = "destroy" if entry.get("destroyed") else "update"
                    left = CqEvent(
                        cq.name, base_op, "destroy", cq.region, key, None,
                        int(version), is_replay=False, is_resync=True,
                    )  # fmt: skip
                    self._tell_cq(session, cq, left)
                continue
            keys.add(key)
            value = entry.get("value")
            op = cq.apply_member(key, value, int(version))
            if resync and op is not None:
                event = CqEvent(
                    cq.name, op, op, cq.region, key, value, int(version),
                    is_replay=False, is_resync=True,
                )  # fmt: skip
                self._tell_cq(session, cq, event)

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
        if self._seen.check_and_add(event.id):
            self.duplicates_dropped += 1
            logger.debug("dropping duplicate event %s", event.id)
            return
        region = self.region(event.region)
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
