// Opens the SQLite file with the settings Postern relies on and brings its schema up to date.
import Database from 'better-sqlite3';
import { markedWords } from '../../../lib/mail/search-words.ts';
import { migrations, type Migration } from './migrations/index.ts';

export type Db = Database.Database;

/** How long a write waits for another process's write lock before SQLite gives up (SQLITE_BUSY). */
export const BUSY_TIMEOUT_MS = 5000;

export const isBusy = (err: unknown): boolean =>
  typeof (err as { code?: unknown })?.code === 'string' && (err as { code: string }).code.startsWith('SQLITE_BUSY');

/** A write refused for a primary key or UNIQUE column already taken: the store's DuplicateError. */
export function isUniqueViolation(err: unknown): boolean {
  const code = err instanceof Error ? (err as Error & { code?: string }).code : undefined;
  return code === 'SQLITE_CONSTRAINT_PRIMARYKEY' || code === 'SQLITE_CONSTRAINT_UNIQUE';
}

/** What a statement's `get` returned (undefined: no row), mapped to the record; null for none. */
export function rowOrNull<R, T>(row: unknown, map: (row: R) => T): T | null {
  return row === undefined ? null : map(row as R);
}

/**
 * Runs `fn` with SQLite's busy wait off: a write that meets another process's lock fails at once
 * with SQLITE_BUSY, so the caller can wait on the event loop rather than sleep in SQLite's busy
 * handler with the whole process stopped. Every other write keeps the busy timeout.
 */
const RESTORE_BUSY_TIMEOUT = `PRAGMA busy_timeout = ${BUSY_TIMEOUT_MS}`;

export function withoutBusyWait<T>(db: Db, fn: () => T): T {
  // exec, not statements prepared once: a prepared `PRAGMA busy_timeout = …` did not take
  // effect on its first run after another was prepared (better-sqlite3 12.11, SQLite 3.53).
  // Nor db.pragma, which costs five times as much (it reads back a result).
  db.exec('PRAGMA busy_timeout = 0');
  try {
    return fn();
  } finally {
    db.exec(RESTORE_BUSY_TIMEOUT);
  }
}

export function openDb(file: string, list: Migration[] = migrations): Db {
  const db = new Database(file);
  // WAL lets readers proceed while the single writer appends; NORMAL is durable across
  // application crashes, which is what WAL mode needs.
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = NORMAL');
  db.pragma('foreign_keys = ON');
  // Several Postern processes may share one file: wait for the writer instead of failing.
  db.pragma(`busy_timeout = ${BUSY_TIMEOUT_MS}`);
  // The text index's words, as its triggers write them (migration 029).
  db.function('postern_search_words', { deterministic: true }, (inboxId: unknown, text: unknown) =>
    typeof inboxId === 'string' && typeof text === 'string' ? markedWords(inboxId, text).join(' ') : null,
  );
  migrate(db, list);
  return db;
}

function migrate(db: Db, list: Migration[]): void {
  db.exec(`CREATE TABLE IF NOT EXISTS schema_migrations (
    version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)`);
  // IMMEDIATE takes the write lock first, so two processes starting together migrate once.
  const apply = db.transaction(() => {
    const done = new Set(db.prepare('SELECT version FROM schema_migrations').pluck().all() as number[]);
    for (const m of list) {
      if (done.has(m.version)) continue;
      db.exec(m.sql);
      db.prepare('INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)').run(m.version, m.name, Date.now());
    }
  });
  apply.immediate();
}
