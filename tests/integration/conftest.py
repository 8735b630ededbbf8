import pytest

from tests.integration.harness import Cluster


@pytest.fixture
def cluster(tmp_path):
    """A migrated, empty cluster with no node started yet."""
    c = Cluster(tmp_path)
    try:
        c.migrate()
        yield c
    finally:
        c.close()


@pytest.fixture
def node1(cluster):
    """A cluster with node-1 running; returns the cluster."""
    cluster.start_node("node-1")
    return cluster
