// create_draft, update_draft, list_drafts, send_draft: the twins of the drafts operations
// (docs/sending.md, "Drafts"), with the same scopes: an agent holding drafts:write but not send
// proposes a message that a person reads and sends. The tools write the RFC 5322 message from a
// few fields (as send_message does) and hand it to the same DraftService as HTTP.
import MailComposer from 'nodemailer/lib/mail-composer/index.js';
import type { Access, Principal } from '../../auth/access.ts';
import type { Draft } from '../../../schemas/wire.ts';
import type { DraftService } from '../../send/drafts.ts';
import { isScheduled } from '../../send/service.ts';
import { tool, type Tool } from '../tool.ts';
import { untrusted } from '../text.ts';

interface DraftFields {
  inboxId: string;
  from: string;
  to: string[];
  cc?: string[];
  bcc?: string[];
  subject: string;
  text: string;
}

const WRITE = { token: 'drafts:write', session: true } as const;

function compose(args: DraftFields): Promise<Buffer> {
  return new MailComposer({ from: args.from, to: args.to, cc: args.cc, bcc: args.bcc, subject: args.subject, text: args.text })
    .compile()
    .build();
}

/** One draft as the model reads it: its subject may come from anyone (a mail app's draft of a reply), so it is fenced. */
const line = (d: Draft) =>
  `${d.id}${d.sealed ? ' (sealed)' : ''} by ${d.author ?? 'a mail app'}, saved ${d.savedAt}, to ${d.to.join(', ') || 'nobody yet'}: ${d.subject ?? ''}`;

export function draftTools(access: Access, drafts: DraftService): Tool[] {
  return [
    tool<DraftFields>({
      name: 'create_draft',
      title: 'Save a draft',
      description:
        "Saves a plain-text draft in the inbox's Drafts folder, where its people (and their mail apps) see it. " +
        'It is not sent: send_draft sends it, which needs the send scope. Gives the draft id.',
      rule: WRITE,
      input: 'CreateDraftInput',
      async run(p: Principal, args) {
        const { inbox } = await access.inboxAccess(p, args.inboxId, 'drafts:write');
        const draft = await drafts.create(inbox, p.actor, { raw: await compose(args) });
        return { structured: { draft }, text: `Saved draft ${draft.id} to ${draft.to.join(', ')}.` };
      },
    }),
    tool<DraftFields & { draftId: string }>({
      name: 'update_draft',
      title: 'Replace a draft',
      description: 'Replaces the draft with a new version (its id stays). Not sent.',
      rule: WRITE,
      input: 'UpdateDraftInput',
      async run(p: Principal, args) {
        const { inbox } = await access.inboxAccess(p, args.inboxId, 'drafts:write');
        const draft = await drafts.update(inbox, p.actor, args.draftId, { raw: await compose(args) });
        return { structured: { draft }, text: `Updated draft ${draft.id}.` };
      },
    }),
    tool<{ inboxId: string }>({
      name: 'list_drafts',
      title: 'List drafts',
      description: "The drafts in the inbox's Drafts folder, newest first, with who wrote each (a token, a member, or a mail app).",
      // Listed for the tokens that write drafts (HTTP also lets messages:read read them): a tool
      // list shows only what the token's scopes allow, and 'any' would show it to every token.
      rule: WRITE,
      input: 'ListDraftsInput',
      async run(p: Principal, args) {
        const { inbox } = await access.inboxAccess(p, args.inboxId, 'drafts:write');
        const list = await drafts.list(inbox);
        const text = list.length === 0 ? 'No drafts.' : `${list.length} draft(s):\n${untrusted(list.map(line).join('\n'))}`;
        return { structured: { drafts: list }, text };
      },
    }),
    tool<{ inboxId: string; draftId: string; send_at?: string }>({
      name: 'send_draft',
      title: 'Send a draft',
      description:
        'Sends the draft, once (a retry answers as the first time), and removes it from Drafts once its copy is filed in Sent. ' +
        'Rate-limited per inbox like every send. With send_at it leaves Drafts and waits in the outbox until then (cancelled there, it comes back).',
      rule: { token: 'send', session: true },
      input: 'SendDraftInput',
      async run(p: Principal, args) {
        const { inbox } = await access.inboxAccess(p, args.inboxId, 'send');
        const result = await drafts.sendDraft(inbox, p.actor, args.draftId, drafts.scheduleOf(args.send_at, undefined));
        const text = isScheduled(result)
          ? `Scheduled draft ${args.draftId} for ${result.sendAt} (outbox ${result.outboxId}).`
          : `Sent draft ${args.draftId}.`;
        return { structured: { ...result, draftId: args.draftId }, text };
      },
    }),
  ];
}
