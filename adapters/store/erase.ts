// Deleting a project or a member from every table that names it (`postern admin project delete`,
// `member remove`). Both engines have the same tables and columns (rows/dump.ts), so the
// statements are written once here and each engine's directory adapter runs them in order, in one
// transaction. `$1` is the project's or member's id; the mail index's tombstone also takes `$2`
// (its next version) and `$3` (the time). SQLite binds them by name (sqliteText).
//
// Children before parents, so foreign keys hold after every statement. Mail in Dovecot is never
// touched: Postern only forgets what it kept about it.
import type { ProjectErased } from '../../lib/directory/ports.ts';

export interface EraseStep {
  sql: string;
  /** What the step's deleted rows count as, in what the command prints. */
  counts?: keyof ProjectErased;
}

const INBOXES = 'SELECT id FROM inboxes WHERE project_id = $1';
const MEMBERS = 'SELECT id FROM members WHERE project_id = $1';
const PROJECT_ENDPOINTS = 'SELECT id FROM webhook_endpoints WHERE project_id = $1';

/** The tables keyed by an inbox id, the mail index's first (as MailIndexStore.dropInbox deletes them). */
const INBOX_TABLES = [
  'mail_staged_locations',
  'mail_locations',
  'mail_messages',
  'mail_labels',
  'mail_watch_leases',
  'reseal_jobs',
  'mail_send_minutes',
  'message_keys',
  'epoch_keys',
  'token_inboxes',
  'grants',
  'inbox_identities',
  'inbox_addresses',
];

/** What a member leaves behind besides grants and tokens: sign-in, sessions, keys. */
const memberRows = (members: string): EraseStep[] => [
  { sql: `DELETE FROM grants WHERE member_id IN (${members})` },
  { sql: `DELETE FROM sessions WHERE member_id IN (${members})`, counts: 'sessions' },
  {
    sql: `DELETE FROM webauthn_challenges WHERE member_id IN (${members})
      OR invite_id IN (SELECT id FROM passkey_invites WHERE member_id IN (${members}))`,
  },
  { sql: `DELETE FROM passkey_invites WHERE member_id IN (${members})` },
  { sql: `DELETE FROM passkeys WHERE member_id IN (${members})` },
  { sql: `DELETE FROM member_keys WHERE member_id IN (${members})` },
  { sql: `DELETE FROM member_key_blobs WHERE member_id IN (${members})` },
  { sql: `DELETE FROM key_handovers WHERE member_id IN (${members})` },
];

/** A token's webhooks act with its authority: they go with it, their deliveries first. */
const tokenRows = (tokens: string): EraseStep[] => [
  { sql: `DELETE FROM webhook_deliveries WHERE endpoint_id IN (SELECT id FROM webhook_endpoints WHERE token_id IN (${tokens}))` },
  { sql: `DELETE FROM webhook_endpoints WHERE token_id IN (${tokens})`, counts: 'webhooks' },
  { sql: `DELETE FROM token_inboxes WHERE token_id IN (${tokens})` },
  { sql: `DELETE FROM tokens WHERE id IN (${tokens})`, counts: 'tokens' },
];

/**
 * A project and everything in it. Its inboxes keep a tombstone in the mail index (as `inbox
 * remove` leaves): a running server's pass over one, here or on another instance, has its next
 * write refused instead of writing the index back, and the inbox list's version moves (the
 * trigger on `inboxes`), so running servers stop watching them.
 */
export const PROJECT_ERASE: readonly EraseStep[] = [
  {
    sql: `INSERT INTO mail_inboxes (inbox_id, seeded, version, removed_at)
      SELECT id, false, CAST($2 AS BIGINT), CAST($3 AS BIGINT) FROM inboxes WHERE project_id = $1
      ON CONFLICT (inbox_id) DO UPDATE SET seeded = false, version = mail_inboxes.version + 1, synced_at = NULL, removed_at = excluded.removed_at`,
  },
  ...INBOX_TABLES.map((table) => ({ sql: `DELETE FROM ${table} WHERE inbox_id IN (${INBOXES})` })),
  { sql: `DELETE FROM mail_outbox_copies WHERE id IN (SELECT id FROM mail_outbox WHERE project_id = $1)` },
  { sql: `DELETE FROM mail_outbox_sealed WHERE id IN (SELECT id FROM mail_outbox WHERE project_id = $1)` },
  { sql: 'DELETE FROM mail_outbox WHERE project_id = $1' },
  { sql: `DELETE FROM webhook_deliveries WHERE project_id = $1 OR endpoint_id IN (${PROJECT_ENDPOINTS})` },
  { sql: 'DELETE FROM webhook_endpoints WHERE project_id = $1', counts: 'webhooks' },
  ...memberRows(MEMBERS),
  ...tokenRows('SELECT id FROM tokens WHERE project_id = $1'),
  { sql: 'DELETE FROM events WHERE project_id = $1', counts: 'events' },
  { sql: 'DELETE FROM event_types WHERE project_id = $1' },
  { sql: 'DELETE FROM event_idempotency WHERE project_id = $1' },
  // A stream is the inbox's id for inbox events, the project's otherwise (lib/events/log.ts).
  { sql: `DELETE FROM event_streams WHERE stream = $1 OR stream IN (${INBOXES})` },
  { sql: 'DELETE FROM inboxes WHERE project_id = $1', counts: 'inboxes' },
  { sql: 'DELETE FROM members WHERE project_id = $1', counts: 'members' },
  { sql: 'DELETE FROM projects WHERE id = $1', counts: 'projects' },
];

/**
 * A member: their grants, sessions, passkeys and invites, keys and key backup, tokens (and the
 * webhooks those made). What they did stays: the project's events, the mail they sent.
 */
export const MEMBER_ERASE: readonly EraseStep[] = [
  ...memberRows('$1'),
  ...tokenRows('SELECT id FROM tokens WHERE member_id = $1'),
  { sql: 'DELETE FROM members WHERE id = $1', counts: 'members' },
];

/** How many of `$1`, `$2`, … a statement takes (PostgreSQL refuses values it does not use). */
export const parameterCount = (sql: string): number => Math.max(0, ...[...sql.matchAll(/\$(\d+)/g)].map((m) => Number(m[1])));

/** The statement for SQLite, its `$n` as named parameters `@pn`. */
export const sqliteText = (sql: string): string => sql.replace(/\$(\d+)/g, '@p$1');

/** What a deletion removed, counted by the steps that say what they count. */
export function tally(counted: Array<{ step: EraseStep; rows: number }>): ProjectErased {
  const out: ProjectErased = { projects: 0, members: 0, inboxes: 0, tokens: 0, sessions: 0, webhooks: 0, events: 0 };
  for (const { step, rows } of counted) if (step.counts) out[step.counts] += rows;
  return out;
}
