/**
 * The version-aware local copy of one region (README.md, "Behaviour"): an image entry,
 * an event or a resync entry changes it only when its `version` is newer
 * than the version held for the key, so a replayed old update never
 * overwrites a current value. A destroyed key keeps a tombstone with its
 * version for `tombstoneTtlMs`, so an older replay cannot bring it back.
 */

import type { EntryEvent, JsonValue } from "./events.js";
import type { Scheduler } from "./scheduler.js";

/** A cached value and the version it came with. */
export interface CacheEntry {
  readonly value: JsonValue;
  readonly version: number;
}

/** What a resync did to a key: the op handed to the listener, or null. */
export type ResyncChange = "create" | "update" | "destroy" | null;

export class LocalCache {
  private readonly entries = new Map<string, CacheEntry>();
  // key -> [version, time of the destroy]; insertion order is time order.
  private readonly tombstones = new Map<string, [number, number]>();

  constructor(
    private readonly tombstoneTtlMs: number,
    private readonly scheduler: Scheduler,
  ) {}

  get size(): number {
    return this.entries.size;
  }

  get(key: string): CacheEntry | undefined {
    return this.entries.get(key);
  }

  has(key: string): boolean {
    return this.entries.has(key);
  }

  keys(): string[] {
    return [...this.entries.keys()];
  }

  snapshot(): Map<string, CacheEntry> {
    return new Map(this.entries);
  }

  /** The newest version known for `key`, destroyed keys included. */
  versionOf(key: string): number | undefined {
    return this.entries.get(key)?.version ?? this.tombstones.get(key)?.[0];
  }

  private isNewer(key: string, version: number | null): boolean {
    const held = this.versionOf(key);
    return held === undefined || version === null || version > held;
  }

  private store(key: string, value: JsonValue, version: number): void {
    this.tombstones.delete(key);
    this.entries.set(key, { value, version });
  }

  /** Store an image entry unless a newer version is held; true if stored. */
  applyImageEntry(key: string, value: JsonValue, version: number): boolean {
    if (!this.isNewer(key, version)) return false;
    this.store(key, value, version);
    return true;
  }

  /**
   * Record a key sent by a `keys` policy image. Its value is unknown (null)
   * and its version too: the placeholder takes the tombstone's version, or
   * 0, so any event with a real version replaces it.
   */
  applyImageKey(key: string): boolean {
    if (this.entries.has(key)) return false;
    this.store(key, null, this.tombstones.get(key)?.[0] ?? 0);
    return true;
  }

  /** Keep `key` with its version but an unknown (null) value. */
  forgetValue(key: string): void {
    const entry = this.entries.get(key);
    if (entry !== undefined) this.entries.set(key, { value: null, version: entry.version });
  }

  /** Apply one event under the version rule; true if the cache changed. */
  applyEvent(event: EntryEvent): boolean {
    if (event.op === "region_clear" || event.op === "region_destroy") {
      // Versions are forgotten too: the contract does not say whether
      // versions continue after a clear, and a stale tombstone must never
      // hide a genuinely new entry.
      this.clear();
      return true;
    }
    const key = event.key;
    if (key === null || !this.isNewer(key, event.version)) return false;
    const version = event.version ?? 0;
    if (event.op === "destroy") {
      this.remove(key, version);
    } else {
      this.store(key, event.op === "invalidate" ? null : event.value, version);
    }
    return true;
  }

  /** Apply a resync's current entry; return the change it made. */
  applyResyncEntry(key: string, value: JsonValue, version: number): ResyncChange {
    const existed = this.entries.has(key);
    if (!this.applyImageEntry(key, value, version)) return null;
    return existed ? "update" : "create";
  }

  /**
   * Apply a resync's tombstone (version null: a `keys` policy tombstone);
   * return "destroy" when a cached entry went.
   */
  applyResyncDestroy(key: string, version: number | null): ResyncChange {
    if (!this.isNewer(key, version)) return null;
    const existed = this.entries.has(key);
    this.remove(key, version ?? this.versionOf(key) ?? 0);
    return existed ? "destroy" : null;
  }

  /**
   * Destroy the cached keys that `covers` but a full image (`present`)
   * lacks; return them with their last versions.
   */
  pruneAbsent(
    present: ReadonlySet<string>,
    covers: (key: string) => boolean,
  ): Array<[string, number]> {
    const gone: Array<[string, number]> = [];
    for (const [key, entry] of this.entries) {
      if (!present.has(key) && covers(key)) gone.push([key, entry.version]);
    }
    for (const [key, version] of gone) this.remove(key, version);
    return gone;
  }

  clear(): void {
    this.entries.clear();
    this.tombstones.clear();
  }

  private remove(key: string, version: number): void {
    this.entries.delete(key);
    const now = this.scheduler.now();
    this.tombstones.delete(key);
    this.tombstones.set(key, [version, now]);
    const horizon = now - this.tombstoneTtlMs;
    for (const [oldest, [, at]] of this.tombstones) {
      if (at >= horizon) break;
      this.tombstones.delete(oldest);
    }
  }
}
