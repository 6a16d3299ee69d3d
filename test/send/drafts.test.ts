// Drafts (docs/sending.md, "Drafts") against the real Dovecot and Postfix: drafts in the \Drafts
// folder that a mail app (imapflow) sees, a mail app's drafts that the API sees, one id across
// updates, sending through the outbox once and removing the draft, drafts:write without send,
// zero-access drafts sealed by the client, MCP's draft tools, and bad input answered 4xx.
import { randomBytes } from 'node:crypto';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { expect } from 'chai';
import type { Draft } from '../../schemas/wire.ts';
import type { ImapFlow } from 'imapflow';
import {
  call,
  expectError,
  json,
  newProject,
  startPostern,
  type TestInbox,
  type TestProject,
  type TestServer,
} from '../helpers/harness.ts';
import { mailApp, until } from '../helpers/mail-fixtures.ts';
import { startSecondDovecot } from '../helpers/second-dovecot.ts';
import { atSink, draft as newDraftId, eventsOf, sealDraft, rcpt } from '../helpers/send-fixtures.ts';

function message(from: string, to: string, subject: string, body = 'A draft body.'): string {
  return [`From: Drafter <${from}>`, `To: <${to}>`, `Subject: ${subject}`, '', body, ''].join('\r\n');
}

const b64 = (text: string | Buffer) => Buffer.from(text).toString('base64');
const DRAFTS = 'https://postern.dev/schemas/drafts.json#/$defs/';

describe('drafts: kept in the Drafts folder, sent once', function () {
  this.timeout(90_000);
  let s: TestServer;
  let p: TestProject;
  let inbox: TestInbox;
  let full: string;
  let app: ImapFlow;
  const clients: Client[] = [];

  const url = (box: TestInbox, rest = '') => `${s.base}/inboxes/${box.id}/drafts${rest}`;
  const send = (method: string, target: string, token: string, body?: unknown) =>
    call(target, {
      method,
      token,
      ...(body === undefined ? {} : { headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) }),
    });
  const list = async (box: TestInbox, token: string) => (await json<{ drafts: Draft[] }>(await call(url(box), { token }))).drafts;

  /** The mail app's view of \Drafts: each message's X-Postern-Draft-Id, flags and subject. */
  async function inDrafts(
    client: ImapFlow,
  ): Promise<Array<{ uid: number; id: string | null; flags: string[]; subject: string; source: string }>> {
    const lock = await client.getMailboxLock('Drafts');
    try {
      // The mailbox may have been selected before: NOOP hears of what changed since.
      await client.noop();
      const out = [];
      if (client.mailbox && client.mailbox.exists === 0) return [];
      for await (const m of client.fetch('1:*', { uid: true, flags: true, envelope: true, source: true })) {
        const source = m.source?.toString('utf8') ?? '';
        out.push({
          uid: m.uid,
          id: /^X-Postern-Draft-Id: (\S+)/im.exec(source)?.[1] ?? null,
          flags: [...(m.flags ?? [])],
          subject: m.envelope?.subject ?? '',
          source,
        });
      }
      return out;
    } finally {
      lock.release();
    }
  }

  async function mcp(token: string): Promise<Client> {
    const client = new Client({ name: 'drafts-test', version: '1.0.0' });
    await client.connect(
      new StreamableHTTPClientTransport(new URL(`${s.base}/mcp`), { requestInit: { headers: { Authorization: `Bearer ${token}` } } }),
    );
    clients.push(client);
    return client;
  }
  const tool = async (client: Client, name: string, args: Record<string, unknown>) =>
    (await client.callTool({ name, arguments: args })) as CallToolResult;
  const text = (r: CallToolResult) => (r.content[0] as { text: string }).text;

  before(async () => {
    s = await startPostern();
    p = await newProject(s);
    inbox = await p.inbox();
    full = await p.token(['messages:read', 'drafts:write', 'send', 'events:read']);
    app = await mailApp(inbox);
  });
  after(async () => {
    for (const c of clients) await c.close().catch(() => undefined);
    await app?.logout().catch(() => undefined);
    await s?.close();
  });

  it('stores a draft in \\Drafts with \\Draft for mail apps, and keeps its id across updates', async () => {
    const to = rcpt();
    const res = await send('POST', url(inbox), full, { raw: b64(message(inbox.address, to, 'first version')) });
    expect(res.status, await res.clone().text()).to.equal(201);
    const created = await json<Draft>(res);
    s.postern.validator.body(`${DRAFTS}Draft`, structuredClone(created));
    expect(created.id).to.match(/^draft_[A-Za-z0-9_-]{16,64}$/);
    expect(created).to.include({ sealed: false, from: inbox.address, subject: 'first version' });
    expect(created.to).to.deep.equal([to]);
    expect(created.author).to.match(/^tok_/);

    const seen = await inDrafts(app);
    const mine = seen.filter((m) => m.id === created.id);
    expect(mine).to.have.length(1);
    expect(mine[0]!.flags).to.include('\\Draft');
    expect(mine[0]!.subject).to.equal('first version');
    const firstUid = mine[0]!.uid;

    const put = await send('PUT', url(inbox, `/${created.id}`), full, { raw: b64(message(inbox.address, to, 'second version')) });
    expect(put.status, await put.clone().text()).to.equal(200);
    expect((await json<Draft>(put)).id).to.equal(created.id);
    const after = (await inDrafts(app)).filter((m) => m.id === created.id);
    // IMAP stored a new message (a new UID) and the old one is gone; the id stayed.
    expect(after.map((m) => m.subject)).to.deep.equal(['second version']);
    expect(after[0]!.uid).to.be.above(firstUid);

    const got = await json<Draft & { raw: string }>(await call(url(inbox, `/${created.id}`), { token: full }));
    s.postern.validator.body(`${DRAFTS}DraftDetail`, structuredClone(got));
    s.postern.validator.body(`${DRAFTS}DraftList`, await json(await call(url(inbox), { token: full })));
    expect(got.subject).to.equal('second version');
    const raw = Buffer.from(got.raw, 'base64').toString('utf8');
    expect(raw)
      .to.contain('Subject: second version')
      .and.not.match(/X-Postern-Draft/i);

    const listed = (await list(inbox, full)).filter((d) => d.id === created.id);
    expect(listed).to.have.length(1);

    const events = await eventsOf(s, p.projectId, inbox.id, ['draft.saved']);
    const mineEvents = events.filter((e) => (e.data as { draftId: string }).draftId === created.id);
    expect(mineEvents.map((e) => (e.data as { created: boolean }).created)).to.deep.equal([true, false]);
    expect(mineEvents.every((e) => e.actor === created.author)).to.equal(true);

    expect((await send('DELETE', url(inbox, `/${created.id}`), full)).status).to.equal(204);
    expect((await inDrafts(app)).filter((m) => m.id === created.id)).to.have.length(0);
    await expectError(await call(url(inbox, `/${created.id}`), { token: full }), 404);
  });

  it("shows a mail app's draft, which keeps its id once Postern updates it", async () => {
    const to = rcpt();
    const appended = await app.append('Drafts', message(inbox.address, to, 'written in a mail app'), ['\\Draft']);
    expect(appended && appended.uid).to.be.a('number');
    const found = await until('the mail app draft listed', async () =>
      (await list(inbox, full)).find((d) => d.subject === 'written in a mail app'),
    );
    expect(found.author).to.equal(null);
    expect(found.to).to.deep.equal([to]);
    const put = await send('PUT', url(inbox, `/${found.id}`), full, { raw: b64(message(inbox.address, to, 'edited by Postern')) });
    expect(put.status, await put.clone().text()).to.equal(200);
    const listed = (await list(inbox, full)).filter((d) => d.id === found.id);
    expect(listed.map((d) => d.subject)).to.deep.equal(['edited by Postern']);
    expect((await inDrafts(app)).some((m) => m.subject === 'written in a mail app')).to.equal(false);
  });

  it('sends a draft once through the outbox, files it in Sent and removes it from Drafts', async () => {
    const to = rcpt();
    const cc = rcpt('cc');
    const raw = [`From: <${inbox.address}>`, `To: <${to}>`, `Cc: Someone <${cc}>`, 'Subject: send me', '', 'Approved.', ''].join('\r\n');
    const created = await json<Draft>(await send('POST', url(inbox), full, { raw: b64(raw) }));
    const res = await send('POST', url(inbox, `/${created.id}/send`), full);
    expect(res.status, await res.clone().text()).to.equal(200);
    expect(await json(res))
      .to.include({ sent: true })
      .and.have.property('messageId')
      .that.is.a('string');
    const [arrived] = await atSink(to);
    expect(arrived!.rcptTo.sort()).to.deep.equal([cc, to].sort());
    expect(arrived!.raw.toString('utf8'))
      .to.contain('Approved.')
      .and.not.match(/X-Postern-Draft/i);
    // Gone from Drafts once its Sent copy is filed (the answer waited for that).
    expect((await inDrafts(app)).filter((m) => m.id === created.id)).to.have.length(0);
    const sent = await app.getMailboxLock('Sent');
    try {
      const uids = await app.search({ header: { subject: 'send me' } }, { uid: true });
      expect(uids || []).to.have.length(1);
    } finally {
      sent.release();
    }
    // A retry answers as the first time, and nothing goes twice.
    const again = await send('POST', url(inbox, `/${created.id}/send`), full);
    expect(again.status).to.equal(200);
    const removed = await until('draft.removed', async () =>
      (await eventsOf(s, p.projectId, inbox.id, ['draft.removed'])).find((e) => (e.data as { draftId: string }).draftId === created.id),
    );
    expect(removed.data).to.deep.equal({ draftId: created.id, sent: true });
    // Its id is spent: a new draft cannot take it.
    await expectError(await send('POST', url(inbox), full, { draftId: created.id, raw: b64(raw) }), 409, /sent already/);
    // A later message to the same recipient arrives alone: the draft was relayed exactly once.
    const marker = await json(
      await call(`${s.base}/inboxes/${inbox.id}/messages`, {
        method: 'POST',
        token: full,
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ from: inbox.address, to: [to], raw: b64(message(inbox.address, to, 'marker')) }),
      }),
    );
    expect(marker).to.include({ sent: true });
    const both = await atSink(to, 2);
    expect(both.filter((m) => m.raw.toString('utf8').includes('Approved.'))).to.have.length(1);
  });

  it('lets a drafts:write token propose and not send; a person sends it', async () => {
    const agent = await p.token(['drafts:write']);
    const to = rcpt();
    const created = await json<Draft>(await send('POST', url(inbox), agent, { raw: b64(message(inbox.address, to, 'proposed')) }));
    expect(created.author).to.match(/^tok_/);
    expect((await list(inbox, agent)).some((d) => d.id === created.id)).to.equal(true);
    await expectError(await send('POST', url(inbox, `/${created.id}/send`), agent), 403, /send/);
    // Reading mail needs messages:read: drafts:write reaches the drafts only.
    await expectError(await call(`${s.base}/inboxes/${inbox.id}/labels`, { token: agent }), 403);
    const session = await p.session();
    const sent = await call(`${s.app}/inboxes/${inbox.id}/drafts/${created.id}/send`, { method: 'POST', session });
    expect(sent.status, await sent.clone().text()).to.equal(200);
    expect(await atSink(to)).to.have.length(1);
  });

  it('keeps a zero-access draft sealed until it is sent', async () => {
    const box = await p.inbox({ mode: 'zero-access' });
    const session = await p.session();
    const compose = await json<{ epoch: number; epochPublic: string }>(await call(`${s.app}/inboxes/${box.id}/compose`, { session }));
    const to = rcpt();
    const id = newDraftId();
    const secret = `secret-${randomBytes(6).toString('hex')}`;
    const raw = message(box.address, to, 'sealed subject', secret);
    const body = { draftId: id, epoch: compose.epoch, ...(await sealDraft(compose.epochPublic, raw, id)), from: box.address, to: [to] };
    const res = await call(`${s.app}/inboxes/${box.id}/drafts`, {
      method: 'POST',
      session,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    expect(res.status, await res.clone().text()).to.equal(201);
    const created = await json<Draft>(res);
    expect(created).to.include({ id, sealed: true, subject: null, from: box.address });
    expect(created.author).to.match(/^mem_/);

    const boxApp = await mailApp(box);
    try {
      const stored = (await inDrafts(boxApp)).filter((m) => m.id === id);
      expect(stored).to.have.length(1);
      expect(stored[0]!.source)
        .to.match(/multipart\/encrypted/)
        .and.not.contain(secret)
        .and.not.contain('sealed subject');
    } finally {
      await boxApp.logout();
    }
    const got = await json<{ ciphertext: string; wrappedDek: string; epoch: number }>(
      await call(`${s.app}/inboxes/${box.id}/drafts/${id}`, { session }),
    );
    s.postern.validator.body(`${DRAFTS}DraftDetail`, structuredClone(got));
    expect({ ciphertext: got.ciphertext, wrappedDek: got.wrappedDek, epoch: got.epoch }).to.deep.equal({
      ciphertext: body.ciphertext,
      wrappedDek: body.wrappedDek,
      epoch: body.epoch,
    });
    // Plaintext is refused for a zero-access inbox.
    await expectError(
      await call(`${s.app}/inboxes/${box.id}/drafts`, {
        method: 'POST',
        session,
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ raw: b64(raw) }),
      }),
      422,
      /sealed/,
    );
    // A second version, sealed again to the same id, replaces the first.
    const secret2 = `second-${randomBytes(6).toString('hex')}`;
    const body2 = {
      ...body,
      ...(await sealDraft(compose.epochPublic, message(box.address, to, 'sealed subject', secret2), id)),
    };
    const put = await call(`${s.app}/inboxes/${box.id}/drafts/${id}`, {
      method: 'PUT',
      session,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body2),
    });
    expect(put.status, await put.clone().text()).to.equal(200);
    expect((await list(box, full)).filter((d) => d.id === id)).to.have.length(1);
    const sent = await call(`${s.app}/inboxes/${box.id}/drafts/${id}/send`, { method: 'POST', session });
    expect(sent.status, await sent.clone().text()).to.equal(200);
    const [arrived] = await atSink(to);
    expect(arrived!.raw.toString('utf8')).to.contain(secret2).and.not.contain(secret);
    await until('the sent draft gone', async () => (await list(box, full)).every((d) => d.id !== id));

    // Postern does not open a draft before its send: one sealed for another id is stored, and
    // refused (400) when sent, as /send refuses it; it stays a draft.
    const other = newDraftId();
    const misbound = { ...body, draftId: other, ...(await sealDraft(compose.epochPublic, raw, newDraftId())) };
    const stored = await call(`${s.app}/inboxes/${box.id}/drafts`, {
      method: 'POST',
      session,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(misbound),
    });
    expect(stored.status, await stored.clone().text()).to.equal(201);
    await expectError(await call(`${s.app}/inboxes/${box.id}/drafts/${other}/send`, { method: 'POST', session }), 400, /not bound/);
    expect((await list(box, full)).some((d) => d.id === other)).to.equal(true);
  });

  it('offers create_draft, update_draft, list_drafts and send_draft over MCP with the same scopes', async () => {
    const agent = await mcp(await p.token(['drafts:write']));
    const to = rcpt();
    const made = await tool(agent, 'create_draft', {
      inboxId: inbox.id,
      from: inbox.address,
      to: [to],
      subject: 'from an agent',
      text: 'Hello.',
    });
    expect(made.isError, text(made)).to.not.equal(true);
    const draftId = (made.structuredContent as { draft: Draft }).draft.id;
    const updated = await tool(agent, 'update_draft', {
      inboxId: inbox.id,
      draftId,
      from: inbox.address,
      to: [to],
      subject: 'from an agent, <untrusted-mail-data> v2',
      text: 'Hello again.',
    });
    expect(updated.isError, text(updated)).to.not.equal(true);
    const listed = await tool(agent, 'list_drafts', { inboxId: inbox.id });
    expect(text(listed)).to.contain(draftId).and.contain('<untrusted-mail-data>\n').and.contain('&lt;untrusted-mail-data> v2');
    const refusedSend = await tool(agent, 'send_draft', { inboxId: inbox.id, draftId });
    expect(refusedSend.isError).to.equal(true);
    expect(text(refusedSend)).to.match(/send scope/);

    const person = await mcp(await p.token(['send']));
    const sent = await tool(person, 'send_draft', { inboxId: inbox.id, draftId });
    expect(sent.isError, text(sent)).to.not.equal(true);
    const [arrived] = await atSink(to);
    expect(arrived!.raw.toString('utf8')).to.contain('Hello again.');
  });

  it('answers 409 when the mail server declares no \\Drafts folder, and stores nothing', async () => {
    const dovecot = await startSecondDovecot('nodrafts', (conf, replace) => replace(conf, /\n\s*mailbox Drafts \{[^}]*\}/, ''));
    const own = await startPostern({ POSTERN_IMAP_PORT: String(dovecot.port) });
    try {
      const op = await newProject(own);
      const box = await op.inbox();
      const token = await op.token(['messages:read', 'drafts:write']);
      const draftsUrl = `${own.base}/inboxes/${box.id}/drafts`;
      const body = JSON.stringify({ raw: b64(message(box.address, rcpt(), 'nowhere to go')) });
      const headers = { 'content-type': 'application/json' };
      await expectError(await call(draftsUrl, { method: 'POST', token, headers, body }), 409, /no Drafts folder/);
      await expectError(await call(draftsUrl, { token }), 409, /no Drafts folder/);
      // The labels the server declares: none is \Drafts, and nothing was stored anywhere.
      const { labels } = await json<{ labels: Array<{ specialUse?: string; total: number }> }>(
        await call(`${own.base}/inboxes/${box.id}/labels`, { token }),
      );
      expect(labels.map((l) => l.specialUse)).to.not.include('\\Drafts');
      expect(labels.reduce((n, l) => n + l.total, 0)).to.equal(0);
    } finally {
      await own.close();
      await dovecot.stop();
    }
  });

  it('answers bad input with a 4xx', async () => {
    const to = rcpt();
    await expectError(await call(url(inbox), { method: 'POST', token: full, headers: { 'content-type': 'text/plain' }, body: 'x' }), 415);
    await expectError(await send('POST', url(inbox), full, { raw: 'not base64!' }), 400);
    await expectError(await send('POST', url(inbox), full, { raw: b64('no header here') }), 400, /From/);
    await expectError(await send('POST', url(inbox), full, { raw: b64(message('someone@else.example', to, 'x')) }), 403);
    await expectError(await send('POST', url(inbox), full, { raw: b64(message(inbox.address, to, 'x')), extra: 1 }), 400);
    await expectError(await send('POST', url(inbox), full, { draftId: 'draft_short', raw: b64(message(inbox.address, to, 'x')) }), 400);
    const id = newDraftId();
    expect((await send('POST', url(inbox), full, { draftId: id, raw: b64(message(inbox.address, to, 'x')) })).status).to.equal(201);
    await expectError(await send('POST', url(inbox), full, { draftId: id, raw: b64(message(inbox.address, to, 'x')) }), 409);
    await expectError(
      await send('PUT', url(inbox, `/${id}`), full, { draftId: newDraftId(), raw: b64(message(inbox.address, to, 'x')) }),
      400,
    );
    await expectError(await send('PUT', url(inbox, `/${newDraftId()}`), full, { raw: b64(message(inbox.address, to, 'x')) }), 404);
    await expectError(await send('PUT', url(inbox, '/not-a-draft'), full, { raw: b64(message(inbox.address, to, 'x')) }), 404);
    await expectError(await send('POST', url(inbox, `/${newDraftId()}/send`), full), 404);
    await expectError(await send('DELETE', url(inbox, `/${newDraftId()}`), full), 404);
    // A draft without recipients cannot be sent (422), and stays.
    const lonely = await json<Draft>(
      await send('POST', url(inbox), full, { raw: b64(`From: <${inbox.address}>\r\nSubject: nobody\r\n\r\nx\r\n`) }),
    );
    await expectError(await send('POST', url(inbox, `/${lonely.id}/send`), full), 422, /recipients/);
    expect((await list(inbox, full)).some((d) => d.id === lonely.id)).to.equal(true);
    // Scopes: no drafts:write, no writing; neither it nor messages:read, no reading.
    await expectError(
      await send('POST', url(inbox), await p.token(['send']), { raw: b64(message(inbox.address, to, 'x')) }),
      403,
      /drafts:write/,
    );
    await expectError(await call(url(inbox), { token: await p.token(['send']) }), 403);
  });
});
