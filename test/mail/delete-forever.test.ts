// Deleting a message forever (docs/organize.md, "Delete forever") against the real Dovecot, in
// both inbox modes: expunged from every label; from trash or junk only unless confirmed; only
// with messages:destroy (which messages:write does not imply) and a role that allows it; the
// caller's message.removed events; and the MCP tool offered only to a token with the scope.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { expect } from 'chai';
import type { ImapFlow } from 'imapflow';
import { seal } from '../../lib/mail/sealing.ts';
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
import type { WireEvent } from '../helpers/events-helpers.ts';

const SAMPLE = Buffer.from(
  'From: Bob <bob@example.com>\r\nTo: box@postern.test\r\nSubject: forever\r\nMessage-ID: <forever-1@example.com>\r\n\r\nBye.\r\n',
);

describe('deleting a message forever', function () {
  this.timeout(60_000);
  let s: TestServer;
  let p: TestProject;

  before(async () => {
    s = await startPostern({ POSTERN_EVENTS_SETTLE_MS: '0' });
    p = await newProject(s);
  });
  after(() => s.close());

  /** An inbox with one message APPENDed by a mail app to each folder of `into` (the same message: COPYs). */
  async function setUp(mode: 'compatible' | 'zero-access', into: string[], options: { role?: string; memberId?: string } = {}) {
    const inbox = await p.inbox({ mode, ...options });
    const token = await p.token(
      ['messages:read', 'messages:write', 'messages:destroy', 'events:read'],
      options.memberId ? { memberId: options.memberId } : {},
    );
    const bytes = mode === 'zero-access' ? await seal(SAMPLE, await s.postern.keys.current(inbox.id)) : SAMPLE;
    const app = await mailApp(inbox);
    try {
      await app.append(into[0]!, bytes, []);
      await app.mailboxOpen(into[0]!);
      for (const other of into.slice(1)) await app.messageCopy('1:*', other);
    } finally {
      await app.logout();
    }
    const { labels } = await json<{ labels: Array<{ id: string; name: string }> }>(
      await call(`${s.base}/inboxes/${inbox.id}/labels`, { token }),
    );
    const label = (name: string) => labels.find((l) => l.name === name)!.id;
    const page = await json<{ messages: Array<{ id: string }> }>(
      await call(`${s.base}/inboxes/${inbox.id}/labels/${label(into[0]!)}/messages`, { token }),
    );
    return { inbox, token, label, msgId: page.messages[0]!.id };
  }

  const destroy = (inboxId: string, msgId: string, token: string, query = '') =>
    call(`${s.base}/inboxes/${inboxId}/messages/${msgId}${query}`, { method: 'DELETE', token });

  async function count(inbox: TestInbox, path: string): Promise<number> {
    const app: ImapFlow = await mailApp(inbox);
    try {
      const status = await app.status(path, { messages: true });
      return status ? (status.messages ?? -1) : -1;
    } finally {
      await app.logout();
    }
  }

  for (const mode of ['compatible', 'zero-access'] as const) {
    it(`expunges a message in trash from every label, recorded as the caller's (${mode})`, async () => {
      const { inbox, token, label, msgId } = await setUp(mode, ['Trash', 'Junk']);
      expect((await destroy(inbox.id, msgId, token)).status).to.equal(204);
      expect(await count(inbox, 'Trash')).to.equal(0);
      expect(await count(inbox, 'Junk')).to.equal(0);
      await expectError(await call(`${s.base}/inboxes/${inbox.id}/messages/${msgId}`, { token }), 404);
      await expectError(await destroy(inbox.id, msgId, token), 404);
      const tokenId = /^svc_(tok_[0-9A-Z]{26})_/.exec(token)![1];
      const removed = await until('two message.removed', async () => {
        const body = await json<{ events: WireEvent[] }>(await call(`${s.base}/events?inboxes=${inbox.id}&limit=100`, { token }));
        const found = body.events.filter((e) => e.type === 'message.removed');
        return found.length >= 2 ? found : null;
      });
      expect(removed.map((e) => [(e.data as { labelId: string }).labelId, e.subject, e.actor])).to.have.deep.members([
        [label('Trash'), msgId, tokenId],
        [label('Junk'), msgId, tokenId],
      ]);
    });

    it(`refuses a message outside trash and junk without confirm (409), and deletes it with confirm=true (${mode})`, async () => {
      const { inbox, token, msgId } = await setUp(mode, ['INBOX', 'Archive']);
      await expectError(await destroy(inbox.id, msgId, token), 409, /INBOX, Archive.*confirm/);
      await expectError(await destroy(inbox.id, msgId, token, '?confirm=false'), 409);
      expect(await count(inbox, 'INBOX')).to.equal(1);
      await expectError(await destroy(inbox.id, msgId, token, '?confirm=yes'), 400);
      await expectError(await destroy(inbox.id, msgId, token, '?really=true'), 400);
      expect((await destroy(inbox.id, msgId, token, '?confirm=true')).status).to.equal(204);
      expect(await count(inbox, 'INBOX')).to.equal(0);
      expect(await count(inbox, 'Archive')).to.equal(0);
    });
  }

  it('needs messages:destroy, which messages:write does not imply, and a role that allows it (403)', async () => {
    const { inbox, msgId } = await setUp('compatible', ['Trash']);
    for (const scopes of [
      ['messages:read', 'messages:write'],
      ['messages:read', 'messages:write', 'flags:write', 'content:read', 'send'],
    ]) {
      await expectError(await destroy(inbox.id, msgId, await p.token(scopes)), 403, /messages:destroy/);
    }
    const readerId = await p.member();
    const theirs = await setUp('compatible', ['Trash'], { role: 'reader', memberId: readerId });
    await expectError(await destroy(theirs.inbox.id, theirs.msgId, theirs.token), 403, /reader/);
    const readerSession = await p.session({ memberId: readerId });
    await expectError(
      await call(`${s.app}/inboxes/${theirs.inbox.id}/messages/${theirs.msgId}`, { method: 'DELETE', session: readerSession }),
      403,
    );
    expect(await count(theirs.inbox, 'Trash')).to.equal(1);
    expect(await count(inbox, 'Trash')).to.equal(1);
    // A member's web session may, as the role allows.
    const res = await call(`${s.app}/inboxes/${inbox.id}/messages/${msgId}`, { method: 'DELETE', session: await p.session() });
    expect(res.status).to.equal(204);
    expect(await count(inbox, 'Trash')).to.equal(0);
  });

  it('MCP: delete_message_forever is offered only to a token with messages:destroy, and deletes like the endpoint', async () => {
    const { inbox, token, msgId } = await setUp('compatible', ['Junk']);
    const connect = async (bearer: string) => {
      const client = new Client({ name: 'postern-test', version: '1.0.0' });
      await client.connect(
        new StreamableHTTPClientTransport(new URL(`${s.base}/mcp`), { requestInit: { headers: { Authorization: `Bearer ${bearer}` } } }),
      );
      return client;
    };
    const writer = await connect(await p.token(['messages:read', 'messages:write']));
    const destroyer = await connect(token);
    try {
      const names = async (c: Client) => (await c.listTools()).tools.map((t) => t.name);
      expect(await names(writer))
        .to.include.members(['create_label', 'rename_label', 'move_message'])
        .and.not.include('delete_message_forever');
      expect(await names(destroyer)).to.include('delete_message_forever');
      const args = { inboxId: inbox.id, messageId: msgId };
      const refused = (await writer.callTool({ name: 'delete_message_forever', arguments: args })) as CallToolResult;
      expect(refused.isError).to.equal(true);
      expect(await count(inbox, 'Junk')).to.equal(1);
      const done = (await destroyer.callTool({ name: 'delete_message_forever', arguments: args })) as CallToolResult;
      expect(done.isError ?? false).to.equal(false);
      expect(done.structuredContent).to.deep.equal({ deleted: msgId });
      expect(await count(inbox, 'Junk')).to.equal(0);
    } finally {
      await writer.close();
      await destroyer.close();
    }
  });
});
