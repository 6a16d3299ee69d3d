// The WebhookStore contract on every engine: SQLite (a temporary file; each process its own
// connection) and PostgreSQL (a fresh database on the test environment's cluster).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openDb, type Db } from '../../adapters/store/sqlite/db.ts';
import { SqliteWebhookStore } from '../../adapters/store/sqlite/webhooks.ts';
import { PgWebhookStore } from '../../adapters/store/postgres/webhooks.ts';
import { webhooksContract } from './webhooks.contract.ts';
import { freshDatabase } from './postgres.ts';

webhooksContract('SQLite', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'postern-contract-'));
  const file = join(dir, 'postern.db');
  const dbs: Db[] = [];
  return {
    newStore: () => {
      const db = openDb(file);
      dbs.push(db);
      return new SqliteWebhookStore(db);
    },
    close: async () => {
      for (const db of dbs) db.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
});

webhooksContract('PostgreSQL', async () => {
  const fresh = await freshDatabase();
  return { newStore: () => new PgWebhookStore(fresh.pool), close: () => fresh.drop() };
});
