"""Python client for durablecache: durable subscriptions over websockets.

Usage and behaviour: sdk/python/README.md; protocol: docs/protocol.md.
"""

from .client import AsyncDurableClient
from .errors import (
    ClientClosedError,
    ConnectFailedError,
    DurableCacheError,
    FatalConnectionError,
)
from .events import (
    CacheListener,
    EntryEvent,
    Marker,
    RegionLiveEvent,
    Welcome,
    Written,
)
from .region import Region
from .sync import DurableClient, SyncRegion

__version__ = "0.1.0"

__all__ = [
    "AsyncDurableClient",
    "CacheListener",
    "ClientClosedError",
    "ConnectFailedError",
    "DurableCacheError",
    "DurableClient",
    "EntryEvent",
    "FatalConnectionError",
    "Marker",
    "Region",
    "RegionLiveEvent",
    "SyncRegion",
    "Welcome",
    "Written",
    "__version__",
]
