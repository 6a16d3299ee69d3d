// Folders over IMAP (docs/organize.md, "Folders"): CREATE, RENAME and DELETE with the
// subscriptions mail apps list, and the move of a whole folder's mail before a DELETE. The
// decisions (names, special-use, who may) are lib/mail/folders.ts's; this speaks IMAP only.
import type { ImapFlow } from 'imapflow';
import { conflict, unavailable } from '../../lib/errors.ts';
import type { FolderSource } from '../../lib/mail/folders.ts';
import type { LabelState, MailInbox } from '../../lib/mail/types.ts';
import type { ImapPool } from './pool.ts';
import { unselect } from './raw.ts';

/** What the server said when it refused, for the error message (never a stack). */
function said(err: unknown): string {
  const e = err as { responseText?: unknown; serverResponseCode?: unknown } | null;
  return typeof e?.responseText === 'string' && e.responseText !== '' ? e.responseText : 'refused';
}

/** ALREADYEXISTS (RFC 5530) or Dovecot's words for it. */
function exists(err: unknown): boolean {
  const e = err as { serverResponseCode?: unknown } | null;
  return e?.serverResponseCode === 'ALREADYEXISTS' || /already exists/i.test(said(err));
}

export class ImapFolders implements FolderSource {
  constructor(private readonly pool: ImapPool) {}

  async delimiter(inbox: MailInbox): Promise<string | null> {
    return this.pool.use(inbox.imapUser, async (client) => {
      const personal = client.namespace;
      if (personal && personal.delimiter !== undefined) return personal.delimiter;
      // No NAMESPACE: LIST "" "" answers the delimiter (RFC 3501 6.3.8).
      const [root] = await client.list().catch(() => []);
      return root?.delimiter ?? null;
    });
  }

  async create(inbox: MailInbox, path: string): Promise<void> {
    await this.pool.use(inbox.imapUser, async (client) => {
      const made = await client.mailboxCreate(path).catch((err: unknown) => {
        if (exists(err)) throw conflict(`a label named ${path} already exists`);
        throw unavailable(`the mail server did not create the label: ${said(err)}`);
      });
      if (!made.created) throw conflict(`a label named ${path} already exists`);
      // Subscribed: mail apps list subscribed folders only (RFC 3501 6.3.6).
      await client.mailboxSubscribe(path);
    });
  }

  async rename(inbox: MailInbox, label: LabelState, to: string): Promise<void> {
    await this.pool.use(inbox.imapUser, async (client) => {
      await this.same(client, label);
      await client.mailboxRename(label.path, to).catch((err: unknown) => {
        if (exists(err)) throw conflict(`a label named ${to} already exists`);
        throw unavailable(`the mail server did not rename the label: ${said(err)}`);
      });
      // The subscriptions move with the names, the folders under it too (each its own name).
      const delimiter = client.namespace?.delimiter;
      const under = delimiter ? (await client.list()).map((b) => b.path).filter((p) => p.startsWith(to + delimiter)) : [];
      for (const path of [to, ...under]) {
        await client.mailboxSubscribe(path);
        await client.mailboxUnsubscribe(label.path + path.slice(to.length)).catch(() => undefined);
      }
    });
  }

  async remove(inbox: MailInbox, label: LabelState, moveTo: LabelState | null): Promise<void> {
    await this.pool.use(inbox.imapUser, async (client) => {
      try {
        if (moveTo) {
          const opened = await this.same(client, label);
          // One UID MOVE of the whole folder: ids, flags and bytes go with the messages.
          if (opened.exists > 0 && !(await client.messageMove('1:*', moveTo.path, { uid: true })))
            throw unavailable('the mail server did not move the messages out of the label; nothing was deleted');
          await unselect(client);
        } else {
          await this.same(client, label);
          await unselect(client);
        }
        await client.mailboxDelete(label.path).catch((err: unknown) => {
          throw unavailable(`the mail server did not delete the label: ${said(err)}`);
        });
        await client.mailboxUnsubscribe(label.path).catch(() => undefined);
      } finally {
        if (client.usable) await unselect(client).catch(() => undefined);
      }
    });
  }

  /** The folder at the label's path is the label still (same UIDVALIDITY): a conflict otherwise. */
  private async same(client: ImapFlow, label: LabelState): Promise<{ exists: number }> {
    const opened = await client.mailboxOpen(label.path).catch(() => null);
    if (!opened || Number(opened.uidValidity) !== label.uidValidity)
      throw conflict('the label changed on the mail server meanwhile (renamed or deleted by a mail app); read the labels again');
    return { exists: opened.exists };
  }
}
