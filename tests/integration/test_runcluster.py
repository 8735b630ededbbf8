"""``manage.py runcluster``: a node that dies is reported at once, and
Enter in its terminal starts it again; Ctrl-C stops everything."""

import os
import signal
import urllib.request

import pytest

from tests.integration.local_cluster import LocalCluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def healthy(url: str) -> bool:
    with urllib.request.urlopen(f"{url}/healthz/", timeout=10) as response:
        return response.status == 200


def test_a_killed_node_is_reported_and_enter_starts_it_again(tmp_path):
    with LocalCluster(tmp_path, nodes=2) as cluster:
        cluster.wait_ready()
        killed = cluster.node_pid("node-2")

        os.killpg(killed, signal.SIGKILL)  # a crash of the whole node

        exited = cluster.wait_line(r"^node-2 exited")
        assert cluster.lines[exited] == (
            "node-2 exited (signal 9); press Enter here to start it again"
        )
        cluster.press_enter()
        again = cluster.wait_line(r"^starting node-2 again$", after=exited)
        cluster.wait_line(
            rf"^node-2 {cluster.url('node-2')} ready$", after=again, timeout=120
        )
        assert cluster.node_pid("node-2") != killed
        assert healthy(cluster.url("node-2"))
        assert healthy(cluster.url("node-1"))
        # Enter with every node running starts nothing.
        cluster.press_enter()
        cluster.wait_line(r"^every node is running$", after=again)

        assert cluster.interrupt() == 0
    output = cluster.output()
    assert output.endswith("cluster stopped"), output
    assert "exited" not in output[output.index("every node is running") :]


def test_without_a_keyboard_a_cluster_whose_nodes_all_died_ends(tmp_path):
    with LocalCluster(tmp_path, nodes=1, stdin=False) as cluster:
        cluster.wait_ready()

        os.killpg(cluster.node_pid("node-1"), signal.SIGKILL)

        assert cluster.proc.wait(timeout=60) == 1
        for reader in cluster.readers:
            reader.join(timeout=10)
        assert "node-1 exited (signal 9)" in cluster.lines
        assert "CommandError: every node has exited" in cluster.output()
