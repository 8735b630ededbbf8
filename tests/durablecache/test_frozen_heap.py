"""A node's processes keep their startup objects out of full collections."""

import gc
import os
import subprocess
import sys
from pathlib import Path

from durablecache import frozen_heap

ROOT = Path(__file__).resolve().parents[2]


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
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DURABLECACHE_", "DJANGO_", "PYTEST"))
    }
    env["DURABLECACHE_DATA_DIR"] = str(tmp_path)
    code = (
        "import gc, durablecache.asgi, django.urls;"
        "assert 'durablecache.cache.api.views' in __import__('sys').modules;"
        "print(gc.get_freeze_count())"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    # Django, DRF, Channels and Twisted: well over 10,000 objects.
    assert int(done.stdout.strip()) > 10_000
