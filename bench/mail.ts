// Mail read API benchmarks (docs/mail.md), against the real Dovecot of scripts/mailenv.ts:
//   1. A 50-message page of a 10,000-message label: Postern over HTTP vs the raw imapflow FETCH
//      of the same page (latency medians, ratio); and requests/s at 64 concurrent connections.
//   2. Message detail with If-None-Match (304): requests/s at 64 concurrent connections.
//   3. A change by a mail app in a non-INBOX label → SSE event: p50/p99 over 200 changes, with
//      Dovecot's push hints (as docker/compose.yaml deploys); the floor, in the same run: when a
//      plain NOTIFY client (what the stream's watcher is without hints) hears of the same changes.
//   4. 200 messages delivered to INBOX through Postfix SMTP, one every 100 ms → SSE events:
//      p50/p99, none missing (and the same with IMAP APPEND, without Postfix's queue).
//   5. Initial index of a 50,000-message inbox: time and peak RSS (in a process of its own).
// Postern runs as its own process (`bin/postern serve`); the load generator is this process.
//
//   npm run bench:mail                 # prints the results as Markdown
//   npm run bench:mail -- --write      # also replaces the mail section of bench/RESULTS.md
//   npm run bench:mail -- --quick      # smaller numbers, for a smoke run
//   npm run bench:mail -- --only=read,live,index   # some parts only (1-2, 3-4, 5)
//   npm run bench:mail -- --no-hints   # Postern without Dovecot's push hints: streams hear NOTIFY only
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { cpus, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { ImapFlow } from 'imapflow';
import nodemailer from 'nodemailer';
import { pino } from 'pino';
import { loadConfig } from '../lib/config.ts';
import { ROOT } from '../lib/paths.ts';
import { writeResults } from './results.ts';
import { spawnPostern } from '../test/helpers/processes.ts';
import { openPostern } from '../lib/server.ts';
import { addUser, up } from '../scripts/mailenv.ts';
import { atom, onUnsolicited, rawCommand } from '../adapters/imap/raw.ts';
import { agent, benchServerEnv, cpuSeconds, f0, f1, get, log, median, now, pct, seed, sleep, sse } from './common.ts';

const args = new Set(process.argv.slice(2));
const QUICK = args.has('--quick');
const HINTS = !args.has('--no-hints');
const BIG = QUICK ? 2000 : 10_000;
const HUGE = QUICK ? 5000 : 50_000;
const CHANGES = QUICK ? 40 : 200;
const SECONDS = QUICK ? 3 : 10;
const ONLY =
  process.argv
    .find((a) => a.startsWith('--only='))
    ?.slice(7)
    .split(',') ?? null;
const want = (part: 'read' | 'live' | 'index') => !ONLY || ONLY.includes(part);

async function load(
  url: string,
  headers: Record<string, string>,
  concurrency: number,
  seconds: number,
  expect: number,
): Promise<{ rps: number; p50: number; p99: number; bad: number }> {
  const end = performance.now() + seconds * 1000;
  const lat: number[] = [];
  let bad = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (performance.now() < end) {
        const t = performance.now();
        const r = await get(url, headers);
        lat.push(performance.now() - t);
        if (r.status !== expect) bad++;
      }
    }),
  );
  return { rps: lat.length / seconds, p50: median(lat), p99: pct(lat, 0.99), bad };
}

// ---------------------------------------------------------------------------------------------

async function main(): Promise<void> {
  const env = await up();
  const dir = mkdtempSync(join(tmpdir(), 'postern-bench-mail-'));
  const children: ChildProcess[] = [];
  const serverEnv = benchServerEnv(env, dir, {
    // Watchers only for streamed inboxes, as these rows have always measured: with every inbox
    // watched, a read trusts the index while a bulk import is still reaching the watcher.
    POSTERN_WATCH: 'off',
    // Dovecot's push hints, as deployed (docker/compose.yaml): with POSTERN_WATCH=off they reach
    // the streamed inboxes only (docs/watch.md).
    ...(HINTS ? { POSTERN_HINT_LISTEN: env.hints.listen, POSTERN_HINT_SECRET: env.hints.secret } : {}),
    // bench:store runs this with the store on PostgreSQL (an empty database of its own).
    ...(process.env.POSTERN_BENCH_DATABASE_URL ? { POSTERN_DATABASE_URL: process.env.POSTERN_BENCH_DATABASE_URL } : {}),
  });
  const results: Record<string, number> = {};
  try {
    // Identities, in the same SQLite file the server will open.
    const admin = await openPostern(loadConfig(serverEnv), pino({ level: 'silent' }));
    const project = await admin.admin.createProject('bench');
    const member = await admin.admin.addMember(project.id, 'bench@example.org');
    const mkInbox = async (tag: string) => {
      const user = `bench-${tag}-${Date.now().toString(36)}@${env.domain}`;
      const password = `pw-${tag}`;
      await addUser(env, user, password);
      const { id } = await admin.admin.addInbox({ projectId: project.id, imapUser: user, addresses: [user], mode: 'compatible' });
      await admin.admin.grant(member.id, id, 'owner');
      return { id, user, password };
    };
    const big = await mkInbox('big');
    const live = await mkInbox('live');
    const token = (await admin.admin.createToken({ memberId: member.id, scopes: ['messages:read', 'flags:write'] })).token;
    await admin.close();
    const auth = { authorization: `Bearer ${token}` };

    const server = await spawnPostern(serverEnv);
    children.push(server.child);
    const base = `${server.url}/v1`;
    let t = now();

    if (want('read')) {
      log(`seeding ${BIG} messages into a label…`);
      await seed(env, big.user, { Big: BIG }, false);
      log(`  ${f1((now() - t) / 1000)} s`);
      const labels = JSON.parse((await get(`${base}/inboxes/${big.id}/labels`, auth)).body) as {
        labels: Array<{ id: string; name: string; total: number }>;
      };
      const bigLabel = labels.labels.find((l) => l.name === 'Big')!;
      log(`  first read (index of ${bigLabel.total} messages) took ${f1((now() - t) / 1000)} s since seeding began`);

      // 1. Page latency: Postern vs raw imapflow FETCH of the same UIDs.
      const pageUrl = `${base}/inboxes/${big.id}/labels/${bigLabel.id}/messages?limit=50&before=${Math.floor(BIG / 2)}`;
      const firstPage = JSON.parse((await get(pageUrl, auth)).body) as { messages: Array<{ uid: number; id: string }> };
      const uids = firstPage.messages.map((m) => m.uid);
      const range = `${Math.min(...uids)}:${Math.max(...uids)}`;
      for (let i = 0; i < 50; i++) await get(pageUrl, auth);
      const httpLat: number[] = [];
      for (let i = 0; i < 300; i++) {
        const s0 = performance.now();
        await get(pageUrl, auth);
        httpLat.push(performance.now() - s0);
      }
      const imap = new ImapFlow({
        host: env.imap.host,
        port: env.imap.port,
        secure: false,
        auth: { user: `${big.user}*${env.master.user}`, pass: env.master.password },
        logger: false,
        disableAutoIdle: true,
      });
      await imap.connect();
      await imap.mailboxOpen('Big', { readOnly: true });
      const fetchPage = async () => {
        const rows = [];
        for await (const m of imap.fetch(range, { uid: true, flags: true, envelope: true, size: true, internalDate: true }, { uid: true }))
          rows.push(m);
        return rows.length;
      };
      for (let i = 0; i < 50; i++) await fetchPage();
      const imapLat: number[] = [];
      for (let i = 0; i < 300; i++) {
        const s0 = performance.now();
        await fetchPage();
        imapLat.push(performance.now() - s0);
      }
      await imap.logout();
      results.pageHttp = median(httpLat);
      results.pageHttpP99 = pct(httpLat, 0.99);
      results.pageImap = median(imapLat);
      results.pageImapP99 = pct(imapLat, 0.99);
      log(`page: postern ${f1(results.pageHttp)} ms, imap fetch ${f1(results.pageImap)} ms`);

      const cpu0 = cpuSeconds(server.child.pid!);
      const pageLoad = await load(pageUrl, auth, 64, SECONDS, 200);
      results.pageRps = pageLoad.rps;
      results.pageP99 = pageLoad.p99;
      results.pageBad = pageLoad.bad;
      results.pageCores = (cpuSeconds(server.child.pid!) - cpu0) / SECONDS;
      log(`page rps @64: ${f0(pageLoad.rps)} (p99 ${f1(pageLoad.p99)} ms, ${pageLoad.bad} bad)`);

      // 2. 304s.
      const detailUrl = `${base}/inboxes/${big.id}/messages/${firstPage.messages[0]!.id}`;
      const etag = String((await get(detailUrl, auth)).headers.etag);
      const cpu1 = cpuSeconds(server.child.pid!);
      const nm = await load(detailUrl, { ...auth, 'if-none-match': etag }, 64, SECONDS, 304);
      results.nmRps = nm.rps;
      results.nmP99 = nm.p99;
      results.nmBad = nm.bad;
      results.nmCores = (cpuSeconds(server.child.pid!) - cpu1) / SECONDS;
      log(`304 rps @64: ${f0(nm.rps)} (p99 ${f1(nm.p99)} ms, ${nm.bad} bad)`);
    }

    if (want('live')) {
      // 3. Changes by a mail app in a non-INBOX label.
      const app = new ImapFlow({
        host: env.imap.host,
        port: env.imap.port,
        secure: false,
        auth: { user: live.user, pass: live.password },
        logger: false,
        disableAutoIdle: true,
      });
      await app.connect();
      const archUids: number[] = [];
      for (let i = 0; i < CHANGES; i++) {
        const r = await app.append('Archive', `Subject: archived ${i}\r\nFrom: a@example.org\r\n\r\nbody ${i}\r\n`);
        if (r && r.uid) archUids.push(r.uid);
      }
      const liveLabels = JSON.parse((await get(`${base}/inboxes/${live.id}/labels`, auth)).body) as {
        labels: Array<{ id: string; name: string }>;
      };
      const archiveId = liveLabels.labels.find((l) => l.name === 'Archive')!.id;
      const inboxId = liveLabels.labels.find((l) => l.name === 'INBOX')!.id;
      const msgByUid = new Map<number, string>();
      for (let before: number | undefined = undefined; ; ) {
        const pg = JSON.parse(
          (await get(`${base}/inboxes/${live.id}/labels/${archiveId}/messages?limit=100${before ? `&before=${before}` : ''}`, auth)).body,
        ) as { messages: Array<{ uid: number; id: string }>; before?: number };
        for (const m of pg.messages) msgByUid.set(m.uid, m.id);
        if (!pg.before) break;
        before = pg.before;
      }
      const arrivals = new Map<string, { event: string; at: number; labelId?: string }[]>();
      const stop = await sse(`${base}/inboxes/${live.id}/events`, auth, (event, data, at) => {
        const c = JSON.parse(data) as { msgId: string; labelId?: string };
        arrivals.set(c.msgId, [...(arrivals.get(c.msgId) ?? []), { event, at, labelId: c.labelId }]);
      });
      // The floor: a plain NOTIFY client of the same user (the stream's watcher without hints),
      // each change timed to the first `* STATUS` after it.
      const notifier = new ImapFlow({
        host: env.imap.host,
        port: env.imap.port,
        secure: false,
        auth: { user: live.user, pass: live.password },
        logger: false,
        disableAutoIdle: true,
      });
      await notifier.connect();
      const statusAt: number[] = [];
      onUnsolicited(notifier, 'STATUS', () => void statusAt.push(now()));
      await notifier.mailboxOpen('INBOX', { readOnly: true });
      await rawCommand(notifier, 'NOTIFY', [
        atom('SET'),
        atom('STATUS'),
        [atom('PERSONAL'), [atom('MessageNew'), atom('MessageExpunge'), atom('FlagChange')]],
      ]);
      notifier.idle().catch(() => undefined);
      await sleep(500);
      await app.mailboxOpen('Archive');
      const changedAt = new Map<string, number>();
      const notifyLat: number[] = [];
      for (const uid of archUids) {
        await app.messageFlagsAdd(String(uid), ['\\Flagged'], { uid: true });
        changedAt.set(msgByUid.get(uid)!, now());
        await sleep(250);
      }
      await sleep(3000);
      for (const at0 of changedAt.values()) {
        const heard = statusAt.find((at) => at >= at0);
        if (heard !== undefined) notifyLat.push(heard - at0);
      }
      await notifier.logout().catch(() => notifier.close());
      results.notifyP50 = median(notifyLat);
      results.notifyP99 = pct(notifyLat, 0.99);
      const flagLat = [...changedAt].map(([id, at0]) => (arrivals.get(id)?.find((a) => a.event === 'message.flags')?.at ?? NaN) - at0);
      results.flagP50 = median(flagLat.filter(Number.isFinite));
      results.flagP99 = pct(flagLat.filter(Number.isFinite), 0.99);
      results.flagMissing = flagLat.filter((x) => !Number.isFinite(x)).length;
      log(
        `non-INBOX change → SSE: p50 ${f0(results.flagP50)} ms, p99 ${f0(results.flagP99)} ms, missing ${results.flagMissing}; NOTIFY client p50 ${f0(results.notifyP50)} ms, p99 ${f0(results.notifyP99)} ms`,
      );

      // 4. Deliveries to INBOX, one every 100 ms: through Postfix, then by APPEND.
      const transport = nodemailer.createTransport({
        host: env.smtp.host,
        port: env.smtp.port,
        secure: false,
        ignoreTLS: true,
        pool: true,
        maxConnections: 4,
      });
      const smtpAccepted = new Map<string, number>();
      const sends: Promise<void>[] = [];
      for (let i = 0; i < CHANGES; i++) {
        const subject = `delivery ${i}`;
        sends.push(
          transport
            .sendMail({ from: 'sender@example.org', to: live.user, subject, text: 'x' })
            .then(() => void smtpAccepted.set(subject, now())),
        );
        await sleep(100);
      }
      await Promise.all(sends);
      transport.close();
      const appendAt = new Map<number, number>();
      for (let i = 0; i < CHANGES; i++) {
        const r = await app.append('INBOX', `Subject: appended ${i}\r\nFrom: a@example.org\r\n\r\nbody\r\n`);
        if (r && r.uid) appendAt.set(r.uid, now());
        await sleep(100);
      }
      await sleep(5000);
      stop();
      await app.logout();
      const subjectById = new Map<string, { subject: string; uid: number }>();
      for (let before: number | undefined = undefined; ; ) {
        const pg = JSON.parse(
          (await get(`${base}/inboxes/${live.id}/labels/${inboxId}/messages?limit=100${before ? `&before=${before}` : ''}`, auth)).body,
        ) as { messages: Array<{ uid: number; id: string; subject?: string }>; before?: number };
        for (const m of pg.messages) subjectById.set(m.id, { subject: m.subject ?? '', uid: m.uid });
        if (!pg.before) break;
        before = pg.before;
      }
      const deliveryLat: number[] = [];
      const appendLat: number[] = [];
      let deliveredMissing = CHANGES;
      let appendedMissing = CHANGES;
      for (const [id, info] of subjectById) {
        const added = arrivals.get(id)?.find((a) => a.event === 'message.added' && a.labelId === inboxId);
        const sentAt = smtpAccepted.get(info.subject);
        if (sentAt !== undefined && added) {
          deliveryLat.push(added.at - sentAt);
          deliveredMissing--;
        }
        const appendedAt = info.subject.startsWith('appended') ? appendAt.get(info.uid) : undefined;
        if (appendedAt !== undefined && added) {
          appendLat.push(added.at - appendedAt);
          appendedMissing--;
        }
      }
      results.smtpP50 = median(deliveryLat);
      results.smtpP99 = pct(deliveryLat, 0.99);
      results.smtpMissing = deliveredMissing;
      results.appendP50 = median(appendLat);
      results.appendP99 = pct(appendLat, 0.99);
      results.appendMissing = appendedMissing;
      log(
        `INBOX deliveries → SSE: smtp p50 ${f0(results.smtpP50)} p99 ${f0(results.smtpP99)} missing ${deliveredMissing}; append p50 ${f0(results.appendP50)} p99 ${f0(results.appendP99)} missing ${appendedMissing}`,
      );
    }

    if (want('index')) {
      // 5. Initial index of a big inbox, in a process of its own.
      const huge = { user: `bench-huge-${Date.now().toString(36)}@${env.domain}` };
      await addUser(env, huge.user, 'pw');
      log(`seeding ${HUGE} messages (mail_crypt on) in two folders…`);
      t = now();
      await Promise.all([seed(env, huge.user, { INBOX: HUGE / 2 }, true), seed(env, huge.user, { Archive: HUGE / 2 }, true)]);
      log(`  ${f1((now() - t) / 1000)} s`);
      const child = spawn(process.execPath, ['--import', 'tsx', join(ROOT, 'bench/mail-index.ts'), huge.user], {
        // Its own SQLite file; on PostgreSQL the same database, as inboxes of their own.
        env: { ...process.env, ...serverEnv, POSTERN_DB: join(dir, 'index.db') },
        stdio: ['ignore', 'pipe', 'inherit'],
      });
      let out = '';
      child.stdout.on('data', (d: Buffer) => (out += d.toString()));
      await once(child, 'exit');
      const idx = JSON.parse(out.trim().split('\n').at(-1)!) as {
        ms: number;
        messages: number;
        maxRssMb: number;
        baseRssMb: number;
        againMs: number;
      };
      results.indexMs = idx.ms;
      results.indexMessages = idx.messages;
      results.indexRss = idx.maxRssMb;
      results.indexBaseRss = idx.baseRssMb;
      results.indexAgainMs = idx.againMs;
      log(
        `index of ${idx.messages}: ${f1(idx.ms / 1000)} s, peak RSS ${f0(idx.maxRssMb)} MB (before: ${f0(idx.baseRssMb)} MB); a second cold index ${f1(idx.againMs / 1000)} s`,
      );
    }

    const r = (k: string): number => results[k] ?? NaN;
    const cpu = cpus()[0]?.model ?? 'unknown CPU';
    const md = `## Mail read API (issue 4)

Machine: ${cpus().length} × ${cpu}, ${f0(totalmem() / 2 ** 30)} GB RAM, Node ${process.version}, Dovecot 2.3.19 (sdbox, mail_crypt), loopback.
Command: \`npm run bench:mail${QUICK || !HINTS ? ` --${QUICK ? ' --quick' : ''}${HINTS ? '' : ' --no-hints'}` : ''}\`, ${new Date().toISOString().slice(0, 10)}. Postern runs as its own process; the load generator shares the machine's ${cpus().length} cores with it and with Dovecot.

| Benchmark | Postern | Baseline, same run | Ratio | Target |
|---|---|---|---|---|
| 50-message page of a ${f0(BIG)}-message label, 1 client | median ${f1(r('pageHttp'))} ms (p99 ${f1(r('pageHttpP99'))}) over HTTP | raw imapflow UID FETCH of the same 50 (mailbox already selected): median ${f1(r('pageImap'))} ms (p99 ${f1(r('pageImapP99'))}) | ${(r('pageHttp') / r('pageImap')).toFixed(2)} | < 1 |
| Same page, 64 concurrent connections | ${f0(r('pageRps'))} requests/s, p99 ${f1(r('pageP99'))} ms, ${r('pageBad')} errors; server ${f1(r('pageCores'))} cores | — | — | ≥ 2,000/s |
| Message detail with If-None-Match (304), 64 concurrent | ${f0(r('nmRps'))} requests/s, p99 ${f1(r('nmP99'))} ms, ${r('nmBad')} errors; server ${f1(r('nmCores'))} cores | — | — | ≥ 5,000/s |
| Mail app sets a flag in Archive (non-INBOX) → SSE, ${CHANGES} changes 250 ms apart, Dovecot's push hints ${HINTS ? 'on' : 'off'} | p50 ${f0(r('flagP50'))} ms, p99 ${f0(r('flagP99'))} ms, ${r('flagMissing')} missing | a plain NOTIFY client hears of the same changes (the stream's watcher without hints): p50 ${f0(r('notifyP50'))} ms, p99 ${f0(r('notifyP99'))} ms; closest peer: checks such folders every 15 min | p50 ×${(r('flagP50') / r('notifyP50')).toFixed(2)} | p50 ≤ 300 ms, p99 ≤ 500 ms |
| ${CHANGES} deliveries to INBOX through Postfix SMTP, one per 100 ms → SSE (from SMTP accept) | p50 ${f0(r('smtpP50'))} ms, p99 ${f0(r('smtpP99'))} ms, ${r('smtpMissing')} missing | closest peer: 16 s each back to back | — | p99 < 1 s |
| ${CHANGES} IMAP APPENDs to INBOX, one per 100 ms → SSE (from APPEND OK) | p50 ${f0(r('appendP50'))} ms, p99 ${f0(r('appendP99'))} ms, ${r('appendMissing')} missing | — | — | p99 < 1 s |
| Initial index of a ${f0(r('indexMessages'))}-message inbox (two folders, mail_crypt, cold Dovecot cache) | ${f1(r('indexMs') / 1000)} s, peak RSS ${f0(r('indexRss'))} MB (${f0(r('indexBaseRss'))} MB before) | again from an empty index, Dovecot cache warm: ${f1(r('indexAgainMs') / 1000)} s | — | bounded memory |
`;
    process.stdout.write(`${md}\n`);
    // For bench:store: the numbers, as the last line.
    if (args.has('--json')) process.stdout.write(`${JSON.stringify(results)}\n`);
    if (args.has('--write')) {
      const file = writeResults('mail', md);
      log(`wrote ${file}`);
    }
  } finally {
    for (const c of children) {
      if (c.exitCode === null && c.signalCode === null) {
        c.kill('SIGTERM');
        await once(c, 'exit');
      }
    }
    agent.destroy();
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
