// The one place that wires adapters to the domain for the serving Postern (createPostern,
// openPostern), on a store opened by adapters/store/open.ts; what staff commands use is
// bin/staff.ts.
import cluster from 'node:cluster';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import { pino, type Logger } from 'pino';
import { EpochKeyring } from './crypto/epoch-keys.ts';
import { SealedMail } from './crypto/sealed-mail.ts';
import { UserKeys } from './crypto/user-keys.ts';
import { ImapMessageBodies } from '../adapters/imap/bodies.ts';
import { keyRoutes } from './http/routes/keys.ts';
import { contentRoutes } from './http/routes/content.ts';
import { MasterKey } from './crypto/master-key.ts';
import { ClusterBus } from '../adapters/bus/cluster.ts';
import { MemoryBus } from '../adapters/bus/memory.ts';
import { RedisBus } from '../adapters/bus/redis.ts';
import type { Bus } from './bus.ts';
import { EventLog } from './events/log.ts';
import { eventRoutes } from './http/routes/events.ts';
import { ImapMailSource } from '../adapters/imap/source.ts';
import { Access } from './auth/access.ts';
import { ConfigError, type Config } from './config.ts';
import type { Store } from './store.ts';
import { openStore } from '../adapters/store/open.ts';
import { Admin } from './directory/admin.ts';
import { createApp, listOperations, SURFACES } from './http/app.ts';
import { apiReferenceRoutes } from './http/api-reference.ts';
import { buildOpenApi, openApiRoutes } from './http/openapi.ts';
import { healthRoutes } from './http/routes/health.ts';
import { Readiness } from './health.ts';
import { ImapLoginCheck } from '../adapters/imap/health.ts';
import { inboxRoutes } from './http/routes/inboxes.ts';
import { inboxEventRoutes } from './http/routes/inbox-events.ts';
import { StreamGuard } from './http/stream-guard.ts';
import { StreamQuota } from './http/stream-quota.ts';
import { CredentialRate } from './rate.ts';
import { createHttpServer, drainServer } from './http/connections.ts';
import { labelRoutes } from './http/routes/labels.ts';
import { messageRoutes } from './http/routes/messages.ts';
import { searchRoutes } from './http/routes/search.ts';
import { MailChangeRecorder } from './mail/record-changes.ts';
import { mailChannel, MailLiveFeed } from './mail/live.ts';
import { MailMirror } from './mail/mirror.ts';
import { MailSearch } from './mail/search.ts';
import { MailService } from './mail/service.ts';
import { Ingress } from './mail/ingress.ts';
import { Resealer } from './mail/reseal.ts';
import type { LiveChange } from './mail/types.ts';
import { ImapMessageReplacer } from '../adapters/imap/replace.ts';
import { DovecotLmtp } from '../adapters/smtp/dovecot-lmtp.ts';
import { LmtpIngress } from '../adapters/smtp/lmtp-ingress.ts';
import { WatchAll } from './mail/watch-all.ts';
import { HintListener } from '../adapters/push/hint-listener.ts';
import { Validator } from './http/validate.ts';
import { Passkeys } from './auth/passkeys.ts';
import { MemberKeyChange } from './auth/key-change.ts';
import { KeyBackups } from './crypto/key-backups.ts';
import { passkeyRoutes } from './http/routes/passkeys.ts';
import { keyBackupRoutes } from './http/routes/key-backup.ts';
import { webAppRoutes } from './http/routes/web-app.ts';
import { SmtpRelay } from '../adapters/smtp/relay.ts';
import { ImapSentFiler } from '../adapters/imap/sent.ts';
import { SEND_MEMORY_BUDGET, sendRoutes } from './http/routes/send.ts';
import { BodyGate } from './http/body-gate.ts';
import { SentCopies } from './send/outbox.ts';
import { SendService } from './send/service.ts';
import { SealedOpener } from './send/sealed.ts';
import { seal } from './mail/seal.ts';
import { BounceMatcher } from './send/bounces.ts';
import { WebhookEndpoints } from './webhooks/endpoints.ts';
import { WebhookDispatcher } from './webhooks/dispatcher.ts';
import { AddressVerdicts, WebhookConnections, webhookPoster } from '../adapters/webhooks/client.ts';
import { WebhookDns } from '../adapters/webhooks/dns.ts';
import { webhookRoutes } from './http/routes/webhooks.ts';
import { Metrics, NO_METRICS, type Recorders } from './metrics.ts';
import { listenMetrics, type MetricsServer } from './http/metrics-server.ts';
import { mcpRoutes } from './http/routes/mcp.ts';
import { McpTools } from './mcp/server.ts';
import { McpSubscriptions } from './mcp/subscriptions.ts';

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
  const masterKey = MasterKey.parse(config.masterKey);
  const { directory, keys: keyStore, mailIndex } = store;
  const keys = new EpochKeyring(keyStore, masterKey);
  const access = new Access(directory);
  // Assigned below, once the mirror exists: an inbox added is watched (and indexed) from then on.
  let onInboxAdded: ((inbox: { id: string; imapUser: string; addresses: readonly string[] }) => void) | null = null;
  let onInboxRemoved: ((inboxId: string) => Promise<void>) | null = null;
  const admin = new Admin(directory, {
    tokenTtlSeconds: config.tokenTtlSeconds,
    sessionTtlSeconds: config.sessionTtlSeconds,
    keys,
    onInboxAdded: (inbox) => onInboxAdded?.(inbox),
    onInboxRemoved: async (id) => onInboxRemoved?.(id),
  });
  const validator = new Validator();
  // Off (no POSTERN_METRICS_LISTEN): recorders that do nothing, and no registry at all.
  const metrics = config.metrics ? new Metrics({ keptReads: store.keptReadsServed() !== null }) : null;
  const recorders: Recorders = metrics ?? NO_METRICS;
  // After a Redis reconnect the event log's live feed heals from the store, and inbox streams end
  // so their clients read again (lib/mail/live.ts); both are assigned just below.
  let events: EventLog | null = null;
  let mailGap: (() => void) | null = null;
  // Redis joins instances (and the workers of each); without it, a clustered instance's workers
  // talk through their primary, and a lone process needs no bus beyond itself.
  const bus: Bus = config.redisUrl
    ? new RedisBus(config.redisUrl, {
        onReconnect: () => {
          events?.live.heal();
          mailGap?.();
        },
        log: log.child({ part: 'bus' }),
      })
    : cluster.isWorker
      ? new ClusterBus()
      : new MemoryBus();
  const eventStore = store.events;
  events = new EventLog(eventStore, bus, {
    settleMs: config.events.settleMs,
    log: log.child({ part: 'events' }),
    metrics: recorders.events,
  });
  const eventLog = events;
  const mailChanges = new MailChangeRecorder(directory, eventLog, log.child({ part: 'mail-events' }));
  // Inbox streams hear the changes every process sharing the store applies, over the same bus.
  const mailLive = new MailLiveFeed(bus, async () => mailChannel(await eventStore.logId()), { log: log.child({ part: 'mail-live' }) });
  mailGap = () => mailLive.gap();
  // Plaintext a mail app appends to a zero-access inbox is sealed in place (lib/mail/reseal.ts),
  // and bounces are read from what the index adds (a zero-access inbox's by the ingress, before
  // it seals them).
  const mailSource = new ImapMailSource({ imap: config.imap, store: mailIndex, log: log.child({ part: 'imap' }), metrics: recorders.imap });
  // A durable job: every unsealed message of a zero-access inbox, found by sweeps and at start.
  // A round that replaced messages asks for a sync, so the index drops the originals.
  let mailMirrorRef: MailMirror | null = null;
  const resealer = new Resealer({
    directory,
    keys,
    replacer: new ImapMessageReplacer(mailSource.pool, mailIndex),
    jobs: store.resealJobs,
    log: log.child({ part: 'reseal' }),
    holder: mailLive.origin,
    onReplaced: (inbox) => void mailMirrorRef?.nudge(inbox, { background: true }),
    ensureIndexed: async (inbox) => {
      if (!(await mailIndex.isSeeded(inbox.id))) void mailMirrorRef?.nudge(inbox, { background: true });
    },
  });
  let bounces: BounceMatcher | null = null;
  const onChanges = (inboxId: string, changes: readonly LiveChange[]) => {
    mailChanges.onChanges(inboxId, changes);
    resealer.onChanges(inboxId, changes);
    bounces?.onChanges(inboxId, changes);
  };
  const mailMirror = new MailMirror({
    index: mailIndex,
    source: mailSource,
    live: mailLive,
    log: log.child({ part: 'mail' }),
    onChanges,
    leases: mailIndex,
    leaseMs: config.imap.watchLeaseMs,
    fillWaitMs: config.watch.fillWaitMs,
    metrics: recorders.sync,
  });
  mailMirrorRef = mailMirror;
  // The ingress's pool of sessions to Dovecot, closed after the ingress on shutdown.
  const dovecotLmtp = new DovecotLmtp(config.ingress.dovecot);
  const lmtp = config.ingress.listen
    ? new LmtpIngress(
        new Ingress({
          directory,
          keys,
          local: dovecotLmtp,
          events: eventLog,
          log: log.child({ part: 'ingress' }),
          beforeSealed: (inboxId, from, raw) => bounces?.ingressReport(inboxId, from, raw) ?? Promise.resolve(),
          recipientDelimiter: config.ingress.recipientDelimiter,
        }),
        { ...config.ingress.listen, log: log.child({ part: 'lmtp' }) },
      )
    : null;
  const mail = new MailService({
    index: mailIndex,
    mirror: mailMirror,
    source: mailSource,
    announce: mailChanges.expect,
    announceLabels: mailChanges.expectLabels,
  });
  const mailSearch = new MailSearch({ index: mailIndex, mirror: mailMirror, source: mailSource, bounds: config.search });
  const sealed = new SealedMail({
    mail,
    index: mailIndex,
    bodies: new ImapMessageBodies(mailSource.pool, mailIndex),
    keys,
    messageKeys: keyStore,
  });
  const userKeys = new UserKeys(keyStore, keys);
  // Sending: Postfix submission as each inbox's user; Sent copies from the durable outbox.
  const relay = new SmtpRelay(
    {
      ...config.smtp,
      masterUser: config.imap.masterUser,
      masterPassword: config.imap.masterPassword,
      masterSeparator: config.imap.masterSeparator,
    },
    log.child({ part: 'relay' }),
  );
  const { outbox } = store;
  // One memory budget for the send bodies and the Sent copies being filed.
  const sendMemory = new BodyGate(SEND_MEMORY_BUDGET);
  const sentCopies = new SentCopies({
    outbox,
    directory,
    filer: new ImapSentFiler(mailSource.pool, (inbox) => mailMirror.refresh(inbox)),
    log: log.child({ part: 'outbox' }),
    memory: sendMemory,
    yieldMs: config.send.copyYieldMs,
  });
  bounces = new BounceMatcher({
    index: mailIndex,
    bodies: new ImapMessageBodies(mailSource.pool, mailIndex),
    outbox,
    directory,
    events: eventLog,
    log: log.child({ part: 'bounces' }),
  });
  const send = new SendService({
    relay,
    outbox,
    events: eventLog,
    limits: config.send,
    copies: sentCopies,
    log: log.child({ part: 'send' }),
    sealCopy: async (inboxId, raw) => seal(raw, await keys.current(inboxId)),
    metrics: recorders.send,
  });
  const watchAll = new WatchAll({
    mode: config.watch.mode,
    reason: config.watch.reason,
    catalog: directory,
    mirror: mailMirror,
    leases: mailIndex,
    reports: mailIndex,
    origin: mailLive.origin,
    sweepMs: config.watch.sweepMs,
    sweepConcurrency: config.watch.sweepConcurrency,
    catalogPollMs: config.watch.catalogPollMs,
    ...(config.watch.hints ? { hintListen: `${config.watch.hints.host}:${config.watch.hints.port}` } : {}),
    log: log.child({ part: 'watch' }),
    metrics: recorders.watch,
  });
  onInboxAdded = (inbox) => watchAll.added(inbox);
  onInboxRemoved = (id) => watchAll.removed(id);
  const hints = config.watch.hints;
  const hintListener = hints
    ? new HintListener({
        host: hints.host,
        port: hints.port,
        secret: hints.secret,
        onHint: (user) => watchAll.hint(user),
        onRefused: () => watchAll.refused(),
        log: log.child({ part: 'hints' }),
      })
    : null;
  // Ends live streams whose credential or inbox access went away (one timer for all of them).
  const streamGuard = new StreamGuard(access, { intervalMs: config.stream.recheckMs, log: log.child({ part: 'stream-guard' }) });
  // Caps the live streams of one credential and of one project (both kinds of stream).
  const streamQuota = new StreamQuota({ maxPerCredential: config.stream.maxPerCredential, maxPerProject: config.stream.maxPerProject });
  // Each token's and session's request budgets, in this process (docs/access.md, "Rate limits").
  const rate = new CredentialRate(config.rate, recorders.rate);

  // Webhooks: endpoints managed through the API, deliveries sent by the dispatcher.
  const webhookConnections = new WebhookConnections();
  // Hosts resolved off libuv's thread pool, answers and failures kept, a share of lookups per project (docs/webhooks.md).
  const webhookDns = new WebhookDns(config.webhooks.dns);
  // A name's checked address is kept 5 s: a DNS change is seen that soon, and each attempt is not a lookup.
  const postWebhook = webhookPoster({
    allow: config.webhookAllow,
    timeoutMs: config.webhooks.timeoutMs,
    connections: webhookConnections,
    verdicts: new AddressVerdicts(5000),
    resolve: (host, project) => webhookDns.resolve(host, project),
  });
  let dispatcher: WebhookDispatcher | null = null;
  const webhookEndpoints = new WebhookEndpoints({
    store: store.webhooks,
    access,
    masterKey,
    head: () => eventStore.lastPosition(),
    allowHttpLoopback: config.webhookAllowHttpLoopback,
    cursors: () => eventLog.cursors(),
    post: postWebhook,
    onChange: async (id) => dispatcher?.poke(id),
    onDelete: (id) => dispatcher?.forget(id),
    testsPerMinute: config.webhooks.testsPerMinute,
  });
  dispatcher = new WebhookDispatcher({
    store: store.webhooks,
    events: eventLog,
    access,
    endpoints: webhookEndpoints,
    post: postWebhook,
    settings: config.webhooks,
    log: log.child({ part: 'webhooks' }),
    metrics: recorders.webhooks,
  });
  const webhookDispatcher = dispatcher;

  const passkeys = new Passkeys(store.passkeys, directory, {
    origin: config.app.origin,
    rpName: 'Postern',
    sessionTtlSeconds: config.sessionTtlSeconds,
    inviteTtlSeconds: config.app.inviteTtlSeconds,
    reauthMaxAgeSeconds: config.app.reauthMaxAgeSeconds,
    events: eventLog,
  });
  const mcpSubscriptions = new McpSubscriptions({ bus, mail, access, log: log.child({ part: 'mcp' }) });
  const mcpTools = new McpTools({
    access,
    mail,
    search: mailSearch,
    sealed,
    send,
    events: eventLog,
    validator,
    subscriptions: mcpSubscriptions,
    log: log.child({ part: 'mcp' }),
    // Each tool call, a batch's too, spends one of the credential's expensive budget as it starts.
    charge: (p) => rate.expensive(p),
  });
  const routes = [
    inboxRoutes(access),
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
    labelRoutes(access, mail),
    messageRoutes(access, mail, validator, sealed, rate),
    searchRoutes(access, mailSearch, validator, eventLog, rate),
    keyRoutes(access, keys, userKeys, new MemberKeyChange(passkeys, userKeys, eventLog), validator),
    contentRoutes(access, sealed, eventLog, rate),
    inboxEventRoutes(access, mail, config.stream, streamGuard, streamQuota),
    sendRoutes(access, send, new SealedOpener(keys), validator, sendMemory),
    webhookRoutes({ access, validator, webhooks: webhookEndpoints }),
    mcpRoutes({
      access,
      mcp: mcpTools,
      subscriptions: mcpSubscriptions,
      stream: config.stream,
      guard: streamGuard,
      quota: streamQuota,
      limits: config.mcp,
    }),
  ];
  // The web app's own endpoints: on {app_url} only, each with its own authentication.
  const appRoutes = [
    passkeyRoutes({ access, passkeys, validator, ceremoniesPerMinute: config.app.ceremoniesPerMinute, rate, metrics: recorders.rate }),
    keyBackupRoutes({ access, backups: new KeyBackups(store.keyBackups), validator, rate }),
  ];
  const openApi = buildOpenApi(validator.schemas);
  // An IMAP user to log in as, looked up only when none is remembered (ImapLoginCheck); picked
  // at random, so a refused one (a user gone from Dovecot) is not the one picked every time.
  const someImapUser = async (not?: string) => {
    const users = (await directory.listInboxes()).map((i) => i.imapUser).filter((u) => u !== not);
    return users.length === 0 ? null : users[Math.floor(Math.random() * users.length)]!;
  };
  const imapCheck = new ImapLoginCheck(config.imap, someImapUser, config.http.readyTimeoutMs);
  const readiness = new Readiness(
    {
      store: () => store.health(),
      imap: () => imapCheck.check(),
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
    keys,
    lmtp,
    resealer,
    bounces,
    watchAll,
    hintListener,
    mcp: { tools: mcpTools, subscriptions: mcpSubscriptions },
    metrics,
    operations: [...listOperations(routes), ...listOperations(appRoutes)],
    openApi,
    readiness,
    async listen() {
      // The master key must open the stored keys; inboxes older than keys get epoch 1 here.
      const { backfilled } = await keys.prepare();
      if (backfilled.length > 0) log.info({ inboxes: backfilled.length }, 'made epoch 1 for inboxes that had no key');
      store.startUpkeep((err) => log.warn({ err }, "the store's upkeep failed; it falls back to doing it inline"));
      await eventLog.start();
      await webhookDispatcher.start();
      await mailLive.start();
      await mcpSubscriptions.start();
      // What a process that died mid-send left (this one's predecessor, say) is settled first.
      await sentCopies.recover();
      sentCopies.start();
      await lmtp?.listen();
      await hintListener?.listen();
      await watchAll.start();
      resealer.start();
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
      await sentCopies.stop();
      await relay.close();
      // Deliveries under way finish (their message.received is recorded) before the log closes.
      await lmtp?.close();
      await dovecotLmtp.close();
      await hintListener?.close();
      await watchAll.close();
      // Every IMAP connection and watcher, before the store they write to closes.
      await resealer.close();
      await mailMirror.close();
      await mailChanges.drain();
      await bounces?.drain();
      await webhookDispatcher.close();
      webhookConnections.close();
      webhookDns.close();
      await mcpSubscriptions.close();
      await eventLog.close();
      await bus.close();
      await store.close();
    },
  };
}
