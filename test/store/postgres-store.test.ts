// The PostgreSQL store's foundation (docs/deployment.md): the mail environment's private cluster (or the
// server POSTERN_TEST_DATABASE_URL names), the pool's settings, the migrations (applied in order,
// each once even when several migrators start together, a failed one leaving nothing behind)
// and `postern admin migrate`. Each test works in a database of its own, dropped after.
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import type pg from 'pg';
import { migratePg, openPgPool, readPgMigrations, type MigrateResult, type PgMigration } from '../../adapters/store/postgres/db.ts';
import { openDb } from '../../adapters/store/sqlite/db.ts';
import { HEARTBEAT_BOUND } from '../../adapters/store/postgres/changes.ts';
import { openPostgresStore } from '../../adapters/store/postgres/store.ts';
import { arrayLiteral } from '../../adapters/store/postgres/sql.ts';
import { ConfigError, loadConfig } from '../../lib/config.ts';
import type { Store } from '../../lib/store.ts';
import { runPostern as postern } from '../helpers/processes.ts';
import { emptyDatabase } from '../store-contract/postgres.ts';
import { TcpTap, type TapConnection } from '../helpers/tcp-tap.ts';

const EVENT_LOG_TABLES = ['events', 'event_streams', 'event_idempotency', 'event_log', 'event_types'];
/** SQLite's text index (FTS5 and its own tables): PostgreSQL's is a column (mail_messages.search). */
const isSqliteTextIndex = (table: string) => table.startsWith('mail_search');

/** A project prj_NAME, its member mem_NAME and two of its tokens, tok_NAME1 and tok_NAME2 (scope events:write). */
async function twoTokens(store: Store, name: string, now: number): Promise<void> {
  await store.directory.createProject({ id: `prj_${name}`, name, createdAt: now });
  await store.directory.createMember({ id: `mem_${name}`, projectId: `prj_${name}`, email: `${name}@example.org`, createdAt: now });
  for (const n of [1, 2]) {
    await store.directory.createToken({
      id: `tok_${name}${n}`,
      projectId: `prj_${name}`,
      memberId: `mem_${name}`,
      scopes: ['events:write'],
      inboxes: null,
      secretHash: Buffer.alloc(32),
      createdAt: now,
      expiresAt: null,
      revokedAt: null,
    });
  }
}

const versions = (list: { version: number }[]) => list.map((m) => m.version);

describe('PostgreSQL store: cluster, pool, migrations', function () {
  this.timeout(60_000);
  let db: { url: string; drop: () => Promise<void> };
  const pools: pg.Pool[] = [];
  const pool = (opts: Parameters<typeof openPgPool>[1] = {}) => {
    const p = openPgPool(db.url, opts);
    pools.push(p);
    return p;
  };

  beforeEach(async function () {
    db = await emptyDatabase();
  });

  afterEach(async function () {
    await Promise.all(pools.splice(0).map((p) => p.end()));
    await db.drop();
  });

  it('the cluster answers through openPgPool, with its application name, statement timeout and BIGINTs as numbers', async function () {
    const p = pool({ applicationName: 'postern test' });
    const { rows } = await p.query<{ app: string; timeout: string; big: number; now_ms: number }>(
      `SELECT current_setting('application_name') AS app, current_setting('statement_timeout') AS timeout,
              9007199254740991::bigint AS big, (extract(epoch FROM now()) * 1000)::bigint AS now_ms`,
    );
    expect(rows[0]).to.include({ app: 'postern test', timeout: '30s', big: Number.MAX_SAFE_INTEGER });
    expect(rows[0]!.now_ms).to.be.a('number').and.be.closeTo(Date.now(), 60_000);
    // Past 2^53 a number would lose digits: refused rather than rounded.
    const err = await p.query('SELECT 9007199254740993::bigint AS n').then(
      () => null,
      (e: unknown) => e as Error,
    );
    expect(err).to.be.instanceOf(RangeError);
    // The statement timeout is the server's: a longer statement is cancelled (57014).
    const slow = pool({ statementTimeoutMs: 100 });
    const cancelled = await slow.query('SELECT pg_sleep(5)').then(
      () => null,
      (e: unknown) => e as Error & { code?: string },
    );
    expect(cancelled?.code).to.equal('57014');
  });

  it('arrayLiteral: text and bigint arrays bound as literals come back element for element, quotes, backslashes, commas, braces and NULLs too', async function () {
    const p = pool();
    const texts = ['whk_abc', '', 'NULL', 'a "quoted" word', 'back\\slash\\', 'comma, {brace}', ' spaced ', 'ünï', null, '\\"'];
    const numbers = [0, 1, -7, Number.MAX_SAFE_INTEGER, null];
    const { rows } = await p.query<{ t: (string | null)[]; n: (number | null)[] }>('SELECT $1::text[] AS t, $2::bigint[] AS n', [
      arrayLiteral(texts),
      arrayLiteral(numbers),
    ]);
    expect(rows[0]!.t).to.deep.equal(texts);
    expect(rows[0]!.n.map((x) => (x === null ? null : Number(x)))).to.deep.equal(numbers);
    const empty = await p.query<{ t: string[] }>('SELECT $1::text[] AS t', [arrayLiteral([])]);
    expect(empty.rows[0]!.t).to.deep.equal([]);
  });

  it("applies every migration to an empty database, in order; SQLite's every directory and mail table and column is there by the same name", async function () {
    const files = readPgMigrations();
    expect(versions(files)).to.deep.equal([...versions(files)].sort((a, b) => a - b));
    expect(versions(files)).to.include.members([1, 3]);
    const result = await migratePg(pool());
    expect(result.applied).to.deep.equal(files.map(({ version, name }) => ({ version, name })));
    expect(result.version).to.equal(files.at(-1)!.version);

    const pgColumns = new Map<string, Set<string>>();
    const { rows } = await pool().query<{ table_name: string; column_name: string }>(
      "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = 'public'",
    );
    for (const r of rows) pgColumns.set(r.table_name, (pgColumns.get(r.table_name) ?? new Set()).add(r.column_name));

    // The SQLite schema as its migrations leave it: what the PostgreSQL adapters translate.
    const dir = mkdtempSync(join(tmpdir(), 'postern-pg-schema-'));
    const missing: string[] = [];
    try {
      const sqlite = openDb(join(dir, 'schema.db'));
      const tables = sqlite
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
        .pluck()
        .all() as string[];
      expect(tables.length).to.be.greaterThan(30);
      // The event log's tables (002_events.sql) are shaped by PostgreSQL's own ordering of
      // concurrent writers (docs/events.md, "On PostgreSQL: a log that never skips"), not translated column for column.
      for (const table of tables.filter((t) => !EVENT_LOG_TABLES.includes(t) && !isSqliteTextIndex(t))) {
        const columns = (sqlite.pragma(`table_info(${table})`) as { name: string }[]).map((c) => c.name);
        for (const column of columns) if (!pgColumns.get(table)?.has(column)) missing.push(`${table}.${column}`);
      }
      sqlite.close();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
    expect(missing, 'SQLite columns without a PostgreSQL twin').to.deep.equal([]);
  });

  it('re-running applies nothing', async function () {
    const first = await migratePg(pool());
    expect(first.applied).to.not.be.empty;
    const again = await migratePg(pool());
    expect(again).to.deep.equal({ applied: [], version: first.version });
  });

  it('two migrators starting at once (two pools) apply each migration exactly once', async function () {
    const files = readPgMigrations();
    const results: MigrateResult[] = await Promise.all([migratePg(pool()), migratePg(pool())]);
    const applied = results.flatMap((r) => versions(r.applied));
    expect(applied.sort((a, b) => a - b)).to.deep.equal(versions(files));
    // The lock is held for the whole run: one did everything, the other found nothing left.
    expect(results.map((r) => r.applied.length).sort()).to.deep.equal([0, files.length]);
    const { rows } = await pool().query<{ version: number; n: number }>(
      'SELECT version, count(*)::int AS n FROM schema_migrations GROUP BY version ORDER BY version',
    );
    expect(rows).to.deep.equal(files.map((f) => ({ version: f.version, n: 1 })));
  });

  it('a migration that fails leaves nothing of itself, is not recorded, and the next run retries it', async function () {
    const good: PgMigration = { version: 1, name: 'good', sql: 'CREATE TABLE good (id integer);' };
    const bad: PgMigration = { version: 2, name: 'bad', sql: 'CREATE TABLE half (id integer); SELECT no_such_function();' };
    const err = await migratePg(pool(), [good, bad]).then(
      () => null,
      (e: unknown) => e as Error,
    );
    expect(err?.message).to.match(/migration 002_bad\.sql failed: .*no_such_function/);
    const p = pool();
    const tables = await p.query<{ t: string | null }>("SELECT to_regclass('good')::text AS t UNION ALL SELECT to_regclass('half')::text");
    expect(tables.rows.map((r) => r.t)).to.deep.equal(['good', null]);
    expect((await p.query('SELECT version FROM schema_migrations')).rows).to.deep.equal([{ version: 1 }]);
    const fixed: PgMigration = { ...bad, sql: 'CREATE TABLE half (id integer);' };
    expect((await migratePg(p, [good, fixed])).applied).to.deep.equal([{ version: 2, name: 'bad' }]);
    // The failed run's connection was dropped, not pooled with its lock: nothing waits on it.
    const locks = await p.query(
      "SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
    );
    expect(locks.rows).to.deep.equal([{ n: 0 }]);
  });

  it('POSTERN_DATABASE_URL: a postgres:// or postgresql:// URL; unset, the store is SQLite', function () {
    const url = 'postgresql://u:p@db.example.org:5433/postern';
    expect(loadConfig({ POSTERN_DATABASE_URL: url }).databaseUrl).to.equal(url);
    expect(loadConfig({ POSTERN_DATABASE_URL: url, POSTERN_IMAP_MASTER_PASSWORD: 'x' }, { serve: true }).databaseUrl).to.equal(url);
    expect(loadConfig({}).databaseUrl).to.equal(null);
    for (const bad of ['mysql://db.example.org/x', 'postgres://', 'not a url']) {
      expect(() => loadConfig({ POSTERN_DATABASE_URL: bad }), bad).to.throw(
        ConfigError,
        /POSTERN_DATABASE_URL must be a postgres:\/\/ or postgresql:\/\/ URL/,
      );
    }
  });

  describe('postern admin migrate', function () {
    // Each command is a fresh Node process: seconds apiece on a busy machine.
    this.timeout(180_000);

    it('two at once apply each migration once and print what they applied; a third applies nothing', async function () {
      const files = readPgMigrations();
      const env = { POSTERN_DATABASE_URL: db.url };
      const runs = await Promise.all([postern(['admin', 'migrate'], env), postern(['admin', 'migrate'], env)]);
      for (const r of runs) {
        expect(r.code, r.stdout + r.stderr).to.equal(0);
        expect(r.stdout.trim().split('\n'), 'exactly one line of JSON').to.have.length(1);
        expect(r.out).to.include({ store: 'postgresql', version: files.at(-1)!.version });
        // The URL's password is never printed.
        expect(r.stdout).to.not.include(new URL(db.url).password);
      }
      const applied = runs.flatMap((r) => r.out.applied as { version: number; name: string }[]);
      expect(applied.sort((a, b) => a.version - b.version)).to.deep.equal(files.map(({ version, name }) => ({ version, name })));
      const third = await postern(['admin', 'migrate'], env);
      expect(third.out).to.deep.equal({ store: 'postgresql', applied: [], version: files.at(-1)!.version });
    });

    it('without POSTERN_DATABASE_URL migrates the SQLite file; a URL that is not postgres:// is refused', async function () {
      const dir = mkdtempSync(join(tmpdir(), 'postern-migrate-'));
      try {
        const file = join(dir, 'postern.db');
        const sqlite = await postern(['admin', 'migrate'], { POSTERN_DB: file, POSTERN_DATABASE_URL: '' });
        expect(sqlite.code, sqlite.stdout + sqlite.stderr).to.equal(0);
        expect(sqlite.out).to.deep.equal({ store: 'sqlite', file, migrated: true });
        const bad = await postern(['admin', 'migrate'], { POSTERN_DATABASE_URL: 'mysql://localhost/postern' });
        expect(bad.code).to.equal(1);
        expect(bad.out.error).to.equal('POSTERN_DATABASE_URL must be a postgres:// or postgresql:// URL with a host');
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });

    it('staff commands work on PostgreSQL when POSTERN_DATABASE_URL is set, and never make a SQLite file beside it', async function () {
      const dir = mkdtempSync(join(tmpdir(), 'postern-migrate-'));
      try {
        const env = { POSTERN_DATABASE_URL: db.url, POSTERN_DB: join(dir, 'postern.db') };
        const made = await postern(['admin', 'project', 'create', '--name', 'on postgres'], env);
        expect(made.code, made.stdout + made.stderr).to.equal(0);
        const store = await openPostgresStore(db.url);
        try {
          expect((await store.directory.getProject(made.out.id as string))?.name).to.equal('on postgres');
        } finally {
          await store.close();
        }
        expect(existsSync(env.POSTERN_DB)).to.equal(false);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });
  });
  it('each process keeps the tokens and event types it read until any process changes them: the change is announced at commit', async function () {
    const heard = [false, false];
    const open = (i: number) => openPostgresStore(db.url, { keepMs: 60_000, onListenerState: (live) => (heard[i] = live) });
    const [a, b] = [await open(0), await open(1)];
    const raw = pool();
    try {
      const now = Date.now();
      await twoTokens(a, 'kept', now);
      // Each store listens on a connection of its own, opened at its first read, and keeps what it
      // reads once its first heartbeat came back on it.
      await a.directory.getToken('tok_kept1');
      await b.directory.getToken('tok_kept1');
      for (const deadline = Date.now() + 10_000; !heard.every(Boolean); ) {
        if (Date.now() > deadline) throw new Error('the stores never listened');
        await new Promise((r) => setTimeout(r, 20));
      }
      expect(
        (
          await raw.query<{ n: number }>(
            "SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = 'postern (changes)' AND query LIKE 'LISTEN%'",
          )
        ).rows[0]!.n,
      ).to.equal(2);
      // Kept: a change made without its notice (the trigger off) is not seen by A.
      expect((await a.directory.getToken('tok_kept1'))?.scopes).to.deep.equal(['events:write']);
      await raw.query('ALTER TABLE tokens DISABLE TRIGGER tokens_changed');
      await raw.query("UPDATE tokens SET scopes = 'events:read' WHERE id = 'tok_kept1'");
      await raw.query('ALTER TABLE tokens ENABLE TRIGGER tokens_changed');
      expect((await a.directory.getToken('tok_kept1'))?.scopes).to.deep.equal(['events:write']);
      // What an operator sends after such a write (docs/deployment.md): every process drops all it kept.
      await raw.query('NOTIFY postern_forget');
      for (const deadline = Date.now() + 5_000; (await a.directory.getToken('tok_kept1'))?.scopes[0] !== 'events:read'; ) {
        if (Date.now() > deadline) throw new Error('A still serves what it kept after NOTIFY postern_forget');
        await new Promise((r) => setTimeout(r, 5));
      }
      // Revoked through B: A drops it when the notice arrives.
      expect(await b.directory.revokeToken('tok_kept1', now)).to.equal(true);
      for (const deadline = Date.now() + 5_000; (await a.directory.getToken('tok_kept1'))?.revokedAt !== now; ) {
        if (Date.now() > deadline) throw new Error('A still serves the revoked token');
        await new Promise((r) => setTimeout(r, 5));
      }
      // Revoked through A itself: refused on its next read, before the notice.
      expect((await a.directory.getToken('tok_kept2'))?.revokedAt).to.equal(null);
      await a.directory.revokeToken('tok_kept2', now);
      expect((await a.directory.getToken('tok_kept2'))?.revokedAt).to.equal(now);
      // A type's versions: a version registered through B is seen by A once its notice arrives.
      const type = (version: number) => ({
        projectId: 'prj_kept',
        name: 'ext.kept.happened',
        version,
        description: 'kept',
        fields: [],
        createdAt: now,
        updatedAt: now,
      });
      await a.events.upsertType('prj_kept', 'ext.kept.happened', 1, () => type(1));
      expect((await a.events.typeVersions('prj_kept', 'ext.kept.happened', null, 5)).map((t) => t.version)).to.deep.equal([1]);
      await b.events.upsertType('prj_kept', 'ext.kept.happened', 2, () => type(2));
      for (const deadline = Date.now() + 5_000; (await a.events.typeVersions('prj_kept', 'ext.kept.happened', null, 5)).length !== 2; ) {
        if (Date.now() > deadline) throw new Error('A never saw version 2');
        await new Promise((r) => setTimeout(r, 5));
      }
    } finally {
      await a.close();
      await b.close();
    }
  });

  it("each process keeps a member's grant, an inbox and its index's seeded state until any process changes them", async function () {
    const heard = [false, false];
    const open = (i: number) => openPostgresStore(db.url, { keepMs: 60_000, onListenerState: (live) => (heard[i] = live) });
    const [a, b] = [await open(0), await open(1)];
    const raw = pool();
    const until = async (what: string, done: () => Promise<boolean>) => {
      for (const deadline = Date.now() + 5_000; !(await done()); ) {
        if (Date.now() > deadline) throw new Error(what);
        await new Promise((r) => setTimeout(r, 5));
      }
    };
    try {
      const now = Date.now();
      await a.directory.createProject({ id: 'prj_keep', name: 'keep', createdAt: now });
      await a.directory.createMember({ id: 'mem_keep', projectId: 'prj_keep', email: 'keep@example.org', createdAt: now });
      const inbox = (n: number) => ({
        id: `ibx_keep${n}`,
        projectId: 'prj_keep',
        imapUser: `keep${n}`,
        addresses: [`keep${n}@example.org`],
        mode: 'compatible' as const,
        createdAt: now,
      });
      for (const n of [1, 2]) {
        await a.directory.createInbox(inbox(n));
        await a.directory.putGrant({ memberId: 'mem_keep', inboxId: `ibx_keep${n}`, role: 'reader', createdAt: now });
      }
      await a.mailIndex.markSeeded('ibx_keep1', true);
      // Both listening (as in the test above), then everything read once on each.
      await a.directory.getGrant('mem_keep', 'ibx_keep1');
      await b.directory.getGrant('mem_keep', 'ibx_keep1');
      await until('the stores never listened', async () => heard.every(Boolean));
      for (const s of [a, b]) {
        for (const n of [1, 2]) expect((await s.directory.getGrant('mem_keep', `ibx_keep${n}`))?.role).to.equal('reader');
        expect((await s.directory.getInbox('ibx_keep2'))?.addresses).to.deep.equal(['keep2@example.org']);
        expect(await s.mailIndex.isSeeded('ibx_keep1')).to.equal(true);
      }
      // Kept: changes made without their notices (the triggers off) are not seen by A.
      await raw.query('ALTER TABLE grants DISABLE TRIGGER grants_changed');
      await raw.query("UPDATE grants SET role = 'admin' WHERE inbox_id = 'ibx_keep1'");
      await raw.query('ALTER TABLE grants ENABLE TRIGGER grants_changed');
      await raw.query('ALTER TABLE mail_inboxes DISABLE TRIGGER mail_inboxes_unseeded');
      await raw.query("UPDATE mail_inboxes SET seeded = false WHERE inbox_id = 'ibx_keep1'");
      await raw.query('ALTER TABLE mail_inboxes ENABLE TRIGGER mail_inboxes_unseeded');
      expect((await a.directory.getGrant('mem_keep', 'ibx_keep1'))?.role).to.equal('reader');
      expect(await a.mailIndex.isSeeded('ibx_keep1')).to.equal(true);
      await b.mailIndex.markSeeded('ibx_keep1', true);
      // Changed through B: A drops each when its notice arrives.
      expect(await b.directory.deleteGrant('mem_keep', 'ibx_keep1')).to.equal(true);
      await until('A still serves the deleted grant', async () => (await a.directory.getGrant('mem_keep', 'ibx_keep1')) === null);
      await b.mailIndex.markSeeded('ibx_keep1', false);
      await until('A still takes the index as seeded', async () => (await a.mailIndex.isSeeded('ibx_keep1')) === false);
      expect(await b.directory.deleteInbox('ibx_keep2', now)).to.equal(true);
      await until('A still serves the deleted inbox', async () => (await a.directory.getInbox('ibx_keep2')) === null);
      await until("A still serves the deleted inbox's grant", async () => (await a.directory.getGrant('mem_keep', 'ibx_keep2')) === null);
      // Changed through A itself: seen on its next read, before the notice.
      await a.directory.putGrant({ memberId: 'mem_keep', inboxId: 'ibx_keep1', role: 'reader', createdAt: now });
      expect((await a.directory.getGrant('mem_keep', 'ibx_keep1'))?.role).to.equal('reader');
      await a.mailIndex.markSeeded('ibx_keep1', true);
      expect(await a.mailIndex.isSeeded('ibx_keep1')).to.equal(true);
      await a.mailIndex.dropInbox('ibx_keep1');
      expect(await a.mailIndex.isSeeded('ibx_keep1')).to.equal(false);
    } finally {
      await a.close();
      await b.close();
    }
  });
});

describe('PostgreSQL store: kept reads fail closed when the listening connection goes silent', function () {
  this.timeout(60_000);
  let db: { url: string; drop: () => Promise<void> };
  let tap: TcpTap | null = null;

  beforeEach(async function () {
    db = await emptyDatabase();
  });

  afterEach(async function () {
    await tap?.close();
    tap = null;
    await db.drop();
  });

  const until = async (what: string, withinMs: number, done: () => Promise<boolean> | boolean) => {
    for (const deadline = Date.now() + withinMs; !(await done()); ) {
      if (Date.now() > deadline) throw new Error(what);
      await new Promise((r) => setTimeout(r, 10));
    }
  };

  it('a token revoked while the listening connection is frozen is refused within 3 heartbeats; a new connection is opened and kept reads resume', async function () {
    // A's listening connection goes through a relay that can freeze a connection: hold its bytes
    // both ways and close nothing, as a NAT that dropped it or a half-open connection does. Its
    // pool goes direct, so only the notices stop.
    const server = new URL(db.url);
    const frozen = new Set<TapConnection>();
    const seen = new Set<TapConnection>();
    const hold = (_chunk: Buffer, conn: TapConnection): 'forward' | 'handled' => {
      seen.add(conn);
      return frozen.has(conn) ? 'handled' : 'forward';
    };
    tap = new TcpTap({ host: server.hostname, port: Number(server.port) }, { onClient: hold, onServer: hold });
    const relayed = new URL(db.url);
    relayed.host = `127.0.0.1:${await tap.start()}`;
    const heartbeatMs = 300;
    const boundMs = heartbeatMs * HEARTBEAT_BOUND;
    const states: boolean[] = [];
    const a = await openPostgresStore(db.url, {
      keepMs: 60_000,
      heartbeatMs,
      listenUrl: relayed.toString(),
      onListenerState: (live) => states.push(live),
    });
    const b = await openPostgresStore(db.url, { keepMs: 60_000 });
    const raw = openPgPool(db.url);
    try {
      const now = Date.now();
      await twoTokens(b, 'frozen', now);
      // Kept by A: a change made without its notice (the trigger off) is not seen.
      const changedUnannounced = async (id: string) => {
        await raw.query('ALTER TABLE tokens DISABLE TRIGGER tokens_changed');
        await raw.query("UPDATE tokens SET scopes = scopes || ' events:read' WHERE id = $1", [id]);
        await raw.query('ALTER TABLE tokens ENABLE TRIGGER tokens_changed');
      };
      const scopes = async (id: string) => (await a.directory.getToken(id))?.scopes.join(' ');

      // The first read starts A listening; once a heartbeat came back, what A reads is kept.
      await a.directory.getToken('tok_frozen1');
      await until('A never heard its heartbeat', 10_000, () => states.at(-1) === true);
      expect(seen.size).to.equal(1);
      expect(await scopes('tok_frozen1')).to.equal('events:write');
      await changedUnannounced('tok_frozen1');
      expect(await scopes('tok_frozen1')).to.equal('events:write');

      // Frozen: B's revocation is never announced to A, yet A refuses the token within the bound.
      for (const conn of seen) frozen.add(conn);
      expect(await b.directory.revokeToken('tok_frozen1', now)).to.equal(true);
      // The bound, plus room for a read and a loaded machine.
      await until(
        `A still served the revoked token ${boundMs + 1500} ms after the revocation`,
        boundMs + 1500,
        async () => (await a.directory.getToken('tok_frozen1'))?.revokedAt === now,
      );
      expect(states).to.deep.equal([true, false]);
      // Not heard: nothing is kept, every read is the database's.
      await changedUnannounced('tok_frozen2');
      expect(await scopes('tok_frozen2')).to.equal('events:write events:read');

      // The frozen connection never thaws: A closes it after 10 silent heartbeats and listens on a
      // new one, and once that is heard what A reads is kept again.
      await until('A never listened again', 20_000, () => seen.size === 2 && states.at(-1) === true);
      expect(await scopes('tok_frozen2')).to.equal('events:write events:read');
      await changedUnannounced('tok_frozen2');
      expect(await scopes('tok_frozen2')).to.equal('events:write events:read');
      // And notices are heard on it: a revocation through B is refused by A at once.
      expect(await b.directory.revokeToken('tok_frozen2', now)).to.equal(true);
      await until(
        'A still serves the token revoked through B',
        5_000,
        async () => (await a.directory.getToken('tok_frozen2'))?.revokedAt === now,
      );
    } finally {
      await a.close();
      await b.close();
      await raw.end();
    }
  });
});
