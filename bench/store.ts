// The store's two engines side by side (docs/deployment.md), each next to its raw driver doing the same
// statements in the same run:
//   1. POST /events, 1 KB data + Idempotency-Key, 32 clients, `postern serve` with 2 workers.
//      Floor: the raw driver committing the append's statements (the idempotency row, the head
//      of the log, the event row) one event per transaction, from as many connections as helps.
//   2. GET /events?limit=500, 8 clients. Floor: the raw SELECT of 500 rows joined into one body.
//   3. Readers never skip: in a round like (1), not timed, a reader pages GET /events from the
//      start and counts events it saw twice or never (every event in the log must be seen once).
//   4. The 50-message page of a 10,000-message label and the first index of a 50,000-message
//      inbox: `bench/mail.ts --only=read,index` with the store on each engine (its floor is the
//      raw imapflow FETCH of the same page).
//
//   npm run bench:store                 # prints the results as Markdown
//   npm run bench:store -- --write      # also replaces the store section of bench/RESULTS.md
//   npm run bench:store -- --quick      # shorter rounds, smaller mailboxes, for a smoke run
//   npm run bench:store -- --only=events|mail
//   npm run bench:store -- --only=post  # the POST rows alone, the engines' rounds in turn (a shared machine)
//   npm run bench:store -- --rounds=5   # rounds per measurement (default 3)
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import pg from 'pg';
import { openStore } from '../adapters/store/open.ts';
import { loadConfig } from '../lib/config.ts';
import { MasterKey } from '../lib/crypto/master-key.ts';
import type { Cursors } from '../lib/events/cursor.ts';
import { ROOT } from '../lib/paths.ts';
import type { StoreEngine } from '../lib/store.ts';
import { up } from '../scripts/mailenv.ts';
import { emptyDatabase } from '../test/store-contract/postgres.ts';
import { childPids, spawnPostern, stopProcess } from '../test/helpers/processes.ts';
import { cpuSeconds, f0, f1, getJson, log, machine, median, NO_RATE_LIMITS, pageRate, pct, runBench } from './common.ts';
import { minimalDomain } from '../test/helpers/minimal-domain.ts';
import { closedLoop } from './load.ts';
import { writeResults } from './results.ts';

const args = new Set(process.argv.slice(2));
const QUICK = args.has('--quick');
const ROUNDS = Number(process.argv.find((a) => a.startsWith('--rounds='))?.slice(9) ?? (QUICK ? 1 : 3));
const SECONDS = QUICK ? 2 : 5;
const PREFILL = QUICK ? 5000 : 20_000;
const ONLY =
  process.argv
    .find((a) => a.startsWith('--only='))
    ?.slice(7)
    .split(',') ?? null;
const want = (part: 'events' | 'mail') => !ONLY || ONLY.includes(part);
const ENGINES: StoreEngine[] = ['sqlite', 'postgres'];
const MASTER_KEY = MasterKey.generate();
const PAYLOAD = 'p'.repeat(1000);

interface Bench {
  engine: StoreEngine;
  /** POSTERN_DB or POSTERN_DATABASE_URL. */
  storeEnv: Record<string, string>;
  projectId: string;
  writer: string;
  reader: string;
  drop(): Promise<void>;
}

/** A fresh store on `engine` with a project, two tokens and the bench's event type. */
async function freshStore(engine: StoreEngine, dir: string, pgServer: string): Promise<Bench> {
  let storeEnv: Record<string, string>;
  let drop: () => Promise<void> = async () => {};
  if (engine === 'sqlite') storeEnv = { POSTERN_DB: join(dir, `${engine}-${Date.now()}.db`) };
  else {
    const db = await emptyDatabase(pgServer);
    storeEnv = { POSTERN_DATABASE_URL: db.url };
    drop = db.drop;
  }
  const store = await openStore(loadConfig(storeEnv));
  try {
    const { admin, events } = minimalDomain(store);
    const { id: projectId } = await admin.createProject('bench');
    const { id: memberId } = await admin.addMember(projectId, 'bench@example.org');
    const writer = (await admin.createToken({ memberId, scopes: ['events:write'] })).token;
    const reader = (await admin.createToken({ memberId, scopes: ['events:read', 'project:read'] })).token;
    await events.registerType(projectId, {
      name: 'ext.bench.happened',
      description: 'benchmark event',
      data: [
        { name: 'payload', type: 'string' },
        { name: 't', type: 'integer' },
      ],
    });
    return { engine, storeEnv, projectId, writer, reader, drop };
  } finally {
    await store.close();
  }
}

const serverEnv = (b: Bench, extra: Record<string, string> = {}) => ({
  ...NO_RATE_LIMITS,
  POSTERN_PORT: '0',
  POSTERN_LOG_LEVEL: 'warn',
  POSTERN_IMAP_MASTER_PASSWORD: 'unused',
  POSTERN_MASTER_KEY: MASTER_KEY,
  POSTERN_MAX_CONNECTIONS_PER_ADDRESS: '0',
  // Paged reads see events as soon as they commit: the reader of (3) follows the writers closely.
  POSTERN_EVENTS_SETTLE_MS: '0',
  ...b.storeEnv,
  ...extra,
});

const treeCpu = (pid: number): number => [pid, ...childPids(pid)].reduce((sum, p) => sum + cpuSeconds(p), 0);

// ── 1 and 3. POST /events, with a reader paging behind the writers ───────────────────────────

interface PostResult {
  rate: number;
  p99: number;
  serverCores: number;
  failed: number;
}

async function benchPost(b: Bench, base: string, pid: number): Promise<PostResult> {
  const body = JSON.stringify({ type: 'ext.bench.happened', data: { payload: PAYLOAD, t: 1 } });
  const path = `${new URL(base).pathname}/events`;
  const run = `${Date.now()}`;
  let key = 0;
  const cpu0 = treeCpu(pid);
  const t0 = performance.now();
  const r = await closedLoop(base, {
    clients: 32,
    seconds: SECONDS,
    next: () => ({
      method: 'POST',
      path,
      headers: { authorization: `Bearer ${b.writer}`, 'content-type': 'application/json', 'idempotency-key': `${run}-${key++}` },
      body,
    }),
    ok: (status) => status === 201,
  });
  const serverCores = (treeCpu(pid) - cpu0) / ((performance.now() - t0) / 1000);
  if (r.failed) log(`  POST /events: ${r.failed} failed, e.g. ${r.firstFailure}`);
  return { rate: r.rate, p99: pct(r.latencies, 0.99), serverCores, failed: r.failed };
}

/**
 * Pages GET /events from `after` until `stop()` and then to the end: every event's id, in the
 * order read. A skip would show as a missing id; a repeat as a duplicate.
 */
async function pageAll(b: Bench, base: string, stop: () => boolean): Promise<string[]> {
  const ids: string[] = [];
  let cursor: string | null = null;
  const auth = { authorization: `Bearer ${b.reader}` };
  for (;;) {
    const url: string = `${base}/events?limit=500${cursor ? `&after=${encodeURIComponent(cursor)}` : ''}`;
    // The cursor is where the next read starts: after this page, or where we were when it is empty.
    const page: { events: Array<{ id: string }>; cursor: string } = await getJson(url, auth);
    for (const e of page.events) ids.push(e.id);
    cursor = page.cursor;
    if (page.events.length === 0) {
      if (stop()) return ids;
      await new Promise((r) => setTimeout(r, 20));
    }
  }
}

// ── 2. GET /events?limit=500 ─────────────────────────────────────────────────────────────────

async function prefill(b: Bench): Promise<{ first: number; last: number; cursors: Cursors }> {
  const store = await openStore(loadConfig(b.storeEnv));
  try {
    const { events } = minimalDomain(store);
    const first = (await events.lastPosition()) + 1;
    const pending: Array<Promise<unknown>> = [];
    for (let i = 0; i < PREFILL; i++) {
      pending.push(
        events.publish({ projectId: b.projectId, actor: 'sys_bench', type: 'ext.bench.happened', data: { payload: PAYLOAD, t: i } }),
      );
      if (pending.length >= 256) await Promise.all(pending.splice(0));
    }
    await Promise.all(pending);
    return { first, last: await events.lastPosition(), cursors: await events.cursors() };
  } finally {
    await store.close();
  }
}

// ── The raw floors ───────────────────────────────────────────────────────────────────────────

const BODY = 'x'.repeat(1400);

/** SQLite: one IMMEDIATE transaction per event: the idempotency row, the head, the event. */
function sqliteAppendFloor(dir: string): number {
  const db = new Database(join(dir, `floor-${Date.now()}.db`));
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = NORMAL');
  db.exec(`CREATE TABLE k (key TEXT PRIMARY KEY, created_at INTEGER NOT NULL);
    CREATE TABLE head (only_row INTEGER PRIMARY KEY, last INTEGER NOT NULL); INSERT INTO head VALUES (1, 0);
    CREATE TABLE e (position INTEGER PRIMARY KEY, key TEXT NOT NULL, body TEXT NOT NULL)`);
  const key = db.prepare('INSERT INTO k VALUES (?, ?)');
  const head = db.prepare('UPDATE head SET last = last + 1 RETURNING last').pluck();
  const event = db.prepare('INSERT INTO e VALUES (?, ?, ?)');
  const tx = db.transaction((k: string) => {
    key.run(k, Date.now());
    event.run(head.get(), k, BODY);
  });
  let n = 0;
  const end = performance.now() + SECONDS * 1000;
  while (performance.now() < end) for (let i = 0; i < 100; i++) tx.immediate(`k${n++}`);
  db.close();
  return n / SECONDS;
}

/**
 * PostgreSQL: the same three statements per transaction from `connections` connections at once,
 * the head's row lock ordering commits as Postern's does. Without it (`ordered` false) the
 * floor is the server's plain insert rate.
 */
async function pgAppendFloor(url: string, connections: number, ordered: boolean): Promise<number> {
  const setup = new pg.Client({ connectionString: url });
  await setup.connect();
  await setup.query(`DROP TABLE IF EXISTS floor_k, floor_head, floor_e;
    CREATE TABLE floor_k (key TEXT PRIMARY KEY, created_at BIGINT NOT NULL);
    CREATE TABLE floor_head (only_row BOOLEAN PRIMARY KEY, last BIGINT NOT NULL) WITH (fillfactor = 50); INSERT INTO floor_head VALUES (true, 0);
    CREATE SEQUENCE IF NOT EXISTS floor_seq;
    CREATE TABLE floor_e (position BIGINT PRIMARY KEY, key TEXT NOT NULL, body TEXT NOT NULL)`);
  await setup.end();
  let n = 0;
  const end = performance.now() + SECONDS * 1000;
  await Promise.all(
    Array.from({ length: connections }, async (_, c) => {
      const client = new pg.Client({ connectionString: url });
      await client.connect();
      let i = 0;
      while (performance.now() < end) {
        const k = `c${c}-${i++}`;
        await client.query('BEGIN');
        await client.query({ name: 'k', text: 'INSERT INTO floor_k VALUES ($1, $2)', values: [k, Date.now()] });
        const position = ordered
          ? (await client.query<{ last: number }>({ name: 'head', text: 'UPDATE floor_head SET last = last + 1 RETURNING last' })).rows[0]!
              .last
          : (await client.query<{ p: number }>({ name: 'seq', text: "SELECT nextval('floor_seq') AS p" })).rows[0]!.p;
        await client.query({ name: 'e', text: 'INSERT INTO floor_e VALUES ($1, $2, $3)', values: [position, k, BODY] });
        await client.query('COMMIT');
        n++;
      }
      await client.end();
    }),
  );
  return n / SECONDS;
}

/** Raw SELECT of 500 events after a random position, joined into one body: rows/s. */
async function selectFloor(b: Bench, range: { first: number; last: number }): Promise<number> {
  const after = () => range.first + Math.floor(Math.random() * (range.last - range.first - 500));
  const join = (rows: Array<{ body: string }>) => `{"events":[${rows.map((r) => r.body).join(',')}]}`.length;
  let rows = 0;
  const end = performance.now() + SECONDS * 1000;
  if (b.engine === 'sqlite') {
    const db = new Database(b.storeEnv.POSTERN_DB, { readonly: true });
    const select = db.prepare('SELECT body FROM events WHERE project_id = ? AND position > ? ORDER BY position LIMIT 500');
    while (performance.now() < end) {
      const got = select.all(b.projectId, after()) as Array<{ body: string }>;
      join(got);
      rows += got.length;
    }
    db.close();
    return rows / SECONDS;
  }
  const pool = new pg.Pool({ connectionString: b.storeEnv.POSTERN_DATABASE_URL!, max: 8 });
  await Promise.all(
    Array.from({ length: 8 }, async () => {
      while (performance.now() < end) {
        const got = await pool.query<{ body: string }>({
          name: 'sel',
          text: 'SELECT body FROM events WHERE project_id = $1 AND position > $2 ORDER BY position LIMIT 500',
          values: [b.projectId, after()],
        });
        join(got.rows);
        rows += got.rows.length;
      }
    }),
  );
  await pool.end();
  return rows / SECONDS;
}

// ── Runs ─────────────────────────────────────────────────────────────────────────────────────

interface EngineResult {
  post: number;
  postP99: number;
  postCores: number;
  appendFloor: number;
  appendFloorUnordered: number;
  get: number;
  selectFloor: number;
  readerSeen: number;
  readerMissing: number;
  readerRepeated: number;
  acknowledged: number;
}

async function runEngine(engine: StoreEngine, dir: string, pgServer: string): Promise<EngineResult> {
  log(`${engine}: events`);
  const b = await freshStore(engine, dir, pgServer);
  let server: { child: ChildProcess; url: string } | null = null;
  try {
    server = await spawnPostern(serverEnv(b, { POSTERN_WORKERS: '2' }));
    const base = `${server.url}/v1`;
    const posts: PostResult[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      posts.push(await benchPost(b, base, server.child.pid!));
      log(`  POST round ${i + 1}: ${f0(posts.at(-1)!.rate)} events/s`);
    }
    const { readerSeen, readerRepeated, readerMissing, acknowledged } = await readerRound(b, base, server.child.pid!);

    const range = await prefill(b);
    const gets: number[] = [];
    for (let i = 0; i < ROUNDS; i++) gets.push(await pageRate(base, { token: b.reader, projectId: b.projectId }, range, 8, SECONDS));
    await stopProcess(server.child);
    server = null;
    const floorGet = await selectFloor(b, range);
    log(`  GET ${f0(median(gets))} events/s; raw SELECT ${f0(floorGet)} rows/s`);

    const floors: number[] = [];
    const unordered: number[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      if (engine === 'sqlite') floors.push(sqliteAppendFloor(dir));
      else {
        floors.push(await pgAppendFloor(b.storeEnv.POSTERN_DATABASE_URL!, 32, true));
        unordered.push(await pgAppendFloor(b.storeEnv.POSTERN_DATABASE_URL!, 32, false));
      }
    }
    log(`  append floor ${f0(median(floors))}/s${unordered.length ? `, unordered ${f0(median(unordered))}/s` : ''}`);
    const rates = posts.map((p) => p.rate);
    const mid = posts[rates.indexOf(median(rates))] ?? posts[0]!;
    return {
      post: median(rates),
      postP99: mid.p99,
      postCores: mid.serverCores,
      appendFloor: median(floors),
      appendFloorUnordered: unordered.length ? median(unordered) : NaN,
      get: median(gets),
      selectFloor: floorGet,
      readerSeen,
      readerMissing,
      readerRepeated,
      acknowledged,
    };
  } finally {
    if (server) await stopProcess(server.child);
    await b.drop();
  }
}

/**
 * A round of its own, not timed: a reader pages from the log's start while the same 32 clients
 * write, and must see each event once.
 */
async function readerRound(
  b: Bench,
  base: string,
  pid: number,
): Promise<Pick<EngineResult, 'readerSeen' | 'readerRepeated' | 'readerMissing' | 'acknowledged'>> {
  let writing = true;
  const reader = pageAll(b, base, () => !writing);
  await benchPost(b, base, pid);
  writing = false;
  const seen = await reader;
  const unique = new Set(seen);
  // Every event written by the rounds (201 answers only; none failed) is in the log: count them there.
  const inLog = await countAll(b, base);
  const r = { readerSeen: unique.size, readerRepeated: seen.length - unique.size, readerMissing: inLog - unique.size, acknowledged: inLog };
  log(`  ${b.engine} reader: ${f0(r.readerSeen)} of ${f0(inLog)} events, ${r.readerRepeated} repeated, ${r.readerMissing} missing`);
  return r;
}

/**
 * `--only=post`: the POST /events rows alone, both engines' servers up at once and their rounds
 * taken in turn (SQLite, PostgreSQL, SQLite, …), so a machine shared with other work loads both
 * alike; then each engine's reader round and PostgreSQL's ordered floor. Prints Markdown.
 */
async function runPostOnly(dir: string, pgServer: string): Promise<string> {
  const load0 = loadavg();
  const benches = new Map<StoreEngine, Bench>();
  const servers = new Map<StoreEngine, { child: ChildProcess; url: string }>();
  const posts = new Map<StoreEngine, PostResult[]>(ENGINES.map((e) => [e, []]));
  try {
    for (const engine of ENGINES) {
      const b = await freshStore(engine, dir, pgServer);
      benches.set(engine, b);
      servers.set(engine, await spawnPostern(serverEnv(b, { POSTERN_WORKERS: '2' })));
    }
    const base = (e: StoreEngine) => `${servers.get(e)!.url}/v1`;
    for (let i = 0; i < ROUNDS; i++) {
      for (const engine of ENGINES) {
        posts.get(engine)!.push(await benchPost(benches.get(engine)!, base(engine), servers.get(engine)!.child.pid!));
        log(`  ${engine} POST round ${i + 1}: ${f0(posts.get(engine)!.at(-1)!.rate)} events/s`);
      }
    }
    const readers = new Map<StoreEngine, Awaited<ReturnType<typeof readerRound>>>();
    for (const engine of ENGINES)
      readers.set(engine, await readerRound(benches.get(engine)!, base(engine), servers.get(engine)!.child.pid!));
    for (const [engine, s] of servers) {
      await stopProcess(s.child);
      servers.delete(engine);
    }
    const floors: number[] = [];
    for (let i = 0; i < ROUNDS; i++) floors.push(await pgAppendFloor(benches.get('postgres')!.storeEnv.POSTERN_DATABASE_URL!, 32, true));
    const load1 = loadavg();
    const mid = (e: StoreEngine) => {
      const list = posts.get(e)!;
      const rates = list.map((p) => p.rate);
      return list[rates.indexOf(median(rates))] ?? list[0]!;
    };
    const [s, p] = [mid('sqlite'), mid('postgres')];
    const rounds = (e: StoreEngine) =>
      posts
        .get(e)!
        .map((r) => f0(r.rate))
        .join(', ');
    const reader = (e: StoreEngine) => {
      const r = readers.get(e)!;
      return `${f0(r.readerSeen)} of ${f0(r.acknowledged)} events, ${r.readerRepeated} repeated, ${r.readerMissing} missing`;
    };
    return `POST /events only (\`npm run bench:store -- --only=post\`), ${new Date().toISOString().slice(0, 16)}Z; ${ROUNDS} rounds of ${SECONDS} s per engine, taken in turn; medians.
Machine: ${machine()}; load average ${load0.map((l) => l.toFixed(2)).join(' ')} at the start, ${load1.map((l) => l.toFixed(2)).join(' ')} at the end.

| Benchmark | Postern | Floor, same run | Ratio | Target |
|---|---|---|---|---|
| POST /events, 1 KB + Idempotency-Key, 32 clients, 2 workers: SQLite | ${f0(s.rate)} events/s, p99 ${f1(s.p99)} ms, server ${f1(s.serverCores)} cores (rounds ${rounds('sqlite')}) | — | — | — |
| Same, PostgreSQL | ${f0(p.rate)} events/s, p99 ${f1(p.p99)} ms, server ${f1(p.serverCores)} cores (rounds ${rounds('postgres')}) | raw pg, 32 connections, one transaction per event (key, head row lock, event): ${f0(median(floors))}/s | ${(p.rate / median(floors)).toFixed(2)} of the floor; ${(p.rate / s.rate).toFixed(2)} of SQLite | ≥ 0.5 of the floor; ≥ 0.8 of SQLite |
| A reader paging GET /events while 32 clients POST: SQLite | ${reader('sqlite')} | — | — | 0 and 0 |
| Same, PostgreSQL | ${reader('postgres')} | — | — | 0 and 0 |
`;
  } finally {
    for (const s of servers.values()) await stopProcess(s.child);
    for (const b of benches.values()) await b.drop();
  }
}

/** Every event in the log, counted by paging it to the end. */
async function countAll(b: Bench, base: string): Promise<number> {
  const ids = await pageAll(b, base, () => true);
  return new Set(ids).size;
}

interface MailResult {
  page: number;
  pageImap: number;
  index: number;
  indexMessages: number;
}

/** bench/mail.ts's page and first-index rows with the store on `engine`. */
async function runMail(engine: StoreEngine, pgServer: string): Promise<MailResult> {
  log(`${engine}: mail (bench/mail.ts --only=read,index)`);
  const db = engine === 'postgres' ? await emptyDatabase(pgServer) : null;
  try {
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', join(ROOT, 'bench/mail.ts'), '--only=read,index', '--json', ...(QUICK ? ['--quick'] : [])],
      {
        env: { ...process.env, ...(db ? { POSTERN_BENCH_DATABASE_URL: db.url } : {}) },
        stdio: ['ignore', 'pipe', 'inherit'],
      },
    );
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    const [code] = (await once(child, 'exit')) as [number | null];
    if (code !== 0) throw new Error(`bench/mail.ts exited with ${code}`);
    const r = JSON.parse(out.trim().split('\n').at(-1)!) as Record<string, number>;
    return { page: r.pageHttp!, pageImap: r.pageImap!, index: r.indexMs!, indexMessages: r.indexMessages! };
  } finally {
    await db?.drop();
  }
}

async function main(): Promise<void> {
  const env = await up();
  if (!env.postgres) throw new Error('the mail environment has no PostgreSQL');
  const dir = mkdtempSync(join(tmpdir(), 'postern-bench-store-'));
  if (ONLY?.includes('post')) {
    try {
      process.stdout.write(`${await runPostOnly(dir, env.postgres.url)}\n`);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
    return;
  }
  const events = new Map<StoreEngine, EngineResult>();
  const mail = new Map<StoreEngine, MailResult>();
  try {
    if (want('events')) for (const engine of ENGINES) events.set(engine, await runEngine(engine, dir, env.postgres.url));
    if (want('mail')) for (const engine of ENGINES) mail.set(engine, await runMail(engine, env.postgres.url));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  const s = events.get('sqlite');
  const p = events.get('postgres');
  const ms = mail.get('sqlite');
  const mp = mail.get('postgres');
  const ratio = (a: number | undefined, b: number | undefined) => (a !== undefined && b !== undefined ? (a / b).toFixed(2) : '—');
  const rows: string[] = [];
  if (s && p) {
    rows.push(
      `| POST /events, 1 KB + Idempotency-Key, 32 clients, 2 workers: SQLite | ${f0(s.post)} events/s, p99 ${f1(s.postP99)} ms, server ${f1(s.postCores)} cores | raw better-sqlite3, one transaction per event (key, head, event): ${f0(s.appendFloor)}/s | ${ratio(s.post, s.appendFloor)} | — |`,
      `| Same, PostgreSQL | ${f0(p.post)} events/s, p99 ${f1(p.postP99)} ms, server ${f1(p.postCores)} cores | raw pg, 32 connections, one transaction per event (key, head row lock, event): ${f0(p.appendFloor)}/s (without the head's lock: ${f0(p.appendFloorUnordered)}/s) | ${ratio(p.post, p.appendFloor)} of the floor; ${ratio(p.post, s.post)} of SQLite | ≥ 0.5 of the floor; ≥ 0.8 of SQLite |`,
      `| GET /events?limit=500, 1.4 KB events, 8 clients: SQLite | ${f0(s.get)} events/s | raw SELECT of 500 + join: ${f0(s.selectFloor)} rows/s | ${ratio(s.get, s.selectFloor)} | — |`,
      `| Same, PostgreSQL | ${f0(p.get)} events/s | raw pg SELECT of 500 + join, 8 connections: ${f0(p.selectFloor)} rows/s | ${ratio(p.get, p.selectFloor)}; ${ratio(p.get, s.get)} of SQLite | — |`,
      `| A reader paging GET /events while the POST rounds write: SQLite | ${f0(s.readerSeen)} of ${f0(s.acknowledged)} events, ${s.readerRepeated} repeated, ${s.readerMissing} missing | — | — | 0 and 0 |`,
      `| Same, PostgreSQL | ${f0(p.readerSeen)} of ${f0(p.acknowledged)} events, ${p.readerRepeated} repeated, ${p.readerMissing} missing | — | — | 0 and 0 |`,
    );
  }
  if (ms && mp) {
    rows.push(
      `| 50-message page of a ${QUICK ? '2,000' : '10,000'}-message label, 1 client: SQLite | median ${f1(ms.page)} ms | raw imapflow UID FETCH of the same 50: ${f1(ms.pageImap)} ms | ${ratio(ms.page, ms.pageImap)} | ≤ 1.2 |`,
      `| Same, PostgreSQL | median ${f1(mp.page)} ms | same floor, its run: ${f1(mp.pageImap)} ms | ${ratio(mp.page, mp.pageImap)} | ≤ 1.2 |`,
      `| First index of a ${f0(ms.indexMessages)}-message inbox: SQLite | ${f1(ms.index / 1000)} s | — | — | — |`,
      `| Same, PostgreSQL | ${f1(mp.index / 1000)} s (${f0(mp.indexMessages)} messages) | SQLite, same run: ${f1(ms.index / 1000)} s | ${ratio(mp.index, ms.index)} of SQLite's time | — |`,
    );
  }
  const md = `## Store engines: SQLite and PostgreSQL (issue 17)

Machine: ${machine()}. PostgreSQL ${await serverVersion(env.postgres.url)}: the test environment's private cluster (scripts/mailenv.ts), \`fsync = off\` as it is set up for tests, so neither engine waits on the disk (SQLite runs \`synchronous = NORMAL\` in WAL).
Command: \`npm run bench:store${QUICK ? ' -- --quick' : ''}\`, ${new Date().toISOString().slice(0, 10)}; ${ROUNDS} round(s) of ${SECONDS} s, medians. Servers are \`postern serve\` processes; the load generator, PostgreSQL and Dovecot share the same cores.

| Benchmark | Postern | Floor, same run | Ratio | Target |
|---|---|---|---|---|
${rows.join('\n')}
`;
  process.stdout.write(`${md}\n`);
  if (args.has('--write')) log(`wrote ${writeResults('store', md)}`);
}

async function serverVersion(url: string): Promise<string> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    return (await c.query<{ v: string }>("SELECT current_setting('server_version') AS v")).rows[0]!.v;
  } finally {
    await c.end();
  }
}

runBench(main);
