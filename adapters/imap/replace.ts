// MessageReplacer over IMAP (lib/mail/resealing.ts): one session on a label, and for each message
// asked: fetch its source, APPEND its replacement with the same flags and INTERNALDATE, then UID
// EXPUNGE the original. On its own pool connection, like every other command; the sync sees both
// changes as a mail app's would.
import type { ImapFlow } from 'imapflow';
import type { MessageReplacer, ReplaceOne } from '../../lib/mail/resealing.ts';
import { SEALED_HEADER } from '../../lib/mail/sealing.ts';
import type { MailInbox } from '../../lib/mail/types.ts';
import type { MailIndexStore } from '../../lib/mail/ports.ts';
import type { ImapPool } from './pool.ts';
import { uidsWithHeader, unselect } from './raw.ts';

const DAY_MS = 86_400_000;

/**
 * The sealed copies of `of` (a source hash, lib/mail/sealing.ts) already in the selected label: an
 * earlier attempt appended one after the original (a higher UID) with its INTERNALDATE (the same
 * day, give or take the server's time zone).
 */
async function sealedCopies(client: ImapFlow, uid: number, internalDate: Date | string | undefined, of: string): Promise<number[]> {
  const at = internalDate ? new Date(internalDate).getTime() : NaN;
  const when = Number.isNaN(at) ? {} : { since: new Date(at - DAY_MS), before: new Date(at + 2 * DAY_MS) };
  const wanted = of.toLowerCase();
  const found = await uidsWithHeader(client, { uid: `${uid + 1}:*`, ...when }, SEALED_HEADER, (v) =>
    v.split(';').some((part) => part.trim().toLowerCase() === `of=${wanted}`),
  );
  // "n:*" also names the last message when n is past it.
  return found.filter((u) => u > uid);
}

export class ImapMessageReplacer implements MessageReplacer {
  constructor(
    private readonly pool: ImapPool,
    private readonly store: Pick<MailIndexStore, 'label'>,
  ) {}

  async replace(
    inbox: MailInbox,
    at: { labelGuid: string; uidValidity: number },
    work: (one: ReplaceOne) => Promise<void>,
  ): Promise<boolean> {
    const label = await this.store.label(inbox.id, at.labelGuid);
    if (!label) return false;
    return this.pool.use(inbox.imapUser, async (client) => {
      try {
        const box = await client.mailboxOpen(label.path);
        // Another UIDVALIDITY: the UIDs name some other messages now (or none).
        if (Number(box.uidValidity) !== at.uidValidity) return false;
        await work(async (uid, transform, options = {}) => {
          const found = await client.fetchOne(String(uid), { source: true, flags: true, internalDate: true }, { uid: true });
          if (!found || !found.source) return 'gone';
          const replacement = await transform(found.source);
          if (!replacement) return 'unchanged';
          // An earlier attempt stored the replacement and died before the expunge: it stands.
          const copies = options.sealedCopyOf ? await sealedCopies(client, uid, found.internalDate, options.sealedCopyOf) : [];
          if (copies.length === 0) {
            // \Recent belongs to the server; every other flag and keyword goes with the message.
            const flags = [...(found.flags ?? [])].filter((f) => f !== '\\Recent');
            const appended = await client.append(
              label.path,
              replacement,
              flags,
              found.internalDate ? new Date(found.internalDate) : undefined,
            );
            if (!appended) throw new Error('APPEND of the replacement failed');
          }
          // Expunged only once its replacement is stored: a failure between the two leaves both,
          // never neither.
          await client.messageDelete(String(uid), { uid: true });
          return 'replaced';
        });
        return true;
      } finally {
        await unselect(client).catch(() => undefined);
      }
    });
  }
}
