/** Key-aware recovery (README.md, "Behaviour"): gaps, `since`, `since_too_old`, lost queues. */

import assert from "node:assert/strict";
import { test } from "node:test";

import type { CqEvent, EntryEvent, Gap, JsonObject } from "durablecache-client";

import { Recorder, accept, event, flush, makeClient, type FakeSocket } from "./fakes.js";

/** A client with one all-keys interest, an image of a b c, events up to seq 20. */
async function primed(interest: JsonObject = { durable: true }) {
  const gaps: Gap[] = [];
  const made = makeClient({ onGap: (gap) => void gaps.push(gap) });
  void made.client.connect();
  const socket = await accept(made.net);
  const recorder = new Recorder();
  const prices = made.client.region("prices", recorder.listener());
  const registering = prices.registerAllKeys(interest);
  await flush();
  socket.reply("register_interest", {
    type: "image",
    region: "prices",
    entries: [
      { key: "a", value: 1, version: 1 },
      { key: "b", value: 1, version: 1 },
      { key: "c", value: 1, version: 1 },
    ],
  });
  socket.reply("register_interest", { type: "interest_registered", count: 3 });
  await registering;
  await made.client.readyForEvents();
  socket.receive(event(20, "a", "update", 2, 2));
  await flush();
  recorder.calls.length = 0;
  recorder.events.length = 0;
  return { ...made, socket, prices, recorder, gaps };
}

async function reconnect(
  made: Awaited<ReturnType<typeof primed>>,
  welcome: JsonObject,
): Promise<FakeSocket> {
  made.socket.drop();
  await made.clock.advance(100);
  return accept(made.net, welcome);
}

function resyncFlags(recorder: Recorder): boolean[] {
  return (recorder.events as EntryEvent[]).map((e) => e.isResync);
}

test("a gap: the server's resync images and a since re-registration reach the listener as resync", async () => {
  const made = await primed();
  const socket = await reconnect(made, {
    pending_events: 0,
    gap: { since: 15, dropped: 9, reason: "overflow" },
  });
  assert.equal(made.client.welcome?.gap?.since, 15);
  socket.reply("register_interest", { type: "interest_registered", count: 3 });
  await flush();
  assert.equal(socket.ofType("ready").length, 1);

  socket.receive({ type: "gap", since: 15, dropped: 9, reason: "overflow" });
  socket.receive({
    type: "image",
    region: "prices",
    resync: true,
    interest: 1,
    entries: [
      { key: "b", value: 5, version: 5 },
      { key: "c", version: 3, destroyed: true },
      { key: "d", value: 1, version: 1 },
    ],
  });
  socket.receive({ type: "marker", replayed: 0, resynced: 3, regions: ["prices"] });
  await flush();
  assert.deepEqual(made.gaps, [{ since: 15, dropped: 9, reason: "overflow" }]);
  assert.deepEqual(made.recorder.calls, [
    "update b 5",
    "destroy c null",
    "create d 1",
    "live prices null",
  ]);
  assert.deepEqual(resyncFlags(made.recorder).slice(0, 3), [true, true, true]);
  assert.deepEqual(
    made.prices.entries(),
    new Map([
      ["a", { value: 2, version: 2 }],
      ["b", { value: 5, version: 5 }],
      ["d", { value: 1, version: 1 }],
    ]),
  );

  // The client also registers again from the last seq it applied.
  const again = socket.last("register_interest");
  assert.equal(again["since"], 20);
  assert.equal(again["all_keys"], true);
  socket.reply("register_interest", {
    type: "image",
    region: "prices",
    entries: [
      { key: "b", value: 5, version: 5 },
      { key: "e", value: 9, version: 2 },
    ],
  });
  socket.reply("register_interest", { type: "interest_registered", count: 2, since: 20 });
  await flush();
  assert.deepEqual(made.recorder.calls.slice(4), ["create e 9"], "only what changed is told");
  assert.equal(made.errors.length, 0);
});

test("a lost queue (-1): since re-registration; since_too_old: a full image prunes gone keys", async () => {
  const made = await primed();
  const socket = await reconnect(made, { pending_events: -1 });
  const first = socket.last("register_interest");
  assert.equal(first["since"], 20);
  socket.reply("register_interest", { type: "error", code: "since_too_old", message: "pruned" });
  await flush();
  const second = socket.last("register_interest");
  assert.notEqual(second["id"], first["id"]);
  assert.equal("since" in second, false, "a full image is asked for");
  socket.reply("register_interest", {
    type: "image",
    region: "prices",
    entries: [
      { key: "a", value: 2, version: 2 },
      { key: "b", value: 7, version: 4 },
    ],
  });
  socket.reply("register_interest", { type: "interest_registered", count: 2 });
  await flush();
  assert.deepEqual(made.recorder.calls, ["update b 7", "destroy c null"]);
  assert.deepEqual(resyncFlags(made.recorder), [true, true]);
  assert.deepEqual(made.prices.keys().sort(), ["a", "b"]);
  assert.equal(made.prices.versionOf("c"), 1, "c keeps a tombstone");
  assert.equal(made.errors.length, 0);
});

test("a reply without since back: the server sent a full image, so it prunes too", async () => {
  const made = await primed();
  const socket = await reconnect(made, { pending_events: -1 });
  assert.equal(socket.last("register_interest")["since"], 20);
  socket.reply("register_interest", {
    type: "image",
    region: "prices",
    entries: [
      { key: "a", value: 2, version: 2 },
      { key: "b", value: 1, version: 1 },
    ],
  });
  socket.reply("register_interest", { type: "interest_registered", count: 2 });
  await flush();
  assert.deepEqual(made.recorder.calls, ["destroy c null"]);
  assert.deepEqual(made.prices.keys().sort(), ["a", "b"]);
});

test("a kept queue and a durable interest: registered again plainly, the replay covers the rest", async () => {
  const made = await primed();
  const socket = await reconnect(made, { pending_events: 4 });
  assert.equal("since" in socket.last("register_interest"), false);
  socket.reply("register_interest", {
    type: "image",
    region: "prices",
    entries: [{ key: "b", value: 3, version: 3 }],
  });
  socket.reply("register_interest", { type: "interest_registered", count: 3 });
  await flush();
  assert.deepEqual(made.recorder.calls, [], "the fresh image is silent");
  assert.deepEqual(made.prices.getEntry("b"), { value: 3, version: 3 });
  assert.equal(made.prices.has("c"), true, "nothing pruned: the replay brings destroys");
});

test("a non-durable interest recovers by key even when the queue was kept", async () => {
  const made = await primed({ durable: false });
  const socket = await reconnect(made, { pending_events: 0 });
  assert.equal(socket.last("register_interest")["since"], 20);
  socket.reply("register_interest", {
    type: "image",
    region: "prices",
    entries: [{ key: "a", version: 3, destroyed: true }],
  });
  socket.reply("register_interest", { type: "interest_registered", count: 1, since: 20 });
  await flush();
  assert.deepEqual(made.recorder.calls, ["destroy a null"]);
  assert.equal(made.prices.has("a"), false);
});

test("a keys-policy resync: changed keys lose their stale value, destroyed keys go", async () => {
  const made = makeClient();
  void made.client.connect();
  const socket = await accept(made.net);
  const recorder = new Recorder();
  const prices = made.client.region("prices", recorder.listener());
  const registering = prices.registerKeys(["a", "b", "c"], { policy: "keys" });
  await flush();
  socket.reply("register_interest", { type: "image", region: "prices", keys: ["a", "b"] });
  socket.reply("register_interest", { type: "interest_registered", count: 2 });
  await registering;
  await made.client.readyForEvents();
  socket.receive(event(30, "a", "update", "x", 5));
  await flush();
  recorder.calls.length = 0;
  socket.drop();
  await made.clock.advance(100);
  const next = await accept(made.net, { pending_events: -2 });
  assert.equal(next.last("register_interest")["since"], 30);
  next.reply("register_interest", {
    type: "image",
    region: "prices",
    keys: ["a", "c"],
    destroyed: ["b"],
  });
  next.reply("register_interest", { type: "interest_registered", count: 3, since: 30 });
  await flush();
  assert.deepEqual(recorder.calls, ["update a null", "create c null", "destroy b null"]);
  assert.deepEqual(prices.getEntry("a"), { value: null, version: 5 });
  assert.equal(prices.has("b"), false);
});

test("a CQ resync: members enter or change, a former member's left marker is queryOp destroy", async () => {
  const made = makeClient();
  void made.client.connect();
  const socket = await accept(made.net);
  const events: CqEvent[] = [];
  const prices = made.client.region("prices");
  const registering = prices.registerCq("dear", "value > 100", {
    onEvent: (e) => void events.push(e),
  });
  await flush();
  socket.reply("register_cq", {
    type: "image",
    region: "prices",
    cq: "dear",
    entries: [
      { key: "a", value: 150, version: 1 },
      { key: "b", value: 300, version: 1 },
    ],
  });
  socket.reply("register_cq", { type: "cq_registered", name: "dear", count: 2 });
  await registering;
  await made.client.readyForEvents();
  socket.receive(event(40, "a", "update", 160, 2, { cq: [{ name: "dear", cq_op: "update" }] }));
  await flush();
  events.length = 0;

  socket.drop();
  await made.clock.advance(100);
  const next = await accept(made.net, { pending_events: -1 });
  assert.equal(next.last("register_cq")["since"], 40);
  next.reply("register_cq", {
    type: "image",
    region: "prices",
    cq: "dear",
    entries: [
      { key: "a", version: 3, cq_op: "destroy" },
      { key: "b", version: 2, destroyed: true },
      { key: "x", version: 5, cq_op: "destroy" },
      { key: "y", value: 500, version: 1 },
    ],
  });
  next.reply("register_cq", { type: "cq_registered", name: "dear", count: 4, since: 40 });
  await flush();
  assert.deepEqual(
    events.map((e) => `${e.key} ${e.baseOp}/${e.queryOp} ${e.isResync}`),
    ["a update/destroy true", "b destroy/destroy true", "y create/create true"],
    "x was never a member: nothing to tell",
  );
  assert.deepEqual([...(prices.cqResults("dear")?.keys() ?? [])], ["y"]);
});

test("a CQ full image after since_too_old: members it lacks have left", async () => {
  const made = makeClient();
  void made.client.connect();
  const socket = await accept(made.net);
  const events: CqEvent[] = [];
  const registering = made.client
    .region("prices")
    .registerCq("dear", "value > 100", { onEvent: (e) => void events.push(e) });
  await flush();
  socket.reply("register_cq", {
    type: "image",
    region: "prices",
    cq: "dear",
    entries: [{ key: "a", value: 150, version: 1 }],
  });
  socket.reply("register_cq", { type: "cq_registered", name: "dear", count: 1 });
  await registering;
  await made.client.readyForEvents();
  socket.receive(event(9, "z", "update", 1, 1, { cq: [] }));
  await flush();
  socket.drop();
  await made.clock.advance(100);
  const next = await accept(made.net, { pending_events: -1 });
  next.reply("register_cq", { type: "error", code: "since_too_old", message: "" });
  await flush();
  next.reply("register_cq", {
    type: "image",
    region: "prices",
    cq: "dear",
    entries: [{ key: "b", value: 200, version: 4 }],
  });
  next.reply("register_cq", { type: "cq_registered", name: "dear", count: 1 });
  await flush();
  assert.deepEqual(
    events.map((e) => `${e.key} ${e.queryOp}`),
    ["b create", "a destroy"],
  );
});
