"""The operators' dashboard in a real browser against a running 2-node cluster.

An operator logs in, watches a durable client appear live when it connects,
its state turn to disconnected with a running countdown when it goes away,
its queue depth grow while events are written, then closes it from the page
and the queue is gone from both hosts. An operator closes one continuous
query of a client that is away, and the queue count of the client's page,
open in another tab, drops without a reload. A plain user is refused.
Every page is saved as a screenshot (test-artifacts/screenshots/).
"""

import re
from collections.abc import Iterator
from typing import Any

import pytest

from durablecache_client import DurableClient
from tests.integration.harness import Cluster, wait_for

pytestmark = [
    pytest.mark.browser,
    pytest.mark.integration,
    pytest.mark.timeout(300),
]
WAIT_MS = 60_000
DURABLE_ID = "browser-app"


class Site:
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.base = cluster.nodes["node-1"]["url"]
        self.operator_password, self.operator_token = self._user("ops", True)
        self.plain_password, self.plain_token = self._user("viewer", False)

    def _user(self, name: str, operator: bool) -> tuple[str, str]:
        args = ["issue_token", name, "--new-password"]
        lines = self.cluster.manage(*args, *(["--operator"] if operator else []))
        lines_list = lines.strip().splitlines()
        password = next(
            line.split(": ", 1)[1]
            for line in lines_list
            if line.startswith("password: ")
        )
        return password, lines_list[-1]

    def hosted_queues(self, node: str) -> int:
        """This node's own count of queues in its store (/metrics)."""
        import urllib.request

        url = self.cluster.nodes[node]["url"] + "/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode()
        found = re.search(r"^durablecache_hosted_queues\{[^}]*\} (\S+)$", text, re.M)
        assert found, text
        return int(float(found.group(1)))


@pytest.fixture(scope="module")
def site(tmp_path_factory: Any) -> Iterator[Site]:
    cluster = Cluster(tmp_path_factory.mktemp("browser"))
    try:
        cluster.migrate()
        cluster.start_node("node-1")
        cluster.start_node("node-2")
        yield Site(cluster)
    finally:
        cluster.close()


def log_in(browser: Any, site: Site, username: str, password: str) -> Any:
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    page.goto(f"{site.base}/dashboard/")  # strangers are sent to log in
    page.wait_for_url("**/dashboard/login/?next=/dashboard/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("#login button[type=submit]")
    page.wait_for_load_state()
    return page


def put_many(site: Site, count: int, start: int) -> None:
    entries = {f"k{i}": i for i in range(start, start + count)}
    status, body = site.cluster.rest(
        "POST",
        "/api/v1/regions/prices/putall/",
        site.operator_token,
        {"entries": entries},
    )
    assert status == 200, body


def test_operator_watches_a_client_live_and_closes_it(chromium, site, screenshots):
    status, body = site.cluster.rest(
        "POST", "/api/v1/regions/", site.operator_token, {"name": "prices"}
    )
    assert status == 201, body
    page = log_in(chromium, site, "ops", site.operator_password)
    assert page.url.endswith("/dashboard/")

    # The clients page, live: a durable client appears when it connects.
    page.goto(f"{site.base}/dashboard/clients/")
    page.wait_for_selector("#live-status.on")
    client = DurableClient(
        [site.cluster.ws_url("node-1")],
        durable_id=DURABLE_ID,
        redundancy=1,
        timeout=900,
        token=site.operator_token,
    )
    row = f'tr[data-durable-id="{DURABLE_ID}"]'
    try:
        client.connect()
        client.region("prices").register_all_keys(durable=True, policy="none")
        client.ready_for_events()
        page.wait_for_selector(f"{row} .state .connected")
        page.screenshot(
            path=screenshots / "01-clients-connected-live.png", full_page=True
        )
    finally:
        client.close(keepalive=True)

    # It goes away: disconnected, with a countdown to expiry, no reload.
    page.wait_for_selector(f"{row} .state .disconnected")
    countdown = page.wait_for_selector(f"{row} time[data-countdown]")
    page.wait_for_function(
        "el => /^in \\d+m \\d{2}s$/.test(el.textContent)", arg=countdown
    )
    first = countdown.text_content()
    page.wait_for_function("([el, t]) => el.textContent !== t", arg=[countdown, first])
    page.screenshot(
        path=screenshots / "02-clients-disconnected-countdown.png", full_page=True
    )

    # Its page: the queue depth grows while it is away.
    page.goto(f"{site.base}/dashboard/clients/{DURABLE_ID}/")
    put_many(site, 40, 0)
    page.wait_for_function(
        "document.querySelector('#client-pending').textContent.trim() === '40'"
    )
    put_many(site, 60, 40)
    page.wait_for_function(
        "document.querySelector('#client-pending').textContent.trim() === '100'"
    )
    # Both hosts hold the copy (redundancy 1), shown per host.
    page.wait_for_function(
        "/node-1: 100/.test(document.querySelector('#client-sizes').textContent)"
        " && /node-2: 100/.test(document.querySelector('#client-sizes').textContent)"
    )
    assert page.text_content("#client-expires").strip().startswith("in ")
    page.reload()  # the queue peek is drawn by the server
    assert page.locator("#queue tbody tr").count() == 50  # one page of 50
    page.wait_for_function(
        "Chart.getChart('chart-client') &&"
        " Chart.getChart('chart-client').data.datasets.length > 0 &&"
        " Chart.getChart('chart-client').data.datasets[0].data.length >= 2"
    )
    page.screenshot(
        path=screenshots / "03-client-away-queue-growing.png", full_page=True
    )

    # The cluster overview with its charts, and the regions pages.
    page.goto(f"{site.base}/dashboard/")
    page.wait_for_function(
        "Chart.getChart('chart-queued') &&"
        " Chart.getChart('chart-queued').data.datasets.length === 2 &&"
        " Chart.getChart('chart-queued').data.datasets[0].data.length >= 2"
    )
    assert page.locator("#nodes tr[data-node]").count() == 2
    page.screenshot(path=screenshots / "04-cluster-overview.png", full_page=True)
    page.goto(f"{site.base}/dashboard/regions/")
    page.screenshot(path=screenshots / "05-regions.png", full_page=True)
    page.goto(f"{site.base}/dashboard/regions/prices/?prefix=k1")
    assert page.locator("#entries tbody tr").count() == 11  # k1, k10..k19
    page.screenshot(path=screenshots / "06-region-entries.png", full_page=True)

    # Close it from its page, after a confirmation: the queue goes everywhere.
    assert site.hosted_queues("node-1") == 1
    assert site.hosted_queues("node-2") == 1
    page.goto(f"{site.base}/dashboard/clients/{DURABLE_ID}/")
    page.click("#close-client")
    page.wait_for_selector("#confirm")
    page.screenshot(path=screenshots / "07-confirm-close.png", full_page=True)
    page.click("#confirm")
    page.wait_for_url(f"{site.base}/dashboard/clients/")
    assert "closed" in page.text_content(".messages")
    assert page.locator(row).count() == 0
    page.screenshot(path=screenshots / "08-client-closed.png", full_page=True)
    wait_for(
        lambda: site.hosted_queues("node-1") == 0 and site.hosted_queues("node-2") == 0,
        timeout=30,
    )
    status, _ = site.cluster.rest(
        "GET", f"/api/v1/clients/{DURABLE_ID}/", site.operator_token
    )
    assert status == 404
    page.context.close()


def test_a_plain_user_is_refused(chromium, site, screenshots):
    page = log_in(chromium, site, "viewer", site.plain_password)
    for path in ("/dashboard/", "/dashboard/clients/", "/dashboard/regions/"):
        response = page.goto(f"{site.base}{path}")
        assert response is not None
        assert response.status == 403, path
    page.screenshot(path=screenshots / "09-plain-user-refused.png", full_page=True)
    # Nor can a plain user use the live-update socket (closed with 4403).
    page.goto(f"{site.base}/dashboard/login/")
    code = page.evaluate(
        """() => new Promise((done) => {
            const ws = new WebSocket("ws://" + location.host + "/ws/v1/dashboard");
            ws.onclose = (e) => done(e.code);
        })"""
    )
    assert code == 4403
    page.context.close()


def pending_is(count: int) -> str:
    return f"document.querySelector('#client-pending').textContent.trim() === '{count}'"


def test_operator_closes_a_cq_and_the_queue_drains_live(chromium, site, screenshots):
    status, body = site.cluster.rest(
        "POST", "/api/v1/regions/", site.operator_token, {"name": "orders"}
    )
    assert status == 201, body
    desk = DurableClient(
        [site.cluster.ws_url("node-1")],
        durable_id="cq-desk",
        redundancy=1,
        timeout=900,
        token=site.operator_token,
    )
    try:
        desk.connect()
        orders = desk.region("orders")
        assert orders.register_cq("big", "value.total > 100", durable=True) == 0
        assert orders.register_cq("eu", "value.zone = 'eu'", durable=True) == 0
        desk.ready_for_events()
    finally:
        desk.close(keepalive=True)  # away: its CQs go on queueing
    # o0..o9: "big" wants o4..o9, "eu" the even ones; 8 events are queued,
    # and 6 once "eu" is closed (o0 and o2 were wanted by "eu" alone).
    entries = {
        f"o{i}": {"total": 30 * i, "zone": "eu" if i % 2 == 0 else "us"}
        for i in range(10)
    }
    status, body = site.cluster.rest(
        "POST",
        "/api/v1/regions/orders/putall/",
        site.operator_token,
        {"entries": entries},
    )
    assert status == 200, body

    client_page = f"{site.base}/dashboard/clients/cq-desk/"
    watching = log_in(chromium, site, "ops", site.operator_password)
    watching.goto(client_page)
    watching.wait_for_function(pending_is(8))
    assert watching.locator("#cqs tbody tr").count() == 2
    watching.evaluate("window.notReloaded = true")
    watching.screenshot(path=screenshots / "15-client-cqs.png", full_page=True)

    # In another tab: close "eu" after its confirmation.
    page = watching.context.new_page()
    page.set_default_timeout(WAIT_MS)
    page.goto(client_page)
    page.click('#cqs tr[data-cq="eu"] a.close-cq')
    page.wait_for_selector("#confirm")
    assert "eu" in page.text_content("h1")
    page.screenshot(path=screenshots / "16-confirm-close-cq.png", full_page=True)
    page.click("#confirm")
    page.wait_for_url(client_page)
    assert "Continuous query eu closed." in page.text_content(".messages")
    assert page.locator("#cqs tbody tr").count() == 1
    assert page.text_content("#client-pending").strip() == "6"

    # The first tab follows without a reload, and the copy on node-2 drains too.
    watching.wait_for_function(pending_is(6))
    both_drained = (
        "/node-1: 6/.test(document.querySelector('#client-sizes').textContent)"
        " && /node-2: 6/.test(document.querySelector('#client-sizes').textContent)"
    )
    watching.wait_for_function(both_drained)
    assert watching.evaluate("window.notReloaded") is True
    page.wait_for_function(both_drained)
    page.screenshot(path=screenshots / "17-client-cq-closed.png", full_page=True)
    status, body = site.cluster.rest(
        "GET", "/api/v1/clients/cq-desk/cqs/", site.operator_token
    )
    assert status == 200, body
    assert [cq["name"] for cq in body["results"]] == ["big"]
    page.context.close()
