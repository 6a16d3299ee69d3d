// A SQLite store to and from the portable export file (../rows/dump.ts): `postern admin export`
// and `import`. The export reads every table in one read transaction, a snapshot even while
// `postern serve` writes (WAL readers never block the writer); the import writes everything in
// one IMMEDIATE transaction, so a refused or broken file leaves the store as it was.
import { existsSync } from 'node:fs';
import type { Statement } from 'better-sqlite3';
import { DUMP_TABLES, DumpError, DumpWriter, readDump, type DumpCounts, type DumpTable } from '../rows/dump.ts';
import { openDb, type Db } from './db.ts';

/** The highest schema version applied, for the export's header. */
function schemaVersion(db: Db): number {
  return (db.prepare('SELECT max(version) AS v FROM schema_migrations').get() as { v: number | null }).v ?? 0;
}

function openExisting(file: string): Db {
  // openDb would make a new, empty store at a mistyped path; an export of that helps nobody.
  if (!existsSync(file)) throw new DumpError(`no SQLite store at ${file} (POSTERN_DB)`, true);
  return openDb(file);
}

/** Writes every carried table of the store at `file` to a new export file `to`. */
export function dumpSqlite(file: string, to: string): { rows: DumpCounts; bytes: number } {
  const db = openExisting(file);
  let out: DumpWriter | null = null;
  try {
    // One read transaction: every SELECT below sees the same snapshot of the store.
    db.exec('BEGIN');
    out = new DumpWriter(to, { engine: 'sqlite', schema: schemaVersion(db) });
    for (const table of DUMP_TABLES) {
      out.table(table);
      const select = db.prepare(`SELECT ${Object.keys(table.columns).join(', ')} FROM ${table.name} ORDER BY ${table.order}`);
      for (const row of select.iterate() as IterableIterator<Record<string, unknown>>) out.row(table, row);
    }
    db.exec('COMMIT');
    return out.finish();
  } catch (err) {
    out?.abandon();
    throw err;
  } finally {
    db.close();
  }
}

/** Tables of `db` among those an import writes that hold a row (the log's own row aside). */
function nonEmpty(db: Db): string[] {
  return DUMP_TABLES.filter((t) => t.name !== 'event_log' && db.prepare(`SELECT 1 FROM ${t.name} LIMIT 1`).get() !== undefined).map(
    (t) => t.name,
  );
}

/**
 * Fills the store at `file` (made and migrated if it is not there) from the export file `from`.
 * Refused unless the store is empty: an import never merges into a store in use.
 */
export async function loadSqlite(file: string, from: string): Promise<DumpCounts> {
  const db = openDb(file);
  const inserts = new Map<string, Statement>();
  const insert = (table: DumpTable): Statement => {
    let s = inserts.get(table.name);
    if (!s) {
      const columns = Object.keys(table.columns);
      s =
        table.name === 'event_log'
          ? db.prepare('UPDATE event_log SET id = @id, cursor_secret = @cursor_secret')
          : db.prepare(`INSERT INTO ${table.name} (${columns.join(', ')}) VALUES (${columns.map((c) => `@${c}`).join(', ')})`);
      inserts.set(table.name, s);
    }
    return s;
  };
  try {
    // The write lock for the whole import: no other process writes between the check and the end.
    db.exec('BEGIN IMMEDIATE');
    try {
      const taken = nonEmpty(db);
      if (taken.length > 0)
        throw new DumpError(
          `the store at ${file} is not empty (${taken.slice(0, 3).join(', ')}${taken.length > 3 ? ', …' : ''}): import into a new one`,
        );
      let rows: DumpCounts = {};
      for await (const item of readDump(from)) {
        if (item.kind === 'end') {
          rows = item.rows;
          continue;
        }
        const params: Record<string, unknown> = {};
        // better-sqlite3 binds no booleans: SQLite's flags are 0/1.
        for (const [k, v] of Object.entries(item.row)) params[k] = typeof v === 'boolean' ? Number(v) : v;
        try {
          insert(item.table).run(params);
        } catch (err) {
          throw new DumpError(`${item.table.name}: ${(err as Error).message}`);
        }
      }
      db.exec('COMMIT');
      return rows;
    } catch (err) {
      if (db.inTransaction) db.exec('ROLLBACK');
      throw err;
    }
  } finally {
    db.close();
  }
}
