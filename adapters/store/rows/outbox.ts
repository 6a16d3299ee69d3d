// The outbox's rows as both engines return them (same tables and columns; PostgreSQL's BIGINT
// columns come back as numbers, postgres/db.ts), their mapping to the domain's records, and the
// limits both adapters must agree on.
import type { OutboxEntry, OutboxState, ScheduledParts, SealedSend } from '../../../lib/send/ports.ts';

export interface OutboxRow {
  id: string;
  inbox_id: string;
  project_id: string;
  actor: string;
  draft_id: string | null;
  fingerprint: string | null;
  state: OutboxState;
  /** 'unknown': the final reply was lost; 'dsn': it was, and a delivery report settled it. */
  outcome: 'unknown' | 'dsn' | null;
  mail_from: string;
  recipients: number;
  message_id: string;
  size: number;
  attempts: number;
  claims: number;
  next_attempt_at: number;
  created_at: number;
  send_at: number | null;
  hold_until: number | null;
  failure: string | null;
}

/** A scheduled row's envelope and sealed body as stored (migration 33). */
export interface ScheduledRow {
  envelope: string | null;
  sealed: string | null;
}

/** The sealed column: the small fields of a SealedSend (its ciphertext is in mail_outbox_sealed). */
export interface SealedColumn {
  draftId: string;
  epoch: number;
  wrappedDek: string;
}

export const sealedColumn = (s: SealedSend | null): string | null =>
  s ? JSON.stringify({ draftId: s.draftId, epoch: s.epoch, wrappedDek: s.wrappedDek.toString('base64') } satisfies SealedColumn) : null;

/** A stored envelope and sealed column back as ScheduledParts, with the ciphertext read apart. */
export function scheduledPartsOf(row: ScheduledRow, ciphertext: Buffer): ScheduledParts {
  const sealed = row.sealed === null ? null : (JSON.parse(row.sealed) as SealedColumn);
  return {
    envelope: row.envelope === null ? [] : (JSON.parse(row.envelope) as string[]),
    sealed: sealed && { draftId: sealed.draftId, epoch: sealed.epoch, wrappedDek: Buffer.from(sealed.wrappedDek, 'base64'), ciphertext },
  };
}

/** Entries a scheduled send may be cancelled or rescheduled in, and those listed as pending. */
export const PENDING_STATES = ['scheduled', 'relaying', 'sending'] as const;
/** What the outbox lists as pending: the above, and sends whose outcome is unknown (docs/sending.md, "The outbox"). */
export const LISTED_PENDING = [...PENDING_STATES, 'unknown'] as const;

export const MINUTE_MS = 60_000;
/**
 * A process on another host (a container beside this one, sharing the store's volume) is taken
 * for dead once it has not said it runs for this long; one on this host is checked directly.
 */
export const OTHER_HOST_STALE_MS = 120_000;
/** Owners not seen for this long are forgotten (their rows were settled long before). */
export const FORGET_OWNER_MS = 7 * 24 * 3_600_000;
/** A copy is stored in parts of this size, so no statement binds or reads a 25 MB value whole. */
export const PART_BYTES = 1024 * 1024;

export const entryOf = (r: OutboxRow): OutboxEntry => ({
  id: r.id,
  inboxId: r.inbox_id,
  projectId: r.project_id,
  actor: r.actor,
  draftId: r.draft_id,
  fingerprint: r.fingerprint,
  state: r.state,
  outcomeUnknown: r.outcome === 'unknown',
  settledBy: r.outcome === 'dsn' ? 'dsn' : null,
  mailFrom: r.mail_from,
  recipients: r.recipients,
  messageId: r.message_id,
  size: r.size,
  attempts: r.attempts,
  claims: r.claims,
  nextAttemptAt: r.next_attempt_at,
  createdAt: r.created_at,
  sendAt: r.send_at,
  holdUntil: r.hold_until,
  failure: r.failure,
});

/** Entries in the order they come due (RETURNING gives no order): next attempt, then creation, then id. */
export const byDue = (entries: OutboxEntry[]): OutboxEntry[] =>
  entries.sort((a, b) => a.nextAttemptAt - b.nextAttemptAt || a.createdAt - b.createdAt || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
