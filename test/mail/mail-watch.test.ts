// Every inbox watched, always (docs/watch.md): a mail app's changes reach the project event log with
// nobody streaming and nobody reading, through Dovecot's push hints (real Dovecot, real Lua
// script), through the sweep when a hint is lost, and through NOTIFY where there is no push.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import { pino } from 'pino';
import { ImapFlow } from 'imapflow';
import { loadConfig } from '../../lib/config.ts';
import { openPostern, type Postern } from '../../lib/server.ts';
import { openStore } from '../../adapters/store/open.ts';
import { VISIBILITIES } from '../../lib/events/types.ts';
import {
  call,
  envVars,
  json,
  mailEnv,
  newProject,
  newStore,
  startPostern,
  unique,
  type TestInbox,
  type TestServer,
} from '../helpers/harness.ts';
import { append, importMessages, mailApp, until } from '../helpers/mail-fixtures.ts';
import type { WireEvent } from '../helpers/events-helpers.ts';
import { freePort, spawnPostern, stopProcess } from '../helpers/processes.ts';
import { ROOT } from '../../lib/paths.ts';
import { idFromGuid } from '../../lib/ids.ts';
import { descendingRanges } from '../../adapters/imap/sync.ts';
import { PoolBusyError } from '../../adapters/imap/pool.ts';
import { addUser } from '../../scripts/mailenv.ts';
import type { MailInbox } from '../../lib/mail/types.ts';
import type { WatchReport } from '../../lib/mail/ports.ts';

/** `postern admin …` on a store (a server's storeEnv): exit code and its one line of JSON. */
function cli(storeEnv: Record<string, string>, ...args: string[]): Promise<{ code: number; out: Record<string, unknown> }> {
  return new Promise((resolve, reject) => {
    const env = { ...process.env, ...envVars(mailEnv(), storeEnv) };
    const child = spawn(join(ROOT, 'bin', 'postern'), ['admin', ...args], { env, stdio: ['ignore', 'pipe', 'inherit'] });
    let stdout = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code: code ?? -1, out: JSON.parse(stdout.trim() || '{}') as Record<string, unknown> }));
  });
}

/** The change → GET /events latency allowed here: the p99 target (2 s) plus room for a loaded CI machine. */
const TARGET_MS = 4000;

function pushSettings(extra: Record<string, string> = {}): Record<string, string> {
  const { hints } = mailEnv();
  return {
    POSTERN_WATCH: 'push',
    POSTERN_HINT_LISTEN: hints.listen,
    POSTERN_HINT_SECRET: hints.secret,
    POSTERN_EVENTS_SETTLE_MS: '0',
    ...extra,
  };
}

async function seeded(s: TestServer, inboxId: string): Promise<void> {
  await until('the inbox indexed in the background', () => s.postern.store.mailIndex.isSeeded(inboxId));
}

async function events(s: TestServer, token: string, inboxId: string): Promise<WireEvent[]> {
  const res = await call(`${s.base}/events?inboxes=${inboxId}&limit=200`, { token });
  expect(res.status).to.equal(200);
  return (await json<{ events: WireEvent[] }>(res)).events;
}

/** Makes the change, then waits for the log to hold `count` events of the inbox; returns the time it took. */
async function timed(s: TestServer, token: string, inboxId: string, count: number, change: () => Promise<unknown>): Promise<number> {
  const t0 = Date.now();
  await change();
  await until(`${count} events in the log`, async () => (await events(s, token, inboxId)).length >= count, TARGET_MS + 2000);
  return Date.now() - t0;
}

/** A new inbox with an events:read token, once its NOTIFY watcher is up and its first index done. */
async function watchedInbox(s: TestServer): Promise<{ inbox: TestInbox; token: string }> {
  const p = await newProject(s);
  const inbox = await p.inbox();
  const token = await p.token(['events:read']);
  await until('the inbox watched', async () => s.postern.mailMirror.watching(inbox.id).live);
  await seeded(s, inbox.id);
  return { inbox, token };
}

/** A mail app of the inbox appends one message to `folder`; `timed` until its event is in the log. */
async function appAppends(s: TestServer, token: string, inbox: TestInbox, folder: string, subject: string): Promise<number> {
  const app = await mailApp(inbox);
  try {
    return await timed(s, token, inbox.id, 1, () => append(app, folder, { subject }));
  } finally {
    await app.logout();
  }
}

/**
 * Holds every UID FETCH of a closed UID range (a first fill's older ranges; its newest range is
 * open-ended, `n:*`) until `release()`: a fill is caught midway, whatever the machine's speed.
 */
function holdOlderRanges(): { release(): void; restore(): void } {
  type Exec = (this: ImapFlow, command: string, ...rest: unknown[]) => Promise<unknown>;
  const proto = ImapFlow.prototype as unknown as { exec: Exec };
  const original = proto.exec;
  let release!: () => void;
  const gate = new Promise<void>((resolve) => (release = resolve));
  proto.exec = async function (command, ...rest) {
    const range = (rest[0] as Array<{ value?: unknown }> | undefined)?.[0]?.value;
    if (command === 'UID FETCH' && typeof range === 'string' && /^\d+:\d+$/.test(range)) await gate;
    return original.call(this, command, ...rest);
  };
  return {
    release,
    restore: () => {
      release();
      proto.exec = original;
    },
  };
}

const mailInbox = (i: TestInbox): MailInbox => ({ id: i.id, imapUser: i.imapUser, addresses: [i.address] });

interface WirePage {
  messages: Array<{ id: string; subject?: string; flags: string[] }>;
  before?: number;
}

async function page(s: TestServer, token: string, inboxId: string, labelId: string, query = ''): Promise<Response> {
  return call(`${s.base}/inboxes/${inboxId}/labels/${labelId}/messages${query}`, { token });
}

async function labelIdOf(s: TestServer, token: string, inboxId: string, name: string): Promise<string> {
  const res = await call(`${s.base}/inboxes/${inboxId}/labels`, { token });
  expect(res.status).to.equal(200);
  return (await json<{ labels: Array<{ id: string; name: string }> }>(res)).labels.find((l) => l.name === name)!.id;
}

describe('every inbox watched, always', function () {
  this.timeout(60_000);

  it("push mode: once hints flow, reads trust the index, and a mail app's change is in the next read after its command returns", async () => {
    const s = await startPostern(pushSettings({ POSTERN_WATCH_SWEEP_MS: '500' }));
    let app: ImapFlow | null = null;
    try {
      const p = await newProject(s);
      const inbox = await p.inbox();
      const token = await p.token(['messages:read']);
      await seeded(s, inbox.id);
      app = await mailApp(inbox);
      await append(app, 'INBOX', { subject: 'the first hint' });
      await until('hints known to flow (a hint, then a sweep that found none missed)', async () => s.postern.watchAll.pushHealthy());
      const inboxLabel = await labelIdOf(s, token, inbox.id, 'INBOX');
      for (let i = 0; i < 3; i++) {
        const trusted = s.postern.mailMirror.stats.trustedReads;
        // Dovecot posts the hint before it answers the APPEND: when it returns, Postern knows.
        const uid = await append(app, 'INBOX', { subject: `next ${i}` });
        const res = await page(s, token, inbox.id, inboxLabel, '?limit=5');
        expect(res.status).to.equal(200);
        expect((await json<WirePage>(res)).messages[0]!.subject).to.equal(`next ${i}`);
        expect(s.postern.mailMirror.stats.trustedReads, 'the read trusted the index').to.be.greaterThan(trusted);
        await app.mailboxOpen('INBOX');
        await app.messageFlagsAdd(String(uid), ['\\Flagged'], { uid: true });
        const after = await json<WirePage>(await page(s, token, inbox.id, inboxLabel, '?limit=5'));
        expect(after.messages[0]!.flags).to.include('flagged');
      }
      expect(s.postern.watchAll.stats.missedHints).to.equal(0);
    } finally {
      await app?.logout();
      await s.close();
    }
  });

  it('reads during a first index (10,000 messages): the newest pages at once, counts and unfilled pages 503 with Retry-After, then all of it', async function () {
    this.timeout(240_000);
    const total = 10_000;
    // Watch off: the fill is started below exactly as adding an inbox starts it in push mode.
    const s = await startPostern({ POSTERN_FILL_WAIT_MS: '1000' });
    const hold = holdOlderRanges();
    try {
      const p = await newProject(s);
      const inbox = await p.inbox();
      const token = await p.token(['messages:read']);
      await importMessages(inbox.imapUser, 'bulk', total);
      const isSeeded = () => s.postern.store.mailIndex.isSeeded(inbox.id);
      void s.postern.mailMirror.nudge(mailInbox(inbox), { background: true });
      const guid = await until(
        'the fill under way in bulk',
        async () => (await s.postern.store.mailIndex.labels(inbox.id)).find((l) => l.path === 'bulk')?.guid,
      );
      const bulk = idFromGuid('lbl', guid);

      // The newest page, whole, with its cursor, while the oldest messages are not in yet.
      const first = await page(s, token, inbox.id, bulk, '?limit=50');
      expect(first.status).to.equal(200);
      const body = await json<WirePage>(first);
      expect(await isSeeded(), 'still filling').to.equal(false);
      expect(body.messages.map((m) => m.subject)).to.deep.equal(Array.from({ length: 50 }, (_, i) => `imported ${total - 1 - i}`));
      expect(body.before).to.equal(total - 49);

      // Counts would be short: bounded wait, then 503 with Retry-After.
      const t0 = Date.now();
      const labels = await call(`${s.base}/inboxes/${inbox.id}/labels`, { token });
      expect(labels.status).to.equal(503);
      expect(Number(labels.headers.get('retry-after'))).to.be.at.least(1);
      expect((await json<{ error: string }>(labels)).error).to.match(/indexed for the first time/);
      expect(Date.now() - t0).to.be.below(5000);
      // So would a page the fill has not reached.
      const deep = await page(s, token, inbox.id, bulk, '?limit=50&before=60');
      expect(deep.status).to.equal(503);
      // And a stream: opened over a half-filled index it would never report what the fill brings.
      const stream = await call(`${s.base}/inboxes/${inbox.id}/events`, { token });
      expect(stream.status).to.equal(503);
      expect(stream.headers.get('retry-after')).to.match(/^\d+$/);
      expect((await json<{ error: string }>(stream)).error).to.match(/indexed for the first time/);
      expect(s.postern.mailMirror.watching(inbox.id)).to.deep.equal({ listeners: 0, live: false });
      expect(await isSeeded(), 'still filling').to.equal(false);

      hold.release();
      await until('the fill done', isSeeded, 200_000);
      const done = await json<{ labels: Array<{ name: string; total: number }> }>(
        await call(`${s.base}/inboxes/${inbox.id}/labels`, { token }),
      );
      expect(done.labels.find((l) => l.name === 'bulk')!.total).to.equal(total);
      const seen = new Set<string>();
      let before = '';
      let last = Infinity;
      for (;;) {
        const res = await page(s, token, inbox.id, bulk, `?limit=100${before}`);
        expect(res.status).to.equal(200);
        const pg = await json<WirePage>(res);
        for (const m of pg.messages) {
          const n = Number(m.subject!.split(' ')[1]);
          expect(n).to.be.below(last);
          last = n;
          seen.add(m.id);
        }
        if (pg.before === undefined) break;
        before = `&before=${pg.before}`;
      }
      expect(seen.size).to.equal(total);
    } finally {
      hold.restore();
      await s.close();
    }
  });

  it("a first fill's UID ranges: newest first, cut by message count, tiling every UID", () => {
    expect(descendingRanges([[1, 10_000]])).to.deep.equal([
      { lo: 9501, hi: null },
      { lo: 7501, hi: 9500 },
      { lo: 5501, hi: 7500 },
      { lo: 3501, hi: 5500 },
      { lo: 1501, hi: 3500 },
      { lo: 1, hi: 1500 },
    ]);
    // Resumed below 9501: closed ranges only.
    expect(descendingRanges([[1, 10_000]], 9501)[0]).to.deep.equal({ lo: 9001, hi: 9500 });
    // A few messages over a wide UID span (years of expunges): one range, not hundreds.
    expect(
      descendingRanges([
        [5, 5],
        [300, 310],
        [1_000_000, 1_000_010],
      ]),
    ).to.deep.equal([{ lo: 1, hi: null }]);
    expect(descendingRanges([])).to.deep.equal([{ lo: 1, hi: null }]);
  });

  it('a pass running when another process removes the inbox writes nothing back: removal wins', async function () {
    this.timeout(120_000);
    const s = await startPostern();
    const hold = holdOlderRanges();
    try {
      const p = await newProject(s);
      const inbox = await p.inbox();
      await importMessages(inbox.imapUser, 'bulk', 6000);
      const indexed = () => s.postern.store.mailIndex.status(inbox.id);
      const pass = s.postern.mailMirror.syncNow(mailInbox(inbox)).then(
        () => null,
        (err: unknown) => err,
      );
      await until('the pass writing rows', async () => (await indexed()).locations > 0);
      const removed = await cli(s.storeEnv, 'inbox', 'remove', '--inbox', inbox.id, '--yes');
      expect(removed.code).to.equal(0);
      // The pass was still running (held in its older ranges): its next write is refused.
      hold.release();
      const err = await pass;
      expect(err, 'the pass ended refused, not finished').to.have.property('kind', 'not-found');
      expect(await indexed()).to.deep.include({ seeded: false, messages: 0, locations: 0, labels: 0, staged: 0 });
      // And a later pass (a read racing the removal) is refused too, not a rebuilt index.
      const again = await s.postern.mailMirror.syncNow(mailInbox(inbox)).then(
        () => null,
        (e: unknown) => e,
      );
      expect(again).to.have.property('kind', 'not-found');
      expect((await indexed()).locations).to.equal(0);
    } finally {
      hold.restore();
      await s.close();
    }
  });

  it('postern admin inbox add and remove reach a running serve within about a second', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'postern-watch-cli-'));
    const store = await newStore(dir);
    // A long sweep: only the store's inbox list version can bring the news this fast.
    const server = await spawnPostern(envVars(mailEnv(), { ...store.env, POSTERN_WATCH: 'notify', POSTERN_WATCH_SWEEP_MS: '600000' }));
    // What the test sees of the store: through its ports, as another process would.
    const seen = await openStore(loadConfig(envVars(mailEnv(), store.env)));
    try {
      const report = async (): Promise<WatchReport | null> => (await seen.mailIndex.watchReports(0))[0]?.report ?? null;
      await until('the server reporting', report);
      expect(await report()).to.deep.include({ mode: 'notify', inboxes: 0 });
      const project = await cli(store.env, 'project', 'create', '--name', 'watch cli');
      const user = `cli-${Date.now()}@${mailEnv().domain}`;
      await addUser(mailEnv(), user, 'cli-password-1234');
      const added = await cli(store.env, 'inbox', 'add', '--project', project.out.id as string, '--imap-user', user, '--address', user);
      expect(added.code).to.equal(0);
      const inboxId = added.out.id as string;
      let t0 = Date.now();
      await until(
        'the server watching and indexing the new inbox',
        async () => (await report())?.inboxes === 1 && (await seen.mailIndex.isSeeded(inboxId)),
      );
      // ~1 s in the issue: the poll is 500 ms. Only the poll can bring it before the 10-minute
      // sweep, so the bound is far from both; the first index and a loaded machine fit in it.
      expect(Date.now() - t0).to.be.below(10_000);
      const status = await cli(store.env, 'inbox', 'status', '--inbox', inboxId);
      expect((status.out.watch as { notifyWatcher: string | null }).notifyWatcher).to.be.a('string');
      expect((status.out.servers as Array<{ mode: string; reason: string }>)[0]).to.deep.include({
        mode: 'notify',
        reason: 'POSTERN_WATCH=notify',
      });

      const gone = await cli(store.env, 'inbox', 'remove', '--inbox', inboxId, '--yes');
      expect(gone.code).to.equal(0);
      t0 = Date.now();
      await until('the server letting it go', async () => (await report())?.inboxes === 0);
      expect(Date.now() - t0).to.be.below(10_000);
      // Its NOTIFY watcher stopped: the lease is not taken again.
      expect((await seen.mailIndex.status(inboxId)).watcher).to.equal(null);
    } finally {
      await seen.close();
      await stopProcess(server.child);
      await store.drop();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  describe('push hints from Dovecot', () => {
    let s: TestServer;
    before(async () => {
      // No sweep: only hints can bring the changes in.
      s = await startPostern(pushSettings({ POSTERN_WATCH_SWEEP_MS: '0' }));
    });
    after(() => s.close());

    it("a mail app's append, flag, new folder and move reach GET /events within the target, with no stream, no read and no watcher", async () => {
      const p = await newProject(s);
      const inbox = await p.inbox();
      const token = await p.token(['events:read']);
      await seeded(s, inbox.id); // indexed in the background when added: no read did it
      const app = await mailApp(inbox);
      try {
        const took: number[] = [];
        let uid = 0;
        took.push(await timed(s, token, inbox.id, 1, async () => (uid = await append(app, 'INBOX', { subject: 'pushed' }))));
        await app.mailboxOpen('INBOX');
        took.push(await timed(s, token, inbox.id, 2, () => app.messageFlagsAdd(String(uid), ['\\Flagged'], { uid: true })));
        took.push(
          // The new folder is a label.created too (docs/organize.md, "Events").
          await timed(s, token, inbox.id, 4, async () => {
            await app.mailboxCreate('Projects');
            await append(app, 'Projects', { subject: 'in a new folder' });
          }),
        );
        took.push(await timed(s, token, inbox.id, 6, () => app.messageMove(String(uid), 'Archive', { uid: true })));
        // The move's message.labels (docs/organize.md, "Events") is left out: one or two, as the passes met its labels.
        const moved = async () => (await events(s, token, inbox.id)).filter((e) => e.type !== 'message.labels');
        await until('the move recorded', async () => (await moved()).length >= 6);
        const log = await moved();
        expect(log.map((e) => e.type)).to.have.members([
          'label.created',
          'message.added',
          'message.flags',
          'message.added',
          'message.added',
          'message.removed',
        ]);
        expect(log.find((e) => e.type === 'message.flags')!.data!.flags).to.deep.equal(['flagged']);
        for (const ms of took) expect(ms).to.be.below(TARGET_MS);
        expect(s.postern.watchAll.stats.hints).to.be.greaterThan(0);
        // No connection held for the inbox: no watcher here.
        expect(s.postern.mailMirror.watching(inbox.id)).to.deep.equal({ listeners: 0, live: false });
      } finally {
        await app.logout();
      }
    });

    it('inbox status shows the index; inbox remove stops the watch and drops the index, and its events stay', async () => {
      const p = await newProject(s);
      const inbox = await p.inbox();
      const token = await p.token(['events:read']);
      await seeded(s, inbox.id);
      const app = await mailApp(inbox);
      try {
        await timed(s, token, inbox.id, 2, async () => {
          await append(app, 'INBOX', { subject: 'one' });
          await append(app, 'Archive', { subject: 'two' });
        });
        const status = await cli(s.storeEnv, 'inbox', 'status', '--inbox', inbox.id);
        expect(status.code).to.equal(0);
        expect(status.out).to.deep.include({ id: inbox.id, imapUser: inbox.imapUser });
        expect(status.out.indexed).to.deep.include({ complete: true, messages: 2, places: 2, refilling: 0 });
        expect(status.out.outbox).to.deep.equal({ unfiled: 0 });
        expect((status.out.indexed as { labels: number }).labels).to.be.at.least(6);
        expect(Date.parse(status.out.lastSync as string)).to.be.closeTo(Date.now(), 60_000);
        expect(status.out.watch).to.deep.include({ notifyWatcher: null });

        await s.postern.admin.removeInbox(inbox.id);
        const hintsBefore = s.postern.watchAll.stats.unknownHints;
        await append(app, 'INBOX', { subject: 'after the removal' });
        // Dovecot's hint arrived and found no inbox: Postern had its chance to record it.
        await until('the hint for the removed inbox', async () => s.postern.watchAll.stats.unknownHints > hintsBefore);
        // Kept in the log (docs/api.md, "Project event log"), though no grant reaches them over the API any more.
        const kept = await s.postern.store.events.read({
          projectId: p.projectId,
          after: 0,
          limit: 100,
          recordedBefore: null,
          inboxes: [inbox.id],
          allowedInboxes: [inbox.id],
          visibilities: VISIBILITIES,
          types: null,
          maxScan: 1000,
        });
        expect(kept.events).to.have.length(2);
        expect((await s.postern.store.mailIndex.status(inbox.id)).messages).to.equal(0);
        const gone = await cli(s.storeEnv, 'inbox', 'status', '--inbox', inbox.id);
        expect(gone.code).to.not.equal(0);
        expect(gone.out.error).to.match(/no inbox/);
      } finally {
        await app.logout();
      }
    });

    it('the hint listener refuses a wrong secret, a bad body and other paths with a 4xx JSON error', async () => {
      const { hints } = mailEnv();
      const url = `http://${hints.listen}`;
      const post = (path: string, auth: string, body: string) =>
        fetch(`${url}${path}`, { method: 'POST', headers: { authorization: auth, 'content-type': 'application/json' }, body });
      const refusedBefore = s.postern.watchAll.stats.refusedHints;
      const wrong = await post('/hints', 'Bearer not-the-secret-at-all', '{"user":"x"}');
      expect(wrong.status).to.equal(401);
      expect(await wrong.json()).to.have.property('error');
      // Counted and reported: Dovecot's script may have been set up with another secret.
      expect(s.postern.watchAll.stats.refusedHints).to.equal(refusedBefore + 1);
      expect(s.postern.watchAll.pushHealthy()).to.equal(false);
      expect(s.postern.watchAll.watchReport().verdict).to.match(/refused for its secret/);
      expect((await post('/hints', `Bearer ${hints.secret}`, '{not json')).status).to.equal(400);
      expect((await post('/hints', `Bearer ${hints.secret}`, '{"user":42}')).status).to.equal(400);
      expect((await post('/hints', `Bearer ${hints.secret}`, 'x'.repeat(70_000))).status).to.equal(413);
      expect((await post('/other', `Bearer ${hints.secret}`, '{}')).status).to.equal(404);
      expect((await fetch(`${url}/hints`)).status).to.equal(405);
      // A user Postern does not serve is taken (204) and counted, not an error for Dovecot to log.
      const before = s.postern.watchAll.stats.unknownHints;
      expect((await post('/hints', `Bearer ${hints.secret}`, '{"user":"nobody@elsewhere.test","mailboxes":["INBOX"]}')).status).to.equal(
        204,
      );
      expect(s.postern.watchAll.stats.unknownHints).to.equal(before + 1);
    });
  });

  it('a hint lost on purpose (nobody at the address Dovecot posts to) is caught by the sweep', async () => {
    // The listener is elsewhere: every hint Dovecot sends is refused, i.e. lost.
    // auto: POSTERN_HINT_LISTEN set, so push, though Dovecot cannot reach it.
    const s = await startPostern(
      pushSettings({ POSTERN_WATCH: 'auto', POSTERN_HINT_LISTEN: `127.0.0.1:${await freePort()}`, POSTERN_WATCH_SWEEP_MS: '1000' }),
    );
    try {
      const p = await newProject(s);
      const inbox = await p.inbox();
      const token = await p.token(['events:read']);
      await seeded(s, inbox.id);
      await appAppends(s, token, inbox, 'INBOX', 'hint lost');
      // The sweep that found it counts the hint missed once it has given it its chance. (Waiting for
      // the next sweep to end is not enough: one that began before the append ends without it.)
      await until('a sweep counted the hint missed', async () => s.postern.watchAll.stats.missedHints > 0);
      expect(s.postern.watchAll.stats.hints).to.equal(0);
      expect(s.postern.watchAll.stats.missedHints).to.be.greaterThan(0);
      expect((await events(s, token, inbox.id)).map((e) => e.type)).to.deep.equal(['message.added']);
      // Hints not flowing: reads do not trust the index, and `inbox status` says why.
      expect(s.postern.watchAll.pushHealthy()).to.equal(false);
      const status = await cli(s.storeEnv, 'inbox', 'status', '--inbox', inbox.id);
      expect(status.out.watch).to.deep.include({ lastHint: null });
      const [server] = status.out.servers as Array<{ mode: string; reason: string; pushHealthy: boolean; verdict: string }>;
      expect(server).to.deep.include({ mode: 'push', pushHealthy: false });
      expect(server!.reason).to.match(/POSTERN_WATCH=auto and POSTERN_HINT_LISTEN is set/);
      // Either verdict names the address Dovecot should reach.
      expect(server!.verdict).to.match(/reach(ing)? 127\.0\.0\.1:\d+/);
    } finally {
      await s.close();
    }
  });

  it('without push (POSTERN_WATCH=notify) every inbox has a NOTIFY watcher, and its changes reach the log unstreamed', async () => {
    const s = await startPostern({ POSTERN_WATCH: 'notify', POSTERN_WATCH_SWEEP_MS: '0', POSTERN_EVENTS_SETTLE_MS: '0' });
    try {
      const { inbox, token } = await watchedInbox(s);
      await appAppends(s, token, inbox, 'Archive', 'notified');
      expect((await events(s, token, inbox.id)).map((e) => e.type)).to.deep.equal(['message.added']);
      expect(s.postern.watchAll.stats.hints).to.equal(0);
    } finally {
      await s.close();
    }
  });

  it("notify mode: an inbox whose first index outlasts a read's fill wait keeps its NOTIFY watcher", async () => {
    // The fill's older range is held past POSTERN_FILL_WAIT_MS, as a big inbox's fill outlasts it.
    // The watcher used to wait for the fill as a stream does, get the stream's 503 and be dropped
    // for good: the inbox's changes then came only with the sweep (off here), a minute late.
    const s = await startPostern({
      POSTERN_WATCH: 'notify',
      POSTERN_WATCH_SWEEP_MS: '0',
      POSTERN_FILL_WAIT_MS: '500',
      POSTERN_EVENTS_SETTLE_MS: '0',
    });
    const hold = holdOlderRanges();
    try {
      const p = await newProject(s);
      const token = await p.token(['events:read', 'messages:read']);
      // A mailbox with mail in it before it becomes an inbox (`postern admin inbox add`).
      const imapUser = `${unique('box')}@${mailEnv().domain}`;
      const imapPassword = 'pw';
      await addUser(mailEnv(), imapUser, imapPassword);
      await importMessages(imapUser, 'bulk', 600);
      const { id } = await s.postern.admin.addInbox({ projectId: p.projectId, imapUser, addresses: [imapUser] });
      await s.postern.admin.grant(p.memberId, id, 'owner');
      const inbox: TestInbox = { id, address: imapUser, imapUser, imapPassword };
      await until("the inbox's watcher connected", async () => s.postern.mailMirror.watching(inbox.id).live);
      // Reads wait out the fill wait the watcher began earlier (two, so a wait begun a moment
      // before the first has surely run out), and are answered 503.
      for (let i = 0; i < 2; i++) expect((await call(`${s.base}/inboxes/${inbox.id}/labels`, { token })).status).to.equal(503);
      hold.release();
      await seeded(s, inbox.id);
      expect(s.postern.mailMirror.watching(inbox.id).live, 'watched after its fill').to.equal(true);
      await appAppends(s, token, inbox, 'Archive', 'after a long fill');
      expect(s.postern.watchAll.stats.refusedWatches).to.equal(0);
    } finally {
      hold.restore();
      await s.close();
    }
  });

  it('notify mode: a watch refused at the connection cap is tried again, and watches once there is room', async () => {
    // Room for one watcher (2 connections, half kept for reads): the second inbox's is refused.
    // It used to be given up for good; the sweep (off here) was all that covered it.
    const s = await startPostern({
      POSTERN_WATCH: 'notify',
      POSTERN_WATCH_SWEEP_MS: '0',
      POSTERN_IMAP_MAX_TOTAL: '2',
      POSTERN_IMAP_READ_RESERVE_PERCENT: '50',
      POSTERN_EVENTS_SETTLE_MS: '0',
    });
    try {
      const p = await newProject(s);
      const token = await p.token(['events:read']);
      const first = await p.inbox();
      await until('the first inbox watched', async () => s.postern.mailMirror.watching(first.id).live);
      const second = await p.inbox();
      await until("the second inbox's watch refused at the cap", async () => s.postern.watchAll.stats.refusedWatches >= 1);
      expect(s.postern.mailMirror.watching(second.id).live).to.equal(false);
      // Room again: the first inbox removed, its watcher stops.
      await s.postern.admin.removeInbox(first.id);
      await until('the second inbox watched', async () => s.postern.mailMirror.watching(second.id).live, 20_000);
      // Its watcher's first pass indexes it (no sweep here).
      await seeded(s, second.id);
      await appAppends(s, token, second, 'Archive', 'watched at last');
    } finally {
      await s.close();
    }
  });

  it('notify mode: a pass a watcher asked for that fails (the pool busy) is tried again soon, not at the next poll', async () => {
    const s = await startPostern({ POSTERN_WATCH: 'notify', POSTERN_WATCH_SWEEP_MS: '0', POSTERN_EVENTS_SETTLE_MS: '0' });
    const source = s.postern.mailSource;
    const sync = source.sync.bind(source);
    let failures = 0;
    let failUntil = 0;
    // Passes fail for a while, as they do when no connection is free within the pool's wait:
    // every pass the watcher's signals for the change ask for (Dovecot sends one or two).
    source.sync = async (...args: Parameters<typeof source.sync>) => {
      if (Date.now() < failUntil) {
        failures++;
        throw new PoolBusyError();
      }
      return sync(...args);
    };
    try {
      const { inbox, token } = await watchedInbox(s);
      const app = await mailApp(inbox);
      try {
        failUntil = Date.now() + 1500;
        // Without a retry the change waited for the next signal or the watcher's poll (45 s).
        await timed(s, token, inbox.id, 1, () => append(app, 'Archive', { subject: 'after a busy pool' }));
      } finally {
        await app.logout();
      }
      expect(failures).to.be.at.least(1);
    } finally {
      await s.close();
    }
  });

  it('Postern restarted while a mail app changes things misses nothing', async () => {
    // A store of the test's own: it outlives the first process.
    const dir = mkdtempSync(join(tmpdir(), 'postern-watch-restart-'));
    const store = await newStore(dir);
    const first = await startPostern(pushSettings(store.env));
    const p = await newProject(first);
    const inbox = await p.inbox();
    const token = await p.token(['events:read']);
    await seeded(first, inbox.id);
    const app = await mailApp(inbox);
    // The same store, after the first process stopped.
    const config = loadConfig(envVars(mailEnv(), pushSettings(store.env)));
    let second: Postern | null = null;
    let firstStopped = false;
    try {
      const uid = await append(app, 'INBOX', { subject: 'before the stop' });
      await until('the first change in the log', async () => (await events(first, token, inbox.id)).length >= 1);
      firstStopped = true;
      await first.postern.close();
      // While no Postern runs: Dovecot's hints are refused, i.e. lost.
      // (A message both added and changed while stopped is one message.added with its current flags.)
      await append(app, 'INBOX', { subject: 'while stopped' });
      await app.mailboxOpen('INBOX');
      await app.messageFlagsAdd(String(uid), ['\\Seen'], { uid: true });
      await append(app, 'Archive', { subject: 'elsewhere, while stopped' });
      second = await openPostern(config, pino({ level: config.logLevel }));
      const { url } = await second.listen();
      const log = await until(
        'the changes made while stopped',
        async () => {
          const res = await call(`${url}/v1/events?inboxes=${inbox.id}&limit=200`, { token });
          const body = await json<{ events: WireEvent[] }>(res);
          return body.events.length >= 4 ? body.events : null;
        },
        TARGET_MS + 4000,
      );
      expect(log.map((e) => e.type)).to.have.members(['message.added', 'message.added', 'message.flags', 'message.added']);
      expect(log.find((e) => e.type === 'message.flags')!.data!.flags).to.deep.equal(['seen']);
      // And the restarted process takes hints again: a change after the restart, each one once.
      // From a new connection: the script in the old one's imap process holds back its hints for
      // 10 s after the refusals while Postern was down (docs/watch.md); a new process has not.
      const later = await mailApp(inbox);
      try {
        await append(later, 'INBOX', { subject: 'after the restart' });
      } finally {
        await later.logout();
      }
      const all = await until(
        'the change after the restart',
        async () => {
          const body = await json<{ events: WireEvent[] }>(await call(`${url}/v1/events?inboxes=${inbox.id}&limit=200`, { token }));
          return body.events.length >= 5 ? body.events : null;
        },
        TARGET_MS + 4000,
      );
      expect(second.watchAll.stats.hints).to.be.greaterThan(0);
      expect(all.map((e) => e.type)).to.have.members(['message.added', 'message.added', 'message.flags', 'message.added', 'message.added']);
      expect(new Set(all.map((e) => e.id)).size).to.equal(5);
    } finally {
      await app.logout();
      await second?.close();
      if (!firstStopped) await first.postern.close();
      rmSync(first.dir, { recursive: true, force: true });
      await store.drop();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('two processes on one store (one takes hints, both sweep): each change recorded once', async () => {
    const a = await startPostern(pushSettings({ POSTERN_WATCH_SWEEP_MS: '300' }));
    // B shares A's store, sweeps as often, and takes no hints.
    const config = loadConfig(
      envVars(mailEnv(), { ...a.storeEnv, POSTERN_WATCH: 'notify', POSTERN_WATCH_SWEEP_MS: '300', POSTERN_EVENTS_SETTLE_MS: '0' }),
    );
    const b = await openPostern(config, pino({ level: config.logLevel }));
    await b.listen();
    let app: ImapFlow | null = null;
    try {
      expect(b.config.watch.mode).to.equal('notify');
      const p = await newProject(a);
      const inbox: TestInbox = await p.inbox();
      const token = await p.token(['events:read']);
      await seeded(a, inbox.id);
      app = await mailApp(inbox);
      const uids: number[] = [];
      for (let i = 0; i < 5; i++) uids.push(await append(app, 'INBOX', { subject: `twice? ${i}` }));
      // The adds reach the log before the flags change: a pass that first sees a message already
      // flagged rightly reports it added (with those flags), not added and then flagged.
      await until('the five adds in the log', async () => (await events(a, token, inbox.id)).length >= 5, TARGET_MS + 4000);
      await app.mailboxOpen('INBOX');
      await app.messageFlagsAdd(uids.join(','), ['\\Flagged'], { uid: true });
      await app.mailboxCreate('Last');
      await append(app, 'Last', { subject: 'the last one' });
      await until('every change in the log', async () => (await events(a, token, inbox.id)).length >= 11, TARGET_MS + 4000);
      // B watches the inbox too (NOTIFY, found by its sweep); let the sweeps run over the changes twice more, then count.
      const sweeps = a.postern.watchAll.stats.sweeps + b.watchAll.stats.sweeps;
      await until('two more sweeps', async () => a.postern.watchAll.stats.sweeps + b.watchAll.stats.sweeps >= sweeps + 2);
      const log = await events(a, token, inbox.id);
      expect(log.filter((e) => e.type === 'message.added')).to.have.length(6);
      expect(log.filter((e) => e.type === 'message.flags')).to.have.length(5);
    } finally {
      await app?.logout();
      await b.close();
      await a.close();
    }
  });
});
