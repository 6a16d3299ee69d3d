// Work queued per key and run one at a time, in the order queued; different keys run side by
// side. Used where each inbox's changes must be handled in order (re-sealing appended mail,
// reading delivery reports) without one inbox waiting for another.
import type { WarnLog } from './warn-log.ts';

export class KeyedChain {
  /** Per key, the end of its chain: settled once everything queued for it so far is done. */
  private readonly tails = new Map<string, Promise<void>>();

  constructor(
    private readonly log: WarnLog,
    /** Logged with the error and the key when a piece of work fails (the chain goes on). */
    private readonly failure: string,
    /** The key's name in that log line. */
    private readonly keyName = 'key',
  ) {}

  /** Queues `work` for `key`: it starts once everything queued before it for that key is done. */
  run(key: string, work: () => Promise<void>): void {
    const next = (this.tails.get(key) ?? Promise.resolve())
      .then(work)
      .catch((err: unknown) => this.log.warn({ err, [this.keyName]: key }, this.failure));
    this.tails.set(key, next);
    // The key is forgotten once its chain is empty, so the map holds only keys with work.
    void next.finally(() => {
      if (this.tails.get(key) === next) this.tails.delete(key);
    });
  }

  /** Resolves when everything queued so far, and whatever that queued meanwhile, is done. */
  async idle(): Promise<void> {
    while (this.tails.size > 0) await Promise.all([...this.tails.values()]);
  }
}
