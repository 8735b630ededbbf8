"""Python client for durablecache: durable subscriptions over websockets.

Usage and behaviour: sdk/python/README.md; protocol: docs/protocol.md.
"""

from .client import AsyncDurableClient
from .errors import (
    BadFieldError,
    BadQueryError,
    BadRegexError,
    ClientClosedError,
    ConnectFailedError,
    DurableCacheError,
    FatalConnectionError,
    NoSuchRegionError,
    NotReadyError,
    SinceTooOldError,
)
from .events import (
    CacheListener,
    CqEvent,
    CqListener,
    EntryEvent,
    Gap,
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
    "BadFieldError",
    "BadQueryError",
    "BadRegexError",
    "CacheListener",
    "ClientClosedError",
    "ConnectFailedError",
    "CqEvent",
    "CqListener",
    "DurableCacheError",
    "DurableClient",
    "EntryEvent",
    "FatalConnectionError",
    "Gap",
    "Marker",
    "NoSuchRegionError",
    "NotReadyError",
    "Region",
    "RegionLiveEvent",
    "SinceTooOldError",
    "SyncRegion",
    "Welcome",
    "Written",
    "__version__",
]
