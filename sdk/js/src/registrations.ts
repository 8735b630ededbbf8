/**
 * What the application registered, kept to be sent again on every new
 * socket (registering is idempotent on the server, docs/protocol.md,
 * "register_interest → image … interest_registered").
 */

import type { JsonObject, Policy } from "./events.js";

/** The selector of an interest, as the frame names it. */
export type Selector =
  { readonly keys: string[] } | { readonly regex: string } | { readonly all_keys: true };

/** One interest or CQ; `frame` is the request as first sent, without `id`. */
export interface Registration {
  readonly kind: "interest" | "cq";
  readonly region: string;
  readonly frame: JsonObject;
  readonly durable: boolean;
  readonly policy: Policy;
}

/** Identify an interest by region and selector (a key list as a set). */
export function interestKey(region: string, selector: Selector): string {
  if ("keys" in selector) {
    const keys = [...new Set(selector.keys)].sort();
    return JSON.stringify(["interest", region, "keys", keys]);
  }
  if ("regex" in selector) return JSON.stringify(["interest", region, "regex", selector.regex]);
  return JSON.stringify(["interest", region, "all_keys"]);
}

/** Identify a CQ: its name is unique per client. */
export function cqKey(name: string): string {
  return JSON.stringify(["cq", name]);
}

/**
 * Return a local predicate for an interest frame's selector, or null when
 * the pattern uses syntax that only the server's RE2 knows: the client then
 * does not guess.
 */
export function selectorMatcher(frame: JsonObject): ((key: string) => boolean) | null {
  const keys = frame["keys"];
  if (Array.isArray(keys)) {
    const set = new Set(keys);
    return (key) => set.has(key);
  }
  const regex = frame["regex"];
  if (typeof regex === "string") {
    try {
      const pattern = new RegExp(`^(?:${regex})$`, "u");
      return (key) => pattern.test(key);
    } catch {
      return null;
    }
  }
  return frame["all_keys"] === true ? () => true : null;
}
