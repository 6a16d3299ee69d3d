// The inbox stream across processes sharing one store: a change one process applied reaches the
// subscribers of the others (through Redis between instances, through the primary between the
// workers of one instance), each change once, even when two processes applied it.
import { expect } from 'chai';
import { pino } from 'pino';
import { loadConfig } from '../../lib/config.ts';
import type { LiveChange } from '../../lib/mail/types.ts';
import { openPostern, type Postern } from '../../lib/server.ts';
import {
  call,
  callFresh,
  clusterFixture,
  envVars,
  json,
  mailEnv,
  newProject,
  startPostern,
  type TestInbox,
  type TestProject,
  type TestServer,
} from '../helpers/harness.ts';
import { append, holdFetchesInPairs, mailApp, mailAppScript, openInboxStream, type SseReader, until } from '../helpers/mail-fixtures.ts';
import { spawnPostern, stopProcess } from '../helpers/processes.ts';

/**
 * A change made after the ones under test, that must reach the stream after them: once it is
 * there, whatever the earlier changes could still produce (a duplicate, a late announcement)
 * would be there before it. No fixed sleep: the negative assertions that follow can fail.
 */
async function marker(inbox: TestInbox, stream: SseReader, subject = 'marker'): Promise<number> {
  const app = await mailApp(inbox);
  try {
    const uid = await append(app, 'INBOX', { subject });
    await stream.next((e) => e.event === 'message.added' && parse(e.data).uid === uid);
    return uid;
  } finally {
    await app.logout();
  }
}

interface Change {
  type: string;
  msgId: string;
  labelId?: string;
  uid?: number;
  flags?: string[];
}
const parse = (data: string) => JSON.parse(data) as Change;
/** What a test compares of a streamed change. */
const sig = (c: Change) => `${c.type} ${c.labelId} ${JSON.stringify(c.flags ?? c.uid ?? '')}`;

const labelsOf = async (base: string, inbox: TestInbox, token: string) => {
  const res = await call(`${base}/inboxes/${inbox.id}/labels`, { token });
  expect(res.status).to.equal(200);
  const { labels } = await json<{ labels: Array<{ id: string; name: string }> }>(res);
  return Object.fromEntries(labels.map((l) => [l.name, l.id])) as Record<string, string>;
};

/** Records every batch a process's sync applied (before it is delivered and published). */
function spyApplied(postern: Postern): Array<{ inboxId: string; changes: readonly LiveChange[] }> {
  const seen: Array<{ inboxId: string; changes: readonly LiveChange[] }> = [];
  const live = postern.mailMirror.live;
  const applied = live.applied.bind(live);
  live.applied = (inboxId, changes) => {
    seen.push({ inboxId, changes });
    applied(inboxId, changes);
  };
  return seen;
}

/** Short, so a takeover is quick to test: renewed every 500 ms. */
const LEASE_MS = '1500';

describe('inbox stream: two Postern instances on one store and Redis', function () {
  this.timeout(120_000);
  let a: TestServer;
  let b: Postern;
  let bBase: string;
  let p: TestProject;
  let token: string;
  let appliedByA: ReturnType<typeof spyApplied>;
  let appliedByB: ReturnType<typeof spyApplied>;
  const streams: SseReader[] = [];

  before(async () => {
    const redis = mailEnv().redis.url;
    a = await startPostern({ REDIS_URL: redis, POSTERN_STREAM_MAX_MS: '120000', POSTERN_IMAP_WATCH_LEASE_MS: LEASE_MS });
    b = await openPostern(
      loadConfig(
        envVars(mailEnv(), { ...a.storeEnv, REDIS_URL: redis, POSTERN_STREAM_MAX_MS: '120000', POSTERN_IMAP_WATCH_LEASE_MS: LEASE_MS }),
      ),
      pino({ level: 'silent' }),
    );
    bBase = `${(await b.listen()).url}/v1`;
    p = await newProject(a);
    token = await p.token(['messages:read']);
    appliedByA = spyApplied(a.postern);
    appliedByB = spyApplied(b);
  });
  afterEach(async () => {
    for (const r of streams.splice(0)) await r.close();
  });
  after(async () => {
    await b?.close();
    await a?.close();
  });

  const appliedIn = (log: ReturnType<typeof spyApplied>, inbox: TestInbox) =>
    log.filter((x) => x.inboxId === inbox.id).flatMap((x) => x.changes.map((c) => c.type));

  it('a subscriber on B sees each change A applied, once and in order', async () => {
    const inbox = await p.inbox();
    const labels = await labelsOf(a.base, inbox, token);
    const onB = await openInboxStream(bBase, inbox, token);
    streams.push(onB);
    const app = await mailApp(inbox);
    let uid = 0;
    try {
      // Each change is read through A at once: A (no watcher) syncs and applies it right away,
      // about half a second before Dovecot tells B's watcher, whose sync then finds the index
      // already current and has nothing to say.
      uid = await append(app, 'INBOX', { subject: 'applied by A' });
      await labelsOf(a.base, inbox, token);
      await onB.next((e) => e.event === 'message.added');
      await app.mailboxOpen('INBOX');
      await app.messageFlagsAdd(String(uid), ['\\Flagged'], { uid: true });
      await labelsOf(a.base, inbox, token);
      await onB.next((e) => e.event === 'message.flags');
      await app.messageDelete(String(uid), { uid: true });
      await labelsOf(a.base, inbox, token);
      await onB.next((e) => e.event === 'message.removed');
    } finally {
      await app.logout();
    }
    // Not read through A: B's watcher applies it, after its passes for the changes above.
    const last = await marker(inbox, onB);
    expect(onB.events.map((e) => sig(parse(e.data)))).to.deep.equal([
      `message.added ${labels.INBOX} ${uid}`,
      `message.flags ${labels.INBOX} ["flagged"]`,
      `message.removed ${labels.INBOX} ""`,
      `message.added ${labels.INBOX} ${last}`,
    ]);
    // Each change was applied once, by A or B (on a busy host B's watcher may be first to one of
    // A's), and B applied the marker: what B's subscriber heard of A's came through Redis.
    const applied = [...appliedIn(appliedByA, inbox), ...appliedIn(appliedByB, inbox)].sort();
    expect(applied).to.deep.equal(['message.added', 'message.added', 'message.flags', 'message.removed']);
    expect(appliedIn(appliedByB, inbox)).to.include('message.added');
  });

  it('with both applying the same changes (the race forced), subscribers on each see every change once', async () => {
    const release = holdFetchesInPairs();
    try {
      const inbox = await p.inbox();
      const labels = await labelsOf(a.base, inbox, token);
      // A third process holds the inbox's watcher lease (and never publishes): neither A nor B
      // watches, so each read syncs. Both read after each change: both syncs fetch it before
      // either writes it, and the fetches are held until both have answered.
      await a.postern.store.mailIndex.claim([inbox.id], 'another-process', 600_000);
      const onA = await openInboxStream(a.base, inbox, token);
      const onB = await openInboxStream(bBase, inbox, token);
      streams.push(onA, onB);
      expect([a.postern.mailMirror.watching(inbox.id).live, b.mailMirror.watching(inbox.id).live]).to.deep.equal([false, false]);
      const mail = await mailApp(inbox);
      const expected: string[] = [];
      const step = async (change: () => Promise<unknown>, wanted: () => string[]) => {
        await change();
        await Promise.all([labelsOf(a.base, inbox, token), labelsOf(bBase, inbox, token)]);
        expected.push(...wanted());
        for (const s of [onA, onB]) {
          await until(`${wanted().join(', ')} on a stream`, async () => {
            const have = s.events.map((e) => sig(parse(e.data)));
            return expected.every((w) => have.filter((h) => h === w).length >= expected.filter((x) => x === w).length);
          });
        }
      };
      try {
        await mailAppScript(mail, { INBOX: labels.INBOX!, Archive: labels.Archive! }, step);
      } finally {
        await mail.logout();
      }
      // Two markers, one applied by each process (read through it alone): on each stream they
      // come after everything both processes published before them (one origin's bus messages
      // arrive in order).
      const markers: string[] = [];
      for (const [base, name] of [
        [a.base, 'A'],
        [bBase, 'B'],
      ] as const) {
        const m = await mailApp(inbox);
        try {
          const uid = await append(m, 'INBOX', { subject: `marker applied by ${name}` });
          await labelsOf(base, inbox, token);
          markers.push(`message.added ${labels.INBOX} ${uid}`);
          for (const s of [onA, onB]) await s.next((e) => e.event === 'message.added' && parse(e.data).uid === uid);
        } finally {
          await m.logout();
        }
      }
      for (const s of [onA, onB]) {
        // The move's message.labels (docs/organize.md, "Events") are left out: how many depends on the passes.
        const all = s.events.filter((e) => e.event !== 'message.labels').map((e) => sig(parse(e.data)));
        expect(all.slice(-2)).to.deep.equal(markers);
        const seen = all.slice(0, -2);
        // The move is a removal from one label and an addition to another, in whichever order the sync met the two labels.
        expect([...seen.slice(0, 4), ...seen.slice(4, 6).sort(), ...seen.slice(6)]).to.deep.equal([
          ...expected.slice(0, 4),
          ...expected.slice(4, 6).sort(),
          ...expected.slice(6),
        ]);
      }
      // The race did happen: both processes applied (and announced) at least one of the two
      // additions. (A flag change or removal the other process applied first is not announced
      // again: the store reports it unapplied.)
      const added = (log: ReturnType<typeof spyApplied>) => appliedIn(log, inbox).filter((t) => t === 'message.added').length;
      const announced = { a: appliedIn(appliedByA, inbox), b: appliedIn(appliedByB, inbox) };
      expect(added(appliedByA) + added(appliedByB), `additions announced by A and B: ${JSON.stringify(announced)}`).to.be.above(2);
    } finally {
      release();
    }
  });

  it('one process watches an inbox (the lease); the other hears its changes, and takes over when it stops', async () => {
    const inbox = await p.inbox();
    const labels = await labelsOf(a.base, inbox, token);
    const onA = await openInboxStream(a.base, inbox, token);
    const onB = await openInboxStream(bBase, inbox, token);
    streams.push(onB);
    const live = () => [a.postern.mailMirror.watching(inbox.id).live, b.mailMirror.watching(inbox.id).live];
    expect(live(), 'watchers live on A and B').to.deep.equal([true, false]);
    const app = await mailApp(inbox);
    try {
      // Only A's watcher hears of it; B's subscriber through the bus.
      const first = await append(app, 'INBOX', { subject: 'watched by A' });
      for (const s of [onA, onB]) await s.next((e) => e.event === 'message.added');
      expect(appliedIn(appliedByB, inbox)).to.deep.equal([]);
      // A's last subscriber goes: A gives the lease up, and B takes it at its next renewal.
      await onA.close();
      await until('B to take the watcher over', async () => live()[1] === true, 5000);
      expect(live()[0]).to.equal(false);
      const second = await append(app, 'INBOX', { subject: 'watched by B' });
      await onB.next((e) => e.event === 'message.added' && parse(e.data).uid === second);
      const last = await marker(inbox, onB);
      expect(onB.events.map((e) => sig(parse(e.data)))).to.deep.equal([
        `message.added ${labels.INBOX} ${first}`,
        `message.added ${labels.INBOX} ${second}`,
        `message.added ${labels.INBOX} ${last}`,
      ]);
      expect(appliedIn(appliedByB, inbox)).to.deep.equal(['message.added', 'message.added']);
    } finally {
      await app.logout();
    }
  });

  it('a holder that dies: another process takes the watcher over once its lease lapses, and catches up', async () => {
    const inbox = await p.inbox();
    const labels = await labelsOf(a.base, inbox, token);
    const env = { ...a.storeEnv, REDIS_URL: mailEnv().redis.url, POSTERN_STREAM_MAX_MS: '120000', POSTERN_IMAP_WATCH_LEASE_MS: LEASE_MS };
    const other = await spawnPostern(envVars(mailEnv(), env));
    try {
      const onOther = await openInboxStream(`${other.url}/v1`, inbox, token);
      streams.push(onOther);
      const onA = await openInboxStream(a.base, inbox, token);
      streams.push(onA);
      expect(a.postern.mailMirror.watching(inbox.id).live, 'A watches while the other process holds the lease').to.equal(false);
      other.child.kill('SIGKILL');
      // Mail arrives while nobody watches: the lease still names the dead process.
      const app = await mailApp(inbox);
      let uid = 0;
      try {
        uid = await append(app, 'INBOX', { subject: 'while the holder is gone' });
      } finally {
        await app.logout();
      }
      const started = Date.now();
      await until('A to take the watcher over', async () => a.postern.mailMirror.watching(inbox.id).live, 15_000);
      await onA.next((e) => e.event === 'message.added');
      // Within a lease and one renewal (plus Dovecot's half second and a login and catch-up on a
      // loaded machine), not at the 45 s poll: the bound stays far from both.
      expect(Date.now() - started).to.be.below(15_000);
      const last = await marker(inbox, onA);
      expect(onA.events.map((e) => sig(parse(e.data)))).to.deep.equal([
        `message.added ${labels.INBOX} ${uid}`,
        `message.added ${labels.INBOX} ${last}`,
      ]);
    } finally {
      await stopProcess(other.child);
    }
  });
});

describe('inbox stream: postern serve with POSTERN_WORKERS=2 (no Redis)', function () {
  this.timeout(60_000);
  const f = clusterFixture({ POSTERN_STREAM_MAX_MS: '120000' });

  it('a stream sees each change once, whichever worker applied it', async () => {
    const p = await newProject(f.admin);
    const inbox = await p.inbox();
    const token = await p.token(['messages:read', 'flags:write']);
    const labels = await labelsOf(f.base, inbox, token);
    const stream = await openInboxStream(f.base, inbox, token);
    try {
      const app = await mailApp(inbox);
      let uid = 0;
      try {
        uid = await append(app, 'INBOX', { subject: 'two workers' });
      } finally {
        await app.logout();
      }
      // Reads on connections of their own, at once: the worker without the stream syncs and
      // applies the addition before Dovecot tells the other worker's watcher.
      const reads = await Promise.all([1, 2, 3].map(() => callFresh('GET', `${f.base}/inboxes/${inbox.id}/labels`, token)));
      expect(reads.map((r) => r.status)).to.deep.equal([200, 200, 200]);
      const added = parse((await stream.next((e) => e.event === 'message.added')).data);
      // Flag changes through the API, one after another on connections of their own: the round
      // robin gives them to both workers, and the worker that took one applies it at once.
      const changes = [{ add: ['flagged'] }, { remove: ['flagged'] }, { add: ['flagged'] }, { remove: ['flagged'] }, { add: ['seen'] }];
      for (const [n, body] of changes.entries()) {
        const res = await callFresh('POST', `${f.base}/inboxes/${inbox.id}/messages/${added.msgId}/flags`, token, body);
        expect(res.status, res.body).to.equal(200);
        await until(`flag change ${n} on the stream`, async () => stream.events.filter((e) => e.event === 'message.flags').length > n);
      }
      // Through the watcher (no read): its passes for the changes above come first.
      const last = await marker(inbox, stream);
      expect(stream.events.map((e) => sig(parse(e.data)))).to.deep.equal([
        `message.added ${labels.INBOX} ${uid}`,
        `message.flags ${labels.INBOX} ["flagged"]`,
        `message.flags ${labels.INBOX} []`,
        `message.flags ${labels.INBOX} ["flagged"]`,
        `message.flags ${labels.INBOX} []`,
        `message.flags ${labels.INBOX} ["seen"]`,
        `message.added ${labels.INBOX} ${last}`,
      ]);
    } finally {
      await stream.close();
    }
  });
});
