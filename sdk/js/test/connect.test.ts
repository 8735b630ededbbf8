/** Connecting: hello, welcome, redirects, fatal closes, reconnects with backoff. */

import assert from "node:assert/strict";
import { test } from "node:test";

import {
  AlreadyConnectedError,
  AuthenticationError,
  ClientClosedError,
  ClosedByOperatorError,
  ConnectFailedError,
  DurableCacheError,
  DurableIdOwnedError,
  FatalConnectionError,
  FrameTooLargeError,
  ProtocolError,
  RequestTimeoutError,
  type Welcome,
} from "durablecache-client";

import { URLS, accept, flush, makeClient } from "./fakes.js";

test("hello carries the options and connect resolves with the welcome", async () => {
  const { client, net } = makeClient({
    timeout: 60,
    redundancy: 1,
    conflate: true,
    maxQueued: 500,
  });
  const connecting = client.connect();
  const socket = await accept(net, {
    pending_events: 3,
    secondaries: ["node-2"],
    redundancy_satisfied: false,
    gap: { since: 41, dropped: 7, reason: "overflow" },
  });
  const welcome = await connecting;
  assert.equal(socket.url, `${URLS[0]}?token=tok`);
  const { id: _id, ...hello } = socket.last("hello");
  assert.deepEqual(hello, {
    type: "hello",
    durable_id: "app-1",
    timeout: 60,
    redundancy: 1,
    conflate: "true",
    max_queued: 500,
  });
  assert.deepEqual(welcome, {
    durableId: "app-1",
    node: "node-1",
    primary: "node-1",
    secondaries: ["node-2"],
    pendingEvents: 3,
    redundancySatisfied: false,
    gap: { since: 41, dropped: 7, reason: "overflow" },
    url: URLS[0],
  });
  assert.equal(client.connected, true);
  assert.equal(await client.connect(), welcome, "a second connect() gives the current welcome");
});

test("a non-durable client says durable_id null", async () => {
  const { client, net } = makeClient({ durableId: null });
  void client.connect();
  const socket = await accept(net, { durable_id: null });
  assert.equal(socket.last("hello")["durable_id"], null);
});

test("redirect is followed with the same token and hello", async () => {
  const { client, net } = makeClient();
  const connecting = client.connect();
  await flush();
  const first = net.latest;
  first.open();
  await flush();
  first.receive({ type: "redirect", url: "ws://node-3.test/ws/v1/subscribe" });
  await flush();
  assert.ok(first.clientClose, "the redirecting socket is closed");
  const second = await accept(net, { node: "node-3" });
  assert.equal(second.url, "ws://node-3.test/ws/v1/subscribe?token=tok");
  assert.deepEqual(second.last("hello"), first.last("hello"));
  assert.equal((await connecting).url, "ws://node-3.test/ws/v1/subscribe");
});

test("close codes become their error classes", async () => {
  const classes: Array<[number, typeof FatalConnectionError]> = [
    [4400, ProtocolError],
    [4401, AuthenticationError],
    [4403, DurableIdOwnedError],
    [4410, ClosedByOperatorError],
    [4413, FrameTooLargeError],
  ];
  for (const [code, Class] of classes) {
    const { client, net } = makeClient();
    const connecting = client.connect();
    await flush();
    net.latest.open();
    await flush();
    net.latest.drop(code, "refused");
    const error = await connecting.then(
      () => assert.fail("connect resolved"),
      (e: unknown) => e,
    );
    assert.ok(error instanceof Class, `${code} is ${Class.name}`);
    assert.equal((error as FatalConnectionError).closeCode, code);
    assert.equal((error as FatalConnectionError).reason, "refused");
  }
});

test("4403 stops the client: no reconnect, later calls raise it", async () => {
  const { client, net, clock } = makeClient();
  const connecting = client.connect();
  await flush();
  net.latest.open();
  await flush();
  net.latest.drop(4403);
  await assert.rejects(connecting, DurableIdOwnedError);
  await clock.advance(60_000);
  assert.equal(net.sockets.length, 1, "no second attempt");
  assert.equal(client.closed, true);
  await assert.rejects(client.region("prices").registerAllKeys(), DurableIdOwnedError);
  await assert.rejects(client.waitClosed(), DurableIdOwnedError);
});

test("a fatal close after the welcome goes to onFatal", async () => {
  const fatal: Error[] = [];
  const { client, net, clock } = makeClient({ onFatal: (error) => void fatal.push(error) });
  void client.connect();
  const socket = await accept(net);
  socket.drop(4410, "closed by operator");
  await clock.advance(10_000);
  assert.equal(fatal.length, 1);
  assert.ok(fatal[0] instanceof ClosedByOperatorError);
  assert.equal(net.sockets.length, 1);
});

test("an error answering hello is fatal", async () => {
  const { client, net } = makeClient();
  const connecting = client.connect();
  await flush();
  net.latest.open();
  await flush();
  net.latest.reply("hello", { type: "error", code: "bad_field", message: "durable_id" });
  const error = await connecting.catch((e: unknown) => e);
  assert.ok(error instanceof DurableCacheError);
  assert.equal(error.code, "bad_field");
});

test("a drop reconnects to the next url after a jittered backoff and restores", async () => {
  const reconnected: Welcome[] = [];
  const { client, net, clock } = makeClient({ onReconnect: (w) => void reconnected.push(w) });
  void client.connect();
  const first = await accept(net);
  const prices = client.region("prices");
  const registering = prices.registerKeys(["EUR", "USD"], { durable: true });
  await flush();
  first.reply("register_interest", { type: "interest_registered", count: 0 });
  await registering;
  const regex = prices.registerRegex("fx:.*");
  await flush();
  first.reply("register_interest", { type: "interest_registered", count: 0 });
  await regex;
  await client.readyForEvents();
  assert.equal(first.ofType("ready").length, 1);

  first.drop(1006);
  await flush();
  assert.equal(client.connected, false);
  assert.equal(net.sockets.length, 1, "waits before reconnecting");
  // Attempt 1: nominal 100 ms, jitter 0.5 -> 75 ms.
  await clock.advance(74);
  assert.equal(net.sockets.length, 1);
  await clock.advance(1);
  assert.equal(net.sockets.length, 2);
  assert.equal(net.latest.url, `${URLS[1]}?token=tok`, "the next url of the list");

  const second = await accept(net, { pending_events: 0 });
  assert.deepEqual(
    second.last("register_interest")["keys"],
    ["EUR", "USD"],
    "in their original order",
  );
  assert.equal(second.ofType("ready").length, 0, "ready waits for the registrations");
  second.reply("register_interest", { type: "interest_registered", count: 0 });
  await flush();
  assert.equal(second.last("register_interest")["regex"], "fx:.*");
  second.reply("register_interest", { type: "interest_registered", count: 0 });
  await flush();
  assert.equal(second.ofType("ready").length, 1, "ready is sent again");
  assert.equal(client.connected, true);
  assert.equal(client.reconnects, 1);
  assert.equal(reconnected.length, 1);
});

test("failed attempts back off exponentially up to the cap", async () => {
  const { client, net, clock } = makeClient({ random: () => 0.999999, reconnectMaxDelay: 0.4 });
  void client.connect();
  const times: number[] = [];
  for (let i = 0; i < 5; i++) {
    await flush();
    times.push(clock.time);
    net.latest.drop(1006);
    const count = net.sockets.length;
    while (net.sockets.length === count) await clock.advance(1);
  }
  const waits = times.slice(1).map((t, i) => t - (times[i] as number));
  assert.deepEqual(waits, [100, 200, 400, 400], "100 ms doubling, capped at 400 ms");
});

test("4409 is retried every conflictDelay, then fatal", async () => {
  const { client, net, clock } = makeClient({ conflictRetries: 3, conflictDelay: 0.05 });
  const connecting = client.connect();
  for (let i = 0; i < 4; i++) {
    await flush();
    net.latest.open();
    await flush();
    net.latest.drop(4409);
    await clock.advance(50);
  }
  await assert.rejects(connecting, AlreadyConnectedError);
  assert.equal(net.sockets.length, 4);
});

test("connect gives up after connectTimeout", async () => {
  const { client, net, clock } = makeClient({ connectTimeout: 1 });
  const connecting = client.connect();
  for (let i = 0; i < 20 && !client.closed; i++) {
    await flush();
    net.latest.drop(1006);
    await clock.advance(250);
  }
  await assert.rejects(connecting, ConnectFailedError);
});

test("a request made while reconnecting is sent on the new session", async () => {
  const { client, net, clock } = makeClient();
  void client.connect();
  const first = await accept(net);
  first.drop(1006);
  await flush();
  const put = client.region("prices").put("EUR", 1.1);
  await clock.advance(100);
  const second = await accept(net, { pending_events: 0 });
  assert.equal(first.ofType("put").length, 0);
  const frame = second.last("put");
  assert.deepEqual(
    { ...frame, id: null },
    { type: "put", region: "prices", key: "EUR", value: 1.1, id: null },
  );
  second.reply("put", {
    type: "written",
    region: "prices",
    key: "EUR",
    op: "create",
    version: 1,
    event_id: "ev1",
  });
  assert.deepEqual(await put, {
    region: "prices",
    key: "EUR",
    op: "create",
    version: 1,
    eventId: "ev1",
  });
});

test("a request with no reply times out", async () => {
  const { client, net, clock } = makeClient({ requestTimeout: 2 });
  void client.connect();
  await accept(net);
  const put = client.region("prices").put("EUR", 1);
  await clock.advance(1999);
  let settled = false;
  put.catch(() => undefined).finally(() => (settled = true));
  await flush();
  assert.equal(settled, false);
  await clock.advance(1);
  await assert.rejects(put, RequestTimeoutError);
});

test("an error reply rejects the request with its code", async () => {
  const { client, net } = makeClient();
  void client.connect();
  const socket = await accept(net);
  const registering = client.region("nope").registerAllKeys();
  await flush();
  socket.reply("register_interest", { type: "error", code: "no_such_region", message: "nope" });
  const error = await registering.catch((e: unknown) => e);
  assert.ok(error instanceof DurableCacheError);
  assert.equal(error.code, "no_such_region");
});

test("requests before connect() and after close() are refused", async () => {
  const { client, net } = makeClient();
  await assert.rejects(client.region("prices").registerAllKeys(), /not_connected/);
  void client.connect();
  const socket = await accept(net);
  const closing = client.close();
  await flush();
  socket.reply("close", { type: "closed", keepalive: false });
  await closing;
  await assert.rejects(client.region("prices").put("k", 1), ClientClosedError);
  await assert.rejects(client.connect(), ClientClosedError);
});

test("the constructor checks its options", () => {
  const { WebSocket } = makeClient().net;
  assert.throws(() => makeClient({ urls: [] }), /at least one url/);
  assert.throws(() => makeClient({ urls: "http://x/ws" }), /not a websocket url/);
  assert.throws(() => makeClient({ ackInterval: 0 }), /ackInterval/);
  assert.throws(() => makeClient({ conflate: "maybe" as "true" }), /conflate/);
  assert.ok(WebSocket);
});
