// get_thread, the twin of GET /inboxes/{inbox}/threads/{thread} (docs/threads.md): the same access
// as listing, and previews under the listing's gate and audit (content:read, compatible inboxes).
import type { Access } from '../../auth/access.ts';
import type { EventLog } from '../../events/log.ts';
import { DEFAULT_RULE } from '../../http/authenticate.ts';
import { previewGate } from '../../mail/content-access.ts';
import type { ThreadReads } from '../../mail/thread-reads.ts';
import { untrusted, UNTRUSTED_NOTICE } from '../text.ts';
import { tool, type Tool } from '../tool.ts';
import { messageLine } from './mail.ts';

export function threadTools(access: Access, threads: ThreadReads, events: EventLog): Tool[] {
  return [
    tool<{ inboxId: string; threadId: string; preview?: boolean }>({
      name: 'get_thread',
      title: 'Get a thread',
      description:
        "A conversation's messages, oldest first (replies and forwards that keep the chain, across labels): id, date, sender, subject, flags. " +
        '`preview: true` adds about 200 characters of each text: only with the content:read scope, only in compatible inboxes, and recorded in the audit log.',
      rule: DEFAULT_RULE,
      input: 'GetThreadInput',
      async run(p, args) {
        const { inbox } = await access.inboxAccess(p, args.inboxId, 'messages:read');
        const record = args.preview ? await previewGate(access, events, p, inbox) : null;
        const thread = await threads.thread(inbox, args.threadId);
        if (record) await threads.withPreviews(inbox, thread.messages, record);
        const more = thread.more ? `\nThe thread has more messages than these ${thread.messages.length}.` : '';
        return {
          structured: { ...thread, notice: UNTRUSTED_NOTICE },
          text: untrusted(thread.messages.map(messageLine).join('\n')) + more,
        };
      },
    }),
  ];
}
