"""The dashboard at a desktop's and a phone's width, the API's own pages, and
the rate chart's gaps, in a real browser against a running 2-node cluster.

At 390 px (a phone) no page is wider than the screen (the client's page
with its interests, CQs and queue, the confirm pages, a region's Live
view among them): the header spans it,
a wide table scrolls inside its own box and the charts shrink with their
column. The dashboard's API link leads to the API root, and from there to
Swagger UI, with every file from the node itself. Every page is saved as a
screenshot at both widths (test-artifacts/screenshots/1x-*.png).
"""

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from durablecache_client import DurableClient
from tests.integration.harness import Cluster

pytestmark = [
    pytest.mark.browser,
    pytest.mark.integration,
    pytest.mark.timeout(300),
]
WAIT_MS = 60_000
DURABLE_ID = "phone-width-app-with-a-long-durable-id"
CQ_NAME = "wide-bids-at-the-venue-with-a-long-name"
CQ_QUERY = (
    "SELECT * FROM /prices p WHERE p.bid >= 3 AND p.venue LIKE 'xxxxxxxxxx%'"
    " AND p.ask NOT IN (1, 2, 3) AND p.bid < 1000000"
)
WIDTHS = {"desktop": (1360, 900), "phone": (390, 844)}
PAGES = {
    "cluster": "/dashboard/",
    "clients": "/dashboard/clients/",
    "client": f"/dashboard/clients/{DURABLE_ID}/",
    "confirm": f"/dashboard/clients/{DURABLE_ID}/close/",
    "regions": "/dashboard/regions/",
    "region": "/dashboard/regions/prices/",
    "live": "/dashboard/regions/prices/live/",
    "confirm-cq": f"/dashboard/clients/{DURABLE_ID}/cqs/{CQ_NAME}/close/",
}


class Site:
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.base = cluster.nodes["node-1"]["url"]
        lines = cluster.manage("issue_token", "ops", "--operator", "--new-password")
        found = lines.strip().splitlines()
        self.password = next(
            line.split(": ", 1)[1] for line in found if line.startswith("password: ")
        )
        self.token = found[-1]


@pytest.fixture(scope="module")
def site(tmp_path_factory: Any) -> Iterator[Site]:
    """Two nodes, a region with wide values, a durable client away with a
    queue on both hosts and two CQs, one with a long query: every table has
    rows."""
    cluster = Cluster(tmp_path_factory.mktemp("layout"))
    try:
        cluster.migrate()
        cluster.start_node("node-1")
        cluster.start_node("node-2")
        site = Site(cluster)
        status, body = cluster.rest(
            "POST", "/api/v1/regions/", site.token, {"name": "prices"}
        )
        assert status == 201, body
        client = DurableClient(
            [cluster.ws_url("node-1")],
            durable_id=DURABLE_ID,
            redundancy=1,
            token=site.token,
        )
        client.connect()
        prices = client.region("prices")
        prices.register_all_keys(durable=True)
        prices.register_cq(CQ_NAME, CQ_QUERY, durable=True)
        prices.register_cq("small", "value.bid < 3", durable=True)
        client.ready_for_events()
        client.close(keepalive=True)
        entries = {
            f"instrument-{i}": {"bid": i, "ask": i + 1, "venue": "x" * 60}
            for i in range(12)
        }
        status, body = cluster.rest(
            "POST", "/api/v1/regions/prices/putall/", site.token, {"entries": entries}
        )
        assert status == 200, body
        yield site
    finally:
        cluster.close()


def open_page(browser: Any, site: Site, width: str) -> Any:
    """A logged-in operator's page in a window of ``width``."""
    w, h = WIDTHS[width]
    context = browser.new_context(viewport={"width": w, "height": h})
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    page.goto(f"{site.base}/dashboard/login/")
    page.fill("#id_username", "ops")
    page.fill("#id_password", site.password)
    page.click("#login button[type=submit]")
    page.wait_for_url(f"{site.base}/dashboard/")
    return page


LAYOUT = """() => {
  const inside = (el) => el.getBoundingClientRect().right <= innerWidth + 0.5;
  const wide = [...document.querySelectorAll("table")].filter(
    (t) => t.scrollWidth > t.clientWidth + 1);
  return {
    page: document.documentElement.scrollWidth,
    screen: innerWidth,
    header: document.querySelector("header").getBoundingClientRect().width,
    outside: [...document.querySelectorAll("main *")]
      .filter((el) => !inside(el) && !el.closest("table"))
      .map((el) => el.tagName + (el.id ? "#" + el.id : "")),
    tablesOutside: [...document.querySelectorAll("table")]
      .filter((t) => !inside(t)).length,
    wideTables: wide.length,
    wideTablesScroll: wide.every((t) => getComputedStyle(t).overflowX === "auto"),
  };
}"""


@pytest.mark.parametrize("width", list(WIDTHS))
def test_every_page_fits_the_screen(chromium, site, screenshots, width):
    page = open_page(chromium, site, width)
    wide_tables = 0
    for number, (name, path) in enumerate(PAGES.items()):
        page.goto(f"{site.base}{path}")
        if name in ("cluster", "client"):  # drawn once the numbers are in
            canvas = "chart-queued" if name == "cluster" else "chart-client"
            page.wait_for_function(f"Chart.getChart('{canvas}')")
        if name == "client":
            assert page.locator("#cqs tbody tr[data-cq]").count() == 2
        if name == "live":  # the image drawn: a row per entry
            page.wait_for_selector("#live-entries[data-live=true]")
            assert page.locator("#live-entries tbody tr").count() == 12
        layout = page.evaluate(LAYOUT)

        assert layout["page"] <= layout["screen"], (name, layout)
        assert layout["header"] == layout["screen"], (name, layout)
        assert layout["outside"] == [], (name, layout)
        assert layout["tablesOutside"] == 0, (name, layout)
        assert layout["wideTablesScroll"], (name, layout)
        wide_tables += layout["wideTables"]
        page.screenshot(
            path=screenshots / f"10-{width}-{number}-{name}.png", full_page=True
        )
    if width == "phone":  # the nodes, clients, interests, CQs, queue, entries...
        assert wide_tables >= 5
    page.context.close()


def test_charts_resize_with_the_window(chromium, site):
    page = open_page(chromium, site, "desktop")
    page.wait_for_function("Chart.getChart('chart-rates')")
    before = page.evaluate("document.getElementById('chart-rates').clientWidth")

    page.set_viewport_size({"width": 390, "height": 844})

    page.wait_for_function(
        "document.getElementById('chart-rates').clientWidth < 390"
        " && Chart.getChart('chart-rates').width < 390"
    )
    assert before > 390
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    page.context.close()


@pytest.mark.parametrize("width", list(WIDTHS))
def test_the_api_link_leads_to_the_root_and_swagger_ui(
    chromium, site, screenshots, width
):
    page = open_page(chromium, site, width)
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))

    page.click("header nav >> text=API")

    page.wait_for_url(f"{site.base}/api/v1/")
    body = page.text_content("body")
    for name in ("regions", "clients", "nodes", "schema", "docs"):
        assert f'"{name}": "{site.base}/api/v1/' in body, name
    page.screenshot(path=screenshots / f"11-{width}-api-root.png", full_page=True)

    page.click(f"a[href='{site.base}/api/v1/schema/swagger-ui/']")

    page.wait_for_selector(".opblock-tag-section")
    assert page.locator(".opblock").count() >= 20  # every operation
    page.screenshot(path=screenshots / f"12-{width}-api-docs.png", full_page=True)
    assert requests
    outside = [url for url in requests if not url.startswith(site.base + "/")]
    assert outside == [], "Swagger UI must not need any other server"
    page.context.close()


def series_with_gaps() -> dict[str, Any]:
    """What nodes.json says after node-1 was down for a while: its own
    samples stop, with a null point, while node-2's and the cluster's go on."""
    start = datetime.now(UTC) - timedelta(minutes=5)

    def at(step: float) -> str:
        return (start + timedelta(seconds=5 * step)).isoformat()

    def node(steps: list[float], level: int) -> list[dict[str, Any]]:
        return [
            {"at": at(s), "queued": None, "in": None, "out": None}
            if s == 3
            else {"at": at(s), "queued": 5 * level, "in": 4.0, "out": level}
            for s in steps
        ]

    return {
        "nodes": {
            "node-1": node([0, 1, 2, 3, 8, 9, 10], 2),  # 3: the gap's null point
            "node-2": node([s + 0.2 for s in range(11)], 1),
        },
        "cluster": [{"at": at(s), "in": 4.0 + s % 2} for s in range(11)],
    }


@pytest.mark.parametrize("width", list(WIDTHS))
def test_the_rate_chart_shows_gaps_and_the_cluster_write_rate(
    chromium, site, screenshots, width
):
    page = open_page(chromium, site, width)
    data = series_with_gaps()
    page.route(
        "**/dashboard/nodes.json",
        lambda route: route.fulfill(
            content_type="application/json", body=json.dumps(data)
        ),
    )

    page.goto(f"{site.base}/dashboard/")

    page.wait_for_function(
        "Chart.getChart('chart-rates') &&"
        " Chart.getChart('chart-rates').data.datasets.length === 3"
    )
    rates = page.evaluate(
        """() => {
          const chart = Chart.getChart("chart-rates");
          return {
            spanGaps: chart.options.spanGaps,
            sets: Object.fromEntries(chart.data.datasets.map(
              (d) => [d.label, d.data.map((p) => p.y)])),
          };
        }"""
    )
    assert rates["spanGaps"] is False
    # The cluster's write rate, also while node-1 took no samples.
    assert rates["sets"]["in (writes)"] == [4.0 + s % 2 for s in range(11)]
    # node-1's line breaks at the null point instead of crossing the gap.
    assert rates["sets"]["out node-1"] == [2.0, 2.0, 2.0, None, 2.0, 2.0, 2.0]
    assert None not in rates["sets"]["out node-2"]
    queued = page.evaluate(
        "Chart.getChart('chart-queued').data.datasets[0].data.map((p) => p.y)"
    )
    assert queued == [10, 10, 10, None, 10, 10, 10]
    page.locator(".charts").screenshot(
        path=screenshots / f"13-{width}-rate-chart-gap.png"
    )
    page.context.close()
