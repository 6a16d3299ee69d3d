// search_messages, the twin of GET /inboxes/{inbox}/search (docs/search.md): the same access as
// listing, and for `body`/`text` the same content gate and `access.content.searched` record.
import type { Access } from '../../auth/access.ts';
import type { EventLog } from '../../events/log.ts';
import { DEFAULT_RULE } from '../../http/authenticate.ts';
import { contentSearchGate } from '../../mail/content-access.ts';
import type { MailSearch, SearchQuery } from '../../mail/search.ts';
import { untrusted, UNTRUSTED_NOTICE } from '../text.ts';
import { tool, type Tool } from '../tool.ts';
import { messageLine } from './mail.ts';

export function searchTools(access: Access, search: MailSearch, events: EventLog): Tool[] {
  return [
    tool<SearchQuery & { inboxId: string }>({
      name: 'search_messages',
      title: 'Search messages',
      description:
        'Find messages in an inbox by sender, recipients, subject, dates, size, flags, label or attachments (every condition given must hold), newest first. ' +
        '`body`/`text` search the content: only with the content:read scope, only in compatible inboxes, and each such search is recorded in the audit log. Pass `cursor` from the answer for more.',
      rule: DEFAULT_RULE,
      input: 'SearchMessagesInput',
      async run(p, { inboxId, ...query }) {
        const { inbox } = await access.inboxAccess(p, inboxId, 'messages:read');
        const recordRead = await contentSearchGate(access, events, p, inbox, query);
        const page = await search.search(inbox, query, recordRead);
        const more = page.cursor !== undefined ? `\nMore results: call again with cursor=${page.cursor}.` : '';
        const text = page.messages.length === 0 ? 'No messages match.' : untrusted(page.messages.map(messageLine).join('\n')) + more;
        return { structured: { ...page, notice: UNTRUSTED_NOTICE }, text };
      },
    }),
  ];
}
