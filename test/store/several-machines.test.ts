// Several machines, one service (docs/deployment.md, "Several machines on one store: what is proven"): three `postern serve` processes, each in
// a working directory of its own (standing in for a machine: nothing on its disk), sharing one
// PostgreSQL database (POSTERN_DATABASE_URL) and one Redis, every inbox watched (POSTERN_WATCH=notify).
// Any machine answers any request; a change is recorded once and seen through all; one machine
// watches each inbox and another takes over when it is killed; idempotency keys, the sending rate
// and revocations hold across machines; and the event log never skips over HTTP under 3 × 16
// concurrent writers. Everything the test checks of the store goes through ports or the staff CLI.
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import {
  call,
  envVars,
  expectError,
  json,
  mailEnv,
  newProject,
  startPostern,
  unique,
  type TestInbox,
  type TestProject,
  type TestServer,
} from '../helpers/harness.ts';
import { SseClient, type WireEvent } from '../helpers/events-helpers.ts';
import { append, mailApp, openInboxStream, rfc822, until, type SseReader } from '../helpers/mail-fixtures.ts';
import { runPostern, spawnPostern, stopProcess } from '../helpers/processes.ts';
import { atSink, labelIds, listLabel, postRaw, rcpt } from '../helpers/send-fixtures.ts';
import { emptyDatabase } from '../store-contract/postgres.ts';
import type { MessageDetail } from '../../schemas/wire.ts';

/** Short, so a takeover is quick to prove: renewed every second. */
const LEASE_MS = 3000;
const RECHECK_MS = 300;
const RATE_PER_HOUR = 3;
/** Time allowed past a deadline for the news to reach a client on a loaded 2-core machine. */
const SLACK_MS = 3000;
const WRITERS = 16;
const WRITE_MS = 30_000;

interface Machine {
  name: string;
  /** Its working directory, where POSTERN_DB points too: it must stay empty. */
  dir: string;
  child: ChildProcess;
  base: string;
  app: string;
  url: string;
  /** The id it holds watcher leases and writes its watch report under. */
  origin: string;
}

const tokenId = (token: string) => /^svc_(tok_[0-9A-Z]{26})_/.exec(token)![1]!;

function postEvent(m: { base: string }, token: string, body: unknown, headers: Record<string, string> = {}): Promise<Response> {
  return call(`${m.base}/events`, {
    method: 'POST',
    token,
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
}

async function registerType(m: { base: string }, token: string, name: string, fields: string[]): Promise<void> {
  const res = await call(`${m.base}/event-types`, {
    method: 'POST',
    token,
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ name, description: 'several machines', data: fields.map((f) => ({ name: f, type: 'integer' })) }),
  });
  expect(res.status, await res.clone().text()).to.equal(201);
}

/** Every event of the inbox recorded so far, as one machine serves it (the settle delay is 0). */
async function inboxEvents(m: { base: string }, token: string, inboxId: string): Promise<WireEvent[]> {
  const res = await call(`${m.base}/events?inboxes=${inboxId}&limit=500`, { token });
  expect(res.status).to.equal(200);
  return (await json<{ events: WireEvent[] }>(res)).events;
}

/** The id of an event as a frame's data carries it. */
const idOf = (frameData: string) => (JSON.parse(frameData) as WireEvent).id;

const data = (e: WireEvent) => e.data as { msgId: string; labelId: string; uid?: number; flags?: string[] };

describe('several machines: three postern serve on one PostgreSQL and one Redis', function () {
  this.timeout(60_000);
  let db: { url: string; drop(): Promise<void> };
  /** Where the in-process admin's POSTERN_DB points: it must stay empty too. */
  let adminDir: string;
  /** In process on the same database (no watching): makes projects, inboxes and credentials. */
  let admin: TestServer;
  /** What points a staff command at the store. */
  let cliEnv: Record<string, string>;
  const machines: Machine[] = [];
  let p: TestProject;
  let inbox: TestInbox;
  let token: string;
  let inboxMessages: Array<{ id: string; uid: number }>;

  /** Every inbox made here: each must have a watcher. */
  const inboxes: TestInbox[] = [];
  const newInbox = async () => {
    const box = await p.inbox();
    inboxes.push(box);
    return box;
  };
  /** Indexed for the first time (by the machine watching it). */
  const seeded = (box: TestInbox) => until(`${box.id} indexed`, () => admin.postern.store.mailIndex.isSeeded(box.id));

  /** Origins of the servers that wrote a watch report (every serving machine does at start). */
  const reporting = async () => (await admin.postern.store.mailIndex.watchReports(0)).map((r) => r.origin);

  before(async function () {
    this.timeout(120_000);
    db = await emptyDatabase();
    adminDir = mkdtempSync(join(tmpdir(), 'postern-machine-admin-'));
    // One token writes from 16 writers on each machine, as fast as they can: past a credential's
    // default budget (docs/access.md, "Rate limits").
    const shared = {
      POSTERN_DATABASE_URL: db.url,
      REDIS_URL: mailEnv().redis.url,
      POSTERN_EVENTS_SETTLE_MS: '0',
      POSTERN_RATE_REQUESTS: '0',
    };
    cliEnv = envVars(mailEnv(), { ...shared, POSTERN_DB: join(adminDir, 'postern.db'), POSTERN_WATCH: 'notify' });
    admin = await startPostern({ ...shared, POSTERN_DB: join(adminDir, 'postern.db') });
    // One after another, so each new watch report names the machine just started.
    for (const name of ['A', 'B', 'C']) {
      const dir = mkdtempSync(join(tmpdir(), `postern-machine-${name}-`));
      const known = new Set(await reporting());
      const { child, url } = await spawnPostern(
        envVars(mailEnv(), {
          ...shared,
          POSTERN_DB: join(dir, 'postern.db'),
          POSTERN_WATCH: 'notify',
          POSTERN_IMAP_WATCH_LEASE_MS: String(LEASE_MS),
          // Only the watchers bring a mail app's change in (the start's sweep aside).
          POSTERN_WATCH_SWEEP_MS: '600000',
          POSTERN_STREAM_RECHECK_MS: String(RECHECK_MS),
          POSTERN_SEND_RATE_PER_HOUR: String(RATE_PER_HOUR),
        }),
        [],
        dir,
      );
      const origin = await until(`machine ${name}'s watch report`, async () => (await reporting()).find((o) => !known.has(o)));
      machines.push({ name, dir, child, url, base: `${url}/v1`, app: `${url}/api/v1`, origin });
    }
    p = await newProject(admin);
    inbox = await newInbox();
    token = await p.token(['messages:read', 'flags:write', 'events:read', 'project:read']);
  });
  after(async () => {
    for (const m of machines) await stopProcess(m.child);
    await admin?.close();
    await db?.drop();
    for (const dir of [adminDir, ...machines.map((m) => m.dir)]) if (dir) rmSync(dir, { recursive: true, force: true });
  });

  /** No machine keeps anything on its own disk: no SQLite file where POSTERN_DB points, nor anything else. */
  function noLocalFiles(): void {
    for (const [name, dir] of [['admin', adminDir], ...machines.map((m) => [m.name, m.dir])] as const) {
      expect(readdirSync(dir), `files in ${name}'s working directory`).to.deep.equal([]);
    }
  }

  it('any machine answers any request, reads and writes round robin; none writes a file of its own', async () => {
    for (const m of machines) expect((await call(`${m.url}/healthz`)).status, `${m.name} healthy`).to.equal(200);
    // Indexed first: what a first fill finds is not a change, and records nothing.
    await seeded(inbox);
    const app = await mailApp(inbox);
    const uids: number[] = [];
    try {
      for (let i = 0; i < 3; i++) uids.push(await append(app, 'INBOX', { subject: `several machines ${i}` }));
    } finally {
      await app.logout();
    }
    const labels = await labelIds(machines[0]!, token, inbox.id);
    // Every machine lists the same three messages under the same ids.
    const lists = [];
    for (const m of machines) {
      lists.push(
        await until(`${m.name} listing the three messages`, async () => {
          const l = await listLabel(m, token, inbox.id, labels.INBOX!);
          return l.length === 3 ? l : null;
        }),
      );
    }
    expect(lists[1]).to.deep.equal(lists[0]);
    expect(lists[2]).to.deep.equal(lists[0]);
    inboxMessages = lists[0]!.map((m) => ({ id: m.id, uid: m.uid })).sort((a, b) => a.uid - b.uid);
    expect(inboxMessages.map((m) => m.uid)).to.deep.equal(uids);
    // Recorded after the index applied them: in the log before the flag changes below.
    await until('the three additions in the log', async () => (await inboxEvents(machines[0]!, token, inbox.id)).length >= 3);
    // Machine i flags message i; the next request, to any machine, reads it back.
    for (const [i, msg] of inboxMessages.entries()) {
      const res = await call(`${machines[i]!.base}/inboxes/${inbox.id}/messages/${msg.id}/flags`, {
        method: 'POST',
        token,
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ add: ['flagged'] }),
      });
      expect(res.status, await res.clone().text()).to.equal(200);
      for (const m of machines) {
        const read = await call(`${m.base}/inboxes/${inbox.id}/messages/${msg.id}`, { token });
        expect(read.status).to.equal(200);
        expect((await json<MessageDetail>(read)).message.flags, `message ${i} read through ${m.name}`).to.include('flagged');
      }
    }
    // Each change in the log once, as every machine serves it: three additions, three flag changes.
    for (const m of machines) {
      const log = await until(`${m.name} serving the six changes`, async () => {
        const events = await inboxEvents(m, token, inbox.id);
        return events.filter((e) => e.type === 'message.flags').length >= 3 ? events : null;
      });
      // Each flag change is recorded by whichever machine applied it first: their order is the log's.
      const sig = (e: WireEvent) =>
        e.type === 'message.added' ? `added ${data(e).uid}` : `flags ${data(e).msgId} ${data(e).flags!.join(',')}`;
      expect([...log.slice(0, 3).map(sig), ...log.slice(3).map(sig).sort()], `the log through ${m.name}`).to.deep.equal([
        ...uids.map((uid) => `added ${uid}`),
        ...inboxMessages.map((msg) => `flags ${msg.id} flagged`).sort(),
      ]);
    }
    noLocalFiles();
  });

  it('a change made through one machine, or by a mail app, is recorded once and seen through all three', async () => {
    const before = (await inboxEvents(machines[0]!, token, inbox.id)).map((e) => e.id);
    const streams = await Promise.all(machines.map((m) => SseClient.open(`${m.base}/events?inboxes=${inbox.id}`, { token })));
    const onEvery = async (what: string, match: (e: WireEvent) => boolean) => {
      for (const [i, s] of streams.entries()) {
        expect(await s.waitUntil(() => s.events().some(match), 15_000), `${what} on ${machines[i]!.name}'s stream`).to.equal(true);
      }
    };
    const [first, second] = inboxMessages as [{ id: string; uid: number }, { id: string; uid: number }];
    const app = await mailApp(inbox);
    try {
      // Through A.
      const res = await call(`${machines[0]!.base}/inboxes/${inbox.id}/messages/${first.id}/flags`, {
        method: 'POST',
        token,
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ add: ['seen'] }),
      });
      expect(res.status).to.equal(200);
      await onEvery('the change made through A', (e) => data(e).msgId === first.id);
      // By a mail app, over IMAP: only the watching machine hears of it.
      await app.mailboxOpen('INBOX');
      await app.messageFlagsRemove(String(second.uid), ['\\Flagged'], { uid: true });
      await onEvery("the mail app's change", (e) => data(e).msgId === second.id);
      // A later change: once it is on a stream, whatever the two above could still produce there
      // (a second record of either, by another machine) would be there before it.
      const marker = await append(app, 'INBOX', { subject: 'marker' });
      await onEvery('the marker', (e) => e.type === 'message.added' && data(e).uid === marker);
      const sig = (e: WireEvent) =>
        `${e.type} ${e.type === 'message.added' ? data(e).uid : `${data(e).msgId} ${[...data(e).flags!].sort().join(',')}`}`;
      const expected = [`message.flags ${first.id} flagged,seen`, `message.flags ${second.id} `, `message.added ${marker}`];
      for (const [i, s] of streams.entries()) expect(s.events().map(sig), `${machines[i]!.name}'s stream`).to.deep.equal(expected);
      // The log as each machine serves it: the same three new events, under the same ids.
      const ids = streams[0]!.events().map((e) => e.id);
      for (const m of machines) {
        const log = (await inboxEvents(m, token, inbox.id)).filter((e) => !before.includes(e.id));
        expect(
          log.map((e) => e.id),
          `the log through ${m.name}`,
        ).to.deep.equal(ids);
      }
      // The API's change is the token's, unless the watching machine recorded it first (docs/events.md).
      const actors = streams[0]!.events().map((e) => e.actor);
      expect([tokenId(token), 'sys_postern']).to.include(actors[0]);
      expect(actors.slice(1)).to.deep.equal(['sys_postern', 'sys_postern']);
    } finally {
      await app.logout();
      for (const s of streams) s.close();
    }
  });

  it('the same Idempotency-Key sent to all three machines at once stores one event', async () => {
    const q = await newProject(admin);
    const writer = await q.token(['events:write']);
    const reader = await q.token(['events:read', 'project:read']);
    await registerType(machines[1]!, writer, 'ext.order.placed', ['n']);
    const key = unique('key');
    const answers = await Promise.all(
      Array.from({ length: 15 }, async (_, i) => {
        const res = await postEvent(machines[i % 3]!, writer, { type: 'ext.order.placed', data: { n: i } }, { 'idempotency-key': key });
        return { status: res.status, body: await json<{ id: string; duplicate?: boolean }>(res) };
      }),
    );
    expect(answers.map((a) => a.status).sort()).to.deep.equal([200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 201]);
    const ids = new Set(answers.map((a) => a.body.id));
    expect(ids.size, 'every answer names the same event').to.equal(1);
    expect(answers.filter((a) => a.status === 200).every((a) => a.body.duplicate === true)).to.equal(true);
    for (const m of machines) {
      const res = await call(`${m.base}/events?limit=500`, { token: reader });
      expect(res.status).to.equal(200);
      expect(
        (await json<{ events: WireEvent[] }>(res)).events.map((e) => e.id),
        `the log through ${m.name}`,
      ).to.deep.equal([...ids]);
    }
  });

  it(`the sending rate (${RATE_PER_HOUR} an hour) holds for the three machines together`, async () => {
    const box = await newInbox();
    const sender = await p.token(['send']);
    const to = rcpt();
    // Two sends to each machine, all at once: three go out, three are refused, whichever machine took them.
    const answers = await Promise.all(
      Array.from({ length: 2 * machines.length }, async (_, i) => {
        const res = await postRaw(machines[i % 3]!, sender, box.id, {
          from: box.address,
          to: [to],
          raw: rfc822({ from: box.address, to }),
        });
        return { status: res.status, text: await res.text() };
      }),
    );
    expect(answers.map((a) => a.status).sort(), JSON.stringify(answers)).to.deep.equal([200, 200, 200, 422, 422, 422]);
    for (const a of answers.filter((x) => x.status === 422)) expect(a.text).to.match(new RegExp(`${RATE_PER_HOUR} messages per hour`));
    await atSink(to, RATE_PER_HOUR);
    // And later, through any machine: still over.
    for (const m of machines) {
      await expectError(
        await postRaw(m, sender, box.id, { from: box.address, to: [to], raw: rfc822({ from: box.address, to }) }),
        422,
        /messages per hour/,
      );
    }
  });

  it('a token revoked by staff, and a session signed out through one machine, are refused by all three at once; their streams on the others end within the re-check', async () => {
    const query = `events?inboxes=${inbox.id}`;
    const streamEnds = async (streams: SseClient[], error: RegExp) => {
      for (const s of streams) {
        expect(await s.waitUntil(() => s.ended, RECHECK_MS + SLACK_MS), 'the stream ended').to.equal(true);
        expect(s.frames.at(-1)?.event).to.equal('error');
        expect((JSON.parse(s.frames.at(-1)!.data) as { error: string }).error).to.match(error);
      }
    };

    const doomed = await p.token(['events:read']);
    for (const m of machines) expect((await call(`${m.base}/${query}`, { token: doomed })).status).to.equal(200);
    const tokenStreams = await Promise.all(machines.slice(1).map((m) => SseClient.open(`${m.base}/${query}`, { token: doomed })));
    const session = await p.session();
    for (const m of machines) expect((await call(`${m.app}/${query}`, { session })).status).to.equal(200);
    const sessionStreams = await Promise.all(machines.slice(1).map((m) => SseClient.open(`${m.app}/${query}`, { session })));
    try {
      const revoked = await runPostern(['admin', 'token', 'revoke', '--id', tokenId(doomed), '--yes'], cliEnv);
      expect(revoked.code, revoked.stderr).to.equal(0);
      for (const m of machines) await expectError(await call(`${m.base}/${query}`, { token: doomed }), 401, /revoked/);
      await streamEnds(tokenStreams, /revoked/);

      expect((await call(`${machines[0]!.app}/auth/sign-out`, { method: 'POST', session })).status).to.equal(204);
      for (const m of machines) await expectError(await call(`${m.app}/${query}`, { session }), 401, /session ended/);
      await streamEnds(sessionStreams, /session ended/);
    } finally {
      for (const s of [...tokenStreams, ...sessionStreams]) s.close();
    }
  });

  it(`the log never skips over HTTP: 3 machines × ${WRITERS} writers for ${WRITE_MS / 1000} s; pagers and live streams on each machine, and going round them`, async function () {
    this.timeout(WRITE_MS + 90_000);
    const q = await newProject(admin);
    // Each machine's writers publish to an inbox of their own. An inbox is a stream of its own, so
    // no stream counter's lock orders one machine's appends after another's: only the log's own
    // order does (adapters/store/postgres/events.ts), and that is what a skipping reader would show.
    const streamOf = await Promise.all(machines.map(() => q.inbox()));
    const writer = await q.token(['events:write', 'messages:read']);
    const reader = await q.token(['events:read', 'project:read']);
    const type = 'ext.tick.sent';
    await registerType(machines[2]!, writer, type, ['w', 'n']);

    // The readers first: on each machine a live stream from now and a pager from the start; and two
    // that go from machine to machine, as a client behind a load balancer does: a pager that asks
    // each machine for the next page with the cursor another gave, and a stream that every 2 s
    // reconnects to the next machine with Last-Event-ID.
    let last: string | null = null;
    const reached = (ids: readonly string[]) => last !== null && ids.at(-1) === last;
    const streams = await Promise.all(machines.map((m) => SseClient.open(`${m.base}/events?types=${type}`, { token: reader })));
    const pager = async (limit: number, machineOf: (page: number) => Machine): Promise<string[]> => {
      const seen: string[] = [];
      let cursor: string | null = null;
      for (let k = 0; ; k++) {
        const res = await call(`${machineOf(k).base}/events?types=${type}&limit=${limit}${cursor ? `&after=${cursor}` : ''}`, {
          token: reader,
        });
        expect(res.status).to.equal(200);
        const page = await json<{ events: WireEvent[]; cursor: string }>(res);
        seen.push(...page.events.map((e) => e.id));
        cursor = page.cursor;
        if (reached(seen)) return seen;
        if (page.events.length < limit) await new Promise((r) => setTimeout(r, 5));
      }
    };
    const roamingStream = async (): Promise<{ ids: string[]; connections: number }> => {
      const ids: string[] = [];
      let lastEventId: string | undefined;
      for (let k = 0; ; k++) {
        const c = await SseClient.open(`${machines[k % 3]!.base}/events?types=${type}`, {
          token: reader,
          ...(lastEventId ? { lastEventId } : {}),
        });
        await c.waitUntil(() => c.ended || (last !== null && (c.frames.at(-1)?.data.includes(last) ?? false)), 2000);
        c.close();
        // What had arrived when it was closed: the next connection resumes after its last frame.
        const frames = c.frames.slice();
        ids.push(...frames.map((f) => idOf(f.data)));
        lastEventId = frames.at(-1)?.id ?? lastEventId;
        if (reached(ids)) return { ids, connections: k + 1 };
      }
    };
    const pageSizes = [50, 100, 500];
    const pagers = [...machines.map((m, i) => pager(pageSizes[i]!, () => m)), pager(100, (k) => machines[k % 3]!)];
    const roaming = roamingStream();

    const acked = new Map<string, { w: number; n: number }>();
    const refused: string[] = [];
    const end = Date.now() + WRITE_MS;
    await Promise.all(
      machines.flatMap((m, mi) =>
        Array.from({ length: WRITERS }, async (_, wi) => {
          const w = mi * WRITERS + wi;
          for (let n = 0; Date.now() < end; n++) {
            const res = await postEvent(m, writer, { type, inbox: streamOf[mi]!.id, data: { w, n } });
            if (res.status === 201) acked.set((await json<{ id: string }>(res)).id, { w, n });
            else refused.push(`${m.name} ${res.status} ${await res.text()}`);
          }
        }),
      ),
    );
    // Acknowledged after every other event: a reader that has it has passed them all.
    const closing = await postEvent(machines[0]!, writer, { type, data: { w: -1, n: 0 } });
    expect(closing.status).to.equal(201);
    last = (await json<{ id: string }>(closing)).id;
    const lastId = last;

    const deadline = (what: string, ms: number) =>
      new Promise<never>((_, reject) =>
        setTimeout(() => reject(new Error(`${what} did not reach the last event within ${ms} ms`)), ms).unref(),
      );
    const [paged, roamed] = await Promise.race([
      Promise.all([Promise.all(pagers), roaming]),
      deadline('the pagers and the roaming stream', 60_000),
    ]);
    for (const [i, s] of streams.entries()) {
      expect(
        await s.waitUntil(() => s.frames.at(-1)?.data.includes(lastId) ?? false, 30_000),
        `${machines[i]!.name}'s stream reaching the last event (ended: ${s.ended})`,
      ).to.equal(true);
      s.close();
    }
    const readers: Array<[string, string[]]> = [
      ...machines.map((m, i) => [`pager ${m.name} (pages of ${pageSizes[i]})`, paged[i]!] as [string, string[]]),
      ['pager going round (pages of 100)', paged[3]!],
      ...streams.map((s, i) => [`stream ${machines[i]!.name}`, s.frames.map((f) => idOf(f.data))] as [string, string[]]),
      [`stream going round (${roamed.connections} connections)`, roamed.ids],
    ];
    console.log(
      `      never skips: ${acked.size} events acknowledged in ${WRITE_MS / 1000} s (${Math.round(acked.size / (WRITE_MS / 1000))}/s), ${refused.length} refused; each reader saw ${readers.map(([name, ids]) => `${name}: ${ids.length}`).join(', ')}`,
    );
    expect(refused, 'writes refused').to.deep.equal([]);
    expect(acked.size, 'events acknowledged').to.be.greaterThan(1000);
    const agreed = readers[0]![1];
    for (const [name, ids] of readers) {
      expect(new Set(ids).size, `${name}: no event twice`).to.equal(ids.length);
      const have = new Set(ids);
      const missing = [...acked.keys()].filter((id) => !have.has(id));
      expect(missing.length, `${name}: acknowledged events never seen`).to.equal(0);
      expect(ids.length, `${name}: events no writer was told of`).to.equal(acked.size + 1);
      const differs = ids.findIndex((id, k) => id !== agreed[k]);
      expect(differs, `${name}: first place where its order differs from ${readers[0]![0]}'s`).to.equal(-1);
    }
    // One writer's events were committed one after another: the agreed order keeps theirs.
    const nextOf = new Map<number, number>();
    for (const id of agreed.slice(0, -1)) {
      const { w, n } = acked.get(id)!;
      expect(n, `writer ${w}'s events in the order they were acknowledged`).to.equal(nextOf.get(w) ?? 0);
      nextOf.set(w, n + 1);
    }
  });

  it("one machine watches each inbox; killed (-9), another takes the inbox over within the lease, and records a mail app's change once", async () => {
    const watched = await newInbox();
    const origins = machines.map((m) => m.origin);
    const holderOf = async (id: string) => {
      const w = (await admin.postern.store.mailIndex.status(id)).watcher;
      return w !== null && w.expiresAt > Date.now() ? w.holder : null;
    };
    // Each inbox has one watcher, one of the three machines.
    for (const box of inboxes) await until(`a machine watching ${box.id}`, async () => origins.includes((await holderOf(box.id)) ?? ''));
    // The staff's view says the same: the holder, and the three servers reporting.
    const status = await runPostern(['admin', 'inbox', 'status', '--inbox', watched.id], cliEnv);
    expect(status.code, status.stderr).to.equal(0);
    const holder = (await holderOf(watched.id))!;
    expect((status.out.watch as { notifyWatcher: string }).notifyWatcher).to.equal(holder);
    expect((status.out.servers as Array<{ origin: string; mode: string }>).map((s) => s.origin).sort()).to.deep.equal([...origins].sort());

    // What a mail app does after the kill is a change to an index already filled, not a first fill.
    await seeded(watched);
    const victim = machines.find((m) => m.origin === holder)!;
    const [first, second] = machines.filter((m) => m !== victim) as [Machine, Machine];
    const streamToken = await p.token(['messages:read', 'events:read']);
    const onFirst: SseReader = await openInboxStream(first.base, watched, streamToken);
    const onSecond = await SseClient.open(`${second.base}/events?inboxes=${watched.id}`, { token: streamToken });
    const app = await mailApp(watched);
    try {
      const exited = new Promise((resolve) => victim.child.once('exit', resolve));
      victim.child.kill('SIGKILL');
      await exited;
      const killed = Date.now();
      // Mail arrives while its lease still names the dead machine.
      const uid = await append(app, 'INBOX', { subject: 'after the kill' });
      await onFirst.next(
        (e) => e.event === 'message.added' && (JSON.parse(e.data) as { uid: number }).uid === uid,
        LEASE_MS + 2 * SLACK_MS,
      );
      expect(
        await onSecond.waitUntil(() => onSecond.events().some((e) => data(e).uid === uid), LEASE_MS + 2 * SLACK_MS),
        'the event on the other machine',
      ).to.equal(true);
      // Within a lease, a renewal and the slack (a NOTIFY login and a catch-up on a loaded
      // machine); far from the 10-minute sweep, the only other way it could come in.
      const took = Date.now() - killed;
      console.log(`      the inbox taken over: its change in the log ${took} ms after the kill (lease ${LEASE_MS} ms)`);
      expect(took, 'from the kill to the event').to.be.below(LEASE_MS + LEASE_MS / 3 + 2 * SLACK_MS);
      const taker = await holderOf(watched.id);
      expect([first.origin, second.origin], `the new watcher (${took} ms after the kill)`).to.include(taker);
      // Every inbox the dead machine watched has a living watcher again.
      for (const box of inboxes)
        await until(
          `a living machine watching ${box.id}`,
          async () => [first.origin, second.origin].includes((await holderOf(box.id)) ?? ''),
          LEASE_MS + SLACK_MS,
        );

      // Recorded once: a later change reaches both readers after anything the first could still produce.
      const marker = await append(app, 'INBOX', { subject: 'marker after the kill' });
      await onFirst.next((e) => e.event === 'message.added' && (JSON.parse(e.data) as { uid: number }).uid === marker);
      expect(await onSecond.waitUntil(() => onSecond.events().some((e) => data(e).uid === marker), 10_000)).to.equal(true);
      expect(onSecond.events().map((e) => `${e.type} ${data(e).uid}`)).to.deep.equal([`message.added ${uid}`, `message.added ${marker}`]);
      expect(onFirst.events.map((e) => `${e.event} ${(JSON.parse(e.data) as { uid: number }).uid}`)).to.deep.equal([
        `message.added ${uid}`,
        `message.added ${marker}`,
      ]);
      for (const m of [first, second]) {
        const added = (await inboxEvents(m, streamToken, watched.id)).filter((e) => e.type === 'message.added').map((e) => data(e).uid);
        expect(added, `the log through ${m.name}`).to.deep.equal([uid, marker]);
      }
    } finally {
      await app.logout();
      await onFirst.close();
      onSecond.close();
    }
    noLocalFiles();
  });
});
