"""The wire shape of an event (docs/protocol.md, "Server → client frames")."""

from datetime import datetime
from typing import Any


def format_ts(ts: datetime) -> str:
    """ISO-8601 with an explicit UTC offset."""
    return ts.isoformat().replace("+00:00", "Z")


def event_to_dict(event: Any) -> dict[str, Any]:
    """Return the public fields of an Event or a queued copy of one."""
    return {
        "id": event.event_id,
        "region": event.region,
        "key": event.key,
        "op": event.op,
        "value": event.value,
        "version": event.version,
        "ts": format_ts(event.ts),
    }
