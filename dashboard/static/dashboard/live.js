// The Live view of a region (dashboard/live.py): one non-durable client of
// the vendored TypeScript client, interested in every key, on this node's
// own socket. No token: the socket takes the operator's session cookie on
// a same-origin handshake.
import { DurableClient } from "./vendor/durablecache.min.js";

const table = document.getElementById("live-entries");
const body = table.tBodies[0];
const region = table.dataset.region;
const policy = table.dataset.policy;
const stateBox = document.getElementById("live-state");
const eventCount = document.getElementById("live-events");
const keyCount = document.getElementById("live-keys");
const rows = new Map(); // key -> <tr>
let events = 0;

function setState(text, kind) {
  stateBox.textContent = text;
  stateBox.className = `status ${kind}`;
}

function cell(text) {
  const td = document.createElement("td");
  const code = document.createElement("code");
  code.textContent = text;
  td.append(code);
  return td;
}

// Keep the rows sorted by key: insert before the first row that sorts after.
function insertSorted(key, tr) {
  const after = [...body.rows].find((row) => row.dataset.key > key);
  body.insertBefore(tr, after ?? null);
}

function show(key, value, version, op, ts, flash) {
  let tr = rows.get(key);
  const cells = [
    cell(key),
    cell(value === undefined ? "" : JSON.stringify(value)),
    cell(version === null || version === undefined ? "" : String(version)),
    cell(op),
    cell(ts ? ts.replace("T", " ").replace(/\.\d+/, "").replace(/(Z|\+00:00)$/, "") : ""),
  ];
  if (tr === undefined) {
    tr = document.createElement("tr");
    tr.dataset.key = key;
    insertSorted(key, tr);
    rows.set(key, tr);
  }
  tr.replaceChildren(...cells);
  tr.classList.toggle("gone", op === "destroy");
  if (flash) {
    // Restart the highlight even when the same row changes again at once.
    tr.classList.remove("flash");
    void tr.offsetWidth;
    tr.classList.add("flash");
  }
  keyCount.textContent = String(rows.size);
}

function onEntry(event) {
  events += 1;
  eventCount.textContent = String(events);
  show(event.key, event.value, event.version, event.op, event.ts, true);
}

function onRegionOp(event) {
  events += 1;
  eventCount.textContent = String(events);
  for (const tr of rows.values()) tr.classList.add("gone");
  setState(event.op === "region_destroy" ? "region destroyed" : "region cleared", "disconnected");
}

const scheme = location.protocol === "https:" ? "wss" : "ws";
const client = new DurableClient({
  urls: `${scheme}://${location.host}/ws/v1/subscribe`,
  onReconnect: () => setState("live", "connected"),
  onFatal: (error) => setState(`closed: ${error.name}`, "down"),
});

async function start() {
  await client.connect();
  const handle = client.region(region, {
    afterCreate: onEntry,
    afterUpdate: onEntry,
    afterDestroy: onEntry,
    afterInvalidate: onEntry,
    afterRegionClear: onRegionOp,
    afterRegionDestroy: onRegionOp,
  });
  await handle.registerAllKeys({ policy });
  for (const [key, entry] of handle.entries()) {
    if (!rows.has(key)) show(key, entry.value, entry.version, "image", null, false);
  }
  await client.readyForEvents();
  await client.waitForMarker();
  setState("live", "connected");
  table.dataset.live = "true";
  // The client reconnects by itself; show when it is between sessions.
  setInterval(() => {
    if (client.closed) return;
    if (client.connected) setState("live", "connected");
    else setState("reconnecting", "disconnected");
  }, 1000);
}

start().catch((error) => setState(`failed: ${error.name ?? error}`, "down"));
