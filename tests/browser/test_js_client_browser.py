"""The TypeScript client (sdk/js), built, in headless Chromium against a
running 3-node cluster.

A static page on 127.0.0.1 (its origin listed in
DURABLECACHE_ALLOWED_ORIGINS) loads dist/durablecache.min.js as an ES
module; each test starts clients in it through ``page.evaluate`` and reads
back what their listeners saw. Writes are REST PUTs from the test. The
module is built first when dist is missing or stale (tests/jsbuild.py).

The node-crash test kills a node and is last in the file: the tests before
it share the module's three nodes.
"""

import contextlib
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest

from tests.browser.js_page import JsClientPage
from tests.integration.harness import Cluster, wait_for
from tests.jsbuild import built_module

pytestmark = [
    pytest.mark.browser,
    pytest.mark.integration,
    pytest.mark.timeout(420),
]
NODES = ["node-1", "node-2", "node-3"]
REGION = "js"
WAIT_S = 60
WAIT_MS = WAIT_S * 1000
PACE_S = 0.02  # between the writer's puts: about 50 a second at most


class Stack:
    """The page's server, the cluster, and its users' tokens."""

    def __init__(self, cluster: Cluster, page: JsClientPage) -> None:
        self.cluster = cluster
        self.page = page
        self.operator = cluster.token("ops", operator=True)
        self.user = cluster.token("app")
        self.intruder = cluster.token("intruder")

    def urls(self, *nodes: str) -> list[str]:
        return [self.cluster.ws_url(n) for n in nodes or NODES]

    def put(self, key: str, value: Any, *, node: str = "node-1") -> dict[str, Any]:
        status, body = self.cluster.rest(
            "PUT",
            f"/api/v1/regions/{REGION}/entries/{key}/",
            self.user,
            {"value": value},
            node=node,
        )
        assert status == 200, (status, body)
        return dict(body)

    def client_view(self, durable_id: str, *, node: str) -> Any:
        status, body = self.cluster.rest(
            "GET", f"/api/v1/clients/{durable_id}/", self.user, node=node
        )
        return body if status == 200 else None


@pytest.fixture(scope="module")
def stack(tmp_path_factory: Any) -> Iterator[Stack]:
    module = built_module()
    workdir = tmp_path_factory.mktemp("jsclient")
    page = JsClientPage(workdir / "page", module)
    cluster = Cluster(
        workdir / "cluster",
        settings={"DURABLECACHE_ALLOWED_ORIGINS": page.origin},
    )
    try:
        cluster.migrate()
        for name in NODES:
            cluster.start_node(name, wait=False)
        for name in NODES:
            cluster.wait_ready(name)
        stack = Stack(cluster, page)
        status, body = cluster.rest(
            "POST", "/api/v1/regions/", stack.operator, {"name": REGION}
        )
        assert status == 201, body
        yield stack
    finally:
        cluster.close()
        page.close()


@pytest.fixture
def page(chromium: Any, stack: Stack) -> Iterator[Any]:
    """A fresh browser context on the test page, its errors kept."""
    context = chromium.new_context()
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    page.page_errors = []
    page.on("pageerror", lambda error: page.page_errors.append(str(error)))
    page.goto(stack.page.url)
    page.wait_for_function("window.harnessReady === true")
    try:
        yield page
    finally:
        context.close()


def start(page: Any, name: str, options: dict[str, Any], interest: dict[str, Any]):
    result = page.evaluate(
        "([n, o, r, i]) => window.startClient(n, o, r, i)",
        [name, options, REGION, interest],
    )
    assert "error" not in result, result
    return result["welcome"], result["marker"]


def state(page: Any, name: str) -> dict[str, Any]:
    return dict(page.evaluate("(n) => window.state(n)", name))


def wait_received(page: Any, name: str, count: int) -> list[dict[str, Any]]:
    """Wait until client ``name`` has seen ``count`` events; return them."""
    page.wait_for_function(
        "([n, c]) => window.received(n) >= c", arg=[name, count], timeout=WAIT_MS
    )
    return list(state(page, name)["events"])


# (a) live events for a key interest -------------------------------------------


def test_key_interest_receives_live_events_of_its_keys_only(page, stack):
    welcome, marker = start(
        page,
        "live",
        {"urls": stack.urls("node-1"), "token": stack.user},
        {"keys": ["a", "b"], "options": {"policy": "none"}},
    )
    assert welcome["pendingEvents"] == -2  # non-durable: no queue to resume
    assert marker["replayed"] == 0
    written = [stack.put("a", 1), stack.put("c", 2), stack.put("b", 3)]
    written.append(stack.put("a", 4))

    events = wait_received(page, "live", 3)
    # Events of one client come in log order, so once the last put's event
    # is in, the put of "c" (not an interest) would already have arrived.
    assert [(e["key"], e["value"], e["version"]) for e in events] == [
        ("a", 1, 1),
        ("b", 3, 1),
        ("a", 4, 2),
    ]
    assert [e["id"] for e in events] == [
        w["event_id"] for w in written if w["key"] != "c"
    ]
    assert [e["op"] for e in events] == ["create", "create", "update"]
    assert not any(e["isReplay"] for e in events)
    assert state(page, "live")["errors"] == []
    assert page.page_errors == []


# (b) durable client away, back, replay then marker ------------------------------


def test_durable_client_back_from_keepalive_gets_replay_then_marker(page, stack):
    durable = {
        "urls": stack.urls(),
        "token": stack.user,
        "durableId": "js-away",
        "timeout": 600,
    }
    interest = {"keys": ["r0", "r1", "r2"], "options": {"durable": True}}
    welcome, _ = start(page, "first", durable, interest)
    assert welcome["pendingEvents"] == -2
    page.evaluate("() => window.closeClient('first', true)")
    assert state(page, "first")["closed"]

    written = [stack.put(f"r{i % 3}", i) for i in range(7)]
    wait_for(
        lambda: (
            (stack.client_view("js-away", node="node-1") or {}).get("pending_events")
            == 7
        ),
        timeout=WAIT_S,
    )

    welcome, marker = start(page, "back", durable, interest)
    assert welcome["pendingEvents"] == 7
    assert marker["replayed"] == 7
    assert marker["regions"] == [REGION]
    events = wait_received(page, "back", 7)
    assert [e["id"] for e in events] == [w["event_id"] for w in written]
    assert all(e["isReplay"] for e in events)
    # afterRegionLive comes once, after the replayed events.
    assert state(page, "back")["live"] == [
        {"region": REGION, "replayed": 7, "after": 7}
    ]

    live = stack.put("r0", "live")
    events = wait_received(page, "back", 8)
    assert events[-1]["id"] == live["event_id"]
    assert events[-1]["isReplay"] is False
    page.evaluate("() => window.closeClient('back', false)")
    assert page.page_errors == []


# (d) another user's durable id -----------------------------------------------------


def test_another_users_durable_id_is_refused_with_a_typed_error(page, stack):
    status, body = stack.cluster.rest(
        "POST",
        "/api/v1/clients/js-owned/interests/",
        stack.user,
        {"region": REGION, "all_keys": True, "durable": True},
    )
    assert status == 201, body

    result = page.evaluate(
        "([n, o, r, i]) => window.startClient(n, o, r, i)",
        [
            "intruder",
            {"urls": stack.urls(), "token": stack.intruder, "durableId": "js-owned"},
            REGION,
            {"keys": ["x"], "options": {}},
        ],
    )
    error = result["error"]
    assert error["name"] == "DurableIdOwnedError", error
    assert error["isDurableIdOwnedError"]
    assert error["isFatalConnectionError"]
    assert error["closeCode"] == 4403
    assert error["code"] == "closed_4403"
    after = state(page, "intruder")
    assert after["closed"]
    assert not after["connected"]
    # The owner's client is untouched: still there, still the owner's.
    assert stack.client_view("js-owned", node="node-1")["owner"] == "app"


# (c) SIGKILL of the primary while events flow (kills a node: last) ------------------


class Writer:
    """REST PUTs from a thread: ``count`` writes over ``keys`` keys, paced.

    It stops half-way until ``resume`` is set, so the crash always comes
    mid-stream; ``lock`` is held around each put, so no put is in flight
    while the test holds it (every answered put names its event).
    """

    def __init__(self, stack: Stack, target: str, *, count: int, keys: int) -> None:
        self.stack, self.target, self.count, self.keys = stack, target, count, keys
        self.written: list[dict[str, Any]] = []
        self.errors: list[BaseException] = []
        self.lock = threading.Lock()
        self.resume = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            for i in range(self.count):
                if i == self.count // 2 and not self.resume.wait(timeout=WAIT_S):
                    raise TimeoutError("the writer was not resumed")
                with self.lock:
                    body = self.stack.put(f"k{i % self.keys}", i, node=self.target)
                self.written.append(body)
                time.sleep(PACE_S)
        except BaseException as exc:
            self.errors.append(exc)

    def finish(self) -> list[dict[str, Any]]:
        self.resume.set()
        self.thread.join(timeout=WAIT_S * 2)
        assert not self.thread.is_alive(), "the writer did not finish"
        assert self.errors == []
        assert len(self.written) == self.count
        return self.written


def test_primary_killed_while_events_flow_every_event_arrives_once(page, stack):
    durable_id = "js-failover"
    start(
        page,
        "flow",
        {
            "urls": stack.urls(),
            "token": stack.user,
            "durableId": durable_id,
            "redundancy": 1,
            "timeout": 600,
        },
        {"options": {"durable": True, "policy": "none"}},
    )

    def redundant() -> Any:
        view = stack.client_view(durable_id, node="node-1")
        if view and len(view["secondaries"]) == 1 and not view["syncing"]:
            return view
        return None

    view = wait_for(redundant, timeout=WAIT_S, interval=0.2)
    primary = view["primary"]
    target = next(n for n in NODES if n not in (primary, *view["secondaries"]))
    writer = Writer(stack, target, count=150, keys=5)
    writer.thread.start()
    try:
        wait_received(page, "flow", 30)
        with writer.lock:
            stack.cluster.kill_node(primary)
        written = writer.finish()
    finally:
        writer.resume.set()  # never leave the writer waiting

    expected = {w["event_id"]: (w["key"], w["version"]) for w in written}
    try:
        page.wait_for_function(
            "([n, c]) => window.received(n) >= c",
            arg=["flow", len(expected)],
            timeout=WAIT_MS * 2,
        )
    except Exception:  # Playwright's TimeoutError: say what is missing
        seen = {e["id"] for e in state(page, "flow")["events"]}
        pytest.fail(
            f"missing {len(set(expected) - seen)} of {len(expected)} events; "
            f"client state {state(page, 'flow') | {'events': len(seen)}}"
        )
    after = state(page, "flow")
    events = after["events"]
    ids = [e["id"] for e in events]
    assert len(ids) == len(set(ids)), "the application saw an event twice"
    assert set(ids) == set(expected)
    # Each event is the write the writer was told about: same key, same
    # version; and per key, versions arrive in order.
    assert {e["id"]: (e["key"], e["version"]) for e in events} == expected
    by_key: dict[str, list[int]] = defaultdict(list)
    for event in events:
        by_key[event["key"]].append(event["version"])
    assert all(v == sorted(v) for v in by_key.values()), by_key
    assert after["reconnects"] >= 1
    assert after["welcome"]["node"] != primary
    assert after["errors"] == []
    with contextlib.suppress(Exception):
        page.evaluate("() => window.closeClient('flow', false)")
