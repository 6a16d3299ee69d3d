// What every test needs: the mail environment this run uses, a Postern instance on a store of
// its own (a SQLite file, or with POSTERN_TEST_STORE=postgres a fresh PostgreSQL database), and
// fresh projects, members, inboxes and credentials so tests never share data.
import { randomBytes } from 'node:crypto';
import { request } from 'node:http';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import { pino } from 'pino';
import { addUser, posternEnv, type MailEnv } from '../../scripts/mailenv.ts';
import { loadConfig, type Config } from '../../lib/config.ts';
import { openPostern, type Postern } from '../../lib/server.ts';
import { freePort, spawnPostern, stopProcess, type Listening } from './processes.ts';
import { emptyDatabase } from '../store-contract/postgres.ts';

export function mailEnv(): MailEnv {
  const raw = process.env.POSTERN_TEST_ENV;
  if (!raw) throw new Error('the mail environment is not up: run the tests through mocha (test/helpers/setup.ts)');
  return JSON.parse(raw) as MailEnv;
}

/**
 * The service master key of this test run: one for every instance and CLI call, so instances
 * sharing a store open each other's keys. Random per run: no fixed key to leak into a deployment.
 */
export const TEST_MASTER_KEY = randomBytes(32).toString('base64');

/** Environment variables that point Postern at this run's mail environment. */
export function envVars(env: MailEnv, extra: Record<string, string> = {}): Record<string, string> {
  return {
    POSTERN_PORT: '0',
    ...posternEnv(env),
    POSTERN_MASTER_KEY: TEST_MASTER_KEY,
    POSTERN_LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? 'warn',
    // Tests count watchers and connections: only test/mail/mail-watch.test.ts watches every inbox.
    POSTERN_WATCH: 'off',
    ...extra,
  };
}

/** The engine the suite serves from: POSTERN_TEST_STORE=postgres, or SQLite. */
export const TEST_STORE: 'sqlite' | 'postgres' = process.env.POSTERN_TEST_STORE === 'postgres' ? 'postgres' : 'sqlite';

export interface TestStore {
  /** What points Postern at it: POSTERN_DB, or POSTERN_DATABASE_URL. */
  env: Record<string, string>;
  drop(): Promise<void>;
}

/** A new, empty store on the suite's engine; `dir` holds the SQLite file. */
export async function newStore(dir: string): Promise<TestStore> {
  if (TEST_STORE === 'sqlite') return { env: { POSTERN_DB: join(dir, 'postern.db') }, drop: async () => undefined };
  const db = await emptyDatabase();
  return { env: { POSTERN_DATABASE_URL: db.url }, drop: db.drop };
}

export interface TestServer {
  postern: Postern;
  /** What points another instance or a staff command at this one's store (POSTERN_DB or POSTERN_DATABASE_URL). */
  storeEnv: Record<string, string>;
  url: string;
  /** {base_url}: …/v1 */
  base: string;
  /** {app_url}: …/api/v1 */
  app: string;
  dir: string;
  close(): Promise<void>;
}

/** `logFile`: where Postern's log goes instead of stdout (a test that reads what was logged). */
export async function startPostern(extra: Record<string, string> = {}, options: { logFile?: string } = {}): Promise<TestServer> {
  const dir = mkdtempSync(join(tmpdir(), 'postern-test-'));
  // A test that names a store (another instance's) shares it; otherwise the server gets its own.
  const shared = 'POSTERN_DB' in extra || 'POSTERN_DATABASE_URL' in extra;
  const store: TestStore = shared ? { env: {}, drop: async () => undefined } : await newStore(dir);
  const config: Config = loadConfig(envVars(mailEnv(), { ...store.env, ...extra }));
  const postern = await openPostern(
    config,
    options.logFile
      ? pino({ level: config.logLevel }, pino.destination({ dest: options.logFile, sync: true }))
      : pino({ level: config.logLevel }),
  );
  const { url } = await postern.listen();
  return {
    postern,
    storeEnv: config.databaseUrl ? { POSTERN_DATABASE_URL: config.databaseUrl } : { POSTERN_DB: config.dbFile },
    url,
    base: `${url}/v1`,
    app: `${url}/api/v1`,
    dir,
    async close() {
      await postern.close();
      await store.drop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

export const unique = (label = 'u') => `${label}-${randomBytes(5).toString('hex')}`;

export interface TestInbox {
  id: string;
  address: string;
  imapUser: string;
  imapPassword: string;
}

/** A project with one member; helpers to add inboxes (with real Dovecot users) and credentials. */
export async function newProject(s: TestServer) {
  const { admin } = s.postern;
  const project = await admin.createProject(unique('project'));
  const member = await admin.addMember(project.id, `${unique('member')}@example.org`);
  return {
    projectId: project.id,
    memberId: member.id,
    async inbox(options: { mode?: 'compatible' | 'zero-access'; role?: string; memberId?: string } = {}): Promise<TestInbox> {
      const imapUser = `${unique('box')}@${mailEnv().domain}`;
      const imapPassword = randomBytes(12).toString('hex');
      await addUser(mailEnv(), imapUser, imapPassword);
      const { id } = await admin.addInbox({ projectId: project.id, imapUser, addresses: [imapUser], mode: options.mode ?? 'compatible' });
      await admin.grant(options.memberId ?? member.id, id, options.role ?? 'owner');
      return { id, address: imapUser, imapUser, imapPassword };
    },
    async member(): Promise<string> {
      return (await admin.addMember(project.id, `${unique('member')}@example.org`)).id;
    },
    async token(scopes: string[], options: { inboxes?: string[]; expiresInSeconds?: number; memberId?: string } = {}): Promise<string> {
      const t = await admin.createToken({
        memberId: options.memberId ?? member.id,
        scopes,
        ...(options.inboxes ? { inboxes: options.inboxes } : {}),
        ...(options.expiresInSeconds !== undefined ? { expiresInSeconds: options.expiresInSeconds } : {}),
      });
      return t.token;
    },
    async session(options: { expiresInSeconds?: number; memberId?: string } = {}): Promise<string> {
      return (await admin.createSession(options.memberId ?? member.id, options.expiresInSeconds)).token;
    },
  };
}

export type TestProject = Awaited<ReturnType<typeof newProject>>;

/** fetch with a bearer token or a session header. */
export function call(url: string, init: RequestInit & { token?: string; session?: string } = {}) {
  const headers = new Headers(init.headers);
  if (init.token) headers.set('authorization', `Bearer ${init.token}`);
  if (init.session) headers.set('x-svc-token', init.session);
  return fetch(url, { ...init, headers });
}

/** The JSON body of a response that must be JSON. */
export async function json<T = Record<string, unknown>>(res: Response): Promise<T> {
  expect(res.headers.get('content-type'), `content type of ${res.url}`).to.match(/^application\/json/);
  return (await res.json()) as T;
}

/** Asserts an error response: the status, a body of exactly { error }, never cacheable. */
export async function expectError(res: Response, status: number, pattern?: RegExp): Promise<string> {
  const text = await res.text();
  expect(res.status, `status of ${res.url}: ${text}`).to.equal(status);
  expect(res.headers.get('cache-control'), `cache-control of ${res.url}`).to.equal('no-store');
  const body = JSON.parse(text) as Record<string, unknown>;
  expect(Object.keys(body)).to.deep.equal(['error']);
  expect(body.error).to.be.a('string').and.not.equal('');
  if (pattern) expect(body.error).to.match(pattern);
  return body.error as string;
}

/**
 * A request on a connection of its own (not the keep-alive pool `call` uses), so a clustered
 * server hands it to whichever worker is next. Times out after 10 s rather than hanging a test.
 */
export function callFresh(
  method: string,
  url: string,
  token?: string,
  body?: unknown,
  headers: Record<string, string> = {},
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(url, {
      method,
      agent: false,
      headers: {
        ...(token ? { authorization: `Bearer ${token}` } : {}),
        ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
        ...headers,
      },
    });
    req.on('response', (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (text += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
    });
    req.on('error', reject);
    req.setTimeout(10_000, () => req.destroy(new Error(`${method} ${url}: no answer in 10 s`)));
    req.end(body === undefined ? undefined : JSON.stringify(body));
  });
}

export interface ClusterFixture {
  /** An in-process instance on the same store, for administration (projects, tokens, inboxes). */
  admin: TestServer;
  /** `postern serve` with POSTERN_WORKERS=2 on that store; every request under test goes here. */
  cluster: Listening;
  /** The cluster's token base address. */
  base: string;
}

/** For a describe block: a two-worker `postern serve` on a fresh store, stopped after the block. */
export function clusterFixture(extra: Record<string, string> = {}): ClusterFixture {
  const f = {} as ClusterFixture;
  before(async () => {
    f.admin = await startPostern();
    // A fixed port, as in production: with port 0, workers started after all others died would
    // get a new one (the primary lets the shared handle go with the last worker).
    const port = String(await freePort());
    f.cluster = await spawnPostern(envVars(mailEnv(), { ...f.admin.storeEnv, POSTERN_WORKERS: '2', POSTERN_PORT: port, ...extra }));
    f.base = `${f.cluster.url}/v1`;
  });
  after(async () => {
    if (f.cluster) await stopProcess(f.cluster.child);
    if (f.admin) await f.admin.close();
  });
  return f;
}
