/** Continuous queries: registration, events with query ops, the cache rule, ends. */

import assert from "node:assert/strict";
import { test } from "node:test";

import type { CqEvent, CqListener } from "durablecache-client";

import { Recorder, accept, event, flush, makeClient } from "./fakes.js";

class CqRecorder implements CqListener {
  readonly events: CqEvent[] = [];
  readonly errors: Error[] = [];
  closes = 0;

  onEvent(event: CqEvent): void {
    this.events.push(event);
  }

  onError(error: Error): void {
    this.errors.push(error);
  }

  onClose(): void {
    this.closes += 1;
  }

  get ops(): string[] {
    return this.events.map((e) => `${e.cqName} ${e.key} ${e.baseOp}/${e.queryOp}`);
  }
}

async function withCq() {
  const made = makeClient();
  void made.client.connect();
  const socket = await accept(made.net);
  const regionRecorder = new Recorder();
  const prices = made.client.region("prices", regionRecorder.listener());
  const cq = new CqRecorder();
  const registering = prices.registerCq("dear", "value.amount > 100", cq, { durable: true });
  await flush();
  socket.reply("register_cq", {
    type: "image",
    region: "prices",
    cq: "dear",
    entries: [{ key: "a", value: { amount: 150 }, version: 3 }],
  });
  socket.reply("register_cq", { type: "cq_registered", name: "dear", count: 1 });
  const count = await registering;
  await made.client.readyForEvents();
  return { ...made, socket, prices, cq, regionRecorder, count };
}

test("registerCq sends the frame and keeps the initial result apart from the cache", async () => {
  const { socket, prices, count } = await withCq();
  const { id: _id, ...frame } = socket.last("register_cq");
  assert.deepEqual(frame, {
    type: "register_cq",
    name: "dear",
    region: "prices",
    query: "value.amount > 100",
    durable: true,
  });
  assert.equal(count, 1);
  assert.deepEqual(
    [...(prices.cqResults("dear") ?? [])],
    [["a", { value: { amount: 150 }, version: 3 }]],
  );
  assert.equal(prices.size, 0, "a CQ image does not touch the region's cache");
});

test("CQ events carry baseOp and queryOp and skip the cache of a CQ-only key", async () => {
  const { socket, prices, cq, regionRecorder } = await withCq();
  socket.receive(
    event(1, "b", "create", { amount: 200 }, 1, { cq: [{ name: "dear", cq_op: "create" }] }),
  );
  socket.receive(
    event(2, "a", "update", { amount: 50 }, 4, { cq: [{ name: "dear", cq_op: "destroy" }] }),
  );
  await flush();
  assert.deepEqual(cq.ops, ["dear b create/create", "dear a update/destroy"]);
  assert.equal(cq.events[0]?.isReplay, false);
  assert.equal(prices.size, 0);
  assert.deepEqual(regionRecorder.calls, [], "the region listener gets no CQ-only event");
  assert.deepEqual([...(prices.cqResults("dear")?.keys() ?? [])], ["b"]);
});

test("an event for both an interest and a CQ updates the cache and both listeners", async () => {
  const { socket, prices, cq, regionRecorder } = await withCq();
  const registering = prices.registerKeys(["b"]);
  await flush();
  socket.reply("register_interest", { type: "interest_registered", count: 0 });
  await registering;
  socket.receive(
    event(1, "b", "create", { amount: 200 }, 1, { cq: [{ name: "dear", cq_op: "create" }] }),
  );
  await flush();
  assert.deepEqual(prices.getEntry("b"), { value: { amount: 200 }, version: 1 });
  assert.deepEqual(regionRecorder.calls, ['create b {"amount":200}']);
  assert.deepEqual(cq.ops, ["dear b create/create"]);
});

test("region_destroy ends the CQ: onClose, and it is not registered again", async () => {
  const { socket, cq, clock, net } = await withCq();
  socket.receive(
    event(1, null, "region_destroy", null, null, {
      cq: [{ name: "dear", cq_op: "region_destroy" }],
    }),
  );
  await flush();
  assert.deepEqual(cq.ops, ["dear null region_destroy/region_destroy"]);
  assert.equal(cq.closes, 1);
  socket.drop();
  await clock.advance(100);
  const next = await accept(net, { pending_events: 0 });
  assert.equal(next.ofType("register_cq").length, 0);
});

test("an operator's cq_closed ends the CQ", async () => {
  const { socket, prices, cq } = await withCq();
  socket.receive({ type: "cq_closed", name: "dear" });
  await flush();
  assert.equal(cq.closes, 1);
  assert.equal(prices.cqResults("dear"), undefined);
});

test("closeCq sends close_cq and forgets the CQ", async () => {
  const { client, socket, cq } = await withCq();
  const closing = client.closeCq("dear");
  await flush();
  socket.reply("close_cq", { type: "cq_closed", name: "dear" });
  await closing;
  assert.equal(socket.last("close_cq")["name"], "dear");
  assert.equal(cq.closes, 1);
});

test("a CQ the server refuses again after a reconnect goes to onError", async () => {
  const { socket, cq, clock, net } = await withCq();
  socket.drop();
  await clock.advance(100);
  const next = await accept(net, { pending_events: 0 });
  next.reply("register_cq", { type: "error", code: "no_such_region", message: "prices" });
  await flush();
  assert.equal(cq.errors.length, 1);
  assert.match(String(cq.errors[0]), /no_such_region/);
});

test("registerCq takes the options with the listener: {durable, onEvent}", async () => {
  const made = makeClient({ durableId: "app-1" });
  void made.client.connect();
  const socket = await accept(made.net);
  const seen: string[] = [];
  const registering = made.client
    .region("prices")
    .registerCq("dear", "value.amount > 100", {
      durable: true,
      onEvent: (e) => seen.push(`${e.key} ${e.queryOp}`),
    });
  await flush();
  socket.reply("register_cq", { type: "cq_registered", name: "dear", count: 0 });
  await registering;
  await made.client.readyForEvents();
  socket.receive(
    event(1, "b", "create", { amount: 200 }, 1, { cq: [{ name: "dear", cq_op: "create" }] }),
  );
  await flush();
  assert.equal(socket.last("register_cq")["durable"], true);
  assert.deepEqual(seen, ["b create"]);
});

test("a durable CQ is sent again after a reconnect, silently when the queue was kept", async () => {
  const { socket, prices, cq, clock, net } = await withCq();
  socket.drop();
  await clock.advance(100);
  const next = await accept(net, { pending_events: 1 });
  await flush();
  const { id: _id, ...frame } = next.last("register_cq");
  assert.deepEqual(frame, {
    type: "register_cq",
    name: "dear",
    region: "prices",
    query: "value.amount > 100",
    durable: true,
  });
  next.reply("register_cq", {
    type: "image",
    region: "prices",
    cq: "dear",
    entries: [{ key: "a", value: { amount: 150 }, version: 3 }],
  });
  next.reply("register_cq", { type: "cq_registered", name: "dear", count: 1 });
  await flush();
  next.receive(
    event(1, "a", "update", { amount: 160 }, 4, {
      replay: true,
      cq: [{ name: "dear", cq_op: "update" }],
    }),
  );
  await flush();
  assert.deepEqual(cq.ops, ["dear a update/update"], "the image told nothing; the replay did");
  assert.deepEqual(prices.cqResults("dear")?.get("a"), { value: { amount: 160 }, version: 4 });
  assert.equal(prices.size, 0);
});

test("a CQ whose queue was lost hears from the fresh image what entered and left", async () => {
  const { socket, prices, cq, clock, net } = await withCq();
  socket.drop();
  await clock.advance(100);
  const next = await accept(net, { pending_events: -1 });
  await flush();
  next.reply("register_cq", {
    type: "image",
    region: "prices",
    cq: "dear",
    entries: [{ key: "c", value: { amount: 300 }, version: 7 }],
  });
  next.reply("register_cq", { type: "cq_registered", name: "dear", count: 1 });
  await flush();
  assert.deepEqual(cq.ops.sort(), ["dear a update/destroy", "dear c create/create"]);
  assert.ok(cq.events.every((e) => e.isResync));
  assert.deepEqual([...(prices.cqResults("dear")?.keys() ?? [])], ["c"]);
  assert.equal(prices.size, 0);
});
