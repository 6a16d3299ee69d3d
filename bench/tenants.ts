// Tenant isolation (issue 28): two projects on one `postern serve` process. Project B runs a
// steady, modest workload; project A abuses everything at once. B is measured alone first, then
// with A abusing, in the same run and the same process, round after round:
//   B (open loop, each call timed from the moment it was due, so a stalled server shows):
//     - pages of a label of some hundreds of messages (GET …/labels/{label}/messages, walking `before`);
//     - a metadata search (GET …/search?from=…, a sender 1/97 of the inbox has);
//     - POST /events of its own type, delivered by webhook to a healthy receiver on loopback
//       (delivery latency: from the POST being due to the receiver getting it).
//   A (one token, from another loopback address than B, so a per-address cap is not B's):
//     - MCP batches: POST /v1/mcp with a JSON-RPC batch of many search_messages calls;
//     - worst-case searches over HTTP; in both, each of from/to/cc/subject holds as many
//       one-letter prefix phrases as it may (256 characters: 128 phrases);
//     - webhook endpoints (the project's cap, 100) half to a receiver that accepts and never
//       answers, half to hosts that never resolve (with POSTERN_WEBHOOK_DNS_SERVERS, when this
//       Postern has that setting: a name server on loopback that never answers; without it, names
//       under `.invalid`, which the system's resolver refuses), fed by A's own events;
//     - a flood: many keep-alive connections listing a page as fast as they are answered.
// Reported: B's p50/p99 per call alone and under abuse (target: p99 within 2× of alone), B's
// webhook delivery p50/p99, and A's answers by class (target: 4xx/429, never a 5xx).
// Every load is bounded in time (A's requests still unanswered a few seconds after its phase are
// cut); everything is on loopback.
//
//   npm run bench:tenants                        # prints the results as Markdown (SQLite)
//   npm run bench:tenants -- --postgres          # the store on PostgreSQL (the env's cluster)
//   npm run bench:tenants -- --write             # also replaces the tenants section of bench/RESULTS.md
//   npm run bench:tenants -- --rounds=3 --seconds=15   # the defaults: rounds of B alone then B abused
//   npm run bench:tenants -- --quick             # 1 round of 6 s, smaller inboxes: a smoke run
//   npm run bench:tenants -- --a-messages=2000 --b-messages=500   # the inboxes' sizes
//   npm run bench:tenants -- --flood=64 --batch=100   # A's flood connections, MCP calls per batch
//   npm run bench:tenants -- --env=POSTERN_RATE_REQUESTS=200   # a Postern setting (only one this Postern has)
//   npm run bench:tenants -- "--node-args=--cpu-prof --cpu-prof-dir=/tmp/prof"   # node flags for the server (a profile)
//   npm run bench:tenants -- --env=POSTERN_LOG_LEVEL=info --server-log=/tmp/server.log   # each request's time as the server saw it
//   npm run bench:tenants -- --probe=/tmp/probe   # where B's calls waited: accepted, parsed, answered (bench/server-probe.mjs)
import { createSocket } from 'node:dgram';
import { once } from 'node:events';
import { createWriteStream, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { Agent, createServer, request, type IncomingMessage, type ServerResponse } from 'node:http';
import { createServer as createTcpServer, type Socket } from 'node:net';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { pino } from 'pino';
import { loadConfig, SETTINGS } from '../lib/config.ts';
import { openPostern } from '../lib/server.ts';
import { addUser, up } from '../scripts/mailenv.ts';
import { spawnPostern } from '../test/helpers/processes.ts';
import { emptyDatabase } from '../test/store-contract/postgres.ts';
import { benchServerEnv, f0, f1, listenLoopback, log, machine, median, now, pct, runBench, seed, sleep } from './common.ts';
import { closedLoop, type LoadResult, type Request } from './load.ts';
import { writeResults } from './results.ts';

const argv = process.argv.slice(2);
const args = new Set(argv);
const opt = (name: string, fallback: number): number => {
  const raw = argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);
  const n = raw === undefined ? fallback : Number(raw);
  if (!Number.isFinite(n) || n < 0) throw new Error(`--${name} must be a number, got ${raw}`);
  return n;
};
const QUICK = args.has('--quick');
const POSTGRES = args.has('--postgres');
const ROUNDS = opt('rounds', QUICK ? 1 : 3);
const SECONDS = opt('seconds', QUICK ? 6 : 15);
const A_MESSAGES = opt('a-messages', QUICK ? 500 : 2000);
const B_MESSAGES = opt('b-messages', QUICK ? 300 : 500);
/** B's calls per second, each kind on its own schedule. */
const B_LIST = opt('b-list', 20);
const B_SEARCH = opt('b-search', 4);
const B_EVENTS = opt('b-events', 10);
/** A: flood connections, search connections, MCP connections and calls per batch, events per second. */
const FLOOD = opt('flood', 64);
const A_SEARCHES = opt('a-searches', 8);
const A_MCP = opt('a-mcp', 4);
// 100: the most the MCP SDK's transport takes in one batch (it refuses more with 400).
const BATCH = opt('batch', 100);
const A_EVENTS = opt('a-events', 50);
const A_HOOKS = opt('a-hooks', 100);
/** A B call unanswered after this long is counted as a timeout at this latency. */
const B_TIMEOUT_MS = 30_000;
/** A's requests still unanswered this long after its phase are cut. */
const A_GRACE_MS = 5_000;
const PAGE = 50;
const B_ADDRESS = '127.0.0.3';
const A_ADDRESS = '127.0.0.2';
const KNOWN = new Set(SETTINGS.map((s) => s.name));
const EXTRA_ENV = Object.fromEntries(
  argv
    .filter((a) => a.startsWith('--env='))
    .map((a) => {
      const [name, ...rest] = a.slice(6).split('=');
      if (!KNOWN.has(name!)) throw new Error(`--env: this Postern has no setting ${name}`);
      return [name!, rest.join('=')];
    }),
);
const TYPE = 'ext.tenant.ticked';
/** Node flags for the server (a profiler, say: `--node-args='--cpu-prof --cpu-prof-dir=/tmp/prof'`). */
const NODE_ARGS = (argv.find((a) => a.startsWith('--node-args='))?.slice(12) ?? '').split(' ').filter(Boolean);
/**
 * --probe=FILE: the server writes its event loop's delay and, for each of B's requests, when it was
 * accepted, parsed and answered (bench/server-probe.mjs) to FILE; this side writes each of B's
 * calls (due, sent, answered) and the phases to FILE.bench, on the same clock.
 */
const PROBE = argv.find((a) => a.startsWith('--probe='))?.slice(8);
const probeLines: string[] = [];
const probe = (o: Record<string, unknown>) => {
  if (PROBE) probeLines.push(JSON.stringify(o));
};
if (PROBE) {
  // This process's own event loop too: a late B call may be the load generator's lateness.
  const h = monitorEventLoopDelay({ resolution: 10 });
  h.enable();
  setInterval(() => {
    probe({ benchLoop: now(), max: h.max / 1e6 });
    h.reset();
  }, 250).unref();
  NODE_ARGS.push('--import', new URL('./server-probe.mjs', import.meta.url).href);
  process.env.POSTERN_BENCH_PROBE = PROBE;
  process.env.POSTERN_BENCH_PROBE_FROM = '127.0.0.3';
}

// ---------------------------------------------------------------------------------------------
// Loopback servers: B's healthy receiver, A's receiver that never answers, a name server that never answers.

/** Records, per path, each delivery's arrival minus the `t` (ms, wall clock) the event carries. */
class Receiver {
  readonly arrivals = new Map<number, number>();
  private readonly server = createServer((req, res) => void this.handle(req, res));
  base = '';

  async start(): Promise<void> {
    this.server.keepAliveTimeout = 5000;
    this.base = await listenLoopback(this.server);
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    let body = '';
    for await (const c of req) body += c;
    const at = now();
    // `t`: when B sent the event, in microseconds (the type's fields are integers).
    const t = (JSON.parse(body) as { data: { data?: { t?: number } } }).data.data?.t;
    // A retry of an event already counted keeps its first arrival.
    if (typeof t === 'number' && !this.arrivals.has(t)) this.arrivals.set(t, at);
    res.writeHead(204).end();
  }

  close(): void {
    this.server.closeAllConnections();
    this.server.close();
  }
}

/** Accepts connections and never answers (never even reads): each attempt runs into Postern's timeout. */
async function blackHole(): Promise<{ url: string; close: () => void }> {
  const held = new Set<Socket>();
  const server = createTcpServer((s) => {
    held.add(s);
    s.on('error', () => {});
    s.on('close', () => held.delete(s));
    s.pause();
  });
  const url = await listenLoopback(server);
  return {
    url,
    close: () => {
      for (const s of held) s.destroy();
      server.close();
    },
  };
}

/** A UDP "name server" that reads every query and never answers. */
async function silentDns(): Promise<{ address: string; close: () => void }> {
  const sock = createSocket('udp4');
  sock.on('message', () => {});
  sock.bind(0, '127.0.0.1');
  await once(sock, 'listening');
  return { address: `127.0.0.1:${sock.address().port}`, close: () => sock.close() };
}

// ---------------------------------------------------------------------------------------------
// B's calls: node's client from B's own address, open loop.

const bAgent = new Agent({ keepAlive: true, maxSockets: 128, localAddress: B_ADDRESS });
const aAgent = new Agent({ keepAlive: true, maxSockets: 16, localAddress: A_ADDRESS });

interface Outcome {
  status: number;
  body: string;
}

/** One request; status 0 if it failed or took over `timeoutMs` (then cut). */
function call(
  agent: Agent,
  base: string,
  token: string,
  method: string,
  path: string,
  body: unknown,
  timeoutMs: number,
  trace?: Record<string, unknown>,
): Promise<Outcome> {
  return new Promise((resolve) => {
    const u = new URL(base + path);
    const data = body === undefined ? undefined : JSON.stringify(body);
    const req = request(
      {
        agent,
        method,
        host: u.hostname,
        port: u.port,
        path: u.pathname + u.search,
        headers: {
          authorization: `Bearer ${token}`,
          ...(trace ? { 'x-request-id': `bench-${String(trace.id)}` } : {}),
          ...(data ? { 'content-type': 'application/json', 'content-length': Buffer.byteLength(data) } : {}),
        },
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (text += c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
        res.on('error', () => resolve({ status: 0, body: '' }));
      },
    );
    // --probe: whether the call opened a connection, and when its handshake completed (this side).
    if (trace)
      req.once('socket', (sock: Socket) => {
        if (!sock.connecting) return;
        trace.opened = now();
        sock.once('connect', () => (trace.connected = now()));
      });
    let timedOut = false;
    req.setTimeout(timeoutMs, () => {
      timedOut = true;
      req.destroy();
    });
    req.on('error', (err) => resolve({ status: 0, body: timedOut ? `no answer within ${timeoutMs / 1000} s` : err.message }));
    req.end(data);
  });
}

interface Series {
  latencies: number[];
  /** Answers other than the expected status, and calls that failed or timed out (status 0). */
  bad: number;
  firstBad: string | null;
}

const series = (): Series => ({ latencies: [], bad: 0, firstBad: null });

/**
 * Runs `fire` at `rate` per second for `seconds`, each call on its tick whatever the answers (open
 * loop); records each one's latency from its tick. Resolves when every call has answered.
 */
async function openLoop(
  rate: number,
  seconds: number,
  s: Series,
  expect: number,
  fire: (i: number, trace?: Record<string, unknown>) => Promise<Outcome>,
  kind?: string,
): Promise<void> {
  if (rate <= 0) return;
  const total = Math.round(rate * seconds);
  const start = now();
  const calls: Array<Promise<void>> = [];
  for (let i = 0; i < total; i++) {
    const due = start + (i * 1000) / rate;
    const wait = due - now();
    if (wait > 0) await sleep(wait);
    const sent = now();
    const trace = kind && PROBE ? { id: `${kind}-${Math.round(due)}` } : undefined;
    calls.push(
      fire(i, trace).then((o) => {
        const done = now();
        s.latencies.push(done - due);
        if (kind) probe({ b: kind, due, sent, done, st: o.status, ...trace });
        if (o.status !== expect) {
          s.bad++;
          s.firstBad ??= `${o.status} ${o.body.slice(0, 200)}`;
        }
      }),
    );
  }
  await Promise.all(calls);
}

// ---------------------------------------------------------------------------------------------
// The setup: one Postern, two projects, an inbox each.

interface Tenant {
  token: string;
  inboxId: string;
  labelId: string;
}

interface Setup {
  base: string;
  a: Tenant;
  b: Tenant;
  /** Whether the server exited within 30 s of SIGTERM. */
  stop: () => Promise<boolean>;
}

async function setup(dir: string, serverExtra: Record<string, string>): Promise<Setup> {
  const env = await up();
  if (POSTGRES && !env.postgres) throw new Error('the mail environment has no PostgreSQL');
  const db = POSTGRES ? await emptyDatabase(env.postgres.url) : null;
  // Settings this Postern may not have yet (other sessions add them) are set only when it has them.
  const known = (pairs: Record<string, string>) => Object.fromEntries(Object.entries(pairs).filter(([k]) => KNOWN.has(k)));
  const serverEnv = benchServerEnv(env, dir, {
    ...known({ POSTERN_EVENTS_SETTLE_MS: '0', POSTERN_WEBHOOK_ALLOW_HTTP_LOOPBACK: '1', POSTERN_WEBHOOK_ALLOW: '127.0.0.1/32' }),
    // The request budgets at their defaults, whatever the other benches turn off: they are what A must meet.
    ...Object.fromEntries(SETTINGS.filter((x) => x.name.startsWith('POSTERN_RATE_')).map((x) => [x.name, x.default])),
    ...serverExtra,
    ...(db ? { POSTERN_DATABASE_URL: db.url } : {}),
    ...EXTRA_ENV,
  });
  const admin = await openPostern(loadConfig(serverEnv), pino({ level: 'silent' }));
  const tenants: Array<Omit<Tenant, 'labelId'> & { user: string }> = [];
  try {
    for (const name of ['a', 'b']) {
      const project = await admin.admin.createProject(`tenant-${name}`);
      const member = await admin.admin.addMember(project.id, `${name}@example.org`);
      const user = `bench-tenant-${name}-${Date.now().toString(36)}@${env.domain}`;
      await addUser(env, user, 'pw');
      const inbox = await admin.admin.addInbox({ projectId: project.id, imapUser: user, addresses: [user], mode: 'compatible' });
      await admin.admin.grant(member.id, inbox.id, 'owner');
      const token = (
        await admin.admin.createToken({
          memberId: member.id,
          scopes: ['messages:read', 'events:read', 'events:write', 'webhooks:write', 'project:read'],
        })
      ).token;
      tenants.push({ token, inboxId: inbox.id, user });
    }
  } finally {
    await admin.close();
  }
  const [a, b] = tenants as [(typeof tenants)[0], (typeof tenants)[0]];
  log(`seeding ${f0(A_MESSAGES)} messages for A and ${f0(B_MESSAGES)} for B…`);
  await seed(env, a.user, { INBOX: A_MESSAGES }, false);
  await seed(env, b.user, { INBOX: B_MESSAGES }, false);
  const server = await spawnPostern(serverEnv, NODE_ARGS);
  let serverOut = '';
  server.child.stdout?.on('data', (d: Buffer) => (serverOut = (serverOut + d.toString()).slice(-20_000)));
  // --server-log=FILE: the server's whole output (with --env=POSTERN_LOG_LEVEL=info, each request and its ms).
  const serverLog = argv.find((a) => a.startsWith('--server-log='))?.slice(13);
  if (serverLog) server.child.stdout?.pipe(createWriteStream(serverLog));
  const base = `${server.url}/v1`;
  const label = async (t: (typeof tenants)[0], count: number): Promise<string> => {
    const deadline = Date.now() + 5 * 60_000;
    for (;;) {
      const r = await call(bAgent, base, t.token, 'GET', `/inboxes/${t.inboxId}/labels`, undefined, 30_000);
      const inbox =
        r.status === 200
          ? (JSON.parse(r.body) as { labels: Array<{ id: string; name: string; total: number }> }).labels.find((l) => l.name === 'INBOX')
          : undefined;
      if (inbox?.total === count) return inbox.id;
      if (Date.now() > deadline) throw new Error(`the first index did not finish: ${r.status} ${r.body.slice(0, 200)}`);
      await sleep(500);
    }
  };
  return {
    base,
    a: { token: a.token, inboxId: a.inboxId, labelId: await label(a, A_MESSAGES) },
    b: { token: b.token, inboxId: b.inboxId, labelId: await label(b, B_MESSAGES) },
    stop: async () => {
      // Bounded: a server that does not exit within 30 s of SIGTERM is killed, and said so.
      const exited = once(server.child, 'exit');
      server.child.kill('SIGTERM');
      const clean = await Promise.race([exited.then(() => true), sleep(30_000).then(() => false)]);
      if (!clean) {
        log(`the server's last output: ${serverOut.slice(-4000)}`);
        // With --node-args=--report-on-signal: a diagnostic report (its handles) of what kept it up.
        if (NODE_ARGS.includes('--report-on-signal')) {
          server.child.kill('SIGUSR2');
          await sleep(3000);
        }
        server.child.kill('SIGKILL');
        await exited;
      }
      await db?.drop();
      return clean;
    },
  };
}

// ---------------------------------------------------------------------------------------------
// B's workload.

interface BResult {
  list: Series;
  search: Series;
  publish: Series;
  /** Delivery latencies (ms) of the events B published, and how many never arrived in time. */
  delivery: number[];
  undelivered: number;
}

async function runB(s: Setup, rx: Receiver, pages: number[], seconds: number): Promise<BResult> {
  const r: BResult = { list: series(), search: series(), publish: series(), delivery: [], undelivered: 0 };
  const { b } = s;
  const ts: number[] = [];
  await Promise.all([
    openLoop(
      B_LIST,
      seconds,
      r.list,
      200,
      (i, trace) => {
        const before = pages[i % pages.length]!;
        return call(
          bAgent,
          s.base,
          b.token,
          'GET',
          `/inboxes/${b.inboxId}/labels/${b.labelId}/messages?limit=${PAGE}${before ? `&before=${before}` : ''}`,
          undefined,
          B_TIMEOUT_MS,
          trace,
        );
      },
      'list',
    ),
    openLoop(
      B_SEARCH,
      seconds,
      r.search,
      200,
      (i, trace) =>
        call(
          bAgent,
          s.base,
          b.token,
          'GET',
          `/inboxes/${b.inboxId}/search?from=${encodeURIComponent(`sender${i % 97}@example.org`)}&limit=${PAGE}`,
          undefined,
          B_TIMEOUT_MS,
          trace,
        ),
      'search',
    ),
    openLoop(
      B_EVENTS,
      seconds,
      r.publish,
      201,
      (_i, trace) => {
        // A distinct t per event (µs): the receiver keys arrivals by it.
        let t = Math.round(now() * 1000);
        while (ts.includes(t)) t++;
        ts.push(t);
        return call(bAgent, s.base, b.token, 'POST', '/events', { type: TYPE, data: { t } }, B_TIMEOUT_MS, trace);
      },
      'publish',
    ),
  ]);
  // Deliveries still on their way get a bounded wait.
  const deadline = now() + B_TIMEOUT_MS;
  while (ts.some((t) => !rx.arrivals.has(t)) && now() < deadline) await sleep(50);
  for (const t of ts) {
    const at = rx.arrivals.get(t);
    if (at === undefined) r.undelivered++;
    else r.delivery.push(at - t / 1000);
  }
  return r;
}

// ---------------------------------------------------------------------------------------------
// A's abuse.

/** 128 one-letter phrases (256 characters, the most a field may hold): letters and digits the inbox's words begin with, and some they do not. */
const WORST = Array.from({ length: 128 }, (_, i) => 'setmaobpi0123456789cdfghjklnqruvwxyz'[i % 36]).join(' ');
const WORST_QUERY = { from: WORST, to: WORST, cc: WORST, subject: WORST };

interface AResult {
  kind: string;
  statuses: Map<number, number>;
  /** Connections reset or closed under a request, requests cut at the end, calls that failed. */
  dropped: number;
  firstFailure: string | null;
}

const fromLoad = (kind: string, r: LoadResult): AResult => ({
  kind,
  statuses: r.statuses,
  dropped: r.dropped,
  firstFailure: r.firstFailure,
});

const tally = (r: AResult, o: Outcome) => {
  if (o.status === 0) r.dropped++;
  else r.statuses.set(o.status, (r.statuses.get(o.status) ?? 0) + 1);
  if (o.status >= 300 || o.status === 0) r.firstFailure ??= `${o.status} ${o.body.slice(0, 300)}`;
};

/** A setup call of A's (its endpoints made and removed): a 429 from A's own budget is waited out, within a minute. */
async function patiently(s: Setup, method: string, path: string, body: unknown): Promise<Outcome> {
  const deadline = now() + 60_000;
  for (;;) {
    const o = await call(aAgent, s.base, s.a.token, method, path, body, 10_000);
    if (o.status !== 429 || now() > deadline) return o;
    await sleep(1000);
  }
}

/** A's webhook endpoints, made before its abuse starts: half hang on connect (never answered), half on a name that never resolves. */
async function createHooks(s: Setup, hole: string, dns: boolean): Promise<{ ids: string[]; result: AResult }> {
  const result: AResult = {
    kind: 'webhook endpoints created before the phase (POST /webhooks, a 429 waited out)',
    statuses: new Map(),
    dropped: 0,
    firstFailure: null,
  };
  const ids: string[] = [];
  const stamp = Date.now().toString(36);
  for (let i = 0; i < A_HOOKS; i++) {
    const url = i % 2 === 0 ? `${hole}/hang-${i}` : `https://never-${i}-${stamp}.${dns ? 'tenants.example' : 'tenants.invalid'}/hook`;
    const o = await patiently(s, 'POST', '/webhooks', { url, types: [TYPE] });
    tally(result, o);
    if (o.status === 201) ids.push((JSON.parse(o.body) as { id: string }).id);
  }
  return { ids, result };
}

async function abuse(s: Setup, hooks: { ids: string[]; result: AResult }, seconds: number): Promise<AResult[]> {
  const { a, base } = s;
  const auth = { authorization: `Bearer ${a.token}` };
  const root = new URL(base).pathname;
  const ok = (st: number) => st < 300;
  const loads = {
    flood: closedLoop(base, {
      clients: FLOOD,
      seconds,
      localAddress: A_ADDRESS,
      abuse: { graceMs: A_GRACE_MS },
      ok,
      next: () => ({ method: 'GET', path: `${root}/inboxes/${a.inboxId}/labels/${a.labelId}/messages?limit=100`, headers: auth }),
    }),
    search: closedLoop(base, {
      clients: A_SEARCHES,
      seconds,
      localAddress: A_ADDRESS,
      abuse: { graceMs: A_GRACE_MS },
      ok,
      next: () => ({
        method: 'GET',
        path: `${root}/inboxes/${a.inboxId}/search?${new URLSearchParams({ ...WORST_QUERY, limit: '100' })}`,
        headers: auth,
      }),
    }),
    mcp: (() => {
      const batch = JSON.stringify(
        Array.from({ length: BATCH }, (_, i) => ({
          jsonrpc: '2.0',
          id: i + 1,
          method: 'tools/call',
          params: { name: 'search_messages', arguments: { inboxId: a.inboxId, ...WORST_QUERY, limit: 100 } },
        })),
      );
      const req: Request = {
        method: 'POST',
        path: `${root}/mcp`,
        headers: {
          ...auth,
          'content-type': 'application/json',
          accept: 'application/json, text/event-stream',
          'mcp-protocol-version': '2025-11-25',
        },
        body: batch,
      };
      return closedLoop(base, { clients: A_MCP, seconds, localAddress: A_ADDRESS, abuse: { graceMs: A_GRACE_MS }, ok, next: () => req });
    })(),
    events: (async () => {
      const r: AResult = {
        kind: `events published to feed the endpoints (POST /events, ${A_EVENTS}/s)`,
        statuses: new Map(),
        dropped: 0,
        firstFailure: null,
      };
      await openLoop(A_EVENTS, seconds, series(), 201, async () => {
        const o = await call(aAgent, base, a.token, 'POST', '/events', { type: TYPE, data: { t: 0 } }, seconds * 1000 + A_GRACE_MS);
        tally(r, o);
        return o;
      });
      return r;
    })(),
  };
  const results = [
    fromLoad(`request flood (GET a page of 100, ${FLOOD} keep-alive connections)`, await loads.flood),
    fromLoad(`worst-case searches over HTTP (${A_SEARCHES} connections)`, await loads.search),
    fromLoad(`MCP batches of ${f0(BATCH)} search_messages calls (${A_MCP} connections)`, await loads.mcp),
    await loads.events,
    hooks.result,
  ];
  const removed: AResult = {
    kind: 'webhook endpoints removed after the phase (DELETE, a 429 waited out)',
    statuses: new Map(),
    dropped: 0,
    firstFailure: null,
  };
  for (const id of hooks.ids) tally(removed, await patiently(s, 'DELETE', `/webhooks/${id}`, undefined));
  results.push(removed);
  return results;
}

// ---------------------------------------------------------------------------------------------

/** Waits (bounded) until B's list answers as fast as it did alone again: the next round's "alone" is not A's leftovers. */
async function recover(s: Setup, aloneP50: number): Promise<number> {
  const start = now();
  let fast = 0;
  while (fast < 5 && now() - start < 60_000) {
    const t = now();
    await call(
      bAgent,
      s.base,
      s.b.token,
      'GET',
      `/inboxes/${s.b.inboxId}/labels/${s.b.labelId}/messages?limit=${PAGE}`,
      undefined,
      B_TIMEOUT_MS,
    );
    fast = now() - t < Math.max(3 * aloneP50, 20) ? fast + 1 : 0;
    await sleep(100);
  }
  return (now() - start) / 1000;
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'postern-bench-tenants-'));
  const rx = new Receiver();
  await rx.start();
  const hole = await blackHole();
  const dnsServer = await silentDns();
  const dns = KNOWN.has('POSTERN_WEBHOOK_DNS_SERVERS');
  const load0 = loadavg()[0]!;
  const started = new Date();
  const s = await setup(dir, dns ? { POSTERN_WEBHOOK_DNS_SERVERS: dnsServer.address } : {});
  const alone: BResult[] = [];
  const abused: BResult[] = [];
  const aRounds: AResult[][] = [];
  const recoveries: number[] = [];
  let cleanExit = true;
  try {
    // B's type and its endpoint; A's type (its endpoints are made for each abuse phase).
    for (const t of [s.a, s.b]) {
      const r = await call(
        bAgent,
        s.base,
        t.token,
        'POST',
        '/event-types',
        { name: TYPE, description: 'tenant bench tick', data: [{ name: 't', type: 'integer' }] },
        30_000,
      );
      if (r.status !== 201) throw new Error(`POST /event-types: ${r.status} ${r.body}`);
    }
    const hook = await call(bAgent, s.base, s.b.token, 'POST', '/webhooks', { url: `${rx.base}/b`, types: [TYPE] }, 30_000);
    if (hook.status !== 201) throw new Error(`POST /webhooks: ${hook.status} ${hook.body}`);
    // The label's pages, to walk them in turn.
    const pages: number[] = [0];
    for (;;) {
      const r = await call(
        bAgent,
        s.base,
        s.b.token,
        'GET',
        `/inboxes/${s.b.inboxId}/labels/${s.b.labelId}/messages?limit=${PAGE}${pages.at(-1) ? `&before=${pages.at(-1)}` : ''}`,
        undefined,
        30_000,
      );
      const before = (JSON.parse(r.body) as { before?: number }).before;
      if (before === undefined) break;
      pages.push(before);
    }
    // A warm-up of B's workload, unrecorded.
    await runB(s, rx, pages, 2);
    for (let round = 1; round <= ROUNDS; round++) {
      log(`round ${round}: B alone`);
      probe({ phase: `alone ${round}`, at: now() });
      alone.push(await runB(s, rx, pages, SECONDS));
      log(`  list p99 ${f1(pct(alone.at(-1)!.list.latencies, 0.99))} ms`);
      log(`round ${round}: B with A abusing`);
      // A starts a second ahead, so B meets the abuse in full swing.
      probe({ phase: `hooks ${round}`, at: now() });
      const hooks = await createHooks(s, hole.url, dns);
      probe({ phase: `abuse ${round}`, at: now() });
      const a = abuse(s, hooks, SECONDS + 1);
      await sleep(1000);
      probe({ phase: `abused ${round}`, at: now() });
      abused.push(await runB(s, rx, pages, SECONDS));
      log(`  list p99 ${f1(pct(abused.at(-1)!.list.latencies, 0.99))} ms`);
      probe({ phase: `abused end ${round}`, at: now() });
      aRounds.push(await a);
      probe({ phase: `recover ${round}`, at: now() });
      recoveries.push(await recover(s, median(alone.at(-1)!.list.latencies)));
      log(`  recovered in ${f1(recoveries.at(-1)!)} s`);
    }
  } finally {
    cleanExit = await s.stop();
    rx.close();
    hole.close();
    dnsServer.close();
    bAgent.destroy();
    aAgent.destroy();
    rmSync(dir, { recursive: true, force: true });
    if (PROBE) writeFileSync(`${PROBE}.bench`, `${probeLines.join('\n')}\n`);
  }
  const load1 = loadavg()[0]!;

  // B: per call, the median over rounds of each round's p50 and p99.
  const met = (ok: boolean) => (ok ? 'met' : '**not met**');
  const p = (rs: BResult[], pick: (r: BResult) => number[], q: number) => median(rs.map((r) => pct(pick(r), q)));
  const each = (rs: BResult[], pick: (r: BResult) => number[]) => rs.map((r) => f1(pct(pick(r), 0.99))).join(', ');
  const badOf = (rs: BResult[], pick: (r: BResult) => Series) => rs.reduce((n, r) => n + pick(r).bad, 0);
  const bRow = (name: string, rate: string, pick: (r: BResult) => number[], bad: string) => {
    const ratio = p(abused, pick, 0.99) / p(alone, pick, 0.99);
    // Each round's abused p99 over the alone p99 just before it (the host's load drifts between rounds).
    const ratios = abused.map((r, i) => pct(pick(r), 0.99) / pct(pick(alone[i]!), 0.99));
    return `| ${name} | ${rate} | ${f1(p(alone, pick, 0.5))} / ${f1(p(alone, pick, 0.99))} (${each(alone, pick)}) | ${f1(p(abused, pick, 0.5))} / ${f1(p(abused, pick, 0.99))} (${each(abused, pick)}) | ×${ratio.toFixed(2)} | ×${median(ratios).toFixed(2)} (${ratios.map((x) => x.toFixed(1)).join(', ')}) | ${bad} | ≤ ×2: ${met(ratio <= 2)} |`;
  };
  const errs = (pick: (r: BResult) => Series) => `${badOf(alone, pick)} / ${badOf(abused, pick)}`;
  const bRows = [
    bRow(
      `List a page of ${PAGE} (walking the label's ${f0(B_MESSAGES)} messages)`,
      `${B_LIST}/s`,
      (r) => r.list.latencies,
      errs((r) => r.list),
    ),
    bRow(
      `Metadata search (\`from=senderK@example.org\`, first page)`,
      `${B_SEARCH}/s`,
      (r) => r.search.latencies,
      errs((r) => r.search),
    ),
    bRow(
      'Publish an event (POST /events)',
      `${B_EVENTS}/s`,
      (r) => r.publish.latencies,
      errs((r) => r.publish),
    ),
    bRow(
      'Webhook delivery of those events to a healthy receiver (sent → received)',
      `${B_EVENTS}/s`,
      (r) => r.delivery,
      `${alone.reduce((n, r) => n + r.undelivered, 0)} / ${abused.reduce((n, r) => n + r.undelivered, 0)} undelivered`,
    ),
  ];
  const firstBad = [...alone, ...abused].flatMap((r) => [r.list, r.search, r.publish]).find((x) => x.firstBad)?.firstBad;

  // A: every round's answers, summed by kind.
  const kinds = new Map<string, AResult>();
  for (const round of aRounds) {
    for (const r of round) {
      const k = kinds.get(r.kind) ?? { kind: r.kind, statuses: new Map(), dropped: 0, firstFailure: null };
      for (const [st, n] of r.statuses) k.statuses.set(st, (k.statuses.get(st) ?? 0) + n);
      k.dropped += r.dropped;
      k.firstFailure ??= r.firstFailure;
      kinds.set(r.kind, k);
    }
  }
  const count = (r: AResult, test: (st: number) => boolean) => [...r.statuses].reduce((n, [st, c]) => (test(st) ? n + c : n), 0);
  let fiveXX = 0;
  const aRows = [...kinds.values()].map((r) => {
    const five = count(r, (st) => st >= 500);
    fiveXX += five;
    const statuses = [...r.statuses]
      .sort(([x], [y]) => x - y)
      .map(([st, n]) => `${st}: ${f0(n)}`)
      .join(', ');
    return `| ${r.kind} | ${f0(count(r, (st) => st < 300))} | ${f0(count(r, (st) => st >= 400 && st < 500 && st !== 429))} | ${f0(count(r, (st) => st === 429))} | ${five ? `**${f0(five)}**` : '0'} | ${f0(r.dropped)} | ${statuses || '—'} |`;
  });
  // A raw answer's status line and body, without its headers.
  const brief = (raw: string) => {
    const i = raw.indexOf('\r\n\r\n');
    return (i < 0 ? raw : `${raw.slice(0, raw.indexOf('\r\n'))} ${raw.slice(i + 4)}`).replace(/\s+/g, ' ').replace(/`/g, "'").slice(0, 240);
  };
  const failures = [...kinds.values()].filter((r) => r.firstFailure).map((r) => `  - ${r.kind}: \`${brief(r.firstFailure!)}\``);

  const engine = POSTGRES ? "PostgreSQL (the mail environment's cluster, fsync off)" : 'SQLite';
  const flags = argv.filter((a) => a !== '--write').join(' ');
  const md = `## Tenant isolation (issue 28), ${POSTGRES ? 'PostgreSQL' : 'SQLite'}

Machine: ${machine()}, shared with other sessions; load average ${load0.toFixed(2)} at the start, ${load1.toFixed(2)} at the end. One \`postern serve\` process on ${engine}; Dovecot 2.3; loopback: B's calls come from ${B_ADDRESS}, A's from ${A_ADDRESS}.
Command: \`npm run bench:tenants${flags ? ` -- ${flags}` : ''}\`, ${started.toISOString().slice(0, 16).replace('T', ' ')} UTC; ${ROUNDS} round(s) of ${SECONDS} s of B alone, then ${SECONDS} s of B with A abusing; medians of the rounds (each round's p99 in parentheses). Inboxes: A ${f0(A_MESSAGES)} messages, B ${f0(B_MESSAGES)} (INBOX, \`doveadm import\`). Unreachable webhook hosts: ${dns ? 'POSTERN_WEBHOOK_DNS_SERVERS is a name server on loopback that never answers' : 'names under `.invalid` (this Postern has no POSTERN_WEBHOOK_DNS_SERVERS; the system resolver refuses them at once)'}.${
    Object.keys(EXTRA_ENV).length
      ? ` Settings: ${Object.entries(EXTRA_ENV)
          .map(([k, v]) => `${k}=${v}`)
          .join(', ')}.`
      : ''
  }

B, latency in ms from the moment each call was due (open loop):

| B's call | Rate | Alone p50 / p99 | A abusing p50 / p99 | p99 ratio | Median of the rounds' p99 ratios (each round) | Not answered as expected, alone / abused | Target |
|---|---|---|---|---|---|---|---|
${bRows.join('\n')}

A's answers, all rounds (target: refusals, 4xx or 429; a 5xx is a bug):

| A's abuse | 2xx | 4xx | 429 | 5xx | Connections reset or closed, or cut ${A_GRACE_MS / 1000} s after the phase | By status |
|---|---|---|---|---|---|---|
${aRows.join('\n')}

After each abuse phase B's list was back to its alone speed in ${recoveries.map(f1).join(', ')} s (bounded at 60 s).${firstBad ? ` B's first unexpected answer: \`${firstBad.replace(/\s+/g, ' ').replace(/`/g, "'").slice(0, 200)}\`.` : ''}${fiveXX ? ` **A got ${f0(fiveXX)} 5xx answers: each is a bug.**` : ''}${cleanExit ? '' : ' **The server did not exit within 30 s of SIGTERM at the end (killed).**'}
${failures.length ? `A's first answer other than 2xx, by kind:\n${failures.join('\n')}\n` : ''}`;
  process.stdout.write(md);
  if (args.has('--write')) log(`written to ${writeResults(POSTGRES ? 'tenants-postgres' : 'tenants', md)}`);
}

runBench(main);
