// A thread's messages (docs/threads.md), an extension of version 1: the same access as listing,
// and previews (?preview=true) as the listing gives them (a content reader's, audited per page);
// ?inLabel= keeps the messages in one label, as that label lists them.
import type { Access } from '../../auth/access.ts';
import type { EventLog } from '../../events/log.ts';
import { previewGate } from '../../mail/content-access.ts';
import type { ThreadReads } from '../../mail/thread-reads.ts';
import { allow, DEFAULT_RULE } from '../authenticate.ts';
import type { AppRouter } from '../context.ts';
import type { Validator } from '../validate.ts';

const THREAD_QUERY = 'https://postern.dev/schemas/mail.json#/$defs/ThreadQuery';

export function threadRoutes(access: Access, threads: ThreadReads, validator: Validator, events: EventLog) {
  return (router: AppRouter): void => {
    router.get('/inboxes/:inbox/threads/:thread', allow(access, DEFAULT_RULE), async (ctx) => {
      const { inbox } = await access.inboxAccess(ctx.state.principal, ctx.params.inbox!, 'messages:read');
      const query = validator.query<{ preview?: boolean; inLabel?: string }>(THREAD_QUERY, ctx.query);
      const record = query.preview ? await previewGate(access, events, ctx.state.principal, inbox) : null;
      const thread = await threads.thread(inbox, ctx.params.thread!, query.inLabel);
      if (record) await threads.withPreviews(inbox, thread.messages, record);
      ctx.body = thread;
    });
  };
}
