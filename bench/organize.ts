// Organizing mail (issue 30), against the real Dovecot of scripts/mailenv.ts:
//   Bulk move: POST /inboxes/{inbox}/messages/bulk moving 1,000 messages from INBOX to Archive
//   (one call: planned from the index, one UID MOVE, read back from Dovecot), against the
//   baseline in the same run: a raw imapflow client's SELECT + UID MOVE of the same 1,000 back.
//   Rounds alternate the two, so each moves the same set; each waits for the index to have the
//   other's move (Postern watches the inbox) and the machine to settle first.
// Postern runs as its own process (`bin/postern serve`); the load generator is this process.
//
//   npm run bench:organize                 # prints the results as Markdown
//   npm run bench:organize -- --write      # also replaces its section of bench/RESULTS.md
//   BENCH_ORGANIZE_MESSAGES=1000 BENCH_ORGANIZE_ROUNDS=5 override the sizes.
//
// Sections of bench/RESULTS.md are per benchmark (writeResults): another organizing bench (threads)
// adds its own under its own name.
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { ImapFlow } from 'imapflow';
import { pino } from 'pino';
import { loadConfig } from '../lib/config.ts';
import { openPostern } from '../lib/server.ts';
import { addUser, up } from '../scripts/mailenv.ts';
import { spawnPostern } from '../test/helpers/processes.ts';
import { benchServerEnv, f0, f1, get, log, machine, median, now, runBench, seed, settle, sleep } from './common.ts';
import { writeResults } from './results.ts';

const args = new Set(process.argv.slice(2));
const MESSAGES = Number(process.env.BENCH_ORGANIZE_MESSAGES ?? 1000);
const ROUNDS = Number(process.env.BENCH_ORGANIZE_ROUNDS ?? 5);

interface Label {
  id: string;
  name: string;
  total: number;
}

async function main(): Promise<void> {
  const env = await up();
  const dir = mkdtempSync(join(tmpdir(), 'postern-bench-organize-'));
  const serverEnv = benchServerEnv(env, dir);
  const load0 = loadavg()[0]!;
  let server: Awaited<ReturnType<typeof spawnPostern>> | null = null;
  let raw: ImapFlow | null = null;
  try {
    const admin = await openPostern(loadConfig(serverEnv), pino({ level: 'silent' }));
    const project = await admin.admin.createProject('bench');
    const member = await admin.admin.addMember(project.id, 'bench@example.org');
    const user = `bench-organize-${Date.now().toString(36)}@${env.domain}`;
    await addUser(env, user, 'pw');
    const inbox = await admin.admin.addInbox({ projectId: project.id, imapUser: user, addresses: [user], mode: 'compatible' });
    await admin.admin.grant(member.id, inbox.id, 'owner');
    const token = (await admin.admin.createToken({ memberId: member.id, scopes: ['messages:read', 'messages:write'] })).token;
    await admin.close();
    const auth = { authorization: `Bearer ${token}` };

    log(`seeding ${f0(MESSAGES)} messages into INBOX…`);
    await seed(env, user, { INBOX: MESSAGES }, false);
    server = await spawnPostern(serverEnv);
    const base = `${server.url}/v1`;
    const labels = async (): Promise<Label[]> => {
      const a = await get(`${base}/inboxes/${inbox.id}/labels`, auth);
      return a.status === 200 ? (JSON.parse(a.body) as { labels: Label[] }).labels : [];
    };
    const total = async (name: string) => (await labels()).find((l) => l.name === name)?.total ?? -1;
    const until = async (what: string, ok: () => Promise<boolean>) => {
      const start = now();
      while (!(await ok())) {
        if (now() - start > 120_000) throw new Error(`timed out waiting for ${what}`);
        await sleep(200);
      }
    };
    await until('the first index', async () => (await total('INBOX')) === MESSAGES);
    const inboxLabel = (await labels()).find((l) => l.name === 'INBOX')!;
    const ids: string[] = [];
    for (let before: number | undefined; ; ) {
      const page = JSON.parse(
        (await get(`${base}/inboxes/${inbox.id}/labels/${inboxLabel.id}/messages?limit=100${before ? `&before=${before}` : ''}`, auth))
          .body,
      ) as { messages: Array<{ id: string }>; before?: number };
      ids.push(...page.messages.map((m) => m.id));
      if (!page.before) break;
      before = page.before;
    }
    if (ids.length !== MESSAGES) throw new Error(`listed ${ids.length} ids, expected ${MESSAGES}`);

    raw = new ImapFlow({ host: env.imap.host, port: env.imap.port, secure: false, auth: { user, pass: 'pw' }, logger: false });
    raw.on('error', () => undefined);
    await raw.connect();

    const postern: number[] = [];
    const baseline: number[] = [];
    for (let round = 1; round <= ROUNDS; round++) {
      await settle();
      let t = now();
      const res = await fetch(`${base}/inboxes/${inbox.id}/messages/bulk`, {
        method: 'POST',
        headers: { ...auth, 'content-type': 'application/json' },
        body: JSON.stringify({ ids, move: { to: 'archive' } }),
      });
      const answer = (await res.json()) as { changed?: number };
      const ms = now() - t;
      if (res.status !== 200 || answer.changed !== MESSAGES)
        throw new Error(`bulk move: ${res.status} ${JSON.stringify(answer).slice(0, 300)}`);
      postern.push(ms);

      await settle();
      // The raw client's part: the UIDs are looked up first (a client that moves a selection knows them).
      await raw.mailboxOpen('Archive');
      const uids = await raw.search({ all: true }, { uid: true });
      if (!uids || uids.length !== MESSAGES) throw new Error(`Archive holds ${uids ? uids.length : 'no'} messages`);
      await raw.mailboxClose();
      t = now();
      await raw.mailboxOpen('Archive');
      const moved = await raw.messageMove(uids.join(','), 'INBOX', { uid: true });
      const rawMs = now() - t;
      if (!moved || moved.uidMap?.size !== MESSAGES) throw new Error('the raw UID MOVE moved fewer messages');
      await raw.mailboxClose();
      baseline.push(rawMs);
      // Postern's watcher sees the raw move: the next round starts from an index that has it.
      await until(
        "the index to have the raw client's move",
        async () => (await total('INBOX')) === MESSAGES && (await total('Archive')) === 0,
      );
      log(`round ${round}: Postern ${f1(ms)} ms, raw UID MOVE ${f1(rawMs)} ms`);
    }
    const load1 = loadavg()[0]!;
    const p = median(postern);
    const b = median(baseline);
    const rate = (ms: number) => (MESSAGES / ms) * 1000;
    const md = `## Organizing mail: bulk move (issue 30)

Machine: ${machine()}, shared; load average ${load0.toFixed(2)} at the start, ${load1.toFixed(2)} at the end. Store: SQLite. Dovecot 2.3 (sdbox), loopback.
Command: \`npm run bench:organize\` (${ROUNDS} rounds, medians), ${new Date().toISOString().slice(0, 10)}. Postern runs as its own process (\`bin/postern serve\`, the inbox watched); the load generator and the raw client share the machine's 2 cores with it and with Dovecot.

| Benchmark | Postern (median) | Baseline, same run (median) | Ratio (rate) | Target |
|---|---|---|---|---|
| Move ${f0(MESSAGES)} messages INBOX → Archive | POST …/messages/bulk \`{"move": {"to": "archive"}}\`: ${f1(p)} ms (${f0(rate(p))} messages/s), planned, one UID MOVE, read back | raw imapflow SELECT + UID MOVE of the same ${f0(MESSAGES)} (Archive → INBOX): ${f1(b)} ms (${f0(rate(b))} messages/s) | ${(b / p).toFixed(2)} | ≥ 0.8 |

Rounds (ms), Postern: ${postern.map(f1).join(', ')}; raw: ${baseline.map(f1).join(', ')}.

`;
    process.stdout.write(md);
    if (args.has('--write')) log(`wrote ${writeResults('organize-bulk', md)}`);
  } finally {
    await raw?.logout().catch(() => undefined);
    if (server && server.child.exitCode === null && server.child.signalCode === null) {
      server.child.kill('SIGTERM');
      await once(server.child, 'exit');
    }
    rmSync(dir, { recursive: true, force: true });
  }
}

runBench(main);
