"""``/ws/v1/dashboard``: live updates for open dashboard pages.

Session-authenticated staff only (the page's own login); anyone else is
accepted and closed at once with 4403 so a browser can read why. The
services publish client state changes to the ``dashboard`` group
(``clients.history`` → ``queues.notify.dashboard``); this consumer only
forwards them. Nothing is received from the page.
"""

import contextlib
from typing import Any

from channels.generic.websocket import AsyncJsonWebsocketConsumer

from queues import notify

CLOSE_FORBIDDEN = 4403


class DashboardConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self) -> None:
        user = self.scope.get("user")
        await self.accept()
        if user is None or not user.is_authenticated or not user.is_staff:  # type: ignore[attr-defined]
            await self.close(code=CLOSE_FORBIDDEN)
            return
        with contextlib.suppress(Exception):  # no Redis: the page still works
            await self.channel_layer.group_add(
                notify.DASHBOARD_GROUP, self.channel_name
            )

    async def receive(
        self,
        text_data: str | None = None,
        bytes_data: bytes | None = None,
        **kwargs: Any,
    ) -> None:
        """The page sends nothing that matters: ignore any frame, JSON or not."""
        return None

    async def dashboard_update(self, message: dict[str, Any]) -> None:
        await self.send_json(message["update"])

    async def disconnect(self, code: int) -> None:
        with contextlib.suppress(Exception):
            await self.channel_layer.group_discard(
                notify.DASHBOARD_GROUP, self.channel_name
            )
