// A Dovecot without NOTIFY (mailbox_list_index = no): the inbox watcher notices once, keeps its
// connection with IDLE on INBOX, polls the other folders, and says so once in the log; reads do
// not trust the index meanwhile. The test runs a second Dovecot of its own, rendered from the
// running environment's configuration with the list index off, on its own port and directories
// (the users and master user are the environment's), and stops it at the end.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { expect } from 'chai';
import { ImapFlow } from 'imapflow';
import { pino } from 'pino';
import { loadConfig } from '../../lib/config.ts';
import { openPostern, type Postern } from '../../lib/server.ts';
import { call, envVars, json, mailEnv, newProject, newStore, type TestInbox, type TestServer, type TestStore } from '../helpers/harness.ts';
import { append, SseReader, until } from '../helpers/mail-fixtures.ts';
import { startSecondDovecot } from '../helpers/second-dovecot.ts';

/** A Dovecot like the environment's, but without the mailbox list index (so without NOTIFY). */
const startDovecotWithoutListIndex = () =>
  startSecondDovecot('nonotify', (conf, replace) => replace(conf, /^mailbox_list_index = yes$/m, 'mailbox_list_index = no'));

describe('a Dovecot without NOTIFY (mailbox_list_index = no)', function () {
  this.timeout(60_000);
  let dovecot: Awaited<ReturnType<typeof startDovecotWithoutListIndex>>;
  let postern: Postern;
  let s: Pick<TestServer, 'base'>;
  let dir: string;
  let store: TestStore | undefined;
  const logLines: Array<{ level: number; msg: string }> = [];

  before(async () => {
    dovecot = await startDovecotWithoutListIndex();
    dir = mkdtempSync(join(tmpdir(), 'postern-test-'));
    store = await newStore(dir);
    const config = loadConfig(envVars(mailEnv(), { ...store.env, POSTERN_IMAP_PORT: String(dovecot.port) }));
    const sink = new Writable({
      write(chunk: Buffer, _encoding, done) {
        for (const line of chunk.toString('utf8').split('\n')) if (line) logLines.push(JSON.parse(line) as { level: number; msg: string });
        done();
      },
    });
    postern = await openPostern(config, pino({ level: 'info' }, sink));
    s = { base: `${(await postern.listen()).url}/v1` };
  });
  after(async () => {
    await postern?.close();
    await store?.drop();
    if (dir) rmSync(dir, { recursive: true, force: true });
    await dovecot?.stop();
  });

  const mailApp = async (inbox: TestInbox) => {
    const client = new ImapFlow({
      host: mailEnv().imap.host,
      port: dovecot.port,
      secure: false,
      logger: false,
      auth: { user: inbox.imapUser, pass: inbox.imapPassword },
    });
    client.on('error', () => undefined);
    await client.connect();
    return client;
  };

  it('watches INBOX with IDLE and polls the rest on one connection, says so once, and reads keep syncing', async () => {
    const p = await newProject({ postern } as TestServer);
    const [first, second] = [await p.inbox(), await p.inbox()];
    const token = await p.token(['messages:read']);
    const pool = postern.mailSource.pool;
    const openDedicated = pool.openDedicated.bind(pool);
    let watcherConnections = 0;
    pool.openDedicated = (user: string) => {
      watcherConnections++;
      return openDedicated(user);
    };
    const labels = async (inbox: TestInbox) =>
      Object.fromEntries(
        (
          await json<{ labels: Array<{ id: string; name: string; total: number }> }>(
            await call(`${s.base}/inboxes/${inbox.id}/labels`, { token }),
          )
        ).labels.map((l) => [l.name, l]),
      );
    const streams: SseReader[] = [];
    const apps: ImapFlow[] = [];
    try {
      for (const inbox of [first, second]) {
        await labels(inbox);
        const abort = new AbortController();
        const res = await call(`${s.base}/inboxes/${inbox.id}/events`, {
          token,
          headers: { accept: 'text/event-stream' },
          signal: abort.signal,
        });
        expect(res.status).to.equal(200);
        streams.push(new SseReader(res, abort));
        apps.push(await mailApp(inbox));
      }
      const [stream] = streams;
      const [app] = apps;
      await until('the watchers', async () => postern.mailMirror.watching(first.id).live && postern.mailMirror.watching(second.id).live);

      // INBOX: IDLE reports it.
      const inInbox = await append(app!, 'INBOX', { subject: 'in INBOX' });
      await stream!.next((e) => e.event === 'message.added' && (JSON.parse(e.data) as { uid: number }).uid === inInbox);
      // Another folder: a read finds it at once (the index is not trusted without NOTIFY) ...
      const inArchive = await append(app!, 'Archive', { subject: 'in Archive' });
      expect((await labels(first)).Archive!.total).to.equal(1);
      await stream!.next((e) => e.event === 'message.added' && (JSON.parse(e.data) as { uid: number }).uid === inArchive);
      // ... and with nobody reading, the poll does.
      const later = await append(app!, 'Junk', { subject: 'in Junk' });
      await stream!.next((e) => e.event === 'message.added' && (JSON.parse(e.data) as { uid: number }).uid === later, 15_000);

      // Still the first connection of each watcher (no reconnecting every few seconds), and one warning for the process.
      expect(watcherConnections).to.equal(2);
      expect(postern.mailMirror.watching(first.id).live).to.equal(true);
      const told = logLines.filter((l) => /has no NOTIFY/.test(l.msg));
      expect(told.map((l) => l.level)).to.deep.equal([40]);
      expect(logLines.filter((l) => /watcher (could not connect|lost its connection)/.test(l.msg))).to.deep.equal([]);
    } finally {
      for (const r of streams) await r.close();
      for (const a of apps) await a.logout();
      pool.openDedicated = openDedicated;
    }
  });
});
