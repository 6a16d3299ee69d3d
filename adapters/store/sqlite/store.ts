// The embedded engine: every store port on one SQLite file (POSTERN_DB), for one machine. Several
// processes may share the file (POSTERN_WORKERS, or instances on one host).
import { openDb } from './db.ts';
import { WalCheckpointer } from './checkpointer.ts';
import { SqliteDirectoryStore } from './directory.ts';
import { SqliteEventStore } from './events.ts';
import { SqliteIdentityStore } from './identities.ts';
import { SqliteKeyBackupStore } from './key-backups.ts';
import { SqliteKeyHandoverStore } from './key-handovers.ts';
import { SqliteKeyStore } from './keys.ts';
import { SqliteMailIndex } from './mail-index.ts';
import { SqliteOutboxStore } from './outbox.ts';
import { SqlitePasskeyStore } from './passkeys.ts';
import { SqliteResealJobs } from './reseal-jobs.ts';
import { SearchWorkers } from './search-workers.ts';
import { SqliteWebhookStore } from './webhooks.ts';
import type { Store } from '../../../lib/store.ts';

/** Opens (creating and migrating as needed) the SQLite store at `file`. */
export function openSqliteStore(file: string): Store {
  const db = openDb(file);
  const ping = db.prepare('SELECT 1');
  // Searches run in worker threads with their own connections to the file; an in-memory
  // database has no file another connection could open, so its searches run here.
  const searchWorkers = file === ':memory:' || file === '' ? undefined : new SearchWorkers(file);
  let checkpointer: WalCheckpointer | null = null;
  let closed = false;
  return {
    engine: 'sqlite',
    location: file,
    directory: new SqliteDirectoryStore(db),
    keys: new SqliteKeyStore(db),
    keyBackups: new SqliteKeyBackupStore(db),
    keyHandovers: new SqliteKeyHandoverStore(db),
    passkeys: new SqlitePasskeyStore(db),
    events: new SqliteEventStore(db),
    mailIndex: new SqliteMailIndex(db, searchWorkers),
    outbox: new SqliteOutboxStore(db),
    resealJobs: new SqliteResealJobs(db),
    webhooks: new SqliteWebhookStore(db),
    identities: new SqliteIdentityStore(db),
    // Every read is the file's.
    keptReadsServed: () => null,
    async health() {
      ping.get();
    },
    startUpkeep(onError) {
      // A serving process checkpoints the WAL from a worker thread, never inside a request's commit.
      if (checkpointer || closed || db.pragma('journal_mode', { simple: true }) !== 'wal') return;
      checkpointer = new WalCheckpointer(db, file, { onError });
    },
    async close() {
      if (closed) return;
      closed = true;
      await Promise.all([checkpointer?.stop(), searchWorkers?.close()]);
      db.close();
    },
  };
}
