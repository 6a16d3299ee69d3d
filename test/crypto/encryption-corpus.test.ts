// Every message of ../shared/corpus (see corpus.test.ts), APPENDed byte for byte into a
// compatible inbox, goes through /raw → decrypt (as the web app does) → byte-equal to what
// Dovecot holds, and through /content: never a 5xx, a 422 only where the parser cannot read it.
import { expect } from 'chai';
import { ImapFlow } from 'imapflow';
import { epochKeys, openMessage, type Session } from '../../docs/examples/open-message.ts';
import { corpusFiles, describeWithCorpus } from '../helpers/corpus-files.ts';
import { call, mailEnv, newProject, startPostern, type TestServer } from '../helpers/harness.ts';
import { putKey, memberKeyPair } from '../helpers/crypto-fixtures.ts';

describeWithCorpus('the real-world corpus, encrypted and decrypted', function () {
  this.timeout(600_000);
  let s: TestServer;

  // Every message of the corpus read back to back with one token: no request budgets.
  before(async () => (s = await startPostern({ POSTERN_RATE_REQUESTS: '0', POSTERN_RATE_EXPENSIVE: '0' })));
  after(() => s?.close());

  it('opens every message from /raw to the exact stored bytes, and /content never fails with a 5xx', async () => {
    const files = corpusFiles();
    const p = await newProject(s);
    const inbox = await p.inbox();
    const token = await p.token(['messages:read', 'content:read']);
    const user = await memberKeyPair();
    const session = await p.session();
    expect((await putKey(s, session, user.armoredPublic)).status).to.equal(200);
    const app: Session = { baseUrl: s.base, headers: { authorization: `Bearer ${token}` }, memberKey: user.privateKey };

    const imap = new ImapFlow({
      host: mailEnv().imap.host,
      port: mailEnv().imap.port,
      secure: false,
      auth: { user: inbox.imapUser, pass: inbox.imapPassword },
      logger: false,
    });
    await imap.connect();
    const stored = new Map<number, { name: string; bytes: Buffer }>();
    try {
      const names = new Map<number, string>();
      for (const f of files) {
        if (f.raw.length === 0) continue; // IMAP cannot carry an empty message
        const res = await imap.append('INBOX', f.raw, []);
        if (res && res.uid) names.set(res.uid, f.name);
      }
      await imap.mailboxOpen('INBOX');
      for await (const m of imap.fetch('1:*', { uid: true, source: true })) {
        if (m.source) stored.set(m.uid, { name: names.get(m.uid) ?? String(m.uid), bytes: m.source });
      }
    } finally {
      await imap.logout();
    }
    expect(stored.size).to.be.greaterThan(300);

    const { labels } = (await (await call(`${s.base}/inboxes/${inbox.id}/labels`, { token })).json()) as {
      labels: Array<{ id: string; name: string }>;
    };
    const label = labels.find((l) => l.name === 'INBOX')!.id;
    const listed: Array<{ id: string; uid: number }> = [];
    let before: number | undefined;
    do {
      const page = (await (
        await call(`${s.base}/inboxes/${inbox.id}/labels/${label}/messages?limit=100${before ? `&before=${before}` : ''}`, { token })
      ).json()) as {
        messages: Array<{ id: string; uid: number }>;
        before?: number;
      };
      listed.push(...page.messages);
      before = page.before;
    } while (before !== undefined);
    expect(listed).to.have.length(stored.size);

    const keys = await epochKeys(app, inbox.id);
    const mismatched: string[] = [];
    const unparsed: string[] = [];
    for (const m of listed) {
      const f = stored.get(m.uid)!;
      const opened = Buffer.from(await openMessage(app, inbox.id, m.id, keys));
      if (!opened.equals(f.bytes)) mismatched.push(f.name);
      const res = await call(`${s.base}/inboxes/${inbox.id}/messages/${m.id}/content`, { token });
      const text = await res.text();
      expect(res.status, `${f.name}: ${text}`).to.be.oneOf([200, 422]);
      if (res.status === 422) unparsed.push(f.name);
      else s.postern.validator.body('https://postern.dev/schemas/crypto.json#/$defs/DecryptedMessage', JSON.parse(text));
    }
    expect(mismatched, 'decrypted differently from what Dovecot holds').to.deep.equal([]);
    // mailparser reads anything it is given (malformed parts become text or attachments).
    expect(unparsed, 'answered 422').to.deep.equal([]);
  });
});
