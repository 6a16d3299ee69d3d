// Metrics overhead (docs/operations.md, "Metrics"): the list page (50 messages of a label) at 64 keep-alive
// connections, served by `postern serve` with POSTERN_METRICS_LISTEN unset and set, in the same
// run on the same store: rounds alternate off, on, off, on… so the machine's drift (it is shared)
// falls on both. With metrics on, /metrics is scraped every second meanwhile (Prometheus's usual
// interval is 15 s: this is the costlier case). Target: on ≥ 0.95 of off's throughput.
// The inbox is watched (NOTIFY), so a read trusts the index and the request is all Postern's own
// work: the metrics' share of it is as large as it can be.
//
//   npm run bench:metrics                 # prints the results as Markdown
//   npm run bench:metrics -- --write      # also replaces the metrics section of bench/RESULTS.md
//   npm run bench:metrics -- --quick      # one short round each, for a smoke run
import { mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { loadConfig } from '../lib/config.ts';
import { openPostern } from '../lib/server.ts';
import { addUser, up } from '../scripts/mailenv.ts';
import { freePort, spawnPostern, stopProcess } from '../test/helpers/processes.ts';
import { benchServerEnv, cpuSeconds, f0, f1, get, log, machine, median, pct, runBench, seed, settle, sleep } from './common.ts';
import { closedLoop } from './load.ts';
import { writeResults } from './results.ts';

const args = new Set(process.argv.slice(2));
const QUICK = args.has('--quick');
const ROUNDS = QUICK ? 1 : 3;
const SECONDS = QUICK ? 3 : 10;
const WARMUP_SECONDS = QUICK ? 1 : 3;
const CLIENTS = 64;
const MESSAGES = QUICK ? 500 : 2000;
const SCRAPE_MS = 1000;

interface Round {
  metrics: boolean;
  rps: number;
  p99: number;
  failed: number;
  cores: number;
  scrapes: number;
}

/** The inbox's INBOX label once every seeded message is indexed (a minute at most). */
async function indexed(base: string, inboxId: string, auth: Record<string, string>): Promise<{ id: string; total: number }> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    const res = await get(`${base}/inboxes/${inboxId}/labels`, auth);
    if (res.status === 200) {
      const found = (JSON.parse(res.body) as { labels: Array<{ id: string; name: string; total: number }> }).labels.find(
        (l) => l.name === 'INBOX',
      );
      if (found && found.total >= MESSAGES) return found;
    }
    if (Date.now() > deadline) throw new Error(`the inbox was not indexed within a minute: ${res.status} ${res.body.slice(0, 200)}`);
    await sleep(500);
  }
}

async function main(): Promise<void> {
  const env = await up();
  const dir = mkdtempSync(join(tmpdir(), 'postern-bench-metrics-'));
  const serverEnv = benchServerEnv(env, dir, { POSTERN_WATCH: 'notify' });
  try {
    const admin = await openPostern(loadConfig(serverEnv), pino({ level: 'silent' }));
    const project = await admin.admin.createProject('bench-metrics');
    const member = await admin.admin.addMember(project.id, 'bench-metrics@example.org');
    const user = `bench-metrics-${Date.now().toString(36)}@${env.domain}`;
    await addUser(env, user, 'pw-metrics');
    const { id: inboxId } = await admin.admin.addInbox({ projectId: project.id, imapUser: user, addresses: [user], mode: 'compatible' });
    await admin.admin.grant(member.id, inboxId, 'owner');
    const token = (await admin.admin.createToken({ memberId: member.id, scopes: ['messages:read'] })).token;
    await admin.close();
    log(`seeding ${MESSAGES} messages…`);
    await seed(env, user, { INBOX: MESSAGES }, false);
    const auth = { authorization: `Bearer ${token}` };

    const rounds: Round[] = [];
    for (let r = 0; r < ROUNDS * 2; r++) {
      const metrics = r % 2 === 1;
      const metricsPort = await freePort();
      const server = await spawnPostern({ ...serverEnv, ...(metrics ? { POSTERN_METRICS_LISTEN: `127.0.0.1:${metricsPort}` } : {}) });
      try {
        const base = `${server.url}/v1`;
        // The first server fills the index (a 503 while it does); later ones find it filled.
        const inbox = await indexed(base, inboxId, auth);
        const path = `/v1/inboxes/${inboxId}/labels/${inbox.id}/messages?limit=50`;
        const request = { method: 'GET', path, headers: auth };
        const ok = (status: number) => status === 200;
        await closedLoop(server.url, { clients: CLIENTS, seconds: WARMUP_SECONDS, next: () => request, ok });
        await settle();
        let scrapes = 0;
        let scraping = metrics;
        const scraper = (async () => {
          while (scraping) {
            const res = await fetch(`http://127.0.0.1:${metricsPort}/metrics`);
            if (res.status !== 200) throw new Error(`/metrics answered ${res.status}`);
            await res.text();
            scrapes++;
            await sleep(SCRAPE_MS);
          }
        })();
        const cpu0 = cpuSeconds(server.child.pid!);
        const t0 = performance.now();
        const result = await closedLoop(server.url, { clients: CLIENTS, seconds: SECONDS, next: () => request, ok });
        const cores = (cpuSeconds(server.child.pid!) - cpu0) / ((performance.now() - t0) / 1000);
        scraping = false;
        await scraper;
        if (result.failed > 0) log(`  ${result.failed} failed answers, e.g. ${result.firstFailure}`);
        const round: Round = { metrics, rps: result.rate, p99: pct(result.latencies, 0.99), failed: result.failed, cores, scrapes };
        rounds.push(round);
        log(
          `round ${r + 1}/${ROUNDS * 2}, metrics ${metrics ? 'on ' : 'off'}: ${f0(round.rps)} requests/s, p99 ${f1(round.p99)} ms, server ${f1(cores)} cores${metrics ? `, ${scrapes} scrapes` : ''}`,
        );
      } finally {
        await stopProcess(server.child);
      }
    }

    const off = rounds.filter((r) => !r.metrics);
    const on = rounds.filter((r) => r.metrics);
    const offRps = median(off.map((r) => r.rps));
    const onRps = median(on.map((r) => r.rps));
    const ratio = onRps / offRps;
    const list = (xs: Round[]) => xs.map((r) => f0(r.rps)).join(', ');
    const md = [
      '## Metrics overhead (issue 19.4)',
      '',
      `Machine: ${machine()}. Load average at the end: ${loadavg()[0]!.toFixed(2)} (the machine is shared).`,
      `Command: \`npm run bench:metrics${QUICK ? ' -- --quick' : ''}\`, ${new Date().toISOString().slice(0, 10)}. \`postern serve\` (one process) on SQLite, NOTIFY watching (reads trust the index), a label of ${MESSAGES} messages; ${CLIENTS} keep-alive connections in a closed loop for ${SECONDS} s per round after ${WARMUP_SECONDS} s of warm-up; ${ROUNDS} rounds each way, alternating off and on; medians. With metrics on, \`/metrics\` was scraped every ${SCRAPE_MS / 1000} s during the round.`,
      '',
      '| List page (50 messages), 64 connections | Metrics off | Metrics on | On / off | Target |',
      '|---|---|---|---|---|',
      `| Requests/s (rounds) | ${f0(offRps)} (${list(off)}) | ${f0(onRps)} (${list(on)}) | ${ratio.toFixed(3)} | ≥ 0.95 |`,
      `| p99 latency | ${f1(median(off.map((r) => r.p99)))} ms | ${f1(median(on.map((r) => r.p99)))} ms | — | — |`,
      `| Server CPU | ${f1(median(off.map((r) => r.cores)))} cores | ${f1(median(on.map((r) => r.cores)))} cores | — | — |`,
      `| Failed answers | ${off.reduce((n, r) => n + r.failed, 0)} | ${on.reduce((n, r) => n + r.failed, 0)} | — | 0 |`,
      '',
    ].join('\n');
    process.stdout.write(`${md}\n`);
    if (args.has('--write')) log(`written to ${writeResults('metrics', md)}`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

runBench(main);
