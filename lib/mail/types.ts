// The mail domain's shapes and ports. Routes talk to MailService (service.ts); the service talks
// to the index (MailIndexStore, implemented in adapters/store/sqlite) and to the mail server
// (MailSource, implemented in adapters/imap). No I/O library is imported here.
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

/**
 * How big one index write should be, for an engine whose writes hold the event loop while they
 * run (a synchronous driver): the writer sizes each transaction to take about `targetMs`, within
 * `minRows` and `maxRows`, and yields a turn of the loop after each.
 */
export interface WriteSizing {
  minRows: number;
  maxRows: number;
  targetMs: number;
}

export interface MailIndexStore {
  /** Null: writes do not block the event loop, so a whole batch goes in one apply(). */
  readonly writeSizing: WriteSizing | null;
  /**
   * Changes whenever anything of the inbox's index changes, by any process sharing the store: it
   * is kept in the store and bumped in the same transaction as the write.
   */
  version(inboxId: string): Promise<number>;
  /** True once the inbox's index was filled completely at least once. */
  isSeeded(inboxId: string): Promise<boolean>;
  markSeeded(inboxId: string, seeded: boolean): Promise<void>;
  /** A sync pass of the inbox worked at `at` (ms since the epoch). */
  markSynced(inboxId: string, at: number): Promise<void>;
  /** What the index holds of the inbox, for `postern admin inbox status`. */
  status(inboxId: string): Promise<IndexStatus>;
  /** Forgets the inbox's index entirely (the inbox was removed); its events are not the index's. */
  dropInbox(inboxId: string): Promise<void>;
  labels(inboxId: string): Promise<LabelState[]>;
  label(inboxId: string, guid: string): Promise<LabelState | null>;
  /** total and unread per label guid. */
  counts(inboxId: string): Promise<Map<string, { total: number; unread: number }>>;
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
  apply(inboxId: string, ops: readonly IndexOp[], label?: LabelState): Promise<number[]>;
  /** Removes a label and every location in it; returns the locations removed. */
  dropLabel(inboxId: string, guid: string): Promise<Location[]>;
  /** Forgets the staged rows of a label (a refill that did not complete). */
  clearStaged(inboxId: string, labelGuid: string): Promise<void>;
  /**
   * In one transaction: replaces the label's locations with its staged rows and saves its state.
   * Messages no label holds any more are dropped.
   */
  commitStaged(inboxId: string, label: LabelState): Promise<void>;
  locations(inboxId: string, labelGuid: string, uids: readonly number[]): Promise<Location[]>;
  /** Every (uid, msgGuid) of a label, in UID order, in pages. */
  uidsOf(inboxId: string, labelGuid: string, afterUid: number, limit: number): Promise<Array<{ uid: number; msgGuid: string }>>;
  countIn(inboxId: string, labelGuid: string): Promise<number>;
  /** Newest first: UIDs below `before`, at most `limit`. */
  page(inboxId: string, labelGuid: string, before: number | null, limit: number): Promise<PageRow[]>;
  message(inboxId: string, msgGuid: string): Promise<{ message: MessageRecord; locations: Location[] } | null>;
  /** Messages matching `search`, newest first (receivedAt, then GUID), after `after`, at most `limit`. */
  search(inboxId: string, search: IndexSearch, after: SearchAfter | null, limit: number): Promise<SearchRow[]>;
  /**
   * docs/threads.md: as `page`, but only the newest place (highest UID) of each thread in the
   * label; a message not placed in a thread yet stands alone.
   */
  threadPage(inboxId: string, labelGuid: string, before: number | null, limit: number): Promise<PageRow[]>;
  /** A thread's messages, oldest first (receivedAt, then GUID), at most `limit`, each with its places. */
  thread(inboxId: string, threadGuid: string, limit: number): Promise<SearchRow[]>;
  /** The numbers of these threads (those with no message left are not in the map). */
  threadStats(inboxId: string, threadGuids: readonly string[]): Promise<Map<string, ThreadStats>>;
  /**
   * Up to `limit` of the inbox's messages that have no thread yet (indexed before threads were),
   * oldest first, each with one of its places (null: only a refill being staged holds it).
   */
  unthreaded(inboxId: string, limit: number): Promise<Array<{ guid: string; place: LocationKey | null }>>;
  /**
   * Places these messages (those of them still without a thread) in one short write, their
   * References fetched from the mail server (GUID → Message-IDs) kept as links first, as the live
   * path keeps them; answers how many it placed.
   */
  backfillThreads(inboxId: string, references: ReadonlyMap<string, readonly string[]>): Promise<number>;
}

/**
 * The watcher lease (docs/mail.md, "Across processes"): among the processes sharing the store, one at a time watches
 * an inbox over IMAP; the others hear its changes through the Bus. A lease not renewed before it
 * expires may be taken by another process.
 */
/** What a running `serve` says of how it watches every inbox (docs/watch.md), for `inbox status`. */
export interface WatchReport {
  mode: 'push' | 'notify' | 'off';
  /** Why this mode: what POSTERN_WATCH and POSTERN_HINT_LISTEN said. */
  reason: string;
  /** Inboxes the process knows of (the directory as it last read it). */
  inboxes: number;
  /** Push mode: hints taken since the process started, the last one, and the push verdict. */
  hints: number;
  lastHintAt: number | null;
  /** The last time a sweep found a change no hint had announced (hints lost or not configured). */
  missedHintAt: number | null;
  /** Reads trust the index on the strength of hints (docs/watch.md). */
  pushHealthy: boolean;
  /** A few words on the verdict, for an operator. */
  verdict: string;
}

/** Where the reports are kept, shared by every process on the store. */
export interface WatchReports {
  putWatchReport(origin: string, report: WatchReport, at: number): Promise<void>;
  /** Reports written since `since` (ms since the epoch), newest first. */
  watchReports(since: number): Promise<Array<{ origin: string; report: WatchReport; updatedAt: number }>>;
  /** A hint came for the inbox at `at`. */
  markHinted(inboxId: string, at: number): Promise<void>;
}

export interface WatchLeases {
  /**
   * Takes, or renews, the lease of each inbox for `holder` until `ttlMs` from now, in one write.
   * Returns the inboxes `holder` holds now: not those another holder's unexpired lease keeps.
   */
  claim(inboxIds: readonly string[], holder: string, ttlMs: number): Promise<Set<string>>;
  /** Gives up `holder`'s leases of these inboxes (another process may take them at once). */
  release(inboxIds: readonly string[], holder: string): Promise<void>;
}

// ---------------------------------------------------------------------------------------------
// The mail server side.

export type Unwatch = () => Promise<void>;

/** What names a location (a message in one label) in IMAP: the label and the UID there. */
export interface LocationKey {
  labelGuid: string;
  uid: number;
}

/**
 * A connection that listens to one inbox and says when something may have changed. Whether the
 * index may be trusted without a sync while it runs is the domain's call (MailMirror), from
 * `live` and `complete`.
 */
export interface MailWatcher {
  /** Settles after the first attempt to connect, whether it worked or not. */
  readonly started: Promise<void>;
  /** Connected and listening. */
  readonly live: boolean;
  /**
   * Every label's changes are signalled as they happen (NOTIFY). False on a server without
   * NOTIFY: only INBOX is, the others at the next poll.
   */
  readonly complete: boolean;
  /** Why the last attempt to connect failed (null once connected). */
  readonly lastError: unknown;
  /** The attempt was refused because the server connections are at their cap (a 503). */
  readonly refused: boolean;
  stop(): Promise<void>;
}

/**
 * The mail server, as the domain needs it: IMAP in adapters/imap. It speaks the protocol; when
 * to sync, when to trust the index, and who watches belong to MailMirror (mirror.ts).
 */
export interface MailSource {
  /**
   * One sync pass: afterwards the index reflects every change made before the pass started.
   * `onApplied` gets each batch of changes as the index applies it. The caller never runs two
   * passes of one inbox at once.
   */
  /** `background`: a fill or a sweep nobody waits on; it never takes the connection a read needs (the bulk lane). */
  sync(inbox: MailInbox, onApplied: (changes: LiveChange[]) => void, options?: { background?: boolean }): Promise<void>;
  /**
   * Adds and removes IMAP flags at these places (UID STORE). Resolves with the places where the
   * STORE found no message (moved or expunged meanwhile, a no-op in IMAP): the change did not
   * happen there.
   */
  storeFlags(inbox: MailInbox, at: readonly LocationKey[], add: string[], remove: string[]): Promise<{ missed: LocationKey[] }>;
  /**
   * Files one message into labels and out of them (docs/organize.md): a COPY from `from` to each
   * label of `add`, then an expunge of each place of `remove` (a MOVE from `from` when it is one of
   * them). Copies go first, so the message is never in no label. Resolves `missed` when the message
   * was not at `from` (moved or expunged meanwhile): nothing was copied or moved then.
   */
  relabel(
    inbox: MailInbox,
    change: { from: LocationKey; add: readonly string[]; remove: readonly LocationKey[] },
  ): Promise<{ missed: boolean }>;
  /**
   * IMAP SEARCH BODY / TEXT in each of these labels: the UIDs that match, per label GUID. A label
   * gone or renumbered on the server meanwhile answers nothing.
   */
  searchContent(inbox: MailInbox, labels: readonly LabelState[], terms: { body?: string; text?: string }): Promise<Map<string, number[]>>;
  /**
   * The References of the messages at these places (GUID → Message-IDs, none: an empty list), for
   * mail indexed before the index kept them (docs/threads.md). A place whose label is gone or
   * renumbered, or whose UID holds another message now, answers nothing.
   */
  references(
    inbox: MailInbox,
    labels: readonly LabelState[],
    at: ReadonlyArray<LocationKey & { msgGuid: string }>,
  ): Promise<Map<string, string[]>>;
  /** Starts listening to the inbox: `onSignal` whenever something may have changed. */
  watch(inbox: MailInbox, onSignal: () => void): MailWatcher;
  close(): Promise<void>;
}
