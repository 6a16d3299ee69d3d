// GET /inboxes/{inbox}/events against the real Dovecot: every change type made by a separate
// IMAP client, in INBOX and in another label, delivery through Postfix, heartbeats and the end
// of a stream, one watcher per inbox, and a stream that outlives a Dovecot restart.
import { execFile, spawn } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import * as net from 'node:net';
import { promisify } from 'node:util';
import { expect } from 'chai';
import { call, mailEnv, newProject, startPostern, type TestInbox, type TestProject, type TestServer } from '../helpers/harness.ts';
import { append, deliver, json, mailApp, SseReader, until } from '../helpers/mail-fixtures.ts';
import { reloadPostfix } from '../helpers/send-fixtures.ts';

const run = promisify(execFile);

/** `dovecot -c FILE` daemonizes; its children keep inherited pipes open, so none are given. */
function startDovecot(conf: string): Promise<void> {
  return new Promise((resolve) => {
    const child = spawn('dovecot', ['-c', conf], { stdio: 'ignore' });
    child.once('exit', () => resolve());
    child.once('error', () => resolve());
  });
}

interface Change {
  type: string;
  msgId: string;
  labelId?: string;
  uid?: number;
  flags?: string[];
}
const parse = (data: string) => JSON.parse(data) as Change;

describe('inbox change stream', function () {
  this.timeout(60_000);
  let s: TestServer;
  let p: TestProject;
  let token: string;
  const open: SseReader[] = [];

  const labelIds = async (inbox: TestInbox) => {
    const res = await call(`${s.base}/inboxes/${inbox.id}/labels`, { token });
    const labels = (await json<{ labels: Array<{ id: string; name: string }> }>(res)).labels;
    return Object.fromEntries(labels.map((l) => [l.name, l.id])) as Record<string, string>;
  };
  const stream = async (inbox: TestInbox, t = token, base = s.base) => {
    const abort = new AbortController();
    const res = await call(`${base}/inboxes/${inbox.id}/events`, {
      token: t,
      headers: { accept: 'text/event-stream' },
      signal: abort.signal,
    });
    expect(res.status).to.equal(200);
    const reader = new SseReader(res, abort);
    open.push(reader);
    return reader;
  };

  before(async () => {
    s = await startPostern({ POSTERN_STREAM_HEARTBEAT_MS: '150', POSTERN_STREAM_MAX_MS: '120000' });
    p = await newProject(s);
    token = await p.token(['messages:read', 'flags:write']);
  });
  afterEach(async () => {
    for (const r of open.splice(0)) await r.close();
  });
  after(async () => {
    await s?.close();
  });

  for (const label of ['INBOX', 'Archive']) {
    it(`streams added, flags and removed for changes a mail app makes in ${label}`, async () => {
      const inbox = await p.inbox();
      const app = await mailApp(inbox);
      try {
        const ids = await labelIds(inbox);
        const sse = await stream(inbox);
        expect(sse.res.headers.get('content-type')).to.match(/^text\/event-stream/);
        expect(sse.res.headers.get('x-accel-buffering')).to.equal('no');
        expect(sse.res.headers.get('cache-control')).to.equal('no-store');

        const uid = await append(app, label, { subject: 'live' });
        const added = await sse.next((e) => e.event === 'message.added');
        const a = parse(added.data);
        expect(a).to.include({ type: 'message.added', labelId: ids[label], uid });
        expect(a.msgId).to.match(/^msg_[0-9A-Z]{26}$/);

        await app.mailboxOpen(label);
        await app.messageFlagsAdd(String(uid), ['\\Flagged', '$Junk'], { uid: true });
        const flagged = parse((await sse.next((e) => e.event === 'message.flags')).data);
        expect(flagged).to.deep.equal({ type: 'message.flags', msgId: a.msgId, labelId: ids[label], flags: ['flagged', 'junk'] });

        await app.messageDelete(String(uid), { uid: true });
        const removed = parse((await sse.next((e) => e.event === 'message.removed')).data);
        expect(removed).to.deep.equal({ type: 'message.removed', msgId: a.msgId, labelId: ids[label] });
        for (const e of sse.events) s.postern.validator.body('https://postern.dev/schemas/mail.json#/$defs/LiveChange', JSON.parse(e.data));
        // Exactly these three: nothing repeated.
        expect(sse.events.map((e) => e.event)).to.deep.equal(['message.added', 'message.flags', 'message.removed']);
      } finally {
        await app.logout();
      }
    });
  }

  it('reports a MOVE as added in one label and removed from the other, with one id', async () => {
    const inbox = await p.inbox();
    const app = await mailApp(inbox);
    try {
      const uid = await append(app, 'INBOX');
      const ids = await labelIds(inbox);
      const sse = await stream(inbox);
      await app.mailboxOpen('INBOX');
      await app.messageMove(String(uid), 'Trash', { uid: true });
      const added = parse((await sse.next((e) => e.event === 'message.added')).data);
      const removed = parse((await sse.next((e) => e.event === 'message.removed')).data);
      expect(added.labelId).to.equal(ids.Trash);
      expect(removed.labelId).to.equal(ids.INBOX);
      expect(added.msgId).to.equal(removed.msgId);
    } finally {
      await app.logout();
    }
  });

  it('streams mail delivered through Postfix, and flag changes made through the API', async () => {
    const inbox = await p.inbox();
    await labelIds(inbox);
    const sse = await stream(inbox);
    await deliver(inbox.address, { subject: 'over smtp' });
    const added = parse((await sse.next((e) => e.event === 'message.added', 20_000)).data);
    const res = await call(`${s.base}/inboxes/${inbox.id}/messages/${added.msgId}/flags`, {
      method: 'POST',
      token,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ add: ['seen'] }),
    });
    expect(res.status).to.equal(200);
    const flags = parse((await sse.next((e) => e.event === 'message.flags')).data);
    expect(flags).to.include({ msgId: added.msgId });
    expect(flags.flags).to.deep.equal(['seen']);
  });

  it('sends heartbeats, and ends the stream after the maximum duration', async () => {
    const short = await startPostern({ POSTERN_STREAM_HEARTBEAT_MS: '100', POSTERN_STREAM_MAX_MS: '1200' });
    try {
      const sp = await newProject(short);
      const inbox = await sp.inbox();
      const t = await sp.token(['messages:read']);
      const started = Date.now();
      const sse = await stream(inbox, t, short.base);
      await sse.closed();
      const took = Date.now() - started;
      expect(took).to.be.within(1100, 5000);
      expect(sse.comments).to.be.at.least(5);
      // The client went: nobody watches the inbox any more.
      await until('the watcher to stop', async () => short.postern.mailMirror.watching(inbox.id).listeners === 0);
    } finally {
      await short.close();
    }
  });

  it('one watcher per inbox, shared by its subscribers, and gone with the last of them', async () => {
    const inbox = await p.inbox();
    const app = await mailApp(inbox);
    try {
      const first = await stream(inbox);
      const second = await stream(inbox);
      expect(s.postern.mailMirror.watching(inbox.id)).to.deep.equal({ listeners: 2, live: true });
      await append(app, 'Junk');
      const a = await first.next((e) => e.event === 'message.added');
      const b = await second.next((e) => e.event === 'message.added');
      expect(a.data).to.equal(b.data);
      await first.close();
      await until('one listener', async () => s.postern.mailMirror.watching(inbox.id).listeners === 1);
      await second.close();
      await until('no listener', async () => s.postern.mailMirror.watching(inbox.id).listeners === 0);
      expect(s.postern.mailMirror.watching(inbox.id).live).to.equal(false);
    } finally {
      await app.logout();
    }
  });

  it('401, 403 and 404 are plain JSON errors before any stream opens', async () => {
    const inbox = await p.inbox();
    const url = `${s.base}/inboxes/${inbox.id}/events`;
    expect((await call(url)).status).to.equal(401);
    expect((await call(url, { token: await p.token(['send']) })).status).to.equal(403);
    const other = await newProject(s);
    const res = await call(url, { token: await other.token(['messages:read']) });
    expect(res.status).to.equal(404);
    expect(res.headers.get('content-type')).to.match(/^application\/json/);
    // A session may watch too.
    const viaSession = await call(`${s.app}/inboxes/${inbox.id}/events`, { session: await p.session() });
    expect(viaSession.status).to.equal(200);
    await viaSession.body?.cancel();
  });

  it('survives a Dovecot restart: a change made while Dovecot was down arrives after', async function () {
    this.timeout(90_000);
    const env = mailEnv();
    const conf = join(env.dir, 'dovecot', 'dovecot.conf');
    const inbox = await p.inbox();
    const app = await mailApp(inbox);
    const uid = await append(app, 'Archive', { subject: 'before the restart' });
    await app.logout();
    const ids = await labelIds(inbox);
    const sse = await stream(inbox);
    const imapUp = () =>
      new Promise<boolean>((resolve) => {
        const sock = net.connect({ host: env.imap.host, port: env.imap.port });
        sock.once('data', () => {
          sock.destroy();
          resolve(true);
        });
        sock.once('error', () => resolve(false));
      });
    // While IMAP is down, Dovecot runs without its IMAP listener and the change is made through
    // doveadm (which needs Dovecot's auth): made certainly before the watcher can be back. Racing a
    // mail app against the watcher's reconnect backoff was lost on busy machines.
    const noImap = join(env.dir, 'dovecot', 'dovecot-no-imap.conf');
    writeFileSync(noImap, readFileSync(conf, 'utf8').replace(`port = ${env.imap.port}\n`, 'port = 0\n'));
    const masterPid = join(env.dir, 'dovecot', 'run', 'master.pid');
    const stopped = () => until('Dovecot to stop', async () => !existsSync(masterPid) && !(await imapUp()), 20_000);
    try {
      await run('dovecot', ['-c', conf, 'stop']);
      await stopped();
      await until('the watcher to notice', async () => !s.postern.mailMirror.watching(inbox.id).live, 20_000);
      await startDovecot(noImap);
      await until(
        'doveadm to flag the message',
        () =>
          run('doveadm', ['-c', noImap, 'flags', 'add', '-u', inbox.imapUser, '\\Flagged', 'mailbox', 'Archive', 'uid', String(uid)]).then(
            () => true,
            () => false,
          ),
        20_000,
      );
      expect(await imapUp(), 'IMAP stayed down').to.equal(false);
      await run('dovecot', ['-c', noImap, 'stop']);
      await stopped();
    } finally {
      await startDovecot(conf);
      await until('Dovecot to answer again', imapUp, 20_000);
      await reloadPostfix();
    }
    const change = parse((await sse.next((e) => e.event === 'message.flags', 30_000)).data);
    expect(change).to.include({ labelId: ids.Archive });
    expect(change.flags).to.deep.equal(['flagged']);
    expect(sse.ended).to.equal(false);
    // And the stream goes on as before.
    const app2 = await mailApp(inbox);
    try {
      const newUid = await append(app2, 'INBOX');
      const added = parse((await sse.next((e) => e.event === 'message.added', 15_000)).data);
      expect(added).to.include({ labelId: ids.INBOX, uid: newUid });
    } finally {
      await app2.logout();
    }
  });
});

describe('inbox change stream with push hints and POSTERN_WATCH=off', function () {
  this.timeout(60_000);
  let s: TestServer;
  let p: TestProject;
  let token: string;

  before(async () => {
    const { hints } = mailEnv();
    s = await startPostern({ POSTERN_WATCH: 'off', POSTERN_HINT_LISTEN: hints.listen, POSTERN_HINT_SECRET: hints.secret });
    p = await newProject(s);
    token = await p.token(['messages:read']);
  });
  after(async () => {
    await s?.close();
  });

  it("a plain IMAP client's flag change in a folder other than INBOX reaches the stream through the hint; an unstreamed inbox's hint runs no pass", async () => {
    const streamed = await p.inbox();
    const other = await p.inbox();
    const app = await mailApp(streamed);
    const otherApp = await mailApp(other);
    const abort = new AbortController();
    const res = await call(`${s.base}/inboxes/${streamed.id}/events`, {
      token,
      headers: { accept: 'text/event-stream' },
      signal: abort.signal,
    });
    expect(res.status).to.equal(200);
    const sse = new SseReader(res, abort);
    try {
      const uid = await append(app, 'Archive', { subject: 'to be flagged' });
      const added = parse((await sse.next((e) => e.event === 'message.added')).data);
      // Dovecot answers a command only after its push script's POST was answered, and the
      // listener answers once the hint is taken or passed over: both are decided below.
      await append(otherApp, 'Archive', { subject: 'nobody streams this inbox' });
      await app.mailboxOpen('Archive');
      const hintsBefore = s.postern.watchAll.stats.hints;
      await app.messageFlagsAdd(String(uid), ['\\Flagged'], { uid: true });
      const flagged = parse((await sse.next((e) => e.event === 'message.flags')).data);
      expect(flagged).to.include({ msgId: added.msgId });
      expect(flagged.flags).to.deep.equal(['flagged']);
      expect(s.postern.watchAll.stats.hints).to.be.greaterThan(hintsBefore);
      expect(s.postern.mailMirror.activity(streamed.id).hintedAt).to.be.greaterThan(0);
      expect(s.postern.mailMirror.activity(other.id).hintedAt).to.equal(0);
    } finally {
      await sse.close();
      await app.logout();
      await otherApp.logout();
    }
  });
});
