// The index sync and the IMAP pool against the real Dovecot: silent re-seed on a new
// UIDVALIDITY, recovery of a lost index, label deletion, and the pool's isolation and bounds.
// (The index store's guard against writes applied out of order: test/store-contract/mail-index.contract.ts.)
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { expect } from 'chai';
import { pino } from 'pino';
import type { ImapFlow } from 'imapflow';
import { ImapPool, PoolBusyError } from '../adapters/imap/pool.ts';
import type { IndexOp, MailInbox, MailIndexStore } from '../lib/mail/types.ts';
import { uidSets } from '../adapters/imap/raw.ts';
import { call, mailEnv, newProject, startPostern, type TestInbox, type TestProject, type TestServer } from './harness.ts';
import { append, importMessages, json, mailApp, SseReader, until } from './mail-fixtures.ts';
import { storeBackdoor } from './store-backdoor.ts';

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
    // test/mail-watch.test.ts's subject).
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

describe('index sync: passes and big labels', function () {
  let s: TestServer;
  let p: TestProject;
  let token: string;

  before(async () => {
    // Reads here wait out the first fill of big labels (the bounded wait and its 503 are
    // test/mail-watch.test.ts's subject).
    s = await startPostern({ POSTERN_FILL_WAIT_MS: '240000' });
    p = await newProject(s);
    token = await p.token(['messages:read']);
  });
  after(() => s?.close());

  const internals = () => {
    const source = s.postern.mailSource as unknown as { indexSync: { run: (...a: unknown[]) => Promise<unknown> } };
    return { store: s.postern.store.mailIndex, sync: source.indexSync };
  };

  it('passes of one inbox never overlap, whenever callers arrive (even as one pass hands over to the next)', async function () {
    this.timeout(30_000);
    const inbox = await p.inbox();
    const mail: MailInbox = { id: inbox.id, imapUser: inbox.imapUser, addresses: [inbox.address] };
    const { sync } = internals();
    const run = sync.run;
    let active = 0;
    let most = 0;
    let passes = 0;
    const asked: Array<Promise<void>> = [];
    // Each pass, as it ends, asks for more at every microtask depth from 0 to 24 after its end:
    // some of those land in the gap between one pass ending and the queued one starting.
    sync.run = async function (...a: unknown[]) {
      active++;
      most = Math.max(most, active);
      passes++;
      try {
        return await run.apply(this, a);
      } finally {
        active--;
        if (passes <= 4) {
          for (let depth = 0; depth < 25; depth++) {
            let step: () => void = () => void asked.push(s.postern.mailMirror.syncNow(mail));
            for (let i = 0; i < depth; i++) {
              const inner = step;
              step = () => queueMicrotask(inner);
            }
            step();
          }
        }
      }
    };
    try {
      await Promise.all([s.postern.mailMirror.syncNow(mail), s.postern.mailMirror.syncNow(mail)]);
      await until('every pass asked for to end', async () => {
        const n = asked.length;
        await Promise.all(asked);
        return asked.length === n;
      });
    } finally {
      sync.run = run;
    }
    expect(passes).to.be.at.least(5);
    expect(most, 'passes running at once').to.equal(1);
  });

  it('a big first fill writes the index in bounded transactions, with a turn of the event loop between two', async function () {
    this.timeout(120_000);
    // 5,000 messages: over the 4,000 from which a fill runs over several connections at once.
    const total = 5000;
    const inbox = await p.inbox();
    await importMessages(inbox.imapUser, 'big', total);
    const { store } = internals();
    const apply = store.apply;
    let writes = 0;
    let largest = 0;
    let back = 0; // a write that started in the same turn of the event loop as the one before it
    let turned = true;
    store.apply = function (...a: Parameters<MailIndexStore['apply']>) {
      writes++;
      largest = Math.max(largest, a[1].length);
      if (!turned) back++;
      turned = false;
      // Queued before the writer's own yield after this write: it runs first if the writer yields.
      setImmediate(() => (turned = true));
      return apply.apply(this, a);
    };
    try {
      await s.postern.mailMirror.nudge({ id: inbox.id, imapUser: inbox.imapUser, addresses: [inbox.address] }, { background: true });
    } finally {
      store.apply = apply;
    }
    expect(await store.isSeeded(inbox.id), 'the fill completed').to.equal(true);
    const big = (await store.labels(inbox.id)).find((l) => l.path === 'big')!;
    expect(await store.countIn(inbox.id, big.guid)).to.equal(total);
    expect(big.fillLow).to.equal(null);
    // SQLite's writes are sized to its cost (they hold the event loop); PostgreSQL's are the sync's batches of 500.
    const bound = store.writeSizing?.maxRows ?? 500;
    expect(writes).to.be.at.least(total / bound);
    expect(largest, 'ops in one transaction').to.be.at.most(bound);
    expect(back, 'writes back to back, with no turn of the event loop between').to.equal(0);
  });

  // SLOW (about a minute): 50,000 messages. The reconcile path lists and fetches UIDs in bounded
  // sets: one UID list of the lot passed Dovecot's imap_max_line_length and failed the label for good.
  it('[slow: 50,000 messages] reconciles a big label with scattered expunges and scattered lost rows', async function () {
    this.timeout(240_000);
    const total = 50_000;
    const inbox = await p.inbox();
    await importMessages(inbox.imapUser, 'huge', total);
    const labelsOf = async () =>
      Object.fromEntries(
        (
          await json<{ labels: Array<{ id: string; name: string; total: number }> }>(
            await call(`${s.base}/inboxes/${inbox.id}/labels`, { token }),
          )
        ).labels.map((l) => [l.name, l]),
      );
    expect((await labelsOf()).huge!.total).to.equal(total);
    const { store } = internals();
    const labelGuid = (await store.labels(inbox.id)).find((l) => l.path === 'huge')!.guid;

    // A mail app expunges every 7th message; the index loses every 3rd row without hearing of it
    // (say, a write lost in a crash), and is told it has seen every change up to now.
    const app = await mailApp(inbox);
    try {
      await app.mailboxOpen('huge');
      const expunged = Array.from({ length: Math.floor(total / 7) }, (_, i) => (i + 1) * 7);
      for (const set of uidSets(expunged)) await app.messageDelete(set, { uid: true });
      await app.mailboxClose();
      const status = await app.status('huge', { highestModseq: true });
      if (!status) throw new Error('no STATUS of huge');
      const state = (await store.labels(inbox.id)).find((l) => l.guid === labelGuid)!;
      const lost = Array.from({ length: Math.floor(total / 3) }, (_, i) => (i + 1) * 3);
      await store.apply(
        inbox.id,
        lost.map((uid) => ({ op: 'remove', labelGuid, uid })),
        { ...state, highestModseq: Number(status.highestModseq) },
      );
      // One more change, so the next pass opens the label; its count then disagrees with the server's.
      await app.mailboxOpen('huge');
      await app.messageFlagsAdd('1', ['\\Seen'], { uid: true });

      const left = (await labelsOf()).huge!;
      expect(left.total).to.equal(total - expunged.length);
      const gone = new Set(expunged);
      const wanted = Array.from({ length: total }, (_, i) => i + 1).filter((uid) => !gone.has(uid));
      const indexed = (await store.uidsOf(inbox.id, labelGuid, 0, total + 1)).map((r) => r.uid);
      expect(indexed.length).to.equal(wanted.length);
      expect(indexed).to.deep.equal(wanted);
    } finally {
      // A connection the server dropped while a long step ran must not hide that step's error.
      await app.logout().catch(() => undefined);
    }
  });
});

describe('IMAP pool', function () {
  this.timeout(30_000);
  let s: TestServer;
  let p: TestProject;
  before(async () => {
    s = await startPostern();
    p = await newProject(s);
  });
  after(() => s?.close());

  const settings = (maxPerInbox: number, maxTotal: number, acquireTimeoutMs = 10_000, reservedForReads = 0) => {
    const env = mailEnv();
    return {
      host: env.imap.host,
      port: env.imap.port,
      secure: false,
      masterUser: env.master.user,
      masterPassword: env.master.password,
      masterSeparator: '*',
      maxPerInbox,
      maxTotal,
      acquireTimeoutMs,
      reservedForReads,
      watchLeaseMs: 15_000,
      bodySearchTimeoutMs: 20_000,
    };
  };
  const gate = () => {
    let open!: () => void;
    const opened = new Promise<void>((r) => (open = r));
    return { open, opened };
  };

  it('an inbox with every connection busy never delays another inbox', async () => {
    const [a, b] = [await p.inbox(), await p.inbox()];
    const pool = new ImapPool(settings(2, 10), pino({ level: 'silent' }));
    try {
      const hold = gate();
      const busy = [pool.use(a.imapUser, () => hold.opened), pool.use(a.imapUser, () => hold.opened)];
      // a's tasks are held until the end: had b queued behind them it would not answer at all
      // (a PoolBusyError at the 10 s deadline), so its answer is the proof, not its speed.
      const other = await pool.use(b.imapUser, async (c) => {
        const st = await c.status('INBOX', { messages: true });
        return st ? st.messages : -1;
      });
      expect(other).to.equal(0);
      let third = false;
      const queued = pool.use(a.imapUser, async () => {
        third = true;
      });
      // Both of a's connections logged in and busy: a third one would have had its chance too.
      await until("a's two connections open", async () => pool.connectionsOf(a.imapUser) === 2);
      expect(pool.connectionsOf(a.imapUser), 'no third connection for a').to.equal(2);
      expect(third, 'a third task of a waits for one of its two connections').to.equal(false);
      hold.open();
      await Promise.all([...busy, queued]);
      expect(third).to.equal(true);
    } finally {
      await pool.close();
    }
  });

  /** This process's open sockets to Dovecot's IMAP port. */
  const imapSockets = (): Set<unknown> => {
    const port = mailEnv().imap.port;
    const handles = (process as unknown as { _getActiveHandles(): unknown[] })._getActiveHandles();
    return new Set(handles.filter((h) => (h as { remotePort?: number }).remotePort === port));
  };

  it('a connection still logging in when the pool closes is closed too, for a task and for a watcher', async () => {
    const a = await p.inbox();
    const before = imapSockets();
    const pool = new ImapPool(settings(2, 10), pino({ level: 'silent' }));
    const task = pool.use(a.imapUser, async () => 'ran');
    const watcher = pool.openDedicated(a.imapUser);
    // Both are connecting now (no await has let a login finish); close under them.
    await pool.close();
    const [t, w] = await Promise.allSettled([task, watcher]);
    expect(t.status, 'the task cannot run on a closed pool').to.equal('rejected');
    expect(w.status, 'nor can the watcher get its connection').to.equal('rejected');
    await until('every socket the pool opened to close', async () => [...imapSockets()].every((h) => before.has(h)), 10_000);
  });

  it('a task past its time limit fails with the given error, once, and its connection is closed, not reused', async () => {
    const a = await p.inbox();
    const pool = new ImapPool(settings(1, 10), pino({ level: 'silent' }));
    try {
      const clients: unknown[] = [];
      const slow = pool.use(
        a.imapUser,
        async (client) => {
          clients.push(client);
          // A command Dovecot is still working on when the limit passes.
          await new Promise((r) => setTimeout(r, 5_000));
          return 'too late';
        },
        'interactive',
        { ms: 100, error: () => new Error('over the limit') },
      );
      const failed = await slow.then(
        () => null,
        (err: Error) => err,
      );
      expect(failed?.message).to.equal('over the limit');
      expect(clients, 'not retried').to.have.length(1);
      await until('the late connection closed', async () => pool.size === 0, 5_000);
      // The next task gets a fresh connection (at maxPerInbox 1: the late one is no longer counted).
      const next = await pool.use(a.imapUser, async (client) => {
        expect(client).to.not.equal(clients[0]);
        const status = await client.status('INBOX', { messages: true });
        return status ? status.messages : -1;
      });
      expect(next).to.equal(0);
    } finally {
      await pool.close();
    }
  });

  it('the bulk lane (downloads) leaves one connection for listings and syncs', async () => {
    const a = await p.inbox();
    const pool = new ImapPool(settings(2, 10), pino({ level: 'silent' }));
    try {
      const hold = gate();
      const download = pool.use(a.imapUser, () => hold.opened, 'bulk');
      let secondBulk = false;
      const bulk2 = pool.use(
        a.imapUser,
        async () => {
          secondBulk = true;
        },
        'bulk',
      );
      const listing = await pool.use(a.imapUser, async (c) => {
        const st = await c.status('INBOX', { messages: true });
        return st ? st.messages : -1;
      });
      expect(listing).to.equal(0);
      expect(secondBulk).to.equal(false);
      hold.open();
      await Promise.all([download, bulk2]);
      expect(secondBulk).to.equal(true);
    } finally {
      await pool.close();
    }
  });

  it('stays within the global cap by closing idle connections of other inboxes', async () => {
    const inboxes = [await p.inbox(), await p.inbox(), await p.inbox()];
    const pool = new ImapPool(settings(2, 2), pino({ level: 'silent' }));
    try {
      for (const i of inboxes) {
        await pool.use(i.imapUser, async (c) => c.status('INBOX', { messages: true }));
        expect(pool.size).to.be.at.most(2);
      }
    } finally {
      await pool.close();
    }
    expect(pool.size).to.equal(0);
  });

  it('nothing waits forever: past the deadline a task gets a 503, and a dedicated connection is refused at the cap', async () => {
    const [a, b] = [await p.inbox(), await p.inbox()];
    const pool = new ImapPool(settings(1, 1, 300), pino({ level: 'silent' }));
    try {
      const hold = gate();
      const held = pool.use(a.imapUser, () => hold.opened);
      await until('the held connection open and busy', async () => pool.connectionsOf(a.imapUser) === 1);
      for (const user of [a.imapUser, b.imapUser]) {
        const started = Date.now();
        const err = await pool
          .use(user, async () => 'never')
          .then(
            () => null,
            (e: unknown) => e,
          );
        expect(err, user).to.be.instanceOf(PoolBusyError);
        expect((err as PoolBusyError).kind).to.equal('unavailable');
        // Not before the 300 ms deadline; well before "forever" (the held task is only let go below).
        expect(Date.now() - started).to.be.within(250, 10_000);
      }
      // A fill's extra connection is only ever tried, never waited for.
      expect(pool.tryUse(a.imapUser, async () => 'never', 'bulk')).to.equal(null);
      expect(pool.tryUse(b.imapUser, async () => 'never')).to.equal(null);
      // Refused at once: settled before a macrotask, so no timer (the 300 ms deadline) was waited for.
      const refused = await Promise.race([
        pool.openDedicated(b.imapUser).then(
          () => null,
          (e: unknown) => e,
        ),
        new Promise((r) => setImmediate(() => r('waited'))),
      ]);
      expect(refused).to.be.instanceOf(PoolBusyError);
      hold.open();
      await held;
      // Once free (idle), another inbox gets it.
      expect(await pool.use(b.imapUser, async () => 'ok')).to.equal('ok');
      expect(pool.size).to.equal(1);
    } finally {
      await pool.close();
    }
  });

  it('a request beyond the cap answers 503 within the deadline (a read, and a stream)', async () => {
    const own = await startPostern({ POSTERN_IMAP_MAX_TOTAL: '1', POSTERN_IMAP_ACQUIRE_TIMEOUT_MS: '400' });
    try {
      const op = await newProject(own);
      const [a, b] = [await op.inbox(), await op.inbox()];
      const t = await op.token(['messages:read']);
      const hold = gate();
      const held = own.postern.mailSource.pool.use(a.imapUser, () => hold.opened);
      await until('the held connection open and busy', async () => own.postern.mailSource.pool.connectionsOf(a.imapUser) === 1);
      for (const path of [`/inboxes/${b.id}/labels`, `/inboxes/${b.id}/events`]) {
        const started = Date.now();
        const res = await call(`${own.base}${path}`, { token: t });
        expect(res.status, path).to.equal(503);
        expect(res.headers.get('retry-after'), path).to.match(/^\d+$/);
        expect(res.headers.get('content-type'), path).to.match(/^application\/json/);
        expect(Object.keys(await json<object>(res)), path).to.deep.equal(['error']);
        // The 400 ms deadline, not a hang until the client's 10 s timeout (room for a loaded machine).
        expect(Date.now() - started, path).to.be.below(8000);
      }
      expect(own.postern.mailMirror.watching(b.id)).to.deep.equal({ listeners: 0, live: false });
      hold.open();
      await held;
      expect((await call(`${own.base}/inboxes/${b.id}/labels`, { token: t })).status).to.equal(200);
    } finally {
      await own.close();
    }
  });

  it('Postern.close() closes every IMAP connection and watcher', async () => {
    const own = await startPostern();
    const op = await newProject(own);
    const inbox = await op.inbox();
    const t = await op.token(['messages:read']);
    const abort = new AbortController();
    const res = await call(`${own.base}/inboxes/${inbox.id}/events`, { token: t, signal: abort.signal });
    expect(res.status).to.equal(200);
    expect(own.postern.mailSource.pool.size).to.be.at.least(2);
    await own.close();
    expect(own.postern.mailSource.pool.size).to.equal(0);
    abort.abort();
  });
});
