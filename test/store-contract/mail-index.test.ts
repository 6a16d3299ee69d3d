// The mail index contract, and its search's, on every engine: SQLite (a temporary file; each
// index its own connection, as each process has) and PostgreSQL (a fresh database on the test
// environment's cluster).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openDb, type Db } from '../../adapters/store/sqlite/db.ts';
import { SqliteMailIndex } from '../../adapters/store/sqlite/mail-index.ts';
import { PgMailIndex } from '../../adapters/store/postgres/mail-index.ts';
import { mailIndexContract, type MailIndexEngine } from './mail-index.contract.ts';
import { mailSearchContract } from './mail-search.contract.ts';
import { freshDatabase } from './postgres.ts';
import { mailThreadsContract, type MailThreadsEngine } from './mail-threads.contract.ts';

async function sqlite(): Promise<MailIndexEngine> {
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
}

async function postgres(): Promise<MailIndexEngine> {
  const fresh = await freshDatabase(20);
  return { newIndex: () => new PgMailIndex(fresh.pool), close: () => fresh.drop() };
}

mailIndexContract('SQLite', sqlite);
mailIndexContract('PostgreSQL', postgres);
mailSearchContract('SQLite', sqlite);
mailSearchContract('PostgreSQL', postgres);

// Threads: the engine's own connection makes rows look indexed before threads (migration 031 / 015).
const UNTHREAD = ['UPDATE mail_messages SET thread_guid = NULL WHERE inbox_id = $1', 'DELETE FROM mail_thread_links WHERE inbox_id = $1'];

async function sqliteThreads(): Promise<MailThreadsEngine> {
  const dir = mkdtempSync(join(tmpdir(), 'postern-contract-'));
  const file = join(dir, 'postern.db');
  const dbs: Db[] = [];
  const connect = () => {
    const db = openDb(file);
    dbs.push(db);
    return db;
  };
  return {
    newIndex: () => new SqliteMailIndex(connect()),
    unthread: async (inboxId) => {
      const db = connect();
      for (const sql of UNTHREAD) db.prepare(sql.replace('$1', '?')).run(inboxId);
    },
    close: async () => {
      for (const db of dbs) db.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

async function postgresThreads(): Promise<MailThreadsEngine> {
  const fresh = await freshDatabase(20);
  return {
    newIndex: () => new PgMailIndex(fresh.pool),
    unthread: async (inboxId) => {
      for (const sql of UNTHREAD) await fresh.pool.query(sql, [inboxId]);
    },
    close: () => fresh.drop(),
  };
}

mailThreadsContract('SQLite', sqliteThreads);
mailThreadsContract('PostgreSQL', postgresThreads);
