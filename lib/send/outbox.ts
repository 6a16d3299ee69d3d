// Files the Sent copy of every message the relay accepted, from the durable outbox: a Dovecot
// outage delays a copy but never loses it, and each is filed once. An entry is claimed (its next
// attempt moved a lease ahead) before it is tried, so two processes sharing the store never file
// the same one at once. Every claim is counted: on any attempt but the first, the filer skips a
// copy already in Sent, which covers a process that died between Dovecot's answer and marking
// the entry filed, and an APPEND whose answer was lost. The first attempt (nearly every copy)
// cannot meet an earlier one, so it costs Dovecot no search of the Sent folder.
//
// What a process that died left behind is settled at start-up and every `recoverMs` after
// (OutboxStore.recover): its sends whose end of data was never written go (their drafts may be
// sent again), those Postfix may have taken are kept with their outcome unknown (their copies
// unfiled until a delivery report shows Postfix took them), and the copies it had claimed are
// due at once rather than when its claims run out.
//
// Cheap filing (bench/RESULTS.md, "Sending"): an inbox's first attempts are filed in batches,
// one MULTIAPPEND each (one Dovecot transaction and push hint, one commit in the store, one
// index refresh per pass), and filing yields to the sends under way in this process: a copy
// waits for them up to `yieldMs`, then is filed anyway, so a steady stream of sends delays the
// copies by that much at most and never starves them. A copy tried before is filed alone, so
// one the server refuses never holds others back.
import type { DirectoryStore } from '../directory/ports.ts';
import type { Inbox } from '../directory/types.ts';
import type { WarnLog } from '../warn-log.ts';
import type { CopyQueue, MemoryBudget, OutboxEntry, OutboxStore, SentCopy, SentFiler } from './ports.ts';

export interface SentCopiesOptions {
  outbox: OutboxStore;
  directory: DirectoryStore;
  filer: SentFiler;
  log: WarnLog;
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
  /** How long a due copy waits for the sends under way in this process before it is filed anyway. */
  yieldMs?: number;
  /** Says this process runs, and settles what dead ones left, this often. */
  recoverMs?: number;
}

/**
 * What filing a copy holds at once, per byte of the message: the copy read from the store.
 * imapflow sends a literal that large as a synchronizing literal, written from the buffer as
 * it is (no APPEND command built around a copy of it). A sealed copy is somewhat larger than
 * the message; this is an estimate.
 */
const FILING_BYTES_PER_BYTE = 1;

/** Copies filed in one MULTIAPPEND, at most: bench/sent-append.ts found 10 and 50 alike. */
const BATCH_COPIES = 50;
/** A batch's bytes, at most (a larger copy goes alone): its share of the memory budget stays small. */
const BATCH_BYTES = 8 * 1024 * 1024;
/** Due entries read per step of a pass. */
const SCAN = 200;
/** Filing waits for this long without a send beginning or ending in the process. */
const QUIET_MS = 50;

/**
 * The due entries in batches: first attempts of one inbox together, in order, up to the limits;
 * an entry tried before alone.
 */
function batches(due: readonly OutboxEntry[]): OutboxEntry[][] {
  const out: OutboxEntry[][] = [];
  const open = new Map<string, { entries: OutboxEntry[]; bytes: number }>();
  for (const entry of due) {
    if (entry.claims > 0) {
      out.push([entry]);
      continue;
    }
    let batch = open.get(entry.inboxId);
    if (!batch || batch.entries.length >= BATCH_COPIES || (batch.bytes > 0 && batch.bytes + entry.size > BATCH_BYTES)) {
      batch = { entries: [], bytes: 0 };
      open.set(entry.inboxId, batch);
      out.push(batch.entries);
    }
    batch.entries.push(entry);
    batch.bytes += entry.size;
  }
  return out;
}

export class SentCopies implements CopyQueue {
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<void> | null = null;
  private again = false;
  private stopped = false;
  private readonly pollMs: number;
  private readonly retryMs: number;
  private readonly maxRetryMs: number;
  private readonly claimMs: number;
  private readonly memory: MemoryBudget | null;
  private readonly yieldMs: number;
  private readonly recoverMs: number;
  private lastRecover = 0;
  /** Told of the sends each recovery made `unknown` (their mail.outbox.unknown events); set by the wiring. */
  onUnknown: (ids: readonly string[]) => Promise<void> = async () => {};
  /** Sends under way in this process, when one last began or ended, and the passes waiting for them. */
  private sends = 0;
  private lastSendAt = 0;
  private readonly waitingForQuiet = new Set<() => void>();

  private readonly outbox: OutboxStore;
  private readonly directory: DirectoryStore;
  private readonly filer: SentFiler;
  private readonly log: WarnLog;

  constructor(options: SentCopiesOptions) {
    this.outbox = options.outbox;
    this.directory = options.directory;
    this.filer = options.filer;
    this.log = options.log;
    this.pollMs = options.pollMs ?? 2000;
    this.retryMs = options.retryMs ?? 500;
    this.maxRetryMs = options.maxRetryMs ?? 30_000;
    this.claimMs = options.claimMs ?? 120_000;
    this.memory = options.memory ?? null;
    this.yieldMs = options.yieldMs ?? 2000;
    this.recoverMs = options.recoverMs ?? 10_000;
  }

  /**
   * Settles what processes that died left in the outbox (at start-up, before serving: a retry
   * then finds its draft's send settled) and says this one runs.
   */
  async recover(): Promise<void> {
    this.lastRecover = Date.now();
    const { unknownIds, ...settled } = await this.outbox.recover(this.lastRecover);
    if (settled.dropped + settled.unknown + settled.reclaimed > 0) {
      this.log.warn(
        { ...settled, unknownOutboxIds: unknownIds },
        'settled the sends and Sent copies of a process that stopped: dropped never sent, unknown outcome, claims taken back',
      );
    }
    if (unknownIds.length > 0) await this.onUnknown(unknownIds);
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

  readonly sending = (): (() => void) => {
    this.sends++;
    this.lastSendAt = Date.now();
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      this.lastSendAt = Date.now();
      if (--this.sends === 0) this.wakeWaiting();
    };
  };

  async stop(): Promise<void> {
    this.stopped = true;
    this.wakeWaiting();
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    await this.running;
  }

  /** Files every copy due now (tests and shutdown use it too). */
  async runOnce(): Promise<void> {
    for (;;) {
      let due = await this.outbox.due(Date.now(), SCAN);
      if (due.length === 0 || this.stopped) return;
      // The sends first: their answers wait on the same cores as Dovecot's filing. The copies
      // that came due meanwhile join the batches (due is oldest first).
      if (await this.yieldToSends(due[0]!.nextAttemptAt)) due = await this.outbox.due(Date.now(), SCAN);
      let filedAny = false;
      const filedIn = new Map<string, Inbox>();
      for (const [i, batch] of batches(due).entries()) {
        if (i > 0) await this.yieldToSends(Math.min(...batch.map((e) => e.nextAttemptAt)));
        if (this.stopped) return;
        if (await this.fileBatch(batch, filedIn)) filedAny = true;
      }
      for (const inbox of filedIn.values()) await this.filer.refresh(inbox);
      // Everything left is waiting for a retry: the timer comes back for it.
      if (!filedAny) return;
    }
  }

  /** Files one batch (one inbox's); true when it was done with, false when it waits for a retry. */
  private async fileBatch(batch: readonly OutboxEntry[], filedIn: Map<string, Inbox>): Promise<boolean> {
    const claimed: OutboxEntry[] = [];
    for (const entry of batch) {
      if (await this.outbox.claim(entry.id, entry.nextAttemptAt, Date.now() + this.claimMs)) claimed.push(entry);
    }
    if (claimed.length === 0) return false;
    const bytes = claimed.reduce((sum, e) => sum + e.size, 0);
    const release = this.memory ? await this.memory.enter(bytes * FILING_BYTES_PER_BYTE) : null;
    try {
      const inbox = await this.directory.getInbox(claimed[0]!.inboxId);
      const copies: SentCopy[] = [];
      for (const entry of inbox ? claimed : []) {
        const raw = await this.outbox.copy(entry.id);
        if (raw) copies.push({ raw, messageId: entry.messageId, retry: entry.claims > 0, createdAt: entry.createdAt });
      }
      // An inbox removed meanwhile has no Sent to file into; its copies go with it.
      if (inbox && copies.length > 0) {
        await this.filer.fileSent(inbox, copies);
        filedIn.set(inbox.id, inbox);
      }
      await this.outbox.filed(
        claimed.map((e) => e.id),
        Date.now(),
      );
      return true;
    } catch (err) {
      // Every copy of the batch is tried again, each alone and as a retry (it may have been filed).
      let retryInMs = 0;
      for (const entry of claimed) {
        retryInMs = Math.min(this.retryMs * 2 ** Math.min(entry.attempts, 16), this.maxRetryMs);
        await this.outbox.retryAt(entry.id, Date.now() + retryInMs);
      }
      this.log.warn(
        { err, outbox: claimed.map((e) => e.id), attempt: claimed[0]!.attempts + 1, retryInMs },
        'could not file the Sent copies; will retry',
      );
      return false;
    } finally {
      release?.();
    }
  }

  /**
   * Waits while sends are under way in this process, and until none has begun or ended for
   * QUIET_MS (a steady stream of sends has instants with none in flight, between one client's
   * answer and its next request), until `since` + yieldMs at the latest; true when it waited.
   */
  private async yieldToSends(since: number): Promise<boolean> {
    for (let waited = false; ; waited = true) {
      const now = Date.now();
      const left = since + this.yieldMs - now;
      const quietFor = now - this.lastSendAt;
      if ((this.sends === 0 && quietFor >= QUIET_MS) || this.stopped || left <= 0) return waited;
      await new Promise<void>((resolve) => {
        const done = () => {
          clearTimeout(timer);
          this.waitingForQuiet.delete(done);
          resolve();
        };
        const timer = setTimeout(done, this.sends === 0 ? Math.min(left, QUIET_MS - quietFor) : left);
        timer.unref();
        if (this.sends > 0) this.waitingForQuiet.add(done);
      });
    }
  }

  private wakeWaiting(): void {
    for (const wake of [...this.waitingForQuiet]) wake();
  }

  private schedule(ms: number): void {
    if (this.stopped) return;
    if (this.timer) clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.timer = null;
      const recovering = Date.now() - this.lastRecover >= this.recoverMs ? this.recover() : Promise.resolve();
      this.running = recovering
        .then(() => this.runOnce())
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
