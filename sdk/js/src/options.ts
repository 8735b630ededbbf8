/**
 * The client's options, their defaults and checks. Durations are in
 * seconds, as in the protocol's `timeout` and the Python client.
 */

import type { CacheListener, Gap, Marker, Welcome } from "./events.js";
import { realScheduler, type Scheduler } from "./scheduler.js";
import type { WebSocketConstructor } from "./socket.js";

export interface DurableClientOptions {
  /** One `ws://HOST:PORT/ws/v1/subscribe` url or a list, tried in turn. */
  readonly urls: string | readonly string[];
  /** The durable id; null or absent for a non-durable client. */
  readonly durableId?: string | null;
  /** Seconds the server keeps the queue while the client is away (300). */
  readonly timeout?: number;
  /** Secondary copies of the queue (0; -1: every other node). */
  readonly redundancy?: number;
  /** `server` (the region's setting), `true` or `false`. */
  readonly conflate?: "server" | "true" | "false" | boolean;
  /** The most events the queue may hold (the server's default when absent). */
  readonly maxQueued?: number;
  /** The API token, sent as `?token=` (a browser cannot set headers). */
  readonly token?: string | null;
  /** Seconds between cumulative acks (0.1). */
  readonly ackInterval?: number;
  /** Seconds an event id is remembered to drop duplicates (900). */
  readonly messageTrackingTimeout?: number;
  /** Seconds the first `connect()` keeps trying (30; null: forever). */
  readonly connectTimeout?: number | null;
  /** Seconds a request may take, reconnects included (30). */
  readonly requestTimeout?: number;
  /** Seconds `close()` waits for `closed` and for the socket to end (10). */
  readonly closeTimeout?: number;
  /** First reconnect delay in seconds (0.1), doubling up to `reconnectMaxDelay` (5). */
  readonly reconnectInitialDelay?: number;
  readonly reconnectMaxDelay?: number;
  /** 4409 (already connected) is retried this often (40), every `conflictDelay` s (0.25). */
  readonly conflictRetries?: number;
  readonly conflictDelay?: number;
  /** Receives the events of regions that have no listener of their own. */
  readonly defaultListener?: CacheListener;
  /** A reconnect answered `welcome` (registrations are restored by then). */
  readonly onReconnect?: (welcome: Welcome) => unknown;
  /** A `marker` ended a replay. */
  readonly onMarker?: (marker: Marker) => unknown;
  /** The queue overflowed (README.md, "Behaviour"); the client recovers by key on its own. */
  readonly onGap?: (gap: Gap) => unknown;
  /** A fatal close or error stopped the client after `connect()` resolved. */
  readonly onFatal?: (error: Error) => unknown;
  /** An `error` frame that answers no request, or a listener that threw. */
  readonly onError?: (error: Error) => unknown;
  /** The WebSocket class; the global one by default (Node 20 has none: pass `ws`). */
  readonly WebSocket?: WebSocketConstructor;
  /** The clock and timers (tests pass a fake one). */
  readonly scheduler?: Scheduler;
  /** The jitter source, in [0, 1) (Math.random). */
  readonly random?: () => number;
}

/** The options with their defaults, durations in milliseconds. */
export interface Settings {
  readonly urls: readonly string[];
  readonly durableId: string | null;
  readonly timeout: number;
  readonly redundancy: number;
  readonly conflate: "server" | "true" | "false";
  readonly maxQueued: number | null;
  readonly token: string | null;
  readonly ackIntervalMs: number;
  readonly trackingMs: number;
  readonly connectTimeoutMs: number | null;
  readonly requestTimeoutMs: number;
  readonly closeTimeoutMs: number;
  readonly initialDelayMs: number;
  readonly maxDelayMs: number;
  readonly conflictRetries: number;
  readonly conflictDelayMs: number;
  readonly WebSocket: WebSocketConstructor;
  readonly scheduler: Scheduler;
  readonly random: () => number;
}

function seconds(name: string, value: number | undefined, fallback: number): number {
  const chosen = value ?? fallback;
  if (!Number.isFinite(chosen) || chosen < 0) throw new RangeError(`${name} must be a duration`);
  return chosen * 1000;
}

function checkUrl(url: string): string {
  const parsed = new URL(url);
  if (parsed.protocol !== "ws:" && parsed.protocol !== "wss:") {
    throw new TypeError(`not a websocket url: ${url}`);
  }
  return url;
}

/** Check `options` and fill in the defaults. */
export function settingsFrom(options: DurableClientOptions): Settings {
  const urls = (typeof options.urls === "string" ? [options.urls] : [...options.urls]).map(
    checkUrl,
  );
  if (urls.length === 0) throw new TypeError("at least one url is required");
  const conflate = options.conflate ?? "server";
  const mode = typeof conflate === "boolean" ? (conflate ? "true" : "false") : conflate;
  if (!["server", "true", "false"].includes(mode)) throw new TypeError(`invalid conflate: ${mode}`);
  const ackIntervalMs = seconds("ackInterval", options.ackInterval, 0.1);
  if (ackIntervalMs <= 0) throw new RangeError("ackInterval must be positive");
  const WebSocket =
    options.WebSocket ?? (globalThis as { WebSocket?: WebSocketConstructor }).WebSocket;
  if (WebSocket === undefined) {
    throw new TypeError("no global WebSocket: pass one (for example from 'ws') as `WebSocket`");
  }
  return {
    urls,
    durableId: options.durableId ?? null,
    timeout: options.timeout ?? 300,
    redundancy: options.redundancy ?? 0,
    conflate: mode,
    maxQueued: options.maxQueued ?? null,
    token: options.token ?? null,
    ackIntervalMs,
    trackingMs: seconds("messageTrackingTimeout", options.messageTrackingTimeout, 900),
    connectTimeoutMs:
      options.connectTimeout === null
        ? null
        : seconds("connectTimeout", options.connectTimeout, 30),
    requestTimeoutMs: seconds("requestTimeout", options.requestTimeout, 30),
    closeTimeoutMs: seconds("closeTimeout", options.closeTimeout, 10),
    initialDelayMs: seconds("reconnectInitialDelay", options.reconnectInitialDelay, 0.1),
    maxDelayMs: seconds("reconnectMaxDelay", options.reconnectMaxDelay, 5),
    conflictRetries: options.conflictRetries ?? 40,
    conflictDelayMs: seconds("conflictDelay", options.conflictDelay, 0.25),
    WebSocket,
    scheduler: options.scheduler ?? realScheduler,
    random: options.random ?? Math.random,
  };
}
