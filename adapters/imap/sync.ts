// The index sync (DESIGN.md 4). One pass: LIST-STATUS says which labels changed; for each,
// EXAMINE, then `UID FETCH 1:<known> (FLAGS) (CHANGEDSINCE m VANISHED)` for flag changes and
// expunges, then `UID FETCH <uidnext>:*` with X-GUID for additions. A new UIDVALIDITY re-seeds
// the label, emitting only what really differs by GUID. A count that still disagrees with the
// server is reconciled with UID SEARCH ALL.
//
// Every diff is applied in a transaction and only then published as LiveChanges: what the stream
// says is exactly what the index now holds. Passes of one inbox never overlap (see source.ts).
import type { ImapFlow } from 'imapflow';
import type { Logger } from 'pino';
import { idFromGuid } from '../../lib/ids.ts';
import { fromImapFlags } from '../../lib/mail/flags.ts';
import type { IndexOp, LabelState, LiveChange, Location, MailIndexStore, MailInbox } from '../../lib/mail/types.ts';
import { FLAG_ITEMS, FULL_ITEMS, listStatus, uidFetch, unselect, type FetchedRow, type ListedMailbox } from './raw.ts';

const BATCH = 500;

export type Publish = (inboxId: string, changes: LiveChange[]) => void;

/** Runs a task on another connection of the inbox if one is free now; null when none is. */
export type Extra = (inbox: MailInbox, task: (client: ImapFlow) => Promise<void>) => Promise<void> | null;

interface FillTarget {
  guid: string;
  path: string;
  uidValidity: number;
  uidNext: number;
  messages: number;
}

type FullRow = FetchedRow & { message: NonNullable<FetchedRow['message']>; flags: NonNullable<FetchedRow['flags']> };

/**
 * Collects ops and their live changes; flushes both every BATCH ops. `progress`, when set, is the
 * label's state the rows so far make true: it is saved in the same transaction as each batch, so
 * a pass that fails after a batch resumes after it instead of fetching (and announcing) it again.
 */
class Batch {
  private ops: IndexOp[] = [];
  /** Each with the index of its op: a change whose op the store did not apply is not announced. */
  private changes: Array<{ op: number; change: LiveChange }> = [];
  progress: LabelState | null = null;

  constructor(
    private readonly store: MailIndexStore,
    private readonly inboxId: string,
    private readonly publish: Publish | null,
  ) {}

  /** Whether changes are announced at all (not during an inbox's first fill). */
  get publishing(): boolean {
    return this.publish !== null;
  }

  add(op: IndexOp, change: LiveChange | null): void {
    this.ops.push(op);
    if (change && this.publish) this.changes.push({ op: this.ops.length - 1, change });
    if (this.ops.length >= BATCH) this.flush();
  }

  /** Another batch for the same inbox (a parallel fetch fills its own; it saves no progress). */
  sibling(): Batch {
    return new Batch(this.store, this.inboxId, this.publish);
  }

  /** Changes already in the index. */
  announce(changes: LiveChange[]): void {
    this.flush();
    if (this.publish && changes.length > 0) this.publish(this.inboxId, changes);
  }

  flush(label?: LabelState): void {
    const state = label ?? this.progress ?? undefined;
    if (this.ops.length === 0 && !label) return;
    const unapplied = this.store.apply(this.inboxId, this.ops, state);
    if (label) this.progress = null;
    // Another process applied a newer state first (and announced it): an older one is no news.
    const skip = new Set(unapplied);
    const changes = this.changes.filter((c) => !skip.has(c.op)).map((c) => c.change);
    this.ops = [];
    this.changes = [];
    if (changes.length > 0) this.publish?.(this.inboxId, changes);
  }
}

// Each change also says where in IMAP it happened (`at`): label, UIDVALIDITY, UID and, for
// flags, the MODSEQ. That is what makes it one change when two processes both see it.
const added = (msgGuid: string, labelGuid: string, uidValidity: number, uid: number): LiveChange => ({
  type: 'message.added',
  msgId: idFromGuid('msg', msgGuid),
  labelId: idFromGuid('lbl', labelGuid),
  uid,
  at: { labelGuid, uidValidity, uid },
});
const removed = (l: Pick<Location, 'msgGuid' | 'labelGuid' | 'uid'>, uidValidity: number): LiveChange => ({
  type: 'message.removed',
  msgId: idFromGuid('msg', l.msgGuid),
  labelId: idFromGuid('lbl', l.labelGuid),
  at: { labelGuid: l.labelGuid, uidValidity, uid: l.uid },
});
const flagsChanged = (l: Pick<Location, 'msgGuid' | 'labelGuid' | 'uid'>, uidValidity: number, modseq: number, flags: string[]): LiveChange => ({
  type: 'message.flags',
  msgId: idFromGuid('msg', l.msgGuid),
  labelId: idFromGuid('lbl', l.labelGuid),
  flags: fromImapFlags(flags).flags,
  at: { labelGuid: l.labelGuid, uidValidity, uid: l.uid, modseq },
});

const sameFlags = (a: readonly string[], b: readonly string[]) => a.length === b.length && a.every((f, i) => f === b[i]);

export interface SyncStats {
  labelsChecked: number;
  labelsSynced: number;
}

export class IndexSync {
  /**
   * @param extra runs a task on another connection of the inbox if one is free (a big label is
   *   filled over several at once: Dovecot parses, and with mail_crypt decrypts, each message it
   *   has not cached, which is CPU work it can spread over cores)
   * @param parallel how many connections a fill may use in all
   */
  constructor(
    private readonly store: MailIndexStore,
    private readonly publish: Publish,
    private readonly log: Logger,
    private readonly extra: Extra = () => null,
    private readonly parallel = 1,
  ) {}

  /** One full pass over the inbox on the given connection. */
  async run(client: ImapFlow, inbox: MailInbox): Promise<SyncStats> {
    // A first fill (a new inbox, or a lost index) is silent: nothing changed, the index was empty.
    const seeded = this.store.isSeeded(inbox.id);
    const publish = seeded ? this.publish : null;
    await unselect(client);
    const listed = await listStatus(client);
    const known = new Map(this.store.labels(inbox.id).map((l) => [l.guid, l]));
    const stats: SyncStats = { labelsChecked: 0, labelsSynced: 0 };
    for (const box of listed) {
      if (!box.selectable) continue;
      stats.labelsChecked++;
      const state = known.get(box.guid) ?? null;
      known.delete(box.guid);
      if (await this.syncLabel(client, inbox, box, state, publish)) stats.labelsSynced++;
    }
    // Labels deleted on the server: their messages left them.
    for (const gone of known.values()) {
      const locations = this.store.dropLabel(inbox.id, gone.guid);
      if (publish && locations.length > 0) publish(inbox.id, locations.map((l) => removed(l, gone.uidValidity)));
    }
    if (!seeded) this.store.markSeeded(inbox.id, true);
    await unselect(client);
    return stats;
  }

  private async syncLabel(client: ImapFlow, inbox: MailInbox, box: ListedMailbox, state: LabelState | null, publish: Publish | null): Promise<boolean> {
    const renamed = state !== null && (state.path !== box.path || state.specialUse !== box.specialUse);
    // Same UIDVALIDITY, UIDNEXT and HIGHESTMODSEQ: nothing was added, changed or expunged (every
    // expunge raises HIGHESTMODSEQ under CONDSTORE). This is the whole cost of an idle read.
    if (state && state.uidValidity === box.uidValidity && state.uidNext === box.uidNext && state.highestModseq === box.highestModseq) {
      if (renamed) this.store.apply(inbox.id, [], { ...state, path: box.path, specialUse: box.specialUse });
      return false;
    }
    const mailbox = await client.mailboxOpen(box.path, { readOnly: true });
    // Every value below comes from this mailbox's own EXAMINE (never another folder's: see the
    // EmailEngine warning in DESIGN.md 2).
    const uidValidity = Number(mailbox.uidValidity);
    const modseqAtOpen = Number(mailbox.highestModseq ?? 0n);
    const uidNextAtOpen = mailbox.uidNext;
    const labelGuid = box.guid;
    const batch = new Batch(this.store, inbox.id, publish);
    const base = { guid: labelGuid, path: box.path, specialUse: box.specialUse, uidValidity };
    const target = { guid: labelGuid, path: box.path, uidValidity, uidNext: uidNextAtOpen, messages: mailbox.exists };

    if (!state) {
      // A new label in a seeded inbox reports its messages as added: a mail app made it and
      // filled it. Its progress is saved with each batch of the fill's first UID range.
      await this.fill(client, inbox, target, batch, { ...base, uidNext: 1, highestModseq: 0 });
    } else if (state.uidValidity !== uidValidity) {
      // A new UIDVALIDITY re-seeds, reporting only what differs by GUID.
      await this.reseed(client, inbox, target, { ...base, highestModseq: modseqAtOpen }, state.uidValidity, batch);
    } else {
      if (state.uidNext > 1 && modseqAtOpen > state.highestModseq) {
        await uidFetch(
          client,
          `1:${state.uidNext - 1}`,
          FLAG_ITEMS,
          (row) => this.flagRow(inbox.id, labelGuid, uidValidity, row, batch),
          { changedSince: state.highestModseq, onVanished: (ranges) => this.vanished(inbox.id, labelGuid, uidValidity, ranges, batch) },
        );
      }
      if (uidNextAtOpen > state.uidNext) {
        // Flag changes and expunges above are in the same batches, so the old modseq stays until
        // the end: a retry asks for them again and finds nothing new to say.
        await uidFetch(client, `${state.uidNext}:*`, FULL_ITEMS, (row) => {
          if (row.uid < state.uidNext) return;
          batch.progress = { ...base, uidNext: row.uid + 1, highestModseq: state.highestModseq };
          this.newRow(inbox.id, labelGuid, uidValidity, row, batch);
        });
      }
    }
    batch.flush();
    let uidNext = Math.max(uidNextAtOpen, state?.uidValidity === uidValidity ? state.uidNext : 1);
    const maxIndexed = this.maxUid(inbox.id, labelGuid);
    uidNext = Math.max(uidNext, maxIndexed + 1);

    // The safety net: the server's count must match the index. A difference left after the
    // incremental steps (an expunge reported outside our commands) is settled by the UID list.
    const status = await client.status(box.path, { messages: true });
    const serverCount = status && typeof status.messages === 'number' ? status.messages : null;
    if (serverCount !== null && serverCount !== this.store.countIn(inbox.id, labelGuid)) {
      await this.reconcile(client, inbox.id, labelGuid, uidValidity, uidNext, batch);
    }
    batch.flush({ guid: labelGuid, path: box.path, specialUse: box.specialUse, uidValidity, uidNext, highestModseq: modseqAtOpen });
    return true;
  }

  private maxUid(inboxId: string, labelGuid: string): number {
    const [top] = this.store.page(inboxId, labelGuid, null, 1);
    return top?.location.uid ?? 0;
  }

  private newRow(inboxId: string, labelGuid: string, uidValidity: number, row: FetchedRow, batch: Batch): void {
    if (!row.message || !row.flags) return;
    const location: Location = { labelGuid, uid: row.uid, msgGuid: row.message.guid, modseq: row.modseq, flags: row.flags };
    batch.add({ op: 'put', message: row.message, location }, this.isNews(inboxId, location) ? added(row.message.guid, labelGuid, uidValidity, row.uid) : null);
  }

  /** Not already indexed at this label and UID (a retried pass fetches rows it already has). */
  private isNews(inboxId: string, l: Location): boolean {
    const [known] = this.store.locations(inboxId, l.labelGuid, [l.uid]);
    return known?.msgGuid !== l.msgGuid;
  }

  private flagRow(inboxId: string, labelGuid: string, uidValidity: number, row: FetchedRow, batch: Batch): void {
    if (!row.flags) return;
    const [known] = this.store.locations(inboxId, labelGuid, [row.uid]);
    if (!known || sameFlags(known.flags, row.flags)) return;
    batch.add({ op: 'flags', labelGuid, uid: row.uid, modseq: row.modseq, flags: row.flags }, flagsChanged(known, uidValidity, row.modseq, row.flags));
  }

  private vanished(inboxId: string, labelGuid: string, uidValidity: number, ranges: Array<[number, number]>, batch: Batch): void {
    for (const [from, to] of ranges) {
      // The server may name UIDs we never had; only what the index holds is removed.
      for (let after = from - 1; ; ) {
        const rows = this.store.uidsOf(inboxId, labelGuid, after, 1000).filter((r) => r.uid <= to);
        for (const r of rows) batch.add({ op: 'remove', labelGuid, uid: r.uid }, removed({ msgGuid: r.msgGuid, labelGuid, uid: r.uid }, uidValidity));
        if (rows.length < 1000) break;
        after = rows.at(-1)!.uid;
      }
    }
  }

  /** Fills a label the index has never seen, in batches; `progress` is saved as the first range fills. */
  private async fill(client: ImapFlow, inbox: MailInbox, box: FillTarget, batch: Batch, progress: LabelState): Promise<void> {
    const labelGuid = box.guid;
    await this.fetchAll(client, inbox, box, batch, (row, into, first) => {
      const location: Location = { labelGuid, uid: row.uid, msgGuid: row.message.guid, modseq: row.modseq, flags: row.flags };
      // The first range starts at UID 1 and arrives in UID order: every UID below this row's is in.
      if (first) into.progress = { ...progress, uidNext: row.uid + 1 };
      const news = into.publishing && this.isNews(inbox.id, location);
      into.add({ op: 'put', message: row.message, location }, news ? added(row.message.guid, labelGuid, box.uidValidity, row.uid) : null);
    });
    batch.flush();
  }

  /**
   * A new UIDVALIDITY: the old UIDs mean nothing now. The label is refilled beside its old rows
   * (staged, invisible to reads) and swapped in by one transaction: no read sees it half filled,
   * and a refill that fails keeps the old rows (and ids) for the next pass to try again. Only
   * GUID-level differences are announced, once the swap is committed.
   */
  private async reseed(
    client: ImapFlow,
    inbox: MailInbox,
    box: FillTarget,
    state: Omit<LabelState, 'uidNext'>,
    oldUidValidity: number,
    batch: Batch,
  ): Promise<void> {
    const labelGuid = box.guid;
    // Each GUID the label held, at its lowest old UID (a removal is named by where it was).
    const before = new Map<string, number>();
    for (let after = 0; ; ) {
      const rows = this.store.uidsOf(inbox.id, labelGuid, after, 5000);
      for (const r of rows) if (!before.has(r.msgGuid)) before.set(r.msgGuid, r.uid);
      if (rows.length < 5000) break;
      after = rows.at(-1)!.uid;
    }
    this.store.clearStaged(inbox.id, labelGuid);
    const staged = new Batch(this.store, inbox.id, null);
    const after = new Set<string>();
    const news: LiveChange[] = [];
    let top = 0;
    await this.fetchAll(client, inbox, box, staged, (row, into) => {
      after.add(row.message.guid);
      top = Math.max(top, row.uid);
      const location: Location = { labelGuid, uid: row.uid, msgGuid: row.message.guid, modseq: row.modseq, flags: row.flags };
      if (batch.publishing && !before.has(row.message.guid)) news.push(added(row.message.guid, labelGuid, box.uidValidity, row.uid));
      into.add({ op: 'stage', message: row.message, location }, null);
    });
    staged.flush();
    this.store.commitStaged(inbox.id, { ...state, uidNext: Math.max(box.uidNext, top + 1) });
    const gone = [...before]
      .filter(([msgGuid]) => !after.has(msgGuid))
      .map(([msgGuid, uid]) => removed({ msgGuid, labelGuid, uid }, oldUidValidity));
    batch.announce([...news, ...gone]);
  }

  /**
   * Every message of the label, into `batch` (a big label over several connections at once, the
   * extra ones only if the pool has them free right now: waiting for more while holding one
   * could deadlock two inboxes at the cap).
   */
  private async fetchAll(client: ImapFlow, inbox: MailInbox, box: FillTarget, batch: Batch, onRow: (row: FullRow, into: Batch, first: boolean) => void): Promise<void> {
    const fill = (c: ImapFlow, range: string, into: Batch, first = false) =>
      uidFetch(c, range, FULL_ITEMS, (row) => {
        if (row.message && row.flags) onRow(row as FullRow, into, first);
      });
    const parts = box.messages >= 4000 ? Math.max(1, this.parallel) : 1;
    if (parts === 1) {
      await fill(client, '1:*', batch, true);
      return;
    }
    // UID ranges of equal width; the last one is open-ended so mail arriving meanwhile is in it.
    const width = Math.ceil(box.uidNext / parts);
    const ranges = Array.from({ length: parts }, (_, i) => (i === parts - 1 ? `${i * width + 1}:*` : `${i * width + 1}:${(i + 1) * width}`));
    const leftover: string[] = [];
    const elsewhere: Array<Promise<void>> = [];
    for (const range of ranges.slice(1)) {
      const own = batch.sibling();
      const started = this.extra(inbox, async (c) => {
        const opened = await c.mailboxOpen(box.path, { readOnly: true });
        // Another UIDVALIDITY means other UIDs: this pass fails and the next starts over.
        if (Number(opened.uidValidity) !== box.uidValidity) throw new Error(`UIDVALIDITY of ${box.path} changed during its fill`);
        try {
          await fill(c, range, own);
          own.flush();
        } finally {
          await unselect(c);
        }
      });
      if (started) elsewhere.push(started);
      else leftover.push(range);
    }
    // The first range, then whatever found no free connection, on the connection this pass holds.
    const here = (async () => {
      await fill(client, ranges[0]!, batch, true);
      for (const range of leftover) {
        batch.flush();
        batch.progress = null;
        await fill(client, range, batch);
      }
    })();
    const results = await Promise.allSettled([here, ...elsewhere]);
    const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failed) throw failed.reason;
  }

  /** Settles the index against the server's full UID list of the label. */
  private async reconcile(client: ImapFlow, inboxId: string, labelGuid: string, uidValidity: number, uidNext: number, batch: Batch): Promise<void> {
    const found = await client.search({ all: true }, { uid: true });
    const onServer = new Set(found || []);
    this.log.debug({ inboxId, labelGuid, server: onServer.size }, 'reconciling a label by its UID list');
    const missing: number[] = [];
    for (let after = 0; ; ) {
      const rows = this.store.uidsOf(inboxId, labelGuid, after, 5000);
      for (const r of rows) {
        if (!onServer.has(r.uid)) batch.add({ op: 'remove', labelGuid, uid: r.uid }, removed({ msgGuid: r.msgGuid, labelGuid, uid: r.uid }, uidValidity));
        else onServer.delete(r.uid);
      }
      if (rows.length < 5000) break;
      after = rows.at(-1)!.uid;
    }
    // UIDs the index lacks below uidNext (at or above it, the next pass fetches them).
    for (const uid of onServer) if (uid < uidNext) missing.push(uid);
    if (missing.length > 0) {
      await uidFetch(client, missing.join(','), FULL_ITEMS, (row) => this.newRow(inboxId, labelGuid, uidValidity, row, batch));
    }
  }
}
