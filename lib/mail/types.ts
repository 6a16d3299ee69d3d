// The mail domain's shapes: inboxes, messages, places, changes, search. Its ports (the index,
// the mail server, the watch) are in ports.ts. No I/O library is imported here.
import type { LabelLiveChange as PublicLabelChange, LiveChange as PublicChange, MessageDetail, SpecialUse } from '../../schemas/wire.ts';

/** What the mail side needs to know about an inbox. */
export interface MailInbox {
  id: string;
  imapUser: string;
  addresses: readonly string[];
  /** The directory's inbox mode; only a compatible inbox's index keeps previews (docs/threads.md). */
  mode?: 'compatible' | 'zero-access';
}

/**
 * What the index knows of a message: docs/api.md, "Message detail", but `keyEpoch` and `wrappedDek`, which
 * lib/crypto/mail-opening.ts adds (they come from the key store, not from IMAP).
 */
export type IndexedDetail = Omit<MessageDetail, 'keyEpoch' | 'wrappedDek'>;

/**
 * Where in IMAP a change happened: what makes it this change and no other, whichever process
 * sees it. A UID is never reused in a label within one UIDVALIDITY, so label + UIDVALIDITY + UID
 * names an addition or a removal; flags can go back and forth, so a flag change also needs the
 * MODSEQ the server gave it. Internal: never sent to clients.
 */
export interface ChangePoint {
  labelGuid: string;
  uidValidity: number;
  uid: number;
  /** message.flags only: the message's MODSEQ with these flags. */
  modseq?: number;
  /** message.labels only: the type of the addition or removal at this point it follows. */
  after?: 'message.added' | 'message.removed';
}

/**
 * A change the index applied: LiveChange (docs/api.md, "LiveChange"; schemas/wire.ts) and `at`, which is
 * internal (what the event log keys the change on) and is left out of what clients get
 * (publicChange). `labelId` also rides on message.flags: IMAP flags belong to a message in a label.
 */
export interface MessageChange extends PublicChange {
  at: ChangePoint;
}

/**
 * A label created, renamed or deleted, by the API or a mail app (docs/organize.md, "Folders"): an
 * extension of version 1 (mail.json LabelLiveChange). `at` names the label (its GUID), internal.
 */
export interface LabelChange extends PublicLabelChange {
  at: { labelGuid: string };
}

/** What the index applied: a message's change, or (an extension) a label's. */
export type LiveChange = MessageChange | LabelChange;

export function isLabelChange(change: LiveChange): change is LabelChange {
  return change.type === 'label.created' || change.type === 'label.renamed' || change.type === 'label.deleted';
}

export function isMessageChange(change: LiveChange): change is MessageChange {
  return !isLabelChange(change);
}

export function publicChange(change: LiveChange): PublicChange | PublicLabelChange {
  const { at: _internal, ...rest } = change;
  return rest;
}

// ---------------------------------------------------------------------------------------------
// The index (docs/mail.md, "The index"): what the API lists, mirrored from IMAP.

/** A label's row. GUIDs are the 32 hex digits behind lbl_/msg_ ids. */
export interface LabelState {
  guid: string;
  path: string;
  specialUse: SpecialUse | null;
  uidValidity: number;
  /** Every UID below this has been fetched. */
  uidNext: number;
  /** Every change up to this modseq has been applied. */
  highestModseq: number;
  /**
   * A first fill under way (newest first): every UID from this one up to `uidNext` is indexed,
   * those below not yet. null: the label is complete. Left out of a write: unchanged.
   */
  fillLow?: number | null;
}

/** Per message, the same in every label it is in. */
export interface MessageRecord {
  guid: string;
  size: number;
  /** INTERNALDATE, ms since the epoch. */
  receivedAt: number;
  date: string | null;
  from: string | null;
  to: string | null;
  cc: string | null;
  replyTo: string | null;
  subject: string | null;
  messageId: string | null;
  inReplyTo: string | null;
  /** The bare From address, lower case, for `direction`. */
  fromAddress: string | null;
  /**
   * PGP/MIME (RFC 3156 multipart/encrypted: sealed by Postern or by its sender), so no plaintext,
   * from its Content-Type at index time; absent when the sync did not ask (lib/mail/resealing.ts).
   */
  sealed?: boolean;
  /**
   * Whether it carries attachments, from its top-level Content-Type at index time (multipart/mixed
   * or a single non-text part). null: cannot tell (sealed, PGP/MIME); absent: not asked.
   */
  hasAttachment?: boolean | null;
  /**
   * The Message-IDs its References header names (lib/mail/threads.ts, parseMessageIds), for its
   * thread; absent: not fetched. Written only: the index keeps them as thread links.
   */
  references?: readonly string[];
  /**
   * Its thread: the GUID of the message that founded it (docs/threads.md). Read only: the index
   * decides it when it first holds the message. Absent: not placed yet (mail indexed before
   * threads, until the backfill reaches it).
   */
  threadGuid?: string;
  /** About 200 characters of its text (compatible inboxes only, lib/mail/preview.ts); absent: none. */
  preview?: string;
}

/** A thread's numbers, for a collapsed listing (docs/threads.md). */
export interface ThreadStats {
  messages: number;
  /** Messages none of whose places has \Seen. */
  unread: number;
  /** The From of its messages, oldest first, one per address, at most MAX_PARTICIPANTS. */
  participants: string[];
}

/** A location: a message in one label (its LocationKey) as the index keeps it; IMAP flags are per mailbox. docs/architecture.md, "Names". */
export interface Location {
  labelGuid: string;
  uid: number;
  msgGuid: string;
  modseq: number;
  /** IMAP flags and keywords as stored, normalized (normalizeImapFlags). */
  flags: string[];
}

export type IndexOp =
  | { op: 'put'; message: MessageRecord; location: Location }
  | { op: 'flags'; labelGuid: string; uid: number; modseq: number; flags: string[] }
  | { op: 'remove'; labelGuid: string; uid: number }
  /** A row of a label being re-seeded: invisible to reads until commitStaged swaps it in. */
  | { op: 'stage'; message: MessageRecord; location: Location };

/** The metadata fields the text index holds, each searched on its own. */
export type TextField = 'from' | 'to' | 'cc' | 'subject';

/** Words as searchWords makes them, adjacent in this order; `prefix`: the last one matches as a prefix. */
export interface Phrase {
  words: string[];
  prefix: boolean;
}

/**
 * A search of the index (lib/mail/search.ts): every condition given must hold. Location
 * conditions (label, keywords) hold at one same place of the message.
 */
export interface IndexSearch {
  labelGuid?: string;
  text: Array<{ field: TextField; phrases: Phrase[] }>;
  /**
   * How long the store may spend on it: PostgreSQL cancels the statement past it (an
   * `unavailable` error). SQLite cannot stop a statement under way: its searches are bounded by
   * their shape instead (docs/search.md, "What a search may cost").
   */
  budgetMs?: number;
  /** receivedAt at or after (ms). */
  receivedFrom?: number;
  /** receivedAt before (ms). */
  receivedBefore?: number;
  /** size at least. */
  minSize?: number;
  /** size below. */
  maxSize?: number;
  /** One of these IMAP spellings (lower case) is among the place's flags. */
  hasKeyword?: string[];
  /** None of these is. */
  notKeyword?: string[];
  /** Rows that cannot tell (NULL) match neither true nor false. */
  hasAttachment?: boolean;
  /** Only these messages (the mail server's answer to a content search). */
  guids?: readonly string[];
  /** Only this thread's messages (docs/threads.md). */
  threadGuid?: string;
}

/** Where a search page ends: the order is receivedAt, then GUID, both descending. */
export interface SearchAfter {
  receivedAt: number;
  guid: string;
}

export interface SearchRow {
  message: MessageRecord;
  /** Every place of the message. */
  locations: Location[];
}

export interface PageRow {
  message: MessageRecord;
  location: Location;
}

/**
 * Promise-returning like every store port (docs/design-facts.md, "The store"),
 * though SQLite answers at once.
 */
export interface IndexStatus {
  seeded: boolean;
  /** Distinct messages, and their places (a message in two labels is two). */
  messages: number;
  locations: number;
  labels: number;
  /** Places of a label's refill under way (a new UIDVALIDITY), not yet visible to reads. */
  staged: number;
  /** The last sync pass that worked, ms since the epoch; null: never. */
  syncedAt: number | null;
  /** The last push hint for it, ms since the epoch; null: none. */
  hintedAt: number | null;
  /** The process watching it over NOTIFY (the lease), if any. */
  watcher: { holder: string; expiresAt: number } | null;
}

/** What names a location (a message in one label) in IMAP: the label and the UID there. */
export interface LocationKey {
  labelGuid: string;
  uid: number;
}
