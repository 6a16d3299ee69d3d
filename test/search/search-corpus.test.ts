// Message search over the real-world corpus (docs/search.md): all 377 messages APPENDed into one
// compatible inbox, then every message whose Subject and From the index can read (Dovecot's
// ENVELOPE, decoded) is searched for by the words of its subject, by its sender's address and by
// the sender's display name, and must be among the results. No search may answer anything but 200. Runs on either engine
// (POSTERN_TEST_STORE), so the SQLite FTS5 index and the PostgreSQL tsvector are both held to it.
import { expect } from 'chai';
import { ImapFlow, type MessageEnvelopeObject } from 'imapflow';
import { corpusFiles, describeWithCorpus, type CorpusFile } from '../helpers/corpus-files.ts';
import { call, json, mailEnv, newProject, startPostern, type TestInbox, type TestServer } from '../helpers/harness.ts';
import { until } from '../helpers/mail-fixtures.ts';
import { searchWords } from '../../lib/mail/search-words.ts';
import type { MessageSearchPage, MessageSummary } from '../../schemas/wire.ts';

/** A decoded header a parser read cleanly: no replacement characters, some word in it. */
const clean = (text: string | undefined): text is string =>
  typeof text === 'string' && !text.includes('\uFFFD') && searchWords(text).length > 0;

/** Runs `task` over `items`, `concurrency` at a time. */
async function eachLimit<T>(items: readonly T[], concurrency: number, task: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < items.length) await task(items[next++]!);
    }),
  );
}

/** What someone would type: the first few pieces with a word in them (a 10 KB subject is not typed). */
const typed = (text: string) =>
  text
    .split(/\s+/)
    .filter((piece) => searchWords(piece).length > 0)
    .slice(0, 8)
    .join(' ');

/** A failure list short enough to read. */
const show = (lines: string[]) =>
  lines
    .slice(0, 20)
    .map((l) => (l.length > 300 ? `${l.slice(0, 300)}…` : l))
    .join('\n');

interface Query {
  file: string;
  uid: number;
  by: 'subject' | 'address' | 'name';
  params: Record<string, string>;
}

describeWithCorpus('message search over the real-world corpus', function () {
  this.timeout(300_000);
  const files = corpusFiles();
  let s: TestServer;
  let inbox: TestInbox;
  let token: string;
  let labelId: string;
  const appended = new Map<number, CorpusFile>();
  const envelopes = new Map<number, MessageEnvelopeObject>();

  before(async () => {
    // Hundreds of searches back to back with one token: no request budgets.
    s = await startPostern({ POSTERN_RATE_REQUESTS: '0', POSTERN_RATE_EXPENSIVE: '0' });
    const p = await newProject(s);
    inbox = await p.inbox();
    token = await p.token(['messages:read']);
    const imap = new ImapFlow({
      host: mailEnv().imap.host,
      port: mailEnv().imap.port,
      secure: false,
      auth: { user: inbox.imapUser, pass: inbox.imapPassword },
      logger: false,
    });
    await imap.connect();
    try {
      // Pipelined: imapflow queues the APPENDs on the one connection; an empty file is refused.
      await Promise.all(
        files.map(async (f) => {
          const res = await imap.append('INBOX', f.raw, [], new Date('2024-01-01T00:00:00Z')).catch(() => false as const);
          if (res && res.uid) appended.set(res.uid, f);
        }),
      );
      // Each message's Subject and From as the index reads them: Dovecot's ENVELOPE, decoded by
      // imapflow (adapters/imap/raw.ts uses the same parseEnvelope). On a malformed header parsers
      // disagree (test/mail/corpus.test.ts compares with mailparser); the search is held to the index's reading.
      await imap.mailboxOpen('INBOX', { readOnly: true });
      for await (const m of imap.fetch('1:*', { uid: true, envelope: true }, { uid: true }))
        if (m.envelope) envelopes.set(m.uid, m.envelope);
    } finally {
      await imap.logout();
    }
    const { labels } = await json<{ labels: Array<{ id: string; name: string }> }>(
      await call(`${s.base}/inboxes/${inbox.id}/labels`, { token }),
    );
    labelId = labels.find((l) => l.name === 'INBOX')!.id;
    // The index has caught up once listing counts every stored message.
    await until(
      'the index holds every appended message',
      async () => {
        const res = await call(`${s.base}/inboxes/${inbox.id}/labels`, { token });
        const body = await json<{ labels: Array<{ id: string; total: number }> }>(res);
        return body.labels.find((l) => l.id === labelId)!.total === appended.size;
      },
      60_000,
    );
  });
  after(() => s?.close());

  it('stores all but the empty message', () => {
    expect(appended.size).to.equal(files.filter((f) => f.raw.length > 0).length);
  });

  it('finds every message by its subject words, its sender address and display name; never a 5xx', async () => {
    const queries: Query[] = [];
    const skipped = { noSubject: [] as string[], noFrom: [] as string[] };
    for (const [uid, f] of appended) {
      const envelope = envelopes.get(uid);
      const subject = envelope?.subject;
      if (!clean(subject)) skipped.noSubject.push(f.name);
      else queries.push({ file: f.name, uid, by: 'subject', params: { subject: typed(subject) } });
      const from = envelope?.from?.[0];
      // Dovecot spells a From without an address MISSING_MAILBOX@MISSING_DOMAIN: nobody searches for that.
      if (!from || !clean(from.address) || !from.address.includes('@') || from.address.startsWith('MISSING_')) skipped.noFrom.push(f.name);
      else queries.push({ file: f.name, uid, by: 'address', params: { from: from.address } });
      if (from && clean(from.name)) queries.push({ file: f.name, uid, by: 'name', params: { from: typed(from.name) } });
    }

    // How listing shows each message (what the index holds), to explain a miss.
    const listed = new Map<number, MessageSummary>();
    for (let cursor: string | undefined, page = 0; page < 10; page++) {
      const qs = new URLSearchParams({ inLabel: labelId, limit: '100', ...(cursor ? { cursor } : {}) });
      const body = await json<MessageSearchPage>(await call(`${s.base}/inboxes/${inbox.id}/search?${qs}`, { token }));
      for (const m of body.messages) listed.set(m.uid, m);
      if (!(cursor = body.cursor)) break;
    }
    expect(listed.size).to.equal(appended.size);

    const missed: string[] = [];
    const errors: string[] = [];
    let searches = 0;
    await eachLimit(queries, 4, async (q) => {
      let cursor: string | undefined;
      for (let page = 0; page < 20; page++) {
        const qs = new URLSearchParams({ ...q.params, inLabel: labelId, limit: '100', ...(cursor ? { cursor } : {}) });
        const res = await call(`${s.base}/inboxes/${inbox.id}/search?${qs}`, { token });
        searches++;
        if (res.status !== 200) {
          errors.push(`${q.file} by ${q.by} ${JSON.stringify(q.params)}: ${res.status} ${await res.text()}`);
          return;
        }
        const body = (await res.json()) as MessageSearchPage;
        if (body.messages.some((m) => m.uid === q.uid)) return;
        if (!body.cursor) break;
        cursor = body.cursor;
      }
      const shown = listed.get(q.uid);
      missed.push(
        `${q.file} by ${q.by} ${JSON.stringify(q.params)}; listed as from ${JSON.stringify(shown?.from)} subject ${JSON.stringify(shown?.subject)}`,
      );
    });

    expect(errors, show(errors)).to.deep.equal([]);
    expect(missed, show(missed)).to.deep.equal([]);
    // What was skipped, and why it stays small: the corpus's messages without a Subject (or an empty
    // one, or only punctuation), without a From or with one that has no address (a bare name, `<>`,
    // a list Dovecot reads as MISSING_MAILBOX), or whose header decodes to replacement characters.
    const skips = Object.entries(skipped)
      .map(([why, names]) => `${why}: ${names.length}`)
      .join(', ');
    expect(skipped.noSubject.length, skips).to.be.at.most(40);
    expect(skipped.noFrom.length, skips).to.be.at.most(40);
    expect(searches).to.be.at.least(queries.length);
    console.log(`      ${queries.length} searches for ${appended.size} messages; skipped ${skips}`);
  });
});
