// PostgreSQL for the contract suite: a fresh database per run on the test environment's cluster
// (or on the server POSTERN_TEST_DATABASE_URL names), migrated as Postern migrates it, dropped after.
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { migratePg, openPgPool } from '../../adapters/store/postgres/db.ts';
import { PgDirectoryStore } from '../../adapters/store/postgres/directory.ts';
import { newId } from '../../lib/ids.ts';

/** The server the suite may create databases on: the override, or the environment test/helpers/setup.ts started. */
export function testDatabaseUrl(): string {
  const override = process.env.POSTERN_TEST_DATABASE_URL;
  if (override) return override;
  const env = JSON.parse(process.env.POSTERN_TEST_ENV ?? '{}') as { postgres?: { url?: string } };
  const url = env.postgres?.url;
  if (!url) throw new Error('no PostgreSQL for the tests: the mail environment has none and POSTERN_TEST_DATABASE_URL is unset');
  return url;
}

export interface FreshDatabase {
  url: string;
  pool: pg.Pool;
  /** A new project, for stores whose rows name one. */
  newProject(): Promise<string>;
  drop(): Promise<void>;
}

/** Runs `fn` on a connection to the server's maintenance database. */
async function onServer<T>(server: string, fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const c = new pg.Client({ connectionString: server });
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
}

/**
 * An empty database of its own on `server` (the tests' by default): its URL, and how to drop it
 * (connections still open are ended).
 */
export async function emptyDatabase(server: string = testDatabaseUrl()): Promise<{ url: string; drop: () => Promise<void> }> {
  const name = `postern_test_${randomBytes(6).toString('hex')}`;
  await onServer(server, (c) => c.query(`CREATE DATABASE ${name}`));
  const url = new URL(server);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    drop: () => onServer(server, (c) => c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)).then(() => undefined),
  };
}

/** An empty database migrated as Postern migrates it, with a pool on it. */
export async function freshDatabase(poolSize = 10): Promise<FreshDatabase> {
  const db = await emptyDatabase();
  const pool = openPgPool(db.url, { max: poolSize });
  await migratePg(pool);
  const directory = new PgDirectoryStore(pool);
  return {
    url: db.url,
    pool,
    async newProject() {
      const id = newId('prj');
      await directory.createProject({ id, name: 'contract test', createdAt: Date.now() });
      return id;
    },
    async drop() {
      await pool.end();
      await db.drop();
    },
  };
}
