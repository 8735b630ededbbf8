/**
 * One websocket session, from `hello` to its close: opening it (following
 * `redirect`), requests matched to their replies by `id`, and the
 * per-socket state (acks, ready, marker). docs/protocol.md, "Client → server frames".
 */

import {
  DurableCacheError,
  FATAL_CLOSE_CODES,
  RequestTimeoutError,
  SessionLostError,
  TransientError,
  fatalCloseError,
} from "./errors.js";
import { parseWelcome, type JsonObject, type Marker, type Welcome } from "./events.js";
import type { Scheduler, TimerHandle } from "./scheduler.js";
import { Connection, type WebSocketConstructor } from "./socket.js";

/** Reply frame types, each answering the request with the same `id`. */
const REPLY_TYPES: ReadonlySet<string> = new Set([
  "interest_registered",
  "interest_unregistered",
  "cq_registered",
  "cq_closed",
  "written",
  "closed",
]);

/** How many `redirect` frames in a row are followed. */
export const MAX_REDIRECTS = 5;

interface Pending {
  readonly type: string;
  readonly resolve: (frame: JsonObject) => void;
  readonly reject: (error: Error) => void;
  readonly onImage: ((frame: JsonObject) => void) | undefined;
  timer: TimerHandle;
}

/** What opening a session needs. */
export interface OpenOptions {
  readonly WebSocket: WebSocketConstructor;
  readonly token: string | null;
  readonly scheduler: Scheduler;
  readonly replyTimeoutMs: number;
  /** Told of each socket being opened, so a close() can abort it. */
  readonly track: (connection: Connection | null) => void;
}

/** One open socket that answered `welcome`; seqs and acks are per session. */
export class Session {
  /** Frames that answer no request: events, markers, gaps, resync images. */
  onFrame: (frame: JsonObject) => void = () => undefined;
  /** Resolves when the socket is closed (`closeCode` then says how). */
  readonly closed: Promise<void>;
  closeCode: number | null = null;
  closeReason = "";
  isReconnect = false;
  readySent = false;
  /** Highest seq handed to the listeners, and highest seq acked. */
  ackHigh: number | null = null;
  acked: number | null = null;
  marker: Marker | null = null;
  /** Set once `close` sent the final ack: later events are not delivered. */
  finalAckSent = false;
  private readonly pending = new Map<string, Pending>();
  private markClosed: () => void = () => undefined;

  constructor(
    readonly connection: Connection,
    readonly welcome: Welcome,
    private readonly scheduler: Scheduler,
  ) {
    this.closed = new Promise<void>((resolve) => {
      this.markClosed = resolve;
    });
    connection.listen(
      (frame) => this.received(frame),
      (code, reason) => this.ended(code, reason),
    );
  }

  get isClosed(): boolean {
    return this.closeCode !== null;
  }

  /** Send a frame that has no reply; false when the socket is gone. */
  send(frame: JsonObject): boolean {
    return this.connection.send(frame);
  }

  /**
   * Send `frame` with `id` and resolve with its reply. Rejects with the
   * server's `error` as a DurableCacheError, with SessionLostError when
   * the socket goes first, or RequestTimeoutError after `timeoutMs`.
   * `onImage` gets the request's `image` chunks as they come.
   */
  request(
    frame: JsonObject,
    id: string,
    timeoutMs: number,
    onImage?: (frame: JsonObject) => void,
  ): Promise<JsonObject> {
    return new Promise<JsonObject>((resolve, reject) => {
      if (this.isClosed || !this.connection.send({ ...frame, id })) {
        reject(new SessionLostError());
        return;
      }
      const timer = this.scheduler.setTimeout(() => {
        this.pending.delete(id);
        reject(new RequestTimeoutError(`no reply to ${String(frame["type"])}`));
      }, timeoutMs);
      this.pending.set(id, { type: String(frame["type"]), resolve, reject, onImage, timer });
    });
  }

  close(code?: number, reason?: string): void {
    this.connection.close(code, reason);
  }

  private received(frame: JsonObject): void {
    const type = frame["type"];
    const id = typeof frame["id"] === "string" ? frame["id"] : null;
    let pending = id === null ? undefined : this.pending.get(id);
    if (pending === undefined && type === "closed") {
      pending = [...this.pending.values()].find((p) => p.type === "close");
    }
    if (pending !== undefined && type === "image" && pending.onImage) {
      pending.onImage(frame);
    } else if (pending !== undefined && type === "error") {
      this.settle(id, pending);
      const code = typeof frame["code"] === "string" ? frame["code"] : "error";
      const message = typeof frame["message"] === "string" ? frame["message"] : "";
      pending.reject(new DurableCacheError(code, message));
    } else if (pending !== undefined && typeof type === "string" && REPLY_TYPES.has(type)) {
      this.settle(id, pending);
      pending.resolve(frame);
    } else {
      this.onFrame(frame);
    }
  }

  private settle(id: string | null, pending: Pending): void {
    this.scheduler.clearTimeout(pending.timer);
    for (const [key, value] of this.pending) {
      if (value === pending || key === id) this.pending.delete(key);
    }
  }

  private ended(code: number, reason: string): void {
    this.closeCode = code;
    this.closeReason = reason;
    for (const pending of this.pending.values()) {
      this.scheduler.clearTimeout(pending.timer);
      pending.reject(new SessionLostError());
    }
    this.pending.clear();
    this.markClosed();
  }
}

/**
 * Connect to `url`, say `hello`, follow redirects; return the session.
 * Throws a FatalConnectionError subclass for a fatal close, a
 * DurableCacheError when the server answers `hello` with `error`, and a
 * TransientError (closeCode 4409 for a conflict) when a retry may succeed.
 */
export async function openSession(
  url: string,
  hello: JsonObject,
  options: OpenOptions,
): Promise<Session> {
  let target = url;
  for (let hop = 0; hop <= MAX_REDIRECTS; hop++) {
    const connection = connect(target, options);
    options.track(connection);
    try {
      await withTimeout(connection.opened, options, `${target}: no open`);
      const reply = await exchangeHello(connection, hello, options);
      if (reply["type"] === "welcome") {
        return new Session(connection, parseWelcome(reply, target), options.scheduler);
      }
      connection.close(1000);
      const next = reply["url"];
      if (typeof next !== "string" || next === "") {
        throw new TransientError("redirect without url");
      }
      target = next;
    } catch (error) {
      connection.close(1000);
      throw error;
    } finally {
      options.track(null);
    }
  }
  throw new TransientError("too many redirects");
}

function connect(url: string, options: OpenOptions): Connection {
  try {
    return new Connection(options.WebSocket, withToken(url, options.token));
  } catch (error) {
    throw new TransientError(`${url}: ${String(error)}`);
  }
}

/** Add the token as `?token=`: browsers cannot set a handshake header. */
export function withToken(url: string, token: string | null): string {
  if (token === null) return url;
  const parsed = new URL(url);
  parsed.searchParams.set("token", token);
  return parsed.toString();
}

async function withTimeout<T>(
  promise: Promise<T>,
  options: OpenOptions,
  message: string,
): Promise<T> {
  let timer: TimerHandle = null;
  const timeout = new Promise<never>((_, reject) => {
    timer = options.scheduler.setTimeout(
      () => reject(new TransientError(message)),
      options.replyTimeoutMs,
    );
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    options.scheduler.clearTimeout(timer);
  }
}

/** Send `hello` and resolve with the `welcome` or `redirect` frame. */
function exchangeHello(
  connection: Connection,
  hello: JsonObject,
  options: OpenOptions,
): Promise<JsonObject> {
  const reply = new Promise<JsonObject>((resolve, reject) => {
    connection.listen(
      (frame) => {
        const type = frame["type"];
        if (type === "welcome" || type === "redirect") {
          connection.listen(null, null); // the session takes what follows
          resolve(frame);
        } else if (type === "error") {
          const code = typeof frame["code"] === "string" ? frame["code"] : "error";
          const message = typeof frame["message"] === "string" ? frame["message"] : "";
          reject(new DurableCacheError(code, message));
        }
      },
      (code, reason) => reject(closeError(code, reason)),
    );
    if (!connection.send(hello)) reject(new TransientError("hello not sent"));
  });
  return withTimeout(reply, options, "no welcome");
}

function closeError(code: number, reason: string): Error {
  if (FATAL_CLOSE_CODES.has(code)) return fatalCloseError(code, reason);
  return new TransientError(`closed ${code}${reason ? ` ${reason}` : ""}`, code);
}
