/**
 * What arrives on a session that answers no request: events, markers,
 * gaps, the server's resync images, unsolicited `cq_closed` and `error`.
 * Events reach the cache and the listeners in order, once (duplicate ids
 * are dropped), and are acked cumulatively every `ackInterval`.
 * docs/protocol.md, "Delivery rules"; README.md, "Behaviour".
 */

import type { CqState } from "./cq.js";
import { SeenIds } from "./dedup.js";
import { Dispatcher, chain, invoke } from "./dispatch.js";
import { DurableCacheError, ListenerError } from "./errors.js";
import {
  LISTENER_METHODS,
  cqEvent,
  parseEvent,
  parseGap,
  parseMarker,
  type CqEvent,
  type EntryEvent,
  type Gap,
  type JsonObject,
  type Marker,
} from "./events.js";
import { cqImage, regionImage } from "./images.js";
import type { DurableClientOptions, Settings } from "./options.js";
import type { Region } from "./region.js";
import type { Registry } from "./registry.js";
import type { TimerHandle } from "./scheduler.js";
import type { Session } from "./session.js";

/** What delivery asks of its client. */
export interface DeliveryHost {
  readonly registry: Registry;
  region(name: string): Region;
  knownRegion(name: string): Region | undefined;
  /** The queue overflowed: recover by key from `since`. */
  recover(session: Session, since: number): void;
  /** A CQ ended on the server's side (operator, region_destroy). */
  endCq(name: string): unknown;
}

export class Delivery {
  /** Events dropped because their id was seen within the tracking window. */
  duplicatesDropped = 0;
  /** The highest seq delivered: the `since` of a recovery. */
  lastSeq: number | null = null;
  marker: Marker | null = null;
  readonly dispatcher = new Dispatcher((error) => this.failed(error));
  private readonly seen: SeenIds;
  private markerWaiters: Array<{ resolve(marker: Marker): void; reject(error: Error): void }> = [];
  private ackTimer: TimerHandle = null;

  constructor(
    private readonly host: DeliveryHost,
    private readonly options: DurableClientOptions,
    private readonly settings: Settings,
  ) {
    this.seen = new SeenIds(settings.trackingMs, settings.scheduler);
  }

  /** Handle a frame of `session` that answers no request. */
  received(session: Session, frame: JsonObject): void {
    const type = frame["type"];
    if (type === "event") {
      const event = parseEvent(frame);
      if (event !== null) this.dispatcher.push(() => this.deliver(session, event));
    } else if (type === "marker") {
      const marker = parseMarker(frame);
      this.dispatcher.push(() => this.deliverMarker(session, marker));
    } else if (type === "gap") {
      const gap = parseGap(frame);
      if (gap !== null) this.dispatcher.push(() => this.gapped(session, gap));
    } else if (type === "image" && frame["resync"] === true) {
      this.resyncImage(frame);
    } else if (type === "cq_closed" && typeof frame["name"] === "string") {
      const name = frame["name"];
      this.dispatcher.push(() => this.host.endCq(name));
    } else if (type === "error") {
      const code = typeof frame["code"] === "string" ? frame["code"] : "error";
      const message = typeof frame["message"] === "string" ? frame["message"] : "";
      this.report(new DurableCacheError(code, message));
    }
  }

  /** Resolve with the next marker (the caller checks the current one). */
  nextMarker(): Promise<Marker> {
    return new Promise((resolve, reject) => this.markerWaiters.push({ resolve, reject }));
  }

  /** Fail every `nextMarker` waiter. */
  stop(error: Error): void {
    const waiters = this.markerWaiters;
    this.markerWaiters = [];
    for (const waiter of waiters) waiter.reject(error);
    this.settings.scheduler.clearTimeout(this.ackTimer);
  }

  // -- events ----------------------------------------------------------------------

  /** Apply one event to the cache and hand it to its listeners. */
  private deliver(session: Session, event: EntryEvent): unknown {
    if (session.finalAckSent) return undefined;
    const seq = event.seq as number;
    const delivered = () => {
      // Acked once handed over, even when a listener failed, or it would
      // come back forever.
      if (session.ackHigh === null || seq > session.ackHigh) session.ackHigh = seq;
    };
    if (this.lastSeq === null || seq > this.lastSeq) this.lastSeq = seq;
    if (this.seen.checkAndAdd(event.id as string)) {
      this.duplicatesDropped += 1;
      delivered();
      return undefined;
    }
    const result = chain(this.steps(event));
    if (result === undefined) {
      delivered();
      return undefined;
    }
    return Promise.resolve(result).then(delivered);
  }

  private steps(event: EntryEvent): Array<() => unknown> {
    const { registry } = this.host;
    const region = this.host.region(event.region);
    const steps: Array<() => unknown> = [];
    // As in Geode, a CQ's events do not touch the region's cache: an event
    // carrying `cq` does only when one of the region's interests covers it.
    if (
      event.key === null ||
      event.cq.length === 0 ||
      registry.interestCovers(region.name, event.key)
    ) {
      region.cache.applyEvent(event);
      steps.push(() => this.callListener(region, event));
    }
    for (const match of event.cq) {
      const cq = registry.cq(match.name);
      if (cq === undefined) continue;
      cq.applyEvent(event, match.cqOp);
      const data = cqEvent(event, match.name, match.cqOp);
      steps.push(() => this.callCq(cq, data));
      if (match.cqOp === "region_destroy") steps.push(() => this.host.endCq(match.name));
    }
    return steps;
  }

  private deliverMarker(session: Session, marker: Marker): unknown {
    session.marker = marker;
    this.marker = marker;
    const steps: Array<() => unknown> = marker.regions.map((name) => () => {
      const listener = this.host.knownRegion(name)?.listener ?? this.options.defaultListener;
      const live = { region: name, replayed: marker.replayed };
      return invoke(listener, listener?.afterRegionLive, live, (e) => this.listenerFailed(e));
    });
    steps.push(() => this.callback(this.options.onMarker, marker));
    steps.push(() => {
      const waiters = this.markerWaiters;
      this.markerWaiters = [];
      for (const waiter of waiters) waiter.resolve(marker);
    });
    return chain(steps);
  }

  /**
   * The queue overflowed (README.md, "Behaviour"). The server resyncs by itself after this
   * frame; every registration is also sent again with `since` (the last
   * seq delivered, else the gap's), which recovers the same keys from the
   * current entries, so nothing depends on the server's resync alone.
   */
  private gapped(session: Session, gap: Gap): unknown {
    this.host.recover(session, this.lastSeq ?? gap.since);
    return this.callback(this.options.onGap, gap);
  }

  /** An `image` the server sent on its own after a gap (`resync: true`). */
  private resyncImage(frame: JsonObject): void {
    const name = frame["cq"];
    const regionName = frame["region"];
    if (typeof name === "string") {
      const cq = this.host.registry.cq(name);
      if (cq !== undefined) cqImage(cq, "resync", (e) => this.tellCq(cq, e)).chunk(frame);
    } else if (typeof regionName === "string") {
      const region = this.host.region(regionName);
      const tell = (e: EntryEvent) => this.tellRegion(region, e);
      regionImage(region.name, region.cache, "resync", null, tell).chunk(frame);
    }
  }

  // -- listeners and callbacks ---------------------------------------------------------

  /** Queue a resync event for the region's listener. */
  tellRegion(region: Region, event: EntryEvent): void {
    this.dispatcher.push(() => this.callListener(region, event));
  }

  /** Queue a resync event for the CQ's listener. */
  tellCq(cq: CqState, event: CqEvent): void {
    this.dispatcher.push(() => this.callCq(cq, event));
  }

  /** Queue a call of `fn` (a callback of the options or a listener's). */
  later<A>(owner: object | undefined, fn: ((arg: A) => unknown) | undefined, arg: A): void {
    if (fn !== undefined)
      this.dispatcher.push(() => invoke(owner, fn, arg, (e) => this.listenerFailed(e)));
  }

  private callListener(region: Region, event: EntryEvent): unknown {
    const listener = region.listener ?? this.options.defaultListener;
    const method = listener?.[LISTENER_METHODS[event.op]] as
      ((e: EntryEvent) => unknown) | undefined;
    return invoke(listener, method, event, (e) => this.listenerFailed(e));
  }

  private callCq(cq: CqState, event: CqEvent): unknown {
    return invoke(cq.listener, cq.listener.onEvent, event, (e) => this.listenerFailed(e));
  }

  callback<A>(fn: ((arg: A) => unknown) | undefined, arg: A): unknown {
    return invoke(undefined, fn, arg, (e) => this.listenerFailed(e));
  }

  /** Hand `error` to `onError` (in order with the events). */
  report(error: Error): void {
    const onError = this.options.onError;
    if (onError !== undefined)
      this.dispatcher.push(() => invoke(undefined, onError, error, () => undefined));
  }

  /** A task failed outside any listener: a frame the client could not handle. */
  private failed(error: unknown): void {
    const onError = this.options.onError;
    const failure = new DurableCacheError("client_error", String(error), { cause: error });
    if (onError === undefined) console.error("durablecache:", error);
    else invoke(undefined, onError, failure, () => undefined);
  }

  private listenerFailed(error: unknown): void {
    if (this.options.onError === undefined)
      console.error("durablecache: a listener failed:", error);
    else this.report(new ListenerError(error));
  }

  // -- acks -----------------------------------------------------------------------------

  /** Ack `session`'s delivered events every `ackInterval` while it lives. */
  startAcks(session: Session): void {
    const { scheduler, ackIntervalMs } = this.settings;
    scheduler.clearTimeout(this.ackTimer);
    this.ackTimer = scheduler.setTimeout(() => {
      if (session.isClosed) return;
      this.flushAck(session);
      this.startAcks(session);
    }, ackIntervalMs);
  }

  /** Send `ack` with the highest seq handed over, when it advanced. */
  flushAck(session: Session): void {
    const high = session.ackHigh;
    if (high === null || (session.acked !== null && high <= session.acked)) return;
    session.acked = high;
    session.send({ type: "ack", up_to: high });
  }
}
