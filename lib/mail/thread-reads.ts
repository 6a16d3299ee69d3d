// Threads and previews as the API serves them (docs/threads.md): a thread's messages, a label's
// page collapsed to one row per thread, a search collapsed the same way, each row's thread counts,
// and previews for callers that may read content. The index decides the threads
// (lib/mail/threads.ts); this reads them, and places the mail indexed before threads in the
// background, a short write at a time, while reads go on.
import { notFound } from '../errors.ts';
import { guidFromId, idFromGuid } from '../ids.ts';
import type { MessageList, MessageSummary, Thread } from '../../schemas/wire.ts';
import type { MailMirror } from './mirror.ts';
import { directionOf, primaryLocation, summarize } from './service.ts';
import type { IndexSearch, MailInbox, MessageRecord, SearchAfter, SearchRow } from './types.ts';
import type { MailIndexStore, MailSource } from './ports.ts';

/** A thread lists at most this many messages (its oldest). */
export const THREAD_MAX = 1000;
/** Messages placed per backfill write: short enough for SQLite's writes to leave the loop free. */
const BACKFILL_BATCH = 200;

/** Whoever serves previews records the page first (docs/threads.md, "Previews"). */
export type RecordPreviews = (msgIds: readonly string[]) => Promise<void>;

export class ThreadReads {
  /** Inboxes whose backfill found nothing left, in this process. */
  private readonly placed = new Set<string>();
  private readonly running = new Map<string, Promise<void>>();

  constructor(
    private readonly index: MailIndexStore,
    private readonly mirror: MailMirror,
    private readonly source: Pick<MailSource, 'references'>,
    private readonly log: { warn(obj: object, msg: string): void },
  ) {}

  /**
   * Places the inbox's mail indexed before threads, in the background (never awaited by a read):
   * a batch per write, the oldest first, until none is left, each batch's References fetched
   * from the mail server first (the index never kept them; the live path links by them too).
   * Called on every read that shows thread ids; once done, a set lookup.
   */
  backfill(inbox: MailInbox): void {
    const inboxId = inbox.id;
    if (this.placed.has(inboxId) || this.running.has(inboxId)) return;
    const run = (async () => {
      for (;;) {
        const batch = await this.index.unthreaded(inboxId, BACKFILL_BATCH);
        if (batch.length === 0) break;
        const at = batch.flatMap((m) => (m.place ? [{ ...m.place, msgGuid: m.guid }] : []));
        const fetched =
          at.length > 0 ? await this.source.references(inbox, await this.index.labels(inboxId), at) : new Map<string, string[]>();
        // A message the server no longer has where the index says (moved meanwhile) goes with what the index knows.
        await this.index.backfillThreads(inboxId, new Map(batch.map((m) => [m.guid, fetched.get(m.guid) ?? []])));
        if (batch.length < BACKFILL_BATCH) break;
        await new Promise((resolve) => setImmediate(resolve));
      }
      if (this.placed.size >= 100_000) this.placed.clear();
      this.placed.add(inboxId);
    })()
      .catch((err: unknown) => this.log.warn({ err, inbox: inboxId }, 'placing older mail in threads failed; the next read tries again'))
      .finally(() => this.running.delete(inboxId));
    this.running.set(inboxId, run);
  }

  /** Resolves when the inbox's backfill under way (if any) ends: for tests and the bench. */
  async settled(inboxId: string): Promise<void> {
    await this.running.get(inboxId);
  }

  /**
   * GET …/threads/{thread}: its messages, oldest first, each as the detail shows it (uid 0); with
   * `inLabel`, only those in that label, each as the label lists it (its UID and flags there).
   */
  async thread(inbox: MailInbox, threadId: string, inLabel?: string): Promise<Thread> {
    const guid = guidFromId('thr', threadId);
    if (!guid) throw notFound('thread not found');
    await this.mirror.refresh(inbox);
    this.backfill(inbox);
    const labels = await this.index.labels(inbox.id);
    const labelGuid = inLabel === undefined ? undefined : guidFromId('lbl', inLabel);
    if (inLabel !== undefined && (!labelGuid || !labels.some((l) => l.guid === labelGuid))) throw notFound('label not found');
    const rows = await this.index.thread(inbox.id, guid, THREAD_MAX + 1);
    if (rows.length === 0) throw notFound('thread not found');
    const sent = new Set(labels.filter((l) => l.specialUse === '\\Sent').map((l) => l.guid));
    const messages = rows.slice(0, THREAD_MAX).flatMap(({ message, locations }) => {
      const direction = directionOf(inbox, message, locations, sent);
      if (labelGuid === undefined) {
        const [first, ...rest] = locations;
        return [summarize(message, primaryLocation([first!, ...rest], labels), 0, direction)];
      }
      const there = locations.find((l) => l.labelGuid === labelGuid);
      return there ? [summarize(message, there, there.uid, direction)] : [];
    });
    return { id: idFromGuid('thr', guid), messages, ...(rows.length > THREAD_MAX ? { more: true } : {}) };
  }

  /** A label's page with one row per thread: its newest message there, and the thread's counts. */
  async collapsed(inbox: MailInbox, labelId: string, options: { limit: number; before?: number }): Promise<MessageList> {
    const guid = guidFromId('lbl', labelId);
    if (!guid) throw notFound('label not found');
    await this.mirror.refresh(inbox);
    const labels = await this.index.labels(inbox.id);
    if (!labels.some((l) => l.guid === guid)) throw notFound('label not found');
    this.backfill(inbox);
    const rows = await this.index.threadPage(inbox.id, guid, options.before ?? null, options.limit + 1);
    const shown = rows.slice(0, options.limit);
    const sent = new Set(labels.filter((l) => l.specialUse === '\\Sent').map((l) => l.guid));
    const messages = shown.map(({ message, location }) =>
      summarize(message, location, location.uid, directionOf(inbox, message, [location], sent)),
    );
    await withThreadCounts(
      this.index,
      inbox.id,
      shown.map((r, i) => ({ summary: messages[i]!, message: r.message })),
    );
    const last = shown.at(-1);
    return rows.length > options.limit && last ? { messages, before: last.location.uid } : { messages };
  }

  /**
   * Each message's preview, for a caller the route let read content: the page is recorded
   * (`record`) before any preview is added. A zero-access inbox's index has none.
   */
  async withPreviews(inbox: MailInbox, messages: MessageSummary[], record: RecordPreviews): Promise<void> {
    if (messages.length === 0) return;
    await record(messages.map((m) => m.id));
    const guids = messages.map((m) => guidFromId('msg', m.id)!);
    const rows = await this.index.search(inbox.id, { text: [], guids }, null, guids.length);
    const previews = new Map(rows.map((r) => [r.message.guid, r.message.preview]));
    for (const [i, m] of messages.entries()) {
      const text = previews.get(guids[i]!);
      if (text) m.preview = text;
    }
  }
}

/** Adds each row's thread counts (a message not placed yet is a thread of its own). */
export async function withThreadCounts(
  index: MailIndexStore,
  inboxId: string,
  rows: ReadonlyArray<{ summary: MessageSummary; message: MessageRecord }>,
): Promise<void> {
  const stats = await index.threadStats(
    inboxId,
    rows.flatMap((r) => (r.message.threadGuid ? [r.message.threadGuid] : [])),
  );
  for (const { summary, message } of rows) {
    const found = message.threadGuid ? stats.get(message.threadGuid) : undefined;
    summary.thread = found ?? {
      messages: 1,
      unread: summary.flags.includes('seen') ? 0 : 1,
      participants: message.from ? [message.from] : [],
    };
  }
}

/**
 * A search collapsed to one row per thread (docs/threads.md): a match shows when no newer
 * message of its thread matches. Walked newest first from `after`: the first page needs no more
 * than the walk (the first match of a thread met is its newest); a later page asks, once per
 * thread it meets, for the thread's newest match, which an earlier page may have shown.
 */
export async function collapsedSearch(
  index: MailIndexStore,
  inboxId: string,
  search: IndexSearch,
  after: SearchAfter | null,
  limit: number,
): Promise<SearchRow[]> {
  const out: SearchRow[] = [];
  const newest = new Map<string, string>();
  const batch = Math.max(50, limit * 2);
  for (let cursor = after; out.length < limit; ) {
    const rows = await index.search(inboxId, search, cursor, batch);
    for (const row of rows) {
      const thread = row.message.threadGuid;
      if (!thread) {
        out.push(row);
      } else {
        let top = newest.get(thread);
        if (top === undefined) {
          top =
            after === null
              ? row.message.guid
              : ((await index.search(inboxId, { ...search, threadGuid: thread }, null, 1))[0]?.message.guid ?? row.message.guid);
          newest.set(thread, top);
        }
        if (top === row.message.guid) out.push(row);
      }
      if (out.length >= limit) break;
    }
    if (rows.length < batch) break;
    const last = rows.at(-1)!;
    cursor = { receivedAt: last.message.receivedAt, guid: last.message.guid };
  }
  return out;
}
