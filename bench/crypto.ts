// Encryption benchmarks (docs/encryption.md), against the real Dovecot of scripts/mailenv.ts:
//   1. GET /raw of a 25 MB message, 8 concurrent: MB/s and the server's peak RSS growth, against
//      openpgp.js encrypting the same bytes in this process in the same run.
//   2. GET /content of a typical 100 KB multipart message: requests/s, against mailparser alone
//      (simpleParser) on the same bytes in this process.
// (An `ingress` section, LMTP sealing, belongs to the item-5 work and writes its own section.)
// Postern runs as its own process (`bin/postern serve`); the load generator is this process.
//
//   npm run bench:crypto                 # prints the results as Markdown
//   npm run bench:crypto -- --write      # also replaces the crypto section of bench/RESULTS.md
//   npm run bench:crypto -- --quick      # smaller numbers, for a smoke run
import { once } from 'node:events';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { cpus, loadavg, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { ImapFlow } from 'imapflow';
import { simpleParser } from 'mailparser';
import MailComposer from 'nodemailer/lib/mail-composer/index.js';
import * as openpgp from 'openpgp';
import { pino } from 'pino';
import { loadConfig } from '../lib/config.ts';
import { openPostern } from '../lib/server.ts';
import { addUser, up } from '../scripts/mailenv.ts';
import { spawnPostern } from '../test/helpers/processes.ts';
import { benchServerEnv, f0, f1, log, median } from './common.ts';
import { writeResults } from './results.ts';

const args = new Set(process.argv.slice(2));
const QUICK = args.has('--quick');
const RAW_MB = QUICK ? 5 : 25;
const CONCURRENCY = 8;
const ROUNDS = QUICK ? 2 : 3;
const SECONDS = QUICK ? 3 : 10;

const agent = new Agent({ keepAlive: true, maxSockets: 64 });

/** GETs a URL and counts the body's bytes without keeping them. */
function drain(url: string, headers: Record<string, string>): Promise<{ status: number; bytes: number }> {
  return new Promise((resolve, reject) => {
    const req = request(url, { agent, headers }, (res) => {
      let bytes = 0;
      res.on('data', (d: Buffer) => (bytes += d.length));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, bytes }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end();
  });
}

function rssMb(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : NaN;
}

/** Samples the process's RSS every 20 ms while `work` runs; returns the peak. */
async function peakRss<T>(pid: number, work: () => Promise<T>): Promise<{ result: T; peak: number }> {
  let peak = rssMb(pid);
  const timer = setInterval(() => (peak = Math.max(peak, rssMb(pid))), 20);
  try {
    const result = await work();
    return { result, peak: Math.max(peak, rssMb(pid)) };
  } finally {
    clearInterval(timer);
  }
}

async function main(): Promise<void> {
  const env = await up();
  const dir = mkdtempSync(join(tmpdir(), 'postern-bench-crypto-'));
  const serverEnv = benchServerEnv(env, dir, {
    // Each concurrent /raw holds an IMAP connection of the inbox while it streams; the bulk lane
    // may use all but one of them, so 8 at once need 9 (the default, 4, queues the rest).
    POSTERN_IMAP_MAX_PER_INBOX: String(CONCURRENCY + 1),
  });
  const startLoad = loadavg()[0]!;
  const admin = await openPostern(loadConfig(serverEnv), pino({ level: 'silent' }));
  const project = await admin.admin.createProject('bench');
  const member = await admin.admin.addMember(project.id, 'bench@example.org');
  const user = `bench-crypto-${Date.now().toString(36)}@${env.domain}`;
  await addUser(env, user, 'pw-crypto');
  const { id: inboxId } = await admin.admin.addInbox({ projectId: project.id, imapUser: user, addresses: [user], mode: 'compatible' });
  await admin.admin.grant(member.id, inboxId, 'owner');
  const token = (await admin.admin.createToken({ memberId: member.id, scopes: ['messages:read', 'content:read'] })).token;
  await admin.close();
  const auth = { authorization: `Bearer ${token}` };

  // The messages: one of RAW_MB (a base64 attachment), one typical 100 KB multipart.
  const big = await new MailComposer({
    from: 'bench@example.org',
    to: user,
    subject: 'big',
    text: 'see attached',
    attachments: [{ filename: 'big.bin', content: randomBytes(Math.floor(((RAW_MB * 1024 * 1024) / 4) * 3) - 2000) }],
  })
    .compile()
    .build();
  const typical = await new MailComposer({
    from: 'Maria Example <maria@example.com>',
    to: user,
    subject: 'Quarterly numbers',
    text: 'Hello,\n\n'.concat('Here are the numbers for the quarter. '.repeat(200)),
    html: `<html><body><p>Hello,</p>${'<p>Here are the <b>numbers</b> for the quarter.</p>'.repeat(200)}</body></html>`,
    attachments: [
      { filename: 'numbers.csv', content: Buffer.from('a,b,c\n'.repeat(4000)) },
      { filename: 'chart.png', content: randomBytes(40_000), cid: 'chart@example.com' },
    ],
  })
    .compile()
    .build();
  const imap = new ImapFlow({ host: env.imap.host, port: env.imap.port, secure: false, auth: { user, pass: 'pw-crypto' }, logger: false });
  await imap.connect();
  const bigUid = (await imap.append('INBOX', big, [])) as { uid: number };
  const typicalUid = (await imap.append('INBOX', typical, [])) as { uid: number };
  await imap.logout();
  log(`messages: ${f1(big.length / 2 ** 20)} MB and ${f1(typical.length / 1024)} KB`);

  const server = await spawnPostern(serverEnv);
  const pid = server.child.pid!;
  const base = `${server.url}/v1`;
  try {
    const labels = JSON.parse(await (await fetch(`${base}/inboxes/${inboxId}/labels`, { headers: auth })).text()) as {
      labels: Array<{ id: string; name: string }>;
    };
    const inbox = labels.labels.find((l) => l.name === 'INBOX')!;
    const page = JSON.parse(await (await fetch(`${base}/inboxes/${inboxId}/labels/${inbox.id}/messages`, { headers: auth })).text()) as {
      messages: Array<{ id: string; uid: number }>;
    };
    const bigId = page.messages.find((m) => m.uid === bigUid.uid)!.id;
    const typicalId = page.messages.find((m) => m.uid === typicalUid.uid)!.id;
    const rawUrl = `${base}/inboxes/${inboxId}/messages/${bigId}/raw`;
    const contentUrl = `${base}/inboxes/${inboxId}/messages/${typicalId}/content`;
    // Warm: the message key is made, the epoch key opened, Dovecot's cache filled.
    const warm = await drain(rawUrl, auth);
    if (warm.status !== 200) throw new Error(`/raw answered ${warm.status}`);
    const idleRss = rssMb(pid);

    // 1. /raw, 8 concurrent.
    const rawRates: number[] = [];
    let rawPeak = 0;
    for (let round = 0; round < ROUNDS; round++) {
      const t0 = performance.now();
      const { result, peak } = await peakRss(pid, () => Promise.all(Array.from({ length: CONCURRENCY }, () => drain(rawUrl, auth))));
      const seconds = (performance.now() - t0) / 1000;
      if (result.some((r) => r.status !== 200)) throw new Error(`a /raw read failed: ${result.map((r) => r.status).join(' ')}`);
      const mb = result.reduce((n, r) => n + r.bytes, 0) / 2 ** 20;
      rawRates.push(mb / seconds);
      rawPeak = Math.max(rawPeak, peak);
      log(`/raw round ${round + 1}: ${f1(mb / seconds)} MB/s, peak RSS ${f0(peak)} MB (idle ${f0(idleRss)})`);
    }
    // Baseline: openpgp.js encrypting the same bytes, 8 at once, in this process.
    const epochKey = (await openpgp.generateKey({ type: 'ecc', curve: 'ed25519Legacy', userIDs: [{ name: 'bench' }], format: 'object' }))
      .publicKey;
    const pgpRates: number[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      const t0 = performance.now();
      const out = await Promise.all(
        Array.from({ length: CONCURRENCY }, async () =>
          openpgp.encrypt({
            message: await openpgp.createMessage({ binary: big }),
            encryptionKeys: epochKey,
            format: 'binary',
            config: { preferredCompressionAlgorithm: openpgp.enums.compression.uncompressed },
          }),
        ),
      );
      const seconds = (performance.now() - t0) / 1000;
      const mb = out.reduce((n: number, r: Uint8Array) => n + r.length, 0) / 2 ** 20;
      pgpRates.push(mb / seconds);
      log(`openpgp.encrypt round ${round + 1}: ${f1(mb / seconds)} MB/s`);
    }

    // 2. /content, 8 concurrent for SECONDS.
    const first = await drain(contentUrl, auth);
    if (first.status !== 200) throw new Error(`/content answered ${first.status}`);
    let done = 0;
    let bad = 0;
    const until = performance.now() + SECONDS * 1000;
    const t0 = performance.now();
    await Promise.all(
      Array.from({ length: CONCURRENCY }, async () => {
        while (performance.now() < until) {
          const r = await drain(contentUrl, auth);
          if (r.status === 200) done++;
          else bad++;
        }
      }),
    );
    const contentRps = done / ((performance.now() - t0) / 1000);
    log(`/content: ${f0(contentRps)} requests/s, ${bad} errors`);
    let parsed = 0;
    const p0 = performance.now();
    while (performance.now() - p0 < SECONDS * 1000) {
      await simpleParser(typical);
      parsed++;
    }
    const parseRate = parsed / ((performance.now() - p0) / 1000);
    log(`mailparser alone: ${f0(parseRate)} parses/s`);

    const raw = median(rawRates);
    const pgp = median(pgpRates);
    const cpu = cpus()[0]?.model ?? 'unknown CPU';
    const md = `## Encryption (issue 9)

Machine: ${cpus().length} × ${cpu}, ${f0(totalmem() / 2 ** 30)} GB RAM, Node ${process.version}, Dovecot 2.3.19 (sdbox, mail_crypt), loopback.
Command: \`npm run bench:crypto${QUICK ? ' -- --quick' : ''}\`, ${new Date().toISOString().slice(0, 10)}. Postern runs as its own process; the load generator (and the in-process baselines) share the machine's ${cpus().length} cores with it and with Dovecot. Load average at the start: ${startLoad.toFixed(2)}, at the end: ${loadavg()[0]!.toFixed(2)}.

| Benchmark | Postern (median of ${ROUNDS}) | Baseline, same run | Ratio | Target |
|---|---|---|---|---|
| GET /raw of a ${f1(big.length / 2 ** 20)} MB message, ${CONCURRENCY} concurrent | ${f1(raw)} MB/s; server peak RSS ${f0(rawPeak)} MB (idle ${f0(idleRss)}: +${f0(rawPeak - idleRss)} MB) | openpgp.js encrypting the same bytes, ${CONCURRENCY} at once, in-process: ${f1(pgp)} MB/s | ${(raw / pgp).toFixed(2)} | ≥ 0.7; RSS growth < 100 MB |
| GET /content of a ${f0(typical.length / 1024)} KB multipart message (text, HTML, 2 attachments), ${CONCURRENCY} concurrent, ${SECONDS} s | ${f0(contentRps)} requests/s, ${bad} errors | mailparser simpleParser alone on the same bytes: ${f0(parseRate)} parses/s | ${(contentRps / parseRate).toFixed(2)} | — |

Notes:
- /raw is derived on every read (docs/encryption.md): IMAP FETCH of Dovecot's bytes in 2 MB chunks, AES-256-CFB and SHA-1 in node:crypto, framing that holds one 64 KB chunk. The baseline does the same cipher work plus openpgp.js's own framing on bytes already in memory, without IMAP or HTTP.
- \`POSTERN_IMAP_MAX_PER_INBOX=${CONCURRENCY + 1}\`: each streaming /raw holds one of the inbox's IMAP connections (bulk lane: all but one). With the default 4, reads beyond 3 at once wait for a connection and answer 503 after \`POSTERN_IMAP_ACQUIRE_TIMEOUT_MS\`.
- /content adds to the parse: the IMAP FETCH, the audit event (one SQLite write per read), JSON and HTTP.
`;
    process.stdout.write(`${md}\n`);
    if (args.has('--write')) log(`wrote ${writeResults('crypto', md)}`);
  } finally {
    server.child.kill('SIGTERM');
    await once(server.child, 'exit');
    agent.destroy();
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
