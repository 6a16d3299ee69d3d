// Backup, restore and moving a store between engines (docs/deployment.md, "Backup and
// restore" and "From one machine to several"): a SQLite backup taken while a server writes, a
// PostgreSQL database through pg_dump and pg_restore, and `postern admin export` from SQLite
// imported into PostgreSQL (and back). Each copy is served by a new Postern and must answer as the
// original did: the same events with the same ids and cursors (which continue), the same bearer
// token, the same keys (a message opens with the member's key, byte for byte), the same key backup.
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { expect } from 'chai';
import { epochKeys, openMessage } from '../../docs/examples/open-message.ts';
import { openDb } from '../../adapters/store/sqlite/db.ts';
import { DUMP_LEFT_OUT, DUMP_TABLES } from '../../adapters/store/rows/dump.ts';
import { backupStore } from '../../adapters/store/portable.ts';
import { postgresBinDir } from '../../scripts/mailenv/services/postgres.ts';
import { inboxMessages, putKey, memberKeyPair } from '../helpers/crypto-fixtures.ts';
import { register } from '../helpers/events-helpers.ts';
import { call, envVars, json, mailEnv, newProject, startPostern, type TestServer } from '../helpers/harness.ts';
import { append, mailApp } from '../helpers/mail-fixtures.ts';
import { runPostern, type PosternRun } from '../helpers/processes.ts';
import { emptyDatabase, freshDatabase } from '../store-contract/postgres.ts';

const execFileP = promisify(execFile);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Every server here reads its own events at once (no settle time) and watches nothing. */
const SERVE = { POSTERN_EVENTS_SETTLE_MS: '0' };

/** What a test made in a store, and how to ask a server on it (or on a copy) about it. */
interface Seeded {
  projectId: string;
  inboxId: string;
  msgId: string;
  token: string;
  session: string;
  memberKey: Awaited<ReturnType<typeof memberKeyPair>>['privateKey'];
  idempotencyKey: string;
  keyedEventId: string;
}

/** What a server says of the seeded data: equal on the original and on every faithful copy. */
interface Observed {
  eventIds: string[];
  /** After each of the first events, the cursor a page ending there returns. */
  cursors: string[];
  /** The event ids after the second cursor: a reader resuming there gets these. */
  resumed: string[];
  epochFingerprints: string[];
  wrappedDek: string;
  opened: string;
  keyBackup: unknown;
  replay: unknown;
}

const TYPE = 'ext.backup.happened';

async function publish(
  base: string,
  token: string,
  headers: Record<string, string> = {},
): Promise<{ status: number; body: { id: string; cursor?: string } }> {
  const res = await call(`${base}/events`, {
    method: 'POST',
    token,
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify({ type: TYPE }),
  });
  return { status: res.status, body: (await res.json()) as { id: string; cursor?: string } };
}

/** A project with an inbox holding a message, a member key, two epochs, a key backup and some events. */
async function seed(s: TestServer): Promise<Seeded> {
  const p = await newProject(s);
  const inbox = await p.inbox();
  const token = await p.token(['messages:read', 'events:write', 'events:read', 'project:read']);
  const session = await p.session();
  const user = await memberKeyPair();
  expect((await putKey(s, session, user.armoredPublic)).status).to.equal(200);
  const backup = await call(`${s.app}/me/key-backup`, {
    method: 'PUT',
    session,
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ blob: 'c2VhbGVkLWtleQ', replaces: 0 }),
  });
  expect(backup.status, await backup.clone().text()).to.equal(200);
  const client = await mailApp(inbox);
  try {
    await append(client, 'INBOX', { subject: 'kept across the move', body: 'the same bytes after a restore' });
  } finally {
    await client.logout();
  }
  const [m] = await inboxMessages(s, token, inbox.id);
  // Read once: the message's key is made now, sealed to epoch 1; then a second epoch.
  expect((await call(`${s.base}/inboxes/${inbox.id}/messages/${m!.id}`, { token })).status).to.equal(200);
  await s.postern.admin.rotateKey(inbox.id);
  await register(s, token, { name: TYPE, description: 'a test event' });
  for (let i = 0; i < 4; i++) expect((await publish(s.base, token)).status).to.equal(201);
  const idempotencyKey = `backup-${Date.now()}`;
  const keyed = await publish(s.base, token, { 'idempotency-key': idempotencyKey });
  expect(keyed.status).to.equal(201);
  return {
    projectId: p.projectId,
    inboxId: inbox.id,
    msgId: m!.id,
    token,
    session,
    memberKey: user.privateKey,
    idempotencyKey,
    keyedEventId: keyed.body.id,
  };
}

async function page(base: string, token: string, query: string): Promise<{ events: Array<{ id: string }>; cursor: string }> {
  const res = await call(`${base}/events?${query}`, { token });
  const text = await res.text();
  expect(res.status, `GET /events?${query}: ${text}`).to.equal(200);
  return JSON.parse(text) as { events: Array<{ id: string }>; cursor: string };
}

/** Every event of the project, in order, paged as a reader would. */
async function allEvents(url: string, token: string): Promise<{ ids: string[]; cursor: string }> {
  const ids: string[] = [];
  let after = '';
  for (;;) {
    const p = await page(`${url}/v1`, token, `limit=100${after ? `&after=${after}` : ''}`);
    ids.push(...p.events.map((e) => e.id));
    if (p.events.length < 100) return { ids, cursor: p.cursor };
    after = p.cursor;
  }
}

async function observe(url: string, x: Seeded): Promise<Observed> {
  const base = `${url}/v1`;
  const app = `${url}/api/v1`;
  const { ids } = await allEvents(url, x.token);
  const cursors: string[] = [];
  for (const n of [1, 2, 3]) cursors.push((await page(base, x.token, `limit=${n}`)).cursor);
  const resumed = (await page(base, x.token, `limit=100&after=${cursors[1]}`)).events.map((e) => e.id);
  const session = { baseUrl: app, headers: { 'x-svc-token': x.session }, memberKey: x.memberKey };
  const keys = await epochKeys(session, x.inboxId);
  const detail = await json<{ wrappedDek: string }>(await call(`${base}/inboxes/${x.inboxId}/messages/${x.msgId}`, { token: x.token }));
  const opened = Buffer.from(await openMessage(session, x.inboxId, x.msgId, keys)).toString('base64');
  const keyBackup = await json(await call(`${app}/me/key-backup`, { session: x.session }));
  // The idempotency record came along: the same key answers with the first event.
  const again = await publish(base, x.token, { 'idempotency-key': x.idempotencyKey });
  expect(again.status).to.equal(200);
  return {
    eventIds: ids,
    cursors,
    resumed,
    epochFingerprints: [...keys.entries()].map(([epoch, k]) => `${epoch}:${k.getFingerprint()}`),
    wrappedDek: detail.wrappedDek,
    opened,
    keyBackup,
    replay: again.body,
  };
}

/** A new event on the copy: readers resuming at the copy's last cursor get it, and only it. */
async function expectLogContinues(url: string, x: Seeded): Promise<void> {
  const before = await allEvents(url, x.token);
  const next = await publish(`${url}/v1`, x.token);
  expect(next.status).to.equal(201);
  const after = await page(`${url}/v1`, x.token, `limit=100&after=${before.cursor}`);
  expect(after.events.map((e) => e.id)).to.deep.equal([next.body.id]);
  expect(after.cursor).to.equal(next.body.cursor);
}

const cli = (args: string[], store: Record<string, string>): Promise<PosternRun> => runPostern(args, envVars(mailEnv(), store));

async function cliOk(args: string[], store: Record<string, string>): Promise<Record<string, unknown>> {
  const r = await cli(args, store);
  expect(r.code, `${args.join(' ')}\n${r.stdout}${r.stderr}`).to.equal(0);
  expect(r.stdout.trim().split('\n'), 'exactly one line of JSON').to.have.length(1);
  return r.out;
}

/** An export's rows, without its header (which says when and from which engine). */
const exportRows = (file: string): string[] => readFileSync(file, 'utf8').trimEnd().split('\n').slice(1);

/** An export's row lines by table. */
function byTable(lines: string[]): Map<string, string[]> {
  const tables = new Map<string, string[]>();
  for (const line of lines) {
    const { table } = JSON.parse(line) as { table?: string };
    if (table) tables.set(table, [...(tables.get(table) ?? []), line]);
  }
  return tables;
}

describe('store backup, restore and moving between engines', function () {
  this.timeout(300_000);
  let dir: string;
  const cleanup: Array<() => Promise<void>> = [];

  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'postern-backup-'));
  });
  after(async () => {
    for (const c of cleanup.reverse()) await c().catch(() => undefined);
    rmSync(dir, { recursive: true, force: true });
  });

  /** A server on `store` (POSTERN_DB or POSTERN_DATABASE_URL), closed after the block. */
  async function serveOn(store: Record<string, string>): Promise<TestServer> {
    const s = await startPostern({ ...SERVE, ...store });
    cleanup.push(() => s.close());
    return s;
  }

  async function newDatabase(): Promise<{ POSTERN_DATABASE_URL: string }> {
    const db = await emptyDatabase();
    cleanup.push(db.drop);
    return { POSTERN_DATABASE_URL: db.url };
  }

  it('backs up a SQLite store while a server writes: the copy serves the same events, tokens and keys, and its log continues', async () => {
    const store = { POSTERN_DB: join(dir, 'live.db') };
    const s = await serveOn(store);
    const x = await seed(s);
    const seeded = await observe(s.url, x);

    // A writer publishing without pause, before, during and after the backup.
    const acked: string[] = [];
    let stop = false;
    const writer = (async () => {
      while (!stop) {
        const r = await publish(s.base, x.token);
        expect(r.status).to.equal(201);
        acked.push(r.body.id);
      }
    })();
    while (acked.length < 20) await sleep(10);
    // First in this process, so "before" is exact: every event acknowledged before the call is
    // committed, and the last of them are still only in the -wal file (the server checkpoints
    // every 500 ms), which a copy of the database file alone would miss.
    const direct = join(dir, 'direct.db');
    const ackedBeforeDirect = acked.length;
    expect(await backupStore({ dbFile: store.POSTERN_DB, databaseUrl: null, databasePoolSize: 1 }, direct)).to.deep.equal({
      store: 'sqlite',
      file: direct,
      bytes: statSync(direct).size,
    });
    // Then as staff run it: another process, the server writing all along.
    const copy = join(dir, 'copy.db');
    const ackedBeforeCli = acked.length;
    const out = await cliOk(['admin', 'backup', '--to', copy], store);
    const ackedDuring = acked.length - ackedBeforeCli;
    const atEnd = acked.length;
    while (acked.length < atEnd + 5) await sleep(10);
    stop = true;
    await writer;
    expect(out).to.deep.equal({ store: 'sqlite', file: copy, bytes: statSync(copy).size });
    expect(ackedDuring, 'the server wrote while the backup ran').to.be.greaterThan(0);
    // Never over an existing file: a usage error, the file untouched.
    const again = await cli(['admin', 'backup', '--to', copy], store);
    expect(again.code).to.equal(2);
    expect(again.out.error).to.match(/exists/);
    expect(statSync(copy).size).to.equal(out.bytes);

    const original = await observe(s.url, x);
    for (const [file, ackedBefore] of [
      [direct, ackedBeforeDirect],
      [copy, ackedBeforeCli],
    ] as const) {
      const restored = await serveOn({ POSTERN_DB: file });
      const fromCopy = await observe(restored.url, x);
      // A snapshot: every event acknowledged before the backup started, in the same order with
      // the same ids (and so positions: the cursors match), and nothing the original lacks.
      expect(fromCopy.eventIds.slice(seeded.eventIds.length, seeded.eventIds.length + ackedBefore), file).to.deep.equal(
        acked.slice(0, ackedBefore),
      );
      expect(fromCopy.eventIds, file).to.deep.equal(original.eventIds.slice(0, fromCopy.eventIds.length));
      expect(fromCopy.eventIds.length, 'the copy is a snapshot taken before the last writes').to.be.below(original.eventIds.length);
      expect({ ...fromCopy, eventIds: [], resumed: [] }).to.deep.equal({ ...seeded, eventIds: [], resumed: [] });
      expect(fromCopy.resumed).to.deep.equal(fromCopy.eventIds.slice(2, 102));
      await expectLogContinues(restored.url, x);
    }
  });

  it('restores a PostgreSQL store through pg_dump and pg_restore, and refuses `postern admin backup` there with the way to do it', async () => {
    const bin = postgresBinDir();
    expect(bin, 'Debian PostgreSQL binaries under /usr/lib/postgresql/*/bin').to.be.a('string');
    const source = await newDatabase();
    const s = await serveOn(source);
    const x = await seed(s);
    const original = await observe(s.url, x);

    const refused = await cli(['admin', 'backup', '--to', join(dir, 'pg-refused.db')], source);
    expect(refused.code).to.equal(2);
    expect(refused.out.error).to.match(/PostgreSQL.*pg_dump/);

    // As docs/deployment.md says: a custom-format dump, restored into a new, empty database.
    const dump = join(dir, 'store.pgdump');
    await execFileP(join(bin!, 'pg_dump'), ['--format=custom', `--file=${dump}`, `--dbname=${source.POSTERN_DATABASE_URL}`]);
    const target = await newDatabase();
    await execFileP(join(bin!, 'pg_restore'), ['--no-owner', '--exit-on-error', `--dbname=${target.POSTERN_DATABASE_URL}`, dump]);
    const restored = await serveOn(target);
    expect(await observe(restored.url, x)).to.deep.equal(original);
    await expectLogContinues(restored.url, x);
  });

  it('moves a SQLite store to PostgreSQL with export and import, and back: served from PostgreSQL it answers as before', async () => {
    const sqlite = { POSTERN_DB: join(dir, 'move.db') };
    const s = await serveOn(sqlite);
    const x = await seed(s);
    const original = await observe(s.url, x);
    // Writers stopped first, as the move is done.
    await s.close();
    cleanup.pop();

    const file = join(dir, 'move.jsonl');
    const exported = await cliOk(['admin', 'export', '--to', file], sqlite);
    expect(exported.store).to.equal('sqlite');
    expect(exported.bytes).to.equal(statSync(file).size);
    const rows = exported.rows as Record<string, number>;
    for (const table of [
      'projects',
      'tokens',
      'sessions',
      'epoch_keys',
      'member_keys',
      'member_key_blobs',
      'message_keys',
      'events',
      'event_idempotency',
      'event_types',
    ]) {
      expect(rows[table], table).to.be.greaterThan(0);
    }

    const pg = await newDatabase();
    const imported = await cliOk(['admin', 'import', '--from', file], pg);
    expect(imported).to.deep.equal({ store: 'postgresql', file, rows });
    const onPg = await serveOn(pg);
    expect(await observe(onPg.url, x)).to.deep.equal(original);
    await expectLogContinues(onPg.url, x);
    await onPg.close();
    cleanup.pop();

    // And back to SQLite: the same rows, table by table and row by row.
    const back = join(dir, 'back.jsonl');
    expect((await cliOk(['admin', 'export', '--to', back], pg)).store).to.equal('postgresql');
    const sqlite2 = { POSTERN_DB: join(dir, 'back.db') };
    await cliOk(['admin', 'import', '--from', back], sqlite2);
    const again = join(dir, 'again.jsonl');
    await cliOk(['admin', 'export', '--to', again], sqlite2);
    expect(exportRows(again)).to.deep.equal(exportRows(back));
    // What PostgreSQL got is what SQLite had: the directory, the keys and the key backups row for
    // row, and the log with the one event appended since at its end.
    const [first, moved] = [byTable(exportRows(file)), byTable(exportRows(back))];
    for (const table of [
      'event_log',
      'projects',
      'members',
      'inboxes',
      'inbox_addresses',
      'grants',
      'tokens',
      'token_inboxes',
      'sessions',
      'epoch_keys',
      'member_keys',
      'member_key_blobs',
      'message_keys',
      'event_types',
      'event_idempotency',
    ]) {
      // A session's last use moves when it is used: serving from PostgreSQL used it.
      const unused = (lines: string[] | undefined) =>
        table === 'sessions' ? lines?.map((l) => l.replace(/"last_used_at":(?:\d+|null)/, '"last_used_at":"(used)"')) : lines;
      expect(unused(moved.get(table)), table).to.deep.equal(unused(first.get(table)));
    }
    expect(moved.get('events')!.slice(0, -1)).to.deep.equal(first.get('events'));
  });

  it('refuses an import into a store that is not empty, and a file cut short leaves nothing behind', async () => {
    const source = { POSTERN_DB: join(dir, 'refuse-source.db') };
    const s = await serveOn(source);
    const p = await newProject(s);
    await p.token(['events:read']);
    const file = join(dir, 'refuse.jsonl');
    await cliOk(['admin', 'export', '--to', file], source);

    // Into the store it came from, and into a PostgreSQL database already imported into.
    const self = await cli(['admin', 'import', '--from', file], source);
    expect(self.code).to.equal(1);
    expect(self.out.error).to.match(/not empty/);
    const pg = await newDatabase();
    await cliOk(['admin', 'import', '--from', file], pg);
    const twice = await cli(['admin', 'import', '--from', file], pg);
    expect(twice.code).to.equal(1);
    expect(twice.out.error).to.match(/not empty/);

    // A file without its last line (a copy cut short) is refused, and the store stays empty: the
    // whole file imports afterwards.
    const lines = readFileSync(file, 'utf8').trimEnd().split('\n');
    const cut = join(dir, 'cut.jsonl');
    writeFileSync(cut, `${lines.slice(0, -1).join('\n')}\n`);
    for (const target of [{ POSTERN_DB: join(dir, 'cut.db') }, await newDatabase()]) {
      const r = await cli(['admin', 'import', '--from', cut], target);
      expect(r.code, r.stdout).to.equal(1);
      expect(r.out.error).to.match(/cut short/);
      await cliOk(['admin', 'import', '--from', file], target);
    }

    // A file that is not an export is a usage error found before the store is opened: no SQLite
    // store is made at the path.
    const notExport = join(dir, 'not-export.jsonl');
    writeFileSync(notExport, '{"hello":"world"}\n');
    const nowhere = join(dir, 'never-made.db');
    const wrong = await cli(['admin', 'import', '--from', notExport], { POSTERN_DB: nowhere });
    expect(wrong.code).to.equal(2);
    expect(wrong.out.error).to.match(/not a Postern store export/);
    expect(existsSync(nowhere)).to.equal(false);

    // An export never overwrites: a usage error.
    const over = await cli(['admin', 'export', '--to', file], source);
    expect(over.code).to.equal(2);
    expect(over.out.error).to.match(/exists/);
  });

  it('carries every table of both engines but the few it names as left out, with the same columns', async () => {
    const carried = new Map(DUMP_TABLES.map((t) => [t.name, Object.keys(t.columns).sort()]));
    const expected = (name: string) => carried.get(name) ?? (name in DUMP_LEFT_OUT ? 'left out' : 'missing');
    // SQLite, as a new store is migrated.
    const db = openDb(join(dir, 'schema.db'));
    try {
      const tables = (db.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").pluck().all() as string[]).sort();
      for (const name of tables) {
        const want = expected(name);
        expect(want, `SQLite table ${name}`).to.not.equal('missing');
        if (Array.isArray(want))
          expect(
            (db.prepare('SELECT name FROM pragma_table_info(?)').pluck().all(name) as string[]).sort(),
            `SQLite ${name}'s columns`,
          ).to.deep.equal(want);
      }
      for (const name of carried.keys()) expect(tables, `SQLite has ${name}`).to.include(name);
    } finally {
      db.close();
    }
    // PostgreSQL, as a new database is migrated. PostgreSQL's event_idempotency has no position
    // (its dump joins the event) and its event_log keeps the head as well: the rest must match.
    const pg = await freshDatabase(1);
    cleanup.push(pg.drop);
    const { rows } = await pg.pool.query<{ table_name: string; column_name: string }>(
      "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = 'public'",
    );
    const pgTables = new Map<string, string[]>();
    for (const r of rows) pgTables.set(r.table_name, [...(pgTables.get(r.table_name) ?? []), r.column_name]);
    // mail_messages.search is PostgreSQL's text index (SQLite's is its own tables, left out).
    const engineOnly: Record<string, string[]> = {
      event_idempotency: [],
      event_log: ['last_position', 'last_recorded_at', 'only_row'],
      mail_messages: ['search'],
    };
    for (const [name, columns] of pgTables) {
      const want = expected(name);
      expect(want, `PostgreSQL table ${name}`).to.not.equal('missing');
      if (!Array.isArray(want)) continue;
      const extra = engineOnly[name] ?? [];
      const dumped = name === 'event_idempotency' ? want.filter((c) => c !== 'position') : want;
      expect(columns.filter((c) => !extra.includes(c)).sort(), `PostgreSQL ${name}'s columns`).to.deep.equal(dumped);
    }
    for (const name of carried.keys()) expect([...pgTables.keys()], `PostgreSQL has ${name}`).to.include(name);
  });
});
