// Every inbox watched, always (docs/watch.md): whether or not anyone streams an inbox,
// its changes reach the index, the event log and the streams within seconds.
//
// - Push (the scalable mode): Dovecot's push_notification Lua script posts a hint, "this user's
//   mailbox changed", for every change of every user (docker/dovecot/postern-push.lua). A hint
//   asks the mirror for a pass of that inbox (coalesced: a burst costs at most two passes);
//   the pass's diffs are what is recorded, exactly as for a read or a watcher. No connection is
//   held per inbox.
// - Sweep: hints can be lost (Postern restarting, the network, a hint while the listener was
//   down). Every `sweepMs` one process among those sharing the store (the `sweep` lease) runs a
//   pass of every inbox, `sweepConcurrency` at a time; an unchanged inbox costs one LIST-STATUS.
// - NOTIFY (the fallback, for a Dovecot without the push script): every inbox gets a watcher as
//   if someone streamed it, under the existing watcher lease, so one process watches each. This
//   holds one IMAP connection per inbox: fine for tens of inboxes, not for thousands. A watch
//   refused at the connection cap is tried again (backing off), never given up.
// - Push health: reads trust the index (no pass of their own) only while hints are known to
//   flow: at least one hint came, and the last sweep that completed found no change a hint had
//   not announced. A sweep that does find one makes reads sync again and is logged and reported
//   (`postern admin inbox status`): hints configured but not arriving is an operator's problem.
// - Inboxes another process adds or removes (`postern admin inbox …`) are seen within
//   `catalogPollMs`: the store's inbox list has a version, one row read per poll.
import type { WarnLog } from '../warn-log.ts';
import { NO_METRICS, type WatchMetrics } from '../metrics.ts';
import type { MailMirror } from './mirror.ts';
import type { MailInbox } from './types.ts';
import type { Unwatch, WatchLeases, WatchReport, WatchReports } from './ports.ts';

export type WatchMode = 'push' | 'notify' | 'off';

/** Where the inboxes come from (the directory). */
export interface InboxCatalog {
  getInboxByImapUser(imapUser: string): Promise<MailInbox | null>;
  listInboxes(): Promise<MailInbox[]>;
  /** Goes up with every inbox added or removed, by any process sharing the store. */
  inboxesVersion(): Promise<number>;
}

export interface WatchLog extends WarnLog {
  info(obj: object, msg: string): void;
}

export interface WatchAllOptions {
  mode: WatchMode;
  /** Why this mode, in words (config.watch.reason). */
  reason: string;
  catalog: InboxCatalog;
  mirror: MailMirror;
  /** Who sweeps among the processes sharing the store; without it every process sweeps. */
  leases?: WatchLeases;
  /** Where this process says how it watches, for `inbox status`. */
  reports?: WatchReports;
  /** This process's id among them. */
  origin: string;
  sweepMs: number;
  sweepConcurrency: number;
  /** How often the store's inbox list is checked for another process's add or remove; 0: at sweeps only. */
  catalogPollMs: number;
  /** The hint listener's address (push mode), named in what is logged when hints do not arrive. */
  hintListen?: string;
  log: WatchLog;
  /** Hints taken, sweeps and the lost hints they found (lib/metrics.ts). */
  metrics?: WatchMetrics;
}

/** The sweep's lease: a key that is no inbox id (those start with `ibx_`). */
export const SWEEP_LEASE = 'sweep';

/** A hint this long before a sweep's pass (or up to a second after it) accounts for what it found. */
const HINT_GRACE_MS = 5000;
/** Past this many inboxes, NOTIFY mode says at start that push would serve them better. */
const NOTIFY_MANY = 100;
/** A refused NOTIFY watch is tried again after this long, doubling up to the max. */
const WATCH_RETRY_MIN_MS = 1000;
const WATCH_RETRY_MAX_MS = 30_000;
/** How often this process rewrites its report (so `inbox status` tells a live one from a stopped one). */
export const REPORT_MS = 10_000;

export class WatchAll {
  private timer: NodeJS.Timeout | null = null;
  private pollTimer: NodeJS.Timeout | null = null;
  private reportTimer: NodeJS.Timeout | null = null;
  private sweeping: Promise<number> | null = null;
  private polling: Promise<void> | null = null;
  private closed = false;
  /** The inboxes this process knows of (the directory as last read), and the list's version then. */
  private readonly known = new Map<string, MailInbox>();
  private catalogVersion = -1;
  /** New inboxes waiting for their first index, and how many are being filled. */
  private readonly fills: MailInbox[] = [];
  private filling = 0;
  /** NOTIFY mode: the watch kept on each inbox, and the retries of those refused. */
  private readonly watches = new Map<string, Promise<Unwatch | null>>();
  private readonly retries = new Map<string, NodeJS.Timeout>();
  /** Push health (see the top of the file). */
  private lastHintAt: number | null = null;
  private missedHintAt: number | null = null;
  private cleanSweepStartedAt: number | null = null;
  /** When each inbox's `hinted_at` was last written: at most once a second, not per hint. */
  private readonly hintMarked = new Map<string, number>();
  /** Hints taken, hints missed (found by a sweep), sweeps and NOTIFY watches refused, for tests and metrics. */
  readonly stats = { hints: 0, unknownHints: 0, sweeps: 0, missedHints: 0, refusedHints: 0, refusedWatches: 0 };
  /** The last post refused for its secret: hints may be failing (a misconfigured script). */
  private refusedAt: number | null = null;

  private readonly metrics: WatchMetrics;

  constructor(private readonly o: WatchAllOptions) {
    this.metrics = o.metrics ?? NO_METRICS.watch;
    if (o.mode === 'push') o.mirror.trustHints(() => this.pushHealthy());
  }

  /** Inboxes this process watches (knows of), and how: for the metrics. */
  watched(): { mode: WatchMode; inboxes: number } {
    return { mode: this.o.mode, inboxes: this.known.size };
  }

  async start(): Promise<void> {
    this.o.log.info({ mode: this.o.mode, reason: this.o.reason, sweepMs: this.o.sweepMs }, `watching every inbox: ${this.o.mode}`);
    if (this.o.mode === 'off') return;
    this.catalogVersion = await this.o.catalog.inboxesVersion();
    const inboxes = await this.o.catalog.listInboxes();
    for (const inbox of inboxes) {
      // Push: the sweep at start fills those never indexed; NOTIFY: each gets its watcher now.
      if (this.o.mode === 'notify') this.added(inbox);
      else this.known.set(inbox.id, inbox);
    }
    if (this.o.mode === 'notify' && inboxes.length > NOTIFY_MANY) {
      this.o.log.warn(
        { inboxes: inboxes.length, reason: this.o.reason },
        'every inbox holds its own NOTIFY connection: past the IMAP connection cap the rest are covered by the sweep only; Dovecot push hints scale (docs/watch.md)',
      );
    }
    if (this.o.catalogPollMs > 0) {
      this.pollTimer = setInterval(() => void this.pollCatalog(), this.o.catalogPollMs);
      this.pollTimer.unref();
    }
    if (this.o.reports) {
      void this.report();
      this.reportTimer = setInterval(() => void this.report(), REPORT_MS);
      this.reportTimer.unref();
    }
    if (this.o.sweepMs > 0) {
      // At once too: whatever changed while no process here listened (a restart) is found now,
      // not a sweep interval later. Also the background fill of inboxes never indexed.
      void this.sweep().catch((err: unknown) => this.o.log.warn({ err }, 'the inbox sweep failed'));
      this.timer = setInterval(
        () => void this.sweep().catch((err: unknown) => this.o.log.warn({ err }, 'the inbox sweep failed')),
        this.o.sweepMs,
      );
      this.timer.unref();
    }
  }

  /**
   * A push hint: the IMAP user's mail changed. False when no inbox has that user (not ours).
   * With POSTERN_WATCH=off only an inbox streamed here takes it: its stream gets a change in any
   * folder within a pass, where its watcher's NOTIFY comes 500 ms late (docs/mail.md, "The
   * watcher and the stream").
   */
  async hint(imapUser: string): Promise<boolean> {
    if (this.closed) return true;
    const inbox = await this.o.catalog.getInboxByImapUser(imapUser);
    if (!inbox) {
      this.stats.unknownHints++;
      this.metrics.hint('unknown_user');
      return false;
    }
    if (this.o.mode === 'off') {
      if (this.o.mirror.watching(inbox.id).listeners === 0) return true;
      this.stats.hints++;
      this.metrics.hint('taken');
      void this.o.mirror.hint(inbox);
      return true;
    }
    this.stats.hints++;
    this.metrics.hint('taken');
    const now = Date.now();
    const first = this.lastHintAt === null;
    this.lastHintAt = now;
    void this.o.mirror.hint(inbox);
    if ((this.hintMarked.get(inbox.id) ?? 0) <= now - 1000) {
      this.hintMarked.set(inbox.id, now);
      await this.o.reports?.markHinted(inbox.id, now).catch((err: unknown) => this.o.log.warn({ err }, 'could not record the hint time'));
    }
    if (first) void this.report();
    return true;
  }

  /**
   * A post to the hint listener without the right secret. Hints may be failing (Dovecot's script
   * set up with another secret): reads sync for themselves until a sweep after it finds none
   * missed, and it is logged once per process and reported.
   */
  refused(): void {
    this.stats.refusedHints++;
    this.metrics.hint('refused');
    const first = this.refusedAt === null;
    this.refusedAt = Date.now();
    this.missedHintAt = this.refusedAt;
    if (first) {
      this.o.log.warn(
        { hintListen: this.o.hintListen },
        "a push hint was refused for its secret: is Dovecot's postern_push_secret the same as POSTERN_HINT_SECRET (docs/watch.md)?",
      );
      void this.report();
    }
  }

  /**
   * Whether reads may trust the index on the strength of hints: push mode, a hint came, and the
   * last sweep that completed (after any miss) found nothing a hint had not announced.
   */
  pushHealthy(): boolean {
    return (
      this.o.mode === 'push' &&
      this.lastHintAt !== null &&
      this.cleanSweepStartedAt !== null &&
      (this.missedHintAt === null || this.cleanSweepStartedAt > this.missedHintAt)
    );
  }

  /** An inbox was added: watched from now on (NOTIFY mode), and indexed in the background. */
  added(inbox: MailInbox): void {
    if (this.closed || this.o.mode === 'off' || this.known.has(inbox.id)) return;
    this.known.set(inbox.id, inbox);
    if (this.o.mode === 'push') {
      this.fill(inbox);
      return;
    }
    this.keepWatched(inbox, WATCH_RETRY_MIN_MS);
  }

  /**
   * NOTIFY mode: the inbox's watcher, held until the inbox is removed. A watch refused (the
   * connection cap, reached for a moment by the passes of a thousand watchers starting, say) is
   * tried again, `retryMs` later and doubling up to WATCH_RETRY_MAX_MS; the sweep covers the
   * inbox meanwhile. Given up once, it used to stay unwatched until a restart: its changes came
   * only with the sweep, a minute late (bench/RESULTS.md, "Every inbox watched").
   */
  private keepWatched(inbox: MailInbox, retryMs: number): void {
    if (this.closed || this.watches.has(inbox.id) || !this.known.has(inbox.id)) return;
    this.watches.set(
      inbox.id,
      this.o.mirror.keepWatched(inbox).catch((err: unknown) => {
        this.stats.refusedWatches++;
        // Said once per inbox: past the cap every retry is refused the same way.
        if (retryMs === WATCH_RETRY_MIN_MS)
          this.o.log.warn({ err, inbox: inbox.id, retryMs }, 'could not watch the inbox; the sweep covers it until a retry works');
        this.watches.delete(inbox.id);
        if (this.closed || !this.known.has(inbox.id)) return null;
        const timer = setTimeout(() => {
          this.retries.delete(inbox.id);
          this.keepWatched(inbox, Math.min(retryMs * 2, WATCH_RETRY_MAX_MS));
        }, retryMs);
        timer.unref();
        this.retries.set(inbox.id, timer);
        return null;
      }),
    );
  }

  /**
   * The first index of a new inbox, in the background (the bulk lane), at most
   * `sweepConcurrency` inboxes at once: adding a thousand inboxes does not fill a thousand at once.
   */
  private fill(inbox: MailInbox): void {
    this.fills.push(inbox);
    this.drainFills();
  }

  private drainFills(): void {
    while (!this.closed && this.filling < this.o.sweepConcurrency && this.fills.length > 0) {
      const inbox = this.fills.shift()!;
      // Removed while it waited.
      if (!this.known.has(inbox.id)) continue;
      this.filling++;
      void this.o.mirror.nudge(inbox, { background: true }).finally(() => {
        this.filling--;
        this.drainFills();
      });
    }
  }

  /** An inbox was removed: no longer watched here, and its index dropped. */
  async removed(inboxId: string): Promise<void> {
    this.known.delete(inboxId);
    this.hintMarked.delete(inboxId);
    await this.unwatch(inboxId);
    await this.o.mirror.forget(inboxId);
  }

  private async unwatch(inboxId: string): Promise<void> {
    clearTimeout(this.retries.get(inboxId));
    this.retries.delete(inboxId);
    const watch = this.watches.get(inboxId);
    this.watches.delete(inboxId);
    await (await watch)?.();
  }

  /** One row read: another process added or removed an inbox since the last look. */
  private pollCatalog(): Promise<void> {
    this.polling ??= (async () => {
      try {
        const version = await this.o.catalog.inboxesVersion();
        if (version !== this.catalogVersion) {
          this.catalogVersion = version;
          await this.syncCatalog();
        }
      } catch (err) {
        this.o.log.warn({ err }, 'could not read the inbox list; trying again');
      } finally {
        this.polling = null;
      }
    })();
    return this.polling;
  }

  /** Inboxes added elsewhere are watched (and filled) here; those removed elsewhere are let go. */
  private async syncCatalog(): Promise<void> {
    if (this.closed || this.o.mode === 'off') return;
    const listed = await this.o.catalog.listInboxes();
    const before = this.known.size;
    let changed = false;
    for (const inbox of listed) this.added(inbox);
    const ids = new Set(listed.map((i) => i.id));
    for (const id of [...this.known.keys()]) {
      if (ids.has(id)) continue;
      changed = true;
      await this.removed(id);
    }
    if (changed || this.known.size !== before) void this.report();
  }

  /**
   * One pass over every inbox, unless another process holds the sweep. Resolves with the number
   * of inboxes swept (0 when another process sweeps). A sweep still running is joined.
   */
  sweep(): Promise<number> {
    this.sweeping ??= this.sweepOnce().finally(() => (this.sweeping = null));
    return this.sweeping;
  }

  private async sweepOnce(): Promise<number> {
    if (this.closed) return 0;
    // Whatever the poll has not seen yet (or all of it, without a poll).
    await this.syncCatalog();
    const leases = this.o.leases;
    // Held a little past two sweeps, so a process that stops is replaced after at most that.
    if (leases && !(await leases.claim([SWEEP_LEASE], this.o.origin, this.o.sweepMs * 2 + 5000)).has(SWEEP_LEASE)) return 0;
    const startedAt = Date.now();
    // The first sweep catches up with what changed while no process here ran: hints for those
    // changes were lost for sure, and that says nothing of whether hints flow now.
    const catchingUp = this.stats.sweeps === 0;
    const inboxes = await this.o.catalog.listInboxes();
    // Push: changes a pass of the sweep found that no hint had announced (checked after a grace).
    const suspects: Array<{ inbox: MailInbox; passAt: number; endedAt: number }> = [];
    let next = 0;
    const worker = async () => {
      while (!this.closed && next < inboxes.length) {
        const inbox = inboxes[next++]!;
        const before = this.o.mirror.activity(inbox.id);
        const passAt = Date.now();
        await this.o.mirror.nudge(inbox, { background: true });
        const after = this.o.mirror.activity(inbox.id);
        if (this.o.mode === 'push' && !catchingUp && after.published > before.published && after.hintedAt < passAt - HINT_GRACE_MS)
          suspects.push({ inbox, passAt, endedAt: Date.now() });
      }
    };
    await Promise.all(Array.from({ length: Math.max(1, Math.min(this.o.sweepConcurrency, inboxes.length)) }, worker));
    if (this.closed) return inboxes.length;
    let missed = 0;
    if (suspects.length > 0) {
      // The hint may be a moment behind the change the pass found: give it a second.
      const wait = Math.max(...suspects.map((s) => s.endedAt)) + 1000 - Date.now();
      if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
      for (const s of suspects) if (this.o.mirror.activity(s.inbox.id).hintedAt < s.passAt - HINT_GRACE_MS) missed++;
    }
    this.stats.sweeps++;
    this.metrics.swept((Date.now() - startedAt) / 1000, missed);
    if (missed > 0) {
      const wasHealthy = this.pushHealthy();
      this.missedHintAt = Date.now();
      this.stats.missedHints += missed;
      if (wasHealthy || this.stats.missedHints === missed) {
        this.o.log.warn(
          { inboxes: missed, hintListen: this.o.hintListen, lastHintAt: this.lastHintAt },
          "the sweep found changes no push hint had announced: are Dovecot's hints reaching POSTERN_HINT_LISTEN (docs/watch.md)? Reads sync for themselves until a sweep finds none missed",
        );
      }
    } else {
      this.cleanSweepStartedAt = startedAt;
    }
    void this.report();
    return inboxes.length;
  }

  /** What this process says of its watch, for `postern admin inbox status`. */
  watchReport(): WatchReport {
    const healthy = this.pushHealthy();
    let verdict: string;
    if (this.o.mode === 'off') verdict = 'inboxes are watched only while someone streams them';
    else if (this.o.mode === 'notify') verdict = 'one NOTIFY connection per inbox';
    else if (healthy) verdict = 'push hints are arriving; reads trust the index';
    else if (this.refusedAt !== null && this.refusedAt === this.missedHintAt) {
      verdict =
        "a push hint was refused for its secret: is Dovecot's postern_push_secret the same as POSTERN_HINT_SECRET? Reads sync for themselves";
    } else if (this.missedHintAt !== null && (this.cleanSweepStartedAt === null || this.cleanSweepStartedAt < this.missedHintAt)) {
      verdict = `the last sweep found changes no push hint had announced: Dovecot's hints are not reaching ${this.o.hintListen ?? 'the hint listener'}? The sweep (every ${this.o.sweepMs} ms) covers them; reads sync for themselves`;
    } else if (this.lastHintAt === null) {
      verdict = `no push hint has arrived since the start: is Dovecot's push script configured and able to reach ${this.o.hintListen ?? 'the hint listener'}? Reads sync for themselves until hints arrive`;
    } else verdict = 'push hints are arriving; reads trust the index once a sweep has confirmed none is missed';
    return {
      mode: this.o.mode,
      reason: this.o.reason,
      inboxes: this.known.size,
      hints: this.stats.hints,
      lastHintAt: this.lastHintAt,
      missedHintAt: this.missedHintAt,
      pushHealthy: healthy,
      verdict,
    };
  }

  private async report(): Promise<void> {
    if (this.closed || !this.o.reports) return;
    await this.o.reports
      .putWatchReport(this.o.origin, this.watchReport(), Date.now())
      .catch((err: unknown) => this.o.log.warn({ err }, 'could not write the watch report'));
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const t of [this.timer, this.pollTimer, this.reportTimer]) if (t) clearInterval(t);
    this.timer = this.pollTimer = this.reportTimer = null;
    // One catalog read at most; waited for so that it cannot start watches after this.
    await this.polling;
    await this.o.leases?.release([SWEEP_LEASE], this.o.origin).catch(() => undefined);
    // Not waited for: the sweep's passes under way, and the watches still starting. The mirror's
    // close, which follows, ends them all by closing their connections. Waiting here first kept
    // SIGTERM waiting 86 s, one pass after another, with a thousand NOTIFY watchers starting (npm
    // run bench:watch).
    void this.sweeping?.catch(() => undefined);
    for (const timer of this.retries.values()) clearTimeout(timer);
    this.retries.clear();
    for (const id of [...this.watches.keys()]) void this.unwatch(id).catch(() => undefined);
  }
}
