/** The shipped package: both bundles, the WebSocket classes it accepts, `ws` for real. */

import assert from "node:assert/strict";
import type { AddressInfo } from "node:net";
import { test } from "node:test";

import * as api from "durablecache-client";
import * as minified from "durablecache-client/min";
import { WebSocket as WsWebSocket, WebSocketServer } from "ws";

test("the minified bundle exports what the module exports", () => {
  assert.deepEqual(Object.keys(minified).sort(), Object.keys(api).sort());
  assert.equal(typeof minified.DurableClient, "function");
});

test("error classes keep their names in the minified bundle", () => {
  const error = new minified.DurableIdOwnedError(4403, "taken");
  assert.equal(error.name, "DurableIdOwnedError");
  assert.ok(error instanceof minified.FatalConnectionError);
  assert.equal(error.code, "closed_4403");
  assert.equal(new minified.RequestTimeoutError().name, "RequestTimeoutError");
});

test("the WebSocket classes of ws and of the DOM fit the WebSocket option", () => {
  // Checked by the compiler: these assignments fail to build otherwise.
  const fromWs: api.WebSocketConstructor = WsWebSocket;
  const fromDom: api.WebSocketConstructor | undefined = (
    globalThis as { WebSocket?: typeof WebSocket }
  ).WebSocket;
  assert.ok(fromWs);
  assert.ok(fromDom === undefined || typeof fromDom === "function");
});

test("a client over the ws package: hello, image, ready, event, ack, close", async (t) => {
  const server = new WebSocketServer({ port: 0, host: "127.0.0.1" });
  t.after(() => server.close());
  await new Promise((resolve) => server.once("listening", resolve));
  const port = (server.address() as AddressInfo).port;
  const received: api.JsonObject[] = [];
  const closed = new Promise<api.JsonObject>((resolve) => {
    server.on("connection", (socket, request) => {
      assert.equal(new URL(request.url ?? "", "ws://x").searchParams.get("token"), "secret");
      socket.on("message", (data) => {
        const frame = JSON.parse(String(data)) as api.JsonObject;
        received.push(frame);
        const send = (reply: api.JsonObject) => socket.send(JSON.stringify(reply));
        if (frame["type"] === "hello") {
          send({
            type: "welcome",
            durable_id: "w",
            node: "n1",
            primary: "n1",
            secondaries: [],
            pending_events: -2,
            redundancy_satisfied: true,
          });
        } else if (frame["type"] === "register_interest") {
          send({
            type: "image",
            id: frame["id"] ?? null,
            region: "r",
            entries: [{ key: "k", value: 1, version: 1 }],
          });
          send({ type: "interest_registered", id: frame["id"] ?? null, count: 1 });
        } else if (frame["type"] === "ready") {
          send({ type: "marker", replayed: 0, resynced: 0, regions: ["r"] });
          send({
            type: "event",
            id: "e1",
            seq: 5,
            region: "r",
            key: "k",
            op: "update",
            value: 2,
            version: 2,
            ts: null,
            replay: false,
          });
        } else if (frame["type"] === "close") {
          send({ type: "closed", id: frame["id"] ?? null, keepalive: frame["keepalive"] ?? false });
          socket.close(1000);
          resolve(frame);
        }
      });
    });
  });
  const client = new api.DurableClient({
    urls: `ws://127.0.0.1:${port}/ws/v1/subscribe`,
    durableId: "w",
    token: "secret",
    WebSocket: WsWebSocket,
    ackInterval: 0.01,
  });
  const updated = new Promise<api.EntryEvent>((resolve) => {
    client.region("r", { afterUpdate: resolve });
  });
  const welcome = await client.connect();
  assert.equal(welcome.node, "n1");
  assert.equal(await client.region("r").registerKeys("k"), 1);
  await client.readyForEvents();
  assert.deepEqual((await client.waitForMarker()).regions, ["r"]);
  assert.equal((await updated).value, 2);
  await client.close({ keepalive: true });
  assert.equal((await closed)["keepalive"], true);
  assert.ok(received.some((f) => f["type"] === "ack" && f["up_to"] === 5));
  assert.deepEqual(client.region("r").getEntry("k"), { value: 2, version: 2 });
});
