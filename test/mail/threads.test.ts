// Threads and previews (docs/threads.md) against the real Dovecot, over corpus messages whose
// threading headers each test sets: replies, forwards, broken References, conversations appended
// back to back (placed in any order), a late message joining two threads, collapsed listing and
// search, GET …/threads/{thread}, zero-access inboxes, the backfill of an inbox indexed before
// threads, and previews only for content readers, audited.
import { expect } from 'chai';
import { seal } from '../../lib/mail/sealing.ts';
import {
  call,
  expectError,
  json,
  mailEnv,
  newProject,
  startPostern,
  type TestInbox,
  type TestProject,
  type TestServer,
  unique,
} from '../helpers/harness.ts';
import { corpusFiles, describeWithCorpus } from '../helpers/corpus-files.ts';
import { getPage } from '../helpers/events-helpers.ts';
import { mailApp, until } from '../helpers/mail-fixtures.ts';
import { addUser } from '../../scripts/mailenv.ts';
import { storeBackdoor } from '../helpers/store-backdoor.ts';
import type { MessageList, MessageSearchPage, MessageSummary, Thread } from '../../schemas/wire.ts';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';

/** An agent's MCP client with this token. */
async function agent(base: string, token: string): Promise<Client> {
  const client = new Client({ name: 'postern-test', version: '1.0.0' });
  await client.connect(
    new StreamableHTTPClientTransport(new URL(`${base}/mcp`), { requestInit: { headers: { Authorization: `Bearer ${token}` } } }),
  );
  return client;
}

async function callTool(client: Client, name: string, args: Record<string, unknown>) {
  const r = (await client.callTool({ name, arguments: args })) as CallToolResult;
  return {
    error: r.isError === true,
    text: (r.content[0] as { text: string }).text,
    structured: r.structuredContent as Record<string, unknown>,
  };
}

/** The corpus message with its threading headers replaced by these. */
function withHeaders(raw: Buffer, h: { messageId: string; subject: string; inReplyTo?: string; references?: string }): Buffer {
  const text = raw.toString('latin1');
  const end = text.search(/\r?\n\r?\n/);
  const head = text.slice(0, end).split(/\r?\n(?![ \t])/);
  const dropped = /^(message-id|subject|in-reply-to|references):/i;
  const kept = head.filter((field) => !dropped.test(field));
  const fresh = [
    `Message-ID: ${h.messageId}`,
    `Subject: ${h.subject}`,
    ...(h.inReplyTo ? [`In-Reply-To: ${h.inReplyTo}`] : []),
    ...(h.references ? [`References: ${h.references}`] : []),
  ];
  return Buffer.from([...fresh, ...kept].join('\r\n') + text.slice(end), 'latin1');
}

describeWithCorpus('threads and previews', function () {
  this.timeout(90_000);
  let s: TestServer;
  let p: TestProject;
  // Plain text corpus messages: their previews are their words.
  const corpus = corpusFiles().filter((f) => f.raw.length < 20_000 && /^content-type:\s*text\/plain/im.test(f.raw.toString('latin1')));
  let next = 0;
  let clock = Date.parse('2024-01-01T00:00:00Z');
  const tag = () => `${Date.now().toString(36)}.${Math.random().toString(36).slice(2)}@threads.test`;

  before(async () => {
    s = await startPostern({ POSTERN_EVENTS_SETTLE_MS: '0', POSTERN_INDEX_PREVIEWS: 'true' });
    p = await newProject(s);
  });
  after(() => s.close());

  interface Sent {
    messageId: string;
    subject: string;
    references?: string;
  }

  /** Appends corpus messages with these headers to INBOX (sealed in a zero-access inbox), oldest first. */
  async function appendAll(inbox: TestInbox, mode: 'compatible' | 'zero-access', mails: Array<Sent & { inReplyTo?: string }>) {
    const app = await mailApp(inbox);
    try {
      for (const m of mails) {
        let bytes = withHeaders(corpus[next++ % corpus.length]!.raw, m);
        if (mode === 'zero-access') bytes = await seal(bytes, await s.postern.keys.current(inbox.id));
        // INTERNALDATE a minute apart: the thread's order is theirs.
        await app.append('INBOX', bytes, [], new Date((clock += 60_000)));
      }
    } finally {
      await app.logout();
    }
  }

  async function setUp(mode: 'compatible' | 'zero-access' = 'compatible', given?: TestInbox) {
    const inbox = given ?? (await p.inbox({ mode }));
    const token = await p.token(['messages:read']);
    const reader = await p.token(['messages:read', 'content:read']);
    const labels = await json<{ labels: Array<{ id: string; name: string }> }>(
      await call(`${s.base}/inboxes/${inbox.id}/labels`, { token }),
    );
    const inboxLabel = labels.labels.find((l) => l.name === 'INBOX')!.id;
    const list = async (query = '', auth: { token?: string; session?: string } = { token }) => {
      // A web session calls the app's address.
      const res = await call(`${auth.session ? s.app : s.base}/inboxes/${inbox.id}/labels/${inboxLabel}/messages?${query}`, auth);
      if (res.status !== 200) throw new Error(`${res.status}: ${await res.text()}`);
      return json<MessageList>(res);
    };
    const bySubject = async () => new Map((await list('limit=100')).messages.map((m) => [m.subject!, m]));
    return { inbox, token, reader, inboxLabel, list, bySubject };
  }

  /** A thread of `n`: each a reply to the one before, References growing, subjects Re:. */
  function chain(subject: string, n: number): Array<Sent & { inReplyTo?: string }> {
    const out: Array<Sent & { inReplyTo?: string }> = [];
    for (let i = 0; i < n; i++) {
      const prev = out.at(-1);
      out.push({
        messageId: `<${i}.${tag()}>`,
        subject: i === 0 ? subject : `Re: ${subject} ${'.'.repeat(i)}`.trimEnd(),
        ...(prev ? { inReplyTo: prev.messageId, references: [prev.references, prev.messageId].filter(Boolean).join(' ') } : {}),
      });
    }
    return out;
  }

  for (const mode of ['compatible', 'zero-access'] as const) {
    it(`${mode}: replies share their thread, forwards and strangers do not, and GET …/threads lists it oldest first`, async () => {
      const { inbox, token, inboxLabel, bySubject } = await setUp(mode);
      const [a, b, c] = chain('Quarterly numbers', 3);
      const forward = { messageId: `<f.${tag()}>`, subject: 'Fwd: Quarterly numbers' };
      // A forward that keeps the chain (some mail apps add References to a forward).
      const linkedForward = { messageId: `<lf.${tag()}>`, subject: 'Fw: Quarterly numbers', references: `${a!.messageId} ${b!.messageId}` };
      const stranger = { messageId: `<s.${tag()}>`, subject: 'Quarterly numbers' };
      await appendAll(inbox, mode, [a!, b!, c!, forward, linkedForward, stranger]);
      const m = await bySubject();
      const id = (subject: string) => m.get(subject)!.threadId;
      expect(id('Quarterly numbers')).to.match(/^thr_[0-9A-Z]{26}$/);
      expect(id(b!.subject)).to.equal(id(c!.subject));
      expect(id(linkedForward.subject)).to.equal(id(c!.subject));
      expect(id(forward.subject)).to.not.equal(id(c!.subject));
      const threadOfA = id(b!.subject)!;
      // The stranger has A's subject but no link: a thread of its own, whichever the two are.
      const subjects = [...m.values()].filter((x) => x.threadId === threadOfA).map((x) => x.subject);
      expect(subjects).to.have.length(4);

      const thread = await json<Thread>(await call(`${s.base}/inboxes/${inbox.id}/threads/${threadOfA}`, { token }));
      expect(thread.id).to.equal(threadOfA);
      expect(thread.messages.map((x) => x.subject)).to.deep.equal([a!.subject, b!.subject, c!.subject, linkedForward.subject]);
      expect(thread.messages.every((x) => x.uid === 0 && x.threadId === threadOfA)).to.equal(true);
      // The detail says it too.
      const detail = await json<{ message: MessageSummary }>(
        await call(`${s.base}/inboxes/${inbox.id}/messages/${thread.messages[0]!.id}`, { token }),
      );
      expect(detail.message.threadId).to.equal(threadOfA);

      await expectError(
        await call(`${s.base}/inboxes/${inbox.id}/threads/thr_00000000000000000000000000`, { token }),
        404,
        /thread not found/,
      );
      await expectError(await call(`${s.base}/inboxes/${inbox.id}/threads/nope`, { token }), 404);
      await expectError(await call(`${s.base}/inboxes/${inbox.id}/threads/${threadOfA}?preview=maybe`, { token }), 400);

      // ?inLabel=: the thread's messages in that label, each with its UID there (a list acting on a
      // conversation row); none in a label that holds none of them; a label not of this inbox: 404.
      const labels = (
        await json<{ labels: Array<{ id: string; specialUse?: string }> }>(await call(`${s.base}/inboxes/${inbox.id}/labels`, { token }))
      ).labels;
      const inInbox = await json<Thread>(await call(`${s.base}/inboxes/${inbox.id}/threads/${threadOfA}?inLabel=${inboxLabel}`, { token }));
      expect(inInbox.messages.map((x) => x.subject)).to.deep.equal(thread.messages.map((x) => x.subject));
      expect(inInbox.messages.map((x) => x.uid)).to.deep.equal(inInbox.messages.map((x) => m.get(x.subject!)!.uid));
      const trash = labels.find((l) => l.specialUse === '\\Trash')!.id;
      const inTrash = await json<Thread>(await call(`${s.base}/inboxes/${inbox.id}/threads/${threadOfA}?inLabel=${trash}`, { token }));
      expect(inTrash).to.deep.equal({ id: threadOfA, messages: [] });
      await expectError(
        await call(`${s.base}/inboxes/${inbox.id}/threads/${threadOfA}?inLabel=lbl_00000000000000000000000000`, { token }),
        404,
        /label not found/,
      );
      await expectError(await call(`${s.base}/inboxes/${inbox.id}/threads/${threadOfA}?inLabel=nope`, { token }), 400);
    });
  }

  it('broken References and a late message joining two threads: ids stay, the late one joins by subject', async () => {
    const { inbox, bySubject } = await setUp();
    const [a1, a2] = chain('Alpha plans', 2);
    const [b1, b2] = chain('Beta launch', 2);
    const gone = `<gone.${tag()}>`;
    // References that name a message never received, with junk between ids, folded.
    const broken = {
      messageId: `<br.${tag()}>`,
      subject: 'Re: Alpha plans (again)',
      references: `${gone}\r\n junk "text" ${a1!.messageId}`,
    };
    const sibling = { messageId: `<sib.${tag()}>`, subject: 'Re: Alpha plans (third)', references: gone };
    await appendAll(inbox, 'compatible', [a1!, b1!, a2!, b2!, broken, sibling]);
    const before = await bySubject();
    const alpha = before.get('Alpha plans')!.threadId!;
    const beta = before.get('Beta launch')!.threadId!;
    expect(alpha).to.not.equal(beta);
    expect(before.get(broken.subject)!.threadId).to.equal(alpha);
    expect(before.get(sibling.subject)!.threadId, 'siblings under a missing ancestor').to.equal(alpha);

    // Replies to Beta, quoting Alpha's Message-ID too.
    const late = {
      messageId: `<late.${tag()}>`,
      subject: 'Re: Beta launch',
      inReplyTo: b2!.messageId,
      references: `${a1!.messageId} ${b1!.messageId} ${b2!.messageId}`,
    };
    await appendAll(inbox, 'compatible', [late]);
    const after = await bySubject();
    expect(after.get(late.subject)!.threadId).to.equal(beta);
    for (const [subject, m] of before) expect(after.get(subject)!.threadId, subject).to.equal(m.threadId);
  });

  /**
   * Conversations of three whose replies each name only their parent (In-Reply-To and a
   * References cut short, as some mail apps send): the first and the last are linked through the
   * middle one alone. Their INTERNALDATEs come in each of the six orders (a reply's may be older
   * than its parent's: clocks differ), then all three in the same second (placed by GUID).
   */
  function conversations(name: string): Array<{ mails: Array<Sent & { inReplyTo?: string }>; dates: Date[] }> {
    const orders = [
      [0, 1, 2],
      [0, 2, 1],
      [1, 0, 2],
      [1, 2, 0],
      [2, 0, 1],
      [2, 1, 0],
      [0, 0, 0],
      [0, 0, 0],
    ];
    return orders.map((order, n) => {
      const subject = `${name} ${n}`;
      const a = { messageId: `<a.${tag()}>`, subject };
      const b = { messageId: `<b.${tag()}>`, subject: `Re: ${subject}`, inReplyTo: a.messageId, references: a.messageId };
      const c = { messageId: `<c.${tag()}>`, subject: `RE: ${subject}`, inReplyTo: b.messageId, references: b.messageId };
      const at = (clock += 10 * 60_000);
      return { mails: [a, b, c], dates: order.map((rank) => new Date(at + rank * 60_000)) };
    });
  }

  /** Appends the conversations back to back, each in its order (parent first), waiting for nothing. */
  async function appendBackToBack(box: TestInbox, talks: Array<{ mails: Array<Sent & { inReplyTo?: string }>; dates: Date[] }>) {
    const app = await mailApp(box);
    try {
      for (const { mails, dates } of talks) {
        for (const [i, m] of mails.entries()) await app.append('INBOX', withHeaders(corpus[next++ % corpus.length]!.raw, m), [], dates[i]);
      }
    } finally {
      await app.logout();
    }
  }

  /** Each conversation's three messages in one thread of its own. */
  async function expectOneThreadEach(list: (query?: string) => Promise<MessageList>, talks: Array<{ mails: Sent[] }>) {
    const listed = await until(
      'every message indexed',
      async () => {
        const page = await list('limit=100');
        return page.messages.length === talks.length * 3 && page.messages;
      },
      60_000,
    );
    const threadOf = new Map(listed.map((m) => [m.subject!, m.threadId]));
    const threads = new Set<string | undefined>();
    for (const { mails } of talks) {
      const ids = mails.map((m) => threadOf.get(m.subject));
      expect(ids, mails[0]!.subject).to.deep.equal([ids[0], ids[0], ids[0]]);
      expect(ids[0]).to.match(/^thr_/);
      threads.add(ids[0]);
    }
    expect(threads.size).to.equal(talks.length);
  }

  it('a conversation in a mailbox added to Postern is one thread, whatever the order its messages are placed in', async () => {
    // The mailbox has the mail before it becomes an inbox: its first fill indexes it in one write.
    const imapUser = `${unique('box')}@${mailEnv().domain}`;
    const imapPassword = 'threads-pw';
    await addUser(mailEnv(), imapUser, imapPassword);
    const talks = conversations('Kitchen plans');
    await appendBackToBack({ id: '', address: imapUser, imapUser, imapPassword }, talks);
    const { id } = await s.postern.admin.addInbox({ projectId: p.projectId, imapUser, addresses: [imapUser] });
    await s.postern.admin.grant(p.memberId, id, 'owner');
    const { list } = await setUp('compatible', { id, address: imapUser, imapUser, imapPassword });
    await expectOneThreadEach(list, talks);
  });

  it('a conversation a mail app appends back to back is one thread, however many of it each sync pass finds', async () => {
    const { inbox, list } = await setUp();
    // Watched, so each pass finds what was appended since the last: one message, or several.
    expect((await list()).messages).to.deep.equal([]);
    const talks = conversations('Garage door');
    await appendBackToBack(inbox, talks);
    await expectOneThreadEach(list, talks);
  });

  it('collapses a label and a search to one row per thread, newest first, with counts, in pages', async () => {
    const { inbox, token, list } = await setUp();
    const t1 = chain('Roof repair', 3);
    const t2 = chain('Roof tiles', 2);
    const single = { messageId: `<one.${tag()}>`, subject: 'Roof insurance' };
    await appendAll(inbox, 'compatible', [t1[0]!, t2[0]!, t1[1]!, single, t2[1]!, t1[2]!]);
    const all = await list('limit=100');
    expect(all.messages).to.have.length(6);
    const seen = all.messages.find((m) => m.subject === t1[0]!.subject)!;
    await call(`${s.base}/inboxes/${inbox.id}/messages/${seen.id}/flags`, {
      method: 'POST',
      token: await p.token(['messages:read', 'flags:write']),
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ add: ['seen'] }),
    });

    const collapsed = await list('collapseThreads=true&limit=100');
    expect(collapsed.messages.map((m) => m.subject)).to.deep.equal([t1[2]!.subject, t2[1]!.subject, single.subject]);
    expect(collapsed.messages[0]!.thread).to.deep.include({ messages: 3, unread: 2 });
    expect(collapsed.messages[0]!.thread!.participants).to.have.length.at.least(1);
    expect(collapsed.messages[1]!.thread).to.deep.include({ messages: 2, unread: 2 });
    expect(collapsed.messages[2]!.thread).to.deep.include({ messages: 1, unread: 1 });
    // Pages of one: the same rows, each thread once.
    const first = await list('collapseThreads=true&limit=1');
    const second = await list(`collapseThreads=true&limit=1&before=${first.before}`);
    const third = await list(`collapseThreads=true&limit=1&before=${second.before}`);
    expect([first, second, third].map((pg) => pg.messages[0]!.subject)).to.deep.equal(collapsed.messages.map((m) => m.subject));
    expect(third.before).to.equal(undefined);

    const search = async (query: string) => json<MessageSearchPage>(await call(`${s.base}/inboxes/${inbox.id}/search?${query}`, { token }));
    const found = await search('subject=roof&collapseThreads=true');
    expect(found.messages.map((m) => m.subject)).to.deep.equal([t1[2]!.subject, t2[1]!.subject, single.subject]);
    expect(found.messages[1]!.thread).to.deep.include({ messages: 2 });
    // Only what matches counts for the row: the newest *matching* message of the thread.
    const older = await search(`subject=repair&before=${encodeURIComponent(new Date(clock - 60_000).toISOString())}&collapseThreads=true`);
    expect(older.messages.map((m) => m.subject)).to.deep.equal([t1[1]!.subject]);
    // Pages of one, by cursor: each thread once, as on one page.
    const pages: string[] = [];
    for (let cursor: string | undefined, i = 0; i < 5; i++) {
      const page = await search(`subject=roof&collapseThreads=true&limit=1${cursor ? `&cursor=${cursor}` : ''}`);
      pages.push(...page.messages.map((m) => m.subject!));
      cursor = page.cursor;
      if (!cursor) break;
    }
    expect(pages).to.deep.equal(found.messages.map((m) => m.subject));
    // Plain listing and search are unchanged.
    expect((await search('subject=roof')).messages).to.have.length(6);
    await expectError(await call(`${s.base}/inboxes/${inbox.id}/search?subject=roof&collapseThreads=sometimes`, { token }), 400);
  });

  it('previews: only for content readers (tokens with content:read, web sessions), each page audited; none in zero-access inboxes', async () => {
    const { inbox, token, reader, list, inboxLabel } = await setUp();
    await appendAll(inbox, 'compatible', chain('Garden party', 2));
    const plain = await list();
    expect(plain.messages.every((m) => m.preview === undefined)).to.equal(true);
    await expectError(
      await call(`${s.base}/inboxes/${inbox.id}/labels/${inboxLabel}/messages?preview=true`, { token }),
      403,
      /content:read/,
    );
    await expectError(await call(`${s.base}/inboxes/${inbox.id}/search?subject=garden&preview=true`, { token }), 403);
    const withPreviews = await list('preview=true', { token: reader });
    expect(withPreviews.messages).to.have.length(2);
    for (const m of withPreviews.messages) {
      expect(m.preview, m.subject).to.be.a('string').and.not.equal('');
      expect([...m.preview!].length).to.be.at.most(200);
    }
    const bySession = await list('preview=true&collapseThreads=true', { session: await p.session() });
    expect(bySession.messages[0]!.preview).to.be.a('string');
    const thread = await json<Thread>(
      await call(`${s.base}/inboxes/${inbox.id}/threads/${withPreviews.messages[0]!.threadId}?preview=true`, { token: reader }),
    );
    expect(thread.messages.map((m) => m.preview)).to.deep.equal([...withPreviews.messages].reverse().map((m) => m.preview));
    // The cached plain page was not changed by the previews served.
    expect((await list()).messages.every((m) => m.preview === undefined)).to.equal(true);

    const auditor = await p.token(['events:read', 'audit:read']);
    const page = await getPage(`${s.base}/events?inboxes=${inbox.id}&audit=true&types=access.content.previewed`, { token: auditor });
    const events = page.events as unknown as Array<{ subject?: string; data: { msgIds: string[]; labelId?: string } }>;
    expect(events).to.have.length(3);
    expect(events[0]!.data).to.deep.equal({ msgIds: withPreviews.messages.map((m) => m.id), labelId: inboxLabel });
    expect(events[0]!.subject).to.equal(inbox.id);
    expect(events[2]!.data.msgIds).to.have.length(2);

    const sealed = await setUp('zero-access');
    await appendAll(sealed.inbox, 'zero-access', chain('Secret plans', 1));
    await expectError(
      await call(`${s.base}/inboxes/${sealed.inbox.id}/labels/${sealed.inboxLabel}/messages?preview=true`, { token: sealed.reader }),
      403,
      /zero-access/,
    );
  });

  it('backfills the threads of an inbox indexed before threads, in the background, reads answering meanwhile', async () => {
    const { inbox, bySubject } = await setUp();
    const [a, b, c] = chain('Budget review', 3);
    const other = { messageId: `<o.${tag()}>`, subject: 'Unrelated' };
    // Its parent named in References only (no In-Reply-To): the backfill fetches them.
    const referencesOnly = { messageId: `<r.${tag()}>`, subject: 'Budget review, the figures', references: a!.messageId };
    await appendAll(inbox, 'compatible', [a!, b!, other, c!, referencesOnly]);
    const threaded = await bySubject();
    expect(threaded.get(referencesOnly.subject)!.threadId).to.equal(threaded.get('Budget review')!.threadId);
    // As an index from before threads: no thread ids, no links kept (its References never fetched).
    const door = await storeBackdoor(s.storeEnv);
    try {
      expect(await door.run('UPDATE mail_messages SET thread_guid = NULL WHERE inbox_id = ?', inbox.id)).to.equal(5);
      await door.run('DELETE FROM mail_thread_links WHERE inbox_id = ?', inbox.id);
    } finally {
      await door.close();
    }
    // Another instance on the store, whose reads start the backfill (this one's knows it is done).
    const second = await startPostern({ ...s.storeEnv, POSTERN_EVENTS_SETTLE_MS: '0' });
    try {
      const token = await p.token(['messages:read']);
      const label = threaded.get('Budget review')!;
      const url = `${second.base}/inboxes/${inbox.id}/labels/${(await json<{ labels: Array<{ id: string; name: string }> }>(await call(`${second.base}/inboxes/${inbox.id}/labels`, { token }))).labels.find((l) => l.name === 'INBOX')!.id}/messages`;
      const firstRead = await call(url, { token });
      expect(firstRead.status).to.equal(200);
      const after = await until('every message placed again', async () => {
        const page = await json<MessageList>(await call(url, { token }));
        return page.messages.every((m) => m.threadId) ? page.messages : null;
      });
      const ids = new Map(after.map((m) => [m.subject!, m.threadId]));
      for (const [subject, m] of threaded) expect(ids.get(subject), subject).to.equal(m.threadId);
      expect(ids.get(referencesOnly.subject)).to.equal(label.threadId);
      expect(label.threadId).to.not.equal(threaded.get('Unrelated')!.threadId);
    } finally {
      await second.close();
    }
  });

  it('MCP: get_thread, and previews in list_messages under the same scope, audit and fence', async () => {
    const { inbox, token, reader, inboxLabel, list } = await setUp();
    await appendAll(inbox, 'compatible', chain('Agent topic', 2));
    const threadId = (await list()).messages[0]!.threadId!;
    const plainAgent = await agent(s.base, token);
    const readerAgent = await agent(s.base, reader);
    try {
      const got = await callTool(plainAgent, 'get_thread', { inboxId: inbox.id, threadId });
      expect(got.error, got.text).to.equal(false);
      expect((got.structured.messages as MessageSummary[]).map((m) => m.subject)).to.deep.equal(['Agent topic', 'Re: Agent topic .']);
      expect(got.text).to.contain('<untrusted-mail-data>');
      expect(got.text).to.contain(`thread: ${threadId}`);
      expect((await callTool(plainAgent, 'get_thread', { inboxId: inbox.id, threadId: 'thr_00000000000000000000000000' })).text).to.match(
        /thread not found/,
      );
      const refused = await callTool(plainAgent, 'list_messages', { inboxId: inbox.id, labelId: inboxLabel, preview: true });
      expect(refused.error).to.equal(true);
      expect(refused.text).to.match(/content:read/);
      const shown = await callTool(readerAgent, 'list_messages', { inboxId: inbox.id, labelId: inboxLabel, preview: true });
      expect(shown.error, shown.text).to.equal(false);
      const messages = shown.structured.messages as MessageSummary[];
      expect(messages.every((m) => typeof m.preview === 'string')).to.equal(true);
      // The preview is mail text: inside the fence.
      expect(shown.text.indexOf(`preview: ${messages[0]!.preview}`)).to.be.greaterThan(shown.text.indexOf('<untrusted-mail-data>'));
      const withPreview = await callTool(readerAgent, 'get_thread', { inboxId: inbox.id, threadId, preview: true });
      expect((withPreview.structured.messages as MessageSummary[]).every((m) => typeof m.preview === 'string')).to.equal(true);
    } finally {
      await plainAgent.close();
      await readerAgent.close();
    }
    const auditor = await p.token(['events:read', 'audit:read']);
    const page = await getPage(`${s.base}/events?inboxes=${inbox.id}&audit=true&types=access.content.previewed`, { token: auditor });
    expect(page.events).to.have.length(2);
  });
});
