// Delivery ingress benchmark (docs/ingress.md), against the real Postfix and Dovecot of
// scripts/mailenv.ts: 50 KB messages submitted to Postfix and counted as they land in Dovecot,
//   - through Postern's ingress into a zero-access inbox (Postfix → Postern LMTP, sealing →
//     Dovecot LMTP), Postern running as its own process (`bin/postern serve`);
//   - straight into Dovecot (Postfix → Dovecot LMTP), the baseline, in the same run;
// alternating, several rounds, medians. Also: sealing alone, in this process.
//
//   npm run bench:ingress                # prints the results as Markdown
//   npm run bench:ingress -- --write     # also replaces the ingress section of bench/RESULTS.md
//   npm run bench:ingress -- --quick     # smaller numbers, for a smoke run
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { cpus, loadavg, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { ImapFlow } from 'imapflow';
import nodemailer from 'nodemailer';
import * as openpgp from 'openpgp';
import { pino } from 'pino';
import { loadConfig } from '../lib/config.ts';
import { seal } from '../lib/mail/sealing.ts';
import { openPostern } from '../lib/server.ts';
import { addUser, up, type MailEnv } from '../scripts/mailenv.ts';
import { spawnPostern, stopProcess } from '../test/helpers/processes.ts';
import { benchServerEnv, f1, log, median, runBench } from './common.ts';
import { writeResults } from './results.ts';

const args = new Set(process.argv.slice(2));
const QUICK = args.has('--quick');
const MESSAGES = QUICK ? 60 : 300;
const ROUNDS = QUICK ? 1 : 3;
const SIZE = 50 * 1024;
/** SMTP connections submitting at once (Postfix's own delivery concurrency does the rest). */
const SUBMITTERS = 8;

const now = () => performance.now();

/** A 50 KB text message (base64 lines, as an attachment-heavy mail is). */
function body(): string {
  const lines: string[] = [];
  let size = 0;
  while (size < SIZE) {
    const line = randomBytes(57).toString('base64');
    lines.push(line);
    size += line.length + 2;
  }
  return lines.join('\r\n');
}

async function messagesIn(client: ImapFlow): Promise<number> {
  const status = await client.status('INBOX', { messages: true });
  return status ? (status.messages ?? 0) : 0;
}

async function count(env: MailEnv, user: string, password: string): Promise<ImapFlow> {
  const client = new ImapFlow({ host: env.imap.host, port: env.imap.port, secure: false, auth: { user, pass: password }, logger: false });
  client.on('error', () => undefined);
  await client.connect();
  return client;
}

/** Submits `n` messages to `to` through Postfix and resolves with messages/s until all are in INBOX. */
async function round(env: MailEnv, to: string, user: string, password: string, n: number, tag: string): Promise<number> {
  const watcher = await count(env, user, password);
  const before = await messagesIn(watcher);
  const transport = nodemailer.createTransport({
    host: env.smtp.host,
    port: env.smtp.port,
    secure: false,
    ignoreTLS: true,
    pool: true,
    maxConnections: SUBMITTERS,
    maxMessages: Infinity,
  });
  const text = body();
  const t0 = now();
  let next = 0;
  await Promise.all(
    Array.from({ length: SUBMITTERS }, async () => {
      while (next < n) {
        const i = next++;
        await transport.sendMail({ from: 'bench@example.org', to, subject: `${tag} ${i}`, text });
      }
    }),
  );
  transport.close();
  for (;;) {
    const got = (await messagesIn(watcher)) - before;
    if (got >= n) break;
    if (now() - t0 > 600_000) throw new Error(`${tag}: only ${got} of ${n} arrived in 10 minutes`);
    await new Promise((r) => setTimeout(r, 20));
  }
  const rate = n / ((now() - t0) / 1000);
  await watcher.logout();
  return rate;
}

async function sealOnly(): Promise<number> {
  const { privateKey } = await openpgp.generateKey({ type: 'ecc', curve: 'ed25519Legacy', userIDs: [{ name: 'bench' }], format: 'object' });
  const key = { epoch: 1, publicKey: privateKey.toPublic() };
  const raw = Buffer.from(`From: a@example.org\r\nTo: b@example.org\r\nSubject: x\r\n\r\n${body()}\r\n`);
  for (let i = 0; i < 20; i++) await seal(raw, key);
  const n = QUICK ? 200 : 1000;
  const t0 = now();
  for (let i = 0; i < n; i++) await seal(raw, key);
  return n / ((now() - t0) / 1000);
}

async function main(): Promise<void> {
  const env = await up();
  const dir = mkdtempSync(join(tmpdir(), 'postern-bench-ingress-'));
  const serverEnv = benchServerEnv(env, dir, { POSTERN_LMTP_PORT: String(env.ingress.port) });
  let server: Awaited<ReturnType<typeof spawnPostern>> | null = null;
  try {
    const stamp = Date.now().toString(36);
    const admin = await openPostern(loadConfig({ ...serverEnv, POSTERN_LMTP_PORT: '' }), pino({ level: 'silent' }));
    const project = await admin.admin.createProject('bench');
    const sealedUser = `bench-sealed-${stamp}@${env.domain}`;
    const directUser = `bench-direct-${stamp}@${env.domain}`;
    await addUser(env, sealedUser, 'pw-sealed');
    await addUser(env, directUser, 'pw-direct');
    const sealedAddress = `bench-sealed-${stamp}@${env.ingress.domain}`;
    const { id } = await admin.admin.addInbox({
      projectId: project.id,
      imapUser: sealedUser,
      addresses: [sealedAddress],
      mode: 'zero-access',
    });
    await admin.keys.ensure(id);
    await admin.close();
    server = await spawnPostern(serverEnv);

    const loadStart = loadavg()[0]!;
    // One small round each first: connections, Postfix's processes and Postern's JIT warm up.
    await round(env, directUser, directUser, 'pw-direct', 10, 'warm-direct');
    await round(env, sealedAddress, sealedUser, 'pw-sealed', 10, 'warm-sealed');
    const viaIngress: number[] = [];
    const direct: number[] = [];
    for (let r = 0; r < ROUNDS; r++) {
      log(`round ${r + 1}/${ROUNDS}: ${MESSAGES} × 50 KB…`);
      direct.push(await round(env, directUser, directUser, 'pw-direct', MESSAGES, `direct-${r}`));
      viaIngress.push(await round(env, sealedAddress, sealedUser, 'pw-sealed', MESSAGES, `sealed-${r}`));
      log(`  direct ${f1(direct.at(-1)!)}/s, through the ingress ${f1(viaIngress.at(-1)!)}/s`);
    }
    const sealRate = await sealOnly();
    const loadEnd = loadavg()[0]!;
    const ratio = median(viaIngress) / median(direct);
    const md = [
      '## Delivery ingress (issue 9 item 5)',
      '',
      `Machine: ${cpus().length} × ${cpus()[0]?.model.trim() ?? 'CPU'}, ${Math.round(totalmem() / 2 ** 30)} GB RAM, Node ${process.version}, Dovecot 2.3.19 (sdbox, mail_crypt), Postfix, loopback.`,
      `Command: \`npm run bench:ingress${QUICK ? ' -- --quick' : ''}\`, ${new Date().toISOString().slice(0, 10)}. ${ROUNDS} round(s) of ${MESSAGES} messages of 50 KB each way, alternating, medians; submitted over ${SUBMITTERS} SMTP connections; timed from the first submission until the last message is in INBOX (IMAP STATUS). Postern runs as its own process.`,
      '',
      '| Benchmark | Postern | Baseline, same run | Ratio | Target |',
      '|---|---|---|---|---|',
      `| 50 KB messages, Postfix → Postern ingress (sealed to a zero-access inbox) → Dovecot | ${f1(median(viaIngress))} messages/s (rounds: ${viaIngress.map(f1).join(', ')}) | Postfix → Dovecot LMTP: ${f1(median(direct))} messages/s (rounds: ${direct.map(f1).join(', ')}) | ${ratio.toFixed(2)} | ≥ 0.5 |`,
      `| Sealing alone, 50 KB, one process | ${f1(sealRate)} messages/s | — | — | — |`,
      '',
      `Notes: load average ${loadStart.toFixed(2)} at the start, ${loadEnd.toFixed(2)} at the end (the machine is shared). Postfix's submission, queue and delivery agents, Dovecot and the load generator share the same cores in both paths; the ingress path adds one LMTP hop, the sealing, and a second LMTP hop from Postern to Dovecot (over pooled sessions).`,
      '',
    ].join('\n');
    process.stdout.write(`${md}\n`);
    if (args.has('--write')) log(`written to ${writeResults('ingress', md)}`);
  } finally {
    if (server) await stopProcess(server.child);
    rmSync(dir, { recursive: true, force: true });
  }
}

runBench(main);
