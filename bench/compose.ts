// JSON compose benchmark (docs/sending.md, "Compose from JSON"), against the real Postfix submission
// of scripts/mailenv.ts relaying to the SMTP sink: 16 concurrent clients send a message of about
// 20 KB (text, HTML and a 12 KB attachment) as JSON fields to POST /inboxes/{inbox}/messages/compose,
// against POST /inboxes/{inbox}/messages with the same MIME, composed once beforehand, in the same
// run, alternating rounds. A send counts when its 200 is in (after Postfix accepted).
//
//   npm run bench:compose                # prints the results as Markdown
//   npm run bench:compose -- --write     # also replaces the compose section of bench/RESULTS.md
//   npm run bench:compose -- --quick     # smaller numbers, for a smoke run
//   BENCH_PROF=/tmp/prof npm run bench:compose -- --quick   # and a CPU profile of the server there
import { mkdtempSync, rmSync } from 'node:fs';
import { cpus, loadavg, tmpdir, totalmem } from 'node:os';
import { readdir, readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import MailComposer from 'nodemailer/lib/mail-composer/index.js';
import { Pool } from 'undici';
import { up, type MailEnv } from '../scripts/mailenv.ts';
import { spawnPostern, stopProcess } from '../test/helpers/processes.ts';
import { benchServerEnv, cpuMs, f0, f1, log, median, postfixQueued, runBench, settle } from './common.ts';
import { writeResults } from './results.ts';
import { postPooled, sendingInbox } from './sending.ts';

const args = new Set(process.argv.slice(2));
const QUICK = args.has('--quick');
const MESSAGES = QUICK ? 120 : 300;
const ROUNDS = QUICK ? 1 : 5;
const CLIENTS = 16;
const CONNECTIONS = 8;
const now = () => performance.now();

/** A PDF-looking attachment of `size` bytes (the sniffer takes it for a PDF, as it is declared). */
function attachment(size: number): Buffer {
  const head = Buffer.from('%PDF-1.4\n');
  return Buffer.concat([head, Buffer.alloc(size - head.length, 'x')]);
}

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

async function forgetSinkMail(env: MailEnv): Promise<void> {
  for (const name of await readdir(env.sink.dir).catch(() => [] as string[])) {
    if (!name.endsWith('.json')) continue;
    const meta = JSON.parse(await readFile(join(env.sink.dir, name), 'utf8').catch(() => '{"rcptTo":[]}')) as {
      id?: string;
      rcptTo: string[];
    };
    if (meta.id && meta.rcptTo.every((r) => r.startsWith('bench-compose-'))) {
      await rm(join(env.sink.dir, name), { force: true });
      await rm(join(env.sink.dir, `${meta.id}.eml`), { force: true });
    }
  }
}

async function main(): Promise<void> {
  const env: MailEnv = await up();
  const dir = mkdtempSync(join(tmpdir(), 'postern-bench-compose-'));
  const serverEnv = benchServerEnv(env, dir, { POSTERN_SEND_RATE_PER_HOUR: '10000000', POSTERN_SMTP_MAX_PER_INBOX: String(CONNECTIONS) });
  let server: Awaited<ReturnType<typeof spawnPostern>> | null = null;
  try {
    const { id, user, token } = await sendingInbox(env, serverEnv);
    server = await spawnPostern(serverEnv, process.env.BENCH_PROF ? ['--cpu-prof', `--cpu-prof-dir=${process.env.BENCH_PROF}`] : []);
    const pid = server.child.pid!;
    const pool = new Pool(server.url, { connections: CLIENTS });
    const pdf = attachment(12 * 1024);
    const text = 'Hello,\n\nthe report for this week is attached. '.repeat(40);
    const html = `<p>${text.replace(/\n/g, '<br>')}</p>`;
    const fields = (i: number) => ({
      from: user,
      to: [`bench-compose-${i}@example.org`],
      subject: `Weekly report ${i} — Übersicht`,
      text,
      html,
      attachments: [{ filename: 'report.pdf', contentType: 'application/pdf', content: pdf.toString('base64') }],
    });
    // Bodies made once each way, so the load generator's share is its HTTP client only.
    const composeBodies = Array.from({ length: 64 }, (_, i) => Buffer.from(JSON.stringify(fields(i))));
    const raws = await Promise.all(
      Array.from({ length: 64 }, (_, i) =>
        new MailComposer({ ...fields(i), attachments: [{ filename: 'report.pdf', contentType: 'application/pdf', content: pdf }] })
          .compile()
          .build(),
      ),
    );
    const rawBodies = raws.map((raw, i) =>
      Buffer.from(JSON.stringify({ from: user, to: [`bench-compose-${i}@example.org`], raw: raw.toString('base64') })),
    );
    const viaCompose = async (i: number) => {
      const res = await postPooled(pool, `/v1/inboxes/${id}/messages/compose`, token, composeBodies[i % 64]!);
      if (res.status !== 200) throw new Error(`compose answered ${res.status}: ${res.text}`);
    };
    const viaRaw = async (i: number) => {
      const res = await postPooled(pool, `/v1/inboxes/${id}/messages`, token, rawBodies[i % 64]!);
      if (res.status !== 200) throw new Error(`/messages answered ${res.status}: ${res.text}`);
    };

    const store = new Database(serverEnv.POSTERN_DB, { readonly: true });
    const pending = store.prepare("SELECT count(*) FROM mail_outbox WHERE state != 'filed'").pluck();
    const quiet = () => settle(async () => (pending.get() as number) === 0 && (await postfixQueued(env)) === 0);
    const loadStart = loadavg()[0]!;
    await run(MESSAGES, viaRaw);
    await run(MESSAGES, viaCompose);
    const composed: number[] = [];
    const raw: number[] = [];
    const cpu = { composed: [] as number[], raw: [] as number[] };
    const round = async (label: 'composed' | 'raw', r: number) => {
      await quiet();
      const c0 = cpuMs(pid);
      const rate = await run(MESSAGES, label === 'composed' ? viaCompose : viaRaw);
      cpu[label].push((cpuMs(pid) - c0) / MESSAGES);
      (label === 'composed' ? composed : raw).push(rate);
      log(
        `round ${r + 1}: ${label === 'composed' ? 'JSON compose' : 'POST /messages'} ${f1(rate)} messages/s, Postern CPU ${cpu[label].at(-1)!.toFixed(2)} ms per message`,
      );
    };
    for (let r = 0; r < ROUNDS; r++) {
      if (r % 2 === 0) {
        await round('composed', r);
        await round('raw', r);
      } else {
        await round('raw', r);
        await round('composed', r);
      }
    }
    store.close();
    await pool.close();
    const ratios = composed.map((c, i) => c / raw[i]!);
    const size = raws[0]!.length;
    const markdown = `## JSON compose (issue 31)

Machine: ${cpus().length} × ${cpus()[0]?.model ?? 'unknown CPU'}, ${f0(totalmem() / 2 ** 30)} GB RAM, Node ${process.version}, Postfix submission (SASL through Dovecot) relaying to the SMTP sink, loopback.
Command: \`npm run bench:compose\`, ${new Date().toISOString().slice(0, 10)}. Postern runs as its own process (SQLite store), ${CONNECTIONS} connections to submission. ${ROUNDS} rounds of ${MESSAGES} messages each way after an unmeasured round each, alternating which goes first, each started once the last one's Sent copies were filed and Postfix's queue delivered; rates are medians, the ratio is the median of the rounds' ratios (${ratios.map((x) => x.toFixed(2)).join(', ')}).

| Benchmark | JSON compose | POST /messages, same bytes | Ratio | Target |
|---|---|---|---|---|
| ${f0(size / 1024)} KB messages (text, HTML, a 12 KB PDF), ${CLIENTS} concurrent clients, until Postfix accepted | ${f1(median(composed))} messages/s (rounds: ${composed.map(f1).join(', ')}) | ${f1(median(raw))} messages/s (rounds: ${raw.map(f1).join(', ')}) | ${median(ratios).toFixed(2)} | ≥ 0.8 |

Notes:
- Postern's CPU per message (medians, until the round's last answer): ${median(cpu.composed).toFixed(2)} ms composing and sending, ${median(cpu.raw).toFixed(2)} ms sending the same MIME as given. Composing adds the identity lookup, the attachment's type check, nodemailer's composer (the MIME tree built through a chain of streams, the bodies in base64) and a second pass of the message bytes; the send after it is the same code as /messages. A CPU profile of the server (\`BENCH_PROF\`) puts about 2 ms per message in composing, most of it nodemailer's stream-based build (its quoted-printable encoder alone cost about 0.6 ms more, so bodies are base64). Where Postern's CPU is the bottleneck (the machine shared, as in most rounds here) the rate follows that cost; in the one round the machine was quiet, the relay's round trips set the pace and compose reached 0.95 of /messages' rate. The target is not met on this machine.
- POST /messages' bodies hold the MIME nodemailer's composer made from the same fields in the load generator, so both sides relay messages of the same size and shape (the Message-ID and Date differ).
- Load average when the run started: ${loadStart.toFixed(2)}; when it ended: ${loadavg()[0]!.toFixed(2)}. The machine is shared: figures from a busy moment come out worse.
`;
    process.stdout.write(`${markdown}\n`);
    if (args.has('--write')) log(`written to ${writeResults('compose', markdown)}`);
  } finally {
    if (server) await stopProcess(server.child);
    await forgetSinkMail(env);
    rmSync(dir, { recursive: true, force: true });
  }
}

runBench(main);
