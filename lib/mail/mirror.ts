// Keeps each inbox's index a mirror of the mail server (docs/design-facts.md, "The index"): the decisions, while the
// mail source (adapters/imap) speaks the protocol.
//
// - Sync passes of one inbox run strictly one after another, in this process: callers arriving
//   while one runs share the next one, so any number of concurrent reads cost at most two passes.
// - A read trusts the index without a sync of its own only while a watcher signals every label's
//   changes as they happen, its last pass worked, and the index was filled once. During a mail
//   server outage a read is served from the index when there is one.
// - The watcher lease (docs/mail.md, "Across processes"): among the processes sharing the store, the one holding an
//   inbox's lease watches it; the others hear its changes through the bus (MailLiveFeed). The
//   lease is renewed every third of its length while anyone here listens, and taken over when
//   the holder lets it lapse.
// - Push mode (lib/mail/watch-all.ts): while Dovecot's hints are known to flow, a read trusts
//   the index as with a live watcher, after any pass a hint already asked for.
// - A never-indexed inbox: a read waits for its first fill at most `fillWaitMs`, answering
//   earlier when what it asks is already filled (`ready`), else 503 with Retry-After.
// - A removed inbox's passes end at their next write (the store refuses it): removal wins.
import { isDomainError, notFound, unavailable } from '../errors.ts';
import type { WarnLog } from '../warn-log.ts';
import { NO_METRICS, type SyncMetrics } from '../metrics.ts';
import type { MailLiveFeed } from './live.ts';
import type { LiveChange, MailInbox } from './types.ts';
import type { MailIndexStore, MailSource, MailWatcher, Unwatch, WatchLeases } from './ports.ts';

export interface MirrorLog extends WarnLog {
  info(obj: object, msg: string): void;
}

export interface MailMirrorOptions {
  index: MailIndexStore;
  source: MailSource;
  /** Where listeners get their changes (this process's and, over the bus, the others'). Closed with the mirror. */
  live: MailLiveFeed;
  log: MirrorLog;
  /** Called with every batch of changes the index applies, whoever listens (the event log). */
  onChanges?: (inboxId: string, changes: readonly LiveChange[]) => void;
  /** Without leases, every process with listeners runs its own watcher. */
  leases?: WatchLeases;
  leaseMs: number;
  /** How long a read waits for an inbox's first index before answering 503 (0: not at all). */
  fillWaitMs?: number;
  /** Passes and the index's lag (lib/metrics.ts). */
  metrics?: SyncMetrics;
}

/** A watcher's pass that failed is tried again after this long, doubling up to the max. */
const SIGNAL_RETRY_MIN_MS = 500;
const SIGNAL_RETRY_MAX_MS = 30_000;

/** Whether what a read asks for is in the index already, during a first fill. */
export type ReadyCheck = () => Promise<boolean>;

/** Per inbox: its sync passes, its listeners and its watcher. */
class InboxRuntime {
  /** Settles when the last pass asked for has ended: the next one starts after it. */
  tail: Promise<void> = Promise.resolve();
  /** A pass asked for and not started yet: later callers share it. */
  pending: Promise<void> | null = null;
  listeners = new Set<(change: LiveChange) => void>();
  watcher: MailWatcher | null = null;
  /** A claim of the lease being written: whoever asks meanwhile waits for it. */
  taking: Promise<MailWatcher | null> | null = null;
  lastError: unknown = null;
  /** Someone waits on the pass asked for (a read, a hint): it runs in the interactive lane. */
  pendingInteractive = false;
  /** When this process last wrote the inbox's `synced_at`: at most once a second, not per read. */
  syncedMarkedAt = 0;
  /** When the last push hint for the inbox came (ms since the epoch; 0: none here). */
  hintedAt = 0;
  /** Changes the index applied for the inbox here: a sweep tells from it whether it found news. */
  published = 0;
  /** The inbox was removed: no pass of it runs any more. */
  removed = false;
  /** A pass a watcher's signal asked for failed: the next try (MailMirror.signalled). */
  retry: NodeJS.Timeout | null = null;
  constructor(public inbox: MailInbox) {}
}

export class MailMirror {
  readonly live: MailLiveFeed;
  private readonly inboxes = new Map<string, InboxRuntime>();
  private closed = false;
  /** Renews the leases held and tries for those another process holds, while anyone listens here. */
  private leaseTimer: NodeJS.Timeout | null = null;
  /** A renewal is being written: the next tick skips rather than overlaps it. */
  private renewing = false;
  /** Push mode: whether hints are known to flow now (set by WatchAll). */
  private hintsFlow: () => boolean = () => false;
  /** Sync passes run, and reads served without one: for tests and metrics. */
  readonly stats = { passes: 0, trustedReads: 0 };

  private readonly metrics: SyncMetrics;

  constructor(private readonly o: MailMirrorOptions) {
    this.live = o.live;
    this.metrics = o.metrics ?? NO_METRICS.sync;
  }

  /**
   * Makes the index reflect every change made before this call, for a read: nothing when a
   * watcher keeps every label current, or when push hints flow (after the passes they asked
   * for); the index as it is when the server does not answer. During the inbox's first fill,
   * returns as soon as `ready` says the read can be answered from what is filled, or when the
   * fill ends; 503 beyond `fillWaitMs`.
   */
  async refresh(inbox: MailInbox, ready?: ReadyCheck): Promise<void> {
    const rt = this.runtime(inbox);
    if (await this.trusted(rt)) {
      this.stats.trustedReads++;
      return;
    }
    const seeded = await this.o.index.isSeeded(inbox.id);
    if (seeded && rt.lastError === null && this.hintsFlow()) {
      // A hint that came before this read has asked for a pass: the read sees its change.
      await rt.tail;
      if (rt.lastError === null) {
        this.stats.trustedReads++;
        return;
      }
    }
    if (!seeded) {
      if (!(await this.firstFill(rt, ready))) throw await this.stillFilling(rt);
      return;
    }
    try {
      await this.fresh(rt);
    } catch (err) {
      if (await this.o.index.isSeeded(inbox.id)) {
        this.o.log.warn({ err, inbox: inbox.id }, 'serving the index without a sync: the mail server did not answer');
        return;
      }
      throw isDomainError(err) ? err : unavailable('the mail server is not reachable; try again later');
    }
  }

  /**
   * The inbox has never been indexed: its first fill (started in the background when the inbox
   * was added, or by this read) is joined for at most `fillWaitMs`. Meanwhile `ready` is asked
   * every 100 ms whether the index already holds the answer (the newest pages fill first).
   * False when the wait ran out; a failed pass is thrown (503 when the server is not reachable).
   */
  private async firstFill(rt: InboxRuntime, ready?: ReadyCheck): Promise<boolean> {
    const waitMs = this.o.fillWaitMs ?? 10_000;
    let settled: { err: unknown } | null = null;
    const pass = this.fresh(rt).then(
      () => void (settled = { err: null }),
      (err: unknown) => void (settled = { err }),
    );
    const deadline = Date.now() + waitMs;
    for (;;) {
      if (settled) {
        const { err } = settled;
        if (err === null) return true;
        throw isDomainError(err) ? err : unavailable('the mail server is not reachable; try again later');
      }
      if (ready && (await ready())) return true;
      const left = deadline - Date.now();
      if (left <= 0) return false;
      await Promise.race([pass, new Promise((resolve) => setTimeout(resolve, Math.min(left, 100)))]);
    }
  }

  /** The 503 for a read (or a stream) that waited out `fillWaitMs` of a first fill. */
  private async stillFilling(rt: InboxRuntime): Promise<Error> {
    const s = await this.o.index.status(rt.inbox.id).catch(() => null);
    const progress = s ? ` (${s.locations} messages indexed so far)` : '';
    return unavailable(
      `the inbox is being indexed for the first time${progress}; try again shortly`,
      Math.max(1, Math.ceil((this.o.fillWaitMs ?? 10_000) / 1000)),
    );
  }

  /** Push mode: `flowing` says whether Dovecot's hints are known to arrive (lib/mail/watch-all.ts). */
  trustHints(flowing: () => boolean): void {
    this.hintsFlow = flowing;
  }

  /** A push hint for the inbox: a pass soon (interactive: a read may be waiting on it). */
  hint(inbox: MailInbox): Promise<void> {
    const rt = this.runtime(inbox);
    rt.hintedAt = Date.now();
    return this.nudge(inbox);
  }

  /** When the last hint for the inbox came here, and how many changes its passes applied here. */
  activity(inboxId: string): { hintedAt: number; published: number } {
    const rt = this.inboxes.get(inboxId);
    return { hintedAt: rt?.hintedAt ?? 0, published: rt?.published ?? 0 };
  }

  /** A sync pass that starts after this call, whatever the watcher says; its failure is the caller's. */
  syncNow(inbox: MailInbox): Promise<void> {
    return this.fresh(this.runtime(inbox));
  }

  /**
   * Something changed in the inbox (a push hint, the sweep): a pass soon, shared with every
   * other caller until it starts, so a burst of hints costs at most two passes. Never rejects:
   * a failed pass is logged, and the next hint or sweep tries again.
   */
  nudge(inbox: MailInbox, options: { background?: boolean } = {}): Promise<void> {
    if (this.closed) return Promise.resolve();
    return this.fresh(this.runtime(inbox), options.background).catch(() => undefined);
  }

  /**
   * The inbox was removed: its watcher stops, its listeners are dropped, its passes end, and its
   * index is deleted after the last of them (so no pass writes it back).
   */
  async forget(inboxId: string): Promise<void> {
    const rt = this.inboxes.get(inboxId);
    if (rt) {
      rt.removed = true;
      this.inboxes.delete(inboxId);
      rt.listeners.clear();
      await this.dropWatch(rt);
      await rt.tail;
    }
    await this.o.index.dropInbox(inboxId);
  }

  /** Live changes of the inbox, from the same diffs the index applies. Resolves once watching. */
  async watch(inbox: MailInbox, listener: (change: LiveChange) => void, onGap?: () => void): Promise<Unwatch> {
    const rt = this.runtime(inbox);
    const unwatch = await this.attach(rt, listener, onGap);
    // Caught up to now before the caller tells its client the stream is open. A first fill is
    // waited for as a read waits (then 503): a stream opened over a half-filled index would
    // never report what the fill brings in (a first fill is silent).
    let filling = false;
    if (!(await this.o.index.isSeeded(inbox.id))) {
      filling = !(await this.firstFill(rt).catch((err: unknown) => {
        if (!this.closed) this.o.log.warn({ err, inbox: inbox.id }, 'sync before streaming failed');
        return true;
      }));
    } else {
      await this.fresh(rt).catch((err: unknown) => {
        // Ended by close(): no news (a thousand of these at a notify-mode shutdown).
        if (!this.closed) this.o.log.warn({ err, inbox: inbox.id }, 'sync before streaming failed');
      });
    }
    if (filling) {
      await unwatch();
      throw await this.stillFilling(rt);
    }
    return unwatch;
  }

  /**
   * The inbox watched with nobody streaming it (NOTIFY mode, lib/mail/watch-all.ts): the watcher
   * (or another process holding the lease) records its changes in the index and the log. Resolves
   * once the watcher is started; nothing waits for a first fill, which the watcher's first pass
   * does in its own time (a big inbox's fill outlasting a read's `fillWaitMs` must not cost it its
   * watcher). Rejects when the watcher was refused at the connection cap.
   */
  keepWatched(inbox: MailInbox): Promise<Unwatch> {
    return this.attach(this.runtime(inbox), () => undefined);
  }

  /** A listener added, and the watcher started here unless another process holds the lease. */
  private async attach(rt: InboxRuntime, listener: (change: LiveChange) => void, onGap?: () => void): Promise<Unwatch> {
    // Changes other processes apply reach this process's listeners through the bus.
    await this.live.start();
    const unlisten = this.live.subscribe(rt.inbox.id, listener, onGap);
    rt.listeners.add(listener);
    this.leaseTimer ??= this.startLeaseTimer();
    let done = false;
    const unwatch = async () => {
      if (done) return;
      done = true;
      unlisten();
      rt.listeners.delete(listener);
      if (rt.listeners.size === 0) await this.dropWatch(rt);
    };
    // This process watches the inbox unless another one holds its lease; then that one's syncs
    // reach the listeners here through the bus, and the lease timer takes over if it lapses.
    const watcher = await this.takeWatch(rt);
    if (watcher) {
      await watcher.started;
      // At the connection cap a watcher is refused (503) rather than left retrying for a stream
      // that would never be live.
      if (!watcher.live && watcher.refused) {
        await unwatch();
        throw watcher.lastError;
      }
    }
    return unwatch;
  }

  /** Listeners of an inbox here, and whether this process watches it: for tests and metrics. */
  watching(inboxId: string): { listeners: number; live: boolean } {
    const rt = this.inboxes.get(inboxId);
    return { listeners: rt?.listeners.size ?? 0, live: rt?.watcher?.live ?? false };
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.leaseTimer) clearInterval(this.leaseTimer);
    this.leaseTimer = null;
    for (const rt of this.inboxes.values()) {
      rt.listeners.clear();
      await this.dropWatch(rt);
    }
    await this.live.close();
    // Closing the connections ends the passes still running; none writes to the store after this.
    await this.o.source.close();
    await Promise.all([...this.inboxes.values()].map((rt) => rt.tail));
  }

  /** Whether a read may skip its sync: a watcher reports every label's changes as they happen. */
  private async trusted(rt: InboxRuntime): Promise<boolean> {
    const w = rt.watcher;
    return w !== null && w.live && w.complete && rt.lastError === null && (await this.o.index.isSeeded(rt.inbox.id));
  }

  /**
   * A pass that starts after this call. Passes are chained on `tail`, so one starts only once
   * the previous one has settled: never two at once, whoever asks and when.
   */
  private fresh(rt: InboxRuntime, background = false): Promise<void> {
    if (!background) rt.pendingInteractive = true;
    if (rt.pending) return rt.pending;
    // The index's lag is counted from the first request the pass answers.
    const askedAt = performance.now();
    const pass = rt.tail.then(() => {
      // Started: whoever asks from now on needs the pass after this one.
      rt.pending = null;
      const bulk = !rt.pendingInteractive;
      rt.pendingInteractive = false;
      return this.pass(rt, bulk, askedAt);
    });
    rt.pending = pass;
    rt.tail = pass.catch(() => undefined);
    return pass;
  }

  private async pass(rt: InboxRuntime, background: boolean, askedAt: number): Promise<void> {
    if (this.closed) throw unavailable('shutting down');
    if (rt.removed) throw notFound('inbox not found: it was removed');
    this.stats.passes++;
    try {
      await this.o.source.sync(rt.inbox, (changes) => this.publish(rt.inbox.id, changes), background ? { background } : {});
      this.metrics.pass('ok', (performance.now() - askedAt) / 1000);
      rt.lastError = null;
      const now = Date.now();
      if (now - rt.syncedMarkedAt >= 1000) {
        rt.syncedMarkedAt = now;
        await this.o.index
          .markSynced(rt.inbox.id, now)
          .catch((err: unknown) => this.o.log.warn({ err, inbox: rt.inbox.id }, 'could not record the sync time'));
      }
    } catch (err) {
      rt.lastError = err;
      if (!this.closed) this.metrics.pass('failed', (performance.now() - askedAt) / 1000);
      // Removed meanwhile (here or by another process): the store refused the pass's writes.
      if (isDomainError(err) && err.kind === 'not-found') {
        this.o.log.info({ inbox: rt.inbox.id }, 'the inbox was removed during a sync pass; its index stays dropped');
        throw err;
      }
      // A pass cut short by close() is no news.
      if (!this.closed) this.o.log.warn({ err, inbox: rt.inbox.id }, 'index sync failed');
      throw err;
    }
  }

  /** Starts the inbox's watcher here if this process may hold it (its lease, when there are leases). */
  private takeWatch(rt: InboxRuntime, claimed = false): Promise<MailWatcher | null> {
    if (rt.watcher || this.closed) return Promise.resolve(rt.watcher);
    rt.taking ??= (async () => {
      try {
        const leases = this.o.leases;
        if (leases && !claimed && !(await leases.claim([rt.inbox.id], this.live.origin, this.o.leaseMs)).has(rt.inbox.id)) return null;
        // The last listener left (or the process is closing) while the claim was written.
        if (this.closed || rt.listeners.size === 0) {
          await leases?.release([rt.inbox.id], this.live.origin).catch(() => undefined);
          return null;
        }
        // Every signal (and every reconnect) asks for a pass: a watcher taking over catches up at once.
        rt.watcher ??= this.o.source.watch(rt.inbox, () => this.signalled(rt));
        return rt.watcher;
      } finally {
        rt.taking = null;
      }
    })();
    return rt.taking;
  }

  /**
   * A watcher's signal: a pass. One that fails (no connection free within the pool's wait, a
   * connection lost twice) is tried again after `retryMs`, doubling up to SIGNAL_RETRY_MAX_MS,
   * until one works: the change it was asked for must not wait for the next signal or the
   * watcher's poll (45 s).
   */
  private signalled(rt: InboxRuntime, retryMs = SIGNAL_RETRY_MIN_MS): void {
    void this.fresh(rt).catch(() => {
      if (this.closed || rt.removed || !rt.watcher || rt.retry) return;
      rt.retry = setTimeout(() => {
        rt.retry = null;
        this.signalled(rt, Math.min(retryMs * 2, SIGNAL_RETRY_MAX_MS));
      }, retryMs);
      rt.retry.unref();
    });
  }

  /** Stops the inbox's watcher here (if any) and gives up its lease. */
  private async dropWatch(rt: InboxRuntime, release = true): Promise<void> {
    const watcher = rt.watcher;
    if (!watcher) return;
    rt.watcher = null;
    if (rt.retry) clearTimeout(rt.retry);
    rt.retry = null;
    if (release) {
      try {
        await this.o.leases?.release([rt.inbox.id], this.live.origin);
      } catch (err) {
        this.o.log.warn({ err, inbox: rt.inbox.id }, 'could not release the watcher lease; another process takes over when it expires');
      }
    }
    await watcher.stop();
  }

  private startLeaseTimer(): NodeJS.Timeout {
    const timer = setInterval(() => void this.renewLeases(), Math.max(100, Math.floor(this.o.leaseMs / 3)));
    timer.unref();
    return timer;
  }

  /** Every third of a lease: renews the leases held, and takes those that lapsed, in one write. */
  private async renewLeases(): Promise<void> {
    const leases = this.o.leases;
    if (!leases || this.closed || this.renewing) return;
    const wanted = [...this.inboxes.values()].filter((rt) => rt.listeners.size > 0);
    if (wanted.length === 0) return;
    let held: Set<string>;
    this.renewing = true;
    try {
      held = await leases.claim(
        wanted.map((rt) => rt.inbox.id),
        this.live.origin,
        this.o.leaseMs,
      );
    } catch (err) {
      // A watcher keeps running on a lease it could not renew; if another process takes it
      // meanwhile, both watch until the next renewal says so (correct, one connection more).
      this.o.log.warn({ err }, 'could not renew the watcher leases; trying again');
      return;
    } finally {
      this.renewing = false;
    }
    if (this.closed) return;
    for (const rt of wanted) {
      if (held.has(rt.inbox.id)) {
        if (!rt.watcher) void this.takeWatch(rt, true);
      } else if (rt.watcher) {
        // Lapsed (this process stalled past its lease) and taken by another: it watches now.
        this.o.log.info({ inbox: rt.inbox.id }, 'another process took over the inbox watcher');
        void this.dropWatch(rt, false);
      }
    }
  }

  private runtime(inbox: MailInbox): InboxRuntime {
    let rt = this.inboxes.get(inbox.id);
    if (!rt) this.inboxes.set(inbox.id, (rt = new InboxRuntime(inbox)));
    else rt.inbox = inbox;
    return rt;
  }

  private publish(inboxId: string, changes: LiveChange[]): void {
    const rt = this.inboxes.get(inboxId);
    if (rt) rt.published += changes.length;
    try {
      this.o.onChanges?.(inboxId, changes);
    } catch (err) {
      this.o.log.warn({ err }, 'the change hook failed');
    }
    // This process's listeners at once; the other processes' through the bus.
    this.live.applied(inboxId, changes);
  }
}
