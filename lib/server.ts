// The one place that wires adapters to the domain and starts the HTTP server.
import cluster from 'node:cluster';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import { pino, type Logger } from 'pino';
import { openDb, type Db } from '../adapters/store/sqlite/db.ts';
import { SqliteDirectoryStore } from '../adapters/store/sqlite/directory.ts';
import { SqliteEventStore } from '../adapters/store/sqlite/events.ts';
import { ClusterBus } from '../adapters/bus/cluster.ts';
import { MemoryBus } from '../adapters/bus/memory.ts';
import { RedisBus } from '../adapters/bus/redis.ts';
import type { Bus } from './bus.ts';
import { EventLog } from './events/log.ts';
import { eventRoutes } from './http/routes/events.ts';
import { SqliteMailIndex } from '../adapters/store/sqlite/mail-index.ts';
import { ImapMailSource } from '../adapters/imap/source.ts';
import { Access } from './auth/access.ts';
import type { Config } from './config.ts';
import { Admin } from './directory/admin.ts';
import { createApp, listOperations, SURFACES } from './http/app.ts';
import { buildOpenApi, openApiRoutes } from './http/openapi.ts';
import { healthRoutes } from './http/routes/health.ts';
import { inboxRoutes } from './http/routes/inboxes.ts';
import { inboxEventRoutes } from './http/routes/inbox-events.ts';
import { StreamGuard } from './http/stream-guard.ts';
import { labelRoutes } from './http/routes/labels.ts';
import { messageRoutes } from './http/routes/messages.ts';
import { MailChangeRecorder } from './mail/record-changes.ts';
import { mailChannel, MailLiveFeed } from './mail/live.ts';
import { MailService } from './mail/service.ts';
import { Validator } from './http/validate.ts';

export interface Postern {
  config: Config;
  log: Logger;
  db: Db;
  access: Access;
  admin: Admin;
  validator: Validator;
  /** The project event log: `events.record(...)` is how every part of Postern emits an event. */
  events: EventLog;
  /** Fan-out between the parts of this process and, with REDIS_URL, between processes. */
  bus: Bus;
  /** The mail read API's domain, and the IMAP side behind it (pool, sync, watchers). */
  mail: MailService;
  mailSource: ImapMailSource;
  /** Every operation served on each base address, and the OpenAPI document describing them. */
  operations: Array<{ method: string; path: string }>;
  openApi: ReturnType<typeof buildOpenApi>;
  /** Starts listening; resolves with the bound address. */
  listen(): Promise<{ url: string; port: number }>;
  close(): Promise<void>;
}

export function createPostern(config: Config, log: Logger = pino({ level: config.logLevel })): Postern {
  const db = openDb(config.dbFile);
  const directory = new SqliteDirectoryStore(db);
  const access = new Access(directory);
  const admin = new Admin(directory, { tokenTtlSeconds: config.tokenTtlSeconds, sessionTtlSeconds: config.sessionTtlSeconds });
  const validator = new Validator();
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
  const eventStore = new SqliteEventStore(db);
  events = new EventLog(eventStore, bus, { settleMs: config.events.settleMs, log: log.child({ part: 'events' }) });
  const eventLog = events;
  const mailIndex = new SqliteMailIndex(db);
  const mailChanges = new MailChangeRecorder(directory, eventLog, log.child({ part: 'mail-events' }));
  // Inbox streams hear the changes every process sharing the store applies, over the same bus.
  const mailLive = new MailLiveFeed(bus, async () => mailChannel(await eventStore.logId()), { log: log.child({ part: 'mail-live' }) });
  mailGap = () => mailLive.gap();
  const mailSource = new ImapMailSource({ imap: config.imap, store: mailIndex, log: log.child({ part: 'imap' }), onChanges: mailChanges.onChanges, live: mailLive, leases: mailIndex });
  const mail = new MailService(mailIndex, mailSource, mailChanges.expect);
  // Ends live streams whose credential or inbox access went away (one timer for all of them).
  const streamGuard = new StreamGuard(access, { intervalMs: config.stream.recheckMs, log: log.child({ part: 'stream-guard' }) });

  const routes = [
    inboxRoutes(access),
    eventRoutes({ access, events: eventLog, validator, heartbeatMs: config.stream.heartbeatMs, maxDurationMs: config.stream.maxDurationMs, guard: streamGuard, log }),
    labelRoutes(access, mail),
    messageRoutes(access, mail, validator),
    inboxEventRoutes(access, mail, config.stream, streamGuard),
  ];
  const openApi = buildOpenApi(validator.schemas);
  const healthCheck = db.prepare('SELECT 1');
  const app = createApp({
    access,
    log,
    trustProxy: config.http.trustProxy,
    publicRoutes: [healthRoutes(() => void healthCheck.get()), openApiRoutes(openApi, Object.values(SURFACES))],
    routes,
  });

  let server: Server | null = null;
  return {
    config,
    log,
    db,
    access,
    admin,
    validator,
    events: eventLog,
    bus,
    mail,
    mailSource,
    operations: listOperations(routes),
    openApi,
    async listen() {
      await eventLog.start();
      await mailLive.start();
      server = app.listen(config.http.port, config.http.host);
      await once(server, 'listening');
      // Long-lived event streams must not be cut by Node's request timeouts.
      server.requestTimeout = 0;
      server.keepAliveTimeout = 65_000;
      const { port } = server.address() as AddressInfo;
      const host = config.http.host.includes(':') ? `[${config.http.host}]` : config.http.host;
      return { url: `http://${host}:${port}`, port };
    },
    async close() {
      streamGuard.stop();
      if (server) {
        const closing = once(server, 'close');
        server.close();
        server.closeAllConnections();
        await closing;
        server = null;
      }
      // Every IMAP connection and watcher, before the store they write to closes.
      await mailSource.close();
      await mailChanges.drain();
      await eventLog.close();
      await bus.close();
      db.close();
    },
  };
}
