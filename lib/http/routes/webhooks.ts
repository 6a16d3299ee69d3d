// Webhook endpoints (docs/webhooks.md): POST/GET /webhooks, GET/PATCH/DELETE
// /webhooks/{id}, POST /webhooks/{id}/rotate-secret, GET /webhooks/{id}/deliveries, POST
// /webhooks/{id}/replay and /test. API tokens with webhooks:write only; the
// domain (lib/webhooks/endpoints.ts) decides what each token may see and set.
import type { NewWebhook, WebhookChange, WebhookReplay } from '../../../schemas/wire.ts';
import type { Access } from '../../auth/access.ts';
import type { DeliveriesQuery, WebhookEndpoints } from '../../webhooks/endpoints.ts';
import { allow } from '../authenticate.ts';
import { readJson } from '../body.ts';
import type { AppRouter } from '../context.ts';
import type { Validator } from '../validate.ts';

const SCHEMA = 'https://postern.dev/schemas/webhooks.json#/$defs/';
const BODY_LIMIT = 16 * 1024;

export function webhookRoutes(deps: { access: Access; webhooks: WebhookEndpoints; validator: Validator }) {
  const { access, webhooks, validator } = deps;
  const manage = allow(access, { token: 'webhooks:write', session: false });
  return (router: AppRouter): void => {
    router.post('/webhooks', manage, async (ctx) => {
      const req = validator.body<NewWebhook>(`${SCHEMA}NewWebhook`, await readJson(ctx, BODY_LIMIT));
      ctx.body = await webhooks.create(ctx.state.principal, req);
      ctx.status = 201;
    });
    router.get('/webhooks', manage, async (ctx) => {
      ctx.body = await webhooks.list(ctx.state.principal);
    });
    router.get('/webhooks/:webhook', manage, async (ctx) => {
      ctx.body = await webhooks.get(ctx.state.principal, ctx.params.webhook!);
    });
    router.patch('/webhooks/:webhook', manage, async (ctx) => {
      const req = validator.body<WebhookChange>(`${SCHEMA}WebhookChange`, await readJson(ctx, BODY_LIMIT));
      ctx.body = await webhooks.update(ctx.state.principal, ctx.params.webhook!, req);
    });
    router.delete('/webhooks/:webhook', manage, async (ctx) => {
      await webhooks.delete(ctx.state.principal, ctx.params.webhook!);
      ctx.status = 204;
    });
    router.post('/webhooks/:webhook/rotate-secret', manage, async (ctx) => {
      ctx.body = await webhooks.rotateSecret(ctx.state.principal, ctx.params.webhook!);
    });
    router.get('/webhooks/:webhook/deliveries', manage, async (ctx) => {
      const q = validator.query<DeliveriesQuery>(`${SCHEMA}WebhookDeliveriesQuery`, ctx.query);
      ctx.body = await webhooks.deliveries(ctx.state.principal, ctx.params.webhook!, q);
    });
    router.post('/webhooks/:webhook/replay', manage, async (ctx) => {
      const req = validator.body<WebhookReplay>(`${SCHEMA}WebhookReplay`, await readJson(ctx, BODY_LIMIT));
      ctx.body = await webhooks.replay(ctx.state.principal, ctx.params.webhook!, req.after);
      ctx.status = 202;
    });
    router.post('/webhooks/:webhook/test', manage, async (ctx) => {
      ctx.body = await webhooks.test(ctx.state.principal, ctx.params.webhook!);
    });
  };
}
