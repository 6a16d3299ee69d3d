// The IMAP pool against the real Dovecot: one inbox's busy connections never delay another's,
// the global cap, deadlines and 503s, and closing. Apart from test/mail/mail-sync.test.ts so the two
// run side by side in the suite's lanes.
import { expect } from 'chai';
import { pino } from 'pino';
import { ImapPool, PoolBusyError } from '../../adapters/imap/pool.ts';
import { call, mailEnv, newProject, startPostern, type TestProject, type TestServer } from '../helpers/harness.ts';
import { json, until } from '../helpers/mail-fixtures.ts';

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
