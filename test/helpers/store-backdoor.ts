// For the few tests that must put a store into a state no API reaches (a key deleted, an
// idempotency record aged a day): a connection of the test's own to the same store, on either
// engine. Statements are written once, with `?` placeholders, in SQL both engines speak. Reads go
// through the store's ports (postern.store), never here; the one exception is storeAtRest, the
// bytes a privacy scan looks through.
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import pg from 'pg';

export interface StoreBackdoor {
  run(sql: string, ...params: unknown[]): Promise<number>;
  close(): Promise<void>;
}

/** `storeEnv`: a TestServer's (POSTERN_DB or POSTERN_DATABASE_URL). */
export async function storeBackdoor(storeEnv: Record<string, string>): Promise<StoreBackdoor> {
  const url = storeEnv.POSTERN_DATABASE_URL;
  if (url) {
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    return {
      async run(sql, ...params) {
        let n = 0;
        const res = await client.query(
          sql.replace(/\?/g, () => `$${++n}`),
          params,
        );
        return res.rowCount ?? 0;
      },
      close: () => client.end(),
    };
  }
  const file = storeEnv.POSTERN_DB;
  if (!file) throw new Error('storeBackdoor: no POSTERN_DB or POSTERN_DATABASE_URL given');
  const db = new Database(file);
  db.pragma('busy_timeout = 5000');
  return {
    async run(sql, ...params) {
      return db.prepare(sql).run(...params).changes;
    },
    async close() {
      db.close();
    },
  };
}

/** One statement on the store, on a connection opened and closed for it. */
export async function onStore(storeEnv: Record<string, string>, sql: string, ...params: unknown[]): Promise<number> {
  const door = await storeBackdoor(storeEnv);
  try {
    return await door.run(sql, ...params);
  } finally {
    await door.close();
  }
}

/** Bytes a scan looks through, and where they are. */
export interface AtRest {
  where: string;
  bytes: Buffer;
}

function filesUnder(dir: string): string[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    const st = statSync(path);
    return st.isDirectory() ? filesUnder(path) : st.isFile() ? [path] : [];
  });
}

/** A stored value as the bytes a scan can match: a blob as it is, anything else as text. */
function bytesOf(value: unknown): Buffer {
  if (Buffer.isBuffer(value)) return value;
  if (value instanceof Date) return Buffer.from(value.toISOString());
  if (typeof value === 'object' && value !== null) return Buffer.from(JSON.stringify(value));
  return Buffer.from(String(value));
}

/**
 * Everything the store holds at rest, for a scan that must not find a secret there. SQLite: its
 * file, WAL and shared memory as they are (rows deleted but not yet overwritten included).
 * PostgreSQL: every row of every table read back (a large value is stored compressed, so its
 * bytes on disk would hide it from a scan), and, when the cluster is on this machine, the
 * database's files and the cluster's WAL (rows deleted but not yet vacuumed away). Read while
 * the store is open, before a clean close checkpoints the WAL away.
 */
export async function storeAtRest(storeEnv: Record<string, string>): Promise<AtRest[]> {
  const url = storeEnv.POSTERN_DATABASE_URL;
  if (!url) {
    const file = storeEnv.POSTERN_DB;
    if (!file) throw new Error('storeAtRest: no POSTERN_DB or POSTERN_DATABASE_URL given');
    return [file, `${file}-wal`, `${file}-shm`].filter((f) => existsSync(f)).map((f) => ({ where: f, bytes: readFileSync(f) }));
  }
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const out: AtRest[] = [];
    const tables = await client.query<{ name: string }>(
      "SELECT tablename AS name FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename",
    );
    for (const { name } of tables.rows) {
      const rows = await client.query<Record<string, unknown>>(`SELECT * FROM "${name}"`);
      rows.rows.forEach((row, i) => {
        for (const [column, value] of Object.entries(row))
          if (value !== null) out.push({ where: `table ${name} row ${i} ${column}`, bytes: bytesOf(value) });
      });
    }
    const {
      rows: [place],
    } = await client.query<{ data: string; oid: number }>(
      "SELECT current_setting('data_directory') AS data, oid::int AS oid FROM pg_database WHERE datname = current_database()",
    );
    if (place && existsSync(place.data)) {
      for (const f of [...filesUnder(join(place.data, 'base', String(place.oid))), ...filesUnder(join(place.data, 'pg_wal'))])
        out.push({ where: f, bytes: readFileSync(f) });
    }
    return out;
  } finally {
    await client.end();
  }
}
