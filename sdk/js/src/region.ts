/**
 * A region handle: reads from the local cache of one region, and the
 * requests that register interests and CQs in it or write to it.
 */

import { LocalCache, type CacheEntry } from "./cache.js";
import type { CacheListener, CqListener, JsonValue, Policy, Written } from "./events.js";
import type { Selector } from "./registrations.js";
import type { Scheduler } from "./scheduler.js";

/** Options of `registerKeys`, `registerRegex` and `registerAllKeys`. */
export interface InterestOptions {
  /** Kept by the server while a durable client is away (default false). */
  readonly durable?: boolean;
  /** The initial image: `keys_values` (default), `keys` or `none`. */
  readonly policy?: Policy;
}

/** Options of `registerCq`. */
export interface CqOptions {
  readonly durable?: boolean;
}

/** What a region asks of its client. */
export interface RegionHost {
  registerInterest(region: Region, selector: Selector, options: InterestOptions): Promise<number>;
  unregisterInterest(region: Region, selector: Selector): Promise<void>;
  registerCq(
    region: Region,
    name: string,
    query: string,
    listener: CqListener,
    options: CqOptions,
  ): Promise<number>;
  closeCq(name: string): Promise<void>;
  cqResults(name: string): Map<string, CacheEntry> | undefined;
  put(region: Region, key: string, value: JsonValue): Promise<Written>;
}

const REGION_NAME = /^[A-Za-z0-9._:-]{1,128}$/;

function keyList(keys: string | readonly string[]): string[] {
  return typeof keys === "string" ? [keys] : [...keys];
}

/** The application's view of one server region; get it with `client.region(name)`. */
export class Region {
  readonly name: string;
  /** Receives this region's events; the client's `defaultListener` when unset. */
  listener: CacheListener | undefined;
  /** @internal */
  readonly cache: LocalCache;
  private readonly host: RegionHost;

  /** Made by `client.region(name)`; not meant to be called directly. */
  constructor(
    host: RegionHost,
    name: string,
    listener: CacheListener | undefined,
    tombstoneTtlMs: number,
    scheduler: Scheduler,
  ) {
    if (!REGION_NAME.test(name)) throw new TypeError(`invalid region name: ${name}`);
    this.host = host;
    this.name = name;
    this.listener = listener;
    this.cache = new LocalCache(tombstoneTtlMs, scheduler);
  }

  // -- the local cache ------------------------------------------------------

  /** The cached value of `key` (null once invalidated), or undefined. */
  get(key: string): JsonValue | undefined {
    return this.cache.get(key)?.value;
  }

  /** The cached value and version of `key`, or undefined. */
  getEntry(key: string): CacheEntry | undefined {
    return this.cache.get(key);
  }

  /** The newest version known for `key`, destroyed keys included. */
  versionOf(key: string): number | undefined {
    return this.cache.versionOf(key);
  }

  has(key: string): boolean {
    return this.cache.has(key);
  }

  keys(): string[] {
    return this.cache.keys();
  }

  /** A copy of the cache. */
  entries(): Map<string, CacheEntry> {
    return this.cache.snapshot();
  }

  get size(): number {
    return this.cache.size;
  }

  // -- interests --------------------------------------------------------------

  /** Register interest in a list of keys; resolve with the image count. */
  registerKeys(keys: string | readonly string[], options: InterestOptions = {}): Promise<number> {
    return this.host.registerInterest(this, { keys: keyList(keys) }, options);
  }

  /** Register interest in the keys that `pattern` (RE2) matches whole. */
  registerRegex(pattern: string, options: InterestOptions = {}): Promise<number> {
    return this.host.registerInterest(this, { regex: pattern }, options);
  }

  /** Register interest in every key of the region. */
  registerAllKeys(options: InterestOptions = {}): Promise<number> {
    return this.host.registerInterest(this, { all_keys: true }, options);
  }

  unregisterKeys(keys: string | readonly string[]): Promise<void> {
    return this.host.unregisterInterest(this, { keys: keyList(keys) });
  }

  unregisterRegex(pattern: string): Promise<void> {
    return this.host.unregisterInterest(this, { regex: pattern });
  }

  unregisterAllKeys(): Promise<void> {
    return this.host.unregisterInterest(this, { all_keys: true });
  }

  // -- continuous queries ------------------------------------------------------

  /**
   * Register the continuous query `name` on this region; resolve with the
   * number of entries in its initial result (see `cqResults`). The
   * listener may carry the options too: `registerCq(name, query,
   * {durable: true, onEvent})`.
   */
  registerCq(
    name: string,
    query: string,
    listener: CqListener & CqOptions,
    options: CqOptions = {},
  ): Promise<number> {
    const durable = options.durable ?? listener.durable;
    return this.host.registerCq(this, name, query, listener, { durable });
  }

  closeCq(name: string): Promise<void> {
    return this.host.closeCq(name);
  }

  /** The result set of the CQ `name` as last known, or undefined. */
  cqResults(name: string): Map<string, CacheEntry> | undefined {
    return this.host.cqResults(name);
  }

  // -- writes -------------------------------------------------------------------

  /**
   * Create or update `key` through the client's socket (the `put` frame);
   * resolve once the event is durable. The cache changes when the event
   * comes back, like any other (register interest in the key to see it).
   * A put whose reply was lost with its socket is sent again on the next
   * one, so it may be applied twice: two events, the same value.
   */
  put(key: string, value: JsonValue): Promise<Written> {
    return this.host.put(this, key, value);
  }
}
