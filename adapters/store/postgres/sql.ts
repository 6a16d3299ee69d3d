// What every PostgreSQL adapter shares: named statements, a transaction on one pooled connection,
// and the error code of a unique constraint refusing a write.
import type { Pool, PoolClient, QueryConfig, QueryResultRow } from 'pg';

export type Statement = (values: unknown[]) => QueryConfig<unknown[]>;

/**
 * Named statements of one adapter: each is prepared once per connection by `pg`, on its first use
 * there. The prefix keeps names unique across adapters sharing a pool (a name reused with another
 * text fails on a connection that prepared the first).
 */
export const statements =
  (prefix: string) =>
  (name: string, text: string): Statement =>
  (values) => ({ name: `${prefix}.${name}`, text, values });

const NEEDS_ESCAPE = /["\\]/;

/**
 * `values` as a PostgreSQL array literal, bound to a `$n::text[]` or `$n::bigint[]` parameter.
 * pg converts a JS array itself with two regular expressions and a conversion per element; a
 * webhook flush binds ten arrays of its outcomes and an enqueue three of hundreds, and that was a
 * visible share of a delivery's CPU. Each text element is quoted, as pg quotes it.
 */
export function arrayLiteral(values: readonly (string | number | null)[]): string {
  let out = '{';
  for (let i = 0; i < values.length; i++) {
    const v = values[i] ?? null;
    if (i > 0) out += ',';
    if (v === null) out += 'NULL';
    else if (typeof v === 'number') out += String(v);
    else out += NEEDS_ESCAPE.test(v) ? `"${v.replace(/[\\"]/g, '\\$&')}"` : `"${v}"`;
  }
  return `${out}}`;
}

/**
 * A statement sent unnamed: PostgreSQL plans it at each execution, for the table as it is then.
 * For a statement over a table that swings between empty and large (webhook_deliveries), where a
 * named one's cached generic plan, made while the table looked empty, scans it whole once it is not.
 */
export const replanned =
  (text: string): Statement =>
  (values) => ({ text, values });

/** A pool or, inside `inTransaction`, its connection. */
export type Queryable = Pool | PoolClient;

export async function rowsOf<R extends QueryResultRow>(on: Queryable, q: QueryConfig<unknown[]>): Promise<R[]> {
  return (await on.query<R>(q)).rows;
}

/** The first row, or null for none. */
export async function rowOf<R extends QueryResultRow>(on: Queryable, q: QueryConfig<unknown[]>): Promise<R | null> {
  return (await on.query<R>(q)).rows[0] ?? null;
}

/** Rows the statement wrote (updated, deleted, inserted). */
export async function changed(on: Queryable, q: QueryConfig<unknown[]>): Promise<number> {
  return (await on.query(q)).rowCount ?? 0;
}

/** Runs `fn` in one transaction: committed when it returns, rolled back when it throws. */
export async function inTransaction<T>(pool: Pool, fn: (c: PoolClient) => Promise<T>): Promise<T> {
  const c = await pool.connect();
  // A connection that failed to roll back is closed, not handed to the next caller mid-transaction.
  let broken: Error | undefined;
  try {
    await c.query('BEGIN');
    try {
      const out = await fn(c);
      await c.query('COMMIT');
      return out;
    } catch (err) {
      await c.query('ROLLBACK').catch((e: Error) => {
        broken = e;
      });
      throw err;
    }
  } finally {
    c.release(broken);
  }
}

/** A write refused for a primary key or UNIQUE index already taken (SQLSTATE 23505). */
export function isUniqueViolation(err: unknown): boolean {
  return (err as { code?: unknown } | null)?.code === '23505';
}
