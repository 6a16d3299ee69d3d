// The lean path of POST /v1/mcp (lib/mcp/lean.ts): which requests it takes, and that it answers
// them exactly as the SDK's server does. A batch of one request is never lean (the first suite
// shows it), and the SDK answers it with the single response, so the same request sent alone
// and as [request] compares the two paths through the real HTTP stack.
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { RELATED_TASK_META_KEY } from '@modelcontextprotocol/sdk/types.js';
import { expect } from 'chai';
import { parseToken } from '../../lib/auth/credentials.ts';
import { leanRequest } from '../../lib/mcp/lean.ts';
import { call, newProject, startPostern, type TestInbox, type TestProject, type TestServer } from '../helpers/harness.ts';
import { mailApp, until } from '../helpers/mail-fixtures.ts';

const HEADERS = { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-11-25' };

describe('MCP lean path: which requests it takes', () => {
  const callMsg = (params: unknown, extra: Record<string, unknown> = {}) => ({
    jsonrpc: '2.0',
    id: 7,
    method: 'tools/call',
    params,
    ...extra,
  });

  it('takes a single tools/call or tools/list request in the shape the SDK accepts', () => {
    expect(leanRequest(callMsg({ name: 'list_inboxes' }))).to.deep.equal({
      id: 7,
      method: 'tools/call',
      name: 'list_inboxes',
      args: undefined,
    });
    expect(leanRequest(callMsg({ name: 'list_labels', arguments: { inboxId: 'ibx_x' } }))).to.deep.equal({
      id: 7,
      method: 'tools/call',
      name: 'list_labels',
      args: { inboxId: 'ibx_x' },
    });
    expect(leanRequest({ jsonrpc: '2.0', id: 'a', method: 'tools/list' })).to.deep.equal({ id: 'a', method: 'tools/list' });
    expect(leanRequest({ jsonrpc: '2.0', id: 0, method: 'tools/list', params: { cursor: 'c' } })).to.deep.equal({
      id: 0,
      method: 'tools/list',
    });
    // A progress token asks for nothing Postern's tools do: still lean.
    expect(leanRequest(callMsg({ name: 'x', _meta: { progressToken: 'p' } }))).to.include({ name: 'x' });
    // Tool arguments are not judged here: the tool's schema does that, on both paths alike.
    expect(leanRequest(callMsg({ name: 'x', arguments: { limit: 'many' } }))).to.include({ name: 'x' });
  });

  it('leaves everything else to the SDK', () => {
    const sdk: unknown[] = [
      [callMsg({ name: 'list_inboxes' })], // a batch
      { jsonrpc: '2.0', method: 'tools/call', params: { name: 'list_inboxes' } }, // a notification
      {
        jsonrpc: '2.0',
        id: 1,
        method: 'initialize',
        params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 't', version: '1' } },
      },
      { jsonrpc: '2.0', id: 1, method: 'resources/list' },
      { jsonrpc: '2.0', id: 1, method: 'ping' },
      callMsg({ name: 'x' }, { extra: true }), // the SDK's message schema is strict
      { ...callMsg({ name: 'x' }), jsonrpc: '1.0' },
      { ...callMsg({ name: 'x' }), id: null },
      { ...callMsg({ name: 'x' }), id: 1.5 },
      callMsg(undefined),
      callMsg([]),
      callMsg({ arguments: {} }),
      callMsg({ name: 5 }),
      callMsg({ name: 'x', arguments: [] }),
      callMsg({ name: 'x', arguments: null }),
      callMsg({ name: 'x', task: { ttl: 1000 } }), // task handling is the SDK's
      callMsg({ name: 'x', _meta: { [RELATED_TASK_META_KEY]: { taskId: 't' } } }),
      callMsg({ name: 'x', _meta: { progressToken: 1.5 } }),
      callMsg({ name: 'x', _meta: 'm' }),
      { jsonrpc: '2.0', id: 1, method: 'tools/list', params: { cursor: 5 } },
      'tools/call',
      null,
    ];
    for (const body of sdk) expect(leanRequest(body), JSON.stringify(body)).to.equal(null);
  });
});

describe('MCP lean path: the same answers as the SDK', function () {
  this.timeout(60_000);
  let s: TestServer;
  let p: TestProject;
  let inbox: TestInbox;
  let all: string;
  let readOnly: string;
  let labelId: string;
  let logFile: string;

  before(async () => {
    logFile = join(mkdtempSync(join(tmpdir(), 'postern-mcp-log-')), 'postern.log');
    s = await startPostern({ POSTERN_LOG_LEVEL: 'info' }, { logFile });
    p = await newProject(s);
    inbox = await p.inbox();
    all = await p.token(['messages:read', 'content:read', 'flags:write', 'send', 'events:read', 'events:write']);
    readOnly = await p.token(['messages:read']);
    const app = await mailApp(inbox);
    try {
      await app.append(
        'INBOX',
        `From: a@example.org\r\nTo: ${inbox.address}\r\nSubject: lean ${randomBytes(3).toString('hex')}\r\n\r\nhello\r\n`,
      );
    } finally {
      await app.logout();
    }
    const { labels } = (await (await call(`${s.base}/inboxes/${inbox.id}/labels`, { token: all })).json()) as {
      labels: Array<{ id: string; name: string }>;
    };
    labelId = labels.find((l) => l.name === 'INBOX')!.id;
    await until('the message listed', async () => {
      const page = (await (await call(`${s.base}/inboxes/${inbox.id}/labels/${labelId}/messages`, { token: all })).json()) as {
        messages: unknown[];
      };
      return page.messages.length > 0 || null;
    });
  });
  after(async () => {
    await s?.close();
  });

  async function post(
    token: string | undefined,
    body: unknown,
    headers: Record<string, string> = HEADERS,
  ): Promise<{ status: number; type: string | null; body: unknown }> {
    const res = await call(`${s.base}/mcp`, { method: 'POST', headers, body: JSON.stringify(body), ...(token ? { token } : {}) });
    const text = await res.text();
    return { status: res.status, type: res.headers.get('content-type'), body: text ? (JSON.parse(text) as unknown) : null };
  }

  /** The request's answer on the lean path and on the SDK's, which must be the same. */
  async function both(
    token: string,
    message: Record<string, unknown>,
  ): Promise<{ result?: Record<string, unknown>; error?: { code: number; message: string } }> {
    expect(leanRequest(message), 'the request is one the lean path takes').to.not.equal(null);
    const lean = await post(token, message);
    const sdk = await post(token, [message]);
    expect(lean.status).to.equal(200);
    expect(sdk.status).to.equal(200);
    expect(lean.type).to.match(/^application\/json/);
    expect(sdk.type).to.match(/^application\/json/);
    expect(lean.body, JSON.stringify(message)).to.deep.equal(sdk.body);
    return lean.body as { result?: Record<string, unknown>; error?: { code: number; message: string } };
  }

  const tools = (id: number | string, name: string, args?: Record<string, unknown>, more: Record<string, unknown> = {}) => ({
    jsonrpc: '2.0',
    id,
    method: 'tools/call',
    params: { name, ...(args ? { arguments: args } : {}), ...more },
  });

  it('tools/list, per token', async () => {
    const listed = await both(all, { jsonrpc: '2.0', id: 1, method: 'tools/list' });
    expect((listed.result!.tools as Array<{ name: string }>).map((t) => t.name)).to.include('send_message');
    const narrow = await both(readOnly, { jsonrpc: '2.0', id: 'list', method: 'tools/list', params: {} });
    expect((narrow.result!.tools as Array<{ name: string }>).map((t) => t.name)).to.not.include('send_message');
  });

  it('tools/call: answers, tool errors, bad arguments and an unknown tool', async () => {
    const page = await both(all, tools(2, 'list_messages', { inboxId: inbox.id, labelId, limit: 10 }));
    expect((page.result!.structuredContent as { messages: unknown[] }).messages).to.have.length(1);
    expect((page.result!.content as Array<{ text: string }>)[0]!.text).to.include('<untrusted-mail-data>');
    await both(all, tools('s', 'list_inboxes'));
    await both(all, tools(3, 'list_labels', { inboxId: inbox.id }, { _meta: { progressToken: 9 } }));
    // Refused by scope: a tool error naming the scope.
    const refused = await both(readOnly, tools(4, 'read_message', { inboxId: inbox.id, messageId: 'msg_x' }));
    expect(refused.result).to.include({ isError: true });
    expect(JSON.stringify(refused.result)).to.match(/content:read/);
    // Arguments against the tool's schema: a tool error too.
    const invalid = await both(all, tools(5, 'list_messages', { inboxId: inbox.id, limit: 'many' }));
    expect(invalid.result).to.include({ isError: true });
    const notFound = await both(all, tools(6, 'list_labels', { inboxId: 'ibx_0000000000000000000000000' }));
    expect(notFound.result).to.include({ isError: true });
    // An unknown tool is a protocol error.
    const unknown = await both(all, tools(7, 'no_such_tool', {}));
    expect(unknown.error).to.deep.equal({ code: -32602, message: 'MCP error -32602: no tool named no_such_tool' });
  });

  it('a page asked for again is the same answer under its own id, and a new one once a flag changes (its JSON is made once per page)', async () => {
    type Page = {
      id: unknown;
      result: { structuredContent: { messages: Array<{ id: string; flags: string[] }> }; content: Array<{ text: string }> };
    };
    const ask = async (id: number | string) =>
      (await post(all, tools(id, 'list_messages', { inboxId: inbox.id, labelId, limit: 10 }))).body as Page;
    const first = await ask('first');
    const again = await ask(8);
    expect(again).to.deep.equal({ ...first, id: 8 });
    const listed = async () =>
      (await (
        await call(`${s.base}/inboxes/${inbox.id}/labels/${labelId}/messages?limit=10`, { token: all })
      ).json()) as Page['result']['structuredContent'];
    const before = await listed();
    expect(before.messages[0]!.flags).to.not.include('flagged');
    const m = first.result.structuredContent.messages[0]!;
    const changed = await call(`${s.base}/inboxes/${inbox.id}/messages/${m.id}/flags`, {
      method: 'POST',
      token: all,
      headers: { 'content-type': 'application/json' },
      body: '{"add":["flagged"]}',
    });
    expect(changed.status).to.equal(200);
    try {
      const now = await ask(9);
      expect(now.id).to.equal(9);
      expect(now.result.structuredContent.messages[0]!.flags).to.include('flagged');
      expect(now.result.content[0]!.text).to.match(/\[[^\]]*flagged[^\]]*\]/);
      expect((await listed()).messages[0]!.flags).to.include('flagged');
    } finally {
      await call(`${s.base}/inboxes/${inbox.id}/messages/${m.id}/flags`, {
        method: 'POST',
        token: all,
        headers: { 'content-type': 'application/json' },
        body: '{"remove":["flagged"]}',
      });
    }
  });

  it('authenticates first: no token 401, a revoked one 401', async () => {
    const message = tools(1, 'list_inboxes');
    const none = await post(undefined, message);
    expect(none.status).to.equal(401);
    expect((none.body as { error: string }).error).to.match(/Authorization/);
    const token = await p.token(['messages:read']);
    expect((await post(token, message)).status).to.equal(200);
    await s.postern.admin.revokeToken(parseToken(token)!.id);
    expect((await post(token, message)).status).to.equal(401);
  });

  it('headers the SDK refuses still reach it: 406, 415 and 400 in its words', async () => {
    const message = tools(1, 'list_inboxes');
    const noSse = await post(all, message, { ...HEADERS, accept: 'application/json' });
    expect(noSse.status).to.equal(406);
    expect(noSse.body).to.deep.include({ jsonrpc: '2.0', id: null });
    const otherJson = await post(all, message, { ...HEADERS, 'content-type': 'application/merge-patch+json' });
    expect(otherJson.status).to.equal(415);
    const version = await post(all, message, { ...HEADERS, 'mcp-protocol-version': '1999-01-01' });
    expect(version.status).to.equal(400);
    expect(JSON.stringify(version.body)).to.match(/Unsupported protocol version/);
    // Without a version header the SDK assumes its default, and so does the lean path.
    const { 'mcp-protocol-version': _v, ...noVersion } = HEADERS;
    const plain = await post(all, message, noVersion);
    expect(plain.status).to.equal(200);
    expect((plain.body as { result: { structuredContent: { inboxes: unknown[] } } }).result.structuredContent.inboxes).to.have.length(1);
    // The client's mistakes are its own: the request lines show them, the server warns of none.
    const lines = () =>
      readFileSync(logFile, 'utf8')
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l) as { msg: string; status?: number; path?: string });
    await until('the three refusals logged', async () =>
      [406, 415, 400].every((status) => lines().some((l) => l.msg === 'request' && l.path === '/v1/mcp' && l.status === status)),
    );
    expect(lines().filter((l) => l.msg === 'MCP server error')).to.deep.equal([]);
  });

  it('what the lean path leaves to the SDK is answered by it: a malformed request, a method it does not take', async () => {
    const bad = await post(all, { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'list_inboxes', arguments: [] } });
    expect(bad.status).to.equal(200);
    expect((bad.body as { error: { code: number } }).error.code).to.be.a('number');
    const ping = await post(all, { jsonrpc: '2.0', id: 1, method: 'ping' });
    expect(ping.body).to.deep.equal({ result: {}, jsonrpc: '2.0', id: 1 });
  });
});
