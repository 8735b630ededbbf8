"""The blocking face: an AsyncDurableClient run on a background event loop.

Every method blocks until the asyncio client has done the same operation.
Listeners and callbacks run on the background thread.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterable, Sequence
from typing import Any, TypeVar

from .client import AsyncDurableClient
from .events import CacheListener, CqListener, Marker, Welcome, Written
from .region import Region

T = TypeVar("T")


class _LoopThread:
    """An event loop running forever on a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(
            target=self._main, name="durablecache-client", daemon=True
        )
        self.thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            pending = asyncio.all_tasks(self.loop)
            for task in pending:
                task.cancel()
            if pending:
                self.loop.run_until_complete(
                    asyncio.gather(*pending, return_exceptions=True)
                )
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run `coro` on the loop and block for its result."""
        if threading.current_thread() is self.thread:
            coro.close()
            raise RuntimeError(
                "blocking DurableClient call from a listener or callback; "
                "use the asyncio API (AsyncDurableClient) there"
            )
        if self.loop.is_closed():
            coro.close()
            raise RuntimeError("the client's event loop is stopped")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        """Stop the loop and wait for its thread (idempotent)."""
        if self.thread.is_alive() and threading.current_thread() is not self.thread:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join()


class SyncRegion:
    """Blocking twin of `Region`; cache reads go straight to the shared cache."""

    def __init__(self, region: Region, runner: _LoopThread) -> None:
        self._region = region
        self._runner = runner
        self.name = region.name

    def __repr__(self) -> str:
        return f"<SyncRegion {self.name!r} entries={len(self._region)}>"

    @property
    def listener(self) -> CacheListener | None:
        """The listener receiving this region's events."""
        return self._region.listener

    @listener.setter
    def listener(self, listener: CacheListener | None) -> None:
        self._region.listener = listener

    def get(self, key: str, default: Any = None) -> Any:
        """Return the cached value of `key`."""
        return self._region.get(key, default)

    def get_entry(self, key: str) -> tuple[Any, int] | None:
        """Return `(value, version)` for `key`, or None."""
        return self._region.get_entry(key)

    def version_of(self, key: str) -> int | None:
        """Return the newest version known for `key`."""
        return self._region.version_of(key)

    def keys(self) -> list[str]:
        """Return the cached keys."""
        return self._region.keys()

    @property
    def last_seq(self) -> int | None:
        """The highest `seq` of this region's events delivered."""
        return self._region.last_seq

    def snapshot(self) -> dict[str, tuple[Any, int]]:
        """Return a copy of the cache as `{key: (value, version)}`."""
        return self._region.snapshot()

    def __contains__(self, key: object) -> bool:
        return key in self._region

    def __len__(self) -> int:
        return len(self._region)

    def register_keys(
        self,
        keys: str | Iterable[str],
        durable: bool = False,
        policy: str = "keys_values",
    ) -> int:
        """Register interest in a list of keys; return the image count."""
        keys = keys if isinstance(keys, str) else list(keys)
        return self._runner.run(self._region.register_keys(keys, durable, policy))

    def register_regex(
        self, pattern: str, durable: bool = False, policy: str = "keys_values"
    ) -> int:
        """Register interest in keys fully matching `pattern`."""
        return self._runner.run(self._region.register_regex(pattern, durable, policy))

    def register_all_keys(
        self, durable: bool = False, policy: str = "keys_values"
    ) -> int:
        """Register interest in every key of the region."""
        return self._runner.run(self._region.register_all_keys(durable, policy))

    def unregister_keys(self, keys: str | Iterable[str]) -> None:
        """Drop the interest registered with the same key list."""
        keys = keys if isinstance(keys, str) else list(keys)
        self._runner.run(self._region.unregister_keys(keys))

    def unregister_regex(self, pattern: str) -> None:
        """Drop the interest registered with the same pattern."""
        self._runner.run(self._region.unregister_regex(pattern))

    def unregister_all_keys(self) -> None:
        """Drop the all-keys interest."""
        self._runner.run(self._region.unregister_all_keys())

    def register_cq(
        self,
        name: str,
        query: str,
        listener: CqListener | None = None,
        durable: bool = False,
    ) -> int:
        """Register a continuous query (see `Region.register_cq`); return the
        number of entries in its initial result."""
        return self._runner.run(
            self._region.register_cq(name, query, listener, durable=durable)
        )

    def close_cq(self, name: str) -> None:
        """Close the continuous query `name`."""
        self._runner.run(self._region.close_cq(name))

    def cq_results(self, name: str) -> dict[str, tuple[Any, int]] | None:
        """The result set of the CQ `name` as last known (see
        `Region.cq_results`)."""
        return self._region.cq_results(name)

    def put(self, key: str, value: Any) -> Written:
        """Create or update `key` through the client's socket (see
        Region.put); return once the event is durable."""
        return self._runner.run(self._region.put(key, value))


class DurableClient:
    """Blocking durable client; same arguments as `AsyncDurableClient`.

    It owns a daemon thread running an event loop, stopped by `close()`.
    Also a context manager (`close(keepalive=False)` on exit).
    """

    def __init__(
        self,
        urls: str | Sequence[str],
        durable_id: str | None = None,
        timeout: int = 300,
        redundancy: int = 0,
        conflate: str | bool = "server",
        token: str | None = None,
        ack_interval: float = 0.1,
        message_tracking_timeout: float = 900.0,
        **options: Any,
    ) -> None:
        self._runner = _LoopThread()
        self._regions: dict[str, SyncRegion] = {}

        async def make() -> AsyncDurableClient:
            return AsyncDurableClient(
                urls,
                durable_id,
                timeout,
                redundancy,
                conflate,
                token,
                ack_interval,
                message_tracking_timeout,
                **options,
            )

        try:
            self._client = self._runner.run(make())
        except BaseException:
            self._runner.stop()
            raise

    @property
    def async_client(self) -> AsyncDurableClient:
        """The underlying asyncio client (use it only on its loop)."""
        return self._client

    @property
    def welcome(self) -> Welcome | None:
        """The welcome of the current (or last) session."""
        return self._client.welcome

    @property
    def last_marker(self) -> Marker | None:
        """The last marker received."""
        return self._client.last_marker

    @property
    def connected(self) -> bool:
        """True while a session is established."""
        return self._client.connected

    @property
    def last_seq(self) -> int | None:
        """The highest `seq` delivered: the `since` of a recovery by key."""
        return self._client.last_seq

    @property
    def duplicates_dropped(self) -> int:
        """How many duplicate events were dropped."""
        return self._client.duplicates_dropped

    def __enter__(self) -> DurableClient:
        self.connect()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close(keepalive=False)

    def connect(self) -> Welcome:
        """Connect and return the welcome (see `AsyncDurableClient.connect`)."""
        return self._runner.run(self._client.connect())

    def region(self, name: str, listener: CacheListener | None = None) -> SyncRegion:
        """Return the handle of region `name`, setting its listener if given."""

        async def get() -> Region:
            return self._client.region(name, listener)

        region = self._runner.run(get())
        wrapper = self._regions.get(name)
        if wrapper is None:
            wrapper = self._regions[name] = SyncRegion(region, self._runner)
        return wrapper

    def ready_for_events(self) -> None:
        """Send `ready` (see `AsyncDurableClient.ready_for_events`)."""
        self._runner.run(self._client.ready_for_events())

    def close_cq(self, name: str) -> None:
        """Close the continuous query `name`."""
        self._runner.run(self._client.close_cq(name))

    def wait_for_marker(self, timeout: float | None = None) -> Marker:
        """Block until the current session's marker arrives; return it."""
        return self._runner.run(self._client.wait_for_marker(timeout))

    def wait_closed(self, timeout: float | None = None) -> None:
        """Block until the client stops; raise the fatal error if any."""
        self._runner.run(self._client.wait_closed(), timeout)

    def close(self, keepalive: bool = False) -> None:
        """Send `close`, wait for `closed`, stop reconnecting and the thread."""
        if self._runner.loop.is_closed():
            return
        try:
            self._runner.run(self._client.close(keepalive))
        finally:
            self._runner.stop()
