// The mail index contract on every engine: SQLite (a temporary file; each index its own
// connection, as each process has) and PostgreSQL (a fresh database on the test environment's cluster).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openDb, type Db } from '../../adapters/store/sqlite/db.ts';
import { SqliteMailIndex } from '../../adapters/store/sqlite/mail-index.ts';
import { PgMailIndex } from '../../adapters/store/postgres/mail-index.ts';
import { mailIndexContract } from './mail-index.contract.ts';
import { freshDatabase } from './postgres.ts';

mailIndexContract('SQLite', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'postern-contract-'));
  const file = join(dir, 'postern.db');
  const dbs: Db[] = [];
  return {
    newIndex: () => {
      const db = openDb(file);
      dbs.push(db);
      return new SqliteMailIndex(db);
    },
    close: async () => {
      for (const db of dbs) db.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
});

mailIndexContract('PostgreSQL', async () => {
  const fresh = await freshDatabase(20);
  return { newIndex: () => new PgMailIndex(fresh.pool), close: () => fresh.drop() };
});
