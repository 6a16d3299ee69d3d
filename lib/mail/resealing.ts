// Zero-access inboxes hold no plaintext, but plaintext gets into one: a mail app APPENDs it (a
// draft, a message moved in from another account), or the inbox is made zero-access over a
// mailbox that already holds years of mail. Every message the index knows in such an inbox that
// is not PGP/MIME is sealed to the inbox's current epoch and put in its own place, with the same
// flags and INTERNALDATE, and the plaintext is expunged (docs/encryption.md, "Sealing what is
// already there").
//
// A durable job, not a reaction to events: the index says which messages are PGP/MIME (their
// Content-Type, read at index time), so "what is left to seal" is a query, run when a sync adds
// messages, every SWEEP_MS, and at start. Each place of an unsealed message (label GUID,
// UIDVALIDITY, UID: names it for good) is a job in the store: one process holds it for LEASE_MS
// at a time; a failed attempt is retried after a backoff, never given up; a crash leaves the
// lease to lapse and another pass (here after a restart, or in another process) takes it.
//
// Exactly once: the sealed copy names its original (`of=` in its marker header). A job taken
// again after an attempt that did not finish looks for that copy first: found, the original is
// only expunged (the attempt died between APPEND and EXPUNGE), so no message is sealed twice.
// Loops: PGP/MIME (what Postern seals, or what its sender encrypted) is never sealed again.
import type { DirectoryStore } from '../directory/ports.ts';
import { KeyedChain } from '../keyed-chain.ts';
import type { WarnLog } from '../warn-log.ts';
import type { InboxKeys } from './ingress.ts';
import { isPgpMime, seal } from './sealing.ts';
import type { LiveChange, MailInbox } from './types.ts';

/** What became of one message a replacer was asked to replace. */
export type ReplaceOutcome = 'replaced' | 'unchanged' | 'gone';

/**
 * Replaces the message at `uid` by `transform` of its source (the same flags and INTERNALDATE),
 * then UID EXPUNGEs it: 'unchanged' when `transform` returns null, 'gone' when no message is at
 * `uid`. With `sealedCopyOf`, a sealed copy of that message already in the label is taken as
 * the replacement (only the original is expunged).
 */
export type ReplaceOne = (
  uid: number,
  transform: (source: Buffer) => Promise<Buffer | null>,
  options?: { sealedCopyOf?: string },
) => Promise<ReplaceOutcome>;

/** The IMAP side: one session on a label, replacing messages in it one after another. */
export interface MessageReplacer {
  /** Runs `work` on the label opened; false (nothing run) when it is gone or its UIDVALIDITY changed. */
  replace(inbox: MailInbox, label: { labelGuid: string; uidValidity: number }, work: (one: ReplaceOne) => Promise<void>): Promise<boolean>;
}

/** A location of a message the index does not know to be sealed: its LocationKey, the label's UIDVALIDITY, and the message. */
export interface ResealLocation {
  labelGuid: string;
  uidValidity: number;
  uid: number;
  msgGuid: string;
}

/** What `postern admin inbox status` says of an inbox's sealing. */
export interface SealingStatus {
  /** Messages the index holds that are not known to be PGP/MIME. */
  unsealed: number;
  /** Places whose last attempt failed, waiting for their retry. */
  retrying: number;
  lastError: string | null;
}

/** The jobs in the store, shared by every process. */
export interface ResealJobs {
  /** Up to `limit` places of the inbox's unsealed messages that are not done, not held by another, not backing off. */
  due(inboxId: string, holder: string, now: number, limit: number): Promise<ResealLocation[]>;
  /** Takes the place until `now + leaseMs` unless another holds it or it is done: the attempts so far, this one included; null if not taken. */
  claim(inboxId: string, place: ResealLocation, holder: string, now: number, leaseMs: number): Promise<number | null>;
  /** Extends this holder's lease to `until`: false when another process has taken the place meanwhile. */
  renew(inboxId: string, place: ResealLocation, holder: string, until: number): Promise<boolean>;
  /** The place holds no plaintext any more (replaced, found sealed, or gone). */
  done(inboxId: string, place: ResealLocation, holder: string, now: number): Promise<void>;
  /** The attempt failed: the lease is given back and the place waits until `retryAt`. */
  failed(inboxId: string, place: ResealLocation, holder: string, retryAt: number, error: string): Promise<void>;
  /** The message was found to be PGP/MIME (indexed before the index asked). */
  markSealed(inboxId: string, msgGuid: string): Promise<void>;
  /** Forgets jobs done before `before`. */
  prune(before: number): Promise<void>;
  /** How many of the inbox's messages are left to seal, and how their attempts fare. */
  status(inboxId: string): Promise<SealingStatus>;
  /** Messages left to seal in all of these inboxes (the zero-access ones): the metrics' backlog. */
  unsealedCount(inboxIds: readonly string[]): Promise<number>;
}

export interface ResealerOptions {
  directory: DirectoryStore;
  keys: InboxKeys;
  replacer: MessageReplacer;
  jobs: ResealJobs;
  log: WarnLog;
  /** This process, among those sharing the store. */
  holder: string;
  /** Asked after a round replaced messages: a sync, so the index drops the originals. */
  onReplaced?: (inbox: MailInbox) => void;
  /** Asked at each sweep for every zero-access inbox: its first fill, whatever the watch mode (even off). */
  ensureIndexed?: (inbox: MailInbox) => Promise<void>;
  sweepMs?: number;
  leaseMs?: number;
  /** The first retry's wait (RETRY_MIN_MS). */
  retryMinMs?: number;
}

/** How often every zero-access inbox is checked for unsealed messages (a query each). */
export const SWEEP_MS = 5_000;
/** How long a process holds a place it works on: a crash delays that place by at most this. */
export const LEASE_MS = 30_000;
/** A failed attempt is retried after this long, doubling per attempt up to the max. */
const RETRY_MIN_MS = 2_000;
const RETRY_MAX_MS = 5 * 60_000;
/** Places taken per round (one IMAP session per label among them). */
const ROUND = 50;
const DAY_MS = 86_400_000;

export class Resealer {
  private readonly chains: KeyedChain;
  /** Inboxes with a drain queued and not yet started: later kicks join it. */
  private readonly queued = new Set<string>();
  private stopped = false;
  private timer: NodeJS.Timeout | null = null;
  private sweeping: Promise<void> | null = null;
  private readonly sweepMs: number;
  private readonly leaseMs: number;

  private readonly directory: DirectoryStore;
  private readonly keys: InboxKeys;
  private readonly replacer: MessageReplacer;
  private readonly jobs: ResealJobs;
  private readonly log: WarnLog;

  constructor(private readonly options: ResealerOptions) {
    this.directory = options.directory;
    this.keys = options.keys;
    this.replacer = options.replacer;
    this.jobs = options.jobs;
    this.log = options.log;
    this.chains = new KeyedChain(options.log, 'sealing plaintext in a zero-access inbox failed', 'inboxId');
    this.sweepMs = options.sweepMs ?? SWEEP_MS;
    this.leaseMs = options.leaseMs ?? LEASE_MS;
  }

  /** The start-up pass, then a sweep every `sweepMs`. */
  start(): void {
    if (this.timer || this.stopped) return;
    void this.sweep();
    this.timer = setInterval(() => void this.sweep(), this.sweepMs);
    this.timer.unref();
  }

  /** Every zero-access inbox's unsealed messages, sealed (joined when one runs). */
  sweep(): Promise<void> {
    this.sweeping ??= (async () => {
      try {
        await this.jobs.prune(Date.now() - DAY_MS);
        for (const inbox of await this.directory.listInboxes()) {
          if (inbox.mode !== 'zero-access') continue;
          await this.options.ensureIndexed?.(inbox);
          this.kick(inbox.id);
        }
      } catch (err) {
        if (!this.stopped) this.log.warn({ err }, 'the sealing sweep failed');
      } finally {
        this.sweeping = null;
      }
    })();
    return this.sweeping;
  }

  /** The hook beside MailChangeRecorder.onChanges: messages added may be plaintext. */
  readonly onChanges = (inboxId: string, changes: readonly LiveChange[]): void => {
    if (changes.some((c) => c.type === 'message.added')) this.kick(inboxId);
  };

  /** A drain of the inbox soon; one inbox's run one at a time, a burst of kicks costs one more. */
  kick(inboxId: string): void {
    if (this.stopped || this.queued.has(inboxId)) return;
    this.queued.add(inboxId);
    this.chains.run(inboxId, async () => {
      this.queued.delete(inboxId);
      const inbox = await this.directory.getInbox(inboxId);
      if (!inbox || inbox.mode !== 'zero-access') return;
      await this.drain(inbox);
    });
  }

  /** Rounds until nothing is due here (what backs off, or another process holds, waits for a sweep). */
  private async drain(inbox: MailInbox): Promise<void> {
    while (!this.stopped) {
      const due = await this.jobs.due(inbox.id, this.options.holder, Date.now(), ROUND);
      if (due.length === 0) return;
      let taken = 0;
      let replaced = 0;
      let labelGone = false;
      for (const group of byLabel(due)) {
        if (this.stopped) return;
        const { labelGuid, uidValidity } = group[0]!;
        const opened = await this.replacer
          .replace(inbox, { labelGuid, uidValidity }, async (one) => {
            for (const place of group) {
              if (this.stopped) return;
              const now = Date.now();
              const attempts = await this.jobs.claim(inbox.id, place, this.options.holder, now, this.leaseMs);
              if (attempts === null) continue;
              taken++;
              try {
                const key = await this.keys.current(inbox.id);
                // A second attempt may follow one that died after its APPEND: look for that copy.
                const transform = async (source: Buffer) => {
                  if (isPgpMime(source)) return null;
                  const sealed = await seal(source, key, { of: place.msgGuid });
                  // Still ours right before the APPEND: a process stalled past its lease (a huge
                  // message, a paused VM) must not append beside the one that took over.
                  if (!(await this.jobs.renew(inbox.id, place, this.options.holder, Date.now() + this.leaseMs)))
                    throw new Error('the lease on this message lapsed and another process took it');
                  return sealed;
                };
                const outcome = await one(place.uid, transform, attempts > 1 ? { sealedCopyOf: place.msgGuid } : {});
                if (outcome === 'unchanged') await this.jobs.markSealed(inbox.id, place.msgGuid);
                if (outcome === 'replaced') replaced++;
                await this.jobs.done(inbox.id, place, this.options.holder, Date.now());
              } catch (err) {
                const retryMs = Math.min(RETRY_MAX_MS, (this.options.retryMinMs ?? RETRY_MIN_MS) * 2 ** Math.min(20, attempts - 1));
                await this.jobs.failed(
                  inbox.id,
                  place,
                  this.options.holder,
                  Date.now() + retryMs,
                  err instanceof Error ? err.message : String(err),
                );
                this.log.warn({ err, inbox: inbox.id, uid: place.uid, attempts, retryMs }, 'could not seal a message; trying again later');
                // The connection is likely gone: the rest of the round waits for the next one.
                throw err;
              }
            }
          })
          .catch((err: unknown) => {
            // Logged above when it was about a message; a failure to open the label is logged here.
            if (!this.stopped) this.log.warn({ err, inbox: inbox.id }, 'a sealing round stopped');
            return null;
          });
        if (opened === null) return;
        if (!opened) labelGone = true;
      }
      if (replaced > 0 || labelGone) this.options.onReplaced?.(inbox);
      // The index is behind the server (a label renumbered or gone): its next sync says what is there.
      if (labelGone || taken === 0) return;
    }
  }

  /** Resolves when every drain asked for so far is done. */
  async idle(): Promise<void> {
    await this.sweeping;
    await this.chains.idle();
  }

  /** Resolves when every drain under way is done; no new ones start. */
  async close(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    await this.idle();
  }
}

/** Places grouped by label (one IMAP session each), in the order given. */
function byLabel(places: readonly ResealLocation[]): ResealLocation[][] {
  const groups = new Map<string, ResealLocation[]>();
  for (const p of places) {
    const key = `${p.labelGuid}:${p.uidValidity}`;
    let g = groups.get(key);
    if (!g) groups.set(key, (g = []));
    g.push(p);
  }
  return [...groups.values()];
}
