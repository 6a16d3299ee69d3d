// Deleting projects and members on every engine: a whole SQLite store (a temporary file, as
// Postern opens it) and a whole PostgreSQL store (a fresh database on the test environment's cluster).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import pg from 'pg';
import { openPostgresStore } from '../../adapters/store/postgres/store.ts';
import { openSqliteStore } from '../../adapters/store/sqlite/store.ts';
import { eraseContract, type EraseEngine } from './erase.contract.ts';
import { emptyDatabase } from './postgres.ts';

async function sqlite(): Promise<EraseEngine> {
  const dir = mkdtempSync(join(tmpdir(), 'postern-erase-'));
  const file = join(dir, 'postern.db');
  const store = openSqliteStore(file);
  // A second connection, for looking: the store's own is inside its adapters.
  const look = new Database(file, { readonly: true });
  return {
    store,
    count: async (table, column, values) =>
      look
        .prepare(`SELECT count(*) FROM ${table} WHERE ${column} IN (${values.map(() => '?').join(', ')})`)
        .pluck()
        .get(...values) as number,
    close: async () => {
      look.close();
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

async function postgres(): Promise<EraseEngine> {
  const db = await emptyDatabase();
  const store = await openPostgresStore(db.url);
  const look = new pg.Pool({ connectionString: db.url, max: 1 });
  return {
    store,
    count: async (table, column, values) =>
      Number(
        (await look.query<{ n: string }>(`SELECT count(*) AS n FROM ${table} WHERE ${column} = ANY($1::text[])`, [values])).rows[0]!.n,
      ),
    close: async () => {
      await look.end();
      await store.close();
      await db.drop();
    },
  };
}

eraseContract('SQLite', sqlite);
eraseContract('PostgreSQL', postgres);
