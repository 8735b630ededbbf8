"""Every ``sh`` and ``python`` block of README.md, docs/*.md and
sdk/python/README.md, run as printed against a cluster of its own.

The cluster is ``runcluster`` with 3 nodes on the embedded defaults, as
``make run`` starts it on a fresh machine. The blocks run as printed but for
these substitutions (the README's "Development" section says the same):

* the ports 8000, 8001 and 8002 become the cluster's three ports;
* ``<the API token printed by make run>`` and the ``…`` of ``token="…"``
  become an operator's token, which is also in ``$TOKEN``;
* ``.venv/bin/python``, and ``python`` at the start of a line, become the
  interpreter running the tests.

What a command prints is compared with the output block (a fence with no
language) that follows it in the document, line by line: JSON lines value by
value, where ``"…"`` matches anything, and other lines exactly. A block the
tests do not run is in NOT_RUN with the reason; a new block in none of the
lists fails ``test_every_block_is_run_or_says_why_not``.
"""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.integration.harness import ROOT, wait_for
from tests.integration.local_cluster import LocalCluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

DOCUMENTS = [
    "README.md",
    *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")),
    "sdk/python/README.md",
]
TOKEN_PLACEHOLDER = "<the API token printed by make run>"
WAIT_S = 90

# (document, a text only that block contains): why the tests do not run it.
NOT_RUN = {
    ("README.md", "make run     #"): "the set-up itself: the test cluster is "
    "what make run starts, and make test is the suite running this",
    ("docs/configuration.md", "DJANGO_SECRET_KEY=..."): "a production "
    "environment: hosts of a deployment",
    ("docs/operations.md", "DJANGO_SECRET_KEY=change-me"): "a production "
    "environment file: hosts of a deployment",
    ("docs/operations.md", "cd /srv/durablecache"): "a production machine's "
    "directory and environment file",
    ("docs/operations.md", "durable list"): "a reference of the subcommands, "
    "with ID and NAME to fill in; tests/clients/test_commands.py runs them",
    ("docs/performance.md", "make bench"): "benchmarks of up to 15 minutes each",
    ("docs/operations.md", "DURABLECACHE_BEHIND_TLS_PROXY=true"): "settings "
    "of a deployment behind a TLS proxy (tests/durablecache/test_deploy.py "
    "checks them with manage.py check --deploy)",
    ("sdk/python/README.md", "pip install ./sdk/python"): "installs into the "
    "environment (make install does it)",
    ("sdk/python/README.md", "pytest sdk/python/tests"): "the suite running "
    "this runs those tests",
    ("sdk/python/README.md", '--cq "big='): "needs the reader's `orders` "
    "region; tests/integration/test_client_library_cq.py runs the CLI's --cq",
    ("sdk/python/README.md", "class BigOrders(CqListener)"): "a fragment: "
    "`...` stands for the application's work and `orders` for its region; "
    "tests/integration/test_client_library_cq.py makes the same calls",
}
# The blocks the tests below run, found the same way.
RUN = [
    ("README.md", '"name": "prices"'),
    ("README.md", "durablecache_client subscribe"),
    ("README.md", '"value": 1.08'),
    ("README.md", '"value": 1.09'),
    ("README.md", "entries/USD/"),
    ("README.md", "class Printer(CacheListener)"),
    ("README.md", "api/v1/clients/my-app/"),
    ("README.md", "kill -KILL"),
    ("README.md", '"name": "orders"'),
    ("README.md", "class BigOrders(CqListener)"),
    ("README.md", "regions/orders/entries/A1/"),
    ("docs/operations.md", "python manage.py migrate"),
    ("sdk/python/README.md", 'durable_id="billing-worker-1"'),
    ("sdk/python/README.md", "AsyncDurableClient("),
    ("sdk/python/README.md", "--durable-id cli-1"),
]


@dataclass
class Block:
    document: str
    line: int  # where the fence opens
    info: str  # the fence's language, "" for an output block
    text: str


def read_blocks(document: str) -> list[Block]:
    """The fenced blocks of a markdown document, in order."""
    blocks = []
    fence = re.compile(r"^(\s*)```(\S*)\s*$")
    lines = (ROOT / document).read_text().splitlines()
    number = 0
    while number < len(lines):
        opening = fence.match(lines[number])
        if opening is None:
            number += 1
            continue
        indent, info = opening.groups()
        body = []
        number += 1
        while not lines[number].strip().startswith("```"):
            body.append(lines[number].removeprefix(indent))
            number += 1
        blocks.append(Block(document, number, info, "\n".join(body) + "\n"))
        number += 1
    return blocks


def code_blocks() -> list[Block]:
    return [
        block
        for document in DOCUMENTS
        for block in read_blocks(document)
        if block.info in ("sh", "python")
    ]


def find(document: str, contains: str) -> Block:
    """The one code block of ``document`` that contains ``contains``."""
    assert (document, contains) in RUN, "list it in RUN"
    found = [b for b in code_blocks() if b.document == document and contains in b.text]
    assert len(found) == 1, (document, contains, found)
    return found[0]


def output_after(block: Block) -> list[str]:
    """The lines of the output block that follows ``block``."""
    blocks = read_blocks(block.document)
    index = next(i for i, b in enumerate(blocks) if b.line == block.line)
    following = blocks[index + 1]
    assert following.info == "", f"no output block after line {block.line}"
    return following.text.splitlines()


def same(expected: Any, actual: Any) -> bool:
    if expected == "…":
        return True
    if isinstance(expected, dict):
        return (
            isinstance(actual, dict)
            and expected.keys() == actual.keys()
            and all(same(expected[k], actual[k]) for k in expected)
        )
    if isinstance(expected, list):
        return (
            isinstance(actual, list)
            and len(expected) == len(actual)
            and all(same(e, a) for e, a in zip(expected, actual, strict=True))
        )
    return bool(expected == actual) and type(expected) is type(actual)


def assert_printed(expected: str, actual: str, cluster: LocalCluster) -> None:
    """``actual`` is what the document's output line ``expected`` says."""
    expected = ports(expected, cluster)
    if expected.startswith("{"):
        assert same(json.loads(expected), json.loads(actual)), (expected, actual)
    else:
        assert actual == expected


def ports(text: str, cluster: LocalCluster) -> str:
    return re.sub(r"\b800([0-2])\b", lambda m: str(cluster.base + int(m[1])), text)


def substitute(text: str, cluster: LocalCluster, token: str) -> str:
    text = ports(text, cluster)
    text = text.replace(TOKEN_PLACEHOLDER, token)
    text = text.replace('token="…"', f'token="{token}"')
    text = text.replace(".venv/bin/python", sys.executable)
    return re.sub(r"^python ", sys.executable + " ", text, flags=re.MULTILINE)


class Terminal:
    """Runs the blocks of a document as a reader would, in their own files
    (so a command line never holds a block's text)."""

    def __init__(self, cluster: LocalCluster, token: str, workdir: Path) -> None:
        self.cluster, self.token, self.workdir = cluster, token, workdir
        self.env = {
            **cluster.env,
            "TOKEN": token,
            "PYTHONPATH": str(ROOT / "sdk" / "python"),
        }
        self.count = 0

    def write(self, block: Block) -> Path:
        self.count += 1
        suffix = ".py" if block.info == "python" else ".sh"
        path = self.workdir / f"block-{self.count}{suffix}"
        path.write_text(substitute(block.text, self.cluster, self.token))
        return path

    def command(self, block: Block) -> list[str]:
        if block.info == "python":
            return [sys.executable, str(self.write(block))]
        return ["bash", "-e", "-o", "pipefail", str(self.write(block))]

    def run(self, block: Block) -> str:
        """Run a block to its end; return what it printed on stdout."""
        result = subprocess.run(
            self.command(block),
            env=self.env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=WAIT_S,
            check=False,
        )
        assert result.returncode == 0, (block.text, result.stdout, result.stderr)
        return result.stdout

    def start(self, block: Block) -> "Running":
        """Start a block that runs until Ctrl-C (or Enter)."""
        return Running(self.command(block), self.env)


class Running:
    """A command running in the foreground of a terminal of its own."""

    def __init__(self, command: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            command,
            env=env,
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self.errors: list[str] = []
        self.seen = 0
        self.changed = threading.Condition()
        self.readers = [
            threading.Thread(target=self._read, args=args, daemon=True)
            for args in (
                (self.proc.stdout, self.lines),
                (self.proc.stderr, self.errors),
            )
        ]
        for reader in self.readers:
            reader.start()

    def _read(self, stream: Any, into: list[str]) -> None:
        for raw in stream:
            with self.changed:
                into.append(raw.decode(errors="replace").rstrip("\n"))
                self.changed.notify_all()

    def next_line(self, timeout: float = WAIT_S) -> str:
        """The next line printed on stdout."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while len(self.lines) <= self.seen:
                left = deadline - time.monotonic()
                if left <= 0 or not self.readers[0].is_alive():
                    raise TimeoutError(f"nothing printed: {self.errors[-20:]}")
                self.changed.wait(min(left, 0.5))
            self.seen += 1
            return self.lines[self.seen - 1]

    def interrupt(self) -> int:
        """Ctrl-C, as a terminal sends it: SIGINT to the foreground group."""
        os.killpg(self.proc.pid, signal.SIGINT)
        return self.wait()

    def press_enter(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"\n")
        self.proc.stdin.flush()
        return self.wait()

    def wait(self) -> int:
        code = self.proc.wait(timeout=WAIT_S)
        for reader in self.readers:
            reader.join(timeout=10)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: Any) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("snippets"), nodes=3) as local:
        local.wait_ready()
        yield local


@pytest.fixture
def terminal(cluster: LocalCluster, tmp_path: Path) -> Iterator[Terminal]:
    terminal = Terminal(cluster, cluster.token(), tmp_path)
    running: list[Running] = []
    original = terminal.start

    def start(block: Block) -> Running:
        process = original(block)
        running.append(process)
        return process

    terminal.start = start  # type: ignore[method-assign]
    try:
        yield terminal
    finally:
        for process in running:
            process.kill()


def rewrite(block: Block, old: str, new: str) -> Block:
    """``block`` as the document's prose says to vary it."""
    assert old in block.text
    return Block(block.document, block.line, block.info, block.text.replace(old, new))


def client_row(terminal: Terminal, durable_id: str) -> dict[str, Any]:
    result = subprocess.run(
        [
            "curl",
            "-s",
            "-H",
            f"Authorization: Token {terminal.token}",
            f"{terminal.cluster.url('node-1')}/api/v1/clients/{durable_id}/",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return dict(json.loads(result.stdout))


def test_readme_try_it_and_failover_as_printed(cluster, terminal):
    readme = "README.md"
    created = json.loads(terminal.run(find(readme, '"name": "prices"')))
    assert created["name"] == "prices"

    # A durable subscriber: where it is connected, its image, the marker.
    subscriber = find(readme, "durablecache_client subscribe")
    first = terminal.start(subscriber)
    for expected in output_after(subscriber):
        assert_printed(expected, first.next_line(), cluster)
    write = find(readme, '"value": 1.08')
    assert json.loads(terminal.run(write))["version"] == 1
    for expected in output_after(write):
        assert_printed(expected, first.next_line(), cluster)

    # Away (Ctrl-C keeps its queue), a write, back: the replay first.
    assert first.interrupt() == 0
    away = find(readme, '"value": 1.09')
    terminal.run(away)
    again = terminal.start(subscriber)
    for expected in output_after(away):
        assert_printed(expected, again.next_line(), cluster)
    assert again.interrupt() == 0

    # The library, as app.py: the same durable client.
    terminal.run(find(readme, "entries/USD/"))
    app_block = find(readme, "class Printer(CacheListener)")
    app = terminal.start(app_block)
    for expected in output_after(app_block):
        assert_printed(expected, app.next_line(), cluster)
    terminal.run(rewrite(write, "1.08", "1.1"))  # "when you write 1.1"
    assert app.next_line() == "updated EUR 1.1 (live)"
    assert app.press_enter() == 0

    # A failover: the subscriber on node-2 with its copy on node-1.
    watched = terminal.start(subscriber)
    started = [json.loads(watched.next_line())["type"] for _ in range(3)]
    assert started == ["connected", "image", "marker"]
    wait_for(lambda: client_row(terminal, "my-app")["syncing"] == [], timeout=WAIT_S)
    # The copy has the acks of the sessions before (relayed every
    # DURABLECACHE_ACK_RELAY_S): node-1 reads its own copy's size, as the
    # README says to look before the kill; else the reconnect replays them.
    wait_for(
        lambda: client_row(terminal, "my-app")["queue_sizes"].get("node-1") == 0,
        timeout=WAIT_S,
    )
    row = json.loads(terminal.run(find(readme, "api/v1/clients/my-app/")))
    assert (row["primary"], row["secondaries"]) == ("node-2", ["node-1"])
    assert row["queue_sizes"]["node-1"] == 0
    kill = find(readme, "kill -KILL")
    lookup = re.search(r"\$\((pgrep [^)]*)\)", kill.text)
    assert lookup is not None
    found = subprocess.run(
        ["bash", str(terminal.write(Block(readme, kill.line, "sh", lookup[1])))],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    # It names this test's own node-2 alone, or the block is not run at all.
    assert found.stdout.split() == [str(cluster.node_pid("node-2"))]
    since = len(cluster.lines)

    terminal.run(kill)

    exited = cluster.wait_line(r"^node-2 exited", after=since)
    assert cluster.lines[exited] == (
        "node-2 exited (signal 9); press Enter here to start it again"
    )
    for expected in output_after(kill):
        assert_printed(expected, watched.next_line(), cluster)
    row = client_row(terminal, "my-app")
    assert (row["primary"], row["secondaries"]) == ("node-1", ["node-3"])
    # Writes go on, to node-3 too, and reach it.
    terminal.run(rewrite(rewrite(write, ":8000/", ":8002/"), "1.08", "1.12"))
    event = json.loads(watched.next_line())
    assert (event["key"], event["value"], event["replay"]) == ("EUR", 1.12, False)
    cluster.press_enter()
    again_at = cluster.wait_line(r"^starting node-2 again$", after=exited)
    cluster.wait_line(rf"^node-2 {cluster.url('node-2')} ready$", after=again_at)
    assert watched.interrupt() == 0


def test_readme_cq_as_printed(cluster, terminal):
    readme = "README.md"
    created = json.loads(terminal.run(find(readme, '"name": "orders"')))
    assert created["name"] == "orders"
    desk = terminal.start(find(readme, "class BigOrders(CqListener)"))
    writes = find(readme, "regions/orders/entries/A1/")
    printed = output_after(writes)
    # Its first line, before the writes (the prose says so).
    assert_printed(printed[0], desk.next_line(), cluster)
    assert printed[0] == "0 order(s) in the result"
    assert terminal.run(writes) == ""
    for expected in printed[1:]:
        assert_printed(expected, desk.next_line(), cluster)
    assert desk.press_enter() == 0


def test_sdk_readme_as_printed(cluster, terminal):
    sdk = "sdk/python/README.md"
    terminal.run(find("README.md", '"name": "prices"'))  # its region, if new

    printed = terminal.run(find(sdk, 'durable_id="billing-worker-1"'))
    assert printed.splitlines()[0] in ("node-1 -2", "node-2 -2", "node-3 -2")

    printed = terminal.run(find(sdk, "AsyncDurableClient("))
    assert printed.splitlines()[-1] == "0 replayed"

    command = terminal.start(find(sdk, "--durable-id cli-1"))
    connected = json.loads(command.next_line())
    assert (connected["type"], connected["durable_id"]) == ("connected", "cli-1")
    assert json.loads(command.next_line())["type"] == "image"
    assert command.interrupt() == 0


def test_operations_first_commands_as_printed(terminal):
    printed = terminal.run(find("docs/operations.md", "python manage.py migrate"))
    assert re.fullmatch(r"[0-9a-f]{40}", printed.splitlines()[-1])


def test_every_block_is_run_or_says_why_not():
    listed = [*RUN, *NOT_RUN]
    for block in code_blocks():
        naming = [
            (document, text)
            for document, text in listed
            if document == block.document and text in block.text
        ]
        assert len(naming) == 1, (
            f"{block.document}:{block.line}: a {block.info} block that "
            "test_snippets.py neither runs (RUN) nor explains (NOT_RUN)"
        )
    for document, text in listed:
        assert any(b.document == document and text in b.text for b in code_blocks()), (
            f"no block of {document} contains {text!r} any more"
        )
