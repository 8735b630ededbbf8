/**
 * The client's side of one continuous query (docs/protocol.md, "register_cq → image … cq_registered"): its
 * listener and its result set as last known. The result set is kept apart
 * from the region's cache: as in Geode, CQ results and events do not touch
 * the region's local cache. Like that cache it is version-aware, and it
 * lets a resync tell "left the result" from "was never in it".
 */

import type { CacheEntry } from "./cache.js";
import type { CqListener, CqOp, EntryEvent, JsonValue } from "./events.js";

interface Known {
  readonly value: JsonValue;
  readonly version: number;
  readonly member: boolean;
}

export class CqState {
  private readonly known = new Map<string, Known>();

  constructor(
    readonly name: string,
    readonly region: string,
    public listener: CqListener,
  ) {}

  /** The entries in the result set, as last known. */
  results(): Map<string, CacheEntry> {
    const results = new Map<string, CacheEntry>();
    for (const [key, { value, version, member }] of this.known) {
      if (member) results.set(key, { value, version });
    }
    return results;
  }

  isMember(key: string): boolean {
    return this.known.get(key)?.member === true;
  }

  private isNewer(key: string, version: number | null): boolean {
    const held = this.known.get(key);
    return held === undefined || version === null || version > held.version;
  }

  /**
   * Record a member sent by an image or a resync; return its query op
   * (`create` when it entered, `update` when it changed), or null when the
   * version held is as new.
   */
  applyMember(key: string, value: JsonValue, version: number): "create" | "update" | null {
    if (!this.isNewer(key, version)) return null;
    const wasMember = this.isMember(key);
    this.known.set(key, { value, version, member: true });
    return wasMember ? "update" : "create";
  }

  /** Record that `key` is not in the result; true when it was a member. */
  applyLeft(key: string, version: number | null): boolean {
    if (!this.isNewer(key, version)) return false;
    const held = this.known.get(key);
    const wasMember = held?.member === true;
    this.known.set(key, { value: null, version: version ?? held?.version ?? 0, member: false });
    return wasMember;
  }

  /** Apply an event's `cq_op` for this CQ. */
  applyEvent(event: EntryEvent, cqOp: CqOp): void {
    if (cqOp === "region_clear" || cqOp === "region_destroy") {
      this.known.clear();
    } else if (event.key !== null && event.version !== null) {
      if (cqOp === "destroy") this.applyLeft(event.key, event.version);
      else this.applyMember(event.key, event.value, event.version);
    }
  }

  /** Mark as left the members a full image (`present`) lacks; return them. */
  pruneAbsent(present: ReadonlySet<string>): Array<[string, number]> {
    const gone: Array<[string, number]> = [];
    for (const [key, known] of this.known) {
      if (known.member && !present.has(key)) gone.push([key, known.version]);
    }
    for (const [key, version] of gone) {
      this.known.set(key, { value: null, version, member: false });
    }
    return gone;
  }
}
