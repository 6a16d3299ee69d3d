// GET /inboxes: the inboxes the caller has been granted, with the caller's role.
import type { Access } from '../../auth/access.ts';
import { allow, DEFAULT_RULE } from '../authenticate.ts';
import type { AppRouter } from '../context.ts';

export function inboxRoutes(access: Access) {
  return (router: AppRouter): void => {
    router.get('/inboxes', allow(access, DEFAULT_RULE), async (ctx) => {
      const granted = await access.grantedInboxes(ctx.state.principal);
      ctx.body = {
        inboxes: granted.map(({ inbox, role }) => ({
          inboxId: inbox.id,
          role,
          // An extension of version 1: the web app states the inbox's mode in words (docs/app.md, "Labels").
          mode: inbox.mode,
          ...(inbox.addresses[0] ? { label: inbox.addresses[0] } : {}),
        })),
      };
    });
  };
}
