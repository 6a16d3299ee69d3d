// Filing messages into labels and out of them (docs/organize.md): POST …/labels and POST …/move
// against the real Dovecot, in compatible and zero-access inboxes; who may; the events a change
// records, and that a mail app's MOVE records the same ones.
import { expect } from 'chai';
import { seal } from '../../lib/mail/sealing.ts';
import { SYSTEM_ACTOR } from '../../lib/events/log.ts';
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
} from '../helpers/harness.ts';
import { ImapFlow } from 'imapflow';
import { mailApp, openInboxStream, until } from '../helpers/mail-fixtures.ts';
import { startSecondDovecot } from '../helpers/second-dovecot.ts';
import { corpusFiles, describeWithCorpus } from '../helpers/corpus-files.ts';
import type { WireEvent } from '../helpers/events-helpers.ts';

interface Placement {
  labels: string[];
  flags: string[];
}

describeWithCorpus('organizing messages: labels, move, archive, trash, junk', function () {
  this.timeout(60_000);
  let s: TestServer;
  let p: TestProject;
  // Small corpus messages, different each time: real-world bytes to file around.
  const corpus = corpusFiles().filter((f) => f.raw.length < 20_000);
  let next = 0;
  const corpusMessage = () => corpus[next++ % corpus.length]!.raw;

  before(async () => {
    s = await startPostern({ POSTERN_EVENTS_SETTLE_MS: '0' });
    p = await newProject(s);
  });
  after(() => s.close());

  /** An inbox with one message APPENDed by a mail app, and what the API calls its labels. */
  async function setUp(mode: 'compatible' | 'zero-access' = 'compatible', options: { role?: string; memberId?: string } = {}) {
    const inbox = await p.inbox({ mode, ...options });
    const token = await p.token(
      ['messages:read', 'messages:write', 'flags:write', 'events:read'],
      options.memberId ? { memberId: options.memberId } : {},
    );
    const plain = corpusMessage();
    const bytes = mode === 'zero-access' ? await seal(plain, await s.postern.keys.current(inbox.id)) : plain;
    const app = await mailApp(inbox);
    try {
      const appended = await app.append('INBOX', bytes, ['\\Flagged']);
      if (!appended || !appended.uid) throw new Error('APPEND gave no UID');
    } finally {
      await app.logout();
    }
    const read = await json<{ labels: Array<{ id: string; name: string }> }>(await call(`${s.base}/inboxes/${inbox.id}/labels`, { token }));
    const label = (name: string) => read.labels.find((l) => l.name === name)!.id;
    const page = await json<{ messages: Array<{ id: string }> }>(
      await call(`${s.base}/inboxes/${inbox.id}/labels/${label('INBOX')}/messages`, { token }),
    );
    // The bytes as the mail server keeps them (it may end lines in CRLF where the file had LF).
    const [stored] = await inFolder(inbox, 'INBOX');
    return { inbox, token, bytes: stored!.source, label, msgId: page.messages[0]!.id };
  }

  const post = (inboxId: string, msgId: string, what: string, token: string, body: unknown) =>
    call(`${s.base}/inboxes/${inboxId}/messages/${msgId}/${what}`, {
      method: 'POST',
      token,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });

  async function ok(res: Response): Promise<Placement> {
    if (res.status !== 200) throw new Error(`${res.status}: ${await res.text()}`);
    return json<Placement>(res);
  }

  /** The message's bytes and flags in a folder, as a mail app sees them. */
  async function inFolder(inbox: TestInbox, path: string): Promise<Array<{ source: Buffer; flags: string[] }>> {
    const app: ImapFlow = await mailApp(inbox);
    try {
      const opened = await app.mailboxOpen(path, { readOnly: true });
      const out: Array<{ source: Buffer; flags: string[] }> = [];
      if (opened.exists === 0) return out;
      for await (const m of app.fetch('1:*', { source: true, flags: true })) out.push({ source: m.source!, flags: [...(m.flags ?? [])] });
      return out;
    } finally {
      await app.logout();
    }
  }

  for (const mode of ['compatible', 'zero-access'] as const) {
    describe(`a ${mode} inbox`, () => {
      it('adds a label (COPY), removes one (expunge), and both at once (MOVE), keeping the id, the flags and the bytes', async () => {
        const { inbox, token, bytes, label, msgId } = await setUp(mode);
        const before = await call(`${s.base}/inboxes/${inbox.id}/messages/${msgId}/raw`, { token });
        const raw = mode === 'zero-access' ? Buffer.from(await before.arrayBuffer()) : null;

        const copied = await ok(await post(inbox.id, msgId, 'labels', token, { add: [label('Archive')] }));
        expect(copied.labels).to.have.members([label('INBOX'), label('Archive')]);
        expect(copied.flags).to.deep.equal(['flagged']);
        expect((await inFolder(inbox, 'Archive'))[0]!.source.equals(bytes)).to.equal(true);
        expect(await inFolder(inbox, 'INBOX')).to.have.length(1);

        const removed = await ok(await post(inbox.id, msgId, 'labels', token, { remove: [label('INBOX')] }));
        expect(removed.labels).to.deep.equal([label('Archive')]);
        expect(await inFolder(inbox, 'INBOX')).to.have.length(0);

        const moved = await ok(await post(inbox.id, msgId, 'labels', token, { add: [label('Drafts')], remove: [label('Archive')] }));
        expect(moved).to.deep.equal({ labels: [label('Drafts')], flags: ['flagged'] });
        const [there] = await inFolder(inbox, 'Drafts');
        expect(there!.source.equals(bytes)).to.equal(true);
        expect(there!.flags).to.include('\\Flagged');
        expect(await inFolder(inbox, 'Archive')).to.have.length(0);

        // The same message under the same id, wherever it is.
        const detail = await json<{ message: { id: string; flags: string[] } }>(
          await call(`${s.base}/inboxes/${inbox.id}/messages/${msgId}`, { token }),
        );
        expect(detail.message).to.include({ id: msgId });
        if (raw) {
          const after = await call(`${s.base}/inboxes/${inbox.id}/messages/${msgId}/raw`, { token });
          expect(Buffer.from(await after.arrayBuffer()).equals(raw)).to.equal(true);
        }
        // Adding a label it is in, removing one it is not in: nothing changes.
        expect(await ok(await post(inbox.id, msgId, 'labels', token, { add: [label('Drafts')], remove: [label('INBOX')] }))).to.deep.equal(
          moved,
        );
      });

      it('moves to archive, trash and junk and back to INBOX, marking junk and not junk', async () => {
        const { inbox, token, bytes, label, msgId } = await setUp(mode);
        expect(await ok(await post(inbox.id, msgId, 'move', token, { to: 'archive' }))).to.deep.equal({
          labels: [label('Archive')],
          flags: ['flagged'],
        });
        expect(await ok(await post(inbox.id, msgId, 'move', token, { to: 'trash' }))).to.deep.equal({
          labels: [label('Trash')],
          flags: ['flagged'],
        });
        expect(await ok(await post(inbox.id, msgId, 'move', token, { to: 'junk' }))).to.deep.equal({
          labels: [label('Junk')],
          flags: ['flagged', 'junk'],
        });
        const [junk] = await inFolder(inbox, 'Junk');
        expect(junk!.flags).to.include('$Junk');
        expect(await ok(await post(inbox.id, msgId, 'move', token, { to: 'inbox' }))).to.deep.equal({
          labels: [label('INBOX')],
          flags: ['flagged', 'not_junk'],
        });
        const [back] = await inFolder(inbox, 'INBOX');
        expect(back!.flags).to.include('$NotJunk').and.not.include('$Junk');
        expect(back!.source.equals(bytes)).to.equal(true);
        // To a label by its id; to where it already is: nothing changes.
        expect((await ok(await post(inbox.id, msgId, 'move', token, { to: label('Sent') }))).labels).to.deep.equal([label('Sent')]);
        expect((await ok(await post(inbox.id, msgId, 'move', token, { to: label('Sent') }))).labels).to.deep.equal([label('Sent')]);
      });
    });
  }

  it('keeps a message in at least one label: 409, and nothing changed', async () => {
    const { inbox, token, label, msgId } = await setUp();
    await expectError(await post(inbox.id, msgId, 'labels', token, { remove: [label('INBOX')] }), 409, /at least one label/);
    await ok(await post(inbox.id, msgId, 'labels', token, { add: [label('Archive')] }));
    await expectError(
      await post(inbox.id, msgId, 'labels', token, { remove: [label('INBOX'), label('Archive')] }),
      409,
      /at least one label/,
    );
    expect(await inFolder(inbox, 'INBOX')).to.have.length(1);
    expect(await inFolder(inbox, 'Archive')).to.have.length(1);
  });

  it('answers 409 for archive when the mail server declares no \\Archive folder, and moves nothing', async () => {
    const dovecot = await startSecondDovecot('noarchive', (conf, replace) => replace(conf, /\n\s*mailbox Archive \{[^}]*\}/, ''));
    const own = await startPostern({ POSTERN_IMAP_PORT: String(dovecot.port) });
    try {
      const op = await newProject(own);
      const inbox = await op.inbox();
      const token = await op.token(['messages:read', 'messages:write']);
      const app = new ImapFlow({
        host: mailEnv().imap.host,
        port: dovecot.port,
        secure: false,
        logger: false,
        auth: { user: inbox.imapUser, pass: inbox.imapPassword },
      });
      app.on('error', () => undefined);
      await app.connect();
      try {
        await app.append('INBOX', corpusMessage(), []);
        const { labels } = await json<{ labels: Array<{ id: string; name: string; specialUse?: string }> }>(
          await call(`${own.base}/inboxes/${inbox.id}/labels`, { token }),
        );
        expect(labels.map((l) => l.specialUse).filter(Boolean)).to.have.members(['\\Sent', '\\Drafts', '\\Trash', '\\Junk']);
        const inboxLabel = labels.find((l) => l.name === 'INBOX')!.id;
        const page = await json<{ messages: Array<{ id: string }> }>(
          await call(`${own.base}/inboxes/${inbox.id}/labels/${inboxLabel}/messages`, { token }),
        );
        const msgId = page.messages[0]!.id;
        const move = (to: string) =>
          call(`${own.base}/inboxes/${inbox.id}/messages/${msgId}/move`, {
            method: 'POST',
            token,
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify({ to }),
          });
        await expectError(await move('archive'), 409, /no \\Archive folder/);
        expect(await app.status('INBOX', { messages: true })).to.include({ messages: 1 });
        expect((await ok(await move('trash'))).labels).to.deep.equal([labels.find((l) => l.specialUse === '\\Trash')!.id]);
      } finally {
        await app.logout();
      }
    } finally {
      await own.close();
      await dovecot.stop();
    }
  });

  it('adds and removes custom keywords on every label the message is in, and refuses flags and non-atoms (400)', async () => {
    const { inbox, token, label, msgId } = await setUp();
    await ok(await post(inbox.id, msgId, 'labels', token, { add: [label('Archive')] }));
    const added = await post(inbox.id, msgId, 'keywords', token, { add: ['$label1', 'Project_X'] });
    expect(await json(added)).to.deep.equal({ keywords: ['$label1', 'Project_X'] });
    for (const path of ['INBOX', 'Archive'])
      expect((await inFolder(inbox, path))[0]!.flags).to.include.members(['$label1', 'Project_X', '\\Flagged']);
    const detail = await json<{ message: { keywords?: string[]; flags: string[] } }>(
      await call(`${s.base}/inboxes/${inbox.id}/messages/${msgId}`, { token }),
    );
    expect(detail.message).to.deep.include({ keywords: ['$label1', 'Project_X'], flags: ['flagged'] });
    expect(await json(await post(inbox.id, msgId, 'keywords', token, { remove: ['project_x'] }))).to.deep.equal({ keywords: ['$label1'] });
    // Recorded as message.flags (its Flags unchanged), the caller's.
    const tokenId = /^svc_(tok_[0-9A-Z]{26})_/.exec(token)![1];
    const recorded = await until('the keyword changes in the log', async () => {
      const body = await json<{ events: WireEvent[] }>(await call(`${s.base}/events?inboxes=${inbox.id}&limit=100`, { token }));
      const flags = body.events.filter((e) => e.type === 'message.flags');
      return flags.length >= 4 ? flags : null; // two changes, in two labels each
    });
    expect(recorded.map((e) => [e.actor, (e.data as { flags: string[] }).flags])).to.deep.equal(Array(4).fill([tokenId, ['flagged']]));

    for (const bad of [
      { add: ['$Junk'] },
      { add: ['nonjunk'] },
      { add: ['\\Seen'] },
      { add: ['two words'] },
      { add: ['a(b'] },
      { add: [''] },
      { add: ['$x'], remove: ['$X'] },
      {},
      { add: '$x' },
    ]) {
      await expectError(await post(inbox.id, msgId, 'keywords', token, bad), 400);
    }
    await expectError(
      await post(inbox.id, msgId, 'keywords', await p.token(['messages:read', 'flags:write']), { add: ['$label2'] }),
      403,
      /messages:write/,
    );
    // The spec's flags endpoint still takes only its three flags.
    await expectError(await post(inbox.id, msgId, 'flags', token, { add: ['$label2'] }), 400);
    await expectError(await post(inbox.id, msgId, 'flags', token, { add: ['junk'] }), 400);
    expect((await inFolder(inbox, 'INBOX'))[0]!.flags).to.not.include('$label2');
  });

  it('refuses bad input with a clear 4xx', async () => {
    const { inbox, token, label, msgId } = await setUp();
    const unknownLabel = `lbl_${'0'.repeat(26)}`;
    await expectError(await post(inbox.id, msgId, 'labels', token, {}), 400);
    await expectError(await post(inbox.id, msgId, 'labels', token, { add: label('Archive') }), 400);
    await expectError(await post(inbox.id, msgId, 'labels', token, { add: ['Archive'] }), 400);
    await expectError(await post(inbox.id, msgId, 'labels', token, { add: [label('Archive')], extra: true }), 400);
    await expectError(
      await post(inbox.id, msgId, 'labels', token, { add: [label('Archive')], remove: [label('Archive')] }),
      400,
      /added and removed/,
    );
    await expectError(await post(inbox.id, msgId, 'labels', token, { add: [unknownLabel] }), 422, /does not exist/);
    await expectError(await post(inbox.id, msgId, 'labels', token, [label('Archive')]), 400);
    await expectError(await post(inbox.id, msgId, 'move', token, {}), 400);
    await expectError(await post(inbox.id, msgId, 'move', token, { to: 'spam' }), 400);
    await expectError(await post(inbox.id, msgId, 'move', token, { to: ['archive'] }), 400);
    await expectError(await post(inbox.id, msgId, 'move', token, { to: unknownLabel }), 422, /does not exist/);
    await expectError(await post(inbox.id, `msg_${'0'.repeat(26)}`, 'move', token, { to: 'archive' }), 404);
    await expectError(await post(inbox.id, 'msg_nope', 'labels', token, { add: [label('Archive')] }), 404);
    expect(await inFolder(inbox, 'Archive')).to.have.length(0);
  });

  it('needs messages:write, which reading and flag tokens lack, and a role that allows it (403)', async () => {
    const { inbox, label, msgId } = await setUp();
    for (const scopes of [['messages:read'], ['messages:read', 'flags:write', 'content:read', 'send']]) {
      const weak = await p.token(scopes);
      await expectError(await post(inbox.id, msgId, 'labels', weak, { add: [label('Archive')] }), 403, /messages:write/);
      await expectError(await post(inbox.id, msgId, 'move', weak, { to: 'archive' }), 403, /messages:write/);
    }
    // A reader's token with the scope: the role refuses it; so it does the reader's session.
    const readerId = await p.member();
    const {
      inbox: theirs,
      token: readerToken,
      label: theirLabel,
      msgId: theirMsg,
    } = await setUp('compatible', { role: 'reader', memberId: readerId });
    await expectError(await post(theirs.id, theirMsg, 'move', readerToken, { to: 'archive' }), 403);
    const readerSession = await p.session({ memberId: readerId });
    const bySession = await call(`${s.app}/inboxes/${theirs.id}/messages/${theirMsg}/labels`, {
      method: 'POST',
      session: readerSession,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ add: [theirLabel('Archive')] }),
    });
    await expectError(bySession, 403);
    expect(await inFolder(theirs, 'Archive')).to.have.length(0);
    // A member's web session may organize.
    const session = await p.session();
    const res = await call(`${s.app}/inboxes/${inbox.id}/messages/${msgId}/move`, {
      method: 'POST',
      session,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ to: 'archive' }),
    });
    expect((await ok(res)).labels).to.deep.equal([label('Archive')]);
  });

  it("records the API's move as the caller's message.added and message.removed, and a mail app's MOVE as the same events", async () => {
    const { inbox, token, label, msgId } = await setUp();
    const events = async (count: number) =>
      until(`${count} mail events`, async () => {
        const body = await json<{ events: WireEvent[] }>(await call(`${s.base}/events?inboxes=${inbox.id}&limit=100`, { token }));
        const mail = body.events.filter((e) => e.type === 'message.added' || e.type === 'message.removed');
        return mail.length >= count ? mail : null;
      });
    const tokenId = /^svc_(tok_[0-9A-Z]{26})_/.exec(token)![1];

    const stream = await openInboxStream(s.base, inbox, token);
    try {
      await ok(await post(inbox.id, msgId, 'move', token, { to: 'archive' }));
      // The inbox stream carries the same two changes.
      const frame = (type: string, labelId: string) => (e: { data: string }) => {
        const d = JSON.parse(e.data) as { type: string; msgId: string; labelId?: string };
        return d.type === type && d.msgId === msgId && d.labelId === labelId;
      };
      await stream.next(frame('message.added', label('Archive')));
      await stream.next(frame('message.removed', label('INBOX')));
    } finally {
      await stream.close();
    }
    // The first read filled the index: the APPEND before it changed nothing the index knew.
    const api = await events(2);
    const summary = (e: WireEvent) => [e.type, (e.data as { labelId: string }).labelId, e.subject, e.actor];
    expect(api.map(summary)).to.have.deep.members([
      ['message.added', label('Archive'), msgId, tokenId],
      ['message.removed', label('INBOX'), msgId, tokenId],
    ]);

    // A mail app moves it back: the sync records the same two events, as the service.
    const app = await mailApp(inbox);
    try {
      await app.mailboxOpen('Archive');
      expect(await app.messageMove('1:*', 'INBOX')).to.not.equal(false);
    } finally {
      await app.logout();
    }
    await call(`${s.base}/inboxes/${inbox.id}/labels`, { token }); // the read that syncs
    const byApp = (await events(4)).slice(2);
    expect(byApp.map(summary)).to.have.deep.members([
      ['message.added', label('INBOX'), msgId, SYSTEM_ACTOR],
      ['message.removed', label('Archive'), msgId, SYSTEM_ACTOR],
    ]);
  });
});
