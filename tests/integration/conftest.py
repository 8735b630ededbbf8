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


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    """One running node shared by a module's tests (use distinct ids)."""
    c = Cluster(tmp_path_factory.mktemp("live"))
    try:
        c.migrate()
        c.start_node("node-1")
        c.operator = c.token("ops", operator=True)
        c.user = c.token("app")
        c.other = c.token("intruder")
        yield c
    finally:
        c.close()
