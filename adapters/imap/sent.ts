// Files sent messages' copies in the inbox's \Sent mailbox with \Seen, next to the sync, through
// the same pool: a batch of copies in one MULTIAPPEND (adapters/imap/raw.ts appendAll), so
// Dovecot saves them in one transaction (all or none) and sends one push hint for them.
// Idempotent when the outbox retries after any failure: a retried copy whose Message-ID is
// already in Sent is not appended again. A first attempt skips that check, which reads the
// Message-ID of every message filed since the send was reserved.
import type { MailInbox } from '../../lib/mail/types.ts';
import type { SentCopy, SentFiler } from '../../lib/send/ports.ts';
import { appendAll, uidsWithHeader, unselect } from './raw.ts';
import type { ImapPool } from './pool.ts';

const DAY_MS = 86_400_000;

export class ImapSentFiler implements SentFiler {
  /** Each user's \Sent mailbox, found once (forgotten when an attempt fails). */
  private readonly sentPaths = new Map<string, string>();

  constructor(
    private readonly pool: ImapPool,
    /** The mail mirror's refresh: the index learns of the copy like of any other change. */
    private readonly refreshIndex: (inbox: MailInbox) => Promise<void>,
  ) {}

  async fileSent(inbox: MailInbox, copies: readonly SentCopy[]): Promise<void> {
    let runs = 0;
    await this.pool.use(inbox.imapUser, async (client) => {
      // The pool runs this task again on a fresh connection when its connection died, which may
      // have been after Dovecot saved the batch: that second run checks every copy like a retry.
      const again = runs++ > 0;
      let path = this.sentPaths.get(inbox.imapUser);
      if (!path) {
        const boxes = await client.list();
        // Dovecot creates \Sent on first login (auto = subscribe); a server without one gets "Sent".
        path = boxes.find((b) => b.specialUse === '\\Sent')?.path;
        if (!path) {
          path = 'Sent';
          if (!boxes.some((b) => b.path === path)) await client.mailboxCreate(path);
        }
      }
      // Forgotten until this attempt works: a renamed or deleted Sent is looked up again.
      this.sentPaths.delete(inbox.imapUser);
      let todo = copies;
      if (again || copies.some((c) => c.retry)) {
        await client.mailboxOpen(path, { readOnly: true });
        try {
          const left: SentCopy[] = [];
          for (const copy of copies) {
            if (again || copy.retry) {
              // An earlier attempt appended it after the send was reserved: a day's margin for
              // SINCE (a date in the server's time zone) and for clocks.
              const since = new Date(copy.createdAt - DAY_MS);
              const found = await uidsWithHeader(client, { since }, 'message-id', (v) => v === copy.messageId);
              if (found.length > 0) continue;
            }
            left.push(copy);
          }
          todo = left;
        } finally {
          await unselect(client);
        }
      }
      if (todo.length > 0)
        await appendAll(
          client,
          path,
          todo.map((c) => c.raw),
          ['\\Seen'],
        );
      if (this.sentPaths.size > 10_000) this.sentPaths.clear();
      this.sentPaths.set(inbox.imapUser, path);
    });
  }

  async refresh(inbox: MailInbox): Promise<void> {
    // The copy reaches the index, the stream (message.added) and the event log like any change;
    // a failed refresh only delays that until the next read or watcher pass.
    await this.refreshIndex(inbox).catch(() => undefined);
  }
}
