// Message search benchmarks (docs/search.md), each next to a floor measured in the same run, on one
// compatible inbox of 100,000 messages (INBOX, seeded with `doveadm import`):
//   1. Metadata search (`subject=42424`, one match; `from=sender42@example.org`, 1/97 of the
//      inbox, first page of 50): p50/p99 at 1 client and searches/s at 32, against
//      the adapter's own statement (searchSql / searchStatement) run straight on the store's
//      database, the same query on the same text index, as the floor.
//   2. Body search (`body=…`, from Dovecot's Xapian index, which the label's first body search
//      builds, timed): Postern against a raw imapflow `UID SEARCH BODY` in the same mailbox.
//   3. MCP `list_messages` against the HTTP list of the same page (50 messages): latencies at 1
//      client (calls alternating) and requests/s at 32 in alternating rounds, so load from
//      elsewhere on the machine falls on both alike; medians.
// Postern runs as its own process (`postern serve`); the load generator is this process.
//
//   npm run bench:search                      # prints the results as Markdown (SQLite)
//   npm run bench:search -- --postgres        # the store on PostgreSQL (the env's cluster)
//   npm run bench:search -- --write           # also replaces the search section of bench/RESULTS.md
//   npm run bench:search -- --quick           # 10,000 messages and shorter rounds, for a smoke run
//   npm run bench:search -- --mcp-only        # only the MCP rows (3), while working on them
//   npm run bench:search -- --body-only       # only the body search (2), its own section of RESULTS.md
//   npm run bench:search -- --watch=off       # no watcher: every read checks with Dovecot first (a pass per read)
//   npm run bench:search -- --skip-body       # (1) and (3) without (2): no 100,000-message Xapian build (about 20 min)
//   BENCH_PROFILE_DIR=/tmp/prof npm run bench:search   # the server writes a CPU profile there
//   BENCH_PAGE=1 npm run bench:search -- --mcp-only   # another page size (default 50): MCP's fixed cost apart from what grows with the answer
//   npm run bench:search -- --explain         # only prints the plans of the two metadata searches
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { request } from 'node:http';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { ImapFlow } from 'imapflow';
import pg from 'pg';
import { pino } from 'pino';
import { searchStatement } from '../adapters/store/postgres/mail-index.ts';
import { searchSql } from '../adapters/store/sqlite/mail-index.ts';
import { loadConfig } from '../lib/config.ts';
import { indexSearch, type SearchQuery } from '../lib/mail/search.ts';
import { openPostern } from '../lib/server.ts';
import { addUser, up } from '../scripts/mailenv.ts';
import { emptyDatabase } from '../test/store-contract/postgres.ts';
import { spawnPostern } from '../test/helpers/processes.ts';
import { agent, benchServerEnv, cpuMs, f0, f1, get, log, machine, median, now, pct, runBench, seed, sleep, type Answer } from './common.ts';
import { writeResults } from './results.ts';

const args = new Set(process.argv.slice(2));
const QUICK = args.has('--quick');
const POSTGRES = args.has('--postgres');
const MESSAGES = QUICK ? 10_000 : 100_000;
const SAMPLES = QUICK ? 100 : 400;
const SECONDS = QUICK ? 3 : 10;
const BODY_SAMPLES = QUICK ? 3 : 5;
// Many short rounds rather than a few long ones: each pair of rounds meets nearly the same load
// (an odd number, so that the median is one pair's).
const MCP_ROUNDS = QUICK ? 5 : 9;
const MCP_SECONDS = QUICK ? 2 : 5;
const MCP_ONLY = args.has('--mcp-only');
const BODY_ONLY = args.has('--body-only');
const SKIP_BODY = args.has('--skip-body');
const WATCH = process.argv.find((a) => a.startsWith('--watch='))?.slice(8) ?? 'auto';
const CLIENTS = 32;
const PAGE = Number(process.env.BENCH_PAGE ?? 50);

function post(url: string, headers: Record<string, string>, body: string): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = request(
      url,
      { method: 'POST', agent, headers: { ...headers, 'content-length': String(Buffer.byteLength(body)) } },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString(), headers: res.headers }));
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

/** Latencies (ms) of `samples` calls one after another, after a warm-up. */
async function serial(samples: number, call: (i: number) => Promise<void>): Promise<number[]> {
  for (let i = 0; i < Math.min(50, samples); i++) await call(i);
  const lat: number[] = [];
  for (let i = 0; i < samples; i++) {
    const t = performance.now();
    await call(i);
    lat.push(performance.now() - t);
  }
  return lat;
}

/** `clients` closed loops for `seconds`: calls/s and p99. */
async function closed(clients: number, seconds: number, call: (i: number) => Promise<void>): Promise<{ rps: number; p99: number }> {
  const end = performance.now() + seconds * 1000;
  const lat: number[] = [];
  let n = 0;
  await Promise.all(
    Array.from({ length: clients }, async () => {
      while (performance.now() < end) {
        const t = performance.now();
        await call(n++);
        lat.push(performance.now() - t);
      }
    }),
  );
  return { rps: lat.length / seconds, p99: pct(lat, 0.99) };
}

const stats = (lat: number[]) => ({ p50: median(lat), p99: pct(lat, 0.99) });

async function main(): Promise<void> {
  const env = await up();
  if (POSTGRES && !env.postgres) throw new Error('the mail environment has no PostgreSQL');
  const dir = mkdtempSync(join(tmpdir(), 'postern-bench-search-'));
  const db = POSTGRES ? await emptyDatabase(env.postgres.url) : null;
  // The inbox watched as a deployment's default does (POSTERN_WATCH=auto: a NOTIFY connection),
  // so a read trusts the index; `--watch=off` makes every read check with Dovecot first.
  const serverEnv = benchServerEnv(env, dir, { POSTERN_WATCH: WATCH, ...(db ? { POSTERN_DATABASE_URL: db.url } : {}) });
  const load0 = loadavg()[0]!;
  let server: Awaited<ReturnType<typeof spawnPostern>> | null = null;
  try {
    const admin = await openPostern(loadConfig(serverEnv), pino({ level: 'silent' }));
    const project = await admin.admin.createProject('bench');
    const member = await admin.admin.addMember(project.id, 'bench@example.org');
    const user = `bench-search-${Date.now().toString(36)}@${env.domain}`;
    await addUser(env, user, 'pw');
    const inbox = await admin.admin.addInbox({ projectId: project.id, imapUser: user, addresses: [user], mode: 'compatible' });
    await admin.admin.grant(member.id, inbox.id, 'owner');
    const token = (await admin.admin.createToken({ memberId: member.id, scopes: ['messages:read', 'content:read'] })).token;
    await admin.close();
    const auth = { authorization: `Bearer ${token}` };

    log(`seeding ${f0(MESSAGES)} messages into INBOX…`);
    let t = now();
    await seed(env, user, { INBOX: MESSAGES }, false);
    const seedS = (now() - t) / 1000;
    log(`  ${f1(seedS)} s`);
    const profile = process.env.BENCH_PROFILE_DIR ? ['--cpu-prof', `--cpu-prof-dir=${process.env.BENCH_PROFILE_DIR}`] : [];
    server = await spawnPostern(serverEnv, profile);
    const base = `${server.url}/v1`;
    t = now();
    // A first fill this large answers 503 (Retry-After) until it is done: ask again until it is.
    let label: { id: string; name: string; total: number } | undefined;
    while (label?.total !== MESSAGES) {
      if (now() - t > 30 * 60_000) throw new Error(`the first index did not finish: ${JSON.stringify(label)}`);
      if (label) await sleep(1000);
      const a = await get(`${base}/inboxes/${inbox.id}/labels`, auth);
      label =
        a.status === 200
          ? (JSON.parse(a.body) as { labels: Array<{ id: string; name: string; total: number }> }).labels.find((l) => l.name === 'INBOX')
          : { id: '', name: `(${a.status})`, total: -1 };
    }
    const indexS = (now() - t) / 1000;
    log(`  first index: ${f1(indexS)} s`);

    // The queries: a rare one (a few matches) at a different number each time, and a common one.
    // The rare word is a message's number with as many digits as the largest (one match: as a
    // prefix it can grow into no other); the common one an address 1/97 of the inbox shares.
    const rare = (i: number): SearchQuery => ({ limit: PAGE, subject: String(MESSAGES / 10 + ((i * 7919) % (MESSAGES * 0.9))) });
    const common = (i: number): SearchQuery => ({ limit: PAGE, from: `sender${i % 97}@example.org` });
    const url = (q: SearchQuery) =>
      `${base}/inboxes/${inbox.id}/search?${new URLSearchParams(Object.entries(q).map(([k, v]): [string, string] => [k, String(v)]))}`;
    let bad = 0;
    const http = async (u: string) => {
      const r = await get(u, auth);
      if (r.status !== 200) {
        bad++;
        if (bad <= 3) log(`  ${u}: ${r.status} ${r.body.slice(0, 200)}`);
      }
    };
    // The floor: the adapter's own statement, on the store's own database.
    let raw: (q: SearchQuery) => Promise<void>;
    let closeRaw: () => Promise<void>;
    if (db) {
      const pool = new pg.Pool({ connectionString: db.url, max: CLIENTS });
      raw = async (q) => void (await pool.query(searchStatement(inbox.id, indexSearch(q), null, PAGE + 1)));
      closeRaw = () => pool.end();
    } else {
      const sqlite = new Database(serverEnv.POSTERN_DB, { readonly: true });
      raw = async (q) => {
        const { sql, params } = searchSql(inbox.id, indexSearch(q), null, PAGE + 1);
        sqlite.prepare(sql).all(params);
      };
      closeRaw = async () => {
        sqlite.close();
      };
    }
    // What autovacuum does after a bulk first fill, without waiting for it: ANALYZE for the
    // plans (docs/search.md), and VACUUM to move the rows the fill put in the GIN index's pending
    // list into the index proper; until then a word search scans that list (40 ms at 100,000).
    if (db) {
      const pool = new pg.Pool({ connectionString: db.url, max: 1 });
      await pool.query('VACUUM ANALYZE mail_messages, mail_locations');
      await pool.end();
    }
    if (args.has('--explain')) {
      for (const q of [rare(1), common(1)]) {
        if (db) {
          const pool = new pg.Pool({ connectionString: db.url, max: 1 });
          const st = searchStatement(inbox.id, indexSearch(q), null, PAGE + 1);
          const plan = await pool.query({ text: `EXPLAIN ANALYZE ${st.text}`, values: st.values });
          log(`${JSON.stringify(q)}:\n${plan.rows.map((row: Record<string, string>) => row['QUERY PLAN']).join('\n')}`);
          await pool.end();
        } else {
          const sqlite = new Database(serverEnv.POSTERN_DB, { readonly: true });
          const { sql, params } = searchSql(inbox.id, indexSearch(q), null, PAGE + 1);
          log(
            `${JSON.stringify(q)}:\n${(sqlite.prepare(`EXPLAIN QUERY PLAN ${sql}`).all(params) as Array<{ detail: string }>).map((row) => row.detail).join('\n')}`,
          );
          sqlite.close();
        }
      }
      return;
    }
    const met = (ok: boolean) => (ok ? 'met' : '**not met**');
    const rows: string[] = [];
    if (!MCP_ONLY && !BODY_ONLY) {
      // A first word search fills PostgreSQL's vectors of rows from before its migration (none here) and warms both.
      await http(url(rare(1)));

      const rareHttp = stats(await serial(SAMPLES, (i) => http(url(rare(i)))));
      const rareRaw = stats(await serial(SAMPLES, (i) => raw(rare(i))));
      const commonHttp = stats(await serial(SAMPLES, (i) => http(url(common(i)))));
      const commonRaw = stats(await serial(SAMPLES, (i) => raw(common(i))));
      log(`rare: http p50 ${f1(rareHttp.p50)} p99 ${f1(rareHttp.p99)}; raw p50 ${f1(rareRaw.p50)} p99 ${f1(rareRaw.p99)}`);
      log(`common: http p50 ${f1(commonHttp.p50)} p99 ${f1(commonHttp.p99)}; raw p50 ${f1(commonRaw.p50)} p99 ${f1(commonRaw.p99)}`);
      const rareLoad = await closed(CLIENTS, SECONDS, (i) => http(url(rare(i))));
      const rareRawLoad = await closed(CLIENTS, SECONDS, (i) => raw(rare(i)));
      log(`rare @${CLIENTS}: http ${f0(rareLoad.rps)}/s (p99 ${f1(rareLoad.p99)}), raw ${f0(rareRawLoad.rps)}/s`);

      rows.push(
        `| Metadata search, a rare word (\`subject=N\`, a message's number, N varies, one match), 1 client | p50 ${f1(rareHttp.p50)} ms, p99 ${f1(rareHttp.p99)} ms | the adapter's statement straight on the ${POSTGRES ? 'database (pg pool)' : 'SQLite file (better-sqlite3)'}: p50 ${f1(rareRaw.p50)} ms, p99 ${f1(rareRaw.p99)} ms | ${(rareHttp.p50 / rareRaw.p50).toFixed(1)}× | p99 < 50 ms: ${met(rareHttp.p99 < 50)} |`,
        `| Metadata search, a common sender (\`from=senderK@example.org\`, 1/97 of the inbox), first page, 1 client | p50 ${f1(commonHttp.p50)} ms, p99 ${f1(commonHttp.p99)} ms | p50 ${f1(commonRaw.p50)} ms, p99 ${f1(commonRaw.p99)} ms | ${(commonHttp.p50 / commonRaw.p50).toFixed(1)}× | p99 < 50 ms: ${met(commonHttp.p99 < 50)} |`,
        `| Metadata search, rare word, ${CLIENTS} concurrent clients | ${f0(rareLoad.rps)} searches/s, p99 ${f1(rareLoad.p99)} ms | ${f0(rareRawLoad.rps)} statements/s${POSTGRES ? ` (${CLIENTS} pool connections)` : ' (synchronous: one at a time)'} | ${(rareLoad.rps / rareRawLoad.rps).toFixed(2)} | ≥ 1,000/s: ${met(rareLoad.rps >= 1000)} |`,
      );
    }
    if (!MCP_ONLY && !SKIP_BODY) {
      // 2. Body search: Postern against imapflow's UID SEARCH BODY in the same mailbox, alternating.
      // No socket timeout to speak of: the first search waits while Dovecot indexes the label.
      const imap = new ImapFlow({
        host: env.imap.host,
        port: env.imap.port,
        secure: false,
        auth: { user: `${user}*${env.master.user}`, pass: env.master.password },
        logger: false,
        disableAutoIdle: true,
        socketTimeout: 3 * 3600_000,
      });
      await imap.connect();
      await imap.mailboxOpen('INBOX', { readOnly: true });
      // Dovecot indexes a label on its first body search (fts_autoindex = no, docs/search.md):
      // done here, timed, so that Postern's searches (capped at POSTERN_BODY_SEARCH_TIMEOUT_MS) find it built.
      let s0 = performance.now();
      await imap.search({ body: 'kumquat' }, { uid: true });
      const ftsBuildS = (performance.now() - s0) / 1000;
      log(`first body search (index build): ${f1(ftsBuildS)} s`);
      const bodyWord = (i: number) => `message ${(i * 104_729 + 17) % MESSAGES}. Body`;
      const bodyHttp: number[] = [];
      const bodyImap: number[] = [];
      for (let i = 0; i < BODY_SAMPLES; i++) {
        s0 = performance.now();
        await http(url({ limit: PAGE, body: bodyWord(i) }));
        bodyHttp.push(performance.now() - s0);
        s0 = performance.now();
        await imap.search({ body: bodyWord(i) }, { uid: true });
        bodyImap.push(performance.now() - s0);
      }
      await imap.logout();
      log(`body: http ${f0(median(bodyHttp))} ms, imap ${f0(median(bodyImap))} ms`);
      rows.push(
        `| First body search of the label: Dovecot builds its Xapian index, raw imapflow \`UID SEARCH BODY\` | ${f1(ftsBuildS)} s | — | — | — |`,
        `| Body search from the index (\`body=message N. Body\`), 1 client, ${BODY_SAMPLES} searches | median ${f0(median(bodyHttp))} ms | raw imapflow \`UID SEARCH BODY\`, same mailbox: median ${f0(median(bodyImap))} ms | ${(median(bodyHttp) / median(bodyImap)).toFixed(2)} | — |`,
      );
    }
    await closeRaw();

    if (!BODY_ONLY) {
      // 3. MCP list_messages against the HTTP list of the same page. The two alternate, call by
      // call at 1 client and round by round at 32, so the machine's other load falls on both alike.
      const listUrl = `${base}/inboxes/${inbox.id}/labels/${label.id}/messages?limit=${PAGE}`;
      const mcpHeaders = {
        ...auth,
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
        'mcp-protocol-version': '2025-11-25',
      };
      const mcpBody = JSON.stringify({
        jsonrpc: '2.0',
        id: 1,
        method: 'tools/call',
        params: { name: 'list_messages', arguments: { inboxId: inbox.id, labelId: label.id, limit: PAGE } },
      });
      const listHttp = async () => http(listUrl);
      const listMcp = async () => {
        const a = await post(`${base}/mcp`, mcpHeaders, mcpBody);
        if (a.status !== 200 || a.body.includes('"isError":true')) {
          bad++;
          if (bad <= 3) log(`  mcp: ${a.status} ${a.body.slice(0, 200)}`);
        }
      };
      // The MCP answer carries the page twice, as data and as text for the model: more to write.
      const answerBytes = {
        http: Buffer.byteLength((await get(listUrl, auth)).body),
        mcp: Buffer.byteLength((await post(`${base}/mcp`, mcpHeaders, mcpBody)).body),
      };
      const httpLat: number[] = [];
      const mcpLat: number[] = [];
      for (let i = 0; i < 50; i++) await (i % 2 === 0 ? listHttp() : listMcp());
      for (let i = 0; i < 2 * SAMPLES; i++) {
        const s0 = performance.now();
        await (i % 2 === 0 ? listHttp() : listMcp());
        (i % 2 === 0 ? httpLat : mcpLat).push(performance.now() - s0);
      }
      const listHttpLat = stats(httpLat);
      const listMcpLat = stats(mcpLat);
      // Each round also counts the server's CPU time per call: less bent by the machine's other
      // load than calls/s, which is what other sessions' benchmarks take from.
      type Round = { rps: number; p99: number; cpu: number };
      const httpRounds: Round[] = [];
      const mcpRounds: Round[] = [];
      const round = async (call: () => Promise<void>): Promise<Round> => {
        const cpu0 = cpuMs(server!.child.pid!);
        const r = await closed(CLIENTS, MCP_SECONDS, call);
        return { ...r, cpu: (cpuMs(server!.child.pid!) - cpu0) / (r.rps * MCP_SECONDS) };
      };
      // A round of each unrecorded first: the server's JIT has seen 32 concurrent callers before round 1.
      for (const call of [listHttp, listMcp]) await closed(CLIENTS, MCP_SECONDS, call);
      for (let r = 0; r < MCP_ROUNDS; r++) {
        // Which goes first changes each round: neither always meets a machine warmed by the other.
        const order = r % 2 === 0 ? ([listHttp, listMcp] as const) : ([listMcp, listHttp] as const);
        for (const call of order) (call === listHttp ? httpRounds : mcpRounds).push(await round(call));
        const [h, m] = [httpRounds[r]!, mcpRounds[r]!];
        log(
          `  round ${r + 1}: http ${f0(h.rps)}/s ${h.cpu.toFixed(2)} ms CPU/call, mcp ${f0(m.rps)}/s ${m.cpu.toFixed(2)} ms CPU/call (${(m.rps / h.rps).toFixed(2)})`,
        );
      }
      const medians = (rounds: Round[]) => ({
        rps: median(rounds.map((x) => x.rps)),
        p99: median(rounds.map((x) => x.p99)),
        cpu: median(rounds.map((x) => x.cpu)),
      });
      const listHttpLoad = medians(httpRounds);
      const listMcpLoad = medians(mcpRounds);
      // The ratio is the median of each round pair's: a pair shares the machine's load of the moment.
      const roundRatios = mcpRounds.map((m, r) => m.rps / httpRounds[r]!.rps);
      const ratio = median(roundRatios);
      log(`list: http ${f1(listHttpLat.p50)} ms ${f0(listHttpLoad.rps)}/s; mcp ${f1(listMcpLat.p50)} ms ${f0(listMcpLoad.rps)}/s`);
      rows.push(
        `| MCP \`list_messages\` (POST /v1/mcp, tools/call), same page as the HTTP list (answers of ${f0(answerBytes.mcp)} and ${f0(answerBytes.http)} bytes), 1 client, calls alternating | p50 ${f1(listMcpLat.p50)} ms, p99 ${f1(listMcpLat.p99)} ms | \`GET …/labels/{label}/messages?limit=${PAGE}\`: p50 ${f1(listHttpLat.p50)} ms, p99 ${f1(listHttpLat.p99)} ms | ${(listHttpLat.p50 / listMcpLat.p50).toFixed(2)} (HTTP / MCP latency) | — |`,
        `| MCP \`list_messages\`, ${CLIENTS} concurrent clients, ${MCP_ROUNDS} alternating rounds of ${MCP_SECONDS} s each, medians | ${f0(listMcpLoad.rps)} calls/s (${mcpRounds.map((x) => f0(x.rps)).join(', ')}), p99 ${f1(listMcpLoad.p99)} ms, server CPU ${listMcpLoad.cpu.toFixed(2)} ms/call | HTTP list: ${f0(listHttpLoad.rps)} requests/s (${httpRounds.map((x) => f0(x.rps)).join(', ')}), p99 ${f1(listHttpLoad.p99)} ms, server CPU ${listHttpLoad.cpu.toFixed(2)} ms/call | ${ratio.toFixed(2)}, the median of the round pairs' (${roundRatios.map((x) => x.toFixed(2)).join(', ')}) | ≥ 0.8: ${met(ratio >= 0.8)} |`,
      );
    }

    const load1 = loadavg()[0]!;
    const engine = POSTGRES ? 'PostgreSQL (the env cluster, fsync off), VACUUM ANALYZE after the first index' : 'SQLite';
    const flags = [
      POSTGRES ? '--postgres' : '',
      QUICK ? '--quick' : '',
      MCP_ONLY ? '--mcp-only' : '',
      BODY_ONLY ? '--body-only' : '',
      SKIP_BODY ? '--skip-body' : '',
      WATCH !== 'auto' ? `--watch=${WATCH}` : '',
    ]
      .filter(Boolean)
      .join(' ');
    const md = `## Message search (issue 20)${BODY_ONLY ? ", body search from Dovecot's Xapian index" : ''}, ${POSTGRES ? 'PostgreSQL' : 'SQLite'}

Machine: ${machine()}, shared; load average ${load0.toFixed(2)} at the start, ${load1.toFixed(2)} at the end. Store: ${engine}. Watching: POSTERN_WATCH=${WATCH}. Dovecot 2.3 (sdbox), loopback.
Command: \`npm run bench:search${flags ? ` -- ${flags}` : ''}\`, ${new Date().toISOString().slice(0, 10)}. One compatible inbox, ${f0(MESSAGES)} messages in INBOX (\`doveadm import\`, ${f1(seedS)} s, without mail_crypt; first index ${f1(indexS)} s). Postern runs as its own process; the load generator and the floors share the machine with it and Dovecot. A page is ${PAGE} messages. ${bad} requests answered other than 200.

| Benchmark | Postern | Floor, same run | Ratio | Target |
|---|---|---|---|---|
${rows.join('\n')}
`;
    process.stdout.write(`${md}\n`);
    if (args.has('--write')) log(`wrote ${writeResults(`search${BODY_ONLY ? '-body' : ''}${POSTGRES ? '-postgres' : ''}`, md)}`);
  } finally {
    if (server && server.child.exitCode === null && server.child.signalCode === null) {
      server.child.kill('SIGTERM');
      await once(server.child, 'exit');
    }
    agent.destroy();
    await db?.drop();
    rmSync(dir, { recursive: true, force: true });
  }
}

runBench(main);
