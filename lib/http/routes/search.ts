// Message search (docs/search.md): the same access as listing; `body` and `text` read
// content, so they need what /content needs (a token with content:read, a compatible inbox) and
// each such search is recorded as `access.content.searched` before the mail server reads anything.
import type { Access } from '../../auth/access.ts';
import type { EventLog } from '../../events/log.ts';
import { contentSearchGate, previewGate } from '../../mail/content-access.ts';
import type { ThreadReads } from '../../mail/thread-reads.ts';
import type { MailSearch, SearchQuery } from '../../mail/search.ts';
import type { CredentialRate } from '../../rate.ts';
import { allow, DEFAULT_RULE, expensive } from '../authenticate.ts';
import type { AppRouter } from '../context.ts';
import type { Validator } from '../validate.ts';

const SEARCH_QUERY = 'https://postern.dev/schemas/mail.json#/$defs/MessageSearchQuery';

export function searchRoutes(
  access: Access,
  search: MailSearch,
  validator: Validator,
  events: EventLog,
  rate: CredentialRate,
  /** Previews and the thread backfill (docs/threads.md). */
  threads?: ThreadReads,
) {
  return (router: AppRouter): void => {
    // Every search, by headers or by body, is a SEARCH the mail server runs: the expensive budget.
    router.get('/inboxes/:inbox/search', allow(access, DEFAULT_RULE), expensive(rate), async (ctx) => {
      const principal = ctx.state.principal;
      const { inbox } = await access.inboxAccess(principal, ctx.params.inbox!, 'messages:read');
      const query = validator.query<SearchQuery>(SEARCH_QUERY, ctx.query);
      const recordRead = await contentSearchGate(access, events, principal, inbox, query);
      const recordPreviews = query.preview && threads ? await previewGate(access, events, principal, inbox) : null;
      threads?.backfill(inbox);
      const page = await search.search(inbox, query, recordRead);
      if (recordPreviews) await threads!.withPreviews(inbox, page.messages, recordPreviews);
      ctx.body = page;
    });
  };
}
