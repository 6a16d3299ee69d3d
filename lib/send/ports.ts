// What sending needs from the outside world: the relay (Postfix submission), the outbox (the
// store), and filing the Sent copy (IMAP). Implemented in adapters/; no I/O library here.
import type { MailInbox } from '../mail/types.ts';

export interface RelayRequest {
  /** The inbox's mail user: the relay authenticates as this user, as the user's mail app would. */
  user: string;
  /** Envelope MAIL FROM. */
  from: string;
  /** Envelope RCPT TO, exactly these. */
  to: readonly string[];
  /**
   * The bytes relayed (Bcc already removed), in pieces that joined are the message: a header
   * added or removed does not cost a second copy of a 25 MB body.
   */
  raw: readonly Buffer[];
  /** DSN ENVID: bounces carry it back as Original-Envelope-Id. */
  envid: string;
  /**
   * Called once the message's body is written and before its end (the final dot of DATA), which
   * waits for it to resolve: from then on the relay may take the message whatever it answers, so
   * the outbox records that first. Before it, the relay cannot have taken the message (it takes
   * one only with the end of its data): a process that dies then may send it again.
   */
  writing?: () => Promise<void>;
}

export interface RelayAccepted {
  /** Recipients the relay refused while accepting the others, with its reply for each. */
  rejected: Array<{ recipient: string; reply: string }>;
  /** The relay's final reply (e.g. "250 2.0.0 Ok: queued as …"). */
  reply: string;
}

/** The relay refused the message: `permanent` for a 5xx, otherwise a 4xx, timeout or no connection. */
export class RelayRefused extends Error {
  constructor(
    readonly permanent: boolean,
    /** The relay's reply in its own words, or what went wrong with the connection. */
    readonly reason: string,
  ) {
    super(reason);
    this.name = 'RelayRefused';
  }
}

/**
 * The whole message, its final dot included, was written, and the relay's reply never came (a
 * timeout, the connection lost): it has most likely queued the message, and may not have.
 */
export class RelayOutcomeUnknown extends Error {
  constructor(
    /** What happened to the connection. */
    readonly reason: string,
  ) {
    super(reason);
    this.name = 'RelayOutcomeUnknown';
  }
}

export interface Relay {
  /**
   * Resolves once the relay took responsibility for the message; rejects with RelayRefused, or
   * RelayOutcomeUnknown when its answer to the whole message was lost.
   */
  send(request: RelayRequest): Promise<RelayAccepted>;
  close(): Promise<void>;
}

/**
 * How far a send's SMTP conversation got (docs/sending.md, "Exactly once"). `relaying`: reserved;
 * its envelope and body may be written, never the end of its data (the final dot), so the relay
 * cannot have taken it; `sending`: the end of its data is being or was written, the relay's reply
 * not yet recorded; `filing`: the relay's acceptance is known, the Sent copy waiting; `filed`;
 * `unknown`: the end of its data was written and the reply never recorded (lost, or the process
 * died): never relayed again, its Sent copy kept unfiled until evidence (a delivery report naming
 * its ENVID) says the relay took it, which makes it `filing`. A send with a send time or an undo
 * hold (docs/sending.md, "Send later") is `scheduled` until it is due, then claimed into
 * `relaying`; taken back it is `cancelled`, and refused by the relay (or never relayable) it is
 * `failed` with the reason.
 */
export type OutboxState = 'scheduled' | 'relaying' | 'sending' | 'filing' | 'filed' | 'unknown' | 'cancelled' | 'failed';

/** How an outcome-unknown send was settled: a delivery report naming its ENVID came back. */
export type OutcomeEvidence = 'dsn';

/** One send: reserved before relaying, its Sent copy kept until Dovecot took it. */
export interface OutboxEntry {
  /** Random hex; also the DSN ENVID. */
  id: string;
  inboxId: string;
  projectId: string;
  /** Who sent it (tok_ or mem_), as the event log records it. */
  actor: string;
  /** /send only: the draft the ciphertext was bound to, and a hash of the request. */
  draftId: string | null;
  fingerprint: string | null;
  state: OutboxState;
  /**
   * The relay's answer to the whole message was lost (or the process died waiting for it), and
   * no evidence settled it: never relayed again, no Sent copy filed, its retries answered that
   * the outcome is unknown. (Rows from before state `unknown` are `filing`/`filed` with it.)
   */
  outcomeUnknown: boolean;
  /** An outcome once unknown, settled since: by what (the relay took it). */
  settledBy: OutcomeEvidence | null;
  mailFrom: string;
  recipients: number;
  messageId: string;
  size: number;
  /** Failed filing attempts (the backoff). */
  attempts: number;
  /** Filing attempts started (claims), by any process. */
  claims: number;
  /** ms since the epoch. */
  nextAttemptAt: number;
  createdAt: number;
  /** A scheduled send: when it goes (ms since the epoch); null for one sent at once. */
  sendAt: number | null;
  /** A scheduled send's undo hold: it can be taken back until then; null without one. */
  holdUntil: number | null;
  /** `failed`: why. */
  failure: string | null;
}

/** A /send body kept sealed until its send time (docs/sending.md, "Send later"): opened only then. */
export interface SealedSend {
  /** The draft id the ciphertext's literal data is bound to. */
  draftId: string;
  epoch: number;
  wrappedDek: Buffer;
  ciphertext: Buffer;
}

/** What a scheduled send needs at its time beyond the Sent copy: its envelope, and a sealed body. */
export interface ScheduledParts {
  /** The envelope recipients (RCPT TO). */
  envelope: string[];
  /** A sealed send's body; null: the relayed message is the Sent copy without its Bcc field. */
  sealed: SealedSend | null;
}

/**
 * An Idempotency-Key's place in the outbox: its draft column, beside /send's draft ids (which all
 * begin `draft_`, so the two never meet). One inbox's keys and drafts share the UNIQUE.
 */
export const KEY_PREFIX = 'key:';
export const idempotencyDraftId = (key: string): string => `${KEY_PREFIX}${key}`;

/** The /send draft an outbox entry was bound to, if it was (not an Idempotency-Key). */
export const draftIdOf = (entry: Pick<OutboxEntry, 'draftId'>): string | null =>
  entry.draftId !== null && !entry.draftId.startsWith(KEY_PREFIX) ? entry.draftId : null;

export type Reservation =
  | { ok: true }
  | { ok: false; reason: 'rate'; sent: number }
  | { ok: false; reason: 'draft'; existing: OutboxEntry };

/** What OutboxStore.recover settled. */
export interface Recovered {
  dropped: number;
  unknown: number;
  reclaimed: number;
  /** The entries it made `unknown`. */
  unknownIds: string[];
}

export interface OutboxStore {
  /**
   * In one transaction: refuses when the inbox has `rate.max` entries since `rate.since`, or
   * when the entry's draft id is already taken in the inbox (giving that entry); otherwise
   * stores the entry in state `relaying` with the Sent copy's bytes (in pieces, joined as they
   * are stored).
   */
  reserve(
    entry: OutboxEntry,
    copy: readonly Buffer[],
    rate: { since: number; max: number },
    /** A scheduled send (entry.sendAt set): stored in state `scheduled`, due at entry.nextAttemptAt. */
    scheduled?: ScheduledParts,
  ): Promise<Reservation>;
  /** The inbox's sends since `since`, as reserve() counts them (exact up to `max`); a read, for checking early. */
  sentSince(inboxId: string, since: number, max: number): Promise<number>;
  get(id: string): Promise<OutboxEntry | null>;
  /**
   * The inbox's entries not filed yet (relaying, sending or filing), oldest first, at most
   * `limit`: its outbox backlog, as a staff command or a test sees it.
   */
  backlog(inboxId: string, limit: number): Promise<OutboxEntry[]>;
  byDraft(inboxId: string, draftId: string): Promise<OutboxEntry | null>;
  /** The relay refused: the entry goes, so the draft may be sent again and it counts for nothing. */
  drop(id: string): Promise<void>;
  /** The end of the message's data is about to be written (`relaying` → `sending`); resolves once that is durable. */
  sending(id: string): Promise<void>;
  /** The relay accepted: the Sent copy is due now. */
  relayed(id: string, now: number): Promise<void>;
  /**
   * The relay's answer to the whole message was lost: `unknown`, kept (it counts toward the rate,
   * holds its draft, matches bounces) with its Sent copy, which is not filed.
   */
  outcomeUnknown(id: string, now: number): Promise<void>;
  /**
   * Evidence that the relay took an `unknown` send: it becomes `filing` (its Sent copy due now),
   * settled by `evidence`. The entry when this call settled it; null when it was not `unknown`.
   */
  settle(id: string, evidence: OutcomeEvidence, now: number): Promise<OutboxEntry | null>;
  /**
   * Says this process is alive, and settles what processes that died left behind (their
   * liveness is the store's to judge): an entry still `relaying` goes (the end of its data was
   * never written; its draft may be sent again; a claimed scheduled one waits again), one
   * `sending` becomes `unknown`, and a claimed copy is due at once. Returns how many of each it
   * settled, and the ids it made `unknown`.
   */
  recover(now: number): Promise<Recovered>;
  /** Entries in state `filing` whose next attempt is due, oldest first. */
  due(now: number, limit: number): Promise<OutboxEntry[]>;
  /**
   * Takes an entry for one attempt: moves its next attempt to `until` if it is still
   * `expectedNext` (nobody else claimed it meanwhile), counting the claim. True when this
   * caller got it.
   */
  claim(id: string, expectedNext: number, until: number): Promise<boolean>;
  copy(id: string): Promise<Buffer | null>;
  /** The attempt failed: counts it and sets the next one. */
  retryAt(id: string, at: number): Promise<void>;
  /**
   * Filed, in one transaction: the copies' bytes are dropped, the entries stay (rate window,
   * draft replays, bounces).
   */
  filed(ids: readonly string[], now: number): Promise<void>;

  // Scheduled sends (docs/sending.md, "Send later").
  /** When the earliest `scheduled` entry is due (ms since the epoch); null when none waits. */
  nextScheduled(): Promise<number | null>;
  /** `scheduled` entries due by `now`, earliest first, at most `limit`. */
  dueScheduled(now: number, limit: number): Promise<OutboxEntry[]>;
  /**
   * Takes a due `scheduled` entry for sending (`scheduled` → `relaying`, owned by this process,
   * so a process that dies holding it is recovered). True when this caller got it.
   */
  claimScheduled(id: string, now: number): Promise<boolean>;
  /**
   * Takes up to `limit` due `scheduled` entries for sending in one write (each as claimScheduled
   * takes one; entries another process claims meanwhile are skipped): the entries this caller
   * got, earliest due first.
   */
  claimDue(now: number, limit: number): Promise<OutboxEntry[]>;
  /** A scheduled entry's envelope and sealed body (null once it is relayed or gone). */
  scheduledParts(id: string): Promise<ScheduledParts | null>;
  /** A claimed scheduled send the relay could not take now: `scheduled` again, due at `at`, its attempt counted. */
  retryScheduled(id: string, at: number): Promise<void>;
  /**
   * A claimed scheduled send that will never go: `failed` with the reason, its bytes dropped,
   * its draft id freed and its rate count given back.
   */
  failScheduled(id: string, reason: string): Promise<void>;
  /**
   * Takes back a `scheduled` entry before it is claimed: `cancelled`, its draft id freed and its
   * rate count given back; its bytes stay until forget(). True when it was cancelled by this call.
   */
  cancel(id: string): Promise<boolean>;
  /** Moves a `scheduled` entry's send time (due at the later of it and its hold); false unless still scheduled. */
  reschedule(id: string, sendAt: number): Promise<boolean>;
  /** Drops a cancelled or relayed scheduled entry's kept bytes (its Sent copy, unless filing, and sealed body). */
  forget(id: string): Promise<void>;
  /**
   * The inbox's entries, newest first, at most `limit`: only those not settled yet (scheduled,
   * relaying, sending, unknown) when `pending`, otherwise every one.
   */
  list(inboxId: string, pending: boolean, limit: number): Promise<OutboxEntry[]>;
}

/** One Sent copy to file. */
export interface SentCopy {
  raw: Buffer;
  messageId: string;
  /**
   * An earlier attempt was started, and may have got through before its answer was lost: not
   * filed again if a message with this Message-ID is in Sent already.
   */
  retry: boolean;
  /** When the send was reserved (ms since the epoch): no attempt filed it before then. */
  createdAt: number;
}

export interface SentFiler {
  /**
   * Files the copies, all of one inbox, in its \Sent label with \Seen, as one transaction
   * where the server can (all or none). Rejects when they may not all have been filed (the
   * mail server unavailable, the connection lost); the outbox then tries each again later, as
   * a retry.
   */
  fileSent(inbox: MailInbox, copies: readonly SentCopy[]): Promise<void>;
  /**
   * Brings the index up to date with the copies just filed (their message.added, the listing):
   * once per inbox after a pass, not once per copy.
   */
  refresh(inbox: MailInbox): Promise<void>;
}

/** The Sent copies' queue as the send path sees it (lib/send/outbox.ts). */
export interface CopyQueue {
  /** A copy is waiting: file it soon. */
  kick(): void;
  /** A send is under way until the returned function is called: filing yields to it. */
  sending(): () => void;
}

/**
 * Memory shared by everything that holds a whole large message at once (lib/http/body-gate.ts):
 * resolves with a release function once `bytes` fit.
 */
export interface MemoryBudget {
  enter(bytes: number): Promise<() => void>;
}

/** An inbox address's display name and signature (docs/sending.md, "Identities"). */
export interface Identity {
  /** One of the inbox's addresses, lower case. */
  address: string;
  displayName: string | null;
  signatureText: string | null;
  signatureHtml: string | null;
  /** ms since the epoch; null: never set. */
  updatedAt: number | null;
}

export type IdentityInput = Pick<Identity, 'displayName' | 'signatureText' | 'signatureHtml'>;

export interface IdentityStore {
  /** The identities set for the inbox's addresses (none for an address never set). */
  list(inboxId: string): Promise<Identity[]>;
  /** Sets (replaces) the identity of one address of the inbox. */
  put(inboxId: string, identity: Identity & { updatedAt: number }): Promise<void>;
}
