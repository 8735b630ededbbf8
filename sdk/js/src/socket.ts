/**
 * The websocket seen by the client: the few members of the WHATWG
 * WebSocket it uses (a browser's, Node's global one, or the `ws` package's
 * class), and a Connection that turns text frames into JSON objects and
 * holds them until someone listens.
 */

import { TransientError } from "./errors.js";
import { asObject, type JsonObject } from "./events.js";

// A handler property checked like a method (bivariantly), so the DOM's and
// `ws`'s handler types, whose event types are richer, are accepted.
type Handler<E> = { bivarianceHack(event: E): void }["bivarianceHack"];

/** The members of a WebSocket that the client uses. */
export interface WebSocketLike {
  onopen: Handler<unknown> | null;
  onmessage: Handler<{ readonly data: unknown }> | null;
  onclose: Handler<{ readonly code: number; readonly reason: string }> | null;
  onerror: Handler<unknown> | null;
  send(data: string): void;
  close(code?: number, reason?: string): void;
}

/** A WebSocket class: the platform's, or `WebSocket` from the `ws` package. */
export type WebSocketConstructor = new (url: string) => WebSocketLike;

type FrameHandler = (frame: JsonObject) => void;
type CloseHandler = (code: number, reason: string) => void;

/** One websocket carrying JSON frames. */
export class Connection {
  /** Resolves when the socket opens; rejects if it closes first. */
  readonly opened: Promise<void>;
  private readonly ws: WebSocketLike;
  private onFrame: FrameHandler | null = null;
  private onClose: CloseHandler | null = null;
  private readonly held: JsonObject[] = [];
  private closeInfo: { code: number; reason: string } | null = null;

  constructor(WebSocket: WebSocketConstructor, url: string) {
    this.ws = new WebSocket(url);
    this.opened = new Promise<void>((resolve, reject) => {
      this.ws.onopen = () => resolve();
      this.ws.onclose = (event) => {
        const code = typeof event?.code === "number" ? event.code : 1006;
        const reason = typeof event?.reason === "string" ? event.reason : "";
        reject(new TransientError(`closed ${code} before opening`, code));
        this.closed(code, reason);
      };
    });
    // Awaited by the opener; a later rejection has no reader.
    this.opened.catch(() => undefined);
    // A failure is followed by a close event, which is what counts.
    this.ws.onerror = () => undefined;
    this.ws.onmessage = (event) => this.received(event?.data);
  }

  get isClosed(): boolean {
    return this.closeInfo !== null;
  }

  /**
   * Hand frames and the close to these handlers; null holds them until the
   * next call, so no frame is lost between two listeners.
   */
  listen(onFrame: FrameHandler | null, onClose: CloseHandler | null): void {
    this.onFrame = onFrame;
    this.onClose = onClose;
    while (this.onFrame !== null && this.held.length > 0) {
      this.onFrame(this.held.shift() as JsonObject);
    }
    this.closeIfDrained();
  }

  /** Send one frame; false when the socket cannot take it. */
  send(frame: JsonObject): boolean {
    if (this.closeInfo !== null) return false;
    try {
      this.ws.send(JSON.stringify(frame));
      return true;
    } catch {
      return false;
    }
  }

  close(code?: number, reason?: string): void {
    try {
      this.ws.close(code, reason);
    } catch {
      // Already closing, or a code the implementation refuses: either way
      // the close event follows or has come.
    }
  }

  private received(data: unknown): void {
    if (typeof data !== "string") return; // the protocol sends text only
    let frame: JsonObject | null;
    try {
      frame = asObject(JSON.parse(data));
    } catch {
      return;
    }
    if (frame === null) return;
    if (this.onFrame === null) this.held.push(frame);
    else this.onFrame(frame);
  }

  private closed(code: number, reason: string): void {
    if (this.closeInfo !== null) return;
    this.closeInfo = { code, reason };
    this.closeIfDrained();
  }

  /** Report the close once every frame before it was handed over. */
  private closeIfDrained(): void {
    const onClose = this.onClose;
    if (onClose === null || this.closeInfo === null || this.held.length > 0) return;
    this.onClose = null;
    onClose(this.closeInfo.code, this.closeInfo.reason);
  }
}
