// The mail context: the IMAP side opened as one unit (the source with its connection pool, the
// mirror deciding when to sync, the watchers), the index-backed services the read API and MCP
// call, the resealer, and the live feed. Then, in mailIngress, the LMTP delivery ingress, built
// once what it hands delivery reports to exists (docs/architecture.md, "Start and stop").
import { ImapBulkSource } from '../../adapters/imap/bulk.ts';
import { ImapMessageBodies } from '../../adapters/imap/bodies.ts';
import { ImapFolders } from '../../adapters/imap/folders.ts';
import { ImapLoginCheck } from '../../adapters/imap/health.ts';
import { ImapMessageReplacer } from '../../adapters/imap/replace.ts';
import { ImapMailSource } from '../../adapters/imap/source.ts';
import { HintListener } from '../../adapters/push/hint-listener.ts';
import { DovecotLmtp } from '../../adapters/smtp/dovecot-lmtp.ts';
import { LmtpIngress } from '../../adapters/smtp/lmtp-ingress.ts';
import { MailOpening } from '../crypto/mail-opening.ts';
import type { EventLog } from '../events/log.ts';
import { Ingress, type SealedInboxHook } from '../mail/ingress.ts';
import { mailChannel, MailLiveFeed } from '../mail/live.ts';
import { MailMirror } from '../mail/mirror.ts';
import { MailBulk } from '../mail/bulk.ts';
import { EventBulkJournal } from '../mail/bulk-journal.ts';
import { MailChangeRecorder } from '../mail/record-changes.ts';
import { Resealer } from '../mail/resealing.ts';
import { MailSearch } from '../mail/search.ts';
import { MailFolders } from '../mail/folders.ts';
import { ThreadReads } from '../mail/thread-reads.ts';
import { MailService } from '../mail/service.ts';
import type { LiveChange } from '../mail/types.ts';
import { WatchAll } from '../mail/watch-all.ts';
import type { RouteModule } from '../http/app.ts';
import { bulkRoutes } from '../http/routes/bulk.ts';
import { contentRoutes } from '../http/routes/content.ts';
import { folderRoutes } from '../http/routes/folders.ts';
import { inboxEventRoutes } from '../http/routes/inbox-events.ts';
import { inboxRoutes } from '../http/routes/inboxes.ts';
import { labelRoutes } from '../http/routes/labels.ts';
import { messageRoutes } from '../http/routes/messages.ts';
import { searchRoutes } from '../http/routes/search.ts';
import { threadRoutes } from '../http/routes/threads.ts';
import type { Core } from './core.ts';

export type ChangesListener = (inboxId: string, changes: readonly LiveChange[]) => void;

export interface MailContext {
  /** The mail read API's domain, and the IMAP side behind it (pool, sync, watchers). */
  mail: MailService;
  /** Labels created, renamed, deleted; messages deleted forever (docs/organize.md). */
  folders: MailFolders;
  /** One change to many messages (docs/organize.md, "Bulk"). */
  bulk: MailBulk;
  search: MailSearch;
  /** Threads and previews (docs/threads.md): a thread, collapsed pages, the backfill. */
  threads: ThreadReads;
  sealed: MailOpening;
  source: ImapMailSource;
  mirror: MailMirror;
  live: MailLiveFeed;
  /** Seals plaintext that mail apps append to zero-access inboxes. */
  resealer: Resealer;
  /** Every inbox watched without a stream: push hints, the sweep, or NOTIFY (docs/watch.md). */
  watchAll: WatchAll;
  /** The internal listener for Dovecot's push hints, when POSTERN_HINT_LISTEN is set. */
  hintListener: HintListener | null;
  /** Logs in as some inbox's IMAP user: what GET /readyz asks of IMAP. */
  imapCheck: ImapLoginCheck;
  /** Inboxes, labels, messages, folders, bulk changes, search, threads, content and the inbox stream. */
  routes: RouteModule[];
  /** Adds a listener told of every change the index applies (after the event log and the resealer). */
  onChanges(listener: ChangesListener): void;
  /** The live feed: before anything publishes to it. */
  start(): Promise<void>;
  /** The watch: hints, every inbox watched, the resealer. Last, once all that reacts to changes runs. */
  watch(): Promise<void>;
  /** Every IMAP connection and watcher, before the store they write to; the change events drained. */
  stop(): Promise<void>;
}

export function mailContext(core: Core, events: EventLog): MailContext {
  const { config, log, store, keys } = core;
  const { directory, mailIndex } = store;
  const mailChanges = new MailChangeRecorder(directory, events, log.child({ part: 'mail-events' }));
  // Inbox streams hear the changes every process sharing the store applies, over the same bus.
  const live = new MailLiveFeed(core.bus, async () => mailChannel(await store.events.logId()), { log: log.child({ part: 'mail-live' }) });
  // After a Redis reconnect inbox streams end so their clients read again (lib/mail/live.ts).
  core.onBusReconnect(() => live.gap());
  const source = new ImapMailSource({
    imap: config.imap,
    store: mailIndex,
    log: log.child({ part: 'imap' }),
    metrics: core.recorders.imap,
  });
  // What the index adds goes to the event log, the resealer, and (added by the send context)
  // the bounce matcher, in that order.
  const listeners: ChangesListener[] = [mailChanges.onChanges];
  const mirror = new MailMirror({
    index: mailIndex,
    source,
    live,
    log: log.child({ part: 'mail' }),
    onChanges: (inboxId, changes) => {
      for (const listener of listeners) listener(inboxId, changes);
    },
    leases: mailIndex,
    leaseMs: config.imap.watchLeaseMs,
    fillWaitMs: config.watch.fillWaitMs,
    metrics: core.recorders.sync,
  });
  // Plaintext a mail app appends to a zero-access inbox is sealed in place (lib/mail/resealing.ts):
  // a durable job, every unsealed message found by sweeps and at start. A round that replaced
  // messages asks for a sync, so the index drops the originals.
  const resealer = new Resealer({
    directory,
    keys,
    replacer: new ImapMessageReplacer(source.pool, mailIndex),
    jobs: store.resealJobs,
    log: log.child({ part: 'reseal' }),
    holder: live.origin,
    onReplaced: (inbox) => void mirror.nudge(inbox, { background: true }),
    ensureIndexed: async (inbox) => {
      if (!(await mailIndex.isSeeded(inbox.id))) void mirror.nudge(inbox, { background: true });
    },
  });
  listeners.push(resealer.onChanges);
  const mail = new MailService({
    index: mailIndex,
    mirror,
    source,
    announce: mailChanges.expect,
    announceLabels: mailChanges.expectLabels,
  });
  const folders = new MailFolders({
    index: mailIndex,
    mirror,
    mail,
    source,
    folders: new ImapFolders(source.pool),
    announceFolder: mailChanges.expectFolder,
    announceLabels: mailChanges.expectLabels,
    announceMoves: mailChanges.expectMoves,
  });
  const watchAll = new WatchAll({
    mode: config.watch.mode,
    reason: config.watch.reason,
    catalog: directory,
    mirror,
    leases: mailIndex,
    reports: mailIndex,
    origin: live.origin,
    sweepMs: config.watch.sweepMs,
    sweepConcurrency: config.watch.sweepConcurrency,
    catalogPollMs: config.watch.catalogPollMs,
    ...(config.watch.hints ? { hintListen: `${config.watch.hints.host}:${config.watch.hints.port}` } : {}),
    log: log.child({ part: 'watch' }),
    metrics: core.recorders.watch,
  });
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
  // An IMAP user to log in as, looked up only when none is remembered (ImapLoginCheck); picked
  // at random, so a refused one (a user gone from Dovecot) is not the one picked every time.
  const someImapUser = async (not?: string) => {
    const users = (await directory.listInboxes()).map((i) => i.imapUser).filter((u) => u !== not);
    return users.length === 0 ? null : users[Math.floor(Math.random() * users.length)]!;
  };
  const bulk = new MailBulk({
    index: mailIndex,
    mirror,
    source: new ImapBulkSource(source.pool, mailIndex),
    journal: new EventBulkJournal(events),
    announce: mailChanges.expect,
    announceLabels: mailChanges.expectLabels,
  });
  const search = new MailSearch({ index: mailIndex, mirror, source, bounds: config.search });
  const threads = new ThreadReads(mailIndex, mirror, source, log.child({ part: 'threads' }));
  const sealed = new MailOpening({
    mail,
    index: mailIndex,
    bodies: new ImapMessageBodies(source.pool, mailIndex),
    keys,
    messageKeys: store.keys,
  });
  const { access, validator, rate, streamGuard, streamQuota } = core;
  return {
    mail,
    folders,
    bulk,
    search,
    threads,
    sealed,
    routes: [
      inboxRoutes(access),
      labelRoutes(access, mail),
      messageRoutes(access, mail, validator, sealed, rate, { reads: threads, events }),
      folderRoutes(access, folders, validator),
      bulkRoutes(access, bulk, validator),
      searchRoutes(access, search, validator, events, rate, threads),
      threadRoutes(access, threads, validator, events),
      contentRoutes(access, sealed, events, rate),
      inboxEventRoutes(access, mail, config.stream, streamGuard, streamQuota),
    ],
    source,
    mirror,
    live,
    resealer,
    watchAll,
    hintListener,
    imapCheck: new ImapLoginCheck(config.imap, someImapUser, config.http.readyTimeoutMs),
    onChanges: (listener) => void listeners.push(listener),
    start: () => live.start(),
    async watch() {
      await hintListener?.listen();
      await watchAll.start();
      resealer.start();
    },
    async stop() {
      await hintListener?.close();
      await watchAll.close();
      await resealer.close();
      await mirror.close();
      await mailChanges.drain();
    },
  };
}

export interface MailIngress {
  /** The LMTP delivery ingress when POSTERN_LMTP_PORT is set (each cluster worker runs one on the shared port). */
  lmtp: LmtpIngress | null;
  start(): Promise<void>;
  /** Deliveries under way finish (their message.received is recorded) before the log closes. */
  stop(): Promise<void>;
}

/** `reports`: told of a delivery report for a zero-access inbox before it is sealed (the bounce matcher). */
export function mailIngress(core: Core, events: EventLog, reports: SealedInboxHook): MailIngress {
  const { config, log } = core;
  // The ingress's pool of sessions to Dovecot, closed after the ingress on shutdown.
  const dovecotLmtp = new DovecotLmtp(config.ingress.dovecot);
  const lmtp = config.ingress.listen
    ? new LmtpIngress(
        new Ingress({
          directory: core.store.directory,
          keys: core.keys,
          local: dovecotLmtp,
          events,
          log: log.child({ part: 'ingress' }),
          beforeSealed: reports,
          recipientDelimiter: config.ingress.recipientDelimiter,
        }),
        { ...config.ingress.listen, log: log.child({ part: 'lmtp' }) },
      )
    : null;
  return {
    lmtp,
    start: async () => {
      await lmtp?.listen();
    },
    async stop() {
      await lmtp?.close();
      await dovecotLmtp.close();
    },
  };
}
