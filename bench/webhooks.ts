// Webhook delivery benchmarks (docs/webhooks.md), each next to a baseline measured in the same run:
//   1. Latency: 200 events/s published (POST /events) to a project with 10 endpoints; from the
//      moment the POST was sent to the moment each receiver got the event: p50 and p99.
//   2. Throughput: 4,000 events waiting for one fast endpoint (disabled while they were
//      published, then enabled): deliveries/s until all arrived. Baseline: a bare Node loop
//      POSTing the same bodies to the same receiver, as many at a time as Postern's cap.
//   3. Isolation: (1) again with an 11th endpoint that never answers (each attempt runs into the
//      15 s timeout): the 10 others' p99 against (1)'s.
// Postern is a `postern serve` process on SQLite (or PostgreSQL); the receivers and the publisher
// are this process, on loopback. On SQLite no mail environment is needed: only the event log is used.
//
//   npm run bench:webhooks                 # prints the results as Markdown
//   npm run bench:webhooks -- --write      # also replaces the webhooks section of bench/RESULTS.md
//   npm run bench:webhooks -- --quick      # shorter rounds, for a smoke run
//   npm run bench:webhooks -- --postgres   # the store on PostgreSQL (the mail environment's cluster)
//   npm run bench:webhooks -- --throughput-only   # only (2)
//   npm run bench:webhooks -- --rounds=7   # rounds (default 3); a 4,000 backlog takes under a second, so more rounds steady its median
//   BENCH_PROFILE_DIR=/tmp/prof npm run bench:webhooks   # the server writes a CPU profile there
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { Agent, createServer, request, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { openStore } from '../adapters/store/open.ts';
import { loadConfig } from '../lib/config.ts';
import { MasterKey } from '../lib/crypto/master-key.ts';
import { spawnPostern, stopProcess } from '../test/helpers/processes.ts';
import { emptyDatabase } from '../test/store-contract/postgres.ts';
import { up } from '../scripts/mailenv.ts';
import { layout } from '../scripts/mailenv/layout.ts';
import { cpuSeconds, f0, f1, listenLoopback, log, machine, median, NO_RATE_LIMITS, pct, runBench, sleep } from './common.ts';
import { minimalDomain } from '../test/helpers/minimal-domain.ts';
import { writeResults } from './results.ts';

const args = new Set(process.argv.slice(2));
const QUICK = args.has('--quick');
/** `--throughput-only`: just (2), e.g. to profile it alone. */
const THROUGHPUT_ONLY = args.has('--throughput-only');
const POSTGRES = args.has('--postgres');
const ROUNDS = Number(process.argv.find((a) => a.startsWith('--rounds='))?.slice(9) ?? (QUICK ? 1 : 3));
const RATE = 200;
const SECONDS = QUICK ? 4 : 10;
const ENDPOINTS = 10;
const BACKLOG = QUICK ? 1000 : 4000;
const CONCURRENCY = 8;
const MASTER_KEY = MasterKey.generate();
const PAYLOAD = 'p'.repeat(500);
const now = () => performance.timeOrigin + performance.now();

/** Receivers on one server, by path: each records when it got which event. */
class Receivers {
  private server: Server | null = null;
  base = '';
  /** path → arrival times (ms) minus the `t` the event carries. */
  readonly latencies = new Map<string, number[]>();
  readonly counts = new Map<string, number>();
  /** Paths that never answer. */
  readonly hanging = new Set<string>();
  private readonly held = new Set<ServerResponse>();

  async start(): Promise<void> {
    this.server = createServer((req, res) => void this.handle(req, res));
    this.server.keepAliveTimeout = 5000;
    this.base = await listenLoopback(this.server);
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    let body = '';
    for await (const c of req) body += c;
    const path = req.url ?? '';
    if (this.hanging.has(path)) {
      this.held.add(res);
      res.on('close', () => this.held.delete(res));
      return;
    }
    const at = now();
    const t = (JSON.parse(body) as { data: { data?: { t?: number } } }).data.data?.t;
    if (typeof t === 'number') {
      let list = this.latencies.get(path);
      if (!list) this.latencies.set(path, (list = []));
      list.push(at - t);
    }
    this.counts.set(path, (this.counts.get(path) ?? 0) + 1);
    res.writeHead(204).end();
  }

  reset(): void {
    this.latencies.clear();
    this.counts.clear();
  }

  async close(): Promise<void> {
    for (const r of this.held) r.destroy();
    this.server?.closeAllConnections();
    this.server?.close();
  }
}

interface Setup {
  url: string;
  pid: number;
  token: string;
  stop: () => Promise<void>;
}

async function setup(dir: string): Promise<Setup> {
  let storeEnv: Record<string, string> = { POSTERN_DB: join(dir, `webhooks-${Date.now()}.db`) };
  let drop = async (): Promise<void> => {};
  if (POSTGRES) {
    const env = await up();
    if (!env.postgres) throw new Error('the mail environment has no PostgreSQL');
    const db = await emptyDatabase(env.postgres.url);
    storeEnv = { POSTERN_DATABASE_URL: db.url };
    drop = db.drop;
  }
  const store = await openStore(loadConfig(storeEnv));
  let token: string;
  try {
    const { admin, events } = minimalDomain(store);
    const { id: projectId } = await admin.createProject('bench');
    const { id: memberId } = await admin.addMember(projectId, 'bench@example.org');
    token = (await admin.createToken({ memberId, scopes: ['events:write', 'events:read', 'project:read', 'webhooks:write'] })).token;
    await events.registerType(projectId, {
      name: 'ext.bench.happened',
      description: 'benchmark event',
      data: [
        { name: 'payload', type: 'string' },
        { name: 't', type: 'integer' },
      ],
    });
  } finally {
    await store.close();
  }
  const profile = process.env.BENCH_PROFILE_DIR ? ['--cpu-prof', `--cpu-prof-dir=${process.env.BENCH_PROFILE_DIR}`] : [];
  const server = await spawnPostern(
    {
      ...NO_RATE_LIMITS,
      POSTERN_PORT: '0',
      POSTERN_LOG_LEVEL: 'warn',
      POSTERN_IMAP_MASTER_PASSWORD: 'unused',
      POSTERN_MASTER_KEY: MASTER_KEY,
      POSTERN_MAX_CONNECTIONS_PER_ADDRESS: '0',
      POSTERN_EVENTS_SETTLE_MS: '0',
      POSTERN_WEBHOOK_ALLOW_HTTP_LOOPBACK: '1',
      POSTERN_WEBHOOK_ALLOW: '127.0.0.1/32',
      POSTERN_WEBHOOK_CONCURRENCY: String(CONCURRENCY),
      ...storeEnv,
    },
    profile,
  );
  return {
    url: `${server.url}/v1`,
    pid: server.child.pid!,
    token,
    stop: async () => {
      await stopProcess(server.child);
      await drop();
    },
  };
}

const agent = new Agent({ keepAlive: true, maxSockets: 64 });

function send(method: string, url: string, token: string | null, body?: unknown): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const u = new URL(url);
    const data = body === undefined ? undefined : JSON.stringify(body);
    const req = request(
      {
        agent,
        method,
        host: u.hostname,
        port: u.port,
        path: u.pathname + u.search,
        headers: {
          ...(token ? { authorization: `Bearer ${token}` } : {}),
          ...(data ? { 'content-type': 'application/json', 'content-length': Buffer.byteLength(data) } : {}),
        },
      },
      (res) => {
        let text = '';
        res.on('data', (c: Buffer) => (text += c.toString()));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
      },
    );
    req.on('error', reject);
    req.end(data);
  });
}

async function hook(s: Setup, url: string): Promise<string> {
  const r = await send('POST', `${s.url}/webhooks`, s.token, { url, types: ['ext.bench.*'] });
  if (r.status !== 201) throw new Error(`POST /webhooks: ${r.status} ${r.body}`);
  return (JSON.parse(r.body) as { id: string }).id;
}

async function remove(s: Setup, id: string): Promise<void> {
  await send('DELETE', `${s.url}/webhooks/${id}`, s.token);
}

const publishOne = (s: Setup) =>
  send('POST', `${s.url}/events`, s.token, { type: 'ext.bench.happened', data: { payload: PAYLOAD, t: Math.round(now()) } });

/** Publishes RATE events/s for `seconds`, open loop (each on its tick, whatever the answers). */
async function publish(s: Setup, seconds: number): Promise<number> {
  const total = RATE * seconds;
  const start = now();
  const sent: Array<Promise<unknown>> = [];
  for (let i = 0; i < total; i++) {
    const due = start + (i * 1000) / RATE;
    const wait = due - now();
    if (wait > 0) await sleep(wait);
    sent.push(
      publishOne(s).then((r) => {
        if (r.status !== 201) throw new Error(`POST /events: ${r.status} ${r.body}`);
      }),
    );
  }
  await Promise.all(sent);
  return total;
}

async function until(what: string, done: () => boolean, timeoutMs = 120_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!done()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

interface LatencyResult {
  p50: number;
  p99: number;
  delivered: number;
  serverCores: number;
}

/** (1) and (3): 200 events/s to the 10 endpoints (and a hanging one when `hang`). */
async function latency(s: Setup, rx: Receivers, hang: boolean): Promise<LatencyResult> {
  const paths = Array.from({ length: ENDPOINTS }, (_, i) => `/fast-${i}-${Date.now()}`);
  const ids = [];
  for (const p of paths) ids.push(await hook(s, `${rx.base}${p}`));
  const hangPath = `/hang-${Date.now()}`;
  if (hang) {
    rx.hanging.add(hangPath);
    ids.push(await hook(s, `${rx.base}${hangPath}`));
  }
  rx.reset();
  const cpu0 = cpuSeconds(s.pid);
  const started = now();
  const total = await publish(s, SECONDS);
  await until('every endpoint got every event', () => paths.every((p) => (rx.counts.get(p) ?? 0) >= total));
  const cores = (cpuSeconds(s.pid) - cpu0) / ((now() - started) / 1000);
  const all = paths.flatMap((p) => rx.latencies.get(p) ?? []);
  for (const id of ids) await remove(s, id);
  return { p50: median(all), p99: pct(all, 0.99), delivered: all.length, serverCores: cores };
}

/**
 * CPU seconds of the env's PostgreSQL server so far: its postmaster and every backend it runs
 * (the store's share of the two cores; 0 on SQLite). Backends that ended meanwhile are missed.
 */
function postgresCpuSeconds(): number {
  if (!POSTGRES) return 0;
  const postmaster = Number(readFileSync(layout().postgresPidFile, 'utf8').split('\n')[0]);
  let total = cpuSeconds(postmaster);
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const ppid = Number(readFileSync(`/proc/${entry}/stat`, 'utf8').split(') ')[1]!.split(' ')[1]);
      if (ppid === postmaster) total += cpuSeconds(Number(entry));
    } catch {
      // Gone meanwhile.
    }
  }
  return total;
}

/** (2): a backlog of BACKLOG events to one fast endpoint; deliveries/s until all arrived. */
async function throughput(s: Setup, rx: Receivers): Promise<{ rate: number; cpuMs: number; pgCpuMs: number; bodies: string[] }> {
  const path = `/bulk-${Date.now()}`;
  const id = await hook(s, `${rx.base}${path}`);
  await send('PATCH', `${s.url}/webhooks/${id}`, s.token, { enabled: false });
  for (let i = 0; i < BACKLOG; i += 50) await Promise.all(Array.from({ length: Math.min(50, BACKLOG - i) }, () => publishOne(s)));
  rx.reset();
  const cpu0 = cpuSeconds(s.pid);
  const pgCpu0 = postgresCpuSeconds();
  const started = now();
  await send('PATCH', `${s.url}/webhooks/${id}`, s.token, { enabled: true });
  await until('the backlog delivered', () => (rx.counts.get(path) ?? 0) >= BACKLOG);
  const rate = BACKLOG / ((now() - started) / 1000);
  const cpuMs = ((cpuSeconds(s.pid) - cpu0) * 1000) / BACKLOG;
  const pgCpuMs = ((postgresCpuSeconds() - pgCpu0) * 1000) / BACKLOG;
  // The same bodies for the baseline: what GET /events serves, wrapped as Postern wraps them.
  const page = await send('GET', `${s.url}/events?types=ext.bench.happened&limit=500`, s.token);
  const events = (JSON.parse(page.body) as { events: Array<{ type: string; time: string }> }).events;
  await remove(s, id);
  return {
    rate,
    cpuMs,
    pgCpuMs,
    bodies: events.map((e) => JSON.stringify({ type: e.type, timestamp: e.time, data: { ...e, cursor: 'x'.repeat(60) } })),
  };
}

/** The baseline of (2): a bare loop POSTing `bodies` round-robin, CONCURRENCY at a time, keep-alive. */
async function bareLoop(rx: Receivers, bodies: string[]): Promise<number> {
  const path = `/bare-${Date.now()}`;
  const u = new URL(`${rx.base}${path}`);
  const bare = new Agent({ keepAlive: true, maxSockets: CONCURRENCY });
  let next = 0;
  const post = (body: string) =>
    new Promise<void>((resolve, reject) => {
      const req = request(
        {
          agent: bare,
          method: 'POST',
          host: u.hostname,
          port: u.port,
          path,
          headers: {
            'content-type': 'application/json',
            'content-length': Buffer.byteLength(body),
            'webhook-id': 'evt_x',
            'webhook-timestamp': '0',
            'webhook-signature': 'v1,x',
          },
        },
        (res) => {
          res.resume();
          res.on('end', resolve);
        },
      );
      req.on('error', reject);
      req.end(body);
    });
  const started = now();
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next < BACKLOG) {
        const i = next++;
        await post(bodies[i % bodies.length]!);
      }
    }),
  );
  const rate = BACKLOG / ((now() - started) / 1000);
  bare.destroy();
  return rate;
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'postern-bench-webhooks-'));
  const rx = new Receivers();
  await rx.start();
  const s = await setup(dir);
  const calm: LatencyResult[] = [];
  const hung: LatencyResult[] = [];
  const rates: number[] = [];
  const cpus: number[] = [];
  const pgCpus: number[] = [];
  const load0 = loadavg()[0]!;
  const bare: number[] = [];
  try {
    for (let round = 1; round <= ROUNDS; round++) {
      if (!THROUGHPUT_ONLY) {
        log(`round ${round}: latency`);
        calm.push(await latency(s, rx, false));
      }
      log(`round ${round}: throughput`);
      const t = await throughput(s, rx);
      rates.push(t.rate);
      cpus.push(t.cpuMs);
      pgCpus.push(t.pgCpuMs);
      bare.push(await bareLoop(rx, t.bodies));
      if (!THROUGHPUT_ONLY) {
        log(`round ${round}: latency with a hanging endpoint`);
        hung.push(await latency(s, rx, true));
      }
    }
  } finally {
    await s.stop();
    await rx.close();
    agent.destroy();
    rmSync(dir, { recursive: true, force: true });
  }
  const load1 = loadavg()[0]!;
  const m = (xs: LatencyResult[], k: keyof LatencyResult) => median(xs.map((x) => x[k]));
  const rate = median(rates);
  const bareRate = median(bare);
  const ratio = rate / bareRate;
  const engine = POSTGRES ? "PostgreSQL (the mail environment's cluster, fsync off)" : 'SQLite';
  const flags = [
    QUICK ? '--quick' : '',
    POSTGRES ? '--postgres' : '',
    THROUGHPUT_ONLY ? '--throughput-only' : '',
    ROUNDS !== (QUICK ? 1 : 3) ? `--rounds=${ROUNDS}` : '',
  ]
    .filter(Boolean)
    .join(' ');
  const met = (ok: boolean) => (ok ? 'met' : '**not met**');
  const rows = [
    THROUGHPUT_ONLY
      ? null
      : `| Event appended → receiver got it, ${RATE} events/s to ${ENDPOINTS} endpoints (${f0(RATE * ENDPOINTS)} deliveries/s), ${SECONDS} s | p50 ${f1(m(calm, 'p50'))} ms, p99 ${f1(m(calm, 'p99'))} ms over ${f0(m(calm, 'delivered'))} deliveries; server ${f1(m(calm, 'serverCores'))} cores | — | — | p99 < 500 ms: ${met(m(calm, 'p99') < 500)} |`,
    `| Sustained deliveries to one fast endpoint (a backlog of ${f0(BACKLOG)}, ${CONCURRENCY} at a time) | ${f0(rate)} deliveries/s (rounds: ${rates.map(f0).join(', ')}); server CPU ${median(cpus).toFixed(3)} ms per delivery${POSTGRES ? `, PostgreSQL's ${median(pgCpus).toFixed(3)} ms` : ''} | a bare Node loop POSTing the same bodies to the same receiver, ${CONCURRENCY} at a time, keep-alive: ${f0(bareRate)}/s (${bare.map(f0).join(', ')}) | ${ratio.toFixed(2)} | ≥ 0.7: ${met(ratio >= 0.7)} |`,
    THROUGHPUT_ONLY
      ? null
      : `| The first row with an 11th endpoint that never answers (15 s timeout each attempt) | the other 10: p50 ${f1(m(hung, 'p50'))} ms, p99 ${f1(m(hung, 'p99'))} ms | the first row's p99: ${f1(m(calm, 'p99'))} ms | p99 ×${(m(hung, 'p99') / m(calm, 'p99')).toFixed(2)} | unmoved, p99 < 500 ms: ${met(m(hung, 'p99') < 500)} |`,
  ].filter((r): r is string => r !== null);
  const md = `## Webhooks (issue 18), ${POSTGRES ? 'PostgreSQL' : 'SQLite'}

Machine: ${machine()}, shared with other sessions; load average ${load0.toFixed(2)} at the start, ${load1.toFixed(2)} at the end. Postern: one \`postern serve\` process on ${engine}; the receivers and the publisher are the benchmark's process; loopback.
Command: \`npm run bench:webhooks${flags ? ` -- ${flags}` : ''}\`, ${new Date().toISOString().slice(0, 10)}; ${ROUNDS} round(s), medians of the rounds.

| Benchmark | Postern (median) | Baseline, same run | Ratio | Target |
|---|---|---|---|---|
${rows.join('\n')}

Notes:
- Latency is measured from the moment the publisher sent the POST /events, so it includes the append; the receiver reads the event's \`t\` from the body.
- Every delivery is a durable row made when the event is read for the endpoint (naming the event by log position), leased to the process as it is made or claimed in a batch sized to the endpoint's pace, and settled in a write batched every 20 ms (lib/webhooks/dispatcher.ts). Each attempt reads its body from the log (a batch at a time), checks the address (a name's verdict is kept 5 s), signs (HMAC-SHA256) and mints the event's cursor: the figures include all of that. Connections (undici) are kept alive per origin and checked address, like the baseline's.
- Server CPU per delivery is the \`postern serve\` process's user and system time over the throughput row, divided by the backlog (on PostgreSQL, with the cluster's postmaster and backends' beside it, which share the same cores); the baseline's process also runs the receivers, so it has no such figure to set beside it.
`;
  process.stdout.write(md);
  if (args.has('--write')) log(`written to ${writeResults(POSTGRES ? 'webhooks-postgres' : 'webhooks', md)}`);
}

runBench(main);
