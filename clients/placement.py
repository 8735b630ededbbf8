"""Where a durable client's queue may live: the cluster's membership as a
node sees it, and the rules of failover and top-up over it.

The rules change a ``DurableClient`` in memory only; the services lock,
save and start copies (``clients.replication``).
docs/operations.md#redundancy-and-failover.
"""

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from cache.models import Node
from clients.models import DurableClient

UP, DRAINING, DOWN = "up", "draining", "down"


def self_node() -> str:
    """The name of the node this process belongs to."""
    return settings.DURABLECACHE_NODE_NAME


@dataclass
class Membership:
    """The cluster's nodes as seen now: up, draining (handing over) or down.

    A draining node whose heartbeat stopped is down like any other.
    """

    rows: dict[str, Node]
    suspects: set[str] = field(default_factory=set)
    # The node running this code (``read_here``): up (or draining) whatever
    # its heartbeat says -- before its first one (a test, a command), or
    # when its own heartbeat runs late (a busy cluster database, a paused
    # VM): it is evidently alive, and a node that takes itself for dead
    # releases the clients of its own live sockets, which then expire
    # while connected.
    assume_up: set[str] = field(default_factory=set)

    @classmethod
    def read(cls) -> "Membership":
        return cls(rows={n.name: n for n in Node.objects.all()})

    @classmethod
    def read_here(cls) -> "Membership":
        """``read``, as the node running this code sees it: itself up."""
        members = cls.read()
        members.assume_up.add(self_node())
        return members

    def state(self, name: str) -> str:
        node = self.rows.get(name)
        if name in self.suspects:
            return DOWN
        if name in self.assume_up:
            return DRAINING if node is not None and node.is_draining else UP
        if node is None:
            return DOWN
        horizon = timezone.now() - timedelta(
            seconds=settings.DURABLECACHE_NODE_TIMEOUT_S
        )
        if node.last_heartbeat < horizon:
            return DOWN
        return DRAINING if node.is_draining else UP

    def up(self) -> list[str]:
        names = set(self.rows) | self.assume_up
        return sorted(n for n in names if self.state(n) == UP)


def connection_is_live(client: DurableClient, members: Membership) -> bool:
    """Whether the client's recorded socket can still exist (its node has
    not died, nor restarted since the socket connected)."""
    if not client.is_connected:
        return False
    node = members.rows.get(client.node)
    if client.node == self_node():
        # This node before its first heartbeat (tests): trust the flag.
        return (
            node is None
            or client.connected_at is None
            or (node.started_at <= client.connected_at)
        )
    if node is None or members.state(client.node) != UP:
        return False
    return client.connected_at is None or node.started_at <= client.connected_at


def wanted_secondaries(client: DurableClient, live: int) -> int:
    """How many secondaries the client should have with ``live`` nodes up."""
    if not client.is_durable:
        return 0
    if client.redundancy < 0:
        return max(0, live - 1)
    return client.redundancy


def redundancy_satisfied(client: DurableClient, live: int) -> bool:
    return len(client.secondaries) >= wanted_secondaries(client, live)


def set_secondaries(client: DurableClient, secondaries: list[str]) -> None:
    """Replace the secondaries; ``syncing`` stays a subset of them."""
    client.secondaries = secondaries
    client.syncing = [s for s in client.syncing if s in secondaries]


def fail_over(client: DurableClient, members: Membership) -> bool:
    """Drop hosts that are not up; promote a secondary if the primary went.

    Returns whether the client ends with an up (or this-node) primary.

    * A primary up keeps its up secondaries.
    * A primary down or draining gives way to the first complete up copy.
    * A draining primary without one keeps only its up secondaries: it
      must hand the queue to an up node, and a host that is not up,
      counted among the secondaries, keeps the copy from being made (two
      nodes stopped together would exit with their shared queue).
    * A primary down without one gives way to a complete copy on a
      draining node (stopping, handing its queues over), whose handover
      then moves the queue to an up node: left listed, that copy leaves
      with its node. Else nothing changes: its hosts may come back (a
      restart keeps the store), and a ``hello`` meanwhile is told the
      queue is lost.
    """
    keep = [s for s in client.secondaries if members.state(s) == UP]
    primary = members.state(client.primary)
    if primary == UP:
        set_secondaries(client, keep)
        return True
    complete = [s for s in keep if s not in client.syncing]
    if complete:
        client.primary = complete[0]
        set_secondaries(client, [s for s in keep if s != complete[0]])
        return True
    if primary == DRAINING:
        set_secondaries(client, keep)
        return False
    handing = [
        s
        for s in client.secondaries
        if members.state(s) == DRAINING and s not in client.syncing
    ]
    if handing:
        client.primary = handing[0]
        set_secondaries(client, keep)
    return False


def top_up(
    client: DurableClient,
    members: Membership,
    load: Callable[[], Counter[str]],
    at_least: int = 0,
) -> list[str]:
    """Add secondaries on the least loaded up nodes; return the new ones.

    ``load()`` counts the queues each node hosts; it is asked only when a
    secondary is to be added (it is a query, and most ``hello``s of a
    connect storm add none). Also removes secondaries beyond the
    redundancy (it can be lowered by a later ``hello``), copies still being
    filled first.
    """
    live = members.up()
    want = max(at_least, wanted_secondaries(client, len(live)))
    added: list[str] = []
    missing = want - len(client.secondaries)
    if missing > 0:
        counts = load()
        free = sorted(
            (n for n in live if n not in client.hosts), key=lambda n: (counts[n], n)
        )
        for name in free[:missing]:
            client.secondaries = [*client.secondaries, name]
            client.syncing = [*client.syncing, name]
            counts[name] += 1
            added.append(name)
    while len(client.secondaries) > want:
        extra = next(
            (s for s in reversed(client.secondaries) if s in client.syncing),
            client.secondaries[-1],
        )
        set_secondaries(client, [s for s in client.secondaries if s != extra])
    return added


def needs_fixing(row: tuple[Any, ...], members: Membership, live: int) -> bool:
    """Whether a client's hosts (pk, primary, secondaries, syncing,
    redundancy) call for ``fix_placement`` with ``live`` nodes up."""
    _, primary, secondaries, _, redundancy = row
    if members.state(primary) != UP:
        # Nothing to do for a dead primary without any copy elsewhere (its
        # queue comes back with the node, or the next hello says -1).
        return bool(secondaries) or members.state(primary) == DRAINING
    if any(members.state(s) != UP for s in secondaries):
        return True
    want = max(0, live - 1) if redundancy < 0 else redundancy
    free = live - 1 - len(secondaries)
    return len(secondaries) > want or (len(secondaries) < want and free > 0)


def copy_source(client: DurableClient, members: Membership, node: str) -> str | None:
    """The host a copy on ``node`` should be filled from: the primary if it
    is up (or handing over), else a complete secondary that is up."""
    if client.primary != node and members.state(client.primary) in (UP, DRAINING):
        return client.primary
    for host in client.complete_secondaries:
        if host != node and members.state(host) == UP:
            return host
    return None
