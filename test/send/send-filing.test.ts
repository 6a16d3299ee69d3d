// How the Sent copies are filed (lib/send/outbox.ts, adapters/imap/sent.ts): an inbox's copies
// in one MULTIAPPEND after the sends under way, and each exactly once when the IMAP connection
// drops in the middle of that batch or after Dovecot saved it but before its answer arrived.
// Postern reaches Dovecot through a TCP relay here (test/helpers/tcp-tap.ts) that can cut the connection at those points.
import { randomBytes } from 'node:crypto';
import { expect } from 'chai';
import { mailEnv, newProject, startPostern, type TestInbox, type TestProject, type TestServer } from '../helpers/harness.ts';
import { mailApp, until } from '../helpers/mail-fixtures.ts';
import { atSink, postRaw, rcpt } from '../helpers/send-fixtures.ts';
import { TcpTap, type TapConnection } from '../helpers/tcp-tap.ts';

/** The first line of an APPEND command, as a client writes it (tag, then the command). */
const APPEND_LINE = /(?:^|\r\n)[^\s]+ APPEND /g;

/** A TCP relay to Dovecot's IMAP port that counts APPEND commands and cuts one on request. */
class ImapRelay {
  /** APPEND commands clients sent, in all. */
  appends = 0;
  private cut: { at: 'upload'; after: number; done: () => void } | { at: 'answer'; done: () => void } | null = null;
  /** Bytes of the APPEND being cut that went to Dovecot, per connection; absent until it starts. */
  private readonly sent = new WeakMap<TapConnection, number>();
  private readonly tap = new TcpTap(mailEnv().imap, {
    onClient: (chunk, conn) => {
      const starts = [...chunk.toString('latin1').matchAll(APPEND_LINE)];
      this.appends += starts.length;
      const cut = this.cut;
      if (cut?.at !== 'upload') return 'forward';
      let from = 0;
      let sent = this.sent.get(conn) ?? -1;
      if (sent < 0 && starts.length > 0) {
        from = starts[0]!.index;
        sent = 0;
      }
      if (sent < 0) return 'forward';
      const room = cut.after - sent;
      if (chunk.length - from > room) {
        // Dovecot gets part of the batch, then the connection is gone.
        this.cut = null;
        conn.toServer(chunk.subarray(0, from + room), () => {
          conn.drop();
          cut.done();
        });
        return 'handled';
      }
      this.sent.set(conn, sent + chunk.length - from);
      return 'forward';
    },
    onServer: (chunk, conn) => {
      const cut = this.cut;
      if (cut?.at !== 'answer' || !chunk.toString('latin1').includes('OK [APPENDUID')) return 'forward';
      // Dovecot saved the batch; its answer never arrives.
      this.cut = null;
      conn.drop();
      cut.done();
      return 'handled';
    },
  });

  start(): Promise<number> {
    return this.tap.start();
  }

  /** Cuts the next APPEND after `bytes` of it reached Dovecot; resolves once it did. */
  cutUpload(bytes: number): Promise<void> {
    return new Promise((done) => (this.cut = { at: 'upload', after: bytes, done }));
  }

  /** Cuts the connection of the next APPEND Dovecot answers OK, before that answer; resolves once it did. */
  cutAnswer(): Promise<void> {
    return new Promise((done) => (this.cut = { at: 'answer', done }));
  }

  close(): Promise<void> {
    return this.tap.close();
  }
}

const COPIES = 12;
/** A few KB each: the upload cut lands inside the batch, after its first messages. */
const BODY = `${'x'.repeat(76)}\r\n`.repeat(40);

function message(from: string, subject: string): string {
  return `From: <${from}>\r\nTo: <someone@example.org>\r\nSubject: ${subject}\r\nDate: ${new Date().toUTCString()}\r\nMessage-ID: <${randomBytes(8).toString('hex')}@postern.test>\r\n\r\n${BODY}`;
}

/** The subjects in the inbox's Sent mailbox, as Dovecot has them (each once per message). */
async function sentSubjects(inbox: TestInbox): Promise<string[]> {
  const app = await mailApp(inbox);
  try {
    await app.mailboxOpen('Sent');
    const subjects: string[] = [];
    for await (const m of app.fetch('1:*', { envelope: true, flags: true })) {
      expect([...(m.flags ?? [])]).to.include('\\Seen');
      subjects.push(m.envelope?.subject ?? '');
    }
    return subjects.sort();
  } catch (err) {
    // An empty Sent has no message 1.
    if (/Invalid messageset|No matching messages/i.test(String(err))) return [];
    throw err;
  } finally {
    await app.logout().catch(() => undefined);
  }
}

describe('sending: filing the Sent copies in batches', function () {
  this.timeout(90_000);
  let relay: ImapRelay;
  let s: TestServer;
  let p: TestProject;
  let token: string;

  before(async () => {
    relay = new ImapRelay();
    const port = await relay.start();
    // Filing waits for the sends under way as long as a test holds one (sending() below).
    s = await startPostern({ POSTERN_IMAP_PORT: String(port), POSTERN_SENT_COPY_YIELD_MS: '60000' });
    p = await newProject(s);
    token = await p.token(['send']);
  });
  after(async () => {
    await s?.close();
    await relay?.close();
  });

  /** Sends COPIES messages while a send is held under way, so their copies wait together; returns their subjects. */
  async function sendHeld(inbox: TestInbox): Promise<{ subjects: string[]; release: () => void }> {
    const release = s.postern.sentCopies.sending();
    const tag = randomBytes(3).toString('hex');
    const subjects = Array.from({ length: COPIES }, (_, i) => `filing ${tag} ${String(i).padStart(2, '0')}`);
    const to = rcpt();
    for (const subject of subjects) {
      const res = await postRaw(s, token, inbox.id, { from: inbox.address, to: [to], raw: message(inbox.address, subject) });
      expect(res.status, await res.clone().text()).to.equal(200);
    }
    await atSink(to, COPIES);
    return { subjects, release };
  }

  /** The inbox's copies not filed yet, and the filing attempts started on them. */
  const pending = async (inbox: TestInbox) => {
    const backlog = await s.postern.store.outbox.backlog(inbox.id, 1000);
    return { n: backlog.length, claims: backlog.reduce((sum, e) => sum + e.claims, 0) };
  };

  it('waits for the sends under way, then files the copies waiting together in one APPEND, each once with \\Seen', async () => {
    const inbox = await p.inbox();
    const { subjects, release } = await sendHeld(inbox);
    // Every copy was due as soon as Postfix took its message; none was tried while the send was held.
    expect(await pending(inbox)).to.deep.equal({ n: COPIES, claims: 0 });
    const before = relay.appends;
    release();
    await until('the copies filed', async () => (await pending(inbox)).n === 0);
    expect(relay.appends - before).to.equal(1);
    expect(await sentSubjects(inbox)).to.deep.equal(subjects);
  });

  it('files each copy of a batch exactly once when the connection drops in the middle of it', async () => {
    const inbox = await p.inbox();
    const { subjects, release } = await sendHeld(inbox);
    // Three messages into the batch: Dovecot has started saving it, then the connection is gone.
    const cut = relay.cutUpload(3 * BODY.length);
    release();
    await cut;
    await until('the copies filed', async () => (await pending(inbox)).n === 0);
    expect(await sentSubjects(inbox)).to.deep.equal(subjects);
  });

  it('files each copy of a batch exactly once when Dovecot saved it but its answer was lost', async () => {
    const inbox = await p.inbox();
    const { subjects, release } = await sendHeld(inbox);
    const cut = relay.cutAnswer();
    release();
    await cut;
    await until('the copies filed', async () => (await pending(inbox)).n === 0);
    expect(await sentSubjects(inbox)).to.deep.equal(subjects);
  });
});
