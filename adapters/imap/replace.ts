// MessageReplacer over IMAP (lib/mail/reseal.ts): fetch a message's source, APPEND its
// replacement with the same flags and INTERNALDATE, then UID EXPUNGE the original. On its own
// pool connection, like every other command; the sync sees both changes as a mail app's would.
import type { MessageReplacer } from '../../lib/mail/reseal.ts';
import type { ChangePoint, MailIndexStore, MailInbox } from '../../lib/mail/types.ts';
import type { ImapPool } from './pool.ts';
import { unselect } from './raw.ts';

export class ImapMessageReplacer implements MessageReplacer {
  constructor(
    private readonly pool: ImapPool,
    private readonly store: Pick<MailIndexStore, 'label'>,
  ) {}

  async replace(inbox: MailInbox, at: ChangePoint, transform: (source: Buffer) => Promise<Buffer | null>): Promise<boolean> {
    const label = await this.store.label(inbox.id, at.labelGuid);
    if (!label) return false;
    return this.pool.use(inbox.imapUser, async (client) => {
      try {
        const box = await client.mailboxOpen(label.path);
        // Another UIDVALIDITY: the UID names some other message now (or none).
        if (Number(box.uidValidity) !== at.uidValidity) return false;
        const found = await client.fetchOne(String(at.uid), { source: true, flags: true, internalDate: true }, { uid: true });
        if (!found || !found.source) return false;
        const replacement = await transform(found.source);
        if (!replacement) return false;
        // \Recent belongs to the server; every other flag and keyword goes with the message.
        const flags = [...(found.flags ?? [])].filter((f) => f !== '\\Recent');
        const appended = await client.append(label.path, replacement, flags, found.internalDate ? new Date(found.internalDate) : undefined);
        if (!appended) throw new Error('APPEND of the replacement failed');
        // Expunged only once its replacement is stored: a failure between the two leaves both,
        // never neither.
        await client.messageDelete(String(at.uid), { uid: true });
        return true;
      } finally {
        await unselect(client).catch(() => undefined);
      }
    });
  }
}
