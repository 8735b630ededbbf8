/** Images, ready/replay/marker, acks, duplicates, the version-aware cache, close. */

import assert from "node:assert/strict";
import { test } from "node:test";

import { ListenerError, type EntryEvent, type Marker } from "durablecache-client";

import { Recorder, accept, event, flush, makeClient } from "./fakes.js";

async function subscribed(options: Parameters<typeof makeClient>[0] = {}) {
  const made = makeClient(options);
  const recorder = new Recorder();
  void made.client.connect();
  const socket = await accept(made.net, { pending_events: 2 });
  const prices = made.client.region("prices", recorder.listener());
  return { ...made, socket, prices, recorder };
}

test("image chunks fill the cache before interest_registered resolves the count", async () => {
  const { socket, prices, recorder } = await subscribed();
  const registering = prices.registerAllKeys({ durable: true });
  await flush();
  const frame = socket.last("register_interest");
  assert.deepEqual(
    { ...frame, id: null },
    {
      type: "register_interest",
      region: "prices",
      all_keys: true,
      durable: true,
      policy: "keys_values",
      id: null,
    },
  );
  socket.reply("register_interest", {
    type: "image",
    region: "prices",
    entries: [
      { key: "EUR", value: 1.08, version: 7 },
      { key: "USD", value: 1, version: 2 },
    ],
  });
  socket.reply("register_interest", {
    type: "image",
    region: "prices",
    entries: [{ key: "GBP", value: 0.8, version: 1 }],
  });
  socket.reply("register_interest", { type: "interest_registered", count: 3 });
  assert.equal(await registering, 3);
  assert.deepEqual(prices.getEntry("EUR"), { value: 1.08, version: 7 });
  assert.deepEqual(prices.keys().sort(), ["EUR", "GBP", "USD"]);
  assert.equal(prices.size, 3);
  assert.deepEqual(recorder.calls, [], "an image tells no listener");
});

test("policy keys caches keys with null values until an event brings one", async () => {
  const { socket, prices } = await subscribed();
  const registering = prices.registerKeys("EUR", { policy: "keys" });
  await flush();
  socket.reply("register_interest", { type: "image", region: "prices", keys: ["EUR"] });
  socket.reply("register_interest", { type: "interest_registered", count: 1 });
  assert.equal(await registering, 1);
  assert.equal(prices.has("EUR"), true);
  assert.equal(prices.get("EUR"), null);
});

test("ready: replayed events, the marker and afterRegionLive, then live events", async () => {
  const markers: Marker[] = [];
  const { client, socket, recorder } = await subscribed({ onMarker: (m) => void markers.push(m) });
  assert.equal(socket.ofType("ready").length, 0);
  await client.readyForEvents();
  assert.equal(socket.ofType("ready").length, 1);
  const marker = client.waitForMarker();
  socket.receive(event(10, "EUR", "create", 1.1, 1, { replay: true }));
  socket.receive(event(11, "EUR", "update", 1.2, 2, { replay: true }));
  socket.receive({ type: "marker", replayed: 2, resynced: 0, regions: ["prices"] });
  socket.receive(event(12, "EUR", "update", 1.3, 3));
  await flush();
  assert.deepEqual(recorder.calls, [
    "create EUR 1.1",
    "update EUR 1.2",
    "live prices null",
    "update EUR 1.3",
  ]);
  const events = recorder.events as EntryEvent[];
  assert.deepEqual(
    events.map((e) => e.isReplay),
    [true, true, undefined, false],
  );
  assert.deepEqual(await marker, { replayed: 2, resynced: 0, regions: ["prices"] });
  assert.deepEqual(markers, [await marker]);
  assert.deepEqual(recorder.events[2], { region: "prices", replayed: 2 });
  assert.deepEqual(client.lastMarker, await marker);
});

test("acks are cumulative, every ackInterval, and only when the seq advanced", async () => {
  const { client, socket, clock } = await subscribed({ ackInterval: 0.5 });
  await client.readyForEvents();
  socket.receive(event(3, "a", "create", 1, 1));
  socket.receive(event(7, "b", "create", 1, 1));
  await clock.advance(499);
  assert.equal(socket.ofType("ack").length, 0);
  await clock.advance(1);
  assert.deepEqual(socket.ofType("ack"), [{ type: "ack", up_to: 7 }]);
  await clock.advance(2000);
  assert.equal(socket.ofType("ack").length, 1, "nothing new, no ack");
  socket.receive(event(9, "a", "update", 2, 2));
  await clock.advance(500);
  assert.deepEqual(
    socket.ofType("ack").map((f) => f["up_to"]),
    [7, 9],
  );
});

test("an event is acked only after its async listener settled", async () => {
  const made = makeClient();
  void made.client.connect();
  const socket = await accept(made.net);
  let release: () => void = () => undefined;
  const order: string[] = [];
  made.client.region("prices", {
    afterCreate: async (e) => {
      order.push(`start ${e.key}`);
      await new Promise<void>((resolve) => (release = resolve));
      order.push(`end ${e.key}`);
    },
    afterUpdate: (e) => void order.push(`update ${e.key}`),
  });
  await made.client.readyForEvents();
  socket.receive(event(1, "a", "create", 1, 1));
  socket.receive(event(2, "a", "update", 2, 2));
  await made.clock.advance(300);
  assert.deepEqual(order, ["start a"], "the next event waits for the listener");
  assert.equal(socket.ofType("ack").length, 0);
  release();
  await made.clock.advance(100);
  assert.deepEqual(order, ["start a", "end a", "update a"]);
  assert.deepEqual(socket.last("ack"), { type: "ack", up_to: 2 });
});

test("a duplicate id is dropped within the tracking window and delivered after it", async () => {
  const { client, socket, clock, recorder, prices } = await subscribed({
    messageTrackingTimeout: 60,
  });
  await client.readyForEvents();
  socket.receive(event(1, "EUR", "create", 1, 1));
  socket.receive(event(1, "EUR", "create", 1, 1, { replay: true }));
  await clock.advance(100);
  assert.deepEqual(recorder.calls, ["create EUR 1"]);
  assert.equal(client.duplicatesDropped, 1);
  assert.deepEqual(socket.last("ack"), { type: "ack", up_to: 1 }, "a duplicate is acked too");
  await clock.advance(60_001);
  socket.receive(event(1, "EUR", "create", 1, 1));
  await flush();
  assert.equal(recorder.calls.length, 2, "forgotten after the window");
  assert.deepEqual(prices.getEntry("EUR"), { value: 1, version: 1 });
});

test("the cache applies only newer versions; listeners still see every event", async () => {
  const { client, socket, prices, recorder } = await subscribed();
  await client.readyForEvents();
  socket.receive(event(1, "EUR", "update", "v5", 5));
  socket.receive(event(2, "EUR", "update", "v4", 4, { replay: true }));
  await flush();
  assert.deepEqual(prices.getEntry("EUR"), { value: "v5", version: 5 });
  assert.deepEqual(recorder.calls, ['update EUR "v5"', 'update EUR "v4"']);

  socket.receive(event(3, "EUR", "destroy", null, 6));
  socket.receive(event(4, "EUR", "update", "v5", 5, { id: "old" }));
  await flush();
  assert.equal(prices.has("EUR"), false, "a tombstone keeps an older replay out");
  assert.equal(prices.versionOf("EUR"), 6);

  socket.receive(event(5, "EUR", "create", "v7", 7));
  socket.receive(event(6, "EUR", "invalidate", null, 8));
  await flush();
  assert.deepEqual(prices.getEntry("EUR"), { value: null, version: 8 });

  socket.receive(event(7, "USD", "create", 1, 1));
  socket.receive(event(8, null, "region_clear", null, null));
  await flush();
  assert.equal(prices.size, 0);
  assert.equal(prices.versionOf("EUR"), undefined);
  assert.equal(recorder.calls.at(-1), "region_clear prices null");
});

test("events of a region without a listener go to the default listener", async () => {
  const recorder = new Recorder();
  const { client, net } = makeClient({ defaultListener: recorder.listener() });
  void client.connect();
  const socket = await accept(net);
  await client.readyForEvents();
  socket.receive({ ...event(1, "k", "create", 1, 1), region: "other" });
  await flush();
  assert.deepEqual(recorder.calls, ["create k 1"]);
  assert.deepEqual(client.region("other").getEntry("k"), { value: 1, version: 1 });
});

test("a listener that throws is reported to onError and delivery goes on", async () => {
  const { client, net, errors } = makeClient();
  void client.connect();
  const socket = await accept(net);
  const seen: string[] = [];
  client.region("prices", {
    afterCreate: () => {
      throw new Error("boom");
    },
    afterUpdate: (e) => void seen.push(String(e.key)),
  });
  await client.readyForEvents();
  socket.receive(event(1, "a", "create", 1, 1));
  socket.receive(event(2, "a", "update", 2, 2));
  socket.receive({ type: "error", code: "bad_field", message: "stray" });
  await flush();
  assert.deepEqual(seen, ["a"]);
  assert.ok(errors[0] instanceof ListenerError);
  assert.equal((errors[0] as ListenerError).cause instanceof Error, true);
  assert.equal((errors[1] as ListenerError).code, "bad_field");
});

test("close({keepalive}) delivers and acks what came, then sends close", async () => {
  const { client, socket, clock, recorder } = await subscribed({ ackInterval: 10 });
  await client.readyForEvents();
  socket.receive(event(4, "EUR", "create", 1, 1));
  await flush();
  const closing = client.close({ keepalive: true });
  await flush();
  assert.deepEqual(socket.ofType("ack"), [{ type: "ack", up_to: 4 }], "a final ack first");
  assert.equal(socket.last("close")["keepalive"], true);
  // Sent by the server before it read `close`: never acked, so not delivered.
  socket.receive(event(5, "EUR", "update", 2, 2));
  socket.reply("close", { type: "closed", keepalive: true });
  await flush();
  await closing;
  assert.deepEqual(recorder.calls, ["create EUR 1"]);
  assert.ok(socket.clientClose, "the client closes the socket");
  assert.equal(client.closed, true);
  await client.waitClosed();
  await clock.advance(60_000);
  assert.equal(socket.ofType("ack").length, 1);
});

test("close without an answer gives up after closeTimeout", async () => {
  const { client, socket, clock } = await subscribed({ closeTimeout: 1 });
  const closing = client.close();
  await clock.advance(1000);
  await clock.advance(1000);
  await closing;
  assert.equal(socket.last("close")["keepalive"], false);
});

test("a frame the client cannot handle goes to onError and delivery goes on", async () => {
  const { client, socket, errors, recorder } = await subscribed();
  await client.readyForEvents();
  socket.receive({ ...event(1, "k", "create", 1, 1), region: "not a region name" });
  socket.receive(event(2, "k", "create", 2, 1));
  await flush();
  assert.equal((errors[0] as { code?: string }).code, "client_error");
  assert.deepEqual(recorder.calls, ["create k 2"]);
});
