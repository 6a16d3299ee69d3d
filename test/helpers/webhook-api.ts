// The webhook API as the delivery tests use it: a project with a token that may manage webhooks
// and publish ext.order.shipped, its calls, and settings that make retries quick and loopback
// receivers reachable.
import { expect } from 'chai';
import type { Webhook, WebhookCreated, WebhookDeliveryList } from '../../schemas/wire.ts';
import { register, post as publish, type WireEvent } from './events-helpers.ts';
import { call, json, newProject, type TestProject, type TestServer } from './harness.ts';
import { Receiver } from './webhook-receiver.ts';

export const SCHEMA = 'https://postern.dev/schemas/webhooks.json#/$defs/';
export const SCOPES = ['webhooks:write', 'events:read', 'events:write', 'project:read'];

/** Retries in a blink, loopback receivers allowed, leases short enough for a test to outlive. */
export const FAST: Record<string, string> = {
  POSTERN_EVENTS_SETTLE_MS: '0',
  POSTERN_WEBHOOK_ALLOW_HTTP_LOOPBACK: '1',
  POSTERN_WEBHOOK_ALLOW: '127.0.0.1/32',
  POSTERN_WEBHOOK_RETRY_SCHEDULE: '300ms,300ms,300ms,300ms,300ms,300ms,300ms,300ms',
  POSTERN_WEBHOOK_POLL_MS: '100',
  POSTERN_WEBHOOK_TIMEOUT_MS: '2000',
  POSTERN_WEBHOOK_LEASE_MS: '4000',
};

export function api(s: TestServer, token: string) {
  const send = async (method: string, path: string, body?: unknown) =>
    call(`${s.base}${path}`, {
      method,
      token,
      ...(body !== undefined ? { headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) } : {}),
    });
  return {
    token,
    send,
    async hook(receiver: Receiver, body: Record<string, unknown> = {}): Promise<WebhookCreated> {
      const res = await send('POST', '/webhooks', { url: receiver.url, ...body });
      expect(res.status, await res.clone().text()).to.equal(201);
      const made = await json<WebhookCreated>(res);
      receiver.secrets = [made.secret];
      return made;
    },
    async get(id: string): Promise<Webhook> {
      return json<Webhook>(await send('GET', `/webhooks/${id}`));
    },
    async deliveries(id: string, query = ''): Promise<WebhookDeliveryList> {
      const res = await send('GET', `/webhooks/${id}/deliveries${query}`);
      expect(res.status, await res.clone().text()).to.equal(200);
      return s.postern.validator.body<WebhookDeliveryList>(`${SCHEMA}WebhookDeliveryList`, await json(res));
    },
    /** Publishes ext.order.shipped events; their ids, in order. */
    async ship(n: number): Promise<string[]> {
      const ids: string[] = [];
      for (let i = 0; i < n; i++) {
        const res = await publish(s, token, { type: 'ext.order.shipped', data: { orderId: `o-${i}` } });
        expect(res.status, await res.clone().text()).to.equal(201);
        ids.push((await json<{ id: string }>(res)).id);
      }
      return ids;
    },
    async events(query: string): Promise<WireEvent[]> {
      return (await json<{ events: WireEvent[] }>(await send('GET', `/events?${query}`))).events;
    },
  };
}

export async function project(s: TestServer): Promise<{ p: TestProject; token: string; a: ReturnType<typeof api> }> {
  const p = await newProject(s);
  const token = await p.token(SCOPES);
  await register(s, token, {
    name: 'ext.order.shipped',
    description: 'An order left.',
    data: [{ name: 'orderId', type: 'string', required: true }],
  });
  return { p, token, a: api(s, token) };
}

/** Receivers a suite starts, closed together (`close`, in its after or afterEach). */
export function receiverPool(): { receiver: () => Promise<Receiver>; close: () => Promise<void> } {
  const open: Receiver[] = [];
  return {
    receiver: async () => {
      const r = await new Receiver().start();
      open.push(r);
      return r;
    },
    close: async () => {
      for (const r of open.splice(0)) await r.close();
    },
  };
}
