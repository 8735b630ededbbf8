"""Keep what a process loaded at start out of the cyclic collector's way.

A full collection (generation 2) walks every object the collector tracks,
and a node's processes track hundreds of thousands that live as long as the
process: Django, DRF, Channels, Twisted, Celery, their modules, classes and
settings. Under the live fan-out (100 sockets, 100 writes/s) Daphne ran one
every 2 to 4 s, each **44 to 50 ms with the GIL held**: the event loop sent
nothing meanwhile, and its database thread, if it was inside a node-store
transaction, kept SQLite's write lock that long, so the worker's fan-out
waited too (docs/performance.md). ``gc.freeze()`` moves every object
tracked at that moment to a permanent generation that collections skip:
the same collections then took 6 to 9 ms.

Objects frozen are never collected, so this is called once the process
has loaded what it keeps (after a collection, so startup's garbage goes
first), not per request or per task.
"""

import gc


def freeze_startup_heap() -> None:
    """Collect startup's garbage, then freeze what is left (``gc.freeze``)."""
    gc.collect()
    gc.freeze()
