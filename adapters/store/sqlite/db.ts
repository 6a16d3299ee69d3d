// Opens the SQLite file with the settings Postern relies on and brings its schema up to date.
import Database from 'better-sqlite3';
import { migrations, type Migration } from './migrations/index.ts';

export type Db = Database.Database;

export function openDb(file: string, list: Migration[] = migrations): Db {
  const db = new Database(file);
  // WAL lets readers proceed while the single writer appends; NORMAL is durable across
  // application crashes, which is what WAL mode needs.
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = NORMAL');
  db.pragma('foreign_keys = ON');
  // Several Postern processes may share one file: wait for the writer instead of failing.
  db.pragma('busy_timeout = 5000');
  migrate(db, list);
  return db;
}

function migrate(db: Db, list: Migration[]): void {
  db.exec(`CREATE TABLE IF NOT EXISTS schema_migrations (
    version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)`);
  // IMMEDIATE takes the write lock first, so two processes starting together migrate once.
  const apply = db.transaction(() => {
    const done = new Set(
      db.prepare('SELECT version FROM schema_migrations').pluck().all() as number[],
    );
    for (const m of list) {
      if (done.has(m.version)) continue;
      db.exec(m.sql);
      db.prepare('INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)').run(
        m.version,
        m.name,
        Date.now(),
      );
    }
  });
  apply.immediate();
}
