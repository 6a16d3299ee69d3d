// The mail source over IMAP: keeps each inbox's index current (sync on demand, or a live
// watcher while someone listens), changes flags with IMAP STORE, and hands the changes each
// sync applied to the live feed (lib/mail/live.ts), which delivers them to this process's
// listeners of the inbox and, over the Bus, to the other processes sharing the store.
import type { Logger } from 'pino';
import { isApiError, unavailable } from '../../lib/errors.ts';
import { MailLiveFeed } from '../../lib/mail/live.ts';
import type { LiveChange, MailIndexStore, MailInbox, MailSource, Unwatch, WatchLeases } from '../../lib/mail/types.ts';
import { ImapPool, PoolBusyError, type ImapSettings } from './pool.ts';
import { unselect } from './raw.ts';
import { IndexSync } from './sync.ts';
import { Watcher } from './watcher.ts';
import { MemoryBus } from '../bus/memory.ts';

export interface ImapSourceOptions {
  imap: ImapSettings;
  store: MailIndexStore;
  log: Logger;
  /** Called with every batch of changes the index applies, whoever listens (the event log). */
  onChanges?: (inboxId: string, changes: readonly LiveChange[]) => void;
  /**
   * Where listeners get their changes: what this process applied, and through the Bus what the
   * other processes sharing the store applied. Closed with the source. Without one, a feed on an
   * in-process bus (this process's changes only).
   */
  live?: MailLiveFeed;
  /**
   * The watcher lease among the processes sharing the store (held for `imap.watchLeaseMs`,
   * renewed every third of it). Without it, every process with listeners runs its own watcher.
   */
  leases?: WatchLeases;
  /** The watcher's safety poll (DESIGN.md 4: every 30-60 s). */
  pollMs?: number;
}

/** Per inbox: its sync passes (one at a time), its listeners and its watcher. */
class InboxRuntime {
  running: Promise<void> | null = null;
  next: Promise<void> | null = null;
  listeners = new Set<(change: LiveChange) => void>();
  watcher: Watcher | null = null;
  lastError: unknown = null;
  constructor(public inbox: MailInbox) {}
}

export class ImapMailSource implements MailSource {
  readonly pool: ImapPool;
  readonly live: MailLiveFeed;
  private readonly sync: IndexSync;
  private readonly inboxes = new Map<string, InboxRuntime>();
  private closed = false;
  /** Renews the leases held and tries for those another process holds, while anyone listens here. */
  private leaseTimer: NodeJS.Timeout | null = null;

  constructor(private readonly o: ImapSourceOptions) {
    this.pool = new ImapPool(o.imap, o.log);
    this.live = o.live ?? new MailLiveFeed(new MemoryBus(), async () => 'postern:mail:local', { log: o.log });
    this.sync = new IndexSync(
      o.store,
      (inboxId, changes) => this.publish(inboxId, changes),
      o.log,
      // Bulk lane: a fill never takes the connection a read or a STORE needs. Only a connection
      // free right now: a fill waiting for more while it holds one could deadlock at the cap.
      (inbox, task) => this.pool.tryUse(inbox.imapUser, task, 'bulk'),
      Math.min(o.imap.maxPerInbox, 4),
    );
  }

  async refresh(inbox: MailInbox): Promise<void> {
    const rt = this.runtime(inbox);
    // A live watcher keeps the index current within its latency (DESIGN.md 4), as long as its
    // last pass worked and the index was filled once.
    if (rt.watcher?.live && rt.lastError === null && this.o.store.isSeeded(inbox.id)) return;
    await this.fresh(rt, true);
  }

  async storeFlags(inbox: MailInbox, at: ReadonlyArray<{ labelGuid: string; uid: number }>, add: string[], remove: string[]): Promise<void> {
    const byLabel = new Map<string, number[]>();
    for (const { labelGuid, uid } of at) byLabel.set(labelGuid, [...(byLabel.get(labelGuid) ?? []), uid]);
    await this.pool.use(inbox.imapUser, async (client) => {
      for (const [labelGuid, uids] of byLabel) {
        const label = this.o.store.label(inbox.id, labelGuid);
        if (!label) continue;
        await client.mailboxOpen(label.path);
        const range = uids.join(',');
        if (add.length > 0) await client.messageFlagsAdd(range, add, { uid: true, silent: true });
        if (remove.length > 0) await client.messageFlagsRemove(range, remove, { uid: true, silent: true });
      }
      await unselect(client);
    });
    // The change reaches the index (and the stream) through the same sync as any other. Unlike a
    // read, this one may not fall back on the index: it would answer with the flags from before.
    await this.fresh(this.runtime(inbox), false).catch((err: unknown) => {
      throw isApiError(err) && err.status === 503 ? err : unavailable('the change was made but could not be read back from the mail server; try again');
    });
  }

  async watch(inbox: MailInbox, listener: (change: LiveChange) => void, onGap?: () => void): Promise<Unwatch> {
    // Changes other processes apply reach this process's listeners through the bus.
    await this.live.start();
    const rt = this.runtime(inbox);
    const unlisten = this.live.subscribe(inbox.id, listener, onGap);
    rt.listeners.add(listener);
    this.leaseTimer ??= this.startLeaseTimer();
    // This process watches the inbox unless another one holds its lease; then that one's syncs
    // reach the listeners here through the bus, and the lease timer takes over if it lapses.
    const watcher = this.takeWatch(rt);
    if (watcher) {
      await watcher.started;
      // At the connection cap a watcher is refused (503) rather than left retrying for a stream
      // that would never be live.
      if (!watcher.live && watcher.lastError instanceof PoolBusyError) {
        unlisten();
        rt.listeners.delete(listener);
        if (rt.listeners.size === 0 && rt.watcher === watcher) await this.dropWatch(rt);
        throw watcher.lastError;
      }
    }
    // Caught up to now before the caller tells its client the stream is open.
    await this.fresh(rt, false).catch((err: unknown) => this.o.log.warn({ err, inbox: inbox.id }, 'sync before streaming failed'));
    let done = false;
    return async () => {
      if (done) return;
      done = true;
      unlisten();
      rt.listeners.delete(listener);
      if (rt.listeners.size === 0) await this.dropWatch(rt);
    };
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
    await this.pool.close();
  }

  /** Listeners of an inbox, for tests and metrics. */
  watching(inboxId: string): { listeners: number; live: boolean } {
    const rt = this.inboxes.get(inboxId);
    return { listeners: rt?.listeners.size ?? 0, live: rt?.watcher?.live ?? false };
  }

  /** Starts the inbox's watcher here if this process may hold it (its lease, when there are leases). */
  private takeWatch(rt: InboxRuntime, claimed = false): Watcher | null {
    if (rt.watcher || this.closed) return rt.watcher;
    const leases = this.o.leases;
    if (leases && !claimed && !leases.claim([rt.inbox.id], this.live.origin, this.o.imap.watchLeaseMs).has(rt.inbox.id)) return null;
    const inbox = rt.inbox;
    rt.watcher = new Watcher({
      open: () => this.pool.openDedicated(inbox.imapUser),
      // Every (re)connect asks for a pass too: a watcher taking over catches up at once.
      onSignal: () => void this.fresh(rt, false).catch(() => undefined),
      log: this.o.log.child({ inbox: inbox.id }),
      pollMs: this.o.pollMs ?? 45_000,
    });
    return rt.watcher;
  }

  /** Stops the inbox's watcher here (if any) and gives up its lease. */
  private async dropWatch(rt: InboxRuntime, release = true): Promise<void> {
    const watcher = rt.watcher;
    if (!watcher) return;
    rt.watcher = null;
    if (release) {
      try {
        this.o.leases?.release([rt.inbox.id], this.live.origin);
      } catch (err) {
        this.o.log.warn({ err, inbox: rt.inbox.id }, 'could not release the watcher lease; another process takes over when it expires');
      }
    }
    await watcher.stop();
  }

  private startLeaseTimer(): NodeJS.Timeout {
    const timer = setInterval(() => this.renewLeases(), Math.max(100, Math.floor(this.o.imap.watchLeaseMs / 3)));
    timer.unref();
    return timer;
  }

  /** Every third of a lease: renews the leases held, and takes those that lapsed, in one write. */
  private renewLeases(): void {
    const leases = this.o.leases;
    if (!leases || this.closed) return;
    const wanted = [...this.inboxes.values()].filter((rt) => rt.listeners.size > 0);
    if (wanted.length === 0) return;
    let held: Set<string>;
    try {
      held = leases.claim(wanted.map((rt) => rt.inbox.id), this.live.origin, this.o.imap.watchLeaseMs);
    } catch (err) {
      // A watcher keeps running on a lease it could not renew; if another process takes it
      // meanwhile, both watch until the next renewal says so (correct, one connection more).
      this.o.log.warn({ err }, 'could not renew the watcher leases; trying again');
      return;
    }
    for (const rt of wanted) {
      if (held.has(rt.inbox.id)) {
        if (!rt.watcher) this.takeWatch(rt, true);
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

  /**
   * A sync pass that starts after this call. Callers arriving while one runs share the next
   * one, so any number of concurrent reads cost at most two passes, and passes never overlap.
   */
  private fresh(rt: InboxRuntime, forRead: boolean): Promise<void> {
    let pass: Promise<void>;
    if (!rt.running) {
      pass = this.startPass(rt);
    } else {
      rt.next ??= rt.running.catch(() => undefined).then(() => {
        rt.next = null;
        return this.startPass(rt);
      });
      pass = rt.next;
    }
    if (!forRead) return pass;
    return pass.catch((err: unknown) => {
      // A read during a mail server outage is served from the index when there is one.
      if (this.o.store.isSeeded(rt.inbox.id)) {
        this.o.log.warn({ err, inbox: rt.inbox.id }, 'serving the index without a sync: the mail server did not answer');
        return;
      }
      throw err instanceof Error && 'status' in err ? err : unavailable('the mail server is not reachable; try again later');
    });
  }

  private startPass(rt: InboxRuntime): Promise<void> {
    if (this.closed) return Promise.reject(unavailable('shutting down'));
    const pass = this.pool
      .use(rt.inbox.imapUser, (client) => this.sync.run(client, rt.inbox))
      .then(
        () => {
          rt.lastError = null;
        },
        (err: unknown) => {
          rt.lastError = err;
          this.o.log.warn({ err, inbox: rt.inbox.id }, 'index sync failed');
          throw err;
        },
      )
      .finally(() => {
        if (rt.running === pass) rt.running = null;
      });
    rt.running = pass;
    return pass;
  }

  private publish(inboxId: string, changes: LiveChange[]): void {
    try {
      this.o.onChanges?.(inboxId, changes);
    } catch (err) {
      this.o.log.warn({ err }, 'the change hook failed');
    }
    // This process's listeners at once; the other processes' through the bus.
    this.live.applied(inboxId, changes);
  }
}
