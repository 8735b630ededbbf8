"""A static page that loads the built TypeScript client in Chromium.

``JsClientPage`` serves a temporary directory (the page, the built ES
module) from a thread of this process on 127.0.0.1, so nothing is left to
end but the server itself. The page keeps each client it starts under a
name, records what its listener sees, and answers ``state(name)``; tests
drive it with ``page.evaluate``.
"""

import functools
import http.server
import shutil
import threading
from pathlib import Path
from typing import Any

from tests.integration.harness import free_port

# window.startClient(name, options, region, interest): connect, register
# the interest, readyForEvents, wait for the marker; resolve with
# {welcome, marker} or {error: the thrown error's name, codes, class}.
PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>durablecache client</title></head>
<body><p id="status">loading</p>
<script type="module">
import * as dc from "./durablecache.min.js";

const runs = new Map();
const plain = (x) => JSON.parse(JSON.stringify(x ?? null));

function listener(run) {
  const push = (e) => run.events.push({
    id: e.id, seq: e.seq, key: e.key, op: e.op, value: e.value,
    version: e.version, isReplay: e.isReplay, isResync: e.isResync,
  });
  return {
    afterCreate: push, afterUpdate: push, afterDestroy: push,
    afterInvalidate: push,
    afterRegionLive: (e) => run.live.push(
      { region: e.region, replayed: e.replayed, after: run.events.length }),
  };
}

function describe(error) {
  return {
    name: error?.name ?? String(error),
    code: error?.code ?? null,
    closeCode: error?.closeCode ?? null,
    message: String(error?.message ?? error),
    isDurableIdOwnedError: error instanceof dc.DurableIdOwnedError,
    isFatalConnectionError: error instanceof dc.FatalConnectionError,
  };
}

window.startClient = async (name, options, region, interest) => {
  const run = { events: [], live: [], errors: [], client: null };
  runs.set(name, run);
  try {
    run.client = new dc.DurableClient({
      ...options,
      onError: (e) => run.errors.push(describe(e)),
      onFatal: (e) => run.errors.push(describe(e)),
    });
    const welcome = await run.client.connect();
    const handle = run.client.region(region, listener(run));
    if (interest.keys) await handle.registerKeys(interest.keys, interest.options);
    else await handle.registerAllKeys(interest.options);
    await run.client.readyForEvents();
    const marker = await run.client.waitForMarker();
    return { welcome: plain(welcome), marker: plain(marker) };
  } catch (error) {
    return { error: describe(error) };
  }
};

window.closeClient = async (name, keepalive) => {
  await runs.get(name).client.close({ keepalive });
};

window.received = (name) => runs.get(name).events.length;

window.state = (name) => {
  const run = runs.get(name);
  return {
    events: run.events, live: run.live, errors: run.errors,
    reconnects: run.client?.reconnects ?? 0,
    connected: run.client?.connected ?? false,
    closed: run.client?.closed ?? true,
    duplicatesDropped: run.client?.duplicatesDropped ?? 0,
    welcome: plain(run.client?.welcome),
  };
};

document.getElementById("status").textContent = "ready";
window.harnessReady = true;
</script></body></html>
"""


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        return None


class JsClientPage:
    """The page and the module, served on 127.0.0.1 until ``close()``."""

    def __init__(self, root: Path, module: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(module, root / "durablecache.min.js")
        (root / "index.html").write_text(PAGE)
        self.port = free_port()
        handler = functools.partial(_Quiet, directory=str(root))
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.origin}/index.html"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)
