"""Reads of clients and interests, shaped for the websocket, REST, the CLI
and the dashboard; one module per reader (HackSoft's selectors by topic).

The package is the public face: callers use ``clients.selectors.<name>``.
"""

from clients.selectors.clients import (
    client_get,
    client_list,
    client_queue_page,
    client_visible_to,
    interest_list,
    node_overview,
    queue_sizes_of,
)
from clients.selectors.dashboard import (
    CLIENT_STATES,
    SERIES_GAP,
    client_history,
    client_series,
    cluster_series,
    dashboard_clients,
    dashboard_counts,
    node_series,
    overflow_counts,
    recent_history,
)
from clients.selectors.delivery import (
    CQ_KIND,
    INTEREST_CLIENTS_PER_READ,
    InterestRow,
    client_modes,
    client_regions,
    cq_image_page,
    cq_list,
    delivery_checks,
    hosted_load,
    image_page,
    interest_rows,
    redundancy_satisfied,
    sockets_holding,
    welcome_fields,
)
from clients.selectors.images import (
    SincePage,
    cq_since_image_page,
    since_image_page,
)

__all__ = [
    "CLIENT_STATES",
    "CQ_KIND",
    "INTEREST_CLIENTS_PER_READ",
    "SERIES_GAP",
    "InterestRow",
    "SincePage",
    "client_get",
    "client_history",
    "client_list",
    "client_modes",
    "client_queue_page",
    "client_regions",
    "client_series",
    "client_visible_to",
    "cluster_series",
    "cq_image_page",
    "cq_list",
    "cq_since_image_page",
    "dashboard_clients",
    "dashboard_counts",
    "delivery_checks",
    "hosted_load",
    "image_page",
    "interest_list",
    "interest_rows",
    "node_overview",
    "node_series",
    "overflow_counts",
    "queue_sizes_of",
    "recent_history",
    "redundancy_satisfied",
    "since_image_page",
    "sockets_holding",
    "welcome_fields",
]
