// PostgreSQL for the contract suite: a fresh database per run on the test environment's cluster
// (or on the server POSTERN_TEST_DATABASE_URL names), migrated as Postern migrates it, dropped after.
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { migratePg, openPgPool } from '../../adapters/store/postgres/db.ts';
import { PgDirectoryStore } from '../../adapters/store/postgres/directory.ts';
import { newId } from '../../lib/ids.ts';

/** The server the suite may create databases on: the override, or the environment test/setup.ts started. */
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

export async function freshDatabase(poolSize = 10): Promise<FreshDatabase> {
  const server = testDatabaseUrl();
  const name = `postern_test_${randomBytes(6).toString('hex')}`;
  const admin = new pg.Client({ connectionString: server });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE ${name}`);
  } finally {
    await admin.end();
  }
  const url = new URL(server);
  url.pathname = `/${name}`;
  const pool = openPgPool(url.toString(), { max: poolSize });
  await migratePg(pool);
  const directory = new PgDirectoryStore(pool);
  return {
    url: url.toString(),
    pool,
    async newProject() {
      const id = newId('prj');
      await directory.createProject({ id, name: 'contract test', createdAt: Date.now() });
      return id;
    },
    async drop() {
      await pool.end();
      const c = new pg.Client({ connectionString: server });
      await c.connect();
      try {
        await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      } finally {
        await c.end();
      }
    },
  };
}
