// All 377 real-world messages of ../shared/corpus (charsets, S/MIME, PGP/MIME, reports,
// invites, ~140 malformed) go into real mailboxes two ways: APPENDed byte for byte as a mail app
// would, and delivered through Postfix into Dovecot. Each is then listed and read over the API:
// no 5xx, no message lost, and what a parser can read comes back ungarbled.
import { expect } from 'chai';
import { ImapFlow } from 'imapflow';
import { simpleParser } from 'mailparser';
import nodemailer from 'nodemailer';
import { corpusFiles, describeWithCorpus, type CorpusFile } from '../helpers/corpus-files.ts';
import { call, mailEnv, newProject, startPostern, type TestInbox, type TestProject, type TestServer } from '../helpers/harness.ts';
import { untilDelivered } from '../helpers/ingress-helpers.ts';
import { until } from '../helpers/mail-fixtures.ts';

interface Summary {
  id: string;
  uid: number;
  receivedAt: string;
  flags: string[];
  size: number;
  subject?: string;
  from?: string;
  date?: string;
}

async function listAll(s: TestServer, token: string, inboxId: string, labelId: string): Promise<Summary[]> {
  const all: Summary[] = [];
  let before: number | undefined;
  for (let page = 0; page < 100; page++) {
    const res = await call(`${s.base}/inboxes/${inboxId}/labels/${labelId}/messages?limit=100${before ? `&before=${before}` : ''}`, {
      token,
    });
    expect(res.status, await res.clone().text()).to.equal(200);
    const body = (await res.json()) as { messages: Summary[]; before?: number };
    all.push(...body.messages);
    if (body.before === undefined) return all;
    before = body.before;
  }
  throw new Error('paging did not end');
}

async function inboxLabel(s: TestServer, token: string, inboxId: string): Promise<string> {
  // The first read may meet the inbox's first indexing still under way (377 messages on a busy
  // host): a 503 with Retry-After, which a client retries, as this does until the index answers.
  const res = await until(
    'the inbox indexed',
    async () => {
      const r = await call(`${s.base}/inboxes/${inboxId}/labels`, { token });
      return r.status === 503 ? null : r;
    },
    120_000,
  );
  expect(res.status, await res.clone().text()).to.equal(200);
  const { labels } = (await res.json()) as { labels: Array<{ id: string; name: string; total: number }> };
  return labels.find((l) => l.name === 'INBOX')!.id;
}

function subjectHeaders(raw: Buffer): number {
  const text = raw.toString('latin1');
  const end = text.search(/\r?\n\r?\n/);
  return (text.slice(0, end < 0 ? undefined : end).match(/^subject:/gim) ?? []).length;
}

/** Whether a decoded header is something a parser read cleanly (no replacement characters). */
const clean = (text: string | undefined): text is string => typeof text === 'string' && !text.includes('\uFFFD');

describeWithCorpus('the real-world corpus', function () {
  this.timeout(300_000);
  const files = corpusFiles();
  let s: TestServer;
  let p: TestProject;
  let token: string;

  before(async () => {
    // Every message of the corpus, back to back with one token: no request budget.
    s = await startPostern({ POSTERN_RATE_REQUESTS: '0' });
    p = await newProject(s);
    token = await p.token(['messages:read']);
  });
  after(() => s.close());

  it(`has all 377 messages`, () => {
    expect(files).to.have.length(377);
  });

  describe('appended as a mail app would (byte for byte)', () => {
    let inbox: TestInbox;
    const appended = new Map<string, CorpusFile>();
    const refused: string[] = [];

    before(async () => {
      inbox = await p.inbox();
      const imap = new ImapFlow({
        host: mailEnv().imap.host,
        port: mailEnv().imap.port,
        secure: false,
        auth: { user: inbox.imapUser, pass: inbox.imapPassword },
        logger: false,
      });
      await imap.connect();
      try {
        for (const f of files) {
          try {
            const res = await imap.append('INBOX', f.raw, [], new Date('2024-01-01T00:00:00Z'));
            if (res && res.uid) appended.set(String(res.uid), f);
            else refused.push(f.name);
          } catch {
            refused.push(f.name);
          }
        }
      } finally {
        await imap.logout();
      }
    });

    it('Dovecot stores all but the ones IMAP cannot carry', () => {
      // An empty message cannot be APPENDed (Dovecot: "Can't save a zero byte message").
      const empty = files.filter((f) => f.raw.length === 0).map((f) => f.name);
      expect(
        refused.filter((n) => !empty.includes(n)),
        'refused beyond the empty file',
      ).to.deep.equal([]);
      expect(appended.size).to.equal(files.length - refused.length);
    });

    it('lists every stored message once, with well-formed summaries', async () => {
      const label = await inboxLabel(s, token, inbox.id);
      const listed = await listAll(s, token, inbox.id, label);
      expect(listed).to.have.length(appended.size);
      expect(new Set(listed.map((m) => m.id)).size).to.equal(listed.length);
      expect(new Set(listed.map((m) => m.uid))).to.deep.equal(new Set([...appended.keys()].map(Number)));
      for (const m of listed) {
        expect(m.id).to.match(/^msg_[0-9A-Z]{26}$/);
        expect(Number.isNaN(Date.parse(m.receivedAt))).to.equal(false);
        expect(m.size).to.be.a('number').and.at.least(1);
        expect(m.flags).to.be.an('array');
      }
    });

    it('opens every message (detail 200 with an ETag) and decodes what a parser can read', async () => {
      const label = await inboxLabel(s, token, inbox.id);
      const listed = await listAll(s, token, inbox.id, label);
      const garbled: string[] = [];
      for (const m of listed) {
        const res = await call(`${s.base}/inboxes/${inbox.id}/messages/${m.id}`, { token });
        const f = appended.get(String(m.uid))!;
        expect(res.status, `${f.name}: ${await res.clone().text()}`).to.equal(200);
        expect(res.headers.get('etag'), f.name).to.be.a('string');
        const detail = (await res.json()) as { message: Summary };
        expect(detail.message.id).to.equal(m.id);
        const parsed = await simpleParser(f.raw).catch(() => null);
        // Where mailparser reads a subject cleanly, the API must return the same text. A message
        // with two Subject headers (forbidden by RFC 5322) has no single right answer: the API
        // shows what mail apps see in IMAP's ENVELOPE, mailparser the first one.
        if (parsed && clean(parsed.subject) && parsed.subject.trim() !== '' && subjectHeaders(f.raw) === 1) {
          const norm = (t: string | undefined) => (t ?? '').replace(/\s+/g, ' ').trim();
          if (norm(detail.message.subject) !== norm(parsed.subject)) {
            garbled.push(`${f.name}: API ${JSON.stringify(detail.message.subject)} vs parser ${JSON.stringify(parsed.subject)}`);
          }
        }
      }
      expect(garbled, garbled.join('\n')).to.deep.equal([]);
    });
  });

  describe('delivered through Postfix into Dovecot', () => {
    let inbox: TestInbox;
    let submitted = 0;
    const rejected: string[] = [];

    before(async () => {
      inbox = await p.inbox();
      const transport = nodemailer.createTransport({
        host: mailEnv().smtp.host,
        port: mailEnv().smtp.port,
        secure: false,
        ignoreTLS: true,
        pool: true,
        maxConnections: 4,
      });
      try {
        await Promise.all(
          files.map(async (f) => {
            try {
              await transport.sendMail({ envelope: { from: 'corpus@example.com', to: [inbox.address] }, raw: f.raw });
              submitted++;
            } catch {
              rejected.push(f.name);
            }
          }),
        );
      } finally {
        transport.close();
      }
    });

    it('Postfix accepts every message', () => {
      expect(rejected).to.deep.equal([]);
      expect(submitted).to.equal(files.length);
    });

    it('every accepted message arrives, is listed once, and opens', async () => {
      const label = await inboxLabel(s, token, inbox.id);
      // Delivery is asynchronous (Postfix queue → LMTP): wait until the count settles (a message
      // LMTP deferred is retried at once, not after Postfix's backoff: untilDelivered flushes).
      const listed = await untilDelivered(
        'every accepted message listed',
        async () => {
          const got = await listAll(s, token, inbox.id, label);
          return got.length >= submitted ? got : null;
        },
        60_000,
      );
      expect(listed).to.have.length(submitted);
      expect(new Set(listed.map((m) => m.id)).size).to.equal(listed.length);
      for (const m of listed) {
        const res = await call(`${s.base}/inboxes/${inbox.id}/messages/${m.id}`, { token });
        expect(res.status, await res.clone().text()).to.equal(200);
      }
    });
  });
});
