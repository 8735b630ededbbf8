/** Reconnect delays: exponential backoff with jitter. */

/**
 * Return the wait before reconnect attempt `attempt` (1-based), in the
 * unit of `initial` and `cap`: the nominal delay doubles from `initial` up
 * to `cap`, and the wait is drawn between half of it and all of it, so
 * clients dropped together do not come back together.
 */
export function backoffDelay(
  attempt: number,
  initial: number,
  cap: number,
  random: () => number,
): number {
  const nominal = Math.min(cap, initial * 2 ** Math.max(0, attempt - 1));
  return nominal / 2 + random() * (nominal / 2);
}
