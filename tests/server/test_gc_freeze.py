"""A node's processes keep their startup objects out of full collections."""

import gc

from durablecache.server import gc_freeze as frozen_heap
from tests.helpers import run_python


def test_objects_alive_at_the_freeze_leave_the_collected_generations():
    kept = [object()]  # a list is tracked by the collector
    garbage = [None]
    garbage[0] = garbage  # a cycle: only a collection frees it
    garbage_id = id(garbage)
    del garbage
    try:
        frozen_heap.freeze_startup_heap()
        assert gc.get_freeze_count() > 0
        collected = {id(obj) for obj in gc.get_objects()}
        assert id(kept) not in collected  # frozen, so no collection walks it
        assert garbage_id not in collected  # collected before the freeze
    finally:
        gc.unfreeze()
    assert any(obj is kept for obj in gc.get_objects())


def test_daphnes_application_freezes_what_it_loaded(tmp_path):
    code = (
        "import gc, durablecache.asgi, django.urls;"
        "assert 'cache.api.views' in __import__('sys').modules;"
        "print(gc.get_freeze_count())"
    )
    done = run_python(["-c", code], tmp_path)
    assert done.returncode == 0, done.stderr
    # Django, DRF, Channels and Twisted: well over 10,000 objects.
    assert int(done.stdout.strip()) > 10_000
