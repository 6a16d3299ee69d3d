// The dispatcher's two ways of doing a thing once however often it is asked (lib/webhooks/dispatcher.ts):
// each stands for what used to be a re-entrancy flag on the dispatcher.

/**
 * Runs `body(key)` at most once at a time per key; asked again while it runs, it runs once more
 * when it ends (however many times it was asked meanwhile), until not asked again or `stopped()`.
 * A failure ends the run and goes to `failed`; the next ask starts afresh.
 */
export class OneAtATime<K> {
  private readonly running = new Set<K>();
  private readonly again = new Set<K>();

  constructor(
    private readonly body: (key: K) => Promise<void>,
    private readonly failed: (err: unknown, key: K) => void,
    private readonly stopped: () => boolean = () => false,
  ) {}

  async run(key: K): Promise<void> {
    if (this.running.has(key)) {
      this.again.add(key);
      return;
    }
    this.running.add(key);
    try {
      do {
        this.again.delete(key);
        await this.body(key);
      } while (this.again.has(key) && !this.stopped());
    } catch (err) {
      this.failed(err, key);
    } finally {
      this.running.delete(key);
    }
  }
}

/**
 * Calls `fn` once, a moment after the first ask (`defer`: a timer, or setImmediate), for every
 * ask made until then.
 */
export class Soon {
  private pending = false;

  constructor(
    private readonly defer: (run: () => void) => void,
    private readonly fn: () => void,
  ) {}

  ask(): void {
    if (this.pending) return;
    this.pending = true;
    this.defer(() => {
      this.pending = false;
      this.fn();
    });
  }
}

/** `defer` for Soon: after `ms`, never keeping the process alive. */
export const after =
  (ms: number) =>
  (run: () => void): void => {
    setTimeout(run, ms).unref();
  };

/** `defer` for Soon: after this turn's I/O. */
export const nextTurn = (run: () => void): void => {
  setImmediate(run);
};
