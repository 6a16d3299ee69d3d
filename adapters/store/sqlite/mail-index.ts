// The mailbox index in SQLite (docs/mail.md, "The index"). Statements are prepared once; every write goes
// through one transaction per batch so a label's sync state never runs ahead of its rows.
import type { Statement } from 'better-sqlite3';
import type {
  IndexOp,
  IndexSearch,
  IndexStatus,
  LabelState,
  Location,
  LocationKey,
  MessageRecord,
  PageRow,
  SearchAfter,
  SearchRow,
  ThreadStats,
} from '../../../lib/mail/types.ts';
import type { MailIndexStore, WatchLeases, WatchReport, WatchReports, WriteSizing } from '../../../lib/mail/ports.ts';
import { notFound } from '../../../lib/errors.ts';
import { inboxMark } from '../../../lib/mail/search-words.ts';
import { assignThreads, linksOf, pendingLinks, threadStatsOf } from '../../../lib/mail/threads.ts';
import { rowOrNull, type Db } from './db.ts';
import type { SearchWorkers } from './search-workers.ts';
import {
  toLabel,
  toLocation,
  toMessage,
  type LabelRow,
  type LocationRow,
  type MessageRow,
  type ThreadKnownRow,
  type ThreadPendingRow,
  type ThreadStatRow,
  unthreadedOf,
} from '../rows/mail-index.ts';

/** A label's row to write; `fillLow` left out keeps what the row says (a rename, say). */
const labelParams = (inboxId: string, l: LabelState) => ({
  inboxId,
  guid: l.guid,
  path: l.path,
  specialUse: l.specialUse,
  uidValidity: l.uidValidity,
  uidNext: l.uidNext,
  highestModseq: l.highestModseq,
  fillLow: l.fillLow ?? null,
  keepFill: l.fillLow === undefined ? 1 : 0,
});

const bit = (b: boolean | null | undefined) => (b == null ? null : b ? 1 : 0);

const messageParams = (inboxId: string, m: MessageRecord) => {
  const { sealed, hasAttachment, references: _links, threadGuid: _thread, preview, ...rest } = m;
  return { inboxId, ...rest, sealed: bit(sealed), hasAttachment: bit(hasAttachment), preview: preview ?? null };
};

const isSeen = (flags: readonly string[]) => (flags.some((f) => f.toLowerCase() === '\\seen') ? 1 : 0);

/** A write for an inbox removed meanwhile: to a read racing the removal, the inbox is gone. */
const removedInbox = () => notFound('inbox not found: it was removed');

const MESSAGE_COLUMNS =
  'm.guid, m.size, m.received_at, m.date, m.from_text, m.to_text, m.cc_text, m.reply_to_text, m.subject, m.message_id, m.in_reply_to, m.from_address, m.thread_guid, m.preview';

const FTS_COLUMNS = { from: 'from_text', to: 'to_text', cc: 'cc_text', subject: 'subject' } as const;

/** Up to this many content matches drive a search (searchSql); more are filtered on a walk. */
const GUIDS_DRIVE_MAX = 5_000;

/**
 * The text conditions as one FTS5 MATCH: each phrase `column : "w1 w2"*` (`*` when its last word
 * is a prefix), every word marked with the inbox (migration 029), so the MATCH reads only that
 * inbox's terms. Words are letters and digits only: nothing to escape.
 */
export function searchMatch(inboxId: string, text: IndexSearch['text']): string {
  const mark = inboxMark(inboxId);
  return text
    .flatMap(({ field, phrases }) =>
      phrases.map((p) => `${FTS_COLUMNS[field]} : "${p.words.map((w) => mark + w).join(' ')}"${p.prefix ? '*' : ''}`),
    )
    .join(' AND ');
}

/**
 * A search as one statement (its shape varies with the conditions given; prepare() caches
 * nothing, but a search is rare next to listing). Exported for bench/search.ts, whose raw-SQL
 * floor must run this very statement.
 */
export function searchSql(
  inboxId: string,
  q: IndexSearch,
  after: SearchAfter | null,
  limit: number,
): { sql: string; params: Record<string, unknown> } {
  const where = ['m.inbox_id = @inboxId'];
  const params: Record<string, unknown> = { inboxId, limit };
  const when = (list: string[], sql: string, values: Record<string, unknown>) => {
    list.push(sql);
    Object.assign(params, values);
  };
  if (q.text.length > 0) params.match = searchMatch(inboxId, q.text);
  if (q.receivedFrom !== undefined) when(where, 'm.received_at >= @receivedFrom', { receivedFrom: q.receivedFrom });
  if (q.receivedBefore !== undefined) when(where, 'm.received_at < @receivedBefore', { receivedBefore: q.receivedBefore });
  if (q.minSize !== undefined) when(where, 'm.size >= @minSize', { minSize: q.minSize });
  if (q.maxSize !== undefined) when(where, 'm.size < @maxSize', { maxSize: q.maxSize });
  if (q.hasAttachment !== undefined) when(where, 'm.has_attachment = @hasAttachment', { hasAttachment: q.hasAttachment ? 1 : 0 });
  if (q.threadGuid !== undefined) when(where, 'm.thread_guid = @threadGuid', { threadGuid: q.threadGuid });
  // A body search's few matches drive, as the text index's do: walked newest first, the inbox
  // is read to its end when they fill less than a page (150 ms at 100,000 messages, bench:search).
  // Many matches are dense enough for the walk to fill a page early.
  const guidsDrive = q.guids !== undefined && !params.match && q.guids.length <= GUIDS_DRIVE_MAX;
  if (q.guids !== undefined) {
    params.guids = JSON.stringify(q.guids);
    if (!guidsDrive) where.push('m.guid IN (SELECT value FROM json_each(@guids))');
  }
  if (after)
    when(where, '(m.received_at < @afterAt OR (m.received_at = @afterAt AND m.guid < @afterGuid))', {
      afterAt: after.receivedAt,
      afterGuid: after.guid,
    });
  // Label and keywords hold at one same place: a message's flags are per label.
  const place: string[] = [];
  const hasFlag = (name: string) =>
    `EXISTS (SELECT 1 FROM json_each(l.flags) WHERE lower(value) IN (SELECT value FROM json_each(@${name})))`;
  if (q.labelGuid !== undefined) when(place, 'l.label_guid = @labelGuid', { labelGuid: q.labelGuid });
  if (q.hasKeyword !== undefined) when(place, hasFlag('hasKeyword'), { hasKeyword: JSON.stringify(q.hasKeyword) });
  if (q.notKeyword !== undefined) when(place, `NOT ${hasFlag('notKeyword')}`, { notKeyword: JSON.stringify(q.notKeyword) });
  // The message's own places (without the hint the planner may walk every place of the inbox
  // for each message once json_each is in the condition: seconds at 50,000 messages).
  where.push(
    `EXISTS (SELECT 1 FROM mail_locations l INDEXED BY mail_locations_message WHERE l.inbox_id = m.inbox_id AND l.msg_guid = m.guid${place.map((c) => ` AND ${c}`).join('')})`,
  );
  // With words, the text index's matches drive (CROSS JOIN keeps them the outer loop) and are
  // sorted; without, the inbox's rows are walked newest first until the page is full.
  const from = params.match
    ? `(SELECT d.guid FROM mail_search s JOIN mail_search_docs d ON d.id = s.rowid WHERE mail_search MATCH @match AND d.inbox_id = @inboxId) f
       CROSS JOIN mail_messages m ON m.inbox_id = @inboxId AND m.guid = f.guid`
    : guidsDrive
      ? '(SELECT value AS guid FROM json_each(@guids)) f CROSS JOIN mail_messages m ON m.inbox_id = @inboxId AND m.guid = f.guid'
      : 'mail_messages m';
  return {
    sql: `SELECT ${MESSAGE_COLUMNS} FROM ${from} WHERE ${where.join(' AND ')} ORDER BY m.received_at DESC, m.guid DESC LIMIT @limit`,
    params,
  };
}

/**
 * better-sqlite3 is synchronous: a transaction holds the event loop for its whole duration, and a
 * row costs more as the index grows (20-60 µs into an empty one, 80-130 µs at 50,000 rows; more
 * on a busy host). About 8 ms is the longest any other request should wait behind one; a 50,000-
 * message fill in 500-row transactions, four streams at once, held the loop for up to a second.
 */
export const SQLITE_WRITE_SIZING: WriteSizing = { minRows: 20, maxRows: 500, targetMs: 8 };

export class SqliteMailIndex implements MailIndexStore, WatchLeases, WatchReports {
  readonly writeSizing = SQLITE_WRITE_SIZING;
  private readonly s: Record<string, Statement>;
  // `mail_inboxes.version` is bumped in the same transaction as every index write: readers keep
  // derived results until it changes. It lives in the store because every process sharing it
  // syncs inboxes on reads (the watcher lease only says who watches).
  private readonly applyTx: (inboxId: string, ops: readonly IndexOp[], label?: LabelState) => number[];
  private readonly dropTx: (inboxId: string, guid: string) => Location[];
  private readonly clearStagedTx: (inboxId: string, labelGuid: string) => void;
  private readonly commitStagedTx: (inboxId: string, label: LabelState) => void;
  private readonly claimTx: (inboxIds: readonly string[], holder: string, ttlMs: number) => Set<string>;
  private readonly releaseTx: (inboxIds: readonly string[], holder: string) => void;
  private readonly dropInboxTx: (inboxId: string) => void;
  private readonly markTx: (inboxId: string, batch: number) => number;
  private readonly backfillTx: (inboxId: string, references: ReadonlyMap<string, readonly string[]>) => number;

  /**
   * `workers` run the searches' statements off the serving thread, within their budget
   * (search-workers.ts); without them (an in-memory database, which no other connection can
   * open) a search runs here, bounded by its shape alone.
   */
  constructor(
    private readonly db: Db,
    readonly workers?: SearchWorkers,
  ) {
    const p = (sql: string) => db.prepare(sql);
    this.s = {
      seeded: p('SELECT seeded FROM mail_inboxes WHERE inbox_id = ?').pluck(),
      // A new row starts its version at the clock (microsecond scale), not at 1: an index deleted
      // and rebuilt never repeats a version a cache may still hold.
      markSeeded: p(`INSERT INTO mail_inboxes (inbox_id, seeded, version) VALUES (?, ?, ?)
        ON CONFLICT (inbox_id) DO UPDATE SET seeded = excluded.seeded, version = version + 1 WHERE removed_at IS NULL`),
      removedAt: p('SELECT removed_at FROM mail_inboxes WHERE inbox_id = ?').pluck(),
      tombstone: p(`INSERT INTO mail_inboxes (inbox_id, seeded, version, removed_at) VALUES (@inboxId, 0, @version, @at)
        ON CONFLICT (inbox_id) DO UPDATE SET seeded = 0, version = version + 1, synced_at = NULL, removed_at = excluded.removed_at`),
      bump: p(`INSERT INTO mail_inboxes (inbox_id, seeded, version) VALUES (?, 0, ?)
        ON CONFLICT (inbox_id) DO UPDATE SET version = version + 1`),
      version: p('SELECT version FROM mail_inboxes WHERE inbox_id = ?').pluck(),
      markSynced: p(`INSERT INTO mail_inboxes (inbox_id, seeded, version, synced_at) VALUES (?, 0, ?, ?)
        ON CONFLICT (inbox_id) DO UPDATE SET synced_at = excluded.synced_at WHERE removed_at IS NULL`),
      statusInbox: p('SELECT seeded, synced_at, hinted_at FROM mail_inboxes WHERE inbox_id = ?'),
      markHinted: p('UPDATE mail_inboxes SET hinted_at = ? WHERE inbox_id = ? AND removed_at IS NULL'),
      putReport: p(`INSERT INTO watch_reports (origin, report, updated_at) VALUES (?, ?, ?)
        ON CONFLICT (origin) DO UPDATE SET report = excluded.report, updated_at = excluded.updated_at`),
      reports: p('SELECT origin, report, updated_at FROM watch_reports WHERE updated_at >= ? ORDER BY updated_at DESC'),
      // Reports of processes gone for a day are of no use to anyone.
      pruneReports: p('DELETE FROM watch_reports WHERE updated_at < ?'),
      statusCounts: p(`SELECT (SELECT count(*) FROM mail_messages WHERE inbox_id = @id) AS messages,
        (SELECT count(*) FROM mail_locations WHERE inbox_id = @id) AS locations,
        (SELECT count(*) FROM mail_labels WHERE inbox_id = @id) AS labels,
        (SELECT count(*) FROM mail_staged_locations WHERE inbox_id = @id) AS staged`),
      statusLease: p('SELECT holder, expires_at FROM mail_watch_leases WHERE inbox_id = ?'),
      labels: p('SELECT guid, path, special_use, uid_validity, uid_next, highest_modseq, fill_low FROM mail_labels WHERE inbox_id = ?'),
      label: p(
        'SELECT guid, path, special_use, uid_validity, uid_next, highest_modseq, fill_low FROM mail_labels WHERE inbox_id = ? AND guid = ?',
      ),
      // A fill's progress only goes down, and a complete label (NULL) stays complete: processes
      // filling the same label at once never make it look less filled than it is.
      putLabel: p(`INSERT INTO mail_labels (inbox_id, guid, path, special_use, uid_validity, uid_next, highest_modseq, fill_low)
        VALUES (@inboxId, @guid, @path, @specialUse, @uidValidity, @uidNext, @highestModseq, @fillLow)
        ON CONFLICT (inbox_id, guid) DO UPDATE SET path = excluded.path, special_use = excluded.special_use,
          uid_validity = excluded.uid_validity,
          fill_low = CASE WHEN uid_validity <> excluded.uid_validity THEN excluded.fill_low
            WHEN @keepFill = 1 THEN fill_low
            WHEN fill_low IS NULL OR excluded.fill_low IS NULL THEN NULL
            ELSE min(fill_low, excluded.fill_low) END,
          uid_next = CASE WHEN uid_validity = excluded.uid_validity THEN max(uid_next, excluded.uid_next) ELSE excluded.uid_next END,
          highest_modseq = CASE WHEN uid_validity = excluded.uid_validity THEN max(highest_modseq, excluded.highest_modseq) ELSE excluded.highest_modseq END`),
      counts: p(
        'SELECT label_guid, count(*) AS total, count(*) - sum(seen) AS unread FROM mail_locations WHERE inbox_id = ? GROUP BY label_guid',
      ),
      // `sealed` and `has_attachment` are learnt once (a row indexed before they were asked for
      // gets them on its next fetch).
      putMessage:
        p(`INSERT INTO mail_messages (inbox_id, guid, size, received_at, date, from_text, to_text, cc_text, reply_to_text, subject, message_id, in_reply_to, from_address, sealed, has_attachment, preview)
        VALUES (@inboxId, @guid, @size, @receivedAt, @date, @from, @to, @cc, @replyTo, @subject, @messageId, @inReplyTo, @fromAddress, @sealed, @hasAttachment, @preview)
        ON CONFLICT (inbox_id, guid) DO UPDATE SET sealed = coalesce(sealed, excluded.sealed), has_attachment = coalesce(has_attachment, excluded.has_attachment),
          preview = coalesce(preview, excluded.preview)
        WHERE (sealed IS NULL AND excluded.sealed IS NOT NULL) OR (has_attachment IS NULL AND excluded.has_attachment IS NOT NULL)
          OR (preview IS NULL AND excluded.preview IS NOT NULL)`),
      // Threads (docs/threads.md; lib/mail/threads.ts decides, these gather and write).
      putLink: p('INSERT OR IGNORE INTO mail_thread_links (inbox_id, link, msg_guid) VALUES (?, ?, ?)'),
      pendingIn: p(`SELECT guid, received_at, message_id, in_reply_to, subject FROM mail_messages
        WHERE inbox_id = ? AND guid IN (SELECT value FROM json_each(?)) AND thread_guid IS NULL`),
      unthreaded:
        p(`SELECT m.guid, l.label_guid, l.uid FROM (SELECT guid, received_at FROM mail_messages INDEXED BY mail_messages_unthreaded
          WHERE inbox_id = @inboxId AND thread_guid IS NULL ORDER BY received_at, guid LIMIT @limit) m
        LEFT JOIN mail_locations l INDEXED BY mail_locations_message ON l.inbox_id = @inboxId AND l.msg_guid = m.guid
        ORDER BY m.received_at, m.guid`),
      linksOf: p('SELECT msg_guid, link FROM mail_thread_links WHERE inbox_id = ? AND msg_guid IN (SELECT value FROM json_each(?))'),
      threadedById:
        p(`SELECT guid, thread_guid, received_at, message_id, subject, NULL AS link FROM mail_messages INDEXED BY mail_messages_message_id
        WHERE inbox_id = ? AND message_id IN (SELECT value FROM json_each(?)) AND thread_guid IS NOT NULL`),
      threadedByLink: p(`SELECT m.guid, m.thread_guid, m.received_at, m.message_id, m.subject, l.link FROM mail_thread_links l
        JOIN mail_messages m ON m.inbox_id = l.inbox_id AND m.guid = l.msg_guid
        WHERE l.inbox_id = ? AND l.link IN (SELECT value FROM json_each(?)) AND m.thread_guid IS NOT NULL`),
      setThread: p('UPDATE mail_messages SET thread_guid = ? WHERE inbox_id = ? AND guid = ? AND thread_guid IS NULL'),
      // The newest place of each thread in the label: no place of the same thread above it there.
      threadPage: p(`SELECT l.label_guid, l.uid, l.msg_guid, l.modseq, l.flags, ${MESSAGE_COLUMNS}
        FROM mail_locations l JOIN mail_messages m ON m.inbox_id = l.inbox_id AND m.guid = l.msg_guid
        WHERE l.inbox_id = @inboxId AND l.label_guid = @labelGuid AND l.uid < @before
          AND (m.thread_guid IS NULL OR NOT EXISTS (SELECT 1 FROM mail_messages m2 INDEXED BY mail_messages_thread
            JOIN mail_locations l2 INDEXED BY mail_locations_message ON l2.inbox_id = m2.inbox_id AND l2.msg_guid = m2.guid
            WHERE m2.inbox_id = @inboxId AND m2.thread_guid = m.thread_guid AND l2.label_guid = @labelGuid AND l2.uid > l.uid))
        ORDER BY l.uid DESC LIMIT @limit`),
      thread: p(`SELECT ${MESSAGE_COLUMNS} FROM mail_messages m INDEXED BY mail_messages_thread WHERE m.inbox_id = ? AND m.thread_guid = ?
        ORDER BY m.received_at, m.guid LIMIT ?`),
      // Each message's places looked up by message: without the hint the planner walks every place
      // of the inbox for each message (0.6 s a page of 50 threads at 10,000 messages).
      threadStats: p(`SELECT m.thread_guid, m.from_text, m.from_address,
          (SELECT max(seen) FROM mail_locations l INDEXED BY mail_locations_message WHERE l.inbox_id = m.inbox_id AND l.msg_guid = m.guid) AS seen
        FROM mail_messages m INDEXED BY mail_messages_thread WHERE m.inbox_id = ? AND m.thread_guid IN (SELECT value FROM json_each(?))
        ORDER BY m.received_at, m.guid`),
      // The same message at the same place with an older MODSEQ (another process fetched it
      // earlier and applied it later) leaves the newer flags in place.
      putLocation: p(`INSERT INTO mail_locations (inbox_id, label_guid, uid, msg_guid, modseq, flags, seen)
        VALUES (?, ?, ?, ?, ?, ?, ?)
        ON CONFLICT (inbox_id, label_guid, uid) DO UPDATE SET msg_guid = excluded.msg_guid, modseq = excluded.modseq, flags = excluded.flags, seen = excluded.seen
        WHERE mail_locations.msg_guid <> excluded.msg_guid OR excluded.modseq = 0 OR excluded.modseq >= mail_locations.modseq`),
      // Only a newer MODSEQ replaces flags (0: a server without CONDSTORE, nothing to compare).
      setFlags: p(
        'UPDATE mail_locations SET modseq = @modseq, flags = @flags, seen = @seen WHERE inbox_id = @inboxId AND label_guid = @labelGuid AND uid = @uid AND (@modseq = 0 OR modseq < @modseq)',
      ),
      locationAt: p('SELECT msg_guid FROM mail_locations WHERE inbox_id = ? AND label_guid = ? AND uid = ?').pluck(),
      removeLocation: p('DELETE FROM mail_locations WHERE inbox_id = ? AND label_guid = ? AND uid = ?'),
      // A message lives as long as some label holds it (or a refill being staged does).
      gcMessage: p(`DELETE FROM mail_messages WHERE inbox_id = @inboxId AND guid = @guid
        AND NOT EXISTS (SELECT 1 FROM mail_locations WHERE inbox_id = @inboxId AND msg_guid = @guid)
        AND NOT EXISTS (SELECT 1 FROM mail_staged_locations WHERE inbox_id = @inboxId AND msg_guid = @guid)`),
      putStaged: p(`INSERT INTO mail_staged_locations (inbox_id, label_guid, uid, msg_guid, modseq, flags, seen)
        VALUES (?, ?, ?, ?, ?, ?, ?)
        ON CONFLICT (inbox_id, label_guid, uid) DO UPDATE SET msg_guid = excluded.msg_guid, modseq = excluded.modseq, flags = excluded.flags, seen = excluded.seen`),
      stagedGuids: p('SELECT DISTINCT msg_guid FROM mail_staged_locations WHERE inbox_id = ? AND label_guid = ?').pluck(),
      labelGuids: p('SELECT DISTINCT msg_guid FROM mail_locations WHERE inbox_id = ? AND label_guid = ?').pluck(),
      dropStaged: p('DELETE FROM mail_staged_locations WHERE inbox_id = ? AND label_guid = ?'),
      unstage: p(`INSERT INTO mail_locations (inbox_id, label_guid, uid, msg_guid, modseq, flags, seen)
        SELECT inbox_id, label_guid, uid, msg_guid, modseq, flags, seen FROM mail_staged_locations WHERE inbox_id = ? AND label_guid = ?`),
      labelLocations: p('SELECT label_guid, uid, msg_guid, modseq, flags FROM mail_locations WHERE inbox_id = ? AND label_guid = ?'),
      dropLocations: p('DELETE FROM mail_locations WHERE inbox_id = ? AND label_guid = ?'),
      dropLabel: p('DELETE FROM mail_labels WHERE inbox_id = ? AND guid = ?'),
      locationByUid: p(
        'SELECT label_guid, uid, msg_guid, modseq, flags FROM mail_locations WHERE inbox_id = ? AND label_guid = ? AND uid = ?',
      ),
      uidsOf: p(
        'SELECT uid, msg_guid AS msgGuid FROM mail_locations WHERE inbox_id = ? AND label_guid = ? AND uid > ? ORDER BY uid LIMIT ?',
      ),
      countIn: p('SELECT count(*) FROM mail_locations WHERE inbox_id = ? AND label_guid = ?').pluck(),
      page: p(`SELECT l.label_guid, l.uid, l.msg_guid, l.modseq, l.flags, ${MESSAGE_COLUMNS}
        FROM mail_locations l JOIN mail_messages m ON m.inbox_id = l.inbox_id AND m.guid = l.msg_guid
        WHERE l.inbox_id = ? AND l.label_guid = ? AND l.uid < ? ORDER BY l.uid DESC LIMIT ?`),
      message: p(`SELECT ${MESSAGE_COLUMNS} FROM mail_messages m WHERE m.inbox_id = ? AND m.guid = ?`),
      messageLocations: p('SELECT label_guid, uid, msg_guid, modseq, flags FROM mail_locations WHERE inbox_id = ? AND msg_guid = ?'),
      // The page's messages looked up one by one: without the hint the planner walks every place
      // of the inbox and tests each against the list (13 ms a search at 100,000 messages).
      searchLocations: p(
        'SELECT label_guid, uid, msg_guid, modseq, flags FROM mail_locations INDEXED BY mail_locations_message WHERE inbox_id = ? AND msg_guid IN (SELECT value FROM json_each(?))',
      ),
      // Rows indexed before migration 029, put in the marked index a batch at a time (markRows).
      unmarked: p('SELECT 1 FROM mail_search_docs INDEXED BY mail_search_unmarked WHERE inbox_id = ? AND marked = 0 LIMIT 1').pluck(),
      markIndex: p(`INSERT INTO mail_search (rowid, from_text, to_text, cc_text, subject)
        SELECT d.id, postern_search_words(m.inbox_id, m.from_text), postern_search_words(m.inbox_id, m.to_text),
          postern_search_words(m.inbox_id, m.cc_text), postern_search_words(m.inbox_id, m.subject)
        FROM mail_search_docs d INDEXED BY mail_search_unmarked JOIN mail_messages m ON m.inbox_id = d.inbox_id AND m.guid = d.guid
        WHERE d.inbox_id = @inboxId AND d.marked = 0 ORDER BY d.id LIMIT @batch`),
      markDocs: p(`UPDATE mail_search_docs SET marked = 1 WHERE id IN
        (SELECT id FROM mail_search_docs INDEXED BY mail_search_unmarked WHERE inbox_id = @inboxId AND marked = 0 ORDER BY id LIMIT @batch)`),
      // Taken when free, lapsed or already ours; another holder's live lease is left alone.
      claim: p(`INSERT INTO mail_watch_leases (inbox_id, holder, expires_at) VALUES (@inboxId, @holder, @until)
        ON CONFLICT (inbox_id) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
        WHERE mail_watch_leases.holder = excluded.holder OR mail_watch_leases.expires_at <= @now`),
      release: p('DELETE FROM mail_watch_leases WHERE inbox_id = ? AND holder = ?'),
    };

    this.applyTx = db.transaction((inboxId: string, ops: readonly IndexOp[], label?: LabelState) => {
      this.present(inboxId);
      const orphans = new Set<string>();
      const unapplied: number[] = [];
      const placed = new Set<string>();
      for (const [i, op] of ops.entries()) {
        if (op.op === 'stage') {
          this.putMessage(inboxId, op.message, placed);
          const l = op.location;
          this.s.putStaged!.run(inboxId, l.labelGuid, l.uid, l.msgGuid, l.modseq, JSON.stringify(l.flags), isSeen(l.flags));
        } else if (op.op === 'put') {
          const m = op.message;
          this.putMessage(inboxId, m, placed);
          const l = op.location;
          const previous = this.s.locationAt!.get(inboxId, l.labelGuid, l.uid) as string | undefined;
          if (previous !== undefined && previous !== l.msgGuid) orphans.add(previous);
          this.s.putLocation!.run(inboxId, l.labelGuid, l.uid, l.msgGuid, l.modseq, JSON.stringify(l.flags), isSeen(l.flags));
        } else if (op.op === 'flags') {
          const { changes } = this.s.setFlags!.run({
            modseq: op.modseq,
            flags: JSON.stringify(op.flags),
            seen: isSeen(op.flags),
            inboxId,
            labelGuid: op.labelGuid,
            uid: op.uid,
          });
          // The index already holds a newer state (or the message left the label meanwhile).
          if (changes === 0) unapplied.push(i);
        } else {
          const guid = this.s.locationAt!.get(inboxId, op.labelGuid, op.uid) as string | undefined;
          if (guid === undefined) {
            unapplied.push(i);
            continue;
          }
          this.s.removeLocation!.run(inboxId, op.labelGuid, op.uid);
          orphans.add(guid);
        }
      }
      if (placed.size > 0) this.placeThreads(inboxId, this.s.pendingIn!.all(inboxId, JSON.stringify([...placed])) as ThreadPendingRow[]);
      for (const guid of orphans) this.s.gcMessage!.run({ inboxId, guid });
      if (label) this.s.putLabel!.run(labelParams(inboxId, label));
      this.bump(inboxId);
      return unapplied;
    });

    this.dropTx = db.transaction((inboxId: string, guid: string) => {
      this.present(inboxId);
      const removed = (this.s.labelLocations!.all(inboxId, guid) as LocationRow[]).map(toLocation);
      const staged = this.s.stagedGuids!.all(inboxId, guid) as string[];
      this.s.dropLocations!.run(inboxId, guid);
      this.s.dropStaged!.run(inboxId, guid);
      this.s.dropLabel!.run(inboxId, guid);
      for (const g of new Set([...removed.map((l) => l.msgGuid), ...staged])) this.s.gcMessage!.run({ inboxId, guid: g });
      this.bump(inboxId);
      return removed;
    });

    this.clearStagedTx = db.transaction((inboxId: string, labelGuid: string) => {
      this.present(inboxId);
      const staged = this.s.stagedGuids!.all(inboxId, labelGuid) as string[];
      this.s.dropStaged!.run(inboxId, labelGuid);
      for (const guid of staged) this.s.gcMessage!.run({ inboxId, guid });
    });

    this.commitStagedTx = db.transaction((inboxId: string, label: LabelState) => {
      this.present(inboxId);
      const old = this.s.labelGuids!.all(inboxId, label.guid) as string[];
      this.s.dropLocations!.run(inboxId, label.guid);
      this.s.unstage!.run(inboxId, label.guid);
      this.s.dropStaged!.run(inboxId, label.guid);
      for (const guid of old) this.s.gcMessage!.run({ inboxId, guid });
      this.s.putLabel!.run(labelParams(inboxId, label));
      this.bump(inboxId);
    });

    // One write for every lease a process renews or tries for.
    this.claimTx = db.transaction((inboxIds: readonly string[], holder: string, ttlMs: number) => {
      const now = Date.now();
      const held = new Set<string>();
      for (const inboxId of inboxIds) {
        if (this.s.claim!.run({ inboxId, holder, until: now + ttlMs, now }).changes > 0) held.add(inboxId);
      }
      return held;
    });

    this.releaseTx = db.transaction((inboxIds: readonly string[], holder: string) => {
      for (const inboxId of inboxIds) this.s.release!.run(inboxId, holder);
    });
    const dropInbox = [
      'mail_thread_links',
      'mail_staged_locations',
      'mail_locations',
      'mail_messages',
      'mail_labels',
      'mail_watch_leases',
      'reseal_jobs',
    ].map((table) => p(`DELETE FROM ${table} WHERE inbox_id = ?`));
    // Not a change to what a page shows but its thread ids: the version is bumped all the same.
    this.backfillTx = db.transaction((inboxId: string, references: ReadonlyMap<string, readonly string[]>) => {
      this.present(inboxId);
      const pending = this.s.pendingIn!.all(inboxId, JSON.stringify([...references.keys()])) as ThreadPendingRow[];
      this.placeThreads(inboxId, pending, references);
      if (pending.length > 0) this.bump(inboxId);
      return pending.length;
    });
    // One batch of markRows: the same rows put in the text index and marked as in it.
    this.markTx = db.transaction((inboxId: string, batch: number) => {
      this.s.markIndex!.run({ inboxId, batch });
      return this.s.markDocs!.run({ inboxId, batch }).changes;
    });
    // The inbox's row stays as a tombstone (a few bytes; inbox ids are never reused): a pass
    // that was running when the inbox was removed, here or in another process, has its next
    // write refused instead of writing the index back.
    this.dropInboxTx = db.transaction((inboxId: string) => {
      for (const statement of dropInbox) statement.run(inboxId);
      this.s.tombstone!.run({ inboxId, version: Date.now() * 1000, at: Date.now() });
    });
  }

  /** Inside apply's transaction: the message, and the ids it links to for its thread. */
  private putMessage(inboxId: string, m: MessageRecord, placed: Set<string>): void {
    this.s.putMessage!.run(messageParams(inboxId, m));
    for (const link of linksOf(m.references, m.inReplyTo)) this.s.putLink!.run(inboxId, link, m.guid);
    placed.add(m.guid);
  }

  /** Inside a write's transaction: the threads of messages that have none (lib/mail/threads.ts). */
  private placeThreads(inboxId: string, pending: readonly ThreadPendingRow[], references?: ReadonlyMap<string, readonly string[]>): void {
    if (pending.length === 0) return;
    const kept = new Map<string, string[]>();
    for (const r of this.s.linksOf!.all(inboxId, JSON.stringify(pending.map((p) => p.guid))) as Array<{ msg_guid: string; link: string }>)
      kept.set(r.msg_guid, [...(kept.get(r.msg_guid) ?? []), r.link]);
    const inputs = pending.map((p) => {
      const links = pendingLinks(kept.get(p.guid) ?? [], p.in_reply_to, references?.get(p.guid));
      // Mail indexed before threads: its References and In-Reply-To become links, for its children to come.
      for (const link of links) if (!kept.get(p.guid)?.includes(link)) this.s.putLink!.run(inboxId, link, p.guid);
      return { guid: p.guid, receivedAt: p.received_at, messageId: p.message_id, links, subject: p.subject };
    });
    const ids = [...new Set(inputs.flatMap((p) => [...p.links, ...(p.messageId ? [p.messageId] : [])]))];
    const rows = [
      ...(this.s.threadedById!.all(inboxId, JSON.stringify(ids)) as ThreadKnownRow[]),
      ...(this.s.threadedByLink!.all(inboxId, JSON.stringify(ids)) as ThreadKnownRow[]),
    ];
    const known = rows.map((r) => ({
      guid: r.guid,
      threadGuid: r.thread_guid,
      receivedAt: r.received_at,
      messageId: r.message_id,
      subject: r.subject,
      links: r.link ? [r.link] : [],
    }));
    for (const [guid, thread] of assignThreads(inputs, known)) this.s.setThread!.run(thread, inboxId, guid);
  }

  async claim(inboxIds: readonly string[], holder: string, ttlMs: number): Promise<Set<string>> {
    return inboxIds.length === 0 ? new Set() : this.claimTx(inboxIds, holder, ttlMs);
  }

  async release(inboxIds: readonly string[], holder: string): Promise<void> {
    if (inboxIds.length > 0) this.releaseTx(inboxIds, holder);
  }

  async version(inboxId: string): Promise<number> {
    return (this.s.version!.get(inboxId) as number | undefined) ?? 0;
  }

  /** Inside the write's transaction. */
  private bump(inboxId: string): void {
    this.s.bump!.run(inboxId, Date.now() * 1000);
  }

  async isSeeded(inboxId: string): Promise<boolean> {
    return this.s.seeded!.get(inboxId) === 1;
  }

  async markSeeded(inboxId: string, seeded: boolean): Promise<void> {
    if (this.s.markSeeded!.run(inboxId, seeded ? 1 : 0, Date.now() * 1000).changes === 0) throw removedInbox();
  }

  /** Inside a write's transaction: the inbox was not removed (removal wins over any pass). */
  private present(inboxId: string): void {
    if (this.s.removedAt!.get(inboxId) != null) throw removedInbox();
  }

  async markSynced(inboxId: string, at: number): Promise<void> {
    this.s.markSynced!.run(inboxId, Date.now() * 1000, at);
  }

  async status(inboxId: string): Promise<IndexStatus> {
    const inbox = this.s.statusInbox!.get(inboxId) as { seeded: number; synced_at: number | null; hinted_at: number | null } | undefined;
    const counts = this.s.statusCounts!.get({ id: inboxId }) as { messages: number; locations: number; labels: number; staged: number };
    const lease = this.s.statusLease!.get(inboxId) as { holder: string; expires_at: number } | undefined;
    return {
      seeded: inbox?.seeded === 1,
      ...counts,
      syncedAt: inbox?.synced_at ?? null,
      hintedAt: inbox?.hinted_at ?? null,
      watcher: lease && lease.expires_at > Date.now() ? { holder: lease.holder, expiresAt: lease.expires_at } : null,
    };
  }

  async markHinted(inboxId: string, at: number): Promise<void> {
    this.s.markHinted!.run(at, inboxId);
  }

  async putWatchReport(origin: string, report: WatchReport, at: number): Promise<void> {
    this.s.putReport!.run(origin, JSON.stringify(report), at);
    this.s.pruneReports!.run(at - 86_400_000);
  }

  async watchReports(since: number): Promise<Array<{ origin: string; report: WatchReport; updatedAt: number }>> {
    const rows = this.s.reports!.all(since) as Array<{ origin: string; report: string; updated_at: number }>;
    return rows.map((r) => ({ origin: r.origin, report: JSON.parse(r.report) as WatchReport, updatedAt: r.updated_at }));
  }

  async dropInbox(inboxId: string): Promise<void> {
    this.dropInboxTx(inboxId);
  }

  async labels(inboxId: string): Promise<LabelState[]> {
    return (this.s.labels!.all(inboxId) as LabelRow[]).map(toLabel);
  }

  async label(inboxId: string, guid: string): Promise<LabelState | null> {
    return rowOrNull(this.s.label!.get(inboxId, guid), toLabel);
  }

  async counts(inboxId: string): Promise<Map<string, { total: number; unread: number }>> {
    const rows = this.s.counts!.all(inboxId) as Array<{ label_guid: string; total: number; unread: number }>;
    return new Map(rows.map((r) => [r.label_guid, { total: r.total, unread: r.unread }]));
  }

  async apply(inboxId: string, ops: readonly IndexOp[], label?: LabelState): Promise<number[]> {
    return this.applyTx(inboxId, ops, label);
  }

  async dropLabel(inboxId: string, guid: string): Promise<Location[]> {
    return this.dropTx(inboxId, guid);
  }

  async clearStaged(inboxId: string, labelGuid: string): Promise<void> {
    this.clearStagedTx(inboxId, labelGuid);
  }

  async commitStaged(inboxId: string, label: LabelState): Promise<void> {
    this.commitStagedTx(inboxId, label);
  }

  async locations(inboxId: string, labelGuid: string, uids: readonly number[]): Promise<Location[]> {
    const out: Location[] = [];
    for (const uid of uids) {
      const row = this.s.locationByUid!.get(inboxId, labelGuid, uid) as LocationRow | undefined;
      if (row) out.push(toLocation(row));
    }
    return out;
  }

  async uidsOf(inboxId: string, labelGuid: string, afterUid: number, limit: number): Promise<Array<{ uid: number; msgGuid: string }>> {
    return this.s.uidsOf!.all(inboxId, labelGuid, afterUid, limit) as Array<{ uid: number; msgGuid: string }>;
  }

  async countIn(inboxId: string, labelGuid: string): Promise<number> {
    return this.s.countIn!.get(inboxId, labelGuid) as number;
  }

  async page(inboxId: string, labelGuid: string, before: number | null, limit: number): Promise<PageRow[]> {
    // UIDs are 32-bit: 2^32 is above every UID.
    const rows = this.s.page!.all(inboxId, labelGuid, before ?? 2 ** 32, limit) as Array<LocationRow & MessageRow>;
    return rows.map((r) => ({ message: toMessage(r), location: toLocation(r) }));
  }

  /**
   * Puts the inbox's rows from before migration 029 in the marked text index, a batch per
   * transaction, letting other work run between batches. Each search with words asks (one
   * index probe); once done, nothing is left to find.
   */
  private async markRows(inboxId: string): Promise<void> {
    const batch = 500;
    while (this.s.unmarked!.get(inboxId) !== undefined) {
      if (this.markTx(inboxId, batch) < batch) break;
      await new Promise((resolve) => setImmediate(resolve));
    }
  }

  async search(inboxId: string, search: IndexSearch, after: SearchAfter | null, limit: number): Promise<SearchRow[]> {
    if (search.text.length > 0) await this.markRows(inboxId);
    const { sql, params } = searchSql(inboxId, search, after, limit);
    const rows = (
      this.workers && search.budgetMs !== undefined
        ? await this.workers.run(sql, params, search.budgetMs)
        : this.db.prepare(sql).all(params)
    ) as MessageRow[];
    if (rows.length === 0) return [];
    const places = this.s.searchLocations!.all(inboxId, JSON.stringify(rows.map((r) => r.guid))) as LocationRow[];
    const byGuid = new Map<string, Location[]>();
    for (const l of places.map(toLocation)) byGuid.set(l.msgGuid, [...(byGuid.get(l.msgGuid) ?? []), l]);
    // A message with no place left (a racing removal) is not a result.
    return rows.map((r) => ({ message: toMessage(r), locations: byGuid.get(r.guid) ?? [] })).filter((r) => r.locations.length > 0);
  }

  async threadPage(inboxId: string, labelGuid: string, before: number | null, limit: number): Promise<PageRow[]> {
    const rows = this.s.threadPage!.all({ inboxId, labelGuid, before: before ?? 2 ** 32, limit }) as Array<LocationRow & MessageRow>;
    return rows.map((r) => ({ message: toMessage(r), location: toLocation(r) }));
  }

  async thread(inboxId: string, threadGuid: string, limit: number): Promise<SearchRow[]> {
    const rows = this.s.thread!.all(inboxId, threadGuid, limit) as MessageRow[];
    if (rows.length === 0) return [];
    const places = this.s.searchLocations!.all(inboxId, JSON.stringify(rows.map((r) => r.guid))) as LocationRow[];
    const byGuid = new Map<string, Location[]>();
    for (const l of places.map(toLocation)) byGuid.set(l.msgGuid, [...(byGuid.get(l.msgGuid) ?? []), l]);
    return rows.map((r) => ({ message: toMessage(r), locations: byGuid.get(r.guid) ?? [] })).filter((r) => r.locations.length > 0);
  }

  async threadStats(inboxId: string, threadGuids: readonly string[]): Promise<Map<string, ThreadStats>> {
    if (threadGuids.length === 0) return new Map();
    const rows = this.s.threadStats!.all(inboxId, JSON.stringify([...new Set(threadGuids)])) as ThreadStatRow[];
    return threadStatsOf(
      rows.map((r) => ({
        threadGuid: r.thread_guid,
        from: r.from_text,
        fromAddress: r.from_address,
        seen: r.seen === 1 || r.seen === true,
      })),
    );
  }

  async unthreaded(inboxId: string, limit: number): Promise<Array<{ guid: string; place: LocationKey | null }>> {
    const rows = this.s.unthreaded!.all({ inboxId, limit }) as Array<{ guid: string; label_guid: string | null; uid: number | null }>;
    return unthreadedOf(rows);
  }

  async backfillThreads(inboxId: string, references: ReadonlyMap<string, readonly string[]>): Promise<number> {
    if (references.size === 0) return 0;
    return this.backfillTx(inboxId, references);
  }

  async message(inboxId: string, msgGuid: string): Promise<{ message: MessageRecord; locations: Location[] } | null> {
    const row = this.s.message!.get(inboxId, msgGuid) as MessageRow | undefined;
    if (!row) return null;
    return { message: toMessage(row), locations: (this.s.messageLocations!.all(inboxId, msgGuid) as LocationRow[]).map(toLocation) };
  }
}
