// Zero-access inboxes hold no plaintext, but a mail app can APPEND a plaintext message straight
// into one over IMAP (a draft, a message moved in from another account). The sync sees it as a
// message.added; this piece then seals it to the inbox's current epoch and puts the sealed form
// in its place, with the same flags and INTERNALDATE, and the plaintext is expunged.
//
// Loops: a PGP/MIME message (what Postern seals, or a message its sender encrypted) holds no
// plaintext and is never sealed again, so the message.added of the replacement ends here. Races: every process sharing the store may see the same
// message.added; a claim in the store (label GUID + UIDVALIDITY + UID names the message for good)
// lets exactly one of them re-seal it. A message already gone (expunged or moved by the mail
// app meanwhile) is simply not there to replace.
import type { DirectoryStore } from '../directory/store.ts';
import { KeyedChain } from '../keyed-chain.ts';
import type { WarnLog } from '../warn-log.ts';
import type { InboxKeys } from './ingress.ts';
import { isPgpMime, seal } from './seal.ts';
import type { ChangePoint, LiveChange, MailInbox } from './types.ts';

/** The IMAP side: replace a message by a transform of its source, keeping flags and date. */
export interface MessageReplacer {
  /**
   * Fetches the message at `at`, and unless `transform` returns null, APPENDs the result to the
   * same label with the same flags and INTERNALDATE, then UID EXPUNGEs the original. Resolves
   * false when the message is gone (or its label's UIDVALIDITY changed) or nothing was replaced.
   */
  replace(inbox: MailInbox, at: ChangePoint, transform: (source: Buffer) => Promise<Buffer | null>): Promise<boolean>;
}

/** Which process re-seals a message: the first to claim it. */
export interface ResealClaims {
  /** True for the first claim of `key` (by any process sharing the store). */
  claim(key: string): Promise<boolean>;
  /** Gives a claim back after a failed attempt, so a retry (here or elsewhere) may take it. */
  release(key: string): Promise<void>;
}

/** Attempts per message when the mail server fails midway (it is down, a connection drops). */
const ATTEMPTS = 4;
const RETRY_MS = 3_000;

export class Resealer {
  private readonly chains: KeyedChain;
  private stopped = false;

  constructor(
    private readonly directory: DirectoryStore,
    private readonly keys: InboxKeys,
    private readonly replacer: MessageReplacer,
    private readonly claims: ResealClaims,
    log: WarnLog,
  ) {
    this.chains = new KeyedChain(log, 're-sealing appended mail failed', 'inboxId');
  }

  /** The hook beside MailChangeRecorder.onChanges: every batch of changes the sync applied. */
  readonly onChanges = (inboxId: string, changes: readonly LiveChange[]): void => {
    const added = changes.filter((c) => c.type === 'message.added');
    if (added.length === 0 || this.stopped) return;
    // One inbox's messages one at a time, in the order added.
    this.chains.run(inboxId, async () => {
      const inbox = await this.directory.getInbox(inboxId);
      if (!inbox || inbox.mode !== 'zero-access') return;
      for (const change of added) await this.reseal(inbox, change.at);
    });
  };

  private async reseal(inbox: MailInbox, at: ChangePoint): Promise<void> {
    const claim = `${inbox.id}:${at.labelGuid}:${at.uidValidity}:${at.uid}`;
    if (!(await this.claims.claim(claim))) return;
    for (let attempt = 1; ; attempt++) {
      try {
        const key = await this.keys.current(inbox.id);
        await this.replacer.replace(inbox, at, async (source) => (isPgpMime(source) ? null : seal(source, key)));
        return;
      } catch (err) {
        if (attempt >= ATTEMPTS || this.stopped) {
          // Given back, so another process's later sync of the same message may try again.
          await this.claims.release(claim);
          throw err;
        }
        await new Promise((r) => setTimeout(r, RETRY_MS));
      }
    }
  }

  /** Resolves when every re-seal handed over so far is done (or given up). */
  async idle(): Promise<void> {
    await this.chains.idle();
  }

  /** Resolves when every re-seal under way is done; no new ones start. */
  async close(): Promise<void> {
    this.stopped = true;
    await this.idle();
  }
}
