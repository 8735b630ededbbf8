/**
 * Application requests: sent on the live session with an `id`, matched to
 * their reply, and sent again on the next session when the socket carrying
 * them goes first, all within `requestTimeout`. docs/protocol.md,
 * "Client → server frames".
 */

import { deferred, type Deferred } from "./deferred.js";
import { RequestTimeoutError, SessionLostError } from "./errors.js";
import type { JsonObject } from "./events.js";
import type { ImageApplier } from "./images.js";
import type { Settings } from "./options.js";
import type { Session } from "./session.js";

export class Requests {
  private live: Session | null = null;
  private waiters: Array<Deferred<Session>> = [];
  private nextId = 1;

  /** `check` throws when the client cannot take requests (closed, not started). */
  constructor(
    private readonly settings: Settings,
    private readonly check: () => void,
  ) {}

  /** The session requests go to: up, with its registrations restored. */
  get session(): Session | null {
    return this.live !== null && !this.live.isClosed ? this.live : null;
  }

  /** Let requests through on `session`, or hold them (null) until the next one. */
  setSession(session: Session | null): void {
    this.live = session;
    if (session === null) return;
    const waiters = this.waiters;
    this.waiters = [];
    for (const waiter of waiters) waiter.resolve(session);
  }

  /** Fail every request waiting for a session. */
  stop(error: Error): void {
    this.live = null;
    const waiters = this.waiters;
    this.waiters = [];
    for (const waiter of waiters) waiter.reject(error);
  }

  /** A fresh request id. */
  id(): string {
    return `r${this.nextId++}`;
  }

  /** The time a request made now must be answered by. */
  deadline(): number {
    return this.settings.scheduler.now() + this.settings.requestTimeoutMs;
  }

  /** Send `frame` on `session` (no retry); `onImage` gets its image chunks. */
  on(
    session: Session,
    frame: JsonObject,
    onImage?: (frame: JsonObject) => void,
  ): Promise<JsonObject> {
    return session.request(frame, this.id(), this.settings.requestTimeoutMs, onImage);
  }

  /**
   * Send `frame` on the live session and resolve with its reply; sent
   * again on the next session when the socket goes first. `image` makes
   * the applier of each attempt's image chunks.
   */
  async send(frame: JsonObject, image?: () => ImageApplier): Promise<JsonObject> {
    this.check();
    const deadline = this.deadline();
    for (;;) {
      const session = await this.waitSession(deadline);
      const applier = image?.();
      const left = Math.max(0, deadline - this.settings.scheduler.now());
      try {
        const reply = await session.request(frame, this.id(), left, applier?.chunk);
        applier?.finish(reply);
        return reply;
      } catch (error) {
        if (!(error instanceof SessionLostError)) throw error;
        await session.closed;
        this.check();
      }
    }
  }

  /** Resolve with the live session, waiting through a reconnect if needed. */
  waitSession(deadline: number): Promise<Session> {
    this.check();
    const session = this.session;
    if (session !== null) return Promise.resolve(session);
    const waiter = deferred<Session>();
    this.waiters.push(waiter);
    const { scheduler } = this.settings;
    const timer = scheduler.setTimeout(
      () => waiter.reject(new RequestTimeoutError("no session within requestTimeout")),
      Math.max(0, deadline - scheduler.now()),
    );
    return waiter.promise.finally(() => {
      scheduler.clearTimeout(timer);
      this.waiters = this.waiters.filter((w) => w !== waiter);
    });
  }
}
