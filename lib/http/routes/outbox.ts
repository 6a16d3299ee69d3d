// The outbox, visible (docs/sending.md, "The outbox"), an extension of version 1: an inbox's sends
// with their state, and a held or scheduled one cancelled (back to Drafts) or rescheduled. All
// take the send scope, as sending does (sessions: members who may send).
import type { Access } from '../../auth/access.ts';
import { invalid } from '../../errors.ts';
import type { ScheduledSends } from '../../send/scheduled.ts';
import { allow } from '../authenticate.ts';
import { readJson } from '../body.ts';
import type { AppRouter } from '../context.ts';
import type { Validator } from '../validate.ts';

const RESCHEDULE = 'https://postern.dev/schemas/send.json#/$defs/Reschedule';
const SEND = { token: 'send', session: true } as const;
const MAX_LIST = 500;

export function outboxRoutes(access: Access, scheduled: ScheduledSends, validator: Validator) {
  return (router: AppRouter): void => {
    router.get('/inboxes/:inbox/outbox', allow(access, SEND), async (ctx) => {
      const { inbox } = await access.inboxAccess(ctx.state.principal, ctx.params.inbox!, 'send');
      const which = ctx.query.state ?? 'pending';
      if (which !== 'pending' && which !== 'all') throw invalid('state must be pending or all');
      const limitText = ctx.query.limit ?? '100';
      if (typeof limitText !== 'string' || !/^\d{1,4}$/.test(limitText) || Number(limitText) < 1 || Number(limitText) > MAX_LIST) {
        throw invalid(`limit must be an integer from 1 to ${MAX_LIST}`);
      }
      ctx.set('Cache-Control', 'no-store');
      ctx.body = { sends: await scheduled.list(inbox, which === 'pending', Number(limitText)) };
    });

    router.get('/inboxes/:inbox/outbox/:id', allow(access, SEND), async (ctx) => {
      const { inbox } = await access.inboxAccess(ctx.state.principal, ctx.params.inbox!, 'send');
      ctx.set('Cache-Control', 'no-store');
      ctx.body = await scheduled.get(inbox, ctx.params.id!);
    });

    router.post('/inboxes/:inbox/outbox/:id/cancel', allow(access, SEND), async (ctx) => {
      const { inbox } = await access.inboxAccess(ctx.state.principal, ctx.params.inbox!, 'send');
      ctx.body = await scheduled.cancel(inbox, ctx.state.principal.actor, ctx.params.id!);
    });

    router.patch('/inboxes/:inbox/outbox/:id', allow(access, SEND), async (ctx) => {
      const { inbox } = await access.inboxAccess(ctx.state.principal, ctx.params.inbox!, 'send');
      const body = validator.body<{ sendAt: string }>(RESCHEDULE, await readJson(ctx));
      ctx.body = await scheduled.reschedule(inbox, ctx.state.principal.actor, ctx.params.id!, body.sendAt);
    });
  };
}
