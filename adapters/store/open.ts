// Chooses the store's engine from the configuration: PostgreSQL when POSTERN_DATABASE_URL is set,
// SQLite at POSTERN_DB otherwise. The one place serve, the staff commands and the tests open it.
import type { Store } from '../../lib/store.ts';
import { openSqliteStore } from './sqlite/store.ts';

export interface StoreSettings {
  dbFile: string;
  databaseUrl: string | null;
  databasePoolSize: number;
  /** PostgreSQL only: how long a process keeps tokens and event types it read (0: not at all). */
  databaseKeepMs?: number;
  /** PostgreSQL only: where the connection hearing changes LISTENs (null: databaseUrl). */
  databaseListenUrl?: string | null;
  /** PostgreSQL only: how often a process checks that connection hears (changes.ts). */
  databaseHeartbeatMs?: number;
}

export interface OpenStoreOptions {
  applicationName?: string;
  onIdleError?: (err: Error) => void;
  /** PostgreSQL: the connection hearing changes became live, or stopped being so. */
  onListenerState?: (live: boolean, why: string) => void;
}

export async function openStore(settings: StoreSettings, options: OpenStoreOptions = {}): Promise<Store> {
  if (settings.databaseUrl === null) return openSqliteStore(settings.dbFile);
  // Loaded only when used: a SQLite deployment never loads the pg driver.
  const { openPostgresStore } = await import('./postgres/store.ts');
  return openPostgresStore(settings.databaseUrl, {
    poolSize: settings.databasePoolSize,
    keepMs: settings.databaseKeepMs ?? 0,
    listenUrl: settings.databaseListenUrl ?? null,
    ...(settings.databaseHeartbeatMs ? { heartbeatMs: settings.databaseHeartbeatMs } : {}),
    ...options,
  });
}
