"""The local cache rule of a Region, without a server."""

import pytest

from durablecache_client import EntryEvent
from durablecache_client import region as region_module
from durablecache_client.region import Region


def make_event(key, op="update", value=None, version=1, region="r"):
    return EntryEvent(
        id=f"e-{key}-{op}-{version}",
        seq=1,
        region=region,
        key=key,
        op=op,
        value=value,
        version=version,
        ts=None,
        is_replay=False,
    )


@pytest.fixture
def region():
    return Region(client=None, name="r")


def test_event_applies_only_when_its_version_is_newer(region):
    region._apply_image_entry("k", "v3", 3)

    assert not region._apply_event(make_event("k", value="v2", version=2))
    assert not region._apply_event(make_event("k", value="again", version=3))
    assert region.get_entry("k") == ("v3", 3)
    assert region._apply_event(make_event("k", value="v4", version=4))
    assert region.get_entry("k") == ("v4", 4)


def test_destroy_keeps_the_version_so_an_older_update_cannot_resurrect(region):
    region._apply_event(make_event("k", "create", "v1", 1))
    region._apply_event(make_event("k", "destroy", None, 2))

    assert "k" not in region
    assert region.version_of("k") == 2
    assert not region._apply_event(make_event("k", "update", "old", 1))
    assert "k" not in region
    # A re-created key continues from its last version.
    assert region._apply_event(make_event("k", "create", "new", 3))
    assert region.get_entry("k") == ("new", 3)


def test_old_image_entry_does_not_overwrite_a_newer_event(region):
    region._apply_event(make_event("k", "update", "live", 6))

    assert not region._apply_image_entry("k", "image", 5)
    assert region.get("k") == "live"


def test_invalidate_keeps_the_key_with_value_none(region):
    region._apply_event(make_event("k", "create", "v", 1))
    region._apply_event(make_event("k", "invalidate", None, 2))

    assert "k" in region
    assert region.get_entry("k") == (None, 2)


def test_region_clear_and_destroy_empty_the_cache(region):
    region._apply_event(make_event("a", "create", 1, 1))
    region._apply_event(make_event("b", "destroy", None, 4))
    region._apply_event(make_event(None, "region_clear", None, None))

    assert region.snapshot() == {}
    assert region.version_of("b") is None

    region._apply_event(make_event("a", "create", 1, 1))
    region._apply_event(make_event(None, "region_destroy", None, None))
    assert len(region) == 0


def test_tombstones_expire_after_the_tracking_window(monkeypatch):
    clock = iter([100.0, 200.0, 250.0])
    monkeypatch.setattr(region_module, "monotonic", lambda: next(clock))
    region = Region(client=None, name="r", tombstone_ttl=60.0)
    region._apply_event(make_event("a", "destroy", None, 5))
    region._apply_event(make_event("b", "destroy", None, 5))
    region._apply_event(make_event("c", "destroy", None, 5))

    # Pruned lazily on the next destroy: only "a" is older than 60 s.
    assert region.version_of("a") is None
    assert region.version_of("b") == 5
    assert region.version_of("c") == 5


def test_invalid_region_name_is_refused():
    with pytest.raises(ValueError, match="invalid region name"):
        Region(client=None, name="no spaces")
