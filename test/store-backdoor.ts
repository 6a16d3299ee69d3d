// For the few tests that must put a store into a state no API reaches (a key deleted, an
// idempotency record aged a day): a connection of the test's own to the same store, on either
// engine. Statements are written once, with `?` placeholders, in SQL both engines speak. Reads go
// through the store's ports (postern.store), never here.
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
        const res = await client.query(sql.replace(/\?/g, () => `$${++n}`), params);
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
