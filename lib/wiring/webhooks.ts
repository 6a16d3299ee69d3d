// The webhooks context: endpoints managed through the API, deliveries sent by the dispatcher,
// through the HTTP client that checks every address it posts to (docs/webhooks.md).
import { AddressVerdicts, WebhookConnections, webhookPoster } from '../../adapters/webhooks/client.ts';
import { WebhookDns } from '../../adapters/webhooks/dns.ts';
import type { EventLog } from '../events/log.ts';
import { WebhookDispatcher } from '../webhooks/dispatcher.ts';
import { WebhookEndpoints } from '../webhooks/endpoints.ts';
import type { RouteModule } from '../http/app.ts';
import { webhookRoutes } from '../http/routes/webhooks.ts';
import type { Core } from './core.ts';

export interface WebhooksContext {
  endpoints: WebhookEndpoints;
  dispatcher: WebhookDispatcher;
  /** Endpoints managed through the API. */
  routes: RouteModule[];
  start(): Promise<void>;
  /** The dispatcher, then its connections and resolver. */
  stop(): Promise<void>;
}

export function webhooksContext(core: Core, events: EventLog): WebhooksContext {
  const { config, log, store, access } = core;
  const connections = new WebhookConnections();
  // Hosts resolved off libuv's thread pool, answers and failures kept, a share of lookups per project (docs/webhooks.md).
  const dns = new WebhookDns(config.webhooks.dns);
  // A name's checked address is kept 5 s: a DNS change is seen that soon, and each attempt is not a lookup.
  const post = webhookPoster({
    allow: config.webhookAllow,
    timeoutMs: config.webhooks.timeoutMs,
    connections,
    verdicts: new AddressVerdicts(5000),
    resolve: (host, project) => dns.resolve(host, project),
  });
  // An endpoint changed or deleted through the API is told to the dispatcher, built just after
  // (it signs with the endpoints' secrets): the listeners are its own.
  const changed = new Set<(id: string) => Promise<void>>();
  const deleted = new Set<(id: string) => void>();
  const endpoints = new WebhookEndpoints({
    store: store.webhooks,
    access,
    masterKey: core.masterKey,
    head: () => store.events.lastPosition(),
    allowHttpLoopback: config.webhookAllowHttpLoopback,
    cursors: () => events.cursors(),
    post,
    onChange: async (id) => {
      for (const listener of changed) await listener(id);
    },
    onDelete: (id) => {
      for (const listener of deleted) listener(id);
    },
    testsPerMinute: config.webhooks.testsPerMinute,
  });
  const dispatcher = new WebhookDispatcher({
    store: store.webhooks,
    events,
    access,
    endpoints,
    post,
    settings: config.webhooks,
    log: log.child({ part: 'webhooks' }),
    metrics: core.recorders.webhooks,
  });
  changed.add((id) => dispatcher.poke(id));
  deleted.add((id) => dispatcher.forget(id));
  return {
    endpoints,
    dispatcher,
    routes: [webhookRoutes({ access, validator: core.validator, webhooks: endpoints })],
    start: () => dispatcher.start(),
    async stop() {
      await dispatcher.close();
      connections.close();
      dns.close();
    },
  };
}
