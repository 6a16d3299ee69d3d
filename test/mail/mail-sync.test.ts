// The index sync against the real Dovecot: silent re-seed on a new UIDVALIDITY, fills over
// several connections and their recovery, recovery of a lost index, label deletion. Big labels:
// test/mail/mail-sync-big.test.ts; the IMAP pool: test/mail/imap-pool.test.ts. (The index store's guard
// against writes applied out of order: test/store-contract/mail-index.contract.ts.)
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { expect } from 'chai';
import type { ImapFlow } from 'imapflow';
import type { IndexOp } from '../../lib/mail/types.ts';
import { call, mailEnv, newProject, startPostern, type TestInbox, type TestProject, type TestServer } from '../helpers/harness.ts';
import { append, importMessages, json, mailApp, SseReader, until } from '../helpers/mail-fixtures.ts';
import { storeBackdoor } from '../helpers/store-backdoor.ts';

const run = promisify(execFile);

interface Summary {
  id: string;
  uid: number;
  subject?: string;
}

describe('index sync', function () {
  this.timeout(60_000);
  let s: TestServer;
  let p: TestProject;
  let token: string;

  const labels = async (inbox: TestInbox) =>
    Object.fromEntries(
      (
        await json<{ labels: Array<{ id: string; name: string; total: number }> }>(
          await call(`${s.base}/inboxes/${inbox.id}/labels`, { token }),
        )
      ).labels.map((l) => [l.name, l]),
    );
  const list = async (inbox: TestInbox, label: string) =>
    (await json<{ messages: Summary[] }>(await call(`${s.base}/inboxes/${inbox.id}/labels/${label}/messages?limit=100`, { token })))
      .messages;
  const stream = async (inbox: TestInbox) => {
    const abort = new AbortController();
    const res = await call(`${s.base}/inboxes/${inbox.id}/events`, { token, signal: abort.signal });
    expect(res.status).to.equal(200);
    return new SseReader(res, abort);
  };
  /**
   * A mail app appends a marker to INBOX; resolves with the position of its message.added on the
   * stream. Passes of one inbox run one at a time, so whatever an earlier change could still
   * announce has been announced by then: what comes before the marker is all there will be.
   */
  const marker = async (inbox: TestInbox, sse: SseReader): Promise<number> => {
    const inboxLabel = (await labels(inbox)).INBOX!.id;
    const app = await mailApp(inbox);
    try {
      const uid = await append(app, 'INBOX', { subject: 'marker' });
      const seen = await sse.next(
        (e) =>
          e.event === 'message.added' &&
          (JSON.parse(e.data) as { labelId: string; uid: number }).labelId === inboxLabel &&
          (JSON.parse(e.data) as { uid: number }).uid === uid,
        20_000,
      );
      return sse.events.indexOf(seen);
    } finally {
      await app.logout();
    }
  };

  before(async () => {
    // Reads here wait out the first fill of big labels (the bounded wait and its 503 are
    // test/mail/mail-watch.test.ts's subject).
    s = await startPostern({ POSTERN_FILL_WAIT_MS: '240000' });
    p = await newProject(s);
    token = await p.token(['messages:read']);
  });
  after(() => s?.close());

  it('a new UIDVALIDITY re-seeds the label silently: only real differences are reported', async () => {
    const inbox = await p.inbox();
    const app = await mailApp(inbox);
    try {
      await app.mailboxCreate('reseed');
      for (let i = 0; i < 3; i++) await append(app, 'reseed', { subject: `old ${i}` });
      const label = (await labels(inbox)).reseed!.id;
      const before = await list(inbox, label);
      const sse = await stream(inbox);
      const conf = join(mailEnv().dir, 'dovecot', 'dovecot.conf');
      await run('doveadm', [
        '-c',
        conf,
        'mailbox',
        'update',
        '-u',
        inbox.imapUser,
        '--uid-validity',
        String(Math.floor(Date.now() / 1000) % 1_000_000_000),
        'reseed',
      ]);
      const uid = await append(app, 'reseed', { subject: 'new one' });
      const added = JSON.parse((await sse.next((e) => e.event === 'message.added')).data) as { uid: number; labelId: string };
      expect(added).to.include({ uid, labelId: label });
      const after = await list(inbox, label);
      expect(after.slice(1).map((m) => m.id)).to.deep.equal(before.map((m) => m.id));
      const upTo = await marker(inbox, sse);
      expect(sse.events.slice(0, upTo).map((e) => e.event)).to.deep.equal(['message.added']);
      await sse.close();
    } finally {
      await app.logout();
    }
  });

  it('fills a big label over several connections at once, every message exactly once', async () => {
    const inbox = await p.inbox();
    await importMessages(inbox.imapUser, 'bulk', 4500);
    const label = (await labels(inbox)).bulk!;
    expect(label.total).to.equal(4500);
    const uids: number[] = [];
    for (let before: number | undefined; ; ) {
      const res = await call(`${s.base}/inboxes/${inbox.id}/labels/${label.id}/messages?limit=100${before ? `&before=${before}` : ''}`, {
        token,
      });
      const pg = await json<{ messages: Summary[]; before?: number }>(res);
      uids.push(...pg.messages.map((m) => m.uid));
      if (!pg.before) break;
      before = pg.before;
    }
    expect(uids).to.deep.equal(Array.from({ length: 4500 }, (_, i) => 4500 - i));
    // It used more than one connection of the inbox, and no more than the per-inbox bound.
    expect(s.postern.mailSource.pool.connectionsOf(inbox.imapUser), 'connections the fill used (idle now)').to.be.within(2, 4);
  });

  /** The index store behind the running Postern, and its connection pool, for fault injection. */
  const internals = () => ({ store: s.postern.store.mailIndex, pool: s.postern.mailSource.pool });
  /** Calls `onApply` before each index write of the inbox; undo with the returned function. */
  const onApply = (inboxId: string, hook: (ops: readonly IndexOp[]) => void) => {
    const { store } = internals();
    const apply = store.apply;
    store.apply = function (id, ops, label) {
      if (id === inboxId) hook(ops);
      return apply.call(this, id, ops, label);
    };
    return () => {
      store.apply = apply;
    };
  };
  const allUids = async (inbox: TestInbox, label: string) => {
    const out: Summary[] = [];
    for (let before: number | undefined; ; ) {
      const pg = await json<{ messages: Summary[]; before?: number }>(
        await call(`${s.base}/inboxes/${inbox.id}/labels/${label}/messages?limit=100${before ? `&before=${before}` : ''}`, { token }),
      );
      out.push(...pg.messages);
      if (!pg.before) break;
      before = pg.before;
    }
    return out;
  };

  it('a pass whose connection dies mid-fill resumes after its last batch: every message announced once', async () => {
    const inbox = await p.inbox();
    await labels(inbox); // seeded (empty): a label filled from now on is news
    await importMessages(inbox.imapUser, 'midway', 1500);
    // Close the pass's connection once the first 500 rows are being written (in however many
    // transactions: their size follows the host's speed).
    const { pool } = internals();
    const use = pool.use;
    let current: ImapFlow | null = null;
    pool.use = ((user: string, task: (c: ImapFlow) => Promise<unknown>, lane?: 'interactive' | 'bulk') =>
      use.call(pool, user, (c) => ((current = c), task(c)), lane)) as typeof pool.use;
    let killed = 0;
    let written = 0;
    const undo = onApply(inbox.id, (ops) => {
      written += ops.length;
      if (killed === 0 && written >= 500) {
        killed++;
        current?.close();
      }
    });
    try {
      const sse = await stream(inbox);
      await until('1500 announcements', async () => sse.events.length >= 1501, 20_000);
      const upTo = await marker(inbox, sse);
      expect(killed, 'the injected failure happened').to.equal(1);
      // The new label is announced once, before its messages (docs/organize.md, "Events").
      expect(
        sse.events
          .slice(0, upTo)
          .filter((e) => e.event.startsWith('label.'))
          .map((e) => e.event),
      ).to.deep.equal(['label.created']);
      expect(sse.events[0]!.event).to.equal('label.created');
      const events = sse.events.slice(1, upTo);
      const ids = events.map((e) => (JSON.parse(e.data) as { msgId: string }).msgId);
      expect(events.every((e) => e.event === 'message.added')).to.equal(true);
      expect(ids).to.have.length(1500);
      expect(new Set(ids).size).to.equal(1500);
      await sse.close();
    } finally {
      undo();
      pool.use = use;
    }
    const label = (await labels(inbox)).midway!;
    expect(label.total).to.equal(1500);
    expect((await allUids(inbox, label.id)).map((m) => m.uid)).to.deep.equal(Array.from({ length: 1500 }, (_, i) => 1500 - i));
  });

  it('a re-seed that fails midway keeps the old rows; the next pass swaps in the refill at once', async () => {
    const inbox = await p.inbox();
    await importMessages(inbox.imapUser, 'swap', 1200);
    const label = (await labels(inbox)).swap!.id;
    const before = await allUids(inbox, label);
    expect(before).to.have.length(1200);
    const conf = join(mailEnv().dir, 'dovecot', 'dovecot.conf');
    await run('doveadm', [
      '-c',
      conf,
      'mailbox',
      'update',
      '-u',
      inbox.imapUser,
      '--uid-validity',
      String(Math.floor(Date.now() / 1000) % 1_000_000_000),
      'swap',
    ]);
    // The refill fails at its first staged write (not a dead connection: no retry).
    let failed = 0;
    let staged = 0;
    const undo = onApply(inbox.id, (ops) => {
      if (!ops.some((o) => o.op === 'stage')) return;
      if (failed === 0) {
        failed++;
        throw new Error('injected failure during the refill');
      }
      staged += ops.length;
    });
    try {
      // Served from the index: complete, old ids, while the label cannot be refilled.
      expect(await allUids(inbox, label)).to.deep.equal(before);
      expect(failed).to.equal(1);
    } finally {
      undo();
    }
    const sse = await stream(inbox);
    const after = await allUids(inbox, label);
    expect(after.map((m) => m.id)).to.deep.equal(before.map((m) => m.id));
    const upTo = await marker(inbox, sse);
    expect(sse.events.slice(0, upTo), 'nothing really changed').to.deep.equal([]);
    expect(staged, 'rows staged after the failure: one refill, whole').to.equal(1200);
    await sse.close();
  });

  it('a lost index is rebuilt silently with the same ids', async () => {
    const inbox = await p.inbox();
    const app = await mailApp(inbox);
    try {
      for (let i = 0; i < 4; i++) await append(app, 'INBOX', { subject: `kept ${i}` });
      const inboxLabel = (await labels(inbox)).INBOX!.id;
      const before = await list(inbox, inboxLabel);
      const sse = await stream(inbox);
      const door = await storeBackdoor(s.storeEnv);
      try {
        for (const table of ['mail_locations', 'mail_messages', 'mail_labels', 'mail_inboxes']) {
          await door.run(`DELETE FROM ${table} WHERE inbox_id = ?`, inbox.id);
        }
      } finally {
        await door.close();
      }
      // The stream's own watcher keeps reads from syncing; a flag change makes it sync now.
      await app.mailboxOpen('INBOX');
      await app.messageFlagsAdd('1', ['\\Seen'], { uid: true });
      const expected = JSON.stringify(before.map((m) => (m.uid === 1 ? { ...m, flags: ['seen'] } : m)));
      await until('the index rebuilt with the flag', async () => JSON.stringify(await list(inbox, inboxLabel)) === expected, 20_000);
      const upTo = await marker(inbox, sse);
      expect(sse.events.slice(0, upTo)).to.deep.equal([]);
      await sse.close();
    } finally {
      await app.logout();
    }
  });

  it('a deleted label disappears, and its messages are reported removed', async () => {
    const inbox = await p.inbox();
    const app = await mailApp(inbox);
    try {
      await app.mailboxCreate('doomed');
      await append(app, 'doomed');
      const id = (await labels(inbox)).doomed!.id;
      const sse = await stream(inbox);
      await app.mailboxDelete('doomed');
      const removed = JSON.parse((await sse.next((e) => e.event === 'message.removed')).data) as { labelId: string };
      expect(removed.labelId).to.equal(id);
      expect(await labels(inbox)).to.not.have.property('doomed');
      expect((await call(`${s.base}/inboxes/${inbox.id}/labels/${id}/messages`, { token })).status).to.equal(404);
      await sse.close();
    } finally {
      await app.logout();
    }
  });
});
