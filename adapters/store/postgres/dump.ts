// A PostgreSQL store to and from the portable export file (../rows/dump.ts): `postern admin
// export` and `import`. The export reads in one REPEATABLE READ transaction (one snapshot, taken
// while instances keep writing) through a cursor, a page of rows at a time; the import writes in
// one transaction with the tables locked against other writers, so a refused or broken file
// leaves the database as it was.
import type { PoolClient } from 'pg';
import { DUMP_TABLES, DumpError, DumpWriter, readDump, type DumpCounts, type DumpRow, type DumpTable } from '../rows/dump.ts';
import { migratePg, openPgPool } from './db.ts';

/** Rows fetched per round trip, and inserted per statement (under PostgreSQL's 65535 parameters). */
const PAGE = 500;

/** PostgreSQL has no position column in event_idempotency: a key's position is its event's. */
function selectOf(table: DumpTable): string {
  if (table.name === 'event_idempotency') {
    return `SELECT k.project_id, k.key, k.fingerprint, k.event_id, e.position, k.created_at
      FROM event_idempotency k JOIN events e ON e.event_id = k.event_id ORDER BY k.project_id, k.key`;
  }
  return `SELECT ${Object.keys(table.columns).join(', ')} FROM ${table.name} ORDER BY ${table.order}`;
}

async function connect(url: string, applicationName: string): Promise<{ client: PoolClient; end: () => Promise<void> }> {
  // openPgPool's types: BIGINT columns as numbers. No statement timeout: a lock wait or a big
  // table is not a statement to cancel here.
  const pool = openPgPool(url, { max: 1, statementTimeoutMs: 0, applicationName });
  try {
    await migratePg(pool);
    const client = await pool.connect();
    return {
      client,
      end: async () => {
        client.release();
        await pool.end();
      },
    };
  } catch (err) {
    await pool.end().catch(() => undefined);
    throw err;
  }
}

/** Writes every carried table of the database at `url` to a new export file `to`. */
export async function dumpPostgres(url: string, to: string): Promise<{ rows: DumpCounts; bytes: number }> {
  const { client, end } = await connect(url, 'postern admin export');
  let out: DumpWriter | null = null;
  try {
    await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
    const schema = (await client.query<{ v: number | null }>('SELECT max(version) AS v FROM schema_migrations')).rows[0]?.v ?? 0;
    out = new DumpWriter(to, { engine: 'postgresql', schema });
    for (const table of DUMP_TABLES) {
      out.table(table);
      await client.query(`DECLARE dump NO SCROLL CURSOR FOR ${selectOf(table)}`);
      for (;;) {
        const { rows } = await client.query<Record<string, unknown>>(`FETCH ${PAGE} FROM dump`);
        for (const row of rows) out.row(table, row);
        if (rows.length < PAGE) break;
      }
      await client.query('CLOSE dump');
    }
    await client.query('COMMIT');
    return out.finish();
  } catch (err) {
    out?.abandon();
    await client.query('ROLLBACK').catch(() => undefined);
    throw err;
  } finally {
    await end();
  }
}

async function insertRows(client: PoolClient, table: DumpTable, rows: DumpRow[]): Promise<void> {
  if (rows.length === 0) return;
  // event_idempotency's position stays behind: PostgreSQL joins the event for it.
  const columns = Object.keys(table.columns).filter((c) => !(table.name === 'event_idempotency' && c === 'position'));
  const values: unknown[] = [];
  const tuples = rows.map((row) => `(${columns.map((c) => `$${values.push(row[c])}`).join(', ')})`);
  try {
    await client.query(`INSERT INTO ${table.name} (${columns.join(', ')}) VALUES ${tuples.join(', ')}`, values);
  } catch (err) {
    throw new DumpError(`${table.name}: ${(err as Error).message}`);
  }
}

/**
 * Fills the database at `url` (migrated first) from the export file `from`. Refused unless every
 * table an import writes is empty: an import never merges into a store in use.
 */
export async function loadPostgres(url: string, from: string): Promise<DumpCounts> {
  const { client, end } = await connect(url, 'postern admin import');
  try {
    await client.query('BEGIN');
    try {
      const names = DUMP_TABLES.map((t) => t.name);
      // Readers go on; any writer (a `serve` started too early) waits for the end of the import.
      await client.query(`LOCK TABLE ${names.join(', ')} IN EXCLUSIVE MODE`);
      const taken: string[] = [];
      for (const name of names) {
        if (name !== 'event_log' && (await client.query(`SELECT 1 FROM ${name} LIMIT 1`)).rowCount) taken.push(name);
      }
      if (taken.length > 0)
        throw new DumpError(
          `the database is not empty (${taken.slice(0, 3).join(', ')}${taken.length > 3 ? ', …' : ''}): import into a new one`,
        );
      let rows: DumpCounts = {};
      let pending: { table: DumpTable; rows: DumpRow[] } | null = null;
      for await (const item of readDump(from)) {
        if (item.kind === 'end') {
          rows = item.rows;
          continue;
        }
        if (item.table.name === 'event_log') {
          await client.query('UPDATE event_log SET id = $1, cursor_secret = $2', [item.row.id, item.row.cursor_secret]);
          continue;
        }
        if (pending && (pending.table.name !== item.table.name || pending.rows.length >= PAGE)) {
          await insertRows(client, pending.table, pending.rows);
          pending = null;
        }
        pending ??= { table: item.table, rows: [] };
        pending.rows.push(item.row);
      }
      if (pending) await insertRows(client, pending.table, pending.rows);
      // The log's head: the next append takes the position after the last imported one, recorded
      // no earlier than it (adapters/store/postgres/events.ts).
      await client.query(`UPDATE event_log SET
        last_position = COALESCE((SELECT max(position) FROM events), 0),
        last_recorded_at = COALESCE((SELECT max(recorded_at) FROM events), 0)`);
      await client.query('COMMIT');
      return rows;
    } catch (err) {
      await client.query('ROLLBACK').catch(() => undefined);
      throw err;
    }
  } finally {
    await end();
  }
}
