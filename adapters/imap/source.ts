// The mail source over IMAP: keeps each inbox's index current (sync on demand, or a live
// watcher while someone listens), changes flags with IMAP STORE, and hands the changes each
// sync applied to the live feed (lib/mail/live.ts), which delivers them to this process's
// listeners of the inbox and, over the Bus, to the other processes sharing the store.
import type { Logger } from 'pino';
import { isApiError, unavailable } from '../../lib/errors.ts';
import { MailLiveFeed } from '../../lib/mail/live.ts';
import type { LiveChange, MailIndexStore, MailInbox, MailSource, Unwatch } from '../../lib/mail/types.ts';
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

  async watch(inbox: MailInbox, listener: (change: LiveChange) => void): Promise<Unwatch> {
    // Changes other processes apply reach this process's listeners through the bus.
    await this.live.start();
    const rt = this.runtime(inbox);
    const unlisten = this.live.subscribe(inbox.id, listener);
    rt.listeners.add(listener);
    if (!rt.watcher) {
      rt.watcher = new Watcher({
        open: () => this.pool.openDedicated(inbox.imapUser),
        onSignal: () => void this.fresh(rt, false).catch(() => undefined),
        log: this.o.log.child({ inbox: inbox.id }),
        pollMs: this.o.pollMs ?? 45_000,
      });
    }
    const watcher = rt.watcher;
    await watcher.started;
    // At the connection cap a watcher is refused (503) rather than left retrying for a stream
    // that would never be live.
    if (!watcher.live && watcher.lastError instanceof PoolBusyError) {
      unlisten();
      rt.listeners.delete(listener);
      if (rt.listeners.size === 0 && rt.watcher === watcher) {
        rt.watcher = null;
        await watcher.stop();
      }
      throw watcher.lastError;
    }
    // Caught up to now before the caller tells its client the stream is open.
    await this.fresh(rt, false).catch((err: unknown) => this.o.log.warn({ err, inbox: inbox.id }, 'sync before streaming failed'));
    let done = false;
    return async () => {
      if (done) return;
      done = true;
      unlisten();
      rt.listeners.delete(listener);
      if (rt.listeners.size === 0 && rt.watcher === watcher) {
        rt.watcher = null;
        await watcher.stop();
      }
    };
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const rt of this.inboxes.values()) {
      rt.listeners.clear();
      await rt.watcher?.stop();
      rt.watcher = null;
    }
    await this.live.close();
    await this.pool.close();
  }

  /** Listeners of an inbox, for tests and metrics. */
  watching(inboxId: string): { listeners: number; live: boolean } {
    const rt = this.inboxes.get(inboxId);
    return { listeners: rt?.listeners.size ?? 0, live: rt?.watcher?.live ?? false };
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
