// The identities store contract on every engine: SQLite (a temporary file, as Postern opens it)
// and PostgreSQL (a fresh database on the test environment's cluster).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openDb } from '../../adapters/store/sqlite/db.ts';
import { SqliteDirectoryStore } from '../../adapters/store/sqlite/directory.ts';
import { SqliteIdentityStore } from '../../adapters/store/sqlite/identities.ts';
import { PgDirectoryStore } from '../../adapters/store/postgres/directory.ts';
import { PgIdentityStore } from '../../adapters/store/postgres/identities.ts';
import { identitiesContract, type IdentityEngine } from './identities.contract.ts';
import { freshDatabase } from './postgres.ts';

identitiesContract('SQLite', async (): Promise<IdentityEngine> => {
  const dir = mkdtempSync(join(tmpdir(), 'postern-contract-'));
  const db = openDb(join(dir, 'postern.db'));
  return {
    directory: new SqliteDirectoryStore(db),
    identities: new SqliteIdentityStore(db),
    close: async () => {
      db.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
});

identitiesContract('PostgreSQL', async (): Promise<IdentityEngine> => {
  const fresh = await freshDatabase();
  return { directory: new PgDirectoryStore(fresh.pool), identities: new PgIdentityStore(fresh.pool), close: () => fresh.drop() };
});
