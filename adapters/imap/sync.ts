// The index sync (docs/mail.md, "The sync"). One pass: LIST-STATUS says which labels changed; for each,
// EXAMINE, then `UID FETCH 1:<known> (FLAGS) (CHANGEDSINCE m VANISHED)` for flag changes and
// expunges, then `UID FETCH <uidnext>:*` with X-GUID for additions. A new UIDVALIDITY re-seeds
// the label, emitting only what really differs by GUID. A count that still disagrees with the
// server is reconciled with UID SEARCH ALL.
//
// Every diff is applied in transactions (IndexWriter), each change published as a LiveChange only
// once its transaction committed: what the stream says is exactly what the index now holds.
// Passes of one inbox never overlap (lib/mail/mirror.ts).
import { setImmediate as nextTurn } from 'node:timers/promises';
import type { ImapFlow } from 'imapflow';
import type { Logger } from 'pino';
import { idFromGuid } from '../../lib/ids.ts';
import { fromImapFlags } from '../../lib/mail/flags.ts';
import { compareLabels } from '../../lib/mail/labels.ts';
import { keywordsChange, LabelStateCollector } from '../../lib/mail/derived-changes.ts';
import type { IndexOp, LabelChange, LabelState, LiveChange, Location, MailInbox, MessageChange } from '../../lib/mail/types.ts';
import type { MailIndexStore } from '../../lib/mail/ports.ts';
import {
  FLAG_ITEMS,
  fullItems,
  listStatus,
  uidFetch,
  uidSearchAll,
  uidSets,
  unselect,
  type FetchedRow,
  type ListedMailbox,
} from './raw.ts';

/** Ops collected before they are written. */
const BATCH = 500;
/**
 * A first fill runs newest first in UID ranges: a small first one (the newest page is readable
 * within a second), then bigger ones. After each, the label's `fillLow` moves down.
 */
const FIRST_RANGE = 500;
const RANGE = 2000;

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

/** Ops `from` to `to` (exclusive) of a write are in the index, but for those in `unapplied`. */
type Committed = (from: number, to: number, unapplied: ReadonlySet<number>) => void;

/**
 * Every index write of this process's passes, in transactions sized as the store asks
 * (`writeSizing`: SQLite's hold the event loop, so they are kept short), with a turn of the event
 * loop after each: other requests get theirs between two. An inbox's writes run one at a time: a
 * fill's streams wait here while their backlog is written, and meanwhile do not read their
 * sockets (Dovecot waits, not the loop).
 */
export class IndexWriter {
  /**
   * What a row has cost lately, in ms: an average, so one slow transaction (the one that runs a
   * WAL checkpoint) does not swing it. It grows with the index and with the host's load.
   */
  private msPerRow = 0.1;
  /** Rows in the next transaction. */
  private rows: number;
  /** Each inbox's writes in order; other inboxes' are not queued behind a big fill's backlog. */
  private readonly queues = new Map<string, Promise<void>>();

  constructor(private readonly store: MailIndexStore) {
    const sizing = store.writeSizing;
    this.rows = sizing ? Math.round(Math.min(sizing.maxRows, sizing.targetMs / this.msPerRow)) : Number.MAX_SAFE_INTEGER;
  }

  /**
   * `store.apply` in as many transactions as it takes, in order, `label` in the last: a label's
   * state never runs ahead of its rows. After each, `committed` gets the ops it held, `from` to
   * `to` (exclusive), and which of them the store did not apply: a write that fails halfway has
   * announced what it committed, and a retry finds those rows already there.
   */
  apply(inboxId: string, ops: readonly IndexOp[], label?: LabelState, committed?: Committed): Promise<void> {
    const run = (this.queues.get(inboxId) ?? Promise.resolve()).then(() => this.write(inboxId, ops, label, committed));
    const tail = run.catch(() => undefined);
    this.queues.set(inboxId, tail);
    void tail.then(() => {
      if (this.queues.get(inboxId) === tail) this.queues.delete(inboxId);
    });
    return run;
  }

  private async write(
    inboxId: string,
    ops: readonly IndexOp[],
    label: LabelState | undefined,
    committed: Committed | undefined,
  ): Promise<void> {
    for (let from = 0; ; ) {
      const to = Math.min(ops.length, from + this.rows);
      const last = to === ops.length;
      const t0 = performance.now();
      const skipped = await this.store.apply(inboxId, ops.slice(from, to), last ? label : undefined);
      this.fit(to - from, performance.now() - t0);
      committed?.(from, to, new Set(skipped.map((i) => from + i)));
      from = to;
      await nextTurn();
      if (last) return;
    }
  }

  private fit(rows: number, ms: number): void {
    const sizing = this.store.writeSizing;
    // A transaction's fixed cost would make a few rows look dear.
    if (!sizing || rows < sizing.minRows) return;
    this.msPerRow = 0.8 * this.msPerRow + 0.2 * (ms / rows);
    this.rows = Math.round(Math.min(sizing.maxRows, Math.max(sizing.minRows, sizing.targetMs / this.msPerRow)));
  }
}

/**
 * Collects ops and their live changes; flushes both every BATCH ops. `progress`, when set, is the
 * label's state the rows so far make true: it is saved with the last rows of each batch, so
 * a pass that fails after a batch resumes after it instead of fetching (and announcing) it again.
 */
class Batch {
  private ops: IndexOp[] = [];
  /** Each with the index of its op: a change whose op the store did not apply is not announced. */
  private changes: Array<{ op: number; change: LiveChange }> = [];
  progress: LabelState | null = null;

  constructor(
    private readonly writer: IndexWriter,
    private readonly inboxId: string,
    private readonly publish: Publish | null,
  ) {}

  /** Whether changes are announced at all (not during an inbox's first fill). */
  get publishing(): boolean {
    return this.publish !== null;
  }

  async add(op: IndexOp, change: LiveChange | null, also: LiveChange | null = null): Promise<void> {
    this.ops.push(op);
    if (change && this.publish) this.changes.push({ op: this.ops.length - 1, change });
    if (also && this.publish) this.changes.push({ op: this.ops.length - 1, change: also });
    if (this.ops.length >= BATCH) await this.flush();
  }

  /** Another batch for the same inbox (a parallel fetch fills its own; it saves no progress). */
  sibling(): Batch {
    return new Batch(this.writer, this.inboxId, this.publish);
  }

  /** Changes already in the index. */
  async announce(changes: LiveChange[]): Promise<void> {
    await this.flush();
    if (this.publish && changes.length > 0) this.publish(this.inboxId, changes);
  }

  async flush(label?: LabelState): Promise<void> {
    const state = label ?? this.progress ?? undefined;
    if (this.ops.length === 0 && !label) return;
    const ops = this.ops;
    const pending = this.changes;
    this.ops = [];
    this.changes = [];
    await this.writer.apply(this.inboxId, ops, state, (from, to, unapplied) => {
      // Another process applied a newer state first (and announced it): an older one is no news.
      const changes = pending.filter((c) => c.op >= from && c.op < to && !unapplied.has(c.op)).map((c) => c.change);
      if (changes.length > 0) this.publish?.(this.inboxId, changes);
    });
    if (label) this.progress = null;
  }
}

/**
 * UID ranges from the top down holding FIRST_RANGE messages, then RANGE each, tiling every UID
 * below `below` (all of them when undefined: then the first range is open-ended, `n:*`, so mail
 * arriving before it is fetched is in it too).
 */
export function descendingRanges(
  present: ReadonlyArray<readonly [number, number]>,
  below?: number,
): Array<{ lo: number; hi: number | null }> {
  const out: Array<{ lo: number; hi: number | null }> = [];
  let hi: number | null = below === undefined ? null : below - 1;
  let size = FIRST_RANGE;
  let count = 0;
  for (const [a, top] of [...present].sort((x, y) => y[0] - x[0])) {
    let b = below === undefined ? top : Math.min(top, below - 1);
    while (b >= a) {
      const take = Math.min(size - count, b - a + 1);
      const low = b - take + 1;
      count += take;
      if (count === size) {
        out.push({ lo: low, hi });
        hi = low - 1;
        count = 0;
        size = RANGE;
      }
      b = low - 1;
    }
  }
  if (count > 0 || out.length === 0) out.push({ lo: 1, hi });
  return out;
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
const flagsChanged = (
  l: Pick<Location, 'msgGuid' | 'labelGuid' | 'uid'>,
  uidValidity: number,
  modseq: number,
  flags: string[],
): MessageChange => ({
  type: 'message.flags',
  msgId: idFromGuid('msg', l.msgGuid),
  labelId: idFromGuid('lbl', l.labelGuid),
  flags: fromImapFlags(flags).flags,
  at: { labelGuid: l.labelGuid, uidValidity, uid: l.uid, modseq },
});

const labelChanged = (type: LabelChange['type'], labelGuid: string, name: string, previousName?: string): LabelChange => ({
  type,
  labelId: idFromGuid('lbl', labelGuid),
  name,
  ...(previousName !== undefined ? { previousName } : {}),
  at: { labelGuid },
});

const sameFlags = (a: readonly string[], b: readonly string[]) => a.length === b.length && a.every((f, i) => f === b[i]);

export interface SyncStats {
  labelsChecked: number;
  labelsSynced: number;
}

export class IndexSync {
  /** Every index write of the passes goes through it (the rows and the progress vouching for them alike). */
  readonly writer: IndexWriter;

  private readonly store: MailIndexStore;
  private readonly log: Logger;
  private readonly extra: Extra;
  private readonly parallel: number;
  private readonly previews: boolean;

  constructor(o: {
    store: MailIndexStore;
    log: Logger;
    /**
     * Runs a task on another connection of the inbox if one is free (a big label is filled over
     * several at once: Dovecot parses, and with mail_crypt decrypts, each message it has not
     * cached, which is CPU work it can spread over cores).
     */
    extra?: Extra;
    /** How many connections a fill may use in all. */
    parallel?: number;
    /** Fetch compatible inboxes' previews (POSTERN_INDEX_PREVIEWS; docs/threads.md, "Previews"). */
    previews?: boolean;
  }) {
    this.store = o.store;
    this.log = o.log;
    this.extra = o.extra ?? (() => null);
    this.parallel = o.parallel ?? 1;
    this.previews = o.previews ?? false;
    this.writer = new IndexWriter(o.store);
  }

  /** One full pass over the inbox on the given connection; `publish` gets each batch applied. */
  async run(client: ImapFlow, inbox: MailInbox, publish: Publish): Promise<SyncStats> {
    // A first fill (a new inbox, or a lost index) is silent: nothing changed, the index was empty.
    const seeded = await this.store.isSeeded(inbox.id);
    // Each message added or removed somewhere also gets its labels after the pass (message.labels).
    const placed = new LabelStateCollector();
    const announce: Publish | null = seeded
      ? (inboxId, changes) => {
          placed.see(changes);
          publish(inboxId, changes);
        }
      : null;
    try {
      return await this.pass(client, inbox, seeded, announce);
    } finally {
      const labelled = await placed.changes(this.store, inbox.id).catch(() => []);
      if (labelled.length > 0) publish(inbox.id, labelled);
    }
  }

  private async pass(client: ImapFlow, inbox: MailInbox, seeded: boolean, announce: Publish | null): Promise<SyncStats> {
    await unselect(client);
    // The first fill takes INBOX first, then the special-use labels: what readers open first.
    const listed = seeded ? await listStatus(client) : (await listStatus(client)).sort(compareLabels);
    const known = new Map((await this.store.labels(inbox.id)).map((l) => [l.guid, l]));
    const stats: SyncStats = { labelsChecked: 0, labelsSynced: 0 };
    for (const box of listed) {
      if (!box.selectable) continue;
      stats.labelsChecked++;
      const state = known.get(box.guid) ?? null;
      known.delete(box.guid);
      if (await this.syncLabel(client, inbox, box, state, announce)) stats.labelsSynced++;
    }
    // Labels deleted on the server: their messages left them, then the label went.
    for (const gone of known.values()) {
      const locations = await this.store.dropLabel(inbox.id, gone.guid);
      if (announce)
        announce(inbox.id, [...locations.map((l) => removed(l, gone.uidValidity)), labelChanged('label.deleted', gone.guid, gone.path)]);
    }
    if (!seeded) await this.store.markSeeded(inbox.id, true);
    await unselect(client);
    return stats;
  }

  private async syncLabel(
    client: ImapFlow,
    inbox: MailInbox,
    box: ListedMailbox,
    state: LabelState | null,
    publish: Publish | null,
  ): Promise<boolean> {
    // Dovecot keeps a mailbox's GUID (and UIDVALIDITY) across a RENAME: same label, new name.
    if (state !== null && state.path !== box.path) {
      const previous = state.path;
      state = { ...state, path: box.path, specialUse: box.specialUse };
      await this.writer.apply(inbox.id, [], state);
      publish?.(inbox.id, [labelChanged('label.renamed', box.guid, box.path, previous)]);
    }
    const renamed = state !== null && state.specialUse !== box.specialUse;
    // Same UIDVALIDITY, UIDNEXT and HIGHESTMODSEQ: nothing was added, changed or expunged (every
    // expunge raises HIGHESTMODSEQ under CONDSTORE). This is the whole cost of an idle read.
    if (
      state &&
      state.fillLow == null &&
      state.uidValidity === box.uidValidity &&
      state.uidNext === box.uidNext &&
      state.highestModseq === box.highestModseq
    ) {
      if (renamed) await this.writer.apply(inbox.id, [], { ...state, path: box.path, specialUse: box.specialUse });
      return false;
    }
    const mailbox = await client.mailboxOpen(box.path, { readOnly: true });
    // Every value below comes from this mailbox's own EXAMINE (never another folder's: see the
    // EmailEngine warning in docs/design-facts.md, "Dovecot").
    const uidValidity = Number(mailbox.uidValidity);
    const modseqAtOpen = Number(mailbox.highestModseq ?? 0n);
    const uidNextAtOpen = mailbox.uidNext;
    const labelGuid = box.guid;
    const batch = new Batch(this.writer, inbox.id, publish);
    const base = { guid: labelGuid, path: box.path, specialUse: box.specialUse, uidValidity };
    const target = { guid: labelGuid, path: box.path, uidValidity, uidNext: uidNextAtOpen, messages: mailbox.exists };

    if (!state) {
      // A new label in a seeded inbox: announced once its row is in (nothing filled yet: fillLow
      // at uidNext), before the messages it holds are reported as added.
      if (publish) {
        await this.writer.apply(inbox.id, [], { ...base, uidNext: uidNextAtOpen, highestModseq: modseqAtOpen, fillLow: uidNextAtOpen });
        publish(inbox.id, [labelChanged('label.created', labelGuid, box.path)]);
      }
      // A mail app made it and filled it. Its progress is saved after each UID range, newest first.
      await this.fill(client, inbox, target, batch, { ...base, uidNext: uidNextAtOpen, highestModseq: modseqAtOpen });
    } else if (state.uidValidity !== uidValidity) {
      // A new UIDVALIDITY re-seeds, reporting only what differs by GUID.
      await this.reseed(client, inbox, target, { ...base, highestModseq: modseqAtOpen }, state.uidValidity, batch);
    } else {
      if (state.uidNext > 1 && modseqAtOpen > state.highestModseq) {
        await uidFetch(client, `1:${state.uidNext - 1}`, FLAG_ITEMS, (row) => this.flagRow(inbox.id, labelGuid, uidValidity, row, batch), {
          changedSince: state.highestModseq,
          onVanished: (ranges) => this.vanished(inbox.id, labelGuid, uidValidity, ranges, batch),
        });
      }
      if (uidNextAtOpen > state.uidNext) {
        // Flag changes and expunges above are in the same batches, so the old modseq stays until
        // the end: a retry asks for them again and finds nothing new to say.
        await uidFetch(client, `${state.uidNext}:*`, fullItems(client, inbox, this.previews), async (row) => {
          if (row.uid < state.uidNext) return;
          batch.progress = { ...base, uidNext: row.uid + 1, highestModseq: state.highestModseq };
          await this.newRow(inbox.id, labelGuid, uidValidity, row, batch);
        });
      }
      // A fill cut short (a failed pass, a restart): the rest of it, below where it got to.
      if (state.fillLow != null && state.fillLow > 1) {
        await batch.flush();
        await this.fill(
          client,
          inbox,
          target,
          batch,
          { ...base, uidNext: state.uidNext, highestModseq: state.highestModseq },
          state.fillLow,
        );
      }
    }
    await batch.flush();
    let uidNext = Math.max(uidNextAtOpen, state?.uidValidity === uidValidity ? state.uidNext : 1);
    const maxIndexed = await this.maxUid(inbox.id, labelGuid);
    uidNext = Math.max(uidNext, maxIndexed + 1);

    // The safety net: the server's count must match the index. A difference left after the
    // incremental steps (an expunge reported outside our commands) is settled by the UID list.
    const status = await client.status(box.path, { messages: true });
    const serverCount = status && typeof status.messages === 'number' ? status.messages : null;
    if (serverCount !== null && serverCount !== (await this.store.countIn(inbox.id, labelGuid))) {
      await this.reconcile(client, inbox, labelGuid, uidValidity, uidNext, batch);
    }
    await batch.flush({
      guid: labelGuid,
      path: box.path,
      specialUse: box.specialUse,
      uidValidity,
      uidNext,
      highestModseq: modseqAtOpen,
      fillLow: null,
    });
    return true;
  }

  private async maxUid(inboxId: string, labelGuid: string): Promise<number> {
    const [top] = await this.store.page(inboxId, labelGuid, null, 1);
    return top?.location.uid ?? 0;
  }

  private async newRow(inboxId: string, labelGuid: string, uidValidity: number, row: FetchedRow, batch: Batch): Promise<void> {
    if (!row.message || !row.flags) return;
    const location: Location = { labelGuid, uid: row.uid, msgGuid: row.message.guid, modseq: row.modseq, flags: row.flags };
    await batch.add(
      { op: 'put', message: row.message, location },
      (await this.isNews(inboxId, location)) ? added(row.message.guid, labelGuid, uidValidity, row.uid) : null,
    );
  }

  /** Not already indexed at this label and UID (a retried pass fetches rows it already has). */
  private async isNews(inboxId: string, l: Location): Promise<boolean> {
    const [known] = await this.store.locations(inboxId, l.labelGuid, [l.uid]);
    return known?.msgGuid !== l.msgGuid;
  }

  private async flagRow(inboxId: string, labelGuid: string, uidValidity: number, row: FetchedRow, batch: Batch): Promise<void> {
    if (!row.flags) return;
    const [known] = await this.store.locations(inboxId, labelGuid, [row.uid]);
    if (!known || sameFlags(known.flags, row.flags)) return;
    const change = flagsChanged(known, uidValidity, row.modseq, row.flags);
    await batch.add(
      { op: 'flags', labelGuid, uid: row.uid, modseq: row.modseq, flags: row.flags },
      change,
      keywordsChange(change, known.flags, row.flags),
    );
  }

  private async vanished(
    inboxId: string,
    labelGuid: string,
    uidValidity: number,
    ranges: Array<[number, number]>,
    batch: Batch,
  ): Promise<void> {
    for (const [from, to] of ranges) {
      // The server may name UIDs we never had; only what the index holds is removed.
      for (let after = from - 1; ; ) {
        const rows = (await this.store.uidsOf(inboxId, labelGuid, after, 1000)).filter((r) => r.uid <= to);
        for (const r of rows)
          await batch.add({ op: 'remove', labelGuid, uid: r.uid }, removed({ msgGuid: r.msgGuid, labelGuid, uid: r.uid }, uidValidity));
        if (rows.length < 1000) break;
        after = rows.at(-1)!.uid;
      }
    }
  }

  /**
   * Fills a label the index has never seen, newest first (or, given `below`, the rest of a fill
   * cut short there): UID ranges from the top down, on this connection and on any other of the
   * inbox the pool has free right now (Dovecot parses each message it has not cached: CPU work
   * it can spread over cores). Once every range above a UID is in, the label's `fillLow` says
   * so: reads page through the newest messages long before the oldest are in (docs/watch.md).
   */
  private async fill(
    client: ImapFlow,
    inbox: MailInbox,
    box: FillTarget,
    batch: Batch,
    progress: LabelState,
    below?: number,
  ): Promise<void> {
    const labelGuid = box.guid;
    // Cut by message count, not UID span: a label with few messages over a wide UID span (years
    // of expunges) is a few ranges, not thousands of empty FETCHes. One ESEARCH says where they are.
    const ranges = descendingRanges(box.messages === 0 && below === undefined ? [] : await uidSearchAll(client), below);
    const done = ranges.map(() => false);
    let next = 0;
    let filledTo = 0; // ranges[0 .. filledTo - 1] are all in
    const onRow = async (row: FetchedRow, into: Batch) => {
      if (!row.message || !row.flags) return;
      const location: Location = { labelGuid, uid: row.uid, msgGuid: row.message.guid, modseq: row.modseq, flags: row.flags };
      const news = into.publishing && (await this.isNews(inbox.id, location));
      await into.add(
        { op: 'put', message: row.message, location },
        news ? added(row.message.guid, labelGuid, box.uidValidity, row.uid) : null,
      );
    };
    const work = async (c: ImapFlow, into: Batch) => {
      while (next < ranges.length) {
        const i = next++;
        const r = ranges[i]!;
        await uidFetch(c, `${r.lo}:${r.hi ?? '*'}`, fullItems(c, inbox, this.previews), (row) => onRow(row, into));
        // The rows first, then the progress that vouches for them.
        await into.flush();
        done[i] = true;
        const before = filledTo;
        while (filledTo < ranges.length && done[filledTo]) filledTo++;
        // The last range's progress is the label's final state, written by the caller.
        if (filledTo > before && filledTo < ranges.length)
          await this.writer.apply(inbox.id, [], { ...progress, fillLow: ranges[filledTo - 1]!.lo });
      }
    };
    const elsewhere: Array<Promise<void>> = [];
    if (box.messages >= 4000) {
      for (let k = 1; k < this.parallel; k++) {
        const started = this.extra(inbox, async (c) => {
          const opened = await c.mailboxOpen(box.path, { readOnly: true });
          // Another UIDVALIDITY means other UIDs: this pass fails and the next starts over.
          if (Number(opened.uidValidity) !== box.uidValidity) throw new Error(`UIDVALIDITY of ${box.path} changed during its fill`);
          try {
            await work(c, batch.sibling());
          } finally {
            await unselect(c);
          }
        });
        if (started) elsewhere.push(started);
      }
    }
    const results = await Promise.allSettled([work(client, batch), ...elsewhere]);
    const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failed) throw failed.reason;
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
      const rows = await this.store.uidsOf(inbox.id, labelGuid, after, 5000);
      for (const r of rows) if (!before.has(r.msgGuid)) before.set(r.msgGuid, r.uid);
      if (rows.length < 5000) break;
      after = rows.at(-1)!.uid;
    }
    await this.store.clearStaged(inbox.id, labelGuid);
    const staged = new Batch(this.writer, inbox.id, null);
    const after = new Set<string>();
    const news: LiveChange[] = [];
    let top = 0;
    await this.fetchAll(client, inbox, box, staged, async (row, into) => {
      after.add(row.message.guid);
      top = Math.max(top, row.uid);
      const location: Location = { labelGuid, uid: row.uid, msgGuid: row.message.guid, modseq: row.modseq, flags: row.flags };
      if (batch.publishing && !before.has(row.message.guid)) news.push(added(row.message.guid, labelGuid, box.uidValidity, row.uid));
      await into.add({ op: 'stage', message: row.message, location }, null);
    });
    await staged.flush();
    await this.store.commitStaged(inbox.id, { ...state, uidNext: Math.max(box.uidNext, top + 1) });
    const gone = [...before]
      .filter(([msgGuid]) => !after.has(msgGuid))
      .map(([msgGuid, uid]) => removed({ msgGuid, labelGuid, uid }, oldUidValidity));
    await batch.announce([...news, ...gone]);
  }

  /**
   * Every message of the label, into `batch` (a big label over several connections at once, the
   * extra ones only if the pool has them free right now: waiting for more while holding one
   * could deadlock two inboxes at the cap).
   */
  private async fetchAll(
    client: ImapFlow,
    inbox: MailInbox,
    box: FillTarget,
    batch: Batch,
    onRow: (row: FullRow, into: Batch, first: boolean) => Promise<void>,
  ): Promise<void> {
    const fill = (c: ImapFlow, range: string, into: Batch, first = false) =>
      uidFetch(c, range, fullItems(c, inbox, this.previews), async (row) => {
        if (row.message && row.flags) await onRow(row as FullRow, into, first);
      });
    const parts = box.messages >= 4000 ? Math.max(1, this.parallel) : 1;
    if (parts === 1) {
      await fill(client, '1:*', batch, true);
      return;
    }
    // UID ranges of equal width; the last one is open-ended so mail arriving meanwhile is in it.
    const width = Math.ceil(box.uidNext / parts);
    const ranges = Array.from({ length: parts }, (_, i) =>
      i === parts - 1 ? `${i * width + 1}:*` : `${i * width + 1}:${(i + 1) * width}`,
    );
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
          await own.flush();
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
        await batch.flush();
        batch.progress = null;
        await fill(client, range, batch);
      }
    })();
    const results = await Promise.allSettled([here, ...elsewhere]);
    const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failed) throw failed.reason;
  }

  /**
   * Settles the index against the server's full UID list of the label. The list comes as ranges
   * (ESEARCH) and the UIDs to fetch go out in bounded sets: a label of any size and any pattern
   * of expunges stays within Dovecot's command line limit.
   */
  private async reconcile(
    client: ImapFlow,
    inbox: MailInbox,
    labelGuid: string,
    uidValidity: number,
    uidNext: number,
    batch: Batch,
  ): Promise<void> {
    const inboxId = inbox.id;
    const ranges = await uidSearchAll(client);
    const onServer = (uid: number): boolean => {
      // Binary search: the ranges are ascending and disjoint.
      let lo = 0;
      let hi = ranges.length - 1;
      while (lo <= hi) {
        const mid = (lo + hi) >> 1;
        const [a, b] = ranges[mid]!;
        if (uid < a) hi = mid - 1;
        else if (uid > b) lo = mid + 1;
        else return true;
      }
      return false;
    };
    ranges.sort((x, y) => x[0] - y[0]);
    this.log.debug({ inboxId, labelGuid, ranges: ranges.length }, 'reconciling a label by its UID list');
    const indexed = new Set<number>();
    for (let after = 0; ; ) {
      const rows = await this.store.uidsOf(inboxId, labelGuid, after, 5000);
      for (const r of rows) {
        if (!onServer(r.uid))
          await batch.add({ op: 'remove', labelGuid, uid: r.uid }, removed({ msgGuid: r.msgGuid, labelGuid, uid: r.uid }, uidValidity));
        else indexed.add(r.uid);
      }
      if (rows.length < 5000) break;
      after = rows.at(-1)!.uid;
    }
    // UIDs the index lacks below uidNext (at or above it, the next pass fetches them).
    const missing: number[] = [];
    for (const [a, b] of ranges) for (let uid = a; uid <= b && uid < uidNext; uid++) if (!indexed.has(uid)) missing.push(uid);
    for (const set of uidSets(missing)) {
      await uidFetch(client, set, fullItems(client, inbox, this.previews), (row) =>
        this.newRow(inboxId, labelGuid, uidValidity, row, batch),
      );
    }
  }
}
