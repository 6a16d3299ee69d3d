// Sending benchmark (docs/sending.md), against the real Postfix submission of scripts/mailenv.ts, which
// relays to the SMTP sink:
//   - 20 KB messages, 16 concurrent clients, POST /inboxes/{inbox}/messages through Postern (its
//     own process, `bin/postern serve`) → Postfix submission, against nodemailer submitting the
//     same messages to the same submission service directly (pooled, authenticated as the same
//     user), in the same run, alternating rounds; a send counts when its answer is in (Postern:
//     the HTTP 200, which comes after Postfix accepted; nodemailer: Postfix's 250);
//   - Postern's peak RSS while 8 clients each send a 25 MB message at once.
//
//   npm run bench:send                # prints the results as Markdown
//   npm run bench:send -- --write     # also replaces the send section of bench/RESULTS.md
//   npm run bench:send -- --quick     # smaller numbers, for a smoke run
//   npm run bench:send -- --memory-only=3   # only the 8 × 25 MB case, 3 times, printed as a log line
import { readFileSync, mkdtempSync, rmSync } from 'node:fs';
import { Agent } from 'node:http';
import { cpus, loadavg, tmpdir, totalmem } from 'node:os';
import { readdir, readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { ImapFlow } from 'imapflow';
import nodemailer from 'nodemailer';
import { addUser, up, type MailEnv } from '../scripts/mailenv.ts';
import { spawnPostern, stopProcess } from '../test/helpers/processes.ts';
import { benchServerEnv, cpuMs, f0, f1, log, machineTicks, median, postfixQueued, rssMb, runBench, settle, treeCpuMs } from './common.ts';
import { Pool } from 'undici';
import { benchMessage, postJson, postPooled, sendingInbox } from './sending.ts';
import { writeResults } from './results.ts';

const args = new Set(process.argv.slice(2));
const QUICK = args.has('--quick');
/** Only the 25 MB memory case (after a short warm-up), N times in a row: `--memory-only=N`. */
const MEMORY_ONLY = Number([...args].find((a) => a.startsWith('--memory-only'))?.split('=')[1] ?? (args.has('--memory-only') ? 1 : 0));
const MESSAGES = QUICK ? 160 : 400;
/** Short alternating rounds: on a shared machine the load drifts, and each pair shares a moment. */
const ROUNDS = QUICK ? 1 : 11;
const CLIENTS = 16;
const SIZE = 20 * 1024;
const BIG = 25 * 1024 * 1024;
const BIG_CLIENTS = 8;
/** Connections to submission: Postern's per-inbox pool and the baseline's pool alike. */
const CONNECTIONS = 8;

const f2 = (n: number) => n.toFixed(2);
const now = () => performance.now();

/** `count` sends by `CLIENTS` concurrent workers; returns messages per second. */
async function run(count: number, sendOne: (i: number) => Promise<void>): Promise<number> {
  let next = 0;
  const t0 = now();
  await Promise.all(
    Array.from({ length: CLIENTS }, async () => {
      for (let i = next++; i < count; i = next++) await sendOne(i);
    }),
  );
  return count / ((now() - t0) / 1000);
}

/** The sink keeps what it receives; the bench's thousands of messages would slow every reader. */
async function forgetSinkMail(env: MailEnv): Promise<void> {
  for (const name of await readdir(env.sink.dir).catch(() => [] as string[])) {
    if (!name.endsWith('.json')) continue;
    const meta = JSON.parse(await readFile(join(env.sink.dir, name), 'utf8').catch(() => '{"rcptTo":[]}')) as {
      id?: string;
      rcptTo: string[];
    };
    if (meta.id && meta.rcptTo.every((r) => r.startsWith('bench-'))) {
      await rm(join(env.sink.dir, name), { force: true });
      await rm(join(env.sink.dir, `${meta.id}.eml`), { force: true });
    }
  }
}

interface PeakRss {
  idle: number;
  /** Until the 8 answers are in. */
  peak: number;
  bigSeconds: number;
  /** Until their Sent copies are filed too (filing goes on after the answers). */
  filedPeak: number;
  filedSeconds: number;
}

/**
 * Postern's peak RSS while 8 clients each send a 25 MB message at once, and on until their Sent
 * copies are filed, against what it idles at just before (with no copy left to file).
 */
async function peakRss(pid: number, url: string, token: string, user: string, db: string): Promise<PeakRss> {
  const big = benchMessage(user, 'bench-big@example.org', BIG).subarray(0, BIG);
  const bigBody = JSON.stringify({
    from: user,
    to: ['bench-big@example.org'],
    raw: Buffer.concat([big.subarray(0, BIG - 2), Buffer.from('\r\n')]).toString('base64'),
  });
  const bigAgent = new Agent({ keepAlive: false });
  const store = new Database(db, { readonly: true });
  const pending = store.prepare("SELECT count(*) FROM mail_outbox WHERE state != 'filed'").pluck();
  const filed = async () => {
    while ((pending.get() as number) > 0) await new Promise((r) => setTimeout(r, 50));
  };
  await filed();
  // Settle the heap after the throughput rounds, so the baseline is what the process idles at.
  await new Promise((r) => setTimeout(r, 3000));
  const idle = rssMb(pid);
  let peak = idle;
  const sampler = setInterval(() => (peak = Math.max(peak, rssMb(pid))), 20);
  const t0 = now();
  const answers = await Promise.all(Array.from({ length: BIG_CLIENTS }, () => postJson(bigAgent, url, token, bigBody)));
  const bigSeconds = (now() - t0) / 1000;
  const answeredPeak = Math.max(peak, rssMb(pid));
  await filed();
  const filedSeconds = (now() - t0) / 1000;
  clearInterval(sampler);
  store.close();
  const filedPeak = Math.max(answeredPeak, peak, rssMb(pid));
  if (answers.some((a) => a.status !== 200))
    throw new Error(`a 25 MB send failed: ${answers.map((a) => `${a.status} ${a.text}`).join('; ')}`);
  log(
    `8 × 25 MB: answered in ${f1(bigSeconds)} s, peak RSS ${f0(answeredPeak)} MB (idle ${f0(idle)}: +${f0(answeredPeak - idle)} MB); copies filed at ${f1(filedSeconds)} s, peak ${f0(filedPeak)} MB (+${f0(filedPeak - idle)} MB)`,
  );
  return { idle, peak: answeredPeak, bigSeconds, filedPeak, filedSeconds };
}

async function main(): Promise<void> {
  const env: MailEnv = await up();
  const dir = mkdtempSync(join(tmpdir(), 'postern-bench-send-'));
  const serverEnv = benchServerEnv(env, dir, {
    POSTERN_SEND_RATE_PER_HOUR: '10000000',
    POSTERN_SMTP_MAX_PER_INBOX: String(CONNECTIONS),
  });
  let server: Awaited<ReturnType<typeof spawnPostern>> | null = null;
  try {
    const { id, user, token } = await sendingInbox(env, serverEnv);
    server = await spawnPostern(serverEnv);
    const pid = server.child.pid!;
    const url = `${server.url}/v1/inboxes/${id}/messages`;
    // The 20 KB rounds' client: undici's pool, one keep-alive connection per concurrent client.
    const pool = new Pool(server.url, { connections: CLIENTS });
    const path = `/v1/inboxes/${id}/messages`;
    // The baseline logs in as the same user the same way Postern does (through the master user).
    const directAuth = nodemailer.createTransport({
      pool: true,
      maxConnections: CONNECTIONS,
      maxMessages: 100_000,
      host: env.submission.host,
      port: env.submission.port,
      secure: false,
      auth: { user: `${user}*${env.master.user}`, pass: env.master.password },
    });

    const bodies = Array.from({ length: 64 }, (_, i) => benchMessage(user, `bench-${i}@example.org`, SIZE));
    // The request bodies are made once, as the baseline's messages are: the load generator's
    // share of the cores is its HTTP client, not base64 and JSON it would redo for every send.
    const requests = bodies.map((raw, i) =>
      Buffer.from(JSON.stringify({ from: user, to: [`bench-${i}@example.org`], raw: raw.toString('base64') })),
    );
    const viaPostern = async (i: number) => {
      const res = await postPooled(pool, path, token, requests[i % requests.length]!);
      if (res.status !== 200) throw new Error(`Postern answered ${res.status}: ${res.text}`);
    };
    const viaNodemailer = async (i: number) => {
      await directAuth.sendMail({ envelope: { from: user, to: [`bench-${i % 64}@example.org`] }, raw: bodies[i % bodies.length]! });
    };

    const loadStart = loadavg()[0]!;
    // Warm both: connections, Postfix's processes, Postern's JIT.
    await run(CLIENTS * 2, viaPostern);
    if (MEMORY_ONLY > 0) {
      const growth: number[] = [];
      const filedGrowth: number[] = [];
      for (let i = 0; i < MEMORY_ONLY; i++) {
        const r = await peakRss(pid, url, token, user, serverEnv.POSTERN_DB!);
        growth.push(r.peak - r.idle);
        filedGrowth.push(r.filedPeak - r.idle);
      }
      const list = (xs: number[]) => `median +${f0(median(xs))} MB (${xs.map((g) => `+${f0(g)}`).join(', ')})`;
      log(`8 × 25 MB growth over ${MEMORY_ONLY} runs: until answered ${list(growth)}; until filed ${list(filedGrowth)}`);
      return;
    }
    // A whole unmeasured round each way first: the JIT of both clients and of Postern, and
    // Postfix's smtpd processes, are warm before the first measured round.
    await run(MESSAGES, viaNodemailer);
    await run(MESSAGES, viaPostern);
    const postern: number[] = [];
    const baseline: number[] = [];
    /** Postern's rounds again, until the last Sent copy was filed: the rate sustained with filing. */
    const withFiling: number[] = [];
    // Where the CPU goes, per message: Postern's process, Dovecot's (its master and imap
    // processes: the Sent copies' APPENDs and the index's syncs), and this load generator.
    const dovecot = Number(readFileSync(join(env.dir, 'dovecot/run/master.pid'), 'utf8').trim());
    /** The machine's CPU in use during each round (both cores): under 1, the round waited on something else. */
    const busy = { postern: [] as number[], baseline: [] as number[] };
    const perMsg = {
      postern: [] as number[],
      dovecot: [] as number[],
      client: [] as number[],
      baseDovecot: [] as number[],
      baseClient: [] as number[],
    };
    /** The same, split: until the round's last answer, and then until its last copy was filed. */
    const split = {
      posternAnswering: [] as number[],
      dovecotAnswering: [] as number[],
      posternFiling: [] as number[],
      dovecotFiling: [] as number[],
    };
    // The round's Sent copies are filed after their answers: their cost belongs to the round
    // (measured), not to the baseline round that follows.
    const store = new Database(serverEnv.POSTERN_DB, { readonly: true });
    const pending = store.prepare("SELECT count(*) FROM mail_outbox WHERE state != 'filed'").pluck();
    const filed = async () => {
      while ((pending.get() as number) > 0) await new Promise((r) => setTimeout(r, 50));
    };
    // Before every round: the last one's work done (copies filed, Postfix's queue delivered to the
    // sink) and the machine quiet, so neither side's round pays for the other's leftovers.
    const quiet = () => settle(async () => (pending.get() as number) === 0 && (await postfixQueued(env)) === 0);
    const viaPosternRound = async (r: number) => {
      await quiet();
      const p0 = cpuMs(pid);
      const d0 = treeCpuMs(dovecot);
      const c0 = process.cpuUsage();
      const t0 = now();
      const m0 = machineTicks();
      postern.push(await run(MESSAGES, viaPostern));
      const m1 = machineTicks();
      busy.postern.push((m1.busy - m0.busy) / (m1.total - m0.total));
      const p1 = cpuMs(pid);
      const d1 = treeCpuMs(dovecot);
      await filed();
      withFiling.push(MESSAGES / ((now() - t0) / 1000));
      const c1 = process.cpuUsage(c0);
      perMsg.postern.push((cpuMs(pid) - p0) / MESSAGES);
      perMsg.dovecot.push((treeCpuMs(dovecot) - d0) / MESSAGES);
      perMsg.client.push((c1.user + c1.system) / 1000 / MESSAGES);
      split.posternAnswering.push((p1 - p0) / MESSAGES);
      split.dovecotAnswering.push((d1 - d0) / MESSAGES);
      split.posternFiling.push((cpuMs(pid) - p1) / MESSAGES);
      split.dovecotFiling.push((treeCpuMs(dovecot) - d1) / MESSAGES);
      log(
        `round ${r + 1}: Postern ${f1(postern.at(-1)!)} messages/s (${f1(withFiling.at(-1)!)} until the copies were filed); CPU per message: Postern ${f2(perMsg.postern.at(-1)!)} ms (${f2(split.posternAnswering.at(-1)!)} until the last answer), Dovecot ${f2(perMsg.dovecot.at(-1)!)} ms (${f2(split.dovecotAnswering.at(-1)!)}), client ${f2(perMsg.client.at(-1)!)} ms; machine busy ${f2(busy.postern.at(-1)!)}`,
      );
    };
    const viaNodemailerRound = async (r: number) => {
      await quiet();
      const d0 = treeCpuMs(dovecot);
      const c0 = process.cpuUsage();
      const m0 = machineTicks();
      baseline.push(await run(MESSAGES, viaNodemailer));
      const m1 = machineTicks();
      busy.baseline.push((m1.busy - m0.busy) / (m1.total - m0.total));
      const c2 = process.cpuUsage(c0);
      perMsg.baseDovecot.push((treeCpuMs(dovecot) - d0) / MESSAGES);
      perMsg.baseClient.push((c2.user + c2.system) / 1000 / MESSAGES);
      log(
        `round ${r + 1}: nodemailer → submission ${f1(baseline.at(-1)!)} messages/s; CPU per message: Dovecot ${f2(perMsg.baseDovecot.at(-1)!)} ms, nodemailer ${f2(perMsg.baseClient.at(-1)!)} ms; machine busy ${f2(busy.baseline.at(-1)!)}`,
      );
    };
    for (let r = 0; r < ROUNDS; r++) {
      // Either side goes first in turn, so a load that rises or falls through a pair favours neither.
      if (r % 2 === 0) {
        await viaPosternRound(r);
        await viaNodemailerRound(r);
      } else {
        await viaNodemailerRound(r);
        await viaPosternRound(r);
      }
    }
    directAuth.close();
    await pool.close();
    store.close();

    // What filing a Sent copy costs Dovecot by itself: the same messages APPENDed to Sent by
    // imapflow, one connection, no Postern (a mail app filing its own copies does the same).
    const appendUser = `bench-append-${Date.now().toString(36)}@${env.domain}`;
    await addUser(env, appendUser, 'pw-append');
    const imap = new ImapFlow({
      host: env.imap.host,
      port: env.imap.port,
      secure: false,
      auth: { user: appendUser, pass: 'pw-append' },
      logger: false,
    });
    await imap.connect();
    const APPENDS = Math.min(MESSAGES, 200);
    const a0 = treeCpuMs(dovecot);
    const at0 = now();
    for (let i = 0; i < APPENDS; i++) await imap.append('Sent', bodies[i % bodies.length]!, ['\\Seen']);
    const appendMs = (now() - at0) / APPENDS;
    const appendCpu = (treeCpuMs(dovecot) - a0) / APPENDS;
    await imap.logout();
    log(`imapflow APPEND to Sent: ${f2(appendMs)} ms each; Dovecot CPU ${f2(appendCpu)} ms per message`);

    const { peak, idle, bigSeconds, filedPeak, filedSeconds } = await peakRss(pid, url, token, user, serverEnv.POSTERN_DB!);
    const loadEnd = loadavg()[0]!;

    const p = median(postern);
    const b = median(baseline);
    const pairRatios = postern.map((x, i) => x / baseline[i]!);
    const filingRatios = withFiling.map((x, i) => x / baseline[i]!);
    const cpu = cpus()[0]?.model ?? 'unknown CPU';
    const markdown = `## Sending (issue 10)

Machine: ${cpus().length} × ${cpu}, ${f0(totalmem() / 2 ** 30)} GB RAM, Node ${process.version}, Postfix submission (SASL through Dovecot) relaying to the SMTP sink, loopback.
Command: \`npm run bench:send\`, ${new Date().toISOString().slice(0, 10)}. Postern runs as its own process; the load generator, Postfix, Dovecot and the sink share the machine's cores with it. ${ROUNDS} rounds of ${MESSAGES} messages each way after an unmeasured round each, alternating which goes first, each round started once the last one's work was done (Sent copies filed, Postfix's queue delivered) and the machine quiet; rates are medians, the ratio is the median of the rounds' ratios (${pairRatios.map((x) => x.toFixed(2)).join(', ')}).

| Benchmark | Postern | Baseline, same run | Ratio | Target |
|---|---|---|---|---|
| 20 KB messages, ${CLIENTS} concurrent clients, until Postfix accepted | POST /messages → Postfix submission: ${f1(p)} messages/s (rounds: ${postern.map(f1).join(', ')}) | nodemailer → the same submission, same user: ${f1(b)} messages/s (rounds: ${baseline.map(f1).join(', ')}) | ${median(pairRatios).toFixed(2)} | ≥ 0.8 |
| ${BIG_CLIENTS} clients each sending a 25 MB message at once | server peak RSS ${f0(peak)} MB (idle ${f0(idle)}: +${f0(peak - idle)} MB); all ${BIG_CLIENTS} accepted in ${f1(bigSeconds)} s; until their Sent copies were filed (${f1(filedSeconds)} s): peak ${f0(filedPeak)} MB (+${f0(filedPeak - idle)} MB) | — | — | growth < 150 MB |

Notes:
- Both sides use ${CONNECTIONS} pooled connections to submission (\`POSTERN_SMTP_MAX_PER_INBOX=${CONNECTIONS}\`); Postern's default is 4.
- CPU per message (medians; Postern's rounds include filing their Sent copies, which the run waits for before the baseline's round): Postern's process ${f2(median(perMsg.postern))} ms; Dovecot ${f2(median(perMsg.dovecot))} ms with Postern, ${f2(median(perMsg.baseDovecot))} ms with the baseline; the load generator ${f2(median(perMsg.client))} ms as an HTTP client (undici's keep-alive pool, 16 connections), ${f2(median(perMsg.baseClient))} ms as nodemailer. Of Postern's rounds, until the last answer: Postern ${f2(median(split.posternAnswering))} ms, Dovecot ${f2(median(split.dovecotAnswering))} ms; after it, filing the rest of the copies: Postern ${f2(median(split.posternFiling))} ms, Dovecot ${f2(median(split.dovecotFiling))} ms.
- Until the Sent copies were filed: Postern's rounds timed from the first send to the last copy filed give ${f1(median(withFiling))} messages/s (rounds: ${withFiling.map(f1).join(', ')}), ratio ${median(filingRatios).toFixed(2)} to the baseline. Filing waits while sends are under way (\`POSTERN_SENT_COPY_YIELD_MS\`, 2 s per copy at most), so in rounds this short most of it comes after the answers; a steady load longer than that pays for the filing on the same cores (each copy waiting 2 s at most), which this bench does not measure.
- Filing alone: imapflow APPENDing the same messages to Sent, one at a time, without Postern, takes ${f2(appendMs)} ms each and ${f2(appendCpu)} ms of Dovecot's CPU per message.
- What Postern does per message that the baseline does not, on the same two cores as Postfix, Dovecot and the load generator: HTTP and token check, JSON and base64, the outbox reservation (rate count, the Sent copy) and the relay's outcome, \`mail.delivery.accepted\`, and the Sent copy: an IMAP APPEND (Dovecot saves it through mail_crypt and pushes a hint), then the index's sync and its \`message.added\`. A mail app files its Sent copy too, after submitting; the baseline does not. Until the last answer Dovecot does none of that (the split above): filing waits until no send has begun or ended for 50 ms. What Postern does on the baseline's side of the ledger: its relay pipelines a waiting message's envelope behind the final dot of the one before, so under load Postfix answers one write per message, not two (docs/sending.md).
- Memory: what a send holds (its body, and any whole copy made from it) and the Sent copies being filed share a 48 MB budget (large bodies wait unread in their sockets; small sends go beside large ones); a large body is read into one buffer and its base64 decoded in place, 64 KB at a time; the relayed message and the Sent copy are pieces of it, written to the socket as they are and stored in 1 MB parts (docs/sending.md, "Memory").
- Load average when the run started: ${loadStart.toFixed(2)}; when it ended: ${loadEnd.toFixed(2)}. The machine is shared: figures from a busy moment come out worse.
`;
    process.stdout.write(`${markdown}\n`);
    if (args.has('--write')) log(`written to ${writeResults('send', markdown)}`);
  } finally {
    if (server) await stopProcess(server.child);
    await forgetSinkMail(env);
    rmSync(dir, { recursive: true, force: true });
  }
}

runBench(main);
