// What the mail domain needs from the outside world: the index (MailIndexStore, in
// adapters/store/), the mail server (MailSource, in adapters/imap/), and the watch's shared state
// (reports and leases, in the store). Routes talk to MailService (service.ts), the service to
// these. No I/O library is imported here.
import type {
  MailInbox,
  LiveChange,
  LabelState,
  MessageRecord,
  ThreadStats,
  Location,
  IndexOp,
  IndexSearch,
  SearchAfter,
  SearchRow,
  PageRow,
  IndexStatus,
  LocationKey,
} from './types.ts';

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

/**
 * The watcher lease (docs/mail.md, "Across processes"): among the processes sharing the store, one at a time watches
 * an inbox over IMAP; the others hear its changes through the Bus. A lease not renewed before it
 * expires may be taken by another process.
 */
export interface WatchLeases {
  /**
   * Takes, or renews, the lease of each inbox for `holder` until `ttlMs` from now, in one write.
   * Returns the inboxes `holder` holds now: not those another holder's unexpired lease keeps.
   */
  claim(inboxIds: readonly string[], holder: string, ttlMs: number): Promise<Set<string>>;
  /** Gives up `holder`'s leases of these inboxes (another process may take them at once). */
  release(inboxIds: readonly string[], holder: string): Promise<void>;
}

// The mail server side (adapters/imap).

export type Unwatch = () => Promise<void>;

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
