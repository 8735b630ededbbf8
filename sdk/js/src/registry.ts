/**
 * The interests and CQs the application registered, sent again on every
 * new socket (idempotent on the server), and the key-aware recovery of
 * README.md, "Behaviour": registering again with `since`, or with a full image
 * when `since` is unknown or too old.
 */

import { CqState } from "./cq.js";
import { DurableCacheError, RequestTimeoutError, SessionLostError } from "./errors.js";
import type { CqEvent, CqListener, EntryEvent, JsonObject } from "./events.js";
import { cqImage, regionImage, type ImageApplier, type ImageMode } from "./images.js";
import type { CqOptions, InterestOptions, Region } from "./region.js";
import {
  cqKey,
  interestKey,
  selectorMatcher,
  type Registration,
  type Selector,
} from "./registrations.js";
import type { Requests } from "./requests.js";
import type { Session } from "./session.js";

/** What the registry asks of its client. */
export interface RegistryHost {
  region(name: string): Region;
  tellRegion(region: Region, event: EntryEvent): void;
  tellCq(cq: CqState, event: CqEvent): void;
  /** A registration sent again was refused. */
  failed(registration: Registration, cq: CqState | undefined, error: Error): void;
}

const POLICIES: ReadonlySet<string> = new Set(["keys_values", "keys", "none"]);

function count(reply: JsonObject): number {
  return typeof reply["count"] === "number" ? reply["count"] : 0;
}

export class Registry {
  // Insertion order is registration order, the order they are sent again.
  private readonly registrations = new Map<string, Registration>();
  private readonly cqs = new Map<string, CqState>();
  private readonly matchers = new Map<Registration, ((key: string) => boolean) | null>();

  constructor(
    private readonly host: RegistryHost,
    private readonly requests: Requests,
  ) {}

  // -- the application's requests ------------------------------------------------

  /** Register an interest; resolve with the image count. */
  async registerInterest(
    region: string,
    selector: Selector,
    options: InterestOptions,
  ): Promise<number> {
    const durable = options.durable === true;
    const policy = options.policy ?? "keys_values";
    if (!POLICIES.has(policy)) throw new TypeError(`invalid policy: ${policy}`);
    const frame: JsonObject = { type: "register_interest", region, ...selector, durable, policy };
    const registration: Registration = { kind: "interest", region, frame, durable, policy };
    const reply = await this.requests.send(frame, () => this.imageFor(registration, "silent"));
    this.add(interestKey(region, selector), registration);
    return count(reply);
  }

  async unregisterInterest(region: string, selector: Selector): Promise<void> {
    try {
      await this.requests.send({ type: "unregister_interest", region, ...selector });
    } finally {
      this.registrations.delete(interestKey(region, selector));
    }
  }

  /** Register a CQ; resolve with the count of its initial result. */
  async registerCq(
    region: string,
    name: string,
    query: string,
    listener: CqListener,
    options: CqOptions,
  ): Promise<number> {
    const durable = options.durable === true;
    const frame: JsonObject = { type: "register_cq", name, region, query, durable };
    const registration: Registration = {
      kind: "cq",
      region,
      frame,
      durable,
      policy: "keys_values",
    };
    const held = this.cqs.get(name);
    const cq = held?.region === region ? held : new CqState(name, region, listener);
    cq.listener = listener;
    const reply = await this.requests.send(frame, () => this.imageFor(registration, "silent", cq));
    this.cqs.set(name, cq);
    this.add(cqKey(name), registration);
    return count(reply);
  }

  // -- what is registered -----------------------------------------------------------

  /** Record `registration`; one made again keeps its place in the order. */
  private add(key: string, registration: Registration): void {
    this.registrations.set(key, registration);
  }

  cq(name: string): CqState | undefined {
    return this.cqs.get(name);
  }

  /** Forget the CQ `name`; return its state if it was held. */
  endCq(name: string): CqState | undefined {
    const cq = this.cqs.get(name);
    this.cqs.delete(name);
    this.registrations.delete(cqKey(name));
    return cq;
  }

  /**
   * True when an interest of `region` covers `key`. A pattern only RE2
   * understands counts as covering: the client does not guess.
   */
  interestCovers(region: string, key: string): boolean {
    for (const registration of this.registrations.values()) {
      if (registration.kind !== "interest" || registration.region !== region) continue;
      const covers = this.matcher(registration);
      if (covers === null || covers(key)) return true;
    }
    return false;
  }

  private matcher(registration: Registration): ((key: string) => boolean) | null {
    if (!this.matchers.has(registration)) {
      this.matchers.set(registration, selectorMatcher(registration.frame));
    }
    return this.matchers.get(registration) ?? null;
  }

  /** The applier of `registration`'s image chunks in `mode`. */
  private imageFor(registration: Registration, mode: ImageMode, cq?: CqState): ImageApplier {
    const target =
      cq ??
      (registration.kind === "cq" ? this.cqs.get(String(registration.frame["name"])) : undefined);
    if (target !== undefined)
      return cqImage(target, mode, (event) => this.host.tellCq(target, event));
    const region = this.host.region(registration.region);
    const covers = this.matcher(registration);
    return regionImage(region.name, region.cache, mode, covers, (event) =>
      this.host.tellRegion(region, event),
    );
  }

  /**
   * Send every registration on a new `session`, in the order first made.
   * When no replay covers the time away (the queue is new or lost, or the
   * registration is not durable, so the server dropped it meanwhile) the
   * registration recovers by key from `since` instead.
   */
  async restore(session: Session, since: number | null): Promise<void> {
    const lostQueue = session.welcome.pendingEvents < 0;
    for (const registration of [...this.registrations.values()]) {
      const recover =
        session.isReconnect &&
        registration.policy !== "none" &&
        (lostQueue || !registration.durable);
      try {
        if (recover) await this.recover(session, registration, since);
        else await this.register(session, registration, "silent");
      } catch (error) {
        if (error instanceof SessionLostError || error instanceof RequestTimeoutError) throw error;
        this.failed(registration, error);
      }
    }
  }

  /** Recover every registration from `since` (after a gap), without waiting. */
  recoverAll(session: Session, since: number): void {
    for (const registration of [...this.registrations.values()]) {
      if (registration.policy === "none") continue;
      this.recover(session, registration, since).catch((error: unknown) => {
        if (!(error instanceof SessionLostError)) this.failed(registration, error);
      });
    }
  }

  /** Register with `since`; with a full image when it is unknown or too old. */
  private async recover(
    session: Session,
    registration: Registration,
    since: number | null,
  ): Promise<void> {
    if (since !== null) {
      try {
        await this.register(session, registration, "resync", since);
        return;
      } catch (error) {
        if (!(error instanceof DurableCacheError && error.code === "since_too_old")) throw error;
      }
    }
    await this.register(session, registration, "full");
  }

  private async register(
    session: Session,
    registration: Registration,
    mode: ImageMode,
    since?: number,
  ): Promise<void> {
    const frame = since === undefined ? registration.frame : { ...registration.frame, since };
    const applier = this.imageFor(registration, mode);
    applier.finish(await this.requests.on(session, frame, applier.chunk));
  }

  private failed(registration: Registration, error: unknown): void {
    const failure = error instanceof Error ? error : new DurableCacheError("error", String(error));
    const cq =
      registration.kind === "cq" ? this.cqs.get(String(registration.frame["name"])) : undefined;
    this.host.failed(registration, cq, failure);
  }
}
