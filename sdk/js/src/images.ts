/**
 * Applying `image` chunks (docs/protocol.md, "register_interest" and
 * "register_cq"; README.md, "Behaviour") to a region's cache or
 * a CQ's result set, in one of three modes:
 *
 * - `silent`: a registration's image; fills the cache, tells no listener.
 * - `full`: a full image taken to recover (no usable `since`): each key it
 *   changes goes to the listener as a resync event, and on `finish` the
 *   keys the selector covers but the image lacks are destroyed.
 * - `resync`: a `since` image or the server's resync after a gap: current
 *   entries, tombstones (`destroyed`) and CQ left markers (`cq_op`), each
 *   change going to the listener as a resync event. A reply that does not
 *   say `since` back came from a server that ignored it and sent a full
 *   image: `finish` then prunes as in `full`.
 */

import type { LocalCache } from "./cache.js";
import type { CqState } from "./cq.js";
import {
  asObject,
  resyncEvent,
  type CqEvent,
  type CqOp,
  type EntryEvent,
  type JsonObject,
  type JsonValue,
  type Op,
} from "./events.js";

export type ImageMode = "silent" | "full" | "resync";

/** Takes the chunks of one image, then `finish` with the reply. */
export interface ImageApplier {
  chunk(frame: JsonObject): void;
  finish(reply: JsonObject): void;
}

/** True when the image answered by `reply` held every entry, not only changes. */
function wasFull(mode: ImageMode, reply: JsonObject): boolean {
  return mode === "full" || (mode === "resync" && reply["since"] === undefined);
}

interface ImageItem {
  readonly key: string;
  readonly value: JsonValue;
  readonly version: number | null;
  /** A tombstone: the key was destroyed. */
  readonly destroyed: boolean;
  /** A CQ left marker: the key is not in the result now. */
  readonly left: boolean;
  /** From a `keys` policy chunk: the value is unknown. */
  readonly keyOnly: boolean;
}

/** The items of one chunk: `entries`, or `keys` with `destroyed` keys. */
function items(frame: JsonObject): ImageItem[] {
  const found: ImageItem[] = [];
  const entries = frame["entries"];
  for (const raw of Array.isArray(entries) ? entries : []) {
    const entry = asObject(raw);
    const key = entry?.["key"];
    if (entry === null || typeof key !== "string") continue;
    const version = entry["version"];
    found.push({
      key,
      value: entry["value"] ?? null,
      version: typeof version === "number" ? version : null,
      destroyed: entry["destroyed"] === true,
      left: entry["cq_op"] === "destroy",
      keyOnly: false,
    });
  }
  const keyLists: Array<[JsonValue | undefined, boolean]> = [
    [frame["keys"], false],
    [frame["destroyed"], true],
  ];
  for (const [list, destroyed] of keyLists) {
    for (const key of Array.isArray(list) ? list : []) {
      if (typeof key !== "string") continue;
      found.push({ key, value: null, version: null, destroyed, left: false, keyOnly: true });
    }
  }
  return found;
}

/** Apply images to `cache` of `region`; `covers` is the selector (or null). */
export function regionImage(
  region: string,
  cache: LocalCache,
  mode: ImageMode,
  covers: ((key: string) => boolean) | null,
  emit: (event: EntryEvent) => void,
): ImageApplier {
  const present = new Set<string>();
  const tell = (key: string, op: Op | null, value: JsonValue, version: number | null) => {
    if (op !== null && mode !== "silent") {
      emit(resyncEvent(region, key, op as "create" | "update" | "destroy", value, version));
    }
  };
  return {
    chunk(frame) {
      for (const item of items(frame)) {
        present.add(item.key);
        if (item.destroyed) {
          tell(item.key, cache.applyResyncDestroy(item.key, item.version), null, item.version);
        } else if (item.keyOnly) {
          if (mode === "resync" && cache.has(item.key)) {
            // Changed after `since`, value unknown: the held one is stale.
            cache.forgetValue(item.key);
            tell(item.key, "update", null, null);
          } else {
            tell(item.key, cache.applyImageKey(item.key) ? "create" : null, null, null);
          }
        } else if (item.version !== null) {
          tell(
            item.key,
            cache.applyResyncEntry(item.key, item.value, item.version),
            item.value,
            item.version,
          );
        }
      }
    },
    finish(reply) {
      if (!wasFull(mode, reply) || covers === null) return;
      for (const [key, version] of cache.pruneAbsent(present, covers)) {
        tell(key, "destroy", null, version);
      }
    },
  };
}

/** Apply images to the result set of `cq`. */
export function cqImage(
  cq: CqState,
  mode: ImageMode,
  emit: (event: CqEvent) => void,
): ImageApplier {
  const present = new Set<string>();
  const tell = (
    key: string,
    baseOp: Op,
    queryOp: CqOp,
    value: JsonValue,
    version: number | null,
  ) => {
    if (mode === "silent") return;
    const event = resyncEvent(
      cq.region,
      key,
      baseOp as "create" | "update" | "destroy",
      value,
      version,
    );
    emit({ ...event, cq: [{ name: cq.name, cqOp: queryOp }], cqName: cq.name, baseOp, queryOp });
  };
  return {
    chunk(frame) {
      for (const item of items(frame)) {
        if (item.destroyed || item.left) {
          if (cq.applyLeft(item.key, item.version)) {
            tell(item.key, item.destroyed ? "destroy" : "update", "destroy", null, item.version);
          }
        } else if (item.version !== null) {
          present.add(item.key);
          const op = cq.applyMember(item.key, item.value, item.version);
          if (op !== null) tell(item.key, op, op, item.value, item.version);
        }
      }
    },
    finish(reply) {
      if (!wasFull(mode, reply)) return;
      for (const [key, version] of cq.pruneAbsent(present)) {
        tell(key, "update", "destroy", null, version);
      }
    },
  };
}
