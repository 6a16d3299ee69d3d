// The mail read API against the real Dovecot: labels, listing and paging, identity across
// COPY/MOVE, ETag/304, flags both ways, delivery through Postfix, and the 400/404/403 cases.
import { expect } from 'chai';
import { ImapFlow } from 'imapflow';
import { pino } from 'pino';
import { loadConfig } from '../../lib/config.ts';
import { idFromGuid } from '../../lib/ids.ts';
import { openPostern } from '../../lib/server.ts';
import type { Label, MessageSummary as Summary } from '../../schemas/wire.ts';
import { call, envVars, mailEnv, newProject, startPostern, type TestInbox, type TestProject, type TestServer } from '../helpers/harness.ts';
import { append, deliver, json, mailApp, SseReader, until } from '../helpers/mail-fixtures.ts';
import { untilDelivered } from '../helpers/ingress-helpers.ts';

interface Page {
  messages: Summary[];
  before?: number;
}

describe('mail read API', function () {
  this.timeout(60_000);
  let s: TestServer;
  let p: TestProject;
  let inbox: TestInbox;
  let app: ImapFlow;
  let token: string;

  const labels = async (i = inbox) => (await json<{ labels: Label[] }>(await call(`${s.base}/inboxes/${i.id}/labels`, { token }))).labels;
  const labelId = async (name: string, i = inbox) => (await labels(i)).find((l) => l.name === name)!.id;
  const page = async (label: string, query = '', i = inbox) => {
    const res = await call(`${s.base}/inboxes/${i.id}/labels/${label}/messages${query}`, { token });
    expect(res.status, await res.clone().text()).to.equal(200);
    return json<Page>(res);
  };
  const all = async (label: string, i = inbox) => {
    const out: Summary[] = [];
    let before: number | undefined;
    do {
      const pg = await page(label, `?limit=100${before ? `&before=${before}` : ''}`, i);
      out.push(...pg.messages);
      before = pg.before;
    } while (before);
    return out;
  };
  const detail = (msg: string, headers: Record<string, string> = {}, i = inbox) =>
    call(`${s.base}/inboxes/${i.id}/messages/${msg}`, { token, headers });
  const byUid = async (label: string, uid: number) => (await all(label)).find((m) => m.uid === uid)!;

  before(async () => {
    s = await startPostern();
    p = await newProject(s);
    inbox = await p.inbox();
    token = await p.token(['messages:read', 'flags:write']);
    app = await mailApp(inbox);
  });
  after(async () => {
    await app?.logout();
    await s?.close();
  });

  it('lists labels: INBOX, the special-use ones, then the rest by name, with counts', async () => {
    for (const name of ['zeta', 'Alpha', 'beta', 'Café']) await app.mailboxCreate(name);
    await append(app, 'INBOX', { flags: ['\\Seen'] });
    await append(app, 'INBOX');
    await append(app, 'beta');
    const res = await call(`${s.base}/inboxes/${inbox.id}/labels`, { token });
    expect(res.status).to.equal(200);
    expect(res.headers.get('cache-control')).to.equal('no-store');
    const list = (await json<{ labels: Label[] }>(res)).labels;
    expect(list.map((l) => l.name)).to.deep.equal(['INBOX', 'Sent', 'Drafts', 'Trash', 'Junk', 'Archive', 'Alpha', 'beta', 'Café', 'zeta']);
    expect(list.map((l) => l.specialUse ?? null)).to.deep.equal([
      null,
      '\\Sent',
      '\\Drafts',
      '\\Trash',
      '\\Junk',
      '\\Archive',
      null,
      null,
      null,
      null,
    ]);
    expect(list[0]).to.include({ total: 2, unread: 1 });
    expect(list.find((l) => l.name === 'beta')).to.include({ total: 1, unread: 1 });
    for (const l of list) expect(l.id).to.match(/^lbl_[0-9A-Z]{26}$/);
  });

  it('a label id is the mailbox GUID and survives a rename', async () => {
    await app.mailboxCreate('renameme');
    const before = await labelId('renameme');
    await app.mailboxRename('renameme', 'renamed');
    const after = (await labels()).find((l) => l.name === 'renamed');
    expect(after?.id).to.equal(before);
    expect((await labels()).some((l) => l.name === 'renameme')).to.equal(false);
  });

  it('pages newest first with a before cursor; no message skipped or repeated while mail arrives', async () => {
    await app.mailboxCreate('paging');
    const uids: number[] = [];
    for (let i = 0; i < 23; i++) uids.push(await append(app, 'paging', { subject: `page ${i}` }));
    const label = await labelId('paging');
    const seen: number[] = [];
    const first = await page(label, '?limit=10');
    expect(first.messages.map((m) => m.uid)).to.deep.equal(uids.slice(-10).reverse());
    seen.push(...first.messages.map((m) => m.uid));
    let before = first.before;
    expect(before).to.equal(uids.at(-10));
    let arrived = 0;
    while (before) {
      // Mail keeps arriving between pages: it is newer than the cursor, so it never shifts it.
      await append(app, 'paging', { subject: `late ${arrived++}` });
      const next = await page(label, `?limit=10&before=${before}`);
      seen.push(...next.messages.map((m) => m.uid));
      before = next.before;
    }
    expect(seen).to.deep.equal([...uids].reverse());
    expect(new Set(seen).size).to.equal(seen.length);
    // The last page had no cursor; the late mail is on top now.
    expect(arrived).to.equal(2);
    const top = await page(label, '?limit=3');
    expect(top.messages.map((m) => m.subject)).to.deep.equal(['late 1', 'late 0', 'page 22']);
    const d = await page(label);
    expect(d.messages).to.have.length(23 + arrived > 50 ? 50 : 23 + arrived);
    expect(d.before).to.equal(undefined);
  });

  it('summarizes a message: envelope, size, dates, direction', async () => {
    await app.mailboxCreate('summary');
    const uid = await append(app, 'summary', {
      subject: 'Grüße =?',
      from: '"Ann Example" <ann@example.org>',
      to: 'Bob <bob@example.org>, carol@example.org',
    });
    const m = await byUid(await labelId('summary'), uid);
    expect(m.id).to.match(/^msg_[0-9A-Z]{26}$/);
    expect(m.subject).to.equal('Grüße =?');
    expect(m.from).to.equal('Ann Example <ann@example.org>');
    expect(m.to).to.equal('Bob <bob@example.org>, carol@example.org');
    expect(m.size).to.be.a('number').above(50);
    expect(Date.parse(m.receivedAt)).to.be.closeTo(Date.now(), 120_000);
    expect(m.date).to.be.a('string');
    expect(m.direction).to.equal('in');
    expect(m.flags).to.deep.equal([]);
    expect(m).to.not.have.property('keywords');
    // Its id is Dovecot's X-GUID.
    await app.mailboxOpen('summary');
    const fetched = await app.fetchOne(String(uid), { uid: true, emailId: true }, { uid: true });
    expect(fetched).to.be.ok;
  });

  it('mail delivered through Postfix appears; mail from the inbox itself and in Sent is "out"', async () => {
    await deliver(inbox.address, { subject: 'via smtp' });
    const inboxLabel = await labelId('INBOX');
    const got = await untilDelivered('the delivered message', async () => (await all(inboxLabel)).find((m) => m.subject === 'via smtp'));
    expect(got.direction).to.equal('in');
    const ownUid = await append(app, 'INBOX', { from: inbox.address, subject: 'from myself' });
    expect((await byUid(inboxLabel, ownUid)).direction).to.equal('out');
    const sentUid = await append(app, 'Sent', { subject: 'sent copy' });
    expect((await byUid(await labelId('Sent'), sentUid)).direction).to.equal('out');
  });

  it('one id for a message in every label, across COPY and MOVE', async () => {
    await app.mailboxCreate('copies');
    const uid = await append(app, 'INBOX', { subject: 'travelling' });
    const inboxLabel = await labelId('INBOX');
    const original = await byUid(inboxLabel, uid);
    await app.mailboxOpen('INBOX');
    const copied = await app.messageCopy(String(uid), 'copies', { uid: true });
    const copyUid = copied && copied.uidMap ? copied.uidMap.get(uid)! : 0;
    const inCopies = await byUid(await labelId('copies'), copyUid);
    expect(inCopies.id).to.equal(original.id);
    const moved = await app.messageMove(String(uid), 'Archive', { uid: true });
    const movedUid = moved && moved.uidMap ? moved.uidMap.get(uid)! : 0;
    const inArchive = await byUid(await labelId('Archive'), movedUid);
    expect(inArchive.id).to.equal(original.id);
    expect((await all(inboxLabel)).some((m) => m.id === original.id)).to.equal(false);
    const res = await detail(original.id);
    expect(res.status).to.equal(200);
    const body = await json<{ message: Summary }>(res);
    expect(body.message).to.include({ id: original.id, uid: 0, subject: 'travelling' });
    // A new APPEND of the same bytes is a new message.
    const again = await append(app, 'INBOX', { subject: 'travelling' });
    expect((await byUid(inboxLabel, again)).id).to.not.equal(original.id);
  });

  it('message detail: ETag, If-None-Match → 304, a new ETag after any change', async () => {
    const uid = await append(app, 'INBOX', { subject: 'etag me' });
    const m = await byUid(await labelId('INBOX'), uid);
    const first = await detail(m.id);
    expect(first.status).to.equal(200);
    expect(first.headers.get('cache-control')).to.equal('private, no-cache');
    const etag = first.headers.get('etag')!;
    expect(etag).to.match(/^"[\w-]+"$/);
    const body = await json<Record<string, unknown>>(first);
    // docs/api.md, "Message detail": the data key for /raw (made at this first read: test/crypto/encryption.test.ts).
    expect(body).to.include.keys('keyEpoch', 'wrappedDek');
    expect(body)
      .to.have.property('messageId')
      .that.match(/^<t\d+/);

    const cached = await detail(m.id, { 'if-none-match': etag });
    expect(cached.status).to.equal(304);
    expect(await cached.text()).to.equal('');
    expect(cached.headers.get('etag')).to.equal(etag);
    expect(cached.headers.get('cache-control'), 'the 304 too').to.equal('private, no-cache');
    expect((await detail(m.id, { 'if-none-match': `"other", W/${etag}` })).status).to.equal(304);
    expect((await detail(m.id, { 'if-none-match': '"other"' })).status).to.equal(200);

    // A flag set by a mail app changes it.
    await app.mailboxOpen('INBOX');
    await app.messageFlagsAdd(String(uid), ['\\Flagged'], { uid: true });
    const changed = await detail(m.id, { 'if-none-match': etag });
    expect(changed.status).to.equal(200);
    const etag2 = changed.headers.get('etag')!;
    expect(etag2).to.not.equal(etag);
    expect((await json<{ message: Summary }>(changed)).message.flags).to.deep.equal(['flagged']);
    // …and one made through the API too.
    await call(`${s.base}/inboxes/${inbox.id}/messages/${m.id}/flags`, {
      method: 'POST',
      token,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ add: ['seen'] }),
    });
    const again = await detail(m.id, { 'if-none-match': etag2 });
    expect(again.status).to.equal(200);
    expect(again.headers.get('etag')).to.not.equal(etag2);
  });

  it("two instances sharing one store: one's cached detail sees the other's flag change", async () => {
    // A second Postern on the same store (as several instances behind one balancer).
    const config = loadConfig(envVars(mailEnv(), s.storeEnv));
    const second = await openPostern(config, pino({ level: config.logLevel }));
    const { url } = await second.listen();
    try {
      const uid = await append(app, 'INBOX', { subject: 'two instances' });
      const m = await byUid(await labelId('INBOX'), uid);
      const first = await detail(m.id);
      const etag = first.headers.get('etag')!;
      expect((await json<{ message: Summary }>(first)).message.flags).to.deep.equal([]);
      const changed = await call(`${url}/v1/inboxes/${inbox.id}/messages/${m.id}/flags`, {
        method: 'POST',
        token,
        headers: { 'content-type': 'application/json' },
        body: '{"add":["flagged"]}',
      });
      expect(await json(changed)).to.deep.equal({ flags: ['flagged'] });
      // The first instance's sync finds the index already current; its cache must not answer.
      const after = await detail(m.id, { 'if-none-match': etag });
      expect(after.status).to.equal(200);
      expect((await json<{ message: Summary }>(after)).message.flags).to.deep.equal(['flagged']);
      expect((await byUid(await labelId('INBOX'), uid)).flags).to.deep.equal(['flagged']);
    } finally {
      await second.close();
    }
  });

  it('every response conforms to the published schemas (schemas/mail.json)', async () => {
    const ref = (name: string) => `https://postern.dev/schemas/mail.json#/$defs/${name}`;
    const v = s.postern.validator;
    const labelList = await json<unknown>(await call(`${s.base}/inboxes/${inbox.id}/labels`, { token }));
    v.body(ref('LabelList'), labelList);
    const label = await labelId('INBOX');
    const uid = await append(app, 'INBOX', { subject: 'schema', flags: ['$custom', '\\Answered'] });
    const pg = await page(label, '?limit=2');
    v.body(ref('MessageList'), pg);
    const m = await byUid(label, uid);
    v.body(ref('MessageDetail'), await json<unknown>(await detail(m.id)));
    const flags = await call(`${s.base}/inboxes/${inbox.id}/messages/${m.id}/flags`, {
      method: 'POST',
      token,
      headers: { 'content-type': 'application/json' },
      body: '{"add":["flagged"]}',
    });
    v.body(ref('FlagsResponse'), await json<unknown>(flags));
  });

  describe('flags', () => {
    const cases: Array<[string, { flags?: string[]; keywords?: string[] }]> = [
      ['\\Seen', { flags: ['seen'] }],
      ['\\Answered', { flags: ['answered'] }],
      ['\\Flagged', { flags: ['flagged'] }],
      ['\\Draft', { flags: ['draft'] }],
      ['$Forwarded', { flags: ['forwarded'] }],
      ['$Junk', { flags: ['junk'] }],
      ['Junk', { flags: ['junk'] }],
      ['$NotJunk', { flags: ['not_junk'] }],
      ['NonJunk', { flags: ['not_junk'] }],
      ['$label1', { flags: [], keywords: ['$label1'] }],
    ];
    for (const [imap, expected] of cases) {
      it(`IMAP ${imap} reads as ${JSON.stringify(expected)}`, async () => {
        const uid = await append(app, 'INBOX', { subject: `flag ${imap}` });
        await app.mailboxOpen('INBOX');
        await app.messageFlagsAdd(String(uid), [imap], { uid: true });
        const m = await byUid(await labelId('INBOX'), uid);
        expect(m.flags).to.deep.equal(expected.flags ?? []);
        if (expected.keywords) expect(m.keywords).to.deep.equal(expected.keywords);
        else expect(m).to.not.have.property('keywords');
        // \Recent (set on new mail) never shows.
        expect(m.flags).to.not.include('recent');
        await app.messageFlagsRemove(String(uid), [imap], { uid: true });
        const cleared = await byUid(await labelId('INBOX'), uid);
        expect(cleared.flags).to.deep.equal([]);
      });
    }

    for (const [flag, imap] of [
      ['seen', '\\Seen'],
      ['flagged', '\\Flagged'],
      ['answered', '\\Answered'],
    ] as const) {
      it(`POST flags add/remove ${flag} is an IMAP STORE of ${imap} (mail apps see it)`, async () => {
        await app.mailboxCreate(`both-${flag}`);
        const uid = await append(app, 'INBOX', { subject: `api ${flag}` });
        const m = await byUid(await labelId('INBOX'), uid);
        // In two labels: the STORE reaches both.
        await app.mailboxOpen('INBOX');
        const copy = await app.messageCopy(String(uid), `both-${flag}`, { uid: true });
        const copyUid = copy && copy.uidMap ? copy.uidMap.get(uid)! : 0;
        const post = (body: unknown) =>
          call(`${s.base}/inboxes/${inbox.id}/messages/${m.id}/flags`, {
            method: 'POST',
            token,
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify(body),
          });
        const added = await post({ add: [flag] });
        expect(added.status).to.equal(200);
        expect(await json(added)).to.deep.equal({ flags: [flag] });
        const imapFlags = async (box: string, u: number) => {
          await app.mailboxOpen(box);
          const msg = await app.fetchOne(String(u), { flags: true }, { uid: true });
          return msg ? [...(msg.flags ?? [])] : [];
        };
        expect(await imapFlags('INBOX', uid)).to.include(imap);
        expect(await imapFlags(`both-${flag}`, copyUid)).to.include(imap);
        const removed = await post({ remove: [flag] });
        expect(await json(removed)).to.deep.equal({ flags: [] });
        expect(await imapFlags('INBOX', uid)).to.not.include(imap);
        expect(await imapFlags(`both-${flag}`, copyUid)).to.not.include(imap);
      });
    }

    it('503, never the flags from before, when the sync after the STORE fails', async () => {
      const uid = await append(app, 'INBOX', { subject: 'store then fail' });
      const m = await byUid(await labelId('INBOX'), uid);
      // The request's first sync works; the one after its STORE fails.
      const sync = (s.postern.mailSource as unknown as { indexSync: { run: (...a: unknown[]) => Promise<unknown> } }).indexSync;
      const run = sync.run;
      let calls = 0;
      sync.run = function (...a: unknown[]) {
        if (++calls === 2) return Promise.reject(new Error('injected: the mail server went away'));
        return run.apply(this, a);
      };
      try {
        const res = await call(`${s.base}/inboxes/${inbox.id}/messages/${m.id}/flags`, {
          method: 'POST',
          token,
          headers: { 'content-type': 'application/json' },
          body: '{"add":["flagged"]}',
        });
        expect(res.status).to.equal(503);
        expect(res.headers.get('retry-after')).to.match(/^\d+$/);
        expect(Object.keys(await json<object>(res))).to.deep.equal(['error']);
        expect(calls).to.equal(2);
      } finally {
        sync.run = run;
      }
      // The STORE itself went through: the next read shows it.
      expect((await byUid(await labelId('INBOX'), uid)).flags).to.deep.equal(['flagged']);
    });

    describe('while a watcher keeps the index (trusted without a sync)', () => {
      let release: (() => void) | null = null;
      let stream: SseReader | null = null;
      let undo: (() => void) | null = null;
      afterEach(async () => {
        undo?.();
        release?.();
        await stream?.close();
      });

      /**
       * Opens a stream (a live watcher: reads trust the index) and holds every sync pass until
       * the API has issued its STORE: the index is certain to miss what the mail app does next.
       */
      async function staleIndex(): Promise<void> {
        const abort = new AbortController();
        const res = await call(`${s.base}/inboxes/${inbox.id}/events`, {
          token,
          headers: { accept: 'text/event-stream' },
          signal: abort.signal,
        });
        expect(res.status).to.equal(200);
        stream = new SseReader(res, abort);
        await until('the watcher', async () => s.postern.mailMirror.watching(inbox.id).live);
        const gate = new Promise<void>((resolve) => (release = resolve));
        const sync = (s.postern.mailSource as unknown as { indexSync: { run: (...a: unknown[]) => Promise<unknown> } }).indexSync;
        const run = sync.run;
        sync.run = async function (...a: unknown[]) {
          await gate;
          return run.apply(this, a);
        };
        const proto = ImapFlow.prototype as unknown as Record<'messageFlagsAdd', (...a: unknown[]) => Promise<unknown>>;
        const add = proto.messageFlagsAdd;
        proto.messageFlagsAdd = async function (...a: unknown[]) {
          try {
            return await add.apply(this, a);
          } finally {
            release?.();
          }
        };
        undo = () => {
          sync.run = run;
          proto.messageFlagsAdd = add;
        };
      }

      it('a mail app moves the message, then the API flags it at once: the change follows it, and the answer is true', async () => {
        const uid = await append(app, 'INBOX', { subject: 'moved under the API' });
        const m = await byUid(await labelId('INBOX'), uid);
        await staleIndex();
        await app.mailboxOpen('INBOX');
        const moved = await app.messageMove(String(uid), 'Archive', { uid: true });
        const movedUid = moved && moved.uidMap ? moved.uidMap.get(uid)! : 0;
        expect(movedUid).to.be.above(0);
        const res = await call(`${s.base}/inboxes/${inbox.id}/messages/${m.id}/flags`, {
          method: 'POST',
          token,
          headers: { 'content-type': 'application/json' },
          body: '{"add":["flagged"]}',
        });
        expect(res.status, await res.clone().text()).to.equal(200);
        expect(await json(res)).to.deep.equal({ flags: ['flagged'] });
        // And it is so on the server, where the message is now.
        await app.mailboxOpen('Archive');
        const there = await app.fetchOne(String(movedUid), { flags: true }, { uid: true });
        expect([...(there ? (there.flags ?? []) : [])]).to.include('\\Flagged');
        expect((await byUid(await labelId('Archive'), movedUid)).flags).to.deep.equal(['flagged']);
      });

      it('a mail app expunges the message, then the API flags it at once: 404', async () => {
        const uid = await append(app, 'INBOX', { subject: 'expunged under the API' });
        const m = await byUid(await labelId('INBOX'), uid);
        await staleIndex();
        await app.mailboxOpen('INBOX');
        await app.messageDelete(String(uid), { uid: true });
        const res = await call(`${s.base}/inboxes/${inbox.id}/messages/${m.id}/flags`, {
          method: 'POST',
          token,
          headers: { 'content-type': 'application/json' },
          body: '{"add":["flagged"]}',
        });
        expect(res.status, await res.clone().text()).to.equal(404);
        expect(Object.keys(await json<object>(res))).to.deep.equal(['error']);
      });
    });

    it('the response lists every flag after the change, including ones set by mail apps', async () => {
      const uid = await append(app, 'INBOX', { flags: ['$Junk', '\\Draft', '$custom'] });
      const m = await byUid(await labelId('INBOX'), uid);
      const res = await call(`${s.base}/inboxes/${inbox.id}/messages/${m.id}/flags`, {
        method: 'POST',
        token,
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ add: ['seen', 'flagged'] }),
      });
      expect(await json(res)).to.deep.equal({ flags: ['seen', 'flagged', 'draft', 'junk'] });
    });

    for (const [what, body] of [
      ['draft', { add: ['draft'] }],
      ['junk', { remove: ['junk'] }],
      ['a non-array', { add: 'seen' }],
      ['an unknown field', { add: ['seen'], set: ['seen'] }],
      ['the same flag added and removed', { add: ['seen'], remove: ['seen'] }],
      ['a non-object', ['seen']],
    ] as const) {
      it(`400 for ${what}`, async () => {
        const uid = await append(app, 'INBOX');
        const m = await byUid(await labelId('INBOX'), uid);
        const res = await call(`${s.base}/inboxes/${inbox.id}/messages/${m.id}/flags`, {
          method: 'POST',
          token,
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify(body),
        });
        expect(res.status).to.equal(400);
        expect(Object.keys(await json<object>(res))).to.deep.equal(['error']);
      });
    }

    it('400 for a body that is not JSON; 403 without flags:write', async () => {
      const uid = await append(app, 'INBOX');
      const m = await byUid(await labelId('INBOX'), uid);
      const url = `${s.base}/inboxes/${inbox.id}/messages/${m.id}/flags`;
      const bad = await call(url, { method: 'POST', token, headers: { 'content-type': 'application/json' }, body: '{nope' });
      expect(bad.status).to.equal(400);
      const readOnly = await p.token(['messages:read']);
      const refused = await call(url, {
        method: 'POST',
        token: readOnly,
        headers: { 'content-type': 'application/json' },
        body: '{"add":["seen"]}',
      });
      expect(refused.status).to.equal(403);
      expect(Object.keys(await json<object>(refused))).to.deep.equal(['error']);
      const session = await p.session();
      const viaSession = await call(`${s.app}/inboxes/${inbox.id}/messages/${m.id}/flags`, {
        method: 'POST',
        session,
        headers: { 'content-type': 'application/json' },
        body: '{"add":["seen"]}',
      });
      expect(viaSession.status).to.equal(200);
    });
  });

  describe('roles, over HTTP', () => {
    it('a member with role reader reads, but POST flags is 403 even with a flags:write token or a session', async () => {
      const readerId = await p.member();
      const shared = await p.inbox({ role: 'owner' });
      // The same inbox, granted to a second member as reader.
      await s.postern.admin.grant(readerId, shared.id, 'reader');
      const ownerApp = await mailApp(shared);
      const uid = await append(ownerApp, 'INBOX', { subject: 'for the reader' });
      await ownerApp.logout();
      const readerToken = await p.token(['messages:read', 'flags:write'], { memberId: readerId });
      const inboxLabel = (
        await json<{ labels: Label[] }>(await call(`${s.base}/inboxes/${shared.id}/labels`, { token: readerToken }))
      ).labels.find((l) => l.name === 'INBOX')!;
      const listed = await json<Page>(
        await call(`${s.base}/inboxes/${shared.id}/labels/${inboxLabel.id}/messages`, { token: readerToken }),
      );
      const m = listed.messages.find((x) => x.uid === uid)!;
      expect((await call(`${s.base}/inboxes/${shared.id}/messages/${m.id}`, { token: readerToken })).status).to.equal(200);
      const viaToken = await call(`${s.base}/inboxes/${shared.id}/messages/${m.id}/flags`, {
        method: 'POST',
        token: readerToken,
        headers: { 'content-type': 'application/json' },
        body: '{"add":["seen"]}',
      });
      expect(viaToken.status).to.equal(403);
      expect(Object.keys(await json<object>(viaToken))).to.deep.equal(['error']);
      const session = await p.session({ memberId: readerId });
      const viaSession = await call(`${s.app}/inboxes/${shared.id}/messages/${m.id}/flags`, {
        method: 'POST',
        session,
        headers: { 'content-type': 'application/json' },
        body: '{"add":["seen"]}',
      });
      expect(viaSession.status).to.equal(403);
      // Nothing was stored.
      const after = await json<Page>(await call(`${s.base}/inboxes/${shared.id}/labels/${inboxLabel.id}/messages`, { token: readerToken }));
      expect(after.messages.find((x) => x.uid === uid)!.flags).to.deep.equal([]);
    });

    it('a reader made with newProject().inbox({ role: "reader" }) cannot change flags', async () => {
      const rp = await newProject(s);
      const readerInbox = await rp.inbox({ role: 'reader' });
      const readerToken = await rp.token(['messages:read', 'flags:write']);
      const inboxLabel = (
        await json<{ labels: Label[] }>(await call(`${s.base}/inboxes/${readerInbox.id}/labels`, { token: readerToken }))
      ).labels.find((l) => l.name === 'INBOX')!;
      expect(inboxLabel).to.be.ok;
      const res = await call(`${s.base}/inboxes/${readerInbox.id}/messages/msg_00000000000000000000000000/flags`, {
        method: 'POST',
        token: readerToken,
        headers: { 'content-type': 'application/json' },
        body: '{"add":["seen"]}',
      });
      // The role is checked before the message is looked up.
      expect(res.status).to.equal(403);
    });
  });

  describe('never a 5xx', () => {
    let msg: string;
    let label: string;
    before(async () => {
      const uid = await append(app, 'INBOX', { subject: 'sweep' });
      label = await labelId('INBOX');
      msg = (await byUid(label, uid)).id;
    });

    /** 4xx with a JSON {error} body, or a valid 2xx/304; never 5xx. An open stream is closed. */
    const sane = async (what: string, res: Response, method = 'GET') => {
      expect(res.status, `${what}: ${res.status}`).to.be.below(500);
      if (res.status >= 400) {
        if (method !== 'HEAD') {
          expect(res.headers.get('content-type'), what).to.match(/^application\/json/);
          const body = (await res.json()) as Record<string, unknown>;
          expect(Object.keys(body), what).to.deep.equal(['error']);
          expect(body.error, what).to.be.a('string');
        }
      } else {
        expect([200, 204, 304], what).to.include(res.status);
        await res.body?.cancel();
      }
    };
    /** A request that is aborted once its headers are in (streams stay open otherwise). */
    const hit = async (url: string, init: RequestInit & { token?: string; session?: string } = {}) => {
      const abort = new AbortController();
      const timer = setTimeout(() => abort.abort(), 15_000);
      try {
        return await call(url, { token, ...init, signal: abort.signal });
      } finally {
        clearTimeout(timer);
      }
    };

    it('POST flags: every JSON type, non-JSON, wrong content types, an oversized body', async () => {
      const url = `${s.base}/inboxes/${inbox.id}/messages/${msg}/flags`;
      const deep = '['.repeat(5000) + ']'.repeat(5000);
      const bodies = [
        'null',
        'true',
        'false',
        '0',
        '-1',
        '1.5',
        '1e309',
        '"seen"',
        '""',
        '[]',
        '["seen"]',
        '{}',
        deep,
        '{"add":null}',
        '{"add":true}',
        '{"add":1}',
        '{"add":"seen"}',
        '{"add":{}}',
        '{"add":[null]}',
        '{"add":[1]}',
        '{"add":[[]]}',
        '{"add":[{}]}',
        '{"add":["SEEN"]}',
        '{"add":["\\Seen"]}',
        '{"add":["seen","seen"]}',
        '{"add":[]}',
        '{"remove":[]}',
        '{"add":["nope"]}',
        '{"remove":{"0":"seen"}}',
        '{"__proto__":{"add":["seen"]}}',
        '{"constructor":{"prototype":{}}}',
        `{"add":["${'x'.repeat(10_000)}"]}`,
        '{"add":["seen"],"add":["flagged"]}',
        '{nope',
        '',
        ' ',
        'undefined',
        'NaN',
        "{'add':['seen']}",
        '\u0000',
        '\ufeff{}',
        '{"add":["seen"]} trailing',
        '<xml/>',
      ];
      for (const body of bodies) {
        await sane(`body ${body.slice(0, 40)}`, await hit(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body }));
      }
      await sane(
        'invalid UTF-8',
        await hit(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: new Uint8Array([0x7b, 0xff, 0xfe, 0x7d]) }),
      );
      for (const type of [
        'text/plain',
        'application/x-www-form-urlencoded',
        'multipart/form-data; boundary=x',
        'application/jsonx',
        'json',
        ';;;',
        'application/json; charset=latin1',
      ]) {
        await sane(`content-type ${type}`, await hit(url, { method: 'POST', headers: { 'content-type': type }, body: '{"add":["seen"]}' }));
      }
      await sane('no content-type', await hit(url, { method: 'POST', body: '{"add":["seen"]}' }));
      const big = await hit(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: `{"add":["seen"],"pad":"${'x'.repeat(300 * 1024)}"}`,
      });
      expect(big.status).to.equal(413);
      await sane('over 256 KB', big);
    });

    it('odd If-None-Match values', async () => {
      const url = `${s.base}/inboxes/${inbox.id}/messages/${msg}`;
      for (const value of [
        '',
        '*',
        '""',
        'W/',
        'W/""',
        ',,,',
        '"unterminated',
        'no-quotes',
        'W/"x", *',
        '"a","b",',
        ' "x" ',
        'é',
        'x'.repeat(8000),
        '"\t"',
      ]) {
        await sane(`If-None-Match ${value.slice(0, 30)}`, await hit(url, { headers: { 'if-none-match': value } }));
      }
    });

    it('percent-encoded and overlong ids in every path position; unknown query parameters; HEAD', async () => {
      const odd = [
        '%00',
        '%2F',
        '%2e%2e',
        '%25',
        '%FF',
        '%C3%A9',
        '%E2%80%AE',
        '%20',
        'x'.repeat(5000),
        `${'ibx_'}${'0'.repeat(4000)}`,
        'lbl_%00',
        'msg_%ZZ',
        '%',
        '..',
        '~',
        'null',
        '-1',
      ];
      const paths = (i: string, l: string, m: string) =>
        [
          ['GET', `/inboxes/${i}/labels`],
          ['GET', `/inboxes/${i}/labels/${l}/messages`],
          ['GET', `/inboxes/${i}/messages/${m}`],
          ['POST', `/inboxes/${i}/messages/${m}/flags`],
          ['GET', `/inboxes/${i}/events`],
        ] as const;
      const requests: Array<readonly [string, string]> = [];
      for (const x of odd) {
        requests.push(...paths(x, label, msg), ...paths(inbox.id, x, msg), ...paths(inbox.id, label, x));
      }
      for (const [method, path] of paths(inbox.id, label, msg)) {
        requests.push(
          [method, `${path}?unknown=1`],
          [method, `${path}?limit=1&limit=2`],
          [method, `${path}?%FF=%FF`],
          [method, `${path}?${'a'.repeat(3000)}=1`],
        );
      }
      for (const [method, path] of requests) {
        const init = method === 'POST' ? { method, headers: { 'content-type': 'application/json' }, body: '{"add":["seen"]}' } : { method };
        await sane(`${method} ${path.slice(0, 80)}`, await hit(`${s.base}${path}`, init), method);
      }
      for (const [, path] of paths(inbox.id, label, msg).filter(([m]) => m === 'GET')) {
        await sane(`HEAD ${path}`, await hit(`${s.base}${path}`, { method: 'HEAD' }), 'HEAD');
        await sane(`HEAD ${path} (bad id)`, await hit(`${s.base}${path.replace(inbox.id, '%FF')}`, { method: 'HEAD' }), 'HEAD');
      }
    });

    it('Accept variants on /inboxes/{id}/events', async () => {
      const url = `${s.base}/inboxes/${inbox.id}/events`;
      for (const accept of [
        'text/event-stream',
        'application/json',
        'text/html',
        '*/*',
        'text/event-stream;q=0',
        'text/*',
        ';;;',
        '',
        'x'.repeat(4000),
        'application/json, text/event-stream;q=0.5',
      ]) {
        await sane(`Accept ${accept.slice(0, 40)}`, await hit(url, { headers: { accept: accept } }));
      }
    });
  });

  describe('400 and 404', () => {
    for (const q of [
      '?limit=0',
      '?limit=101',
      '?limit=abc',
      '?limit=1.5',
      '?before=0',
      '?before=-3',
      '?before=x',
      '?limit=5&limit=6',
      '?unknown=1',
    ]) {
      it(`400 for ${q}`, async () => {
        const res = await call(`${s.base}/inboxes/${inbox.id}/labels/${await labelId('INBOX')}/messages${q}`, { token });
        expect(res.status).to.equal(400);
        expect(Object.keys(await json<object>(res))).to.deep.equal(['error']);
      });
    }

    it("404 for labels and messages not in the inbox, including another inbox's well-formed ids", async () => {
      const other = await p.inbox();
      const otherApp = await mailApp(other);
      const otherUid = await append(otherApp, 'INBOX');
      await otherApp.logout();
      const otherLabel = await labelId('INBOX', other);
      const otherMsg = (await all(otherLabel, other)).find((m) => m.uid === otherUid)!.id;
      const own = await labelId('INBOX');
      for (const label of [otherLabel, 'lbl_00000000000000000000000000', 'lbl_nope', idFromGuid('lbl', 'ff'.repeat(16))]) {
        const res = await call(`${s.base}/inboxes/${inbox.id}/labels/${label}/messages`, { token });
        expect(res.status, label).to.equal(404);
      }
      for (const msg of [otherMsg, 'msg_00000000000000000000000000', 'msg_x', 'ZZZ']) {
        expect((await detail(msg)).status, msg).to.equal(404);
        const res = await call(`${s.base}/inboxes/${inbox.id}/messages/${msg}/flags`, {
          method: 'POST',
          token,
          headers: { 'content-type': 'application/json' },
          body: '{"add":["seen"]}',
        });
        expect(res.status, msg).to.equal(404);
      }
      // The other inbox's own ids work there.
      expect((await call(`${s.base}/inboxes/${other.id}/labels/${otherLabel}/messages`, { token })).status).to.equal(200);
      expect(own).to.not.equal(otherLabel);
    });

    it('403 without messages:read; 404 for an inbox the caller may not use', async () => {
      const noRead = await p.token(['send']);
      expect((await call(`${s.base}/inboxes/${inbox.id}/labels`, { token: noRead })).status).to.equal(403);
      const stranger = await newProject(s);
      const strangerToken = await stranger.token(['messages:read']);
      expect((await call(`${s.base}/inboxes/${inbox.id}/labels`, { token: strangerToken })).status).to.equal(404);
    });
  });
});
