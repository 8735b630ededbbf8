"""Cluster-database migrations that change rows, run on a database holding
some."""

import pytest
from django.db import connections
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from cache import selectors
from cache.exceptions import SinceTooOldError
from cache.models import Entry, Region

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "node"])

BEFORE = [("cache", "0005_node_counters")]
AFTER = [("cache", "0006_entry_seq")]


def _migrate(targets):
    executor = MigrationExecutor(connections["default"])
    executor.migrate(targets)
    executor.loader.build_graph()
    return executor.loader.project_state(targets).apps


@pytest.fixture
def cluster_at_0005():
    """The cluster database at 0005; migrated to the latest again afterwards."""
    apps = _migrate(BEFORE)
    yield apps
    graph = MigrationExecutor(connections["default"]).loader.graph
    _migrate(graph.leaf_nodes())


def test_0006_answers_no_since_from_before_it(cluster_at_0005):
    region_model = cluster_at_0005.get_model("cache", "Region")
    entry_model = cluster_at_0005.get_model("cache", "Entry")
    log_model = cluster_at_0005.get_model("cache", "EventLog")
    region = region_model.objects.create(name="prices")
    entry_model.objects.create(
        region=region, key="k", value=1, version=3, updated_at=timezone.now()
    )
    log_model.objects.create(pk=1, last_seq=42)
    _migrate(AFTER)
    # The rows written before say seq 0: a since below the head then is
    # too old, one from it on is answered.
    assert Entry.objects.get(key="k").seq == 0
    assert Region.objects.get(name="prices").tombstones_pruned_through == 42
    selectors.since_check(region="prices", since=42)
    with pytest.raises(SinceTooOldError):
        selectors.since_check(region="prices", since=41)
