// PostgreSQL: every store port on one database (POSTERN_DATABASE_URL), for several machines. Each
// instance opens one pool, shared by its ports; migrations run at open under the advisory lock,
// so instances starting together apply each once.
import { PgChanges } from './changes.ts';
import { migratePg, openPgPool } from './db.ts';
import { PgDirectoryStore } from './directory.ts';
import { PgEventStore } from './events.ts';
import { PgIdentityStore } from './identities.ts';
import { PgKeyBackupStore } from './key-backups.ts';
import { PgKeyHandoverStore } from './key-handovers.ts';
import { PgKeyStore } from './keys.ts';
import { PgMailIndex } from './mail-index.ts';
import { PgOutboxStore } from './outbox.ts';
import { PgPasskeyStore } from './passkeys.ts';
import { PgResealJobs } from './reseal-jobs.ts';
import { PgWebhookStore } from './webhooks.ts';
import type { Store } from '../../../lib/store.ts';

export interface PostgresStoreOptions {
  /** Connections at most, per process (POSTERN_DATABASE_POOL). */
  poolSize?: number;
  /** Shown in pg_stat_activity. */
  applicationName?: string;
  /** A connection lost while idle (the server restarted): the pool has dropped it. */
  onIdleError?: (err: Error) => void;
  /**
   * How long a process keeps a token, a type's versions, a grant, an inbox or an index's seeded
   * state it read (POSTERN_DATABASE_KEEP_MS);
   * any process's change drops them at once (changes.ts). 0: every request reads the database.
   */
  keepMs?: number;
  /**
   * Where the connection that hears changes LISTENs (POSTERN_DATABASE_LISTEN_URL); default the
   * store's URL. A PgBouncer in transaction mode passes no notices: this one goes around it.
   */
  listenUrl?: string | null;
  /**
   * How often a process checks that its listening connection hears notices
   * (POSTERN_DATABASE_HEARTBEAT_MS, default 1000): nothing kept is served unless a check came
   * back within HEARTBEAT_BOUND of them (changes.ts).
   */
  heartbeatMs?: number;
  /** The listening connection became live, or stopped being so (then every read goes to the database). */
  onListenerState?: (live: boolean, why: string) => void;
}

/** The URL with its password masked, for logs and `inbox status`. */
export function redactedUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return 'postgres://(unparsable URL)';
  }
}

/** Connects, migrates, and opens every port on the database at `url`. */
export async function openPostgresStore(url: string, options: PostgresStoreOptions = {}): Promise<Store> {
  const pool = openPgPool(url, {
    max: options.poolSize ?? 10,
    applicationName: options.applicationName ?? 'postern',
    ...(options.onIdleError ? { onIdleError: options.onIdleError } : {}),
  });
  try {
    await migratePg(pool);
  } catch (err) {
    await pool.end().catch(() => undefined);
    throw err;
  }
  let closed = false;
  const keepMs = options.keepMs ?? 0;
  const changes = new PgChanges({
    url: options.listenUrl ?? url,
    pool,
    applicationName: options.applicationName ?? 'postern',
    heartbeatMs: options.heartbeatMs ?? 1000,
    ...(options.onIdleError ? { onError: options.onIdleError } : {}),
    ...(options.onListenerState ? { onState: options.onListenerState } : {}),
  });
  return {
    engine: 'postgres',
    location: redactedUrl(url),
    directory: new PgDirectoryStore(pool, changes, keepMs),
    keys: new PgKeyStore(pool),
    keyBackups: new PgKeyBackupStore(pool),
    keyHandovers: new PgKeyHandoverStore(pool),
    passkeys: new PgPasskeyStore(pool),
    events: new PgEventStore(pool, changes, keepMs),
    mailIndex: new PgMailIndex(pool, changes, keepMs),
    outbox: new PgOutboxStore(pool),
    resealJobs: new PgResealJobs(pool),
    webhooks: new PgWebhookStore(pool),
    identities: new PgIdentityStore(pool),
    keptReadsServed: () => (keepMs > 0 ? changes.live : null),
    async health() {
      await pool.query('SELECT 1');
    },
    // The server vacuums and checkpoints on its own.
    startUpkeep() {},
    async close() {
      if (closed) return;
      closed = true;
      await changes.close();
      await pool.end();
    },
  };
}
