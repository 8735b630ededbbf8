"""The dashboard's Live view of a region in a real browser against a node.

An operator opens a region, follows its "Live view" link, and watches REST
writes change the table in place: the row's new value and version, the
highlight on the changed row only, a new key's row in key order, the event
count. The page subscribes through the vendored TypeScript client with the
operator's session (no token in the page). Saved as
test-artifacts/screenshots/14-region-live.png.
"""

from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.harness import Cluster

pytestmark = [
    pytest.mark.browser,
    pytest.mark.integration,
    pytest.mark.timeout(300),
]
WAIT_MS = 60_000


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

    def put(self, key: str, value: Any) -> dict[str, Any]:
        path = f"/api/v1/regions/prices/entries/{key}/"
        status, body = self.cluster.rest("PUT", path, self.token, {"value": value})
        assert status == 200, (status, body)
        return dict(body)


@pytest.fixture(scope="module")
def site(tmp_path_factory: Any) -> Iterator[Site]:
    cluster = Cluster(tmp_path_factory.mktemp("liveview"))
    try:
        cluster.migrate()
        cluster.start_node("node-1")
        site = Site(cluster)
        status, body = cluster.rest(
            "POST", "/api/v1/regions/", site.token, {"name": "prices"}
        )
        assert status == 201, body
        for key, value in [("EUR", 1.08), ("GBP", 0.86), ("USD", 1.0)]:
            site.put(key, value)
        yield site
    finally:
        cluster.close()


def row(page: Any, key: str) -> dict[str, Any]:
    return dict(
        page.evaluate(
            """(key) => {
              const tr = document.querySelector(`#live-entries tr[data-key="${key}"]`);
              if (!tr) return {};
              const cells = [...tr.cells].map((td) => td.textContent);
              return {value: cells[1], version: cells[2], op: cells[3],
                      flash: tr.classList.contains("flash")};
            }""",
            key,
        )
    )


def test_live_view_shows_rest_writes_in_place(chromium, site, screenshots):
    context = chromium.new_context(viewport={"width": 1360, "height": 900})
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    try:
        page.goto(f"{site.base}/dashboard/login/")
        page.fill("#id_username", "ops")
        page.fill("#id_password", site.password)
        page.click("#login button[type=submit]")
        page.wait_for_url(f"{site.base}/dashboard/")
        page.goto(f"{site.base}/dashboard/regions/prices/")
        page.click("#live-view")
        page.wait_for_url(f"{site.base}/dashboard/regions/prices/live/")
        page.wait_for_selector("#live-entries[data-live=true]")

        assert page.text_content("#live-state") == "live"
        assert row(page, "EUR") == {
            "value": "1.08",
            "version": "1",
            "op": "image",
            "flash": False,
        }
        assert page.text_content("#live-events") == "0"

        written = site.put("EUR", {"bid": 1.09})
        page.wait_for_function(
            """() => document.querySelector('#live-entries tr[data-key="EUR"]')
                 ?.cells[2].textContent === "2" """
        )
        assert written["version"] == 2
        assert row(page, "EUR") == {
            "value": '{"bid":1.09}',
            "version": "2",
            "op": "update",
            "flash": True,
        }
        assert row(page, "GBP")["flash"] is False  # only the changed row

        site.put("CHF", 0.94)  # a new key: its row, in key order
        page.wait_for_selector('#live-entries tr[data-key="CHF"]')
        keys = page.eval_on_selector_all(
            "#live-entries tbody tr", "(rows) => rows.map((r) => r.dataset.key)"
        )
        assert keys == ["CHF", "EUR", "GBP", "USD"]
        assert row(page, "CHF")["op"] == "create"
        assert page.text_content("#live-events") == "2"
        assert page.text_content("#live-keys") == "4"
        page.screenshot(path=screenshots / "14-region-live.png", full_page=True)
        assert errors == []
    finally:
        context.close()
