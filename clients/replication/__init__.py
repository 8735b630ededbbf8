"""Redundant subscription queues: copies of a durable client's queue on
other nodes, failover and repair, the ack relay, and the handover of a
stopping node.

A durable client's queue is hosted on a ``primary`` (the node that serves
its socket) and ``secondaries`` (``DurableClient`` in the cluster
database); the rules that choose them are ``clients.placement``. Every
host fills its copy by itself from the cluster event log (its own
fan-out), so a copy only has to be *started* (``copies``). Failover and
repair are one idempotent step under a row lock per client
(``failover.fix_placement``), run by every node's tick, by ``hello`` and
by a node handing over on SIGTERM (``handover``). Acknowledgements reach
the secondaries by a batched relay from the primary's sockets, healed by
the primary's size reports (``acks``).
docs/operations.md#redundancy-and-failover.
"""

from clients.replication.acks import AckRelay, ack_relay, apply_reported_acks
from clients.replication.copies import (
    adopt,
    copies_resume,
    copy_finished,
    copy_in,
    copy_out,
    copy_page_send,
    start_copies,
)
from clients.replication.failover import fix_placement, placement_repair, save_placement
from clients.replication.handover import node_handover

__all__ = [
    "AckRelay",
    "ack_relay",
    "adopt",
    "apply_reported_acks",
    "copies_resume",
    "copy_finished",
    "copy_in",
    "copy_out",
    "copy_page_send",
    "fix_placement",
    "node_handover",
    "placement_repair",
    "save_placement",
    "start_copies",
]
