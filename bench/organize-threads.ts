// Threads and previews in the index (docs/threads.md), at the store, on a 100,000-message label:
//   1. A page of 50 collapsed by thread (threadPage, then threadStats for its rows' counts)
//      against the plain page (page) of the same label: p50 and p99 over alternating samples.
//      Target: at most 1.5x the plain page's latency (the p99s compared: on this shared machine
//      the p50s are a few milliseconds against a fraction of one, and the collapsed page reads
//      each row's whole thread for its counts, five messages a row here).
//   2. Indexing the 100,000 messages in writes of 500 (as the sync's IndexWriter sizes SQLite's),
//      with threads (replies in threads of 5, References and In-Reply-To) and 200-character
//      previews, against the same messages without links or previews. Thread placement runs in
//      both (its lookups find nothing in the second), so the ratio is what the links and previews
//      add to a write; Dovecot's side (making the preview) is not in it. Target: at most 1.2x.
//      On SQLite the work is this process's, so its CPU time is given too: the other jobs of a
//      shared machine stretch the wall clock far more than they do the CPU time.
// The store only: no mail server, no HTTP (the route adds the same work to both pages).
//
//   npm run bench:threads                 # SQLite, prints Markdown
//   npm run bench:threads -- --postgres   # PostgreSQL (the mail environment's cluster)
//   npm run bench:threads -- --quick      # 10,000 messages
//   npm run bench:threads -- --write      # also writes its section of bench/RESULTS.md
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { openDb } from '../adapters/store/sqlite/db.ts';
import { SqliteMailIndex } from '../adapters/store/sqlite/mail-index.ts';
import { PgMailIndex } from '../adapters/store/postgres/mail-index.ts';
import { newId } from '../lib/ids.ts';
import type { IndexOp, MessageRecord } from '../lib/mail/types.ts';
import type { MailIndexStore } from '../lib/mail/ports.ts';
import { up } from '../scripts/mailenv.ts';
import { freshDatabase } from '../test/store-contract/postgres.ts';
import { f1, log, machine, pct } from './common.ts';
import { writeResults } from './results.ts';

const args = new Set(process.argv.slice(2));
const POSTGRES = args.has('--postgres');
const MESSAGES = args.has('--quick') ? 10_000 : 100_000;
const WRITE = 500;
const PAGE = 50;
const SAMPLES = 300;
const THREAD = 5;

const guid = () => randomBytes(16).toString('hex');

/** The label's messages, oldest first: threads of THREAD replies (or none), previews (or none). */
function messages(threaded: boolean): MessageRecord[] {
  const out: MessageRecord[] = [];
  const start = Date.parse('2020-01-01T00:00:00Z');
  for (let i = 0; i < MESSAGES; i++) {
    const g = guid();
    const root = out[i - (i % THREAD)];
    const parent = out[i - 1];
    const reply = threaded && i % THREAD !== 0;
    out.push({
      guid: g,
      size: 2000,
      receivedAt: start + i * 60_000,
      date: null,
      from: `Sender ${i % 97} <sender${i % 97}@example.org>`,
      to: 'me@example.org',
      cc: null,
      replyTo: null,
      subject: `${reply ? 'Re: ' : ''}Subject ${i - (i % THREAD)}`,
      messageId: `<${g}@example.org>`,
      inReplyTo: reply ? parent!.messageId : null,
      fromAddress: `sender${i % 97}@example.org`,
      ...(reply ? { references: [root!.messageId!, ...(parent!.messageId !== root!.messageId ? [parent!.messageId!] : [])] } : {}),
      ...(threaded ? { preview: `Hello, this is message ${i}. `.padEnd(200, 'lorem ipsum ') } : {}),
    });
  }
  return out;
}

/** Wall-clock ms, and this process's CPU ms (user and system). */
async function index(store: MailIndexStore, inbox: string, label: string, ms: MessageRecord[]): Promise<{ wall: number; cpu: number }> {
  const t = performance.now();
  const cpu = process.cpuUsage();
  for (let from = 0; from < ms.length; from += WRITE) {
    const ops: IndexOp[] = ms.slice(from, from + WRITE).map((m, j) => ({
      op: 'put',
      message: m,
      location: { labelGuid: label, uid: from + j + 1, msgGuid: m.guid, modseq: 1, flags: (from + j) % 3 === 0 ? [] : ['\\Seen'] },
    }));
    await store.apply(inbox, ops);
  }
  const used = process.cpuUsage(cpu);
  return { wall: performance.now() - t, cpu: (used.user + used.system) / 1000 };
}

async function main(): Promise<void> {
  let store: MailIndexStore;
  let close: () => Promise<void>;
  if (POSTGRES) {
    const env = await up();
    process.env.POSTERN_TEST_ENV = JSON.stringify(env);
    const fresh = await freshDatabase(10);
    store = new PgMailIndex(fresh.pool);
    close = () => fresh.drop();
  } else {
    const dir = mkdtempSync(join(tmpdir(), 'postern-bench-threads-'));
    const db = openDb(join(dir, 'postern.db'));
    store = new SqliteMailIndex(db);
    close = async () => {
      db.close();
      rmSync(dir, { recursive: true, force: true });
    };
  }
  const loadStart = loadavg()[0]!;
  try {
    const [plainInbox, threadedInbox] = [newId('ibx'), newId('ibx')];
    const [plainLabel, threadedLabel] = [guid(), guid()];
    // Alternated halves, so load from elsewhere falls on both.
    const plainMs = messages(false);
    const threadedMs = messages(true);
    const plainIndex = { wall: 0, cpu: 0 };
    const threadedIndex = { wall: 0, cpu: 0 };
    const add = (into: { wall: number; cpu: number }, took: { wall: number; cpu: number }) => {
      into.wall += took.wall;
      into.cpu += took.cpu;
    };
    const half = MESSAGES / 2;
    log(`indexing ${MESSAGES} messages twice (${POSTGRES ? 'PostgreSQL' : 'SQLite'})`);
    add(plainIndex, await index(store, plainInbox, plainLabel, plainMs.slice(0, half)));
    add(threadedIndex, await index(store, threadedInbox, threadedLabel, threadedMs.slice(0, half)));
    add(threadedIndex, await index(store, threadedInbox, threadedLabel, threadedMs.slice(half)));
    add(plainIndex, await index(store, plainInbox, plainLabel, plainMs.slice(half)));
    const plainIndexMs = plainIndex.wall;
    const threadedIndexMs = threadedIndex.wall;

    log('pages: plain against collapsed, alternating');
    const plain: number[] = [];
    const collapsed: number[] = [];
    let rows = 0;
    for (let i = 0; i < SAMPLES; i++) {
      // Pages from the top and deeper in, as a client scrolls.
      const before = i % 4 === 0 ? null : MESSAGES - (i % 50) * (MESSAGES / 50);
      let t = performance.now();
      await store.page(threadedInbox, threadedLabel, before, PAGE + 1);
      plain.push(performance.now() - t);
      t = performance.now();
      const page = await store.threadPage(threadedInbox, threadedLabel, before, PAGE + 1);
      await store.threadStats(
        threadedInbox,
        page.map((r) => r.message.threadGuid!),
      );
      collapsed.push(performance.now() - t);
      rows = page.length;
    }
    const ratio = pct(collapsed, 0.99) / pct(plain, 0.99);
    const ratio50 = pct(collapsed, 0.5) / pct(plain, 0.5);
    const indexRatio = threadedIndexMs / plainIndexMs;
    const cpuRatio = threadedIndex.cpu / plainIndex.cpu;
    const md = [
      `## Threads and previews (issue 30 items 7-8), ${POSTGRES ? 'PostgreSQL' : 'SQLite'}`,
      '',
      `\`npm run bench:threads${POSTGRES ? ' -- --postgres' : ''}\`, ${new Date().toISOString().slice(0, 10)}, ${machine()}: the store alone (bench/organize-threads.ts says what each row measures), a ${MESSAGES.toLocaleString('en-US')}-message label, threads of ${THREAD}.`,
      '',
      `Load average (1 min) ${loadStart.toFixed(2)} at the start, ${loadavg()[0]!.toFixed(2)} at the end (2 cores, shared).`,
      '',
      '| What | Plain | With threads | Ratio | Target |',
      '|---|---|---|---|---|',
      `| A page of ${PAGE} (p50 / p99 ms), collapsed: ${rows - 1} threads | ${f1(pct(plain, 0.5))} / ${f1(pct(plain, 0.99))} | ${f1(pct(collapsed, 0.5))} / ${f1(pct(collapsed, 0.99))} | p99 ${ratio.toFixed(2)}x (p50 ${ratio50.toFixed(2)}x) | p99 ≤ 1.5x ${ratio <= 1.5 ? 'met' : 'not met'} |`,
      `| Indexing ${MESSAGES.toLocaleString('en-US')} messages, writes of ${WRITE} (s) | ${f1(plainIndexMs / 1000)} | ${f1(threadedIndexMs / 1000)} | ${indexRatio.toFixed(2)}x | ≤ 1.2x ${indexRatio <= 1.2 ? 'met' : 'not met'} |`,
      ...(POSTGRES
        ? []
        : [
            `| The same, this process's CPU time (s) | ${f1(plainIndex.cpu / 1000)} | ${f1(threadedIndex.cpu / 1000)} | ${cpuRatio.toFixed(2)}x | ≤ 1.2x ${cpuRatio <= 1.2 ? 'met' : 'not met'} |`,
          ]),
      '',
    ].join('\n');
    process.stdout.write(`${md}\n`);
    if (args.has('--write')) writeResults(`threads-${POSTGRES ? 'postgres' : 'sqlite'}`, md);
  } finally {
    await close();
  }
}

await main();
process.exit(0);
