// Send later benchmark (docs/sending.md, "Send later"), against the real Postfix submission of
// scripts/mailenv.ts relaying to the SMTP sink: 10,000 sends of about 2 KB scheduled (POST
// /messages?sendAt=…) for times spread evenly over one minute, posted ahead of it; how late each
// reaches the sink after its time. The floor, in the same run: a client that times the same sends
// itself, each POST /messages (sent at once) made at its time. Lateness is measured at the sink
// (Postfix has accepted and delivered by then), so it is an upper bound on lateness at Postfix's
// acceptance.
//
//   npm run bench:send-later                # prints the results as Markdown
//   npm run bench:send-later -- --write     # also replaces the send-later section of bench/RESULTS.md
//   npm run bench:send-later -- --quick     # 1,000 sends over 10 s, for a smoke run
import { mkdtempSync, rmSync } from 'node:fs';
import { readdir, readFile, rm } from 'node:fs/promises';
import { cpus, loadavg, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { Pool } from 'undici';
import { up, type MailEnv } from '../scripts/mailenv.ts';
import { spawnPostern, stopProcess } from '../test/helpers/processes.ts';
import { benchServerEnv, f0, f1, log, pct, runBench, sleep } from './common.ts';
import { writeResults } from './results.ts';
import { benchMessage, postPooled, sendingInbox } from './sending.ts';

const args = new Set(process.argv.slice(2));
const QUICK = args.has('--quick');
const SENDS = QUICK ? 1000 : 10_000;
const SPREAD_MS = QUICK ? 10_000 : 60_000;
const CLIENTS = 16;
const CONNECTIONS = 8;

/** When each of this run's messages reached the sink, by its index (from its recipient). */
async function arrivals(env: MailEnv, prefix: string, count: number, timeoutMs: number): Promise<Map<number, number>> {
  const seen = new Set<string>();
  const at = new Map<number, number>();
  const deadline = Date.now() + timeoutMs;
  while (at.size < count && Date.now() < deadline) {
    for (const name of await readdir(env.sink.dir)) {
      if (!name.endsWith('.json') || seen.has(name)) continue;
      seen.add(name);
      const meta = JSON.parse(await readFile(join(env.sink.dir, name), 'utf8').catch(() => '{"rcptTo":[]}')) as {
        id?: string;
        rcptTo: string[];
        receivedAt?: string;
      };
      const mine = meta.rcptTo.find((r) => r.startsWith(prefix));
      if (!mine || !meta.receivedAt) continue;
      at.set(Number(mine.slice(prefix.length).split('@')[0]), Date.parse(meta.receivedAt));
      // The sink keeps every run's mail: this run's is removed once counted.
      await rm(join(env.sink.dir, name), { force: true });
      if (meta.id) await rm(join(env.sink.dir, `${meta.id}.eml`), { force: true });
    }
    if (at.size < count) await sleep(200);
  }
  return at;
}

interface Round {
  late: number[];
  missing: number;
  early: number;
}

function lateness(times: readonly number[], at: Map<number, number>): Round {
  const late: number[] = [];
  let early = 0;
  for (const [i, t] of at) {
    const d = t - times[i]!;
    if (d < 0) early++;
    late.push(d);
  }
  return { late, missing: times.length - at.size, early };
}

const describe = (r: Round) =>
  `p50 ${f0(pct(r.late, 0.5))} ms, p99 ${f0(pct(r.late, 0.99))} ms, max ${f0(Math.max(...r.late))} ms; ${r.missing} missing, ${r.early} early`;

async function main(): Promise<void> {
  const env: MailEnv = await up();
  const dir = mkdtempSync(join(tmpdir(), 'postern-bench-later-'));
  const serverEnv = benchServerEnv(env, dir, { POSTERN_SEND_RATE_PER_HOUR: '10000000', POSTERN_SMTP_MAX_PER_INBOX: String(CONNECTIONS) });
  let server: Awaited<ReturnType<typeof spawnPostern>> | null = null;
  try {
    const { id, user, token } = await sendingInbox(env, serverEnv);
    server = await spawnPostern(serverEnv);
    const pool = new Pool(server.url, { connections: CLIENTS });
    const stamp = Date.now().toString(36);
    const loadStart = loadavg()[0]!;
    const body = (prefix: string, i: number) => {
      const to = `${prefix}${i}@example.org`;
      return { to, raw: benchMessage(user, to, 2048).toString('base64') };
    };

    // Scheduled: posted ahead, times spread over the minute that starts once they are all in.
    const prefix = `bench-later-${stamp}-s-`;
    const bodies = Array.from({ length: SENDS }, (_, i) => body(prefix, i));
    const postStart = Date.now();
    const times: number[] = new Array<number>(SENDS);
    // A first guess at when posting ends; sends due before that would only measure the posting.
    const start = postStart + Math.max(20_000, SENDS * 12);
    let next = 0;
    await Promise.all(
      Array.from({ length: CLIENTS }, async () => {
        for (let i = next++; i < SENDS; i = next++) {
          times[i] = start + Math.floor((i * SPREAD_MS) / SENDS);
          const b = bodies[i]!;
          const json = JSON.stringify({ from: user, to: [b.to], raw: b.raw });
          const res = await postPooled(
            pool,
            `/v1/inboxes/${id}/messages?sendAt=${new Date(times[i]!).toISOString()}`,
            token,
            Buffer.from(json),
          );
          if (res.status !== 202) throw new Error(`scheduling answered ${res.status}: ${res.text}`);
        }
      }),
    );
    const posted = Date.now();
    log(`posted ${SENDS} scheduled sends in ${f1((posted - postStart) / 1000)} s (${f0(SENDS / ((posted - postStart) / 1000))}/s)`);
    if (posted > start) throw new Error('posting took longer than planned: the first sends were due before it ended');
    const scheduled = lateness(times, await arrivals(env, prefix, SENDS, SPREAD_MS + (start - Date.now()) + 120_000));
    log(`scheduled: ${describe(scheduled)}`);

    // The floor: the client times each send itself.
    const floorPrefix = `bench-later-${stamp}-f-`;
    const floorBodies = Array.from({ length: SENDS }, (_, i) => body(floorPrefix, i));
    // Enough connections that a send made at its time does not queue behind the client's own.
    const floorPool = new Pool(server.url, { connections: 64 });
    const floorStart = Date.now() + 5000;
    const floorTimes = floorBodies.map((_, i) => floorStart + Math.floor((i * SPREAD_MS) / SENDS));
    await Promise.all(
      floorBodies.map(async (b, i) => {
        await sleep(floorTimes[i]! - Date.now());
        const res = await postPooled(
          floorPool,
          `/v1/inboxes/${id}/messages`,
          token,
          Buffer.from(JSON.stringify({ from: user, to: [b.to], raw: b.raw })),
        );
        if (res.status !== 200) throw new Error(`sending answered ${res.status}: ${res.text}`);
      }),
    );
    const floor = lateness(floorTimes, await arrivals(env, floorPrefix, SENDS, 120_000));
    log(`floor: ${describe(floor)}`);
    await pool.close();
    await floorPool.close();

    const markdown = `## Send later (issue 31)

Machine: ${cpus().length} × ${cpus()[0]?.model ?? 'unknown CPU'}, ${f0(totalmem() / 2 ** 30)} GB RAM, Node ${process.version}, Postfix submission (SASL through Dovecot) relaying to the SMTP sink, loopback.
Command: \`npm run bench:send-later${QUICK ? ' -- --quick' : ''}\`, ${new Date().toISOString().slice(0, 10)}. Postern runs as its own process (SQLite store), ${CONNECTIONS} connections to submission. Load average at the start: ${loadStart.toFixed(2)}, at the end: ${loadavg()[0]!.toFixed(2)}.

| Benchmark | Postern | Floor, same run | Target |
|---|---|---|---|
| ${f0(SENDS)} sends of 2 KB due over ${SPREAD_MS / 1000} s, scheduled ahead (POST /messages?sendAt=…, posted at ${f0(SENDS / ((posted - postStart) / 1000))}/s): lateness at the sink | ${describe(scheduled)} | the client sends each at its time (POST /messages, 64 connections): ${describe(floor)} | p99 < 1 s |

Notes:
- Lateness is the sink's arrival time minus the send time: Postfix accepted each message before that, so it is an upper bound on lateness at Postfix's acceptance.
- The floor pays the same relay per message; what the scheduled sends add is the timer, the claim of each due row and reading its copy back from the store.
`;
    process.stdout.write(`${markdown}\n`);
    if (args.has('--write')) log(`written to ${writeResults('send-later', markdown)}`);
  } finally {
    if (server) await stopProcess(server.child);
    rmSync(dir, { recursive: true, force: true });
  }
}

runBench(main);
