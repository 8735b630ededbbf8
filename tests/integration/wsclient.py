"""A raw-frame websocket client for end-to-end tests (no client library)."""

import asyncio
import json
from typing import Any

import websockets

WAIT_S = 20


class RawClient:
    def __init__(self, url: str, token: str) -> None:
        self.url, self.token = url, token
        self.ws: Any = None
        self.buffer: list[dict[str, Any]] = []

    async def __aenter__(self) -> "RawClient":
        self.ws = await websockets.connect(
            self.url, additional_headers={"Authorization": f"Token {self.token}"}
        )
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.ws.close()

    async def send(self, **frame: Any) -> None:
        await self.ws.send(json.dumps(frame))

    async def recv(self, wait: float = WAIT_S) -> dict[str, Any]:
        if self.buffer:
            return self.buffer.pop(0)
        return json.loads(await asyncio.wait_for(self.ws.recv(), wait))

    async def expect(self, frame_type: str, wait: float = WAIT_S) -> dict[str, Any]:
        """Return the next frame of ``frame_type``, keeping others buffered."""
        skipped = []
        try:
            while True:
                frame = json.loads(await asyncio.wait_for(self.ws.recv(), wait))
                if frame["type"] == frame_type:
                    return frame
                skipped.append(frame)
        finally:
            self.buffer.extend(skipped)

    async def hello(self, **fields: Any) -> dict[str, Any]:
        await self.send(type="hello", **fields)
        return await self.expect("welcome")

    async def register(self, region: str, **fields: Any) -> dict[str, Any]:
        await self.send(type="register_interest", region=region, id="reg", **fields)
        return await self.expect("interest_registered")

    async def ready_and_replay(self) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Send ready; return the replayed events and the marker."""
        await self.send(type="ready")
        events = []
        while True:
            frame = await self.recv()
            if frame["type"] == "marker":
                return events, frame
            if frame["type"] == "event":
                events.append(frame)

    async def events(self, count: int, wait: float = WAIT_S) -> list[dict[str, Any]]:
        found = []
        while len(found) < count:
            frame = await self.recv(wait)
            if frame["type"] == "event":
                found.append(frame)
        return found

    async def ack(self, up_to: int) -> None:
        await self.send(type="ack", up_to=up_to)

    async def close(self, keepalive: bool) -> dict[str, Any]:
        await self.send(type="close", keepalive=keepalive)
        return await self.expect("closed")

    async def drop(self) -> None:
        """End the TCP connection without a close frame (a crash)."""
        self.ws.transport.abort()
