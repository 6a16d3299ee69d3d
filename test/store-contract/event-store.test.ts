// The EventStore contract on every engine: SQLite (a temporary file, as Postern opens it) and
// PostgreSQL (a fresh database on the test environment's cluster).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openDb } from '../../adapters/store/sqlite/db.ts';
import { SqliteEventStore } from '../../adapters/store/sqlite/events.ts';
import { PgEventStore } from '../../adapters/store/postgres/events.ts';
import { minimalDomain, sqlitePorts } from '../helpers/minimal-domain.ts';
import { eventStoreContract } from './event-store.contract.ts';
import { freshDatabase } from './postgres.ts';

eventStoreContract('SQLite', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'postern-contract-'));
  const db = openDb(join(dir, 'postern.db'));
  const { admin } = minimalDomain(sqlitePorts(db));
  return {
    store: new SqliteEventStore(db),
    newProject: async () => (await admin.createProject('contract test')).id,
    rewrite: async (eventId) => {
      db.prepare("UPDATE events SET type = 'ext.test.changed' WHERE event_id = ?").run(eventId);
    },
    close: async () => {
      db.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
});

eventStoreContract('PostgreSQL', async () => {
  const fresh = await freshDatabase();
  return {
    store: new PgEventStore(fresh.pool),
    newProject: () => fresh.newProject(),
    rewrite: async (eventId) => {
      await fresh.pool.query("UPDATE events SET type = 'ext.test.changed' WHERE event_id = $1", [eventId]);
    },
    close: () => fresh.drop(),
  };
});
