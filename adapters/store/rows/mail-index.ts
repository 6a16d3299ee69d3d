// The mail index's rows as both engines return them (same tables and columns; PostgreSQL's
// BIGINT columns come back as numbers, postgres/db.ts), and their mapping to the domain's records.
import type { SpecialUse } from '../../../schemas/wire.ts';
import type { LabelState, Location, LocationKey, MessageRecord } from '../../../lib/mail/types.ts';

export interface LabelRow {
  guid: string;
  path: string;
  special_use: string | null;
  uid_validity: number;
  uid_next: number;
  highest_modseq: number;
  fill_low: number | null;
}

export interface MessageRow {
  guid: string;
  size: number;
  received_at: number;
  date: string | null;
  from_text: string | null;
  to_text: string | null;
  cc_text: string | null;
  reply_to_text: string | null;
  subject: string | null;
  message_id: string | null;
  in_reply_to: string | null;
  from_address: string | null;
  thread_guid: string | null;
  preview: string | null;
}

export interface LocationRow {
  label_guid: string;
  uid: number;
  msg_guid: string;
  modseq: number;
  flags: string;
}

export const toLabel = (r: LabelRow): LabelState => ({
  guid: r.guid,
  path: r.path,
  specialUse: r.special_use as SpecialUse | null,
  uidValidity: r.uid_validity,
  uidNext: r.uid_next,
  highestModseq: r.highest_modseq,
  fillLow: r.fill_low,
});

export const toMessage = (r: MessageRow): MessageRecord => ({
  guid: r.guid,
  size: r.size,
  receivedAt: r.received_at,
  date: r.date,
  from: r.from_text,
  to: r.to_text,
  cc: r.cc_text,
  replyTo: r.reply_to_text,
  subject: r.subject,
  messageId: r.message_id,
  inReplyTo: r.in_reply_to,
  fromAddress: r.from_address,
  ...(r.thread_guid ? { threadGuid: r.thread_guid } : {}),
  ...(r.preview ? { preview: r.preview } : {}),
});

/** A thread candidate's row (lib/mail/threads.ts, ThreadKnown), as both engines read it. */
export interface ThreadKnownRow {
  guid: string;
  thread_guid: string;
  received_at: number;
  message_id: string | null;
  subject: string | null;
  link: string | null;
}

/** A message waiting for its thread. */
export interface ThreadPendingRow {
  guid: string;
  received_at: number;
  message_id: string | null;
  in_reply_to: string | null;
  subject: string | null;
}

/** A row of a thread's messages for its numbers (threadStats), oldest first. */
export interface ThreadStatRow {
  thread_guid: string;
  from_text: string | null;
  from_address: string | null;
  /** 1/true: some place of it has \\Seen. */
  seen: number | boolean | null;
}

export const toLocation = (r: LocationRow): Location => ({
  labelGuid: r.label_guid,
  uid: r.uid,
  msgGuid: r.msg_guid,
  modseq: r.modseq,
  flags: JSON.parse(r.flags) as string[],
});

/** The backfill's messages, one place each (the first met; none: only a staged refill holds it). */
export function unthreadedOf(
  rows: ReadonlyArray<{ guid: string; label_guid: string | null; uid: number | string | null }>,
): Array<{ guid: string; place: LocationKey | null }> {
  const out = new Map<string, LocationKey | null>();
  for (const r of rows) {
    if (out.get(r.guid)) continue;
    out.set(r.guid, r.label_guid !== null && r.uid !== null ? { labelGuid: r.label_guid, uid: Number(r.uid) } : null);
  }
  return [...out].map(([guid, place]) => ({ guid, place }));
}
