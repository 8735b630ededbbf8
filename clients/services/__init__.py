"""Every write to clients and interests, by topic: ``hello``, the ends of
sockets (``sessions``), ``interests``, ``expiry`` and ``ownership``.

The doors call them as ``services.<name>``: the public services are
re-exported here. Queue rows live in the node store and are reached only
through ``queues.services``; a queue on another node is dropped by task
(``clients.dispatch``).
"""

from clients.cq_forgets import cq_forget_here, cqs_forget_pending
from clients.services.cqs import (
    cq_check,
    cq_close,
    cq_close_by_client_id,
    cq_register,
    cq_register_by_client_id,
)
from clients.services.expiry import clients_expire
from clients.services.hello import (
    NO_QUEUE,
    QUEUE_LOST,
    HelloResult,
    client_hello,
    parse_hello_options,
)
from clients.services.interests import (
    interest_delete,
    interest_register,
    interest_register_by_client_id,
    interest_unregister,
    interest_unregister_by_client_id,
)
from clients.services.ownership import (
    CLOSE_BY_OPERATOR,
    client_check_claim,
    client_delete,
    client_ensure_offline,
)
from clients.services.resync import Resync, ResyncTarget, client_resync_start
from clients.services.sessions import (
    client_close,
    client_disconnected,
    clients_ended,
    clients_node_restarted,
    clients_of_dead_nodes_disconnect,
)

__all__ = [
    "CLOSE_BY_OPERATOR",
    "NO_QUEUE",
    "QUEUE_LOST",
    "HelloResult",
    "Resync",
    "ResyncTarget",
    "client_check_claim",
    "client_close",
    "client_delete",
    "client_disconnected",
    "client_ensure_offline",
    "client_hello",
    "client_resync_start",
    "clients_ended",
    "clients_expire",
    "clients_node_restarted",
    "clients_of_dead_nodes_disconnect",
    "cq_check",
    "cq_close",
    "cq_close_by_client_id",
    "cq_forget_here",
    "cq_register",
    "cq_register_by_client_id",
    "cqs_forget_pending",
    "interest_delete",
    "interest_register",
    "interest_register_by_client_id",
    "interest_unregister",
    "interest_unregister_by_client_id",
    "parse_hello_options",
]
