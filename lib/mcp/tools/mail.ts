// Metadata tools, each the twin of a read operation of docs/api.md, "Inboxes", "Messages": list_inboxes
// (GET /inboxes), list_labels, list_messages, get_message and set_flags.
import type { FlagChange, MessageList, MessageSummary } from '../../../schemas/wire.ts';
import type { Access } from '../../auth/access.ts';
import type { MailOpening } from '../../crypto/mail-opening.ts';
import { invalid } from '../../errors.ts';
import type { MailService } from '../../mail/service.ts';
import { DEFAULT_RULE } from '../../http/authenticate.ts';
import { untrusted, UNTRUSTED_NOTICE } from '../text.ts';
import type { EventLog } from '../../events/log.ts';
import { previewGate } from '../../mail/content-access.ts';
import type { ThreadReads } from '../../mail/thread-reads.ts';
import { tool, type Tool, type ToolAnswer } from '../tool.ts';

/** One line per message: what the model needs to pick one (sender and subject are untrusted). */
export function messageLine(m: MessageSummary): string {
  const flags = m.flags.length > 0 ? ` [${m.flags.join(', ')}]` : '';
  const thread = m.threadId !== undefined ? ` | thread: ${m.threadId}` : '';
  const preview = m.preview !== undefined ? ` | preview: ${m.preview}` : '';
  return `${m.id} | ${m.receivedAt} | ${m.direction ?? 'in'} | from: ${m.from ?? ''} | subject: ${m.subject ?? ''}${flags}${thread}${preview}`;
}

function pageAnswer(page: MessageList): ToolAnswer {
  const more = page.before !== undefined ? `\nOlder messages: call again with before=${page.before}.` : '';
  const text = page.messages.length === 0 ? 'No messages.' : untrusted(page.messages.map(messageLine).join('\n')) + more;
  return { structured: { ...page, notice: UNTRUSTED_NOTICE }, text };
}

const pageAnswers = new WeakMap<MessageList, ToolAnswer>();

export function mailTools(
  access: Access,
  mail: MailService,
  sealed: MailOpening,
  /** Previews in list_messages (docs/threads.md, "Previews"): the HTTP listing's gate and audit. */
  threads?: { reads: ThreadReads; events: EventLog },
): Tool[] {
  return [
    tool<Record<string, never>>({
      name: 'list_inboxes',
      title: 'List inboxes',
      description: 'The inboxes this token may use, with its role in each. Start here: other tools take an inboxId.',
      rule: DEFAULT_RULE,
      input: 'NoInput',
      async run(p) {
        const inboxes = (await access.grantedInboxes(p)).map(({ inbox, role }) => ({
          inboxId: inbox.id,
          role,
          mode: inbox.mode,
          addresses: inbox.addresses,
        }));
        const text =
          inboxes.length === 0
            ? 'No inboxes.'
            : inboxes.map((i) => `${i.inboxId} ${i.addresses.join(', ')} (role ${i.role}, ${i.mode})`).join('\n');
        return { structured: { inboxes }, text };
      },
    }),

    tool<{ inboxId: string }>({
      name: 'list_labels',
      title: 'List labels',
      description: 'The labels (folders) of an inbox with message and unread counts. list_messages takes a labelId.',
      rule: DEFAULT_RULE,
      input: 'ListLabelsInput',
      async run(p, args) {
        const { inbox } = await access.inboxAccess(p, args.inboxId, 'messages:read');
        const labels = await mail.labels(inbox);
        // A label's name is whatever a mail app named the folder.
        const text = labels
          .map((l) => `${l.id} ${l.name}${l.specialUse ? ` (${l.specialUse})` : ''}: ${l.total} messages, ${l.unread} unread`)
          .join('\n');
        return { structured: { labels, notice: UNTRUSTED_NOTICE }, text: text ? untrusted(text) : 'No labels.' };
      },
    }),

    tool<{ inboxId: string; labelId: string; limit: number; before?: number; preview?: boolean }>({
      name: 'list_messages',
      title: 'List messages',
      description:
        'A page of the messages under a label, newest first: id, date, sender, subject, flags, thread. Pass `before` from the answer for older ones. ' +
        '`preview: true` adds about 200 characters of each text: only with the content:read scope, only in compatible inboxes, and each such page is recorded in the audit log.',
      rule: DEFAULT_RULE,
      input: 'ListMessagesInput',
      async run(p, args) {
        const { inbox } = await access.inboxAccess(p, args.inboxId, 'messages:read');
        const options = { limit: args.limit, ...(args.before !== undefined ? { before: args.before } : {}) };
        if (args.preview && threads) {
          const record = await previewGate(access, threads.events, p, inbox, args.labelId);
          // A copy: the cached page stays without previews.
          const shown = structuredClone(await mail.messages(inbox, args.labelId, options));
          await threads.reads.withPreviews(inbox, shown.messages, record);
          return pageAnswer(shown);
        }
        threads?.reads.backfill(inbox);
        const page = await mail.messages(inbox, args.labelId, options);
        // The page is the cache's own object until the inbox changes: so is its answer (json-once.ts).
        let answer = pageAnswers.get(page);
        if (answer === undefined) pageAnswers.set(page, (answer = pageAnswer(page)));
        return answer;
      },
    }),

    tool<{ inboxId: string; messageId: string }>({
      name: 'get_message',
      title: 'Get message details',
      description: "A message's metadata (headers from the index, flags, size), without its content: read_message gives the text.",
      rule: DEFAULT_RULE,
      input: 'MessageInput',
      async run(p, args) {
        const { inbox } = await access.inboxAccess(p, args.inboxId, 'messages:read');
        const { detail } = await sealed.detail(inbox, args.messageId);
        // The wrapped key is for clients that decrypt themselves; a model has no use for it.
        const { wrappedDek: _key, keyEpoch: _epoch, ...shown } = detail;
        const m = detail.message;
        const fields = [
          `${m.id}: ${m.size} bytes, flags [${m.flags.join(', ')}]`,
          `from: ${m.from ?? ''}`,
          `to: ${m.to ?? ''}`,
          ...(detail.cc ? [`cc: ${detail.cc}`] : []),
          `subject: ${m.subject ?? ''}`,
          `date: ${m.date ?? m.receivedAt}`,
        ];
        const text = untrusted(fields.join('\n'));
        return { structured: { ...shown, notice: UNTRUSTED_NOTICE }, text };
      },
    }),

    tool<{ inboxId: string; messageId: string } & FlagChange>({
      name: 'set_flags',
      title: 'Change flags',
      description: 'Adds or removes the seen, flagged and answered flags of a message; answers with its flags after the change.',
      rule: { token: 'flags:write', session: true },
      input: 'SetFlagsInput',
      async run(p, args) {
        const { inbox } = await access.inboxAccess(p, args.inboxId, 'flags:write');
        const both = (args.add ?? []).filter((f) => args.remove?.includes(f));
        if (both.length > 0) throw invalid(`a flag cannot be added and removed at once: ${both.join(', ')}`);
        const flags = await mail.changeFlags(inbox, args.messageId, args.add ?? [], args.remove ?? [], p.actor);
        return { structured: { flags }, text: `Flags of ${args.messageId} now: [${flags.join(', ')}]` };
      },
    }),
  ];
}
