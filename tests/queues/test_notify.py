"""The sync side of the doorbell: one long-lived loop for channel-layer sends."""

import asyncio
import threading

from queues import notify


def test_sync_sends_share_one_loop_on_one_thread():
    layer_loop = notify._LayerLoop()
    seen = []

    async def where():
        seen.append((asyncio.get_running_loop(), threading.current_thread().name))

    for _ in range(3):
        layer_loop.run(where)
    assert len(set(seen)) == 1  # the same loop, and so the same connections
    loop, thread = seen[0]
    assert thread == "channel-layer"
    assert loop.is_running()
    assert thread != threading.current_thread().name


def test_a_send_that_does_not_finish_is_given_up(monkeypatch):
    monkeypatch.setattr(notify, "SEND_TIMEOUT_S", 0.05)
    layer_loop = notify._LayerLoop()

    async def stuck():
        await asyncio.sleep(3600)

    layer_loop.run(stuck)  # returns after the bound instead of hanging (cancelled)

    async def fine():
        return None

    layer_loop.run(fine)  # the loop still serves later sends
