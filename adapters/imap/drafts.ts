// DraftFolder over IMAP (lib/send/drafts.ts): the user's special-use \Drafts mailbox (RFC 6154),
// through the sync's pool like every other command. A save APPENDs with \Draft and \Seen and only
// then expunges the version it replaces, so a failure between the two leaves both, never neither.
import type { ImapFlow, MessageAddressObject } from 'imapflow';
import { conflict } from '../../lib/errors.ts';
import type { DraftFolder, FolderDraft } from '../../lib/send/drafts.ts';
import type { MailInbox } from '../../lib/mail/types.ts';
import type { ImapPool } from './pool.ts';
import { uidSets, unselect } from './raw.ts';

const OWN_FIELDS = ['x-postern-draft-id', 'x-postern-draft-author', 'x-postern-draft-sealed', 'x-postern-draft-to'];

const bare = (list: MessageAddressObject[] | undefined): string[] =>
  (list ?? []).map((a) => a.address?.trim().toLowerCase() ?? '').filter((a) => a.includes('@'));

export class ImapDraftFolder implements DraftFolder {
  constructor(private readonly pool: ImapPool) {}

  /** The \Drafts mailbox's path; 409 when the user has none (nothing is created in its place). */
  private async path(client: ImapFlow): Promise<string> {
    const found = (await client.list()).find((b) => b.specialUse === '\\Drafts');
    if (!found) throw conflict('this mail server has no Drafts folder (special-use \\Drafts) for the inbox');
    return found.path;
  }

  /** Runs `work` with the \Drafts mailbox selected, unselected after. */
  private async inDrafts<T>(
    inbox: MailInbox,
    readOnly: boolean,
    work: (client: ImapFlow, uidValidity: number, path: string) => Promise<T>,
  ) {
    return this.pool.use(inbox.imapUser, async (client) => {
      const path = await this.path(client);
      const box = await client.mailboxOpen(path, { readOnly });
      try {
        return await work(client, Number(box.uidValidity), path);
      } finally {
        await unselect(client).catch(() => undefined);
      }
    });
  }

  async list(inbox: MailInbox): Promise<FolderDraft[]> {
    return this.inDrafts(inbox, true, async (client, uidValidity) => {
      const out: FolderDraft[] = [];
      const box = client.mailbox;
      if (box && box.exists === 0) return out;
      for await (const msg of client.fetch(
        '1:*',
        { uid: true, flags: true, size: true, internalDate: true, envelope: true, headers: OWN_FIELDS },
        { uid: false },
      )) {
        if (msg.flags?.has('\\Deleted')) continue;
        const env = msg.envelope;
        out.push({
          uid: msg.uid,
          uidValidity,
          size: msg.size ?? 0,
          savedAt: msg.internalDate ? new Date(msg.internalDate).getTime() : 0,
          fields: msg.headers ?? Buffer.alloc(0),
          subject: env?.subject ?? null,
          from: bare(env?.from)[0] ?? null,
          to: [...new Set([...bare(env?.to), ...bare(env?.cc), ...bare(env?.bcc)])],
        });
      }
      return out;
    });
  }

  async source(inbox: MailInbox, at: { uid: number; uidValidity: number }): Promise<Buffer | null> {
    return this.inDrafts(inbox, true, async (client, uidValidity) => {
      if (uidValidity !== at.uidValidity) return null;
      const found = await client.fetchOne(String(at.uid), { source: true }, { uid: true });
      return found && found.source ? found.source : null;
    });
  }

  async save(inbox: MailInbox, raw: Buffer, replacing: { uids: number[]; uidValidity: number } | null): Promise<void> {
    await this.pool.use(inbox.imapUser, async (client) => {
      const path = await this.path(client);
      const appended = await client.append(path, raw, ['\\Draft', '\\Seen']);
      if (!appended) throw new Error('APPEND of the draft failed');
    });
    if (replacing && replacing.uids.length > 0) await this.remove(inbox, replacing);
  }

  async remove(inbox: MailInbox, at: { uids: number[]; uidValidity: number }): Promise<void> {
    await this.inDrafts(inbox, false, async (client, uidValidity) => {
      // Another UIDVALIDITY: the UIDs name other messages now (or none).
      if (uidValidity !== at.uidValidity) return;
      for (const set of uidSets(at.uids)) await client.messageDelete(set, { uid: true });
    });
  }
}
