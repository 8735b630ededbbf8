/** Duplicate event ids, remembered for a sliding window. */

import type { Scheduler } from "./scheduler.js";

/** Event ids delivered within the last `windowMs` on `scheduler`'s clock. */
export class SeenIds {
  // id -> time last seen; a Map iterates in insertion order, and an id
  // seen again is re-inserted, so expiry pops from the front.
  private readonly seen = new Map<string, number>();

  constructor(
    private readonly windowMs: number,
    private readonly scheduler: Scheduler,
  ) {}

  get size(): number {
    return this.seen.size;
  }

  /** Record `id`; return true when it was already seen within the window. */
  checkAndAdd(id: string): boolean {
    const now = this.scheduler.now();
    const horizon = now - this.windowMs;
    for (const [oldest, at] of this.seen) {
      if (at >= horizon) break;
      this.seen.delete(oldest);
    }
    const duplicate = this.seen.delete(id);
    this.seen.set(id, now);
    return duplicate;
  }
}
