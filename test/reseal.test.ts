// Plaintext a mail app APPENDs straight into a zero-access inbox is sealed in place by the sync:
// same flags, same INTERNALDATE, the plaintext expunged; a sealed message is never sealed again;
// two Postern processes that both see the append re-seal it once.
import { join } from 'node:path';
import { expect } from 'chai';
import { sealedEpoch } from '../lib/mail/seal.ts';
import { call, newProject, startPostern, type TestInbox, type TestProject, type TestServer } from './harness.ts';
import { holdFetchesInPairs, mailApp, SseReader, until } from './mail-fixtures.ts';
import { storedMessages } from './ingress-helpers.ts';
import { openSealed, type TestEpochKey } from './seal-helpers.ts';

async function epochKey(s: TestServer, inboxId: string): Promise<TestEpochKey> {
  const current = await s.postern.keys.current(inboxId);
  const privateKey = await s.postern.keys.privateKey(inboxId, current.epoch);
  return { sealKey: { epoch: current.epoch, publicKey: current.publicKey }, privateKey, armoredPrivate: privateKey.armor() };
}

const plaintext = (subject: string, body: string) =>
  Buffer.from(`From: Me <me@example.org>\r\nTo: you@example.org\r\nSubject: ${subject}\r\nMessage-ID: <${subject.replace(/\W/g, '')}@example.org>\r\n\r\n${body}\r\n`);

describe('re-sealing plaintext appended to a zero-access inbox', function () {
  this.timeout(60_000);
  let s: TestServer;
  let p: TestProject;
  let token: string;
  const readers: SseReader[] = [];

  before(async () => {
    s = await startPostern();
    p = await newProject(s);
    token = await p.token(['messages:read']);
  });
  afterEach(async () => {
    for (const r of readers.splice(0)) await r.close();
  });
  after(async () => {
    await s?.close();
  });

  /** An inbox stream: the inbox gets a live watcher, so the sync runs as soon as IMAP changes. */
  const watch = async (inbox: TestInbox) => {
    const abort = new AbortController();
    const res = await call(`${s.base}/inboxes/${inbox.id}/events`, { token, headers: { accept: 'text/event-stream' }, signal: abort.signal });
    expect(res.status).to.equal(200);
    const reader = new SseReader(res, abort);
    readers.push(reader);
    return reader;
  };

  it('replaces the plaintext with its sealed form, same flags and date, and never seals that again', async () => {
    const inbox = await p.inbox({ mode: 'zero-access' });
    const stream = await watch(inbox);
    const app = await mailApp(inbox);
    try {
      const first = plaintext('appended one', 'plaintext body one');
      const date = new Date('2024-03-04T05:06:07Z');
      const res = await app.append('INBOX', first, ['\\Flagged', '\\Seen', '$label1'], date);
      const uid = res && res.uid;
      expect(uid).to.be.a('number');
      // The original goes, its sealed form arrives.
      await stream.next((e) => e.event === 'message.removed');
      const [stored] = await until('only the sealed copy left', async () => {
        const got = await storedMessages(inbox);
        return got.length === 1 && got[0]!.uid !== uid && got;
      });
      expect(sealedEpoch(stored!.source)).to.equal(1);
      expect(stored!.source.includes('plaintext body one')).to.equal(false);
      expect(stored!.source.toString()).to.include('Subject: appended one');
      expect([...stored!.flags].sort()).to.deep.equal(['$label1', '\\Flagged', '\\Seen']);
      expect(stored!.internalDate.toISOString()).to.equal(date.toISOString());
      const key = await epochKey(s, inbox.id);
      expect(Buffer.compare(await openSealed(stored!.source, key), first)).to.equal(0);

      // A second append is re-sealed after the first's replacement was seen by the same sync
      // chain: by then the sealed copy, had it been taken for plaintext, would have been replaced.
      await app.append('INBOX', plaintext('appended two', 'plaintext body two'), [], new Date());
      const after = await until('the second sealed too', async () => {
        const got = await storedMessages(inbox);
        return got.length === 2 && got.every((m) => sealedEpoch(m.source) !== null) && got;
      });
      await s.postern.resealer.idle();
      const again = await storedMessages(inbox);
      expect(again.map((m) => m.uid)).to.deep.equal(after.map((m) => m.uid));
      expect(again[0]!.uid, 'the sealed copy kept its UID: it was not sealed again').to.equal(stored!.uid);
    } finally {
      await app.logout();
    }
  });

  it('leaves a compatible inbox alone', async () => {
    const inbox = await p.inbox({ mode: 'compatible' });
    const stream = await watch(inbox);
    const app = await mailApp(inbox);
    try {
      const res = await app.append('INBOX', plaintext('stays plain', 'visible body'), []);
      await stream.next((e) => e.event === 'message.added');
      await s.postern.resealer.idle();
      const stored = await storedMessages(inbox);
      expect(stored.map((m) => m.uid)).to.deep.equal([res && res.uid]);
      expect(sealedEpoch(stored[0]!.source)).to.equal(null);
    } finally {
      await app.logout();
    }
  });

  it('leaves PGP/MIME that a mail app appends alone: it holds no plaintext', async () => {
    const inbox = await p.inbox({ mode: 'zero-access' });
    const stream = await watch(inbox);
    const app = await mailApp(inbox);
    try {
      const pgpMime = Buffer.from(
        'Subject: already encrypted\r\nMIME-Version: 1.0\r\nContent-Type: multipart/encrypted; protocol="application/pgp-encrypted"; boundary=b\r\n\r\n--b\r\nContent-Type: application/pgp-encrypted\r\n\r\nVersion: 1\r\n\r\n--b\r\nContent-Type: application/octet-stream\r\n\r\n-----BEGIN PGP MESSAGE-----\r\n\r\nwcBMA0\r\n-----END PGP MESSAGE-----\r\n--b--\r\n',
      );
      const res = await app.append('INBOX', pgpMime, []);
      await stream.next((e) => e.event === 'message.added');
      await s.postern.resealer.idle();
      const stored = await storedMessages(inbox);
      expect(stored.map((m) => m.uid)).to.deep.equal([res && res.uid]);
      expect(stored[0]!.source.equals(pgpMime)).to.equal(true);
    } finally {
      await app.logout();
    }
  });

  it('two processes that both see the append re-seal it once', async () => {
    const inbox = await p.inbox({ mode: 'zero-access' });
    const other = await startPostern({ POSTERN_DB: join(s.dir, 'postern.db') });
    const release = holdFetchesInPairs();
    try {
      // Both indexes seeded first, so the append below is a message.added in both.
      const labelsUrl = (base: string) => `${base}/inboxes/${inbox.id}/labels`;
      expect((await call(labelsUrl(s.base), { token })).status).to.equal(200);
      expect((await call(labelsUrl(other.base), { token })).status).to.equal(200);
      const app = await mailApp(inbox);
      await app.append('INBOX', plaintext('raced', 'raced body'), ['\\Seen']);
      await app.logout();
      // Both syncs diff the same index (holdFetchesInPairs), so both apply the message.added.
      const [a, b] = await Promise.all([call(labelsUrl(s.base), { token }), call(labelsUrl(other.base), { token })]);
      expect([a.status, b.status]).to.deep.equal([200, 200]);
      await Promise.all([s.postern.resealer.idle(), other.postern.resealer.idle()]);
      const stored = await storedMessages(inbox);
      expect(stored).to.have.length(1);
      expect(sealedEpoch(stored[0]!.source)).to.equal(1);
    } finally {
      release();
      await other.close();
    }
  });
});
