// Files the Sent copy of every message the relay accepted, from the durable outbox: a Dovecot
// outage delays a copy but never loses it, and each is filed once. An entry is claimed (its next
// attempt moved a lease ahead) before it is tried, so two processes sharing the store never file
// the same one at once. Every claim is counted: on any attempt but the first, the filer skips a
// copy already in Sent, which covers a process that died between Dovecot's answer and marking
// the entry filed, and an APPEND whose answer was lost. The first attempt (nearly every copy)
// cannot meet an earlier one, so it costs Dovecot one APPEND and no search of the Sent folder.
import type { DirectoryStore } from '../directory/store.ts';
import type { Inbox } from '../directory/types.ts';
import type { WarnLog } from '../warn-log.ts';
import type { MemoryBudget, OutboxStore, SentFiler } from './ports.ts';

export interface SentCopiesOptions {
  /** Looks for due copies this often even when nobody said one is waiting (other processes, retries). */
  pollMs?: number;
  /** First retry after a failure; doubles up to maxRetryMs. */
  retryMs?: number;
  maxRetryMs?: number;
  /** How long a claimed entry is left to its claimer before another process may try it. */
  claimMs?: number;
  /**
   * The send bodies' memory budget: a large copy is filed within it, so filing one 25 MB copy
   * does not add to the bodies of the sends being received meanwhile.
   */
  memory?: MemoryBudget;
}

/**
 * What filing a copy holds at once, per byte of the message: the copy read from the store.
 * imapflow sends a literal that large as a synchronizing literal, written from the buffer as
 * it is (no APPEND command built around a copy of it). A sealed copy is somewhat larger than
 * the message; this is an estimate.
 */
const FILING_BYTES_PER_BYTE = 1;

export class SentCopies {
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<void> | null = null;
  private again = false;
  private stopped = false;
  private readonly pollMs: number;
  private readonly retryMs: number;
  private readonly maxRetryMs: number;
  private readonly claimMs: number;
  private readonly memory: MemoryBudget | null;

  constructor(
    private readonly outbox: OutboxStore,
    private readonly directory: DirectoryStore,
    private readonly filer: SentFiler,
    private readonly log: WarnLog,
    options: SentCopiesOptions = {},
  ) {
    this.pollMs = options.pollMs ?? 2000;
    this.retryMs = options.retryMs ?? 500;
    this.maxRetryMs = options.maxRetryMs ?? 30_000;
    this.claimMs = options.claimMs ?? 120_000;
    this.memory = options.memory ?? null;
  }

  start(): void {
    this.stopped = false;
    this.schedule(0);
  }

  /** A copy is waiting: file it now. */
  readonly kick = (): void => {
    if (this.stopped) return;
    if (this.running) this.again = true;
    else this.schedule(0);
  };

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    await this.running;
  }

  /** Files every copy due now (tests and shutdown use it too). */
  async runOnce(): Promise<void> {
    for (;;) {
      const due = await this.outbox.due(Date.now(), 20);
      if (due.length === 0 || this.stopped) return;
      let filedAny = false;
      const filedIn = new Map<string, Inbox>();
      for (const entry of due) {
        if (this.stopped) return;
        if (!(await this.outbox.claim(entry.id, entry.nextAttemptAt, Date.now() + this.claimMs))) continue;
        const release = this.memory ? await this.memory.enter(entry.size * FILING_BYTES_PER_BYTE) : null;
        try {
          const inbox = await this.directory.getInbox(entry.inboxId);
          const copy = await this.outbox.copy(entry.id);
          // An inbox removed meanwhile has no Sent to file into; its copy goes with it.
          if (inbox && copy) {
            await this.filer.fileSent(inbox, copy, entry.messageId, entry.claims > 0);
            filedIn.set(inbox.id, inbox);
          }
          await this.outbox.filed(entry.id, Date.now());
          filedAny = true;
        } catch (err) {
          const wait = Math.min(this.retryMs * 2 ** Math.min(entry.attempts, 16), this.maxRetryMs);
          await this.outbox.retryAt(entry.id, Date.now() + wait);
          this.log.warn({ err, outbox: entry.id, attempt: entry.attempts + 1, retryInMs: wait }, 'could not file the Sent copy; will retry');
        } finally {
          release?.();
        }
      }
      for (const inbox of filedIn.values()) await this.filer.refresh(inbox);
      // Everything left is waiting for a retry: the timer comes back for it.
      if (!filedAny) return;
    }
  }

  private schedule(ms: number): void {
    if (this.stopped) return;
    if (this.timer) clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.timer = null;
      this.running = this.runOnce()
        .catch((err: unknown) => this.log.warn({ err }, 'the outbox pass failed'))
        .finally(() => {
          this.running = null;
          const next = this.again ? 0 : this.pollMs;
          this.again = false;
          this.schedule(next);
        });
    }, ms);
    this.timer.unref();
  }
}
