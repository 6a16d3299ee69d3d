// The composition root of the serving Postern (createPostern, openPostern), on a store opened by
// adapters/store/open.ts: each context is built by its module in lib/wiring/ (adapters wired to
// the domain there), composed here with the HTTP surface, and started and stopped in order.
// Staff commands build the same modules they use (bin/staff.ts).
import cluster from 'node:cluster';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import { pino, type Logger } from 'pino';
import type { EpochKeyring } from './crypto/epoch-keys.ts';
import { keyRoutes } from './http/routes/keys.ts';
import { MasterKey } from './crypto/master-key.ts';
import type { Bus } from './bus.ts';
import type { EventLog } from './events/log.ts';
import { eventRoutes } from './http/routes/events.ts';
import type { ImapMailSource } from '../adapters/imap/source.ts';
import type { Access } from './auth/access.ts';
import { ConfigError, type Config } from './config.ts';
import type { Store } from './store.ts';
import { openStore } from '../adapters/store/open.ts';
import type { Admin } from './directory/admin.ts';
import { createApp, listOperations, SURFACES } from './http/app.ts';
import { apiReferenceRoutes } from './http/api-reference.ts';
import { buildOpenApi, openApiRoutes } from './http/openapi.ts';
import { healthRoutes } from './http/routes/health.ts';
import { Readiness } from './health.ts';
import { createHttpServer, drainServer } from './http/connections.ts';
import type { MailMirror } from './mail/mirror.ts';
import type { MailService } from './mail/service.ts';
import type { Resealer } from './mail/resealing.ts';
import type { LmtpIngress } from '../adapters/smtp/lmtp-ingress.ts';
import type { WatchAll } from './mail/watch-all.ts';
import type { HintListener } from '../adapters/push/hint-listener.ts';
import type { Validator } from './http/validate.ts';
import type { Passkeys } from './auth/passkeys.ts';
import { MemberKeyChange } from './auth/key-change.ts';
import { passkeyRoutes } from './http/routes/passkeys.ts';
import { keyBackupRoutes } from './http/routes/key-backup.ts';
import { keyHandoverRoutes } from './http/routes/key-handovers.ts';
import { KeyHandovers } from './crypto/key-handovers.ts';
import { webAppRoutes } from './http/routes/web-app.ts';
import type { ScheduledSends } from './send/scheduled.ts';
import type { SentCopies } from './send/outbox.ts';
import type { SendService } from './send/service.ts';
import type { BounceMatcher } from './send/bounces.ts';
import type { Metrics } from './prometheus.ts';
import { listenMetrics, type MetricsServer } from './http/metrics-server.ts';
import type { McpTools } from './mcp/server.ts';
import type { McpSubscriptions } from './mcp/subscriptions.ts';
import { authContext } from './wiring/auth.ts';
import { openCore } from './wiring/core.ts';
import { eventsContext } from './wiring/events.ts';
import { mailContext, mailIngress } from './wiring/mail.ts';
import { mcpContext } from './wiring/mcp.ts';
import { openPasskeys } from './wiring/passkeys.ts';
import { sendContext } from './wiring/send.ts';
import { webhooksContext } from './wiring/webhooks.ts';

export interface Postern {
  config: Config;
  log: Logger;
  /** Every store port, on SQLite or PostgreSQL; closed with Postern. */
  store: Store;
  access: Access;
  admin: Admin;
  /** Passkey enrollment and sign-in for the web app (invites are issued through it). */
  passkeys: Passkeys;
  validator: Validator;
  /** The project event log: `events.record(...)` is how every part of Postern emits an event. */
  events: EventLog;
  /** Fan-out between the parts of this process and, with REDIS_URL, between processes. */
  bus: Bus;
  /** The mail read API's domain, and the IMAP side behind it (pool, sync, watchers). */
  mail: MailService;
  mailSource: ImapMailSource;
  mailMirror: MailMirror;
  /** Sending (both operations) and the outbox filing Sent copies. */
  send: SendService;
  sentCopies: SentCopies;
  /** Sends waiting for their time or undo hold (docs/sending.md, "Send later"). */
  scheduled: ScheduledSends;
  /** Each inbox's epoch keys (lib/crypto): what the read, ingress and send paths seal to and open with. */
  keys: EpochKeyring;
  /**
   * The LMTP delivery ingress when POSTERN_LMTP_PORT is set. With several workers each runs one on
   * the shared port, and the cluster spreads Postfix's connections over them as it does HTTP.
   */
  lmtp: LmtpIngress | null;
  /** Seals plaintext that mail apps append to zero-access inboxes. */
  resealer: Resealer;
  /** Matches delivery reports to the sends they are about (mail.delivery.failed). */
  bounces: BounceMatcher;
  /** Every inbox watched without a stream: push hints, the sweep, or NOTIFY (docs/watch.md). */
  watchAll: WatchAll;
  /** The internal listener for Dovecot's push hints, when POSTERN_HINT_LISTEN is set. */
  hintListener: HintListener | null;
  /** Prometheus metrics when POSTERN_METRICS_LISTEN is set (lib/metrics.ts); null: none kept. */
  metrics: Metrics | null;
  /** Every operation served on each base address, and the OpenAPI document describing them. */
  operations: Array<{ method: string; path: string }>;
  openApi: ReturnType<typeof buildOpenApi>;
  /** What GET /readyz answers: the store, IMAP and SMTP submission checked, or draining. */
  readiness: Readiness;
  /** MCP's tools (McpTools.charge is where a limit on calls plugs in) and resource subscriptions. */
  mcp: { tools: McpTools; subscriptions: McpSubscriptions };
  /**
   * Starts listening; resolves with the bound address, and the metrics listener's (null when
   * metrics are off, or in a cluster worker: there the primary serves them).
   */
  listen(): Promise<{ url: string; port: number; metricsUrl: string | null }>;
  /**
   * The orderly stop on SIGTERM (docs/operations.md, "Health and shutdown"): no new connections,
   * /readyz 503, event streams ended with a reconnect hint, requests under way given
   * POSTERN_SHUTDOWN_GRACE_MS to finish; then close().
   */
  shutdown(): Promise<void>;
  /** Stops at once: open connections are cut. */
  close(): Promise<void>;
}

/** The reconnect hint streams get at shutdown: between this and twice this (StreamGuard.endAll). */
const SHUTDOWN_RETRY_MS = 1000;

/** Opens the configured store (lib/store.ts) and builds Postern on it. */
export async function openPostern(config: Config, log: Logger = pino({ level: config.logLevel })): Promise<Postern> {
  // Never a default: without a well-formed master key the service does not start (MasterKeyError).
  MasterKey.parse(config.masterKey);
  // Only what the error says: pg attaches its whole client (connection state, every prepared statement) to it.
  const onIdleError = (err: Error & { code?: string }) =>
    log.warn({ err: { message: err.message, code: err.code } }, 'an idle PostgreSQL connection failed; the pool opens another');
  // Kept reads (docs/deployment.md): while the listening connection is not heard to, every read goes to the database.
  const onListenerState = (live: boolean, why: string) =>
    live
      ? log.info({ why }, 'PostgreSQL changes are heard: kept reads are served')
      : log.warn({ why }, 'PostgreSQL changes may not be heard: every read goes to the database until they are');
  const store = await openStore(config, { onIdleError, onListenerState });
  try {
    return createPostern(config, store, log);
  } catch (err) {
    await store.close();
    throw err;
  }
}

/** Builds Postern on `store`, which it then owns (its close closes the store). */
export function createPostern(config: Config, store: Store, log: Logger = pino({ level: config.logLevel })): Postern {
  // Each context is built on what it needs, in that order (docs/architecture.md, "Start and stop").
  const core = openCore(config, store, log);
  const { access, validator, keys, metrics, recorders, bus, rate, streamGuard, streamQuota } = core;
  const { directory } = store;
  const eventsPart = eventsContext({
    config,
    store,
    bus,
    log,
    metrics: recorders.events,
    onBusReconnect: core.onBusReconnect,
  });
  const eventLog = eventsPart.events;
  const mailPart = mailContext(core, eventLog);
  const { mail, source: mailSource, mirror: mailMirror, watchAll } = mailPart;
  const sendPart = sendContext(core, eventLog, mailPart);
  const { send, sentCopies, relay, bounces } = sendPart;
  const ingress = mailIngress(core, eventLog, (inboxId, from, raw) => bounces.ingressReport(inboxId, from, raw));
  const authPart = authContext({
    config,
    store,
    keys,
    // An inbox added is watched (and indexed) from then on.
    onInboxAdded: (inbox) => watchAll.added(inbox),
    onInboxRemoved: (id) => watchAll.removed(id),
  });
  const { admin, memberKeys } = authPart;
  const webhooks = webhooksContext(core, eventLog);
  const passkeys = openPasskeys(config, store, eventLog);
  const mcp = mcpContext(core, eventLog, mailPart, sendPart);
  // Each context serves its own routes; the events and auth contexts are shared with the staff
  // commands (bin/staff.ts), which must not load the HTTP layer, so theirs are mounted here.
  const routes = [
    ...mailPart.routes,
    eventRoutes({
      access,
      events: eventLog,
      validator,
      heartbeatMs: config.stream.heartbeatMs,
      maxDurationMs: config.stream.maxDurationMs,
      guard: streamGuard,
      quota: streamQuota,
      log,
    }),
    keyRoutes(access, keys, memberKeys, new MemberKeyChange(passkeys, memberKeys, eventLog), validator),
    ...sendPart.routes,
    ...webhooks.routes,
    ...mcp.routes,
  ];
  // The web app's own endpoints: on {app_url} only, each with its own authentication.
  const appRoutes = [
    passkeyRoutes({ access, passkeys, validator, ceremoniesPerMinute: config.app.ceremoniesPerMinute, rate, metrics: recorders.rate }),
    keyBackupRoutes({ access, backups: authPart.keyBackups, validator, rate }),
    keyHandoverRoutes({ access, handovers: new KeyHandovers(store.keyHandovers, eventLog), validator, rate }),
  ];
  const openApi = buildOpenApi(validator.schemas);
  const readiness = new Readiness(
    {
      store: () => store.health(),
      imap: () => mailPart.imapCheck.check(),
      smtp: () => relay.check(config.http.readyTimeoutMs),
    },
    // Kept a second: a balancer polling hard costs one IMAP login and one SMTP connection a second.
    { timeoutMs: config.http.readyTimeoutMs, cacheMs: 1000, log: log.child({ part: 'readiness' }) },
  );
  const app = createApp({
    access,
    rate,
    log,
    trustProxy: config.http.trustProxy,
    bodyIdleTimeoutMs: config.http.bodyIdleTimeoutMs,
    draining: () => readiness.draining,
    publicRoutes: [healthRoutes(readiness), openApiRoutes(openApi, Object.values(SURFACES)), apiReferenceRoutes(), webAppRoutes()],
    routes,
    appRoutes,
    ...(metrics ? { metrics } : {}),
  });
  // Read at scrape time: the state each part keeps anyway, and two cheap queries of the store.
  metrics?.sample({
    imapConnections: () => mailSource.pool.counts(),
    imapWaiting: () => mailSource.pool.waiting(),
    watchedInboxes: () => watchAll.watched(),
    eventLogReaders: () => eventLog.live.subscriberCount(),
    sseStreams: () => streamQuota.openStreams(),
    unsealedMessages: async () =>
      store.resealJobs.unsealedCount((await directory.listInboxes()).filter((i) => i.mode === 'zero-access').map((i) => i.id)),
    keptReadsServed: () => store.keptReadsServed(),
    webhookQueueAgeSeconds: async () => {
      const due = await store.webhooks.oldestDue();
      return due === null ? 0 : Math.max(0, (Date.now() - due) / 1000);
    },
  });
  let metricsServer: MetricsServer | null = null;

  let server: Server | null = null;
  return {
    config,
    log,
    store,
    access,
    admin,
    passkeys,
    validator,
    events: eventLog,
    bus,
    mail,
    mailSource,
    mailMirror,
    send,
    sentCopies,
    scheduled: sendPart.scheduled,
    keys,
    lmtp: ingress.lmtp,
    resealer: mailPart.resealer,
    bounces,
    watchAll,
    hintListener: mailPart.hintListener,
    mcp: { tools: mcp.tools, subscriptions: mcp.subscriptions },
    metrics,
    operations: [...listOperations(routes), ...listOperations(appRoutes)],
    openApi,
    readiness,
    async listen() {
      // The master key must open the stored keys; inboxes older than keys get epoch 1 here.
      const { backfilled } = await keys.prepare();
      if (backfilled.length > 0) log.info({ inboxes: backfilled.length }, 'made epoch 1 for inboxes that had no key');
      store.startUpkeep((err) => log.warn({ err }, "the store's upkeep failed; it falls back to doing it inline"));
      await eventsPart.start();
      await webhooks.start();
      await mailPart.start();
      await mcp.start();
      await sendPart.start();
      await ingress.start();
      await mailPart.watch();
      // A cluster worker's metrics are asked for by its primary, which serves them all as one.
      // Bound before the public port: an address in use stops the start with its reason.
      if (metrics && config.metrics && !cluster.isWorker) {
        const at = config.metrics;
        metricsServer = await listenMetrics(at, metrics, (err) => log.warn({ err }, 'gathering the metrics failed')).catch((err: Error) => {
          throw new ConfigError(`POSTERN_METRICS_LISTEN: cannot listen on ${at.host}:${at.port}: ${err.message}`);
        });
      }
      // Request deadlines and the per-address cap (lib/http/connections.ts); cluster workers
      // each run this with the same configuration.
      server = createHttpServer(app.callback(), config.http);
      server.listen(config.http.port, config.http.host);
      await once(server, 'listening');
      const { port } = server.address() as AddressInfo;
      const host = config.http.host.includes(':') ? `[${config.http.host}]` : config.http.host;
      return { url: `http://${host}:${port}`, port, metricsUrl: metricsServer?.url ?? null };
    },
    async shutdown() {
      readiness.drain();
      if (!server) return this.close();
      const started = Date.now();
      // No new connections from here on; streams are told to come back (to another instance).
      const draining = drainServer(server, config.http.shutdownGraceMs);
      streamGuard.endAll(SHUTDOWN_RETRY_MS);
      if (await draining) {
        log.info({ ms: Date.now() - started }, 'every request finished; shutting down');
        server = null;
      } else {
        log.warn({ graceMs: config.http.shutdownGraceMs }, 'requests still under way at the end of the shutdown grace are cut');
      }
      await this.close();
    },
    async close() {
      readiness.drain();
      streamGuard.stop();
      await metricsServer?.close();
      metricsServer = null;
      if (server) {
        const closing = once(server, 'close');
        // Already closed by shutdown(): only its connections are left to cut.
        if (server.listening) server.close();
        server.closeAllConnections();
        await closing;
        server = null;
      }
      await sendPart.stop();
      // Deliveries under way finish (their message.received is recorded) before the log closes.
      await ingress.stop();
      // Every IMAP connection and watcher, before the store they write to closes.
      await mailPart.stop();
      await sendPart.drain();
      await webhooks.stop();
      await mcp.stop();
      await eventsPart.stop();
      await bus.close();
      await store.close();
    },
  };
}
