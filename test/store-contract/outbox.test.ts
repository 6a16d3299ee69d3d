// The OutboxStore contract on every engine: SQLite (a temporary file; each store its own
// connection, as each process has) and PostgreSQL (a fresh database on the test environment's
// cluster). The SQL here only plays what the contract cannot: a process that died, rows older than owners.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openDb, type Db } from '../../adapters/store/sqlite/db.ts';
import { SqliteOutboxStore } from '../../adapters/store/sqlite/outbox.ts';
import { PgOutboxStore } from '../../adapters/store/postgres/outbox.ts';
import { outboxContract } from './outbox.contract.ts';
import { freshDatabase } from './postgres.ts';

/** No process runs with this pid (pid_max is at most 2^22). */
const NO_PID = 2147483646;

outboxContract('SQLite', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'postern-contract-'));
  const file = join(dir, 'postern.db');
  const dbs: Db[] = [openDb(file)];
  const admin = dbs[0]!;
  return {
    newStore: () => {
      const db = openDb(file);
      dbs.push(db);
      return new SqliteOutboxStore(db);
    },
    killOwnerOf: async (id) => {
      admin.prepare('UPDATE mail_outbox_owners SET pid = ? WHERE id = (SELECT owner FROM mail_outbox WHERE id = ?)').run(NO_PID, id);
    },
    unown: async (id) => {
      admin.prepare('UPDATE mail_outbox SET owner = NULL WHERE id = ?').run(id);
    },
    close: async () => {
      for (const db of dbs) db.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
});

outboxContract('PostgreSQL', async () => {
  const fresh = await freshDatabase(20);
  return {
    newStore: () => new PgOutboxStore(fresh.pool),
    killOwnerOf: async (id) => {
      await fresh.pool.query('UPDATE mail_outbox_owners SET pid = $1 WHERE id = (SELECT owner FROM mail_outbox WHERE id = $2)', [
        NO_PID,
        id,
      ]);
    },
    unown: async (id) => {
      await fresh.pool.query('UPDATE mail_outbox SET owner = NULL WHERE id = $1', [id]);
    },
    close: () => fresh.drop(),
  };
});
