// GET /inboxes/{inbox}/labels (docs/api.md, "Inboxes").
import type { Access } from '../../auth/access.ts';
import type { MailService } from '../../mail/service.ts';
import { allow, DEFAULT_RULE } from '../authenticate.ts';
import type { AppRouter } from '../context.ts';

export function labelRoutes(access: Access, mail: MailService) {
  return (router: AppRouter): void => {
    router.get('/inboxes/:inbox/labels', allow(access, DEFAULT_RULE), async (ctx) => {
      const { inbox } = await access.inboxAccess(ctx.state.principal, ctx.params.inbox!, 'messages:read');
      ctx.body = { labels: await mail.labels(inbox) };
    });
  };
}
