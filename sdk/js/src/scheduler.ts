/**
 * Time, injected: the client reads the clock and sets timers only through a
 * Scheduler, so tests drive it with a fake one instead of waiting.
 */

/** A handle returned by `Scheduler.setTimeout`. */
export type TimerHandle = unknown;

/** The clock and timers the client uses (milliseconds). */
export interface Scheduler {
  now(): number;
  setTimeout(callback: () => void, delayMs: number): TimerHandle;
  clearTimeout(handle: TimerHandle): void;
}

/** The platform's clock and timers. */
export const realScheduler: Scheduler = {
  now: () => Date.now(),
  setTimeout: (callback, delayMs) => globalThis.setTimeout(callback, delayMs),
  clearTimeout: (handle) =>
    globalThis.clearTimeout(handle as ReturnType<typeof globalThis.setTimeout>),
};

/** A wait that `cancel()` ends early; `done` resolves either way. */
export interface Sleep {
  readonly done: Promise<void>;
  cancel(): void;
}

/** Wait `delayMs` on `scheduler`. */
export function sleep(scheduler: Scheduler, delayMs: number): Sleep {
  let finish: () => void = () => undefined;
  const done = new Promise<void>((resolve) => {
    finish = resolve;
  });
  const handle = scheduler.setTimeout(finish, delayMs);
  return {
    done,
    cancel() {
      scheduler.clearTimeout(handle);
      finish();
    },
  };
}
