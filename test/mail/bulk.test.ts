// Bulk organizing (docs/organize.md, "Bulk"): POST …/messages/bulk and the bulk MCP tools against
// the real Dovecot, in compatible and zero-access inboxes: a mix of found and missing ids, a
// retried call applying nothing twice, over 1,000 ids refused, scopes and roles refused; the
// message.labels and message.keywords events of the API's changes and of a mail app's; and a COPY
// never made twice when its connection dies (the pool's retry).
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { expect } from 'chai';
import { ImapFlow } from 'imapflow';
import { idFromGuid } from '../../lib/ids.ts';
import { SYSTEM_ACTOR } from '../../lib/events/log.ts';
import { seal } from '../../lib/mail/sealing.ts';
import { corpusFiles, describeWithCorpus } from '../helpers/corpus-files.ts';
import type { WireEvent } from '../helpers/events-helpers.ts';
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
import { mailApp, openInboxStream, until } from '../helpers/mail-fixtures.ts';

interface BulkAnswer {
  results: Array<{ id: string; status: string; error?: string }>;
  changed: number;
  unchanged: number;
  notFound: number;
  refused: number;
  replayed?: boolean;
}

/** A well-formed message id that names no message. */
const missing = (n: number) => idFromGuid('msg', `e${n.toString(16).padStart(31, '0')}`);

describeWithCorpus('bulk organizing: one change to many messages', function () {
  this.timeout(90_000);
  let s: TestServer;
  let p: TestProject;
  const corpus = corpusFiles().filter((f) => f.raw.length < 20_000);
  let next = 0;

  before(async () => {
    s = await startPostern({ POSTERN_EVENTS_SETTLE_MS: '0' });
    p = await newProject(s);
  });
  after(() => s.close());

  /** An inbox with `count` corpus messages APPENDed to INBOX by a mail app, and their ids. */
  async function setUp(
    count: number,
    mode: 'compatible' | 'zero-access' = 'compatible',
    options: { role?: string; memberId?: string } = {},
  ) {
    const inbox = await p.inbox({ mode, ...options });
    const token = await p.token(
      ['messages:read', 'messages:write', 'flags:write', 'events:read'],
      options.memberId ? { memberId: options.memberId } : {},
    );
    const app = await mailApp(inbox);
    try {
      for (let i = 0; i < count; i++) {
        const plain = corpus[next++ % corpus.length]!.raw;
        const bytes = mode === 'zero-access' ? await seal(plain, await s.postern.keys.current(inbox.id)) : plain;
        await app.append('INBOX', bytes, ['\\Seen']);
      }
    } finally {
      await app.logout();
    }
    const read = await json<{ labels: Array<{ id: string; name: string }> }>(await call(`${s.base}/inboxes/${inbox.id}/labels`, { token }));
    const label = (name: string) => read.labels.find((l) => l.name === name)!.id;
    const page = await json<{ messages: Array<{ id: string }> }>(
      await call(`${s.base}/inboxes/${inbox.id}/labels/${label('INBOX')}/messages?limit=100`, { token }),
    );
    return { inbox, token, label, ids: page.messages.map((m) => m.id) };
  }

  const bulk = (inboxId: string, token: string, body: unknown, key?: string) =>
    call(`${s.base}/inboxes/${inboxId}/messages/bulk`, {
      method: 'POST',
      token,
      headers: { 'content-type': 'application/json', ...(key ? { 'idempotency-key': key } : {}) },
      body: JSON.stringify(body),
    });

  async function ok(res: Response): Promise<BulkAnswer> {
    if (res.status !== 200) throw new Error(`${res.status}: ${await res.text()}`);
    return json<BulkAnswer>(res);
  }

  const statusOf = (a: BulkAnswer) => Object.fromEntries(a.results.map((r) => [r.id, r.status]));

  /** How many messages a folder holds, and their keywords and flags, as a mail app sees them. */
  async function folder(inbox: TestInbox, path: string): Promise<Array<{ flags: string[] }>> {
    const app: ImapFlow = await mailApp(inbox);
    try {
      const opened = await app.mailboxOpen(path, { readOnly: true });
      const out: Array<{ flags: string[] }> = [];
      if (opened.exists === 0) return out;
      for await (const m of app.fetch('1:*', { flags: true })) out.push({ flags: [...(m.flags ?? [])] });
      return out;
    } finally {
      await app.logout();
    }
  }

  const events = async (inboxId: string, token: string, types: string[], count: number) =>
    until(`${count} ${types.join('/')} events`, async () => {
      const body = await json<{ events: WireEvent[] }>(await call(`${s.base}/events?inboxes=${inboxId}&limit=500`, { token }));
      const found = body.events.filter((e) => types.includes(e.type));
      return found.length >= count ? found : null;
    });

  for (const mode of ['compatible', 'zero-access'] as const) {
    describe(`a ${mode} inbox`, () => {
      it('moves, labels, flags and keywords many messages at once, answering per id (changed, unchanged, not found)', async () => {
        const { inbox, token, label, ids } = await setUp(4, mode);
        expect(ids).to.have.length(4);
        const [a, b, c, d] = ids as [string, string, string, string];

        const moved = await ok(await bulk(inbox.id, token, { ids: [a, b, c, missing(1), missing(2)], move: { to: 'archive' } }));
        expect(statusOf(moved)).to.deep.equal({
          [a]: 'changed',
          [b]: 'changed',
          [c]: 'changed',
          [missing(1)]: 'not_found',
          [missing(2)]: 'not_found',
        });
        expect(moved).to.include({ changed: 3, unchanged: 0, notFound: 2, refused: 0 });
        expect(await folder(inbox, 'Archive')).to.have.length(3);
        expect(await folder(inbox, 'INBOX')).to.have.length(1);

        // Already there: unchanged; the fourth joins them.
        const again = await ok(await bulk(inbox.id, token, { ids: [a, d], move: { to: 'archive' } }));
        expect(statusOf(again)).to.deep.equal({ [a]: 'unchanged', [d]: 'changed' });
        expect(await folder(inbox, 'INBOX')).to.have.length(0);

        // Labels: a copy into Drafts for two, then out of Archive for one (still in Drafts) and
        // for another that would be in no label (refused).
        const copied = await ok(await bulk(inbox.id, token, { ids: [a, b], labels: { add: [label('Drafts')] } }));
        expect(copied.changed).to.equal(2);
        expect(await folder(inbox, 'Drafts')).to.have.length(2);
        const out = await ok(await bulk(inbox.id, token, { ids: [a, c], labels: { remove: [label('Archive')] } }));
        expect(out.results).to.deep.equal([
          { id: a, status: 'changed' },
          { id: c, status: 'refused', error: 'a message must stay in at least one label' },
        ]);
        expect(await folder(inbox, 'Archive')).to.have.length(3);

        // Flags and keywords, one STORE per label.
        const flagged = await ok(await bulk(inbox.id, token, { ids: [a, b, c, d], flags: { add: ['flagged'], remove: ['seen'] } }));
        expect(flagged.changed).to.equal(4);
        const tagged = await ok(await bulk(inbox.id, token, { ids: [a, b, missing(3)], keywords: { add: ['$label1'] } }));
        expect(statusOf(tagged)).to.deep.equal({ [a]: 'changed', [b]: 'changed', [missing(3)]: 'not_found' });
        const drafts = await folder(inbox, 'Drafts');
        for (const m of drafts) expect(m.flags).to.include.members(['\\Flagged', '$label1']).and.not.include('\\Seen');
        const detail = await json<{ message: { flags: string[]; keywords?: string[] } }>(
          await call(`${s.base}/inboxes/${inbox.id}/messages/${b}`, { token }),
        );
        expect(detail.message).to.deep.include({ flags: ['flagged'], keywords: ['$label1'] });

        // Junk, then back to INBOX: marked junk, then not junk.
        const junked = await ok(await bulk(inbox.id, token, { ids: [c, d], move: { to: 'junk' } }));
        expect(junked.changed).to.equal(2);
        for (const m of await folder(inbox, 'Junk')) expect(m.flags).to.include('$Junk');
        await ok(await bulk(inbox.id, token, { ids: [c, d], move: { to: 'inbox' } }));
        const back = await folder(inbox, 'INBOX');
        expect(back).to.have.length(2);
        for (const m of back) expect(m.flags).to.include('$NotJunk').and.not.include('$Junk');
      });
    });
  }

  it('a retried call with the same Idempotency-Key applies nothing twice and answers as the first did', async () => {
    const { inbox, token, ids } = await setUp(3);
    const first = await ok(await bulk(inbox.id, token, { ids: [...ids, missing(4)], move: { to: 'trash' } }, 'retry-me-1'));
    expect(first).to.include({ changed: 3, notFound: 1 });
    expect(first.replayed).to.equal(undefined);
    // A mail app moves them back to INBOX: a second application would move them to Trash again.
    const app = await mailApp(inbox);
    try {
      await app.mailboxOpen('Trash');
      expect(await app.messageMove('1:*', 'INBOX')).to.not.equal(false);
    } finally {
      await app.logout();
    }
    await call(`${s.base}/inboxes/${inbox.id}/labels`, { token }); // the read that syncs
    const retried = await ok(await bulk(inbox.id, token, { ids: [...ids, missing(4)], move: { to: 'trash' } }, 'retry-me-1'));
    expect(retried.replayed).to.equal(true);
    expect(statusOf(retried)).to.deep.equal(statusOf(first));
    expect(await folder(inbox, 'Trash')).to.have.length(0);
    expect(await folder(inbox, 'INBOX')).to.have.length(3);
    // Two at once with a new key: one applies, the other answers with its answer.
    const both = await Promise.all([1, 2].map(() => bulk(inbox.id, token, { ids, keywords: { add: ['$twice'] } }, 'retry-me-2').then(ok)));
    expect(both.map((b) => b.changed)).to.deep.equal([3, 3]);
    expect(both.filter((b) => b.replayed === true)).to.have.length(1);
    // Without a key, each call is its own.
    const plain = await ok(await bulk(inbox.id, token, { ids, keywords: { add: ['$twice'] } }));
    expect(plain).to.include({ changed: 0, unchanged: 3 });
    // The log has one message.bulk per call applied (the replays record nothing).
    const recorded = await events(inbox.id, token, ['message.bulk'], 3);
    expect(recorded).to.have.length(3);
    expect(recorded.map((e) => e.subject)).to.deep.equal(['retry-me-1', 'retry-me-2', undefined]);
  });

  it('deletes forever in bulk: from Trash and Junk at once, elsewhere only confirmed (per id), and only with messages:destroy', async () => {
    const { inbox, token, ids } = await setUp(5);
    const [a, b, c, d, e] = ids as [string, string, string, string, string];
    await ok(await bulk(inbox.id, token, { ids: [a, b], move: { to: 'trash' } }));
    await ok(await bulk(inbox.id, token, { ids: [c], move: { to: 'junk' } }));
    // Without messages:destroy: 403, nothing deleted.
    await expectError(await bulk(inbox.id, token, { ids: [a], destroy: {} }), 403);
    const destroyer = await p.token(['messages:read', 'messages:write', 'messages:destroy', 'events:read']);
    const first = await ok(await bulk(inbox.id, destroyer, { ids: [a, b, c, d, missing(7)], destroy: {} }));
    expect(statusOf(first)).to.deep.equal({ [a]: 'changed', [b]: 'changed', [c]: 'changed', [d]: 'refused', [missing(7)]: 'not_found' });
    expect(first.results.find((r) => r.id === d)!.error).to.match(/INBOX.*trash or junk only/);
    expect(await folder(inbox, 'Trash')).to.have.length(0);
    expect(await folder(inbox, 'Junk')).to.have.length(0);
    expect(await folder(inbox, 'INBOX')).to.have.length(2);
    // Confirmed: from INBOX too.
    const confirmed = await ok(await bulk(inbox.id, destroyer, { ids: [d, e], destroy: { confirm: true } }));
    expect(confirmed).to.include({ changed: 2, refused: 0 });
    expect(await folder(inbox, 'INBOX')).to.have.length(0);
    for (const id of ids) await expectError(await call(`${s.base}/inboxes/${inbox.id}/messages/${id}`, { token: destroyer }), 404);
    // A bad confirm is a 400 for the whole call.
    await expectError(await bulk(inbox.id, destroyer, { ids: [a], destroy: { confirm: 'yes' } }), 400);
    const recorded = (await events(inbox.id, destroyer, ['message.bulk'], 4)).filter((ev) => ev.data?.change === 'destroy');
    expect(recorded.map((ev) => ev.data?.confirm)).to.deep.equal([false, true]);
  });

  it('refuses over 1,000 ids, a malformed body, and a bad Idempotency-Key with a clear 400, doing nothing', async () => {
    const { inbox, token, ids } = await setUp(1);
    const many = [...ids, ...Array.from({ length: 1000 }, (_, i) => missing(i + 10))];
    await expectError(await bulk(inbox.id, token, { ids: many, move: { to: 'archive' } }), 400, /at most 1000 message ids/);
    expect(await folder(inbox, 'INBOX')).to.have.length(1);
    // Exactly 1,000 is allowed.
    const thousand = await ok(await bulk(inbox.id, token, { ids: many.slice(0, 1000), flags: { add: ['flagged'] } }));
    expect(thousand).to.include({ changed: 1, notFound: 999 });
    await expectError(await bulk(inbox.id, token, { ids: [], move: { to: 'archive' } }), 400);
    await expectError(await bulk(inbox.id, token, { ids, move: { to: 'archive' }, flags: { add: ['seen'] } }), 400);
    await expectError(await bulk(inbox.id, token, { ids }), 400);
    await expectError(await bulk(inbox.id, token, { ids: ['nope'], move: { to: 'archive' } }), 400);
    await expectError(await bulk(inbox.id, token, { ids, flags: { add: ['junk'] } }), 400);
    await expectError(await bulk(inbox.id, token, { ids, keywords: { add: ['$Junk'] } }), 400, /flag/);
    await expectError(await bulk(inbox.id, token, { ids, keywords: { add: ['$a'], remove: ['$A'] } }), 400);
    await expectError(await bulk(inbox.id, token, { ids, labels: { add: [idFromGuid('lbl', 'a'.repeat(32))] } }), 422);
    await expectError(await bulk(inbox.id, token, { ids, move: { to: 'archive' } }, 'caf\u00e9'), 400, /Idempotency-Key/);
    expect(await folder(inbox, 'INBOX')).to.have.length(1);
  });

  it('needs messages:write and a role that allows it (403), over HTTP and MCP', async () => {
    const { inbox, ids } = await setUp(1);
    for (const scopes of [['messages:read'], ['messages:read', 'flags:write', 'content:read', 'send']]) {
      const weak = await p.token(scopes);
      await expectError(await bulk(inbox.id, weak, { ids, move: { to: 'archive' } }), 403, /messages:write/);
    }
    const readerId = await p.member();
    const { inbox: theirs, token: readerToken, ids: theirIds } = await setUp(1, 'compatible', { role: 'reader', memberId: readerId });
    await expectError(await bulk(theirs.id, readerToken, { ids: theirIds, move: { to: 'archive' } }), 403);
    const session = await p.session({ memberId: readerId });
    const bySession = await call(`${s.app}/inboxes/${theirs.id}/messages/bulk`, {
      method: 'POST',
      session,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ ids: theirIds, move: { to: 'archive' } }),
    });
    await expectError(bySession, 403);
    const mcp = await connectMcp(readerToken);
    try {
      const r = (await mcp.callTool({
        name: 'archive_messages',
        arguments: { inboxId: theirs.id, messageIds: theirIds },
      })) as CallToolResult;
      expect(r.isError).to.equal(true);
      const weak = await connectMcp(await p.token(['messages:read']));
      try {
        expect((await weak.listTools()).tools.map((t) => t.name)).to.not.include('archive_messages');
      } finally {
        await weak.close();
      }
    } finally {
      await mcp.close();
    }
    expect(await folder(theirs, 'Archive')).to.have.length(0);
  });

  async function connectMcp(token: string): Promise<Client> {
    const client = new Client({ name: 'postern-test', version: '1.0.0' });
    await client.connect(
      new StreamableHTTPClientTransport(new URL(`${s.base}/mcp`), { requestInit: { headers: { Authorization: `Bearer ${token}` } } }),
    );
    return client;
  }

  it('the MCP bulk tools move, label and tag as the endpoint does, with the answer fenced', async () => {
    const { inbox, token, label, ids } = await setUp(2);
    const mcp = await connectMcp(token);
    try {
      const call = async (name: string, args: Record<string, unknown>) => {
        const r = (await mcp.callTool({
          name,
          arguments: { inboxId: inbox.id, messageIds: [...ids, missing(5)], ...args },
        })) as CallToolResult;
        const text = (r.content[0] as { text: string }).text;
        expect(r.isError, text).to.not.equal(true);
        return { structured: r.structuredContent as unknown as BulkAnswer, text };
      };
      const archived = await call('archive_messages', {});
      expect(archived.structured).to.include({ changed: 2, notFound: 1 });
      expect(archived.text).to.match(/changed 2, unchanged 0, not found 1, refused 0/);
      expect(archived.text)
        .to.include('<untrusted-mail-data>')
        .and.include(`${missing(5)}: not_found`);
      expect(await folder(inbox, 'Archive')).to.have.length(2);
      expect((await call('label_messages', { add: [label('Drafts')] })).structured.changed).to.equal(2);
      expect((await call('change_keywords', { add: ['$agent'] })).structured.changed).to.equal(2);
      expect((await call('junk_messages', {})).structured.changed).to.equal(2);
      expect((await call('move_messages', { to: 'inbox' })).structured.changed).to.equal(2);
      const trashed = await call('trash_messages', { idempotencyKey: 'mcp-1' });
      expect(trashed.structured.changed).to.equal(2);
      expect((await call('trash_messages', { idempotencyKey: 'mcp-1' })).structured.replayed).to.equal(true);
      expect(await folder(inbox, 'Trash')).to.have.length(2);
      expect(await folder(inbox, 'INBOX')).to.have.length(0);
    } finally {
      await mcp.close();
    }
  });

  it('never makes a COPY twice when its connection dies after it (the pool does not retry a copy)', async () => {
    const { inbox, token, label, ids } = await setUp(1);
    const [msgId] = ids as [string];
    // The first COPY completes, then its connection dies: a retry on a fresh connection would
    // copy into Archive again.
    const copy = ImapFlow.prototype.messageCopy;
    let cut = 0;
    ImapFlow.prototype.messageCopy = async function (this: ImapFlow, ...args: Parameters<ImapFlow['messageCopy']>) {
      const done = await copy.apply(this, args);
      if (cut++ === 0) this.close();
      return done;
    };
    try {
      const single = await call(`${s.base}/inboxes/${inbox.id}/messages/${msgId}/labels`, {
        method: 'POST',
        token,
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ add: [label('Archive'), label('Drafts')] }),
      });
      await expectError(single, 503);
      expect(cut).to.equal(1);
      expect(await folder(inbox, 'Archive')).to.have.length(1);
      // A bulk copy finds the next label unopenable on the dead connection: that message is
      // planned again after a sync, from where it is now (in Junk already), on a fresh one.
      cut = 0;
      expect((await ok(await bulk(inbox.id, token, { ids, labels: { add: [label('Junk'), label('Trash')] } }))).changed).to.equal(1);
      expect(cut).to.equal(2);
    } finally {
      ImapFlow.prototype.messageCopy = copy;
    }
    expect(await folder(inbox, 'Junk')).to.have.length(1);
    expect(await folder(inbox, 'Trash')).to.have.length(1);
    // Asked again, the change is planned from where the message is now: nothing is copied twice.
    expect(
      (await ok(await bulk(inbox.id, token, { ids, labels: { add: [label('Archive'), label('Drafts'), label('Junk'), label('Trash')] } })))
        .changed,
    ).to.equal(1);
    for (const path of ['INBOX', 'Archive', 'Drafts', 'Junk', 'Trash']) expect(await folder(inbox, path), path).to.have.length(1);
  });

  it("records message.labels and message.keywords for the API's bulk change as the caller, and a mail app's as the same events", async () => {
    const { inbox, token, label, ids } = await setUp(2);
    const tokenId = /^svc_(tok_[0-9A-Z]{26})_/.exec(token)![1];
    const stream = await openInboxStream(s.base, inbox, token);
    try {
      await ok(await bulk(inbox.id, token, { ids, move: { to: 'archive' } }));
      await ok(await bulk(inbox.id, token, { ids, keywords: { add: ['$label1'] } }));
      // The inbox stream carries them too.
      for (const id of ids) {
        await stream.next((e) => {
          const d = JSON.parse(e.data) as { type: string; msgId: string; labelIds?: string[] };
          return e.event === 'message.labels' && d.msgId === id && d.labelIds?.join() === label('Archive');
        });
        await stream.next((e) => {
          const d = JSON.parse(e.data) as { type: string; msgId: string; keywords?: string[] };
          return e.event === 'message.keywords' && d.msgId === id && d.keywords?.join() === '$label1';
        });
      }
    } finally {
      await stream.close();
    }
    const summary = (e: WireEvent) => [e.type, e.subject, e.actor, e.data];
    // A watcher's pass may see the move half done first (then an extra message.labels with both
    // labels): what must be there is each message's state after, as the caller.
    const api = await events(inbox.id, token, ['message.labels', 'message.keywords'], 4);
    expect(api.map(summary)).to.deep.include.members([
      ...ids.map((id) => ['message.labels', id, tokenId, { msgId: id, labelIds: [label('Archive')] }]),
      ...ids.map((id) => ['message.keywords', id, tokenId, { msgId: id, labelId: label('Archive'), keywords: ['$label1'] }]),
    ]);
    const seen = api.length;

    // A mail app sets a keyword on both and moves one back: the same event types, as the service.
    const app = await mailApp(inbox);
    try {
      await app.mailboxOpen('Archive');
      expect(await app.messageFlagsAdd('1:*', ['$todo'])).to.equal(true);
      expect(await app.messageMove('1', 'INBOX')).to.not.equal(false);
    } finally {
      await app.logout();
    }
    await call(`${s.base}/inboxes/${inbox.id}/labels`, { token }); // the read that syncs
    const byApp = await until("the mail app's message.labels", async () => {
      const later = (await events(inbox.id, token, ['message.labels', 'message.keywords'], seen)).slice(seen).map(summary);
      return later.some((e) => e[0] === 'message.labels' && (e[3] as { labelIds: string[] }).labelIds.join() === label('INBOX'))
        ? later
        : null;
    });
    for (const [type, id, who, data] of byApp) {
      expect(who).to.equal(SYSTEM_ACTOR);
      if (type === 'message.labels') expect((data as { labelIds: string[] }).labelIds, String(id)).to.include(label('INBOX'));
      else expect((data as { keywords: string[] }).keywords).to.have.members(['$label1', '$todo']);
    }
    expect(byApp.filter((e) => e[0] === 'message.keywords').length).to.be.at.least(1);
  });
});
