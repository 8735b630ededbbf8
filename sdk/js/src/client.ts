/**
 * The durable client: one session kept alive across drops (backoff across
 * the urls, redirects followed), registrations restored on every new
 * socket, requests that wait through reconnects, and `close`.
 * Protocol: docs/protocol.md; client behaviour: README.md, "Behaviour".
 */

import { backoffDelay } from "./backoff.js";
import type { CqState } from "./cq.js";
import { deferred } from "./deferred.js";
import { Delivery, type DeliveryHost } from "./delivery.js";
import {
  AlreadyConnectedError,
  ClientClosedError,
  CONFLICT_CLOSE_CODE,
  ConnectFailedError,
  DurableCacheError,
  FATAL_CLOSE_CODES,
  RequestTimeoutError,
  SessionLostError,
  TransientError,
  fatalCloseError,
} from "./errors.js";
import {
  parseWritten,
  type CacheListener,
  type CqEvent,
  type EntryEvent,
  type JsonObject,
  type Marker,
  type Welcome,
} from "./events.js";
import { settingsFrom, type DurableClientOptions, type Settings } from "./options.js";
import { Region, type RegionHost } from "./region.js";
import { Registry, type RegistryHost } from "./registry.js";
import { Requests } from "./requests.js";
import { sleep, type Sleep } from "./scheduler.js";
import { openSession, type Session } from "./session.js";
import type { Connection } from "./socket.js";

/** A durable (or non-durable) subscriber to a durablecache cluster. */
export class DurableClient {
  private readonly settings: Settings;
  private readonly options: DurableClientOptions;
  private readonly regions = new Map<string, Region>();
  private readonly requests: Requests;
  private readonly registry: Registry;
  private readonly delivery: Delivery;
  private readonly host: RegionHost;
  private readonly first = deferred<Welcome>();
  private readonly stopped = deferred<void>();
  private session: Session | null = null;
  private currentWelcome: Welcome | null = null;
  private started = false;
  private firstDone = false;
  private closing = false;
  private fatal: Error | null = null;
  private readyRequested = false;
  private urlIndex = 0;
  private reconnectCount = 0;
  private backoff: Sleep | null = null;
  private attempt: Connection | null = null;

  constructor(options: DurableClientOptions) {
    this.options = options;
    this.settings = settingsFrom(options);
    this.requests = new Requests(this.settings, () => this.checkStarted());
    this.registry = new Registry(this.registryHost(), this.requests);
    this.delivery = new Delivery(this.deliveryHost(), options, this.settings);
    this.host = this.regionHost();
  }

  // -- state -------------------------------------------------------------------

  /** The welcome of the current (or last) session. */
  get welcome(): Welcome | null {
    return this.currentWelcome;
  }

  /** The last `marker` received, in any session. */
  get lastMarker(): Marker | null {
    return this.delivery.marker;
  }

  /** True while a session is up and its registrations are restored. */
  get connected(): boolean {
    return this.requests.session !== null;
  }

  /** True once `close()` was called or a fatal error stopped the client. */
  get closed(): boolean {
    return this.closing || this.fatal !== null;
  }

  /** Events dropped because their id was seen within the tracking window. */
  get duplicatesDropped(): number {
    return this.delivery.duplicatesDropped;
  }

  /** Sessions opened after the first one. */
  get reconnects(): number {
    return this.reconnectCount;
  }

  // -- public API ----------------------------------------------------------------

  /**
   * Connect, say `hello`, and resolve with the welcome. Tries the urls in
   * turn with backoff until one answers or `connectTimeout` passes
   * (ConnectFailedError); a fatal close rejects with its error class.
   * Called again, it resolves with the current welcome.
   */
  connect(): Promise<Welcome> {
    if (this.closed) return Promise.reject(this.fatal ?? new ClientClosedError());
    if (!this.started) {
      this.started = true;
      void this.run();
    }
    if (this.firstDone && this.currentWelcome !== null) return Promise.resolve(this.currentWelcome);
    return this.first.promise;
  }

  /** The handle of region `name`; a listener given here replaces the old one. */
  region(name: string, listener?: CacheListener): Region {
    let region = this.regions.get(name);
    if (region === undefined) {
      const { trackingMs, scheduler } = this.settings;
      region = new Region(this.host, name, listener, trackingMs, scheduler);
      this.regions.set(name, region);
    } else if (listener !== undefined) {
      region.listener = listener;
    }
    return region;
  }

  /**
   * Send `ready`: replayed events, the marker, then live events follow.
   * Remembered: every later session sends `ready` again.
   */
  async readyForEvents(): Promise<void> {
    this.checkStarted();
    this.readyRequested = true;
    this.sendReady(await this.requests.waitSession(this.requests.deadline()));
  }

  /** Resolve with the `marker` of the current session once it came. */
  async waitForMarker(): Promise<Marker> {
    this.checkStarted();
    const session = this.session;
    if (session?.marker && !session.isClosed) return session.marker;
    return this.delivery.nextMarker();
  }

  /** Close the continuous query `name`, on whichever region it is. */
  async closeCq(name: string): Promise<void> {
    await this.requests.send({ type: "close_cq", name });
    await this.endCq(name);
  }

  /** Resolve when the client stops; reject with the error that stopped it. */
  async waitClosed(): Promise<void> {
    await this.stopped.promise;
    if (this.fatal !== null) throw this.fatal;
  }

  /**
   * Send `close`, wait for `closed`, and stop reconnecting. With
   * `keepalive` the server keeps a durable client's queue and durable
   * registrations for `timeout` seconds. Events already received reach the
   * listeners and are acked first; events arriving after that final ack
   * are not delivered (a kept queue gives them to the next session). With
   * no socket open at that moment the server is not told.
   */
  async close(options: { keepalive?: boolean } = {}): Promise<void> {
    if (this.closing) return this.stopped.promise;
    this.closing = true;
    this.backoff?.cancel();
    this.attempt?.close(1000);
    const session = this.session;
    const { closeTimeoutMs } = this.settings;
    if (session !== null && !session.isClosed) {
      const { dispatcher } = this.delivery;
      // Called from a listener, the dispatcher cannot become idle first.
      if (!dispatcher.inTask) await this.within(dispatcher.whenIdle(), closeTimeoutMs);
      this.delivery.flushAck(session);
      session.finalAckSent = true;
      const frame = { type: "close", keepalive: options.keepalive === true };
      await session.request(frame, this.requests.id(), closeTimeoutMs).catch(() => undefined);
      session.close(1000);
      await this.within(session.closed, closeTimeoutMs);
    }
    this.stop();
  }

  // -- the connection supervisor -----------------------------------------------------

  /**
   * Keep one session alive until close() or a fatal error:
   * 1. open a session (hello, redirects) on the next url, after a backoff;
   * 2. restore the registrations and `ready`;
   * 3. wait for the socket to end and judge its close code;
   * 4. go to 1, unless closing or fatal.
   */
  private async run(): Promise<void> {
    const { scheduler, connectTimeoutMs, conflictRetries } = this.settings;
    const started = scheduler.now();
    let attempt = 0;
    let conflicts = 0;
    try {
      while (!this.closing) {
        if (attempt > 0) await this.pause(attempt, conflicts > 0);
        if (this.closing) break;
        let session: Session;
        try {
          session = await this.open();
        } catch (error) {
          if (!(error instanceof TransientError)) throw error;
          attempt += 1;
          if (error.closeCode === CONFLICT_CLOSE_CODE && ++conflicts > conflictRetries) {
            throw new AlreadyConnectedError(CONFLICT_CLOSE_CODE, error.message);
          }
          const late = connectTimeoutMs !== null && scheduler.now() - started >= connectTimeoutMs;
          if (!this.firstDone && late) throw new ConnectFailedError(error.message);
          continue;
        }
        if (this.closing) {
          session.close(1000);
          break;
        }
        session.isReconnect = this.firstDone;
        if (await this.startSession(session)) {
          attempt = 0;
          conflicts = 0;
          this.sessionStarted(session);
        }
        await session.closed;
        this.requests.setSession(null);
        if (this.closing) break;
        const code = session.closeCode ?? 1006;
        if (FATAL_CLOSE_CODES.has(code)) throw fatalCloseError(code, session.closeReason);
        attempt = Math.max(attempt, 1);
      }
    } catch (error) {
      this.fail(error instanceof Error ? error : new DurableCacheError("internal", String(error)));
    } finally {
      this.stop();
    }
  }

  private open(): Promise<Session> {
    const { durableId, timeout, redundancy, conflate, maxQueued, urls } = this.settings;
    const hello: JsonObject = {
      type: "hello",
      durable_id: durableId,
      timeout,
      redundancy,
      conflate,
    };
    if (maxQueued !== null) hello["max_queued"] = maxQueued;
    const url = urls[this.urlIndex++ % urls.length] as string;
    return openSession(url, hello, {
      WebSocket: this.settings.WebSocket,
      token: this.settings.token,
      scheduler: this.settings.scheduler,
      replyTimeoutMs: this.settings.requestTimeoutMs,
      track: (connection) => {
        this.attempt = connection;
      },
    });
  }

  private async pause(attempt: number, conflict: boolean): Promise<void> {
    const { initialDelayMs, maxDelayMs, conflictDelayMs, random, scheduler } = this.settings;
    let delay = backoffDelay(attempt, initialDelayMs, maxDelayMs, random);
    // 4409: the old socket's node is not taken for dead yet; ask again soon.
    if (conflict) delay = Math.min(delay, conflictDelayMs);
    this.backoff = sleep(scheduler, delay);
    await this.backoff.done;
    this.backoff = null;
  }

  /** Restore registrations and `ready`; false when the socket went meanwhile. */
  private async startSession(session: Session): Promise<boolean> {
    this.session = session;
    this.currentWelcome = session.welcome;
    session.onFrame = (frame) => this.delivery.received(session, frame);
    try {
      await this.registry.restore(session, this.delivery.lastSeq);
      if (this.readyRequested) this.sendReady(session);
    } catch (error) {
      if (!(error instanceof SessionLostError || error instanceof RequestTimeoutError)) throw error;
      session.close(1000);
      return false;
    }
    if (session.isClosed) return false;
    this.delivery.startAcks(session);
    this.requests.setSession(session);
    return true;
  }

  private sessionStarted(session: Session): void {
    if (this.firstDone) {
      this.reconnectCount += 1;
      this.delivery.later(undefined, this.options.onReconnect, session.welcome);
    } else {
      this.firstDone = true;
      this.first.resolve(session.welcome);
    }
  }

  private sendReady(session: Session): void {
    if (session.readySent) return;
    session.readySent = true;
    session.send({ type: "ready" });
  }

  /** Forget the CQ `name` and tell its listener (closed here or by the server). */
  private endCq(name: string): unknown {
    const cq = this.registry.endCq(name);
    return cq === undefined
      ? undefined
      : this.delivery.callback(cq.listener.onClose?.bind(cq.listener), undefined);
  }

  private regionHost(): RegionHost {
    const { registry, requests } = this;
    return {
      registerInterest: (region, selector, options) =>
        registry.registerInterest(region.name, selector, options),
      unregisterInterest: (region, selector) => registry.unregisterInterest(region.name, selector),
      registerCq: (region, name, query, listener, options) =>
        registry.registerCq(region.name, name, query, listener, options),
      closeCq: (name) => this.closeCq(name),
      cqResults: (name) => registry.cq(name)?.results(),
      put: async (region, key, value) =>
        parseWritten(await requests.send({ type: "put", region: region.name, key, value })),
    };
  }

  private registryHost(): RegistryHost {
    return {
      region: (name) => this.region(name),
      tellRegion: (region: Region, event: EntryEvent) => this.delivery.tellRegion(region, event),
      tellCq: (cq: CqState, event: CqEvent) => this.delivery.tellCq(cq, event),
      failed: (_registration, cq, error) => {
        if (cq?.listener.onError !== undefined)
          this.delivery.later(cq.listener, cq.listener.onError, error);
        else this.delivery.report(error);
      },
    };
  }

  private deliveryHost(): DeliveryHost {
    return {
      registry: this.registry,
      region: (name) => this.region(name),
      knownRegion: (name) => this.regions.get(name),
      recover: (session, since) => this.registry.recoverAll(session, since),
      endCq: (name) => this.endCq(name),
    };
  }

  // -- ending ------------------------------------------------------------------------------

  private fail(error: Error): void {
    this.fatal = this.closing && !this.firstDone ? new ClientClosedError() : error;
    if (!this.firstDone) {
      this.firstDone = true;
      this.first.reject(this.fatal);
    } else {
      this.delivery.later(undefined, this.options.onFatal, this.fatal);
    }
  }

  private stop(): void {
    const error = this.fatal ?? new ClientClosedError();
    if (!this.firstDone) {
      this.firstDone = true;
      this.first.reject(error);
    }
    this.requests.stop(error);
    this.delivery.stop(error);
    this.stopped.resolve();
  }

  private async within(promise: Promise<unknown>, ms: number): Promise<void> {
    const wait = sleep(this.settings.scheduler, ms);
    await Promise.race([promise, wait.done]);
    wait.cancel();
  }

  private checkOpen(): void {
    if (this.fatal !== null) throw this.fatal;
    if (this.closing) throw new ClientClosedError();
  }

  private checkStarted(): void {
    this.checkOpen();
    if (!this.started) throw new DurableCacheError("not_connected", "call connect() first");
  }
}
