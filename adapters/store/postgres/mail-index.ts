// The mailbox index on PostgreSQL (docs/mail.md, "The index"), with the SQLite adapter's semantics
// (adapters/store/sqlite/mail-index.ts). Two things differ because of the engine:
// - Writes of one inbox take turns on its mail_inboxes row: every index write starts by bumping
//   the inbox's version (an upsert that locks the row until COMMIT, and says whether the inbox
//   was removed), so writers on several instances never interleave within an inbox nor deadlock
//   on its rows; different inboxes are written in parallel.
// - A batch costs round trips, not statement executions: each run of ops of one kind becomes one
//   multi-row statement over unnest() arrays (SQLite runs one cheap statement per row instead).
//   A run ends where the kind changes or a place repeats, so the ops still apply in their order.
import type { Pool, PoolClient } from 'pg';
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
  TextField,
  ThreadStats,
} from '../../../lib/mail/types.ts';
import type { MailIndexStore, WatchLeases, WatchReport, WatchReports } from '../../../lib/mail/ports.ts';
import { inboxMark, markedWords } from '../../../lib/mail/search-words.ts';
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
import { assignThreads, linksOf, pendingLinks, threadStatsOf } from '../../../lib/mail/threads.ts';
import { notFound } from '../../../lib/errors.ts';
import { searchOverBudget } from '../../../lib/mail/search-bounds.ts';
import { KeptReads, type PgChanges } from './changes.ts';
import { changed, inTransaction, rowsOf, statements, type Queryable } from './sql.ts';

const isSeen = (flags: readonly string[]) => flags.some((f) => f.toLowerCase() === '\\seen');

/** A write for an inbox removed meanwhile: to a read racing the removal, the inbox is gone. */
const removedInbox = () => notFound('inbox not found: it was removed');

/** SQLSTATE of a statement cancelled, by its statement_timeout here. */
const QUERY_CANCELED = '57014';

/** A new inbox row's version starts at the clock (microseconds): a rebuilt index never repeats one. */
const firstVersion = () => Date.now() * 1000;

const MESSAGE_COLUMNS =
  'm.guid, m.size, m.received_at, m.date, m.from_text, m.to_text, m.cc_text, m.reply_to_text, m.subject, m.message_id, m.in_reply_to, m.from_address, m.thread_guid, m.preview';
const LOCATION_COLUMNS = 'label_guid, uid, msg_guid, modseq, flags';
/** Where a place's rows are: (label, uid) pairs as two arrays. */
const PLACES = 'unnest($2::text[], $3::bigint[]) AS t(label_guid, uid)';

const stmt = statements('mailIndex');
const S = {
  // Every index write starts here: the inbox's row locked to COMMIT, its version bumped.
  bump: stmt(
    'bump',
    `INSERT INTO mail_inboxes (inbox_id, seeded, version) VALUES ($1, false, $2)
     ON CONFLICT (inbox_id) DO UPDATE SET version = mail_inboxes.version + 1 RETURNING removed_at`,
  ),
  lockInbox: stmt('lockInbox', 'SELECT removed_at FROM mail_inboxes WHERE inbox_id = $1 FOR UPDATE'),
  seeded: stmt('seeded', 'SELECT seeded FROM mail_inboxes WHERE inbox_id = $1'),
  markSeeded: stmt(
    'markSeeded',
    `INSERT INTO mail_inboxes (inbox_id, seeded, version) VALUES ($1, $2, $3)
     ON CONFLICT (inbox_id) DO UPDATE SET seeded = excluded.seeded, version = mail_inboxes.version + 1 WHERE mail_inboxes.removed_at IS NULL`,
  ),
  tombstone: stmt(
    'tombstone',
    `INSERT INTO mail_inboxes (inbox_id, seeded, version, removed_at) VALUES ($1, false, $2, $3)
     ON CONFLICT (inbox_id) DO UPDATE SET seeded = false, version = mail_inboxes.version + 1, synced_at = NULL, removed_at = excluded.removed_at`,
  ),
  version: stmt('version', 'SELECT version FROM mail_inboxes WHERE inbox_id = $1'),
  markSynced: stmt(
    'markSynced',
    `INSERT INTO mail_inboxes (inbox_id, seeded, version, synced_at) VALUES ($1, false, $2, $3)
     ON CONFLICT (inbox_id) DO UPDATE SET synced_at = excluded.synced_at WHERE mail_inboxes.removed_at IS NULL`,
  ),
  statusInbox: stmt('statusInbox', 'SELECT seeded, synced_at, hinted_at FROM mail_inboxes WHERE inbox_id = $1'),
  markHinted: stmt('markHinted', 'UPDATE mail_inboxes SET hinted_at = $1 WHERE inbox_id = $2 AND removed_at IS NULL'),
  putReport: stmt(
    'putReport',
    `INSERT INTO watch_reports (origin, report, updated_at) VALUES ($1, $2, $3)
     ON CONFLICT (origin) DO UPDATE SET report = excluded.report, updated_at = excluded.updated_at`,
  ),
  reports: stmt('reports', 'SELECT origin, report, updated_at FROM watch_reports WHERE updated_at >= $1 ORDER BY updated_at DESC'),
  // Reports of processes gone for a day are of no use to anyone.
  pruneReports: stmt('pruneReports', 'DELETE FROM watch_reports WHERE updated_at < $1'),
  statusCounts: stmt(
    'statusCounts',
    `SELECT (SELECT count(*) FROM mail_messages WHERE inbox_id = $1) AS messages,
       (SELECT count(*) FROM mail_locations WHERE inbox_id = $1) AS locations,
       (SELECT count(*) FROM mail_labels WHERE inbox_id = $1) AS labels,
       (SELECT count(*) FROM mail_staged_locations WHERE inbox_id = $1) AS staged`,
  ),
  statusLease: stmt('statusLease', 'SELECT holder, expires_at FROM mail_watch_leases WHERE inbox_id = $1'),
  labels: stmt(
    'labels',
    'SELECT guid, path, special_use, uid_validity, uid_next, highest_modseq, fill_low FROM mail_labels WHERE inbox_id = $1',
  ),
  label: stmt(
    'label',
    'SELECT guid, path, special_use, uid_validity, uid_next, highest_modseq, fill_low FROM mail_labels WHERE inbox_id = $1 AND guid = $2',
  ),
  // A fill's progress only goes down, and a complete label (NULL) stays complete; within one
  // UIDVALIDITY uid_next and highest_modseq never decrease (SET reads the row as it was).
  putLabel: stmt(
    'putLabel',
    `INSERT INTO mail_labels (inbox_id, guid, path, special_use, uid_validity, uid_next, highest_modseq, fill_low)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
     ON CONFLICT (inbox_id, guid) DO UPDATE SET path = excluded.path, special_use = excluded.special_use,
       uid_validity = excluded.uid_validity,
       fill_low = CASE WHEN mail_labels.uid_validity <> excluded.uid_validity THEN excluded.fill_low
         WHEN $9::boolean THEN mail_labels.fill_low
         WHEN mail_labels.fill_low IS NULL OR excluded.fill_low IS NULL THEN NULL
         ELSE LEAST(mail_labels.fill_low, excluded.fill_low) END,
       uid_next = CASE WHEN mail_labels.uid_validity = excluded.uid_validity THEN GREATEST(mail_labels.uid_next, excluded.uid_next) ELSE excluded.uid_next END,
       highest_modseq = CASE WHEN mail_labels.uid_validity = excluded.uid_validity
         THEN GREATEST(mail_labels.highest_modseq, excluded.highest_modseq) ELSE excluded.highest_modseq END`,
  ),
  counts: stmt(
    'counts',
    'SELECT label_guid, count(*) AS total, count(*) FILTER (WHERE NOT seen) AS unread FROM mail_locations WHERE inbox_id = $1 GROUP BY label_guid',
  ),
  // `sealed` is learnt once (a row indexed before it was asked for gets it on its next fetch).
  // `sealed` and `has_attachment` are learnt once, and a row from before search gets its vector.
  putMessages: stmt(
    'putMessages',
    `INSERT INTO mail_messages (inbox_id, guid, size, received_at, date, from_text, to_text, cc_text, reply_to_text, subject, message_id, in_reply_to, from_address, sealed, has_attachment, search, preview)
     SELECT $1, * FROM unnest($2::text[], $3::bigint[], $4::bigint[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::text[], $11::text[], $12::text[], $13::text[], $14::boolean[], $15::boolean[], $16::tsvector[], $17::text[])
       AS t(guid) ORDER BY guid
     ON CONFLICT (inbox_id, guid) DO UPDATE SET sealed = coalesce(mail_messages.sealed, excluded.sealed),
       has_attachment = coalesce(mail_messages.has_attachment, excluded.has_attachment), search = coalesce(mail_messages.search, excluded.search),
       preview = coalesce(mail_messages.preview, excluded.preview)
     WHERE (mail_messages.sealed IS NULL AND excluded.sealed IS NOT NULL) OR (mail_messages.has_attachment IS NULL AND excluded.has_attachment IS NOT NULL)
       OR mail_messages.search IS NULL OR (mail_messages.preview IS NULL AND excluded.preview IS NOT NULL)`,
  ),
  // Threads (docs/threads.md; lib/mail/threads.ts decides, these gather and write).
  putLinks: stmt(
    'putLinks',
    `INSERT INTO mail_thread_links (inbox_id, link, msg_guid) SELECT DISTINCT $1, * FROM unnest($2::text[], $3::text[]) AS t(link, guid)
     ORDER BY 2, 3 ON CONFLICT DO NOTHING`,
  ),
  pendingIn: stmt(
    'pendingIn',
    `SELECT guid, received_at, message_id, in_reply_to, subject FROM mail_messages
     WHERE inbox_id = $1 AND guid = ANY($2::text[]) AND thread_guid IS NULL`,
  ),
  unthreaded: stmt(
    'unthreaded',
    `SELECT m.guid, l.label_guid, l.uid FROM (SELECT guid, received_at FROM mail_messages
       WHERE inbox_id = $1 AND thread_guid IS NULL ORDER BY received_at, guid LIMIT $2) m
     LEFT JOIN mail_locations l ON l.inbox_id = $1 AND l.msg_guid = m.guid
     ORDER BY m.received_at, m.guid`,
  ),
  linksOf: stmt('linksOf', 'SELECT msg_guid, link FROM mail_thread_links WHERE inbox_id = $1 AND msg_guid = ANY($2::text[])'),
  threadedById: stmt(
    'threadedById',
    `SELECT guid, thread_guid, received_at, message_id, subject, NULL AS link FROM mail_messages
     WHERE inbox_id = $1 AND message_id = ANY($2::text[]) AND message_id IS NOT NULL AND thread_guid IS NOT NULL`,
  ),
  threadedByLink: stmt(
    'threadedByLink',
    `SELECT m.guid, m.thread_guid, m.received_at, m.message_id, m.subject, l.link FROM mail_thread_links l
     JOIN mail_messages m ON m.inbox_id = l.inbox_id AND m.guid = l.msg_guid
     WHERE l.inbox_id = $1 AND l.link = ANY($2::text[]) AND m.thread_guid IS NOT NULL`,
  ),
  setThreads: stmt(
    'setThreads',
    `UPDATE mail_messages m SET thread_guid = t.thread FROM unnest($2::text[], $3::text[]) AS t(guid, thread)
     WHERE m.inbox_id = $1 AND m.guid = t.guid AND m.thread_guid IS NULL`,
  ),
  // The newest place of each thread in the label: no place of the same thread above it there.
  // Walked down the label's key a place at a time until the page is full: as a plain join the
  // planner hashed every message of the inbox and tested every place below `before` (0.5 s a
  // page at 10,000 messages); the lateral lookup (OFFSET 0 keeps it one) cannot be hashed.
  threadPage: stmt(
    'threadPage',
    `SELECT l.label_guid, l.uid, l.msg_guid, l.modseq, l.flags, ${MESSAGE_COLUMNS}
     FROM mail_locations l CROSS JOIN LATERAL (SELECT * FROM mail_messages m WHERE m.inbox_id = l.inbox_id AND m.guid = l.msg_guid OFFSET 0) m
     WHERE l.inbox_id = $1 AND l.label_guid = $2 AND l.uid < $3
       AND (m.thread_guid IS NULL OR NOT EXISTS (SELECT 1 FROM mail_messages m2
         JOIN mail_locations l2 ON l2.inbox_id = m2.inbox_id AND l2.msg_guid = m2.guid
         WHERE m2.inbox_id = $1 AND m2.thread_guid = m.thread_guid AND l2.label_guid = $2 AND l2.uid > l.uid))
     ORDER BY l.uid DESC LIMIT $4`,
  ),
  thread: stmt(
    'thread',
    `SELECT ${MESSAGE_COLUMNS},
       (SELECT json_agg(json_build_array(l.label_guid, l.uid, l.modseq, l.flags)) FROM mail_locations l WHERE l.inbox_id = m.inbox_id AND l.msg_guid = m.guid) AS places
     FROM mail_messages m WHERE m.inbox_id = $1 AND m.thread_guid = $2 ORDER BY m.received_at, m.guid LIMIT $3`,
  ),
  threadStats: stmt(
    'threadStats',
    `SELECT m.thread_guid, m.from_text, m.from_address,
       (SELECT bool_or(seen) FROM mail_locations l WHERE l.inbox_id = m.inbox_id AND l.msg_guid = m.guid) AS seen
     FROM mail_messages m WHERE m.inbox_id = $1 AND m.thread_guid = ANY($2::text[]) ORDER BY m.received_at, m.guid`,
  ),
  unsearchable: stmt(
    'unsearchable',
    'SELECT guid, from_text, to_text, cc_text, subject FROM mail_messages WHERE inbox_id = $1 AND search IS NULL LIMIT $2',
  ),
  putSearch: stmt(
    'putSearch',
    'UPDATE mail_messages m SET search = t.search FROM unnest($2::text[], $3::tsvector[]) AS t(guid, search) WHERE m.inbox_id = $1 AND m.guid = t.guid',
  ),
  locationsAt: stmt(
    'locationsAt',
    `SELECT l.label_guid, l.uid, l.msg_guid FROM mail_locations l JOIN ${PLACES} ON l.label_guid = t.label_guid AND l.uid = t.uid WHERE l.inbox_id = $1`,
  ),
  // The same message at the same place with an older MODSEQ (another process fetched it
  // earlier and applied it later) leaves the newer flags in place.
  putLocations: stmt(
    'putLocations',
    `INSERT INTO mail_locations (inbox_id, label_guid, uid, msg_guid, modseq, flags, seen)
     SELECT $1, * FROM unnest($2::text[], $3::bigint[], $4::text[], $5::bigint[], $6::text[], $7::boolean[]) AS t(label_guid, uid) ORDER BY label_guid, uid
     ON CONFLICT (inbox_id, label_guid, uid) DO UPDATE SET msg_guid = excluded.msg_guid, modseq = excluded.modseq, flags = excluded.flags, seen = excluded.seen
       WHERE mail_locations.msg_guid <> excluded.msg_guid OR excluded.modseq = 0 OR excluded.modseq >= mail_locations.modseq`,
  ),
  putStaged: stmt(
    'putStaged',
    `INSERT INTO mail_staged_locations (inbox_id, label_guid, uid, msg_guid, modseq, flags, seen)
     SELECT $1, * FROM unnest($2::text[], $3::bigint[], $4::text[], $5::bigint[], $6::text[], $7::boolean[]) AS t(label_guid, uid) ORDER BY label_guid, uid
     ON CONFLICT (inbox_id, label_guid, uid) DO UPDATE SET msg_guid = excluded.msg_guid, modseq = excluded.modseq, flags = excluded.flags, seen = excluded.seen`,
  ),
  // Only a newer MODSEQ replaces flags (0: a server without CONDSTORE, nothing to compare).
  setFlags: stmt(
    'setFlags',
    `UPDATE mail_locations l SET modseq = t.modseq, flags = t.flags, seen = t.seen
     FROM unnest($2::text[], $3::bigint[], $4::bigint[], $5::text[], $6::boolean[]) AS t(label_guid, uid, modseq, flags, seen)
     WHERE l.inbox_id = $1 AND l.label_guid = t.label_guid AND l.uid = t.uid AND (t.modseq = 0 OR l.modseq < t.modseq)
     RETURNING l.label_guid, l.uid`,
  ),
  removeLocations: stmt(
    'removeLocations',
    `DELETE FROM mail_locations l USING ${PLACES} WHERE l.inbox_id = $1 AND l.label_guid = t.label_guid AND l.uid = t.uid
     RETURNING l.label_guid, l.uid, l.msg_guid`,
  ),
  // A message lives as long as some label holds it (or a refill being staged does).
  // Set differences, not correlated NOT EXISTS: those run one inner scan per candidate, and when
  // the planner picks a sequential one (it does for a table it believes empty) a gc of 16,666
  // guids outlived the 30 s statement timeout in CI. Here each table is read once, whatever the plan.
  gcMessages: stmt(
    'gcMessages',
    `DELETE FROM mail_messages m WHERE m.inbox_id = $1 AND m.guid IN (
       SELECT unnest($2::text[])
       EXCEPT SELECT msg_guid FROM mail_locations WHERE inbox_id = $1 AND msg_guid = ANY($2::text[])
       EXCEPT SELECT msg_guid FROM mail_staged_locations WHERE inbox_id = $1 AND msg_guid = ANY($2::text[]))`,
  ),
  dropStaged: stmt('dropStaged', 'DELETE FROM mail_staged_locations WHERE inbox_id = $1 AND label_guid = $2 RETURNING msg_guid'),
  dropLocations: stmt('dropLocations', `DELETE FROM mail_locations WHERE inbox_id = $1 AND label_guid = $2 RETURNING ${LOCATION_COLUMNS}`),
  unstage: stmt(
    'unstage',
    `INSERT INTO mail_locations (inbox_id, label_guid, uid, msg_guid, modseq, flags, seen)
     SELECT inbox_id, label_guid, uid, msg_guid, modseq, flags, seen FROM mail_staged_locations WHERE inbox_id = $1 AND label_guid = $2`,
  ),
  dropLabel: stmt('dropLabel', 'DELETE FROM mail_labels WHERE inbox_id = $1 AND guid = $2'),
  locationsByUid: stmt(
    'locationsByUid',
    `SELECT ${LOCATION_COLUMNS} FROM mail_locations WHERE inbox_id = $1 AND label_guid = $2 AND uid = ANY($3::bigint[])`,
  ),
  uidsOf: stmt(
    'uidsOf',
    'SELECT uid, msg_guid AS "msgGuid" FROM mail_locations WHERE inbox_id = $1 AND label_guid = $2 AND uid > $3 ORDER BY uid LIMIT $4',
  ),
  countIn: stmt('countIn', 'SELECT count(*) AS n FROM mail_locations WHERE inbox_id = $1 AND label_guid = $2'),
  page: stmt(
    'page',
    `SELECT l.label_guid, l.uid, l.msg_guid, l.modseq, l.flags, ${MESSAGE_COLUMNS}
     FROM mail_locations l JOIN mail_messages m ON m.inbox_id = l.inbox_id AND m.guid = l.msg_guid
     WHERE l.inbox_id = $1 AND l.label_guid = $2 AND l.uid < $3 ORDER BY l.uid DESC LIMIT $4`,
  ),
  message: stmt('message', `SELECT ${MESSAGE_COLUMNS} FROM mail_messages m WHERE m.inbox_id = $1 AND m.guid = $2`),
  messageLocations: stmt(
    'messageLocations',
    `SELECT ${LOCATION_COLUMNS} FROM mail_locations WHERE inbox_id = $1 AND msg_guid = $2 ORDER BY label_guid, uid`,
  ),
  // Taken when free, lapsed or already ours; another holder's live lease is left alone. One
  // statement for all of them, in key order (no deadlock with another claimer).
  claim: stmt(
    'claim',
    `INSERT INTO mail_watch_leases (inbox_id, holder, expires_at) SELECT DISTINCT i, $2::text, $3::bigint FROM unnest($1::text[]) AS t(i) ORDER BY i
     ON CONFLICT (inbox_id) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
       WHERE mail_watch_leases.holder = excluded.holder OR mail_watch_leases.expires_at <= $4
     RETURNING inbox_id`,
  ),
  release: stmt('release', 'DELETE FROM mail_watch_leases WHERE inbox_id = ANY($1::text[]) AND holder = $2'),
  dropInbox: Object.fromEntries(
    [
      'mail_thread_links',
      'mail_staged_locations',
      'mail_locations',
      'mail_messages',
      'mail_labels',
      'mail_watch_leases',
      'reseal_jobs',
    ].map((table) => [table, stmt(`dropInbox.${table}`, `DELETE FROM ${table} WHERE inbox_id = $1`)]),
  ),
};

/** A label's row to write; `fillLow` left out keeps what the row says (a rename, say). */
const labelParams = (inboxId: string, l: LabelState) => [
  inboxId,
  l.guid,
  l.path,
  l.specialUse,
  l.uidValidity,
  l.uidNext,
  l.highestModseq,
  l.fillLow ?? null,
  l.fillLow === undefined,
];

/** Each text field's weight in `search` (migration 006). */
const WEIGHTS: Record<TextField, string> = { from: 'A', to: 'B', cc: 'C', subject: 'D' };
/** tsvector positions stop at 16383. */
const MAX_POSITION = 16383;

/**
 * The text index of a message as a tsvector literal: the words markedWords makes (each marked
 * with the inbox, migration 013), positioned in order (phrases need adjacency) and weighted by
 * field. Words are letters, digits and marks: nothing to quote but the word itself.
 */
export function searchVector(inboxId: string, m: Pick<MessageRecord, 'from' | 'to' | 'cc' | 'subject'>): string {
  const out: string[] = [];
  let position = 0;
  for (const field of ['from', 'to', 'cc', 'subject'] as const) {
    for (const word of markedWords(inboxId, m[field] ?? '')) {
      position = Math.min(position + 1, MAX_POSITION);
      out.push(`'${word}':${position}${WEIGHTS[field]}`);
    }
  }
  return out.join(' ');
}

/**
 * `search @@` this: each phrase's words adjacent within their field, the last one a prefix when
 * the phrase says so; every word marked with the inbox, so only its index entries are read.
 */
export function searchTsquery(inboxId: string, text: IndexSearch['text']): string {
  const mark = inboxMark(inboxId);
  return text
    .flatMap(({ field, phrases }) =>
      phrases.map(
        ({ words, prefix }) =>
          `(${words.map((w, i) => `'${mark}${w}':${prefix && i === words.length - 1 ? '*' : ''}${WEIGHTS[field]}`).join(' <-> ')})`,
      ),
    )
    .join(' & ');
}

/**
 * A search as one statement; its shape varies with the conditions given (not a named one).
 * Exported for bench/search.ts, whose raw-SQL floor must run this very statement.
 */
export function searchStatement(
  inboxId: string,
  q: IndexSearch,
  after: SearchAfter | null,
  limit: number,
): { text: string; values: unknown[] } {
  const values: unknown[] = [inboxId];
  const param = (v: unknown, type: string) => `$${values.push(v)}::${type}`;
  const where = ['m.inbox_id = $1::text'];
  // With words, the text index's matches drive and are sorted, as on SQLite: left to itself, the
  // planner guesses a prefix match's selectivity (~0.5 %), expects a page of a rare word early in
  // a walk of the inbox newest first, and walks all of it (65 ms at 100,000 messages, bench:search).
  const matches =
    q.text.length > 0
      ? `WITH f AS MATERIALIZED (SELECT guid FROM mail_messages WHERE inbox_id = $1::text AND search @@ ${param(searchTsquery(inboxId, q.text), 'tsquery')}) `
      : '';
  if (q.receivedFrom !== undefined) where.push(`m.received_at >= ${param(q.receivedFrom, 'bigint')}`);
  if (q.receivedBefore !== undefined) where.push(`m.received_at < ${param(q.receivedBefore, 'bigint')}`);
  if (q.minSize !== undefined) where.push(`m.size >= ${param(q.minSize, 'bigint')}`);
  if (q.maxSize !== undefined) where.push(`m.size < ${param(q.maxSize, 'bigint')}`);
  if (q.hasAttachment !== undefined) where.push(`m.has_attachment = ${param(q.hasAttachment, 'boolean')}`);
  if (q.guids !== undefined) where.push(`m.guid = ANY(${param(q.guids, 'text[]')})`);
  if (q.threadGuid !== undefined) where.push(`m.thread_guid = ${param(q.threadGuid, 'text')}`);
  if (after) {
    const at = param(after.receivedAt, 'bigint');
    where.push(`(m.received_at < ${at} OR (m.received_at = ${at} AND m.guid < ${param(after.guid, 'text')}))`);
  }
  // Label and keywords hold at one same place: a message's flags are per label.
  const place: string[] = [];
  const hasFlag = (spellings: string[]) =>
    `EXISTS (SELECT 1 FROM json_array_elements_text(l.flags::json) f(v) WHERE lower(f.v) = ANY(${param(spellings, 'text[]')}))`;
  if (q.labelGuid !== undefined) place.push(`l.label_guid = ${param(q.labelGuid, 'text')}`);
  if (q.hasKeyword !== undefined) place.push(hasFlag(q.hasKeyword));
  if (q.notKeyword !== undefined) place.push(`NOT ${hasFlag(q.notKeyword)}`);
  where.push(
    `EXISTS (SELECT 1 FROM mail_locations l WHERE l.inbox_id = m.inbox_id AND l.msg_guid = m.guid${place.map((c) => ` AND ${c}`).join('')})`,
  );
  const from = matches ? 'f JOIN mail_messages m ON m.inbox_id = $1::text AND m.guid = f.guid' : 'mail_messages m';
  const page = `${matches}SELECT ${MESSAGE_COLUMNS} FROM ${from} WHERE ${where.join(' AND ')} ORDER BY m.received_at DESC, m.guid DESC LIMIT ${param(limit, 'int')}`;
  // Each result's places come with it (a round trip less than asking after), as [label, uid, modseq, flags].
  const places = `(SELECT json_agg(json_build_array(l.label_guid, l.uid, l.modseq, l.flags)) FROM mail_locations l WHERE l.inbox_id = $1::text AND l.msg_guid = r.guid) AS places`;
  const text = `SELECT r.*, ${places} FROM (${page}) r ORDER BY r.received_at DESC, r.guid DESC`;
  return { text, values };
}

/** A search result's row: the message's columns and its places (searchStatement). */
type SearchResultRow = MessageRow & { places: Array<[string, number, number, string]> | null };

/**
 * The messages of a run, one row per GUID: as if upserted in order, the first record's columns
 * and the first `sealed` and `hasAttachment` known.
 */
function messageArrays(inboxId: string, records: readonly MessageRecord[]): unknown[] {
  type Merged = MessageRecord & { known: boolean | null; attachment: boolean | null; text: string | null };
  const byGuid = new Map<string, Merged>();
  for (const m of records) {
    const seen = byGuid.get(m.guid);
    if (!seen) byGuid.set(m.guid, { ...m, known: m.sealed ?? null, attachment: m.hasAttachment ?? null, text: m.preview ?? null });
    else {
      if (seen.known === null && m.sealed !== undefined) seen.known = m.sealed;
      if (seen.attachment === null && m.hasAttachment != null) seen.attachment = m.hasAttachment;
      if (seen.text === null && m.preview) seen.text = m.preview;
    }
  }
  const ms = [...byGuid.values()];
  const col = <T>(f: (m: Merged) => T) => ms.map(f);
  return [
    inboxId,
    col((m) => m.guid),
    col((m) => m.size),
    col((m) => m.receivedAt),
    col((m) => m.date),
    col((m) => m.from),
    col((m) => m.to),
    col((m) => m.cc),
    col((m) => m.replyTo),
    col((m) => m.subject),
    col((m) => m.messageId),
    col((m) => m.inReplyTo),
    col((m) => m.fromAddress),
    col((m) => m.known),
    col((m) => m.attachment),
    col((m) => searchVector(inboxId, m)),
    col((m) => m.text),
  ];
}

const locationArrays = (inboxId: string, ls: readonly Location[]): unknown[] => [
  inboxId,
  ls.map((l) => l.labelGuid),
  ls.map((l) => l.uid),
  ls.map((l) => l.msgGuid),
  ls.map((l) => l.modseq),
  ls.map((l) => JSON.stringify(l.flags)),
  ls.map((l) => isSeen(l.flags)),
];

const locationKey = (labelGuid: string, uid: number) => `${labelGuid}\n${uid}`;

type Run = { kind: IndexOp['op']; ops: Array<[number, IndexOp]> };

/** The ops cut into runs of one kind in which no place repeats (a multi-row statement touches a row once). */
function runsOf(ops: readonly IndexOp[]): Run[] {
  const runs: Run[] = [];
  let places = new Set<string>();
  for (const [i, op] of ops.entries()) {
    const key =
      op.op === 'put' || op.op === 'stage' ? locationKey(op.location.labelGuid, op.location.uid) : locationKey(op.labelGuid, op.uid);
    const last = runs[runs.length - 1];
    if (!last || last.kind !== op.op || places.has(key)) {
      runs.push({ kind: op.op, ops: [] });
      places = new Set();
    }
    places.add(key);
    runs[runs.length - 1]!.ops.push([i, op]);
  }
  return runs;
}

export class PgMailIndex implements MailIndexStore, WatchLeases, WatchReports {
  // The driver is asynchronous: a batch in one transaction keeps the loop free while it runs.
  readonly writeSizing = null;
  /** `pool` from openPgPool (db.ts): BIGINT columns come back as numbers. */
  /** Inboxes whose rows all have their search vectors (fillSearch). */
  private readonly searchFilled = new Set<string>();
  /** Inboxes seen seeded, kept (see changes.ts): every read asks, and only a removal or reset unseeds. */
  private readonly seeded: KeptReads<true> | null;

  constructor(
    private readonly pool: Pool,
    changes: PgChanges | null = null,
    keepMs = 0,
  ) {
    this.seeded = changes && keepMs > 0 ? new KeptReads<true>(changes, keepMs) : null;
    changes?.on('postern_index_seeded', (id) => this.seeded?.drop(id));
  }

  /** First in every index write's transaction: the inbox's row locked and its version bumped, unless it was removed. */
  private async begin(c: PoolClient, inboxId: string): Promise<void> {
    const [row] = await rowsOf<{ removed_at: number | null }>(c, S.bump([inboxId, firstVersion()]));
    if (row?.removed_at != null) throw removedInbox();
  }

  /** Inside a write's transaction: the threads of messages that have none (lib/mail/threads.ts). */
  private async placeThreads(
    c: Queryable,
    inboxId: string,
    pending: readonly ThreadPendingRow[],
    references?: ReadonlyMap<string, readonly string[]>,
  ): Promise<void> {
    if (pending.length === 0) return;
    const kept = new Map<string, string[]>();
    for (const r of await rowsOf<{ msg_guid: string; link: string }>(c, S.linksOf([inboxId, pending.map((p) => p.guid)])))
      kept.set(r.msg_guid, [...(kept.get(r.msg_guid) ?? []), r.link]);
    const fresh: Array<[string, string]> = [];
    const inputs = pending.map((p) => {
      const links = pendingLinks(kept.get(p.guid) ?? [], p.in_reply_to, references?.get(p.guid));
      // Mail indexed before threads: its References and In-Reply-To become links, for its children to come.
      for (const link of links) if (!kept.get(p.guid)?.includes(link)) fresh.push([link, p.guid]);
      return { guid: p.guid, receivedAt: p.received_at, messageId: p.message_id, links, subject: p.subject };
    });
    if (fresh.length > 0) await c.query(S.putLinks([inboxId, fresh.map((f) => f[0]), fresh.map((f) => f[1])]));
    const ids = [...new Set(inputs.flatMap((p) => [...p.links, ...(p.messageId ? [p.messageId] : [])]))];
    const rows = [
      ...(ids.length > 0 ? await rowsOf<ThreadKnownRow>(c, S.threadedById([inboxId, ids])) : []),
      ...(ids.length > 0 ? await rowsOf<ThreadKnownRow>(c, S.threadedByLink([inboxId, ids])) : []),
    ];
    const known = rows.map((r) => ({
      guid: r.guid,
      threadGuid: r.thread_guid,
      receivedAt: r.received_at,
      messageId: r.message_id,
      subject: r.subject,
      links: r.link ? [r.link] : [],
    }));
    const placed = [...assignThreads(inputs, known)];
    await c.query(S.setThreads([inboxId, placed.map((p) => p[0]), placed.map((p) => p[1])]));
  }

  private async gc(c: Queryable, inboxId: string, guids: Iterable<string>): Promise<void> {
    const list = [...new Set(guids)];
    if (list.length > 0) await c.query(S.gcMessages([inboxId, list]));
  }

  async apply(inboxId: string, ops: readonly IndexOp[], label?: LabelState): Promise<number[]> {
    return inTransaction(this.pool, async (c) => {
      await this.begin(c, inboxId);
      const orphans = new Set<string>();
      const unapplied: number[] = [];
      // The messages put, placed in threads together once all are in (lib/mail/threads.ts).
      const placed = new Set<string>();
      for (const run of runsOf(ops)) {
        if (run.kind === 'put' || run.kind === 'stage') {
          const puts = run.ops.map(([, op]) => op as Extract<IndexOp, { op: 'put' | 'stage' }>);
          await c.query(
            S.putMessages(
              messageArrays(
                inboxId,
                puts.map((p) => p.message),
              ),
            ),
          );
          const links = puts.flatMap((p) => linksOf(p.message.references, p.message.inReplyTo).map((l) => [l, p.message.guid] as const));
          if (links.length > 0) await c.query(S.putLinks([inboxId, links.map((l) => l[0]), links.map((l) => l[1])]));
          for (const p of puts) placed.add(p.message.guid);
          const locations = puts.map((p) => p.location);
          if (run.kind === 'stage') {
            await c.query(S.putStaged(locationArrays(inboxId, locations)));
            continue;
          }
          const previous = await rowsOf<{ label_guid: string; uid: number; msg_guid: string }>(
            c,
            S.locationsAt([inboxId, locations.map((l) => l.labelGuid), locations.map((l) => l.uid)]),
          );
          const next = new Map(locations.map((l) => [locationKey(l.labelGuid, l.uid), l.msgGuid]));
          for (const p of previous) if (next.get(locationKey(p.label_guid, p.uid)) !== p.msg_guid) orphans.add(p.msg_guid);
          await c.query(S.putLocations(locationArrays(inboxId, locations)));
        } else if (run.kind === 'flags') {
          const fs = run.ops.map(([, op]) => op as Extract<IndexOp, { op: 'flags' }>);
          const done = await rowsOf<{ label_guid: string; uid: number }>(
            c,
            S.setFlags([
              inboxId,
              fs.map((f) => f.labelGuid),
              fs.map((f) => f.uid),
              fs.map((f) => f.modseq),
              fs.map((f) => JSON.stringify(f.flags)),
              fs.map((f) => isSeen(f.flags)),
            ]),
          );
          // The index already holds a newer state (or the message left the label meanwhile).
          const applied = new Set(done.map((d) => locationKey(d.label_guid, d.uid)));
          for (const [i, f] of run.ops as Array<[number, Extract<IndexOp, { op: 'flags' }>]>)
            if (!applied.has(locationKey(f.labelGuid, f.uid))) unapplied.push(i);
        } else {
          const rs = run.ops.map(([, op]) => op as Extract<IndexOp, { op: 'remove' }>);
          const gone = await rowsOf<{ label_guid: string; uid: number; msg_guid: string }>(
            c,
            S.removeLocations([inboxId, rs.map((r) => r.labelGuid), rs.map((r) => r.uid)]),
          );
          const removed = new Set(gone.map((g) => locationKey(g.label_guid, g.uid)));
          for (const g of gone) orphans.add(g.msg_guid);
          for (const [i, r] of run.ops as Array<[number, Extract<IndexOp, { op: 'remove' }>]>)
            if (!removed.has(locationKey(r.labelGuid, r.uid))) unapplied.push(i);
        }
      }
      if (placed.size > 0) await this.placeThreads(c, inboxId, await rowsOf<ThreadPendingRow>(c, S.pendingIn([inboxId, [...placed]])));
      await this.gc(c, inboxId, orphans);
      if (label) await c.query(S.putLabel(labelParams(inboxId, label)));
      return unapplied.sort((a, b) => a - b);
    });
  }

  async dropLabel(inboxId: string, guid: string): Promise<Location[]> {
    return inTransaction(this.pool, async (c) => {
      await this.begin(c, inboxId);
      const removed = (await rowsOf<LocationRow>(c, S.dropLocations([inboxId, guid]))).map(toLocation).sort((a, b) => a.uid - b.uid);
      const staged = await rowsOf<{ msg_guid: string }>(c, S.dropStaged([inboxId, guid]));
      await c.query(S.dropLabel([inboxId, guid]));
      await this.gc(c, inboxId, [...removed.map((l) => l.msgGuid), ...staged.map((s) => s.msg_guid)]);
      return removed;
    });
  }

  async clearStaged(inboxId: string, labelGuid: string): Promise<void> {
    // Not a change to what reads see: the version stays, the inbox's row is only locked.
    await inTransaction(this.pool, async (c) => {
      const [row] = await rowsOf<{ removed_at: number | null }>(c, S.lockInbox([inboxId]));
      if (row?.removed_at != null) throw removedInbox();
      const staged = await rowsOf<{ msg_guid: string }>(c, S.dropStaged([inboxId, labelGuid]));
      await this.gc(
        c,
        inboxId,
        staged.map((s) => s.msg_guid),
      );
    });
  }

  async commitStaged(inboxId: string, label: LabelState): Promise<void> {
    await inTransaction(this.pool, async (c) => {
      await this.begin(c, inboxId);
      const old = await rowsOf<LocationRow>(c, S.dropLocations([inboxId, label.guid]));
      await c.query(S.unstage([inboxId, label.guid]));
      await c.query(S.dropStaged([inboxId, label.guid]));
      await this.gc(
        c,
        inboxId,
        old.map((l) => l.msg_guid),
      );
      await c.query(S.putLabel(labelParams(inboxId, label)));
    });
  }

  async claim(inboxIds: readonly string[], holder: string, ttlMs: number): Promise<Set<string>> {
    if (inboxIds.length === 0) return new Set();
    const now = Date.now();
    const held = await rowsOf<{ inbox_id: string }>(this.pool, S.claim([inboxIds, holder, now + ttlMs, now]));
    return new Set(held.map((r) => r.inbox_id));
  }

  async release(inboxIds: readonly string[], holder: string): Promise<void> {
    if (inboxIds.length > 0) await this.pool.query(S.release([inboxIds, holder]));
  }

  async version(inboxId: string): Promise<number> {
    const [row] = await rowsOf<{ version: number }>(this.pool, S.version([inboxId]));
    return row?.version ?? 0;
  }

  async isSeeded(inboxId: string): Promise<boolean> {
    const read = async () => ((await rowsOf<{ seeded: boolean }>(this.pool, S.seeded([inboxId])))[0]?.seeded === true ? true : null);
    return (this.seeded ? await this.seeded.get(inboxId, read) : await read()) === true;
  }

  async markSeeded(inboxId: string, seeded: boolean): Promise<void> {
    const written = await changed(this.pool, S.markSeeded([inboxId, seeded, firstVersion()]));
    if (!seeded) this.seeded?.drop(inboxId);
    if (written === 0) throw removedInbox();
  }

  async markSynced(inboxId: string, at: number): Promise<void> {
    await this.pool.query(S.markSynced([inboxId, firstVersion(), at]));
  }

  async status(inboxId: string): Promise<IndexStatus> {
    const [inbox] = await rowsOf<{ seeded: boolean; synced_at: number | null; hinted_at: number | null }>(
      this.pool,
      S.statusInbox([inboxId]),
    );
    const [counts] = await rowsOf<{ messages: number; locations: number; labels: number; staged: number }>(
      this.pool,
      S.statusCounts([inboxId]),
    );
    const [lease] = await rowsOf<{ holder: string; expires_at: number }>(this.pool, S.statusLease([inboxId]));
    return {
      seeded: inbox?.seeded === true,
      messages: counts!.messages,
      locations: counts!.locations,
      labels: counts!.labels,
      staged: counts!.staged,
      syncedAt: inbox?.synced_at ?? null,
      hintedAt: inbox?.hinted_at ?? null,
      watcher: lease && lease.expires_at > Date.now() ? { holder: lease.holder, expiresAt: lease.expires_at } : null,
    };
  }

  async markHinted(inboxId: string, at: number): Promise<void> {
    await this.pool.query(S.markHinted([at, inboxId]));
  }

  async putWatchReport(origin: string, report: WatchReport, at: number): Promise<void> {
    await this.pool.query(S.putReport([origin, JSON.stringify(report), at]));
    await this.pool.query(S.pruneReports([at - 86_400_000]));
  }

  async watchReports(since: number): Promise<Array<{ origin: string; report: WatchReport; updatedAt: number }>> {
    const found = await rowsOf<{ origin: string; report: string; updated_at: number }>(this.pool, S.reports([since]));
    return found.map((r) => ({ origin: r.origin, report: JSON.parse(r.report) as WatchReport, updatedAt: r.updated_at }));
  }

  async dropInbox(inboxId: string): Promise<void> {
    // The inbox's row stays as a tombstone (inbox ids are never reused): a pass that was running
    // when the inbox was removed, here or on another instance, has its next write refused. Taken
    // first, so a write under way finishes before the rows go.
    await inTransaction(this.pool, async (c) => {
      await c.query(S.tombstone([inboxId, firstVersion(), Date.now()]));
      for (const statement of Object.values(S.dropInbox)) await c.query(statement([inboxId]));
    });
    this.seeded?.drop(inboxId);
  }

  async labels(inboxId: string): Promise<LabelState[]> {
    return (await rowsOf<LabelRow>(this.pool, S.labels([inboxId]))).map(toLabel);
  }

  async label(inboxId: string, guid: string): Promise<LabelState | null> {
    const [row] = await rowsOf<LabelRow>(this.pool, S.label([inboxId, guid]));
    return row ? toLabel(row) : null;
  }

  async counts(inboxId: string): Promise<Map<string, { total: number; unread: number }>> {
    const found = await rowsOf<{ label_guid: string; total: number; unread: number }>(this.pool, S.counts([inboxId]));
    return new Map(found.map((r) => [r.label_guid, { total: r.total, unread: r.unread }]));
  }

  async locations(inboxId: string, labelGuid: string, uids: readonly number[]): Promise<Location[]> {
    if (uids.length === 0) return [];
    const byUid = new Map(
      (await rowsOf<LocationRow>(this.pool, S.locationsByUid([inboxId, labelGuid, uids]))).map((r) => [r.uid, toLocation(r)]),
    );
    // In the order asked, as SQLite answers.
    return uids.flatMap((uid) => {
      const l = byUid.get(uid);
      return l ? [l] : [];
    });
  }

  async uidsOf(inboxId: string, labelGuid: string, afterUid: number, limit: number): Promise<Array<{ uid: number; msgGuid: string }>> {
    return rowsOf<{ uid: number; msgGuid: string }>(this.pool, S.uidsOf([inboxId, labelGuid, afterUid, limit]));
  }

  async countIn(inboxId: string, labelGuid: string): Promise<number> {
    const [row] = await rowsOf<{ n: number }>(this.pool, S.countIn([inboxId, labelGuid]));
    return row?.n ?? 0;
  }

  async page(inboxId: string, labelGuid: string, before: number | null, limit: number): Promise<PageRow[]> {
    // UIDs are 32-bit: 2^32 is above every UID.
    const found = await rowsOf<LocationRow & MessageRow>(this.pool, S.page([inboxId, labelGuid, before ?? 2 ** 32, limit]));
    return found.map((r) => ({ message: toMessage(r), location: toLocation(r) }));
  }

  async threadPage(inboxId: string, labelGuid: string, before: number | null, limit: number): Promise<PageRow[]> {
    const found = await rowsOf<LocationRow & MessageRow>(this.pool, S.threadPage([inboxId, labelGuid, before ?? 2 ** 32, limit]));
    return found.map((r) => ({ message: toMessage(r), location: toLocation(r) }));
  }

  async thread(inboxId: string, threadGuid: string, limit: number): Promise<SearchRow[]> {
    const rows = await rowsOf<SearchResultRow>(this.pool, S.thread([inboxId, threadGuid, limit]));
    return rows
      .map((r) => ({
        message: toMessage(r),
        locations: (r.places ?? []).map(([labelGuid, uid, modseq, flags]) =>
          toLocation({ label_guid: labelGuid, uid, msg_guid: r.guid, modseq, flags }),
        ),
      }))
      .filter((r) => r.locations.length > 0);
  }

  async threadStats(inboxId: string, threadGuids: readonly string[]): Promise<Map<string, ThreadStats>> {
    if (threadGuids.length === 0) return new Map();
    const rows = await rowsOf<ThreadStatRow>(this.pool, S.threadStats([inboxId, [...new Set(threadGuids)]]));
    return threadStatsOf(
      rows.map((r) => ({ threadGuid: r.thread_guid, from: r.from_text, fromAddress: r.from_address, seen: r.seen === true })),
    );
  }

  async unthreaded(inboxId: string, limit: number): Promise<Array<{ guid: string; place: LocationKey | null }>> {
    return unthreadedOf(
      await rowsOf<{ guid: string; label_guid: string | null; uid: number | string | null }>(this.pool, S.unthreaded([inboxId, limit])),
    );
  }

  async backfillThreads(inboxId: string, references: ReadonlyMap<string, readonly string[]>): Promise<number> {
    if (references.size === 0) return 0;
    return inTransaction(this.pool, async (c) => {
      // Takes the inbox's turn like any index write (and bumps its version: thread ids appear).
      await this.begin(c, inboxId);
      const pending = await rowsOf<ThreadPendingRow>(c, S.pendingIn([inboxId, [...references.keys()]]));
      await this.placeThreads(c, inboxId, pending, references);
      return pending.length;
    });
  }

  async message(inboxId: string, msgGuid: string): Promise<{ message: MessageRecord; locations: Location[] } | null> {
    const [row] = await rowsOf<MessageRow>(this.pool, S.message([inboxId, msgGuid]));
    if (!row) return null;
    return {
      message: toMessage(row),
      locations: (await rowsOf<LocationRow>(this.pool, S.messageLocations([inboxId, msgGuid]))).map(toLocation),
    };
  }

  async search(inboxId: string, search: IndexSearch, after: SearchAfter | null, limit: number): Promise<SearchRow[]> {
    if (search.text.length > 0 && !this.searchFilled.has(inboxId)) await this.fillSearch(inboxId);
    const statement = searchStatement(inboxId, search, after, limit);
    const rows =
      search.budgetMs === undefined
        ? (await this.pool.query<SearchResultRow>(statement)).rows
        : await inTransaction(this.pool, async (c) => {
            // The budget holds for this statement alone (SET LOCAL), then the connection's own.
            await c.query("SELECT set_config('statement_timeout', $1, true)", [String(search.budgetMs)]);
            return (await c.query<SearchResultRow>(statement)).rows;
          }).catch((err: unknown) => {
            if ((err as { code?: unknown } | null)?.code === QUERY_CANCELED) throw searchOverBudget(search.budgetMs!);
            throw err;
          });
    return rows.map((r) => ({
      message: toMessage(r),
      locations: (r.places ?? []).map(([labelGuid, uid, modseq, flags]) =>
        toLocation({ label_guid: labelGuid, uid, msg_guid: r.guid, modseq, flags }),
      ),
    }));
  }

  /**
   * Gives the inbox's rows from before search (migration 006) their vectors, a few hundred at a
   * time. Once per inbox and process: every index write since gives its rows theirs.
   */
  private async fillSearch(inboxId: string): Promise<void> {
    const batch = 500;
    for (;;) {
      const rows = await rowsOf<Pick<MessageRow, 'guid' | 'from_text' | 'to_text' | 'cc_text' | 'subject'>>(
        this.pool,
        S.unsearchable([inboxId, batch]),
      );
      if (rows.length > 0) {
        const vectors = rows.map((r) => searchVector(inboxId, { from: r.from_text, to: r.to_text, cc: r.cc_text, subject: r.subject }));
        await this.pool.query(S.putSearch([inboxId, rows.map((r) => r.guid), vectors]));
      }
      if (rows.length < batch) break;
    }
    if (this.searchFilled.size >= 10_000) this.searchFilled.clear();
    this.searchFilled.add(inboxId);
  }
}
