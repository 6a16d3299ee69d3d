// The IMAP side of a bulk change (docs/organize.md, "Bulk"): steps over UID sets, one command per
// label and step (UID STORE, UID COPY, UID MOVE, UID EXPUNGE), never one per message. What to do
// is lib/mail/bulk.ts's decision; this only speaks IMAP and says which UIDs each step found.
import type { ImapFlow } from 'imapflow';
import { unavailable } from '../../lib/errors.ts';
import type { BulkSource, BulkStep } from '../../lib/mail/bulk.ts';
import type { LabelState, MailInbox } from '../../lib/mail/types.ts';
import type { MailIndexStore } from '../../lib/mail/ports.ts';
import type { ImapPool } from './pool.ts';
import { uidFetch, uidSets, unselect } from './raw.ts';

export class ImapBulkSource implements BulkSource {
  constructor(
    private readonly pool: ImapPool,
    private readonly store: MailIndexStore,
  ) {}

  async run(inbox: MailInbox, steps: readonly BulkStep[]): Promise<Array<Set<number>>> {
    const labels = new Map((await this.store.labels(inbox.id)).map((l) => [l.guid, l]));
    const labelOf = (guid: string): LabelState => {
      const label = labels.get(guid);
      if (!label) throw unavailable('a label changed on the mail server meanwhile; try again');
      return label;
    };
    return this.pool.use(
      inbox.imapUser,
      async (client) => {
        const found: Array<Set<number>> = [];
        try {
          for (const step of steps) found.push(await this.step(client, step, labelOf));
        } finally {
          if (client.usable) await unselect(client).catch(() => undefined);
        }
        return found;
      },
      'interactive',
      undefined,
      // Not retried on a fresh connection: a COPY that completed before the connection died would
      // be made twice. The caller reads back and plans again from where the messages are.
      false,
    );
  }

  /** One step; the UIDs of it that were there (and so were changed, copied, moved or expunged). */
  private async step(client: ImapFlow, step: BulkStep, labelOf: (guid: string) => LabelState): Promise<Set<number>> {
    const done = new Set<number>();
    const label = labelOf(step.label);
    // Every open checks UIDVALIDITY: a label renumbered meanwhile holds other messages now.
    const opened = await client.mailboxOpen(label.path).catch(() => null);
    if (!opened || Number(opened.uidValidity) !== label.uidValidity) {
      // Gone or renumbered: an expunge's messages are not there any more, which is what was asked.
      if (step.op === 'expunge') for (const uid of step.uids) done.add(uid);
      return done;
    }
    for (const range of uidSets(step.uids)) {
      switch (step.op) {
        case 'store': {
          if (step.add.length > 0) await client.messageFlagsAdd(range, [...step.add], { uid: true, silent: true });
          if (step.remove.length > 0) await client.messageFlagsRemove(range, [...step.remove], { uid: true, silent: true });
          // A STORE on a UID that is not there is a no-op, not an error: ask which are there.
          await uidFetch(client, range, ['UID'], (row) => void done.add(row.uid));
          break;
        }
        case 'copy':
        case 'move': {
          const to = labelOf(step.to).path;
          const result =
            step.op === 'copy' ? await client.messageCopy(range, to, { uid: true }) : await client.messageMove(range, to, { uid: true });
          // COPYUID names the UIDs copied; one not in it was not there (gone meanwhile).
          for (const uid of result ? (result.uidMap?.keys() ?? []) : []) done.add(uid);
          break;
        }
        case 'expunge': {
          // \Deleted, then UID EXPUNGE of exactly these UIDs (UIDPLUS): no other message is touched.
          if (!(await client.messageDelete(range, { uid: true })))
            throw unavailable('the mail server did not remove messages from a label; try again');
          for (const uid of step.uids) done.add(uid);
          break;
        }
      }
    }
    return done;
  }
}
