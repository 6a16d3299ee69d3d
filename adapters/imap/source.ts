// The mail source over IMAP: sync passes (sync.ts) on pooled connections, flag changes with
// UID STORE, and watchers (watcher.ts) on dedicated connections. It speaks IMAP only: when to
// sync, when to trust the index and who watches are lib/mail/mirror.ts's decisions.
import type { Logger } from 'pino';
import type { ImapMetrics } from '../../lib/metrics.ts';
import type { LabelState, LiveChange, MailInbox, LocationKey } from '../../lib/mail/types.ts';
import type { MailIndexStore, MailSource, MailWatcher } from '../../lib/mail/ports.ts';
import { unavailable } from '../../lib/errors.ts';
import { ImapPool, type ImapSettings } from './pool.ts';
import { REFERENCES_ITEMS, uidFetch, uidSets, unselect } from './raw.ts';
import { IndexSync } from './sync.ts';
import { Watcher } from './watcher.ts';

export interface ImapSourceOptions {
  imap: ImapSettings;
  store: MailIndexStore;
  log: Logger;
  /** The watcher's safety poll (docs/design-facts.md, "The index": every 30-60 s). */
  pollMs?: number;
  /** The watcher's poll on a server without NOTIFY, where only INBOX signals (docs/mail.md). */
  fallbackPollMs?: number;
  /** The pool's waits for a free connection (lib/metrics.ts). */
  metrics?: ImapMetrics;
}

export class ImapMailSource implements MailSource {
  readonly pool: ImapPool;
  private readonly indexSync: IndexSync;

  constructor(private readonly o: ImapSourceOptions) {
    this.pool = new ImapPool(o.imap, o.log, o.metrics);
    this.indexSync = new IndexSync({
      store: o.store,
      log: o.log,
      // Bulk lane: a fill never takes the connection a read or a STORE needs. Only a connection
      // free right now: a fill waiting for more while it holds one could deadlock at the cap.
      extra: (inbox, task) => this.pool.tryUse(inbox.imapUser, task, 'bulk'),
      parallel: Math.min(o.imap.maxPerInbox, 4),
      previews: o.imap.previews === true,
    });
  }

  async sync(inbox: MailInbox, onApplied: (changes: LiveChange[]) => void, options: { background?: boolean } = {}): Promise<void> {
    await this.pool.use(
      inbox.imapUser,
      (client) => this.indexSync.run(client, inbox, (_id, changes) => onApplied(changes)),
      options.background ? 'bulk' : 'interactive',
    );
  }

  async storeFlags(inbox: MailInbox, at: readonly LocationKey[], add: string[], remove: string[]): Promise<{ missed: LocationKey[] }> {
    const byLabel = new Map<string, number[]>();
    for (const { labelGuid, uid } of at) byLabel.set(labelGuid, [...(byLabel.get(labelGuid) ?? []), uid]);
    const missed: LocationKey[] = [];
    await this.pool.use(inbox.imapUser, async (client) => {
      missed.length = 0; // a retry on a fresh connection starts over
      for (const [labelGuid, uids] of byLabel) {
        const label = await this.o.store.label(inbox.id, labelGuid);
        if (!label) {
          for (const uid of uids) missed.push({ labelGuid, uid });
          continue;
        }
        const opened = await client.mailboxOpen(label.path).catch(() => null);
        // The label is gone (deleted or renamed), or it is another one now: nothing was stored.
        if (!opened || Number(opened.uidValidity) !== label.uidValidity) {
          for (const uid of uids) missed.push({ labelGuid, uid });
          continue;
        }
        const range = uids.join(',');
        if (add.length > 0) await client.messageFlagsAdd(range, add, { uid: true, silent: true });
        if (remove.length > 0) await client.messageFlagsRemove(range, remove, { uid: true, silent: true });
        // A STORE on a UID that is not there is a no-op, not an error: ask which UIDs are there
        // now. One more round trip, on this selected mailbox, only for flag changes.
        const present = new Set<number>();
        await uidFetch(client, range, ['UID'], (row) => void present.add(row.uid));
        for (const uid of uids) if (!present.has(uid)) missed.push({ labelGuid, uid });
      }
      await unselect(client);
    });
    return { missed };
  }

  async relabel(
    inbox: MailInbox,
    change: { from: LocationKey; add: readonly string[]; remove: readonly LocationKey[] },
  ): Promise<{ missed: boolean }> {
    const pathOf = async (labelGuid: string): Promise<LabelState> => {
      const label = await this.o.store.label(inbox.id, labelGuid);
      if (!label) throw unavailable('a label changed on the mail server meanwhile; try again');
      return label;
    };
    const from = await pathOf(change.from.labelGuid);
    const targets = await Promise.all(change.add.map(pathOf));
    const moving = change.remove.some((p) => p.labelGuid === from.guid && p.uid === change.from.uid);
    const others = change.remove.filter((p) => !(p.labelGuid === from.guid && p.uid === change.from.uid));
    const uid = String(change.from.uid);
    let missed = false;
    await this.pool.use(
      inbox.imapUser,
      async (client) => {
        try {
          // Every open checks UIDVALIDITY: a label renumbered meanwhile holds other messages now.
          const open = async (label: LabelState): Promise<boolean> => {
            const opened = await client.mailboxOpen(label.path).catch(() => null);
            return opened !== null && Number(opened.uidValidity) === label.uidValidity;
          };
          if (targets.length > 0) {
            if (!(await open(from))) return void (missed = true);
            // With a move, the last target is the MOVE's: the copies before it still have a source.
            const copies = moving ? targets.slice(0, -1) : targets;
            for (const t of copies) {
              const copied = await client.messageCopy(uid, t.path, { uid: true });
              // No COPYUID for our UID: it is not there (gone meanwhile), and nothing was copied.
              if (!copied || !copied.uidMap?.has(change.from.uid)) return void (missed = true);
            }
            if (moving) {
              const moved = await client.messageMove(uid, targets.at(-1)!.path, { uid: true });
              if (!moved || !moved.uidMap?.has(change.from.uid)) return void (missed = true);
            }
          }
          // Without targets there is no MOVE: every place asked for is expunged, `from` included.
          for (const place of targets.length > 0 ? others : change.remove) {
            const label = await pathOf(place.labelGuid);
            // Gone or renumbered: the message is not there any more, which is what was asked.
            if (!(await open(label))) continue;
            // \Deleted, then UID EXPUNGE of that one UID (UIDPLUS): no other message is touched.
            if (!(await client.messageDelete(String(place.uid), { uid: true })))
              throw unavailable('the mail server did not remove the message from a label; try again');
          }
        } finally {
          if (client.usable) await unselect(client).catch(() => undefined);
        }
        // Not retried on a fresh connection: a COPY that completed before the connection died
        // would be made again (a second copy in that label). The caller syncs and the API's retry
        // plans again from where the message is then (docs/organize.md, "Labels").
      },
      'interactive',
      undefined,
      false,
    );
    return { missed };
  }

  /**
   * UID SEARCH BODY/TEXT, label by label. Dovecot answers from its full-text index when one is
   * configured (fts plugin; a label's first search builds its index), else by reading every
   * message of the label (docs/search.md). A search refused, or not answered within
   * bodySearchTimeoutMs (Dovecot indexing a large mailbox), is a 503, never "nothing found".
   */
  async searchContent(
    inbox: MailInbox,
    labels: readonly LabelState[],
    terms: { body?: string; text?: string },
  ): Promise<Map<string, number[]>> {
    const found = new Map<string, number[]>();
    const late = () =>
      unavailable('the mail server has not finished this body search (it may be indexing the inbox); try again shortly', 30);
    await this.pool.use(
      inbox.imapUser,
      async (client) => {
        found.clear(); // a retry on a fresh connection starts over
        try {
          for (const label of labels) {
            const opened = await client.mailboxOpen(label.path, { readOnly: true }).catch(() => null);
            // Gone, or another mailbox by that name now: the index will learn it on its next sync.
            if (!opened || Number(opened.uidValidity) !== label.uidValidity) continue;
            if (opened.exists === 0) continue;
            const uids = await client.search(terms, { uid: true });
            if (!uids) throw unavailable('the mail server refused the search; try again later');
            if (uids.length > 0) found.set(label.guid, uids);
          }
        } finally {
          if (client.usable) await unselect(client).catch(() => undefined);
        }
      },
      'interactive',
      { ms: this.o.imap.bodySearchTimeoutMs, error: late },
    );
    return found;
  }

  async references(
    inbox: MailInbox,
    labels: readonly LabelState[],
    at: ReadonlyArray<LocationKey & { msgGuid: string }>,
  ): Promise<Map<string, string[]>> {
    const found = new Map<string, string[]>();
    await this.pool.use(
      inbox.imapUser,
      async (client) => {
        found.clear(); // a retry on a fresh connection starts over
        try {
          for (const label of labels) {
            const here = new Map(at.filter((p) => p.labelGuid === label.guid).map((p) => [p.uid, p.msgGuid]));
            if (here.size === 0) continue;
            const opened = await client.mailboxOpen(label.path, { readOnly: true }).catch(() => null);
            // Gone, or another mailbox by that name now: the index will learn it on its next sync.
            if (!opened || Number(opened.uidValidity) !== label.uidValidity) continue;
            for (const set of uidSets(here.keys())) {
              await uidFetch(client, set, REFERENCES_ITEMS, (row) => {
                if (row.message && here.get(row.uid) === row.message.guid) found.set(row.message.guid, [...(row.message.references ?? [])]);
              });
            }
          }
        } finally {
          if (client.usable) await unselect(client).catch(() => undefined);
        }
      },
      'bulk',
    );
    return found;
  }

  watch(inbox: MailInbox, onSignal: () => void): MailWatcher {
    return new Watcher({
      open: () => this.pool.openDedicated(inbox.imapUser),
      onSignal,
      log: this.o.log.child({ inbox: inbox.id }),
      pollMs: this.o.pollMs ?? 45_000,
      fallbackPollMs: this.o.fallbackPollMs ?? 5_000,
    });
  }

  async close(): Promise<void> {
    await this.pool.close();
  }
}
