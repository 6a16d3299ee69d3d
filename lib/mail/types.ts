// The mail domain's shapes and ports. Routes talk to MailService (service.ts); the service talks
// to the index (MailIndexStore, implemented in adapters/store/sqlite) and to the mail server
// (MailSource, implemented in adapters/imap). No I/O library is imported here.
import type { Flag } from './flags.ts';
import type { SpecialUse } from './labels.ts';

/** What the mail side needs to know about an inbox. */
export interface MailInbox {
  id: string;
  imapUser: string;
  addresses: readonly string[];
}

/** Spec 2.4 */
export interface Label {
  id: string;
  name: string;
  total: number;
  unread: number;
  specialUse?: SpecialUse;
}

/** Spec 2.6 */
export interface MessageSummary {
  id: string;
  uid: number;
  receivedAt: string;
  flags: Flag[];
  size: number;
  date?: string;
  from?: string;
  to?: string;
  subject?: string;
  keywords?: string[];
  direction?: 'in' | 'out';
}

/** Spec 2.7, without keyEpoch and wrappedDek until the encryption work adds them. */
export interface MessageDetail {
  message: MessageSummary;
  cc?: string;
  replyTo?: string;
  messageId?: string;
  inReplyTo?: string;
}

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
}

/**
 * A change the index applied. Spec 2.12 is every field but `at`, which is internal (what the
 * event log keys the change on) and is left out of what clients get (publicChange).
 * `labelId` also rides on message.flags: IMAP flags belong to a message in a label.
 */
export interface LiveChange {
  type: 'message.added' | 'message.removed' | 'message.flags';
  msgId: string;
  labelId?: string;
  uid?: number;
  flags?: Flag[];
  at: ChangePoint;
}

/** A LiveChange as spec 2.12 has it: what the inbox stream sends. */
export type PublicChange = Omit<LiveChange, 'at'>;

export function publicChange(change: LiveChange): PublicChange {
  const { at: _internal, ...rest } = change;
  return rest;
}

// ---------------------------------------------------------------------------------------------
// The index (DESIGN.md 4): what the API lists, mirrored from IMAP.

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
}

/** A message in one label: IMAP flags are per mailbox. */
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

export interface PageRow {
  message: MessageRecord;
  location: Location;
}

export interface MailIndexStore {
  /**
   * Changes whenever anything of the inbox's index changes, by any process sharing the store: it
   * is kept in the store and bumped in the same transaction as the write.
   */
  version(inboxId: string): number;
  /** True once the inbox's index was filled completely at least once. */
  isSeeded(inboxId: string): boolean;
  markSeeded(inboxId: string, seeded: boolean): void;
  labels(inboxId: string): LabelState[];
  label(inboxId: string, guid: string): LabelState | null;
  /** total and unread per label guid. */
  counts(inboxId: string): Map<string, { total: number; unread: number }>;
  /**
   * Applies the ops and (optionally) a label's new state in one transaction. Several processes
   * may apply diffs of one inbox in any order, so nothing goes backwards: a `flags` op applies
   * only with a MODSEQ newer than the stored one (or 0, no CONDSTORE), a `put` of the message
   * already there only with a MODSEQ at least as new, and within one UIDVALIDITY a label's
   * `uidNext` and `highestModseq` never decrease (a new UIDVALIDITY replaces them).
   * Returns the indexes of the ops that changed nothing: a `flags` op older than what the index
   * holds, or a `flags` or `remove` op for a location no longer there. Their changes are not
   * news: whoever applied the newer state announced it.
   */
  apply(inboxId: string, ops: readonly IndexOp[], label?: LabelState): number[];
  /** Removes a label and every location in it; returns the locations removed. */
  dropLabel(inboxId: string, guid: string): Location[];
  /** Forgets the staged rows of a label (a refill that did not complete). */
  clearStaged(inboxId: string, labelGuid: string): void;
  /**
   * In one transaction: replaces the label's locations with its staged rows and saves its state.
   * Messages no label holds any more are dropped.
   */
  commitStaged(inboxId: string, label: LabelState): void;
  locations(inboxId: string, labelGuid: string, uids: readonly number[]): Location[];
  /** Every (uid, msgGuid) of a label, in UID order, in pages. */
  uidsOf(inboxId: string, labelGuid: string, afterUid: number, limit: number): Array<{ uid: number; msgGuid: string }>;
  countIn(inboxId: string, labelGuid: string): number;
  /** Newest first: UIDs below `before`, at most `limit`. */
  page(inboxId: string, labelGuid: string, before: number | null, limit: number): PageRow[];
  message(inboxId: string, msgGuid: string): { message: MessageRecord; locations: Location[] } | null;
}

/**
 * The watcher lease (DESIGN.md 6): among the processes sharing the store, one at a time watches
 * an inbox over IMAP; the others hear its changes through the Bus. A lease not renewed before it
 * expires may be taken by another process.
 */
export interface WatchLeases {
  /**
   * Takes, or renews, the lease of each inbox for `holder` until `ttlMs` from now, in one write.
   * Returns the inboxes `holder` holds now: not those another holder's unexpired lease keeps.
   */
  claim(inboxIds: readonly string[], holder: string, ttlMs: number): Set<string>;
  /** Gives up `holder`'s leases of these inboxes (another process may take them at once). */
  release(inboxIds: readonly string[], holder: string): void;
}

// ---------------------------------------------------------------------------------------------
// The mail server side.

export type Unwatch = () => Promise<void>;

export interface MailSource {
  /**
   * Makes the index reflect every change made before this call (one LIST-STATUS when nothing
   * changed; nothing when a live watcher keeps the inbox current).
   */
  refresh(inbox: MailInbox): Promise<void>;
  /**
   * Adds and removes IMAP flags on the message in the given labels (an IMAP STORE), then
   * refreshes; a refresh that fails is a 503 (never the index as it was before the STORE).
   */
  storeFlags(inbox: MailInbox, at: ReadonlyArray<{ labelGuid: string; uid: number }>, add: string[], remove: string[]): Promise<void>;
  /** Live changes of the inbox, from the same diffs the index applies. Resolves once watching. */
  /** `onGap`: changes may have been missed (see MailLiveFeed.subscribe). */
  watch(inbox: MailInbox, listener: (change: LiveChange) => void, onGap?: () => void): Promise<Unwatch>;
  close(): Promise<void>;
}
