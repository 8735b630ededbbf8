/**
 * A scripted server for the client's unit tests: fake websockets the test
 * drives frame by frame, and a fake clock whose timers run only when the
 * test advances it. Nothing here waits for wall-clock time.
 */

import assert from "node:assert/strict";

import {
  DurableClient,
  type DurableClientOptions,
  type JsonObject,
  type Scheduler,
  type TimerHandle,
  type WebSocketConstructor,
  type WebSocketLike,
} from "durablecache-client";

/** Let pending promise callbacks and queued socket events run. */
export async function flush(): Promise<void> {
  for (let i = 0; i < 20; i++) await new Promise((resolve) => setImmediate(resolve));
}

interface Timer {
  readonly id: number;
  readonly at: number;
  readonly callback: () => void;
}

/** A clock that moves only in `advance`, running the timers that fall due. */
export class FakeScheduler implements Scheduler {
  time = 0;
  private timers: Timer[] = [];
  private nextId = 1;

  now(): number {
    return this.time;
  }

  setTimeout(callback: () => void, delayMs: number): TimerHandle {
    const timer = { id: this.nextId++, at: this.time + Math.max(0, delayMs), callback };
    this.timers.push(timer);
    return timer.id;
  }

  clearTimeout(handle: TimerHandle): void {
    this.timers = this.timers.filter((timer) => timer.id !== handle);
  }

  /** Move the clock `ms` forward, running due timers in time order. */
  async advance(ms: number): Promise<void> {
    const end = this.time + ms;
    for (;;) {
      await flush();
      const due = this.timers
        .filter((timer) => timer.at <= end)
        .sort((a, b) => a.at - b.at || a.id - b.id)[0];
      if (due === undefined) break;
      this.timers = this.timers.filter((timer) => timer !== due);
      this.time = due.at;
      due.callback();
    }
    this.time = end;
    await flush();
  }
}

type Handler<E> = ((event: E) => void) | null;

/** One fake websocket: the client's side is WebSocketLike, the test plays the server. */
export class FakeSocket implements WebSocketLike {
  onopen: Handler<unknown> = null;
  onmessage: Handler<{ readonly data: unknown }> = null;
  onclose: Handler<{ readonly code: number; readonly reason: string }> = null;
  onerror: Handler<unknown> = null;
  /** Frames the client sent, parsed. */
  readonly sent: JsonObject[] = [];
  /** The close the client asked for, if it did. */
  clientClose: { code: number | undefined; reason: string | undefined } | null = null;
  private state: "connecting" | "open" | "closed" = "connecting";

  constructor(readonly url: string) {}

  send(data: string): void {
    if (this.state !== "open") throw new Error("socket not open");
    this.sent.push(JSON.parse(data) as JsonObject);
  }

  close(code?: number, reason?: string): void {
    if (this.state === "closed" || this.clientClose !== null) return;
    this.clientClose = { code, reason };
    // A real socket reports its close later, once the handshake is done.
    setImmediate(() => this.closed(code ?? 1000, reason ?? ""));
  }

  // -- the server's side --------------------------------------------------------

  open(): void {
    this.state = "open";
    this.onopen?.({});
  }

  receive(frame: JsonObject): void {
    this.onmessage?.({ data: JSON.stringify(frame) });
  }

  /** Close from the server's side (1006: dropped without a close frame). */
  drop(code = 1006, reason = ""): void {
    this.onerror?.({});
    this.closed(code, reason);
  }

  get isClosed(): boolean {
    return this.state === "closed";
  }

  ofType(type: string): JsonObject[] {
    return this.sent.filter((frame) => frame["type"] === type);
  }

  last(type: string): JsonObject {
    const frames = this.ofType(type);
    const frame = frames[frames.length - 1];
    assert.ok(frame, `the client sent no ${type}`);
    return frame;
  }

  /** Answer the last request of `type` with a reply frame carrying its id. */
  reply(type: string, answer: JsonObject): void {
    this.receive({ ...answer, id: this.last(type)["id"] ?? null });
  }

  private closed(code: number, reason: string): void {
    if (this.state === "closed") return;
    this.state = "closed";
    this.onclose?.({ code, reason });
  }
}

/** Every fake socket the client opened, and the class that opens them. */
export class FakeNetwork {
  readonly sockets: FakeSocket[] = [];
  readonly WebSocket: WebSocketConstructor;

  constructor() {
    const sockets = this.sockets;
    this.WebSocket = class extends FakeSocket {
      constructor(url: string) {
        super(url);
        sockets.push(this);
      }
    };
  }

  get latest(): FakeSocket {
    const socket = this.sockets[this.sockets.length - 1];
    assert.ok(socket, "the client opened no socket");
    return socket;
  }
}

export const URLS = ["ws://node-1.test/ws/v1/subscribe", "ws://node-2.test/ws/v1/subscribe"];

export const WELCOME: JsonObject = {
  type: "welcome",
  durable_id: "app-1",
  node: "node-1",
  primary: "node-1",
  secondaries: [],
  pending_events: -2,
  redundancy_satisfied: true,
};

/** A client on a fake network and clock; `errors` collects what reached onError. */
export function makeClient(options: Partial<DurableClientOptions> = {}) {
  const net = new FakeNetwork();
  const clock = new FakeScheduler();
  const errors: Error[] = [];
  const client = new DurableClient({
    urls: URLS,
    durableId: "app-1",
    token: "tok",
    WebSocket: net.WebSocket,
    scheduler: clock,
    random: () => 0.5,
    onError: (error) => {
      errors.push(error);
    },
    ...options,
  });
  return { client, net, clock, errors };
}

/** Open the latest socket, check its `hello`, answer `welcome`. */
export async function accept(net: FakeNetwork, welcome: JsonObject = {}): Promise<FakeSocket> {
  await flush();
  const socket = net.latest;
  socket.open();
  await flush();
  assert.equal(socket.last("hello")["type"], "hello");
  socket.receive({ ...WELCOME, ...welcome });
  await flush();
  return socket;
}

/** An `event` frame. */
export function event(
  seq: number,
  key: string | null,
  op: string,
  value: unknown,
  version: number | null,
  extra: JsonObject = {},
): JsonObject {
  return {
    type: "event",
    id: `e${seq}`,
    seq,
    region: "prices",
    key,
    op,
    value: value as JsonObject[string],
    version,
    ts: "2030-01-01T00:00:00Z",
    replay: false,
    ...extra,
  };
}

/** Records every listener call as `method key value` strings and the events. */
export class Recorder {
  readonly calls: string[] = [];
  readonly events: Array<JsonObject | object> = [];

  listener() {
    const record =
      (method: string) => (event: { key?: string | null; value?: unknown; region?: string }) => {
        this.events.push(event);
        this.calls.push(
          `${method} ${event.key ?? event.region} ${JSON.stringify(event.value ?? null)}`,
        );
      };
    return {
      afterCreate: record("create"),
      afterUpdate: record("update"),
      afterDestroy: record("destroy"),
      afterInvalidate: record("invalidate"),
      afterRegionClear: record("region_clear"),
      afterRegionDestroy: record("region_destroy"),
      afterRegionLive: record("live"),
    };
  }
}
