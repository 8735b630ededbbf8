"""Keep what a process loaded at start out of the cyclic collector's way.

A full collection (generation 2) walks every object the collector tracks,
and a node's processes track hundreds of thousands that live as long as the
process: Django, DRF, Channels, Twisted, Celery, their modules, classes and
settings. Under a live fan-out such a collection comes every few seconds
and holds the GIL for tens of milliseconds: the event loop sends nothing
meanwhile, and its database thread, if inside a node-store transaction,
keeps SQLite's write lock that long, so the worker's fan-out waits too.
``gc.freeze()`` moves every object tracked at that moment to a permanent
generation that collections skip, which makes them several times shorter
(docs/decisions/0006-gc-freeze.md).

Objects frozen are never collected, so this is called once the process
has loaded what it keeps (after a collection, so startup's garbage goes
first), not per request or per task.
"""

import gc


def freeze_startup_heap() -> None:
    """Collect startup's garbage, then freeze what is left (``gc.freeze``)."""
    gc.collect()
    gc.freeze()
