// The ResealJobs contract on every engine: SQLite (a temporary file; each process its own
// connection) and PostgreSQL (a fresh database on the test environment's cluster).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openDb, type Db } from '../../adapters/store/sqlite/db.ts';
import { SqliteMailIndex } from '../../adapters/store/sqlite/mail-index.ts';
import { SqliteResealJobs } from '../../adapters/store/sqlite/reseal-jobs.ts';
import { PgMailIndex } from '../../adapters/store/postgres/mail-index.ts';
import { PgResealJobs } from '../../adapters/store/postgres/reseal-jobs.ts';
import { resealJobsContract } from './reseal-jobs.contract.ts';
import { freshDatabase } from './postgres.ts';

resealJobsContract('SQLite', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'postern-contract-'));
  const file = join(dir, 'postern.db');
  const dbs: Db[] = [openDb(file)];
  return {
    index: new SqliteMailIndex(dbs[0]!),
    newJobs: () => {
      const db = openDb(file);
      dbs.push(db);
      return new SqliteResealJobs(db);
    },
    close: async () => {
      for (const db of dbs) db.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
});

resealJobsContract('PostgreSQL', async () => {
  const fresh = await freshDatabase(20);
  return { index: new PgMailIndex(fresh.pool), newJobs: () => new PgResealJobs(fresh.pool), close: () => fresh.drop() };
});
