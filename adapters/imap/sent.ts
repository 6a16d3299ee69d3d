// Files a sent message's copy in the inbox's \Sent mailbox with \Seen: one focused APPEND next to
// the sync, through the same pool. Idempotent when the outbox retries it after any failure: a
// retried copy whose Message-ID is already in Sent is not appended again. A first attempt skips
// that search, which without a full-text index reads the headers of the whole folder.
import type { MailInbox } from '../../lib/mail/types.ts';
import type { SentFiler } from '../../lib/send/ports.ts';
import { unselect } from './raw.ts';
import type { ImapPool } from './pool.ts';

export class ImapSentFiler implements SentFiler {
  /** Each user's \Sent mailbox, found once (forgotten when an attempt fails). */
  private readonly sentPaths = new Map<string, string>();

  constructor(
    private readonly pool: ImapPool,
    /** The mail mirror's refresh: the index learns of the copy like of any other change. */
    private readonly refreshIndex: (inbox: MailInbox) => Promise<void>,
  ) {}

  async fileSent(inbox: MailInbox, raw: Buffer, messageId: string, retry: boolean): Promise<void> {
    await this.pool.use(inbox.imapUser, async (client) => {
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
      const remember = (p: string) => {
        if (this.sentPaths.size > 10_000) this.sentPaths.clear();
        this.sentPaths.set(inbox.imapUser, p);
      };
      if (retry) {
        await client.mailboxOpen(path, { readOnly: true });
        try {
          const found = await client.search({ header: { 'message-id': messageId } }, { uid: true });
          if (found && found.length > 0) return remember(path);
        } finally {
          await unselect(client);
        }
      }
      const appended = await client.append(path, raw, ['\\Seen']);
      if (!appended) throw new Error(`the mail server did not take the copy into ${path}`);
      remember(path);
    });
  }

  async refresh(inbox: MailInbox): Promise<void> {
    // The copy reaches the index, the stream (message.added) and the event log like any change;
    // a failed refresh only delays that until the next read or watcher pass.
    await this.refreshIndex(inbox).catch(() => undefined);
  }
}
