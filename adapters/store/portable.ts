// The store as a file, for staff commands (docs/deployment.md, "Backup and restore" and "From one
// machine to several"): a backup of a SQLite store, and an export and import that move a store
// from one engine to the other. The engine is chosen as open.ts chooses it; each engine's part is
// in its own folder, and a SQLite deployment never loads the pg driver.
import { dumpHeader, DumpError, type DumpCounts } from './rows/dump.ts';
import type { StoreSettings } from './open.ts';

export { DumpError } from './rows/dump.ts';

export type EngineName = 'sqlite' | 'postgresql';

/** A consistent copy of the SQLite store at POSTERN_DB in `to`; PostgreSQL is backed up with its own tools. */
export async function backupStore(settings: StoreSettings, to: string): Promise<{ store: 'sqlite'; file: string; bytes: number }> {
  if (settings.databaseUrl !== null) {
    throw new DumpError(
      'the store is on PostgreSQL (POSTERN_DATABASE_URL): back it up with pg_dump --format=custom and restore with pg_restore ' +
        '(docs/deployment.md, "Backup and restore"); postern admin backup copies a SQLite store (POSTERN_DB)',
      true,
    );
  }
  const { backupSqlite } = await import('./sqlite/backup.ts');
  const { bytes } = await backupSqlite(settings.dbFile, to);
  return { store: 'sqlite', file: to, bytes };
}

/** Writes the configured store to a new export file `to`. */
export async function exportStore(
  settings: StoreSettings,
  to: string,
): Promise<{ store: EngineName; file: string; bytes: number; rows: DumpCounts }> {
  if (settings.databaseUrl === null) {
    const { dumpSqlite } = await import('./sqlite/dump.ts');
    return { store: 'sqlite', file: to, ...dumpSqlite(settings.dbFile, to) };
  }
  const { dumpPostgres } = await import('./postgres/dump.ts');
  return { store: 'postgresql', file: to, ...(await dumpPostgres(settings.databaseUrl, to)) };
}

/** Fills the configured store, which must be empty, from the export file `from`. */
export async function importStore(settings: StoreSettings, from: string): Promise<{ store: EngineName; file: string; rows: DumpCounts }> {
  // Before the store is opened (and, on SQLite, made): a wrong path changes nothing.
  dumpHeader(from);
  if (settings.databaseUrl === null) {
    const { loadSqlite } = await import('./sqlite/dump.ts');
    return { store: 'sqlite', file: from, rows: await loadSqlite(settings.dbFile, from) };
  }
  const { loadPostgres } = await import('./postgres/dump.ts');
  return { store: 'postgresql', file: from, rows: await loadPostgres(settings.databaseUrl, from) };
}
