/**
 * Ordered delivery to listeners: one task at a time, in arrival order. A
 * listener that returns a promise holds the next task until it settles;
 * synchronous listeners run at once, without a detour through the
 * microtask queue. The socket reader never waits for a listener, so a
 * listener may await client requests whose replies that reader carries.
 */

type Task = () => unknown;

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return (
    (typeof value === "object" || typeof value === "function") &&
    value !== null &&
    typeof (value as { then?: unknown }).then === "function"
  );
}

/** Run `steps` in order; a promise when one of them returned one. */
export function chain(steps: readonly Task[]): unknown {
  for (let i = 0; i < steps.length; i++) {
    const result = (steps[i] as Task)();
    if (isThenable(result)) {
      return Promise.resolve(result).then(() => chain(steps.slice(i + 1)));
    }
  }
  return undefined;
}

/**
 * Call `fn` on `owner` with `arg`, reporting a throw or a rejection to
 * `onError`; the result is a promise (that never rejects) or undefined.
 */
export function invoke<A>(
  owner: object | undefined,
  fn: ((arg: A) => unknown) | undefined,
  arg: A,
  onError: (error: unknown) => void,
): unknown {
  if (fn === undefined) return undefined;
  try {
    const result = fn.call(owner, arg);
    return isThenable(result) ? Promise.resolve(result).then(undefined, onError) : undefined;
  } catch (error) {
    onError(error);
    return undefined;
  }
}

export class Dispatcher {
  private readonly tasks: Task[] = [];
  private running = false;
  private synchronous = false;
  private idle: Array<() => void> = [];

  /** `onError` gets what a task threw. */
  constructor(private readonly onError: (error: unknown) => void) {}

  /** True while a task runs its synchronous part (a listener is on the stack). */
  get inTask(): boolean {
    return this.synchronous;
  }

  push(task: Task): void {
    this.tasks.push(task);
    if (!this.running) void this.drain();
  }

  /** Resolve once every task pushed so far has run. */
  whenIdle(): Promise<void> {
    if (!this.running && this.tasks.length === 0) return Promise.resolve();
    return new Promise((resolve) => this.idle.push(resolve));
  }

  private async drain(): Promise<void> {
    this.running = true;
    try {
      while (this.tasks.length > 0) {
        const task = this.tasks.shift() as Task;
        let result: unknown;
        this.synchronous = true;
        try {
          result = task();
        } catch (error) {
          // Tasks report listener failures themselves (invoke): this is a
          // malformed frame or a bug, and must not stop delivery.
          this.onError(error);
        } finally {
          this.synchronous = false;
        }
        if (isThenable(result)) await Promise.resolve(result).catch(this.onError);
      }
    } finally {
      this.running = false;
      const idle = this.idle;
      this.idle = [];
      for (const resolve of idle) resolve();
    }
  }
}
