// The PostgreSQL store's connection pool and its schema migrations (docs/deployment.md): plain numbered SQL
// files in ./migrations, applied in order under an advisory lock, so several Postern instances
// starting at once against one database apply each migration exactly once.
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { ROOT } from '../../../lib/paths.ts';

/**
 * Read from the sources at run time, from tsx and from dist/ alike (as schemas/ is): the build
 * compiles TypeScript only, and ROOT is the checkout either way.
 */
export const PG_MIGRATIONS_DIR = join(ROOT, 'adapters', 'store', 'postgres', 'migrations');

export interface PgPoolOptions {
  /** Connections at most (default 10): each is a server process, shared by every worker of an instance. */
  max?: number;
  /** Any statement running longer is cancelled by the server (default 30 s; 0: none). */
  statementTimeoutMs?: number;
  /** Shown in pg_stat_activity (default "postern"). */
  applicationName?: string;
  /** An idle connection that failed (the server restarted): the pool drops it; told here. */
  onIdleError?: (err: Error) => void;
}

const INT8_OID = 20;

/**
 * BIGINT columns (millisecond times, positions, UIDs, MODSEQs) come back as numbers rather than
 * pg's default strings; a value past 2^53 would lose digits, so it fails loudly instead.
 */
const types = {
  getTypeParser(oid: number, format?: 'text' | 'binary') {
    if (oid === INT8_OID && format !== 'binary') {
      return (value: string): number => {
        const n = Number(value);
        if (!Number.isSafeInteger(n)) throw new RangeError(`BIGINT ${value} is beyond JavaScript's safe integers`);
        return n;
      };
    }
    return pg.types.getTypeParser(oid, format ?? 'text');
  },
};

export function openPgPool(url: string, opts: PgPoolOptions = {}): pg.Pool {
  const pool = new pg.Pool({
    connectionString: url,
    max: opts.max ?? 10,
    statement_timeout: opts.statementTimeoutMs ?? 30_000,
    application_name: opts.applicationName ?? 'postern',
    connectionTimeoutMillis: 10_000,
    idleTimeoutMillis: 30_000,
    types,
  });
  // Without a listener an idle connection's error (a server restart) would crash the process;
  // the pool has already dropped the connection, and the next query opens another.
  pool.on('error', (err) => opts.onIdleError?.(err));
  return pool;
}

export interface PgMigration {
  version: number;
  name: string;
  sql: string;
}

const FILE_NAME = /^(\d{3})_([a-z0-9_]+)\.sql$/;

/** The migrations in `dir` (NNN_name.sql), in version order. */
export function readPgMigrations(dir: string = PG_MIGRATIONS_DIR): PgMigration[] {
  const list: PgMigration[] = [];
  for (const file of readdirSync(dir)) {
    const m = FILE_NAME.exec(file);
    if (!m) {
      if (file.endsWith('.sql')) throw new Error(`${join(dir, file)}: a migration is named NNN_name.sql`);
      continue;
    }
    list.push({ version: Number(m[1]), name: m[2]!, sql: readFileSync(join(dir, file), 'utf8') });
  }
  list.sort((a, b) => a.version - b.version);
  for (let i = 1; i < list.length; i++) {
    if (list[i]!.version === list[i - 1]!.version) throw new Error(`two PostgreSQL migrations numbered ${list[i]!.version} in ${dir}`);
  }
  return list;
}

/** The advisory lock every migrator of a database takes (any constant, the same everywhere). */
const MIGRATION_LOCK = '7342914530152170017';

export interface MigrateResult {
  /** What this call applied, in order (empty: the schema was up to date). */
  applied: { version: number; name: string }[];
  /** The highest version now applied. */
  version: number;
}

/**
 * Brings the schema up to date: every migration not yet in schema_migrations, in version order,
 * each in its own transaction with its row in schema_migrations. A session advisory lock is held
 * for the whole run, so a second instance waits and then finds nothing left to do. Like SQLite's
 * runner, a version below the highest applied one that is missing (a file added later with a
 * lower number) is applied too: numbers are never reused, so it is new.
 */
export async function migratePg(pool: pg.Pool, list: PgMigration[] = readPgMigrations()): Promise<MigrateResult> {
  const client = await pool.connect();
  let broken: Error | undefined;
  try {
    // Waiting for another migrator, or a long migration, is not a statement to cancel.
    await client.query('SET statement_timeout = 0');
    await client.query('SELECT pg_advisory_lock($1::bigint)', [MIGRATION_LOCK]);
    await client.query(`CREATE TABLE IF NOT EXISTS schema_migrations (
      version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL)`);
    const done = new Set((await client.query<{ version: number }>('SELECT version FROM schema_migrations')).rows.map((r) => r.version));
    const applied: MigrateResult['applied'] = [];
    for (const m of list) {
      if (done.has(m.version)) continue;
      await client.query('BEGIN');
      try {
        // Several statements in one simple query: the file as written.
        await client.query(m.sql);
        await client.query('INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)', [
          m.version,
          m.name,
          Date.now(),
        ]);
        await client.query('COMMIT');
      } catch (e) {
        await client.query('ROLLBACK').catch(() => undefined);
        throw new Error(`PostgreSQL migration ${String(m.version).padStart(3, '0')}_${m.name}.sql failed: ${(e as Error).message}`, {
          cause: e,
        });
      }
      applied.push({ version: m.version, name: m.name });
    }
    const top = await client.query<{ v: number | null }>('SELECT max(version) AS v FROM schema_migrations');
    await client.query('SELECT pg_advisory_unlock($1::bigint)', [MIGRATION_LOCK]);
    return { applied, version: top.rows[0]?.v ?? 0 };
  } catch (e) {
    broken = e as Error;
    throw e;
  } finally {
    // Never back into the pool: its session settings changed, and after a failure it may still
    // hold the lock (closing the connection is what releases it then).
    client.release(broken ?? true);
  }
}
