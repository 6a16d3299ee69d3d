// The staff lifecycle commands (docs/operations.md, "Staff commands"): lists and shows as JSON without secrets, and
// the destructive ones (project delete, member remove, inbox remove, token and session revoke)
// acting only with --yes, on the store a running server serves from (either engine).
import { expect } from 'chai';
import { call, envVars, mailEnv, newProject, startPostern, type TestServer } from '../helpers/harness.ts';
import { append, mailApp, until } from '../helpers/mail-fixtures.ts';
import { runPostern } from '../helpers/processes.ts';

type Row = Record<string, unknown>;

describe('staff lifecycle commands', function () {
  // Each command is a fresh Node process: seconds apiece on a busy machine.
  this.timeout(180_000);
  let s: TestServer;

  before(async () => {
    s = await startPostern({ POSTERN_WATCH: 'notify' });
  });
  after(() => s?.close());

  const admin = (...args: string[]) => runPostern(['admin', ...args], envVars(mailEnv(), s.storeEnv));

  /** The command's one line of JSON, after it succeeded. */
  const ok = async <T = Row>(...args: string[]): Promise<T> => {
    const r = await admin(...args);
    expect(r.code, `${args.join(' ')}\n${r.stdout}${r.stderr}`).to.equal(0);
    expect(r.stdout.trim().split('\n'), 'exactly one line of JSON').to.have.length(1);
    return JSON.parse(r.stdout) as T;
  };

  const status = async (token: string) => (await call(`${s.base}/inboxes`, { token })).status;
  const sessionStatus = async (session: string) => (await call(`${s.app}/inboxes`, { session })).status;

  it('refuses every destructive command without --yes, and changes nothing', async () => {
    const p = await newProject(s);
    const inbox = await p.inbox();
    const token = await p.token(['messages:read']);
    const session = await p.session();
    const [sessionRow] = await ok<Row[]>('session', 'list', '--member', p.memberId);
    const tokenId = token.split('_').slice(1, 3).join('_');
    for (const args of [
      ['project', 'delete', '--project', p.projectId],
      ['member', 'remove', '--member', p.memberId],
      ['inbox', 'remove', '--inbox', inbox.id],
      ['token', 'revoke', '--id', tokenId],
      ['session', 'revoke', '--id', sessionRow!.id as string],
    ]) {
      const r = await admin(...args);
      expect(r.code, args.join(' ')).to.equal(2);
      expect(r.out.error).to.equal(`${args[0]} ${args[1]} cannot be undone: add --yes to do it`);
    }
    expect(await status(token)).to.equal(200);
    expect(await sessionStatus(session)).to.equal(200);
    const shown = await ok('project', 'show', '--project', p.projectId);
    expect(shown.members).to.have.length(1);
    expect(shown.inboxes).to.have.length(1);
  });

  it('lists and shows projects, members, inboxes, tokens and sessions as JSON, without secrets', async () => {
    const p = await newProject(s);
    const inbox = await p.inbox();
    const reader = await p.member();
    await s.postern.admin.grant(reader, inbox.id, 'reader');
    const token = await p.token(['messages:read', 'events:read'], { inboxes: [inbox.id], expiresInSeconds: 3600 });
    const session = await p.session();

    const projects = await ok<Row[]>('project', 'list');
    expect(projects.find((x) => x.id === p.projectId)).to.have.keys('id', 'name', 'createdAt');

    const shown = await ok('project', 'show', '--project', p.projectId);
    expect(shown.id).to.equal(p.projectId);
    expect(shown.members).to.deep.equal(await ok<Row[]>('member', 'list', '--project', p.projectId));
    expect((shown.members as Row[]).map((m) => [m.id, m.inboxes])).to.have.deep.members([
      [p.memberId, [{ inboxId: inbox.id, role: 'owner' }]],
      [reader, [{ inboxId: inbox.id, role: 'reader' }]],
    ]);
    expect(await ok<Row[]>('inbox', 'list', '--project', p.projectId)).to.deep.equal(shown.inboxes);
    expect((await ok<Row[]>('inbox', 'list')).map((i) => i.id)).to.include(inbox.id);
    const inboxShown = await ok('inbox', 'show', '--inbox', inbox.id);
    expect(inboxShown).to.deep.include({
      id: inbox.id,
      projectId: p.projectId,
      imapUser: inbox.imapUser,
      addresses: [inbox.address],
      mode: 'compatible',
    });
    expect(inboxShown.members).to.have.deep.members([
      { memberId: p.memberId, role: 'owner' },
      { memberId: reader, role: 'reader' },
    ]);

    const tokens = await admin('token', 'list', '--project', p.projectId);
    expect(tokens.code).to.equal(0);
    const tokenId = token.split('_').slice(1, 3).join('_');
    const secret = token.slice(`svc_${tokenId}_`.length);
    expect(secret).to.have.length(43);
    expect(tokens.stdout).to.not.include(secret);
    const [listed] = JSON.parse(tokens.stdout) as Row[];
    expect(listed).to.have.keys('id', 'projectId', 'memberId', 'scopes', 'inboxes', 'state', 'createdAt', 'expiresAt', 'revokedAt');
    expect(listed).to.deep.include({
      id: tokenId,
      memberId: p.memberId,
      scopes: ['messages:read', 'events:read'],
      inboxes: [inbox.id],
      state: 'live',
      revokedAt: null,
    });
    expect(await ok<Row[]>('token', 'list', '--member', reader)).to.deep.equal([]);

    const sessions = await admin('session', 'list', '--project', p.projectId);
    // ses_<ulid>_<secret>: the id is the first two parts, the secret (which may hold _) the rest.
    const sessionId = session.split('_').slice(0, 2).join('_');
    expect(sessions.stdout).to.not.include(session.slice(`${sessionId}_`.length));
    const [ses] = JSON.parse(sessions.stdout) as Row[];
    expect(ses).to.have.keys('id', 'memberId', 'state', 'createdAt', 'expiresAt', 'revokedAt');
    expect(ses).to.deep.include({ id: sessionId, memberId: p.memberId, state: 'live' });

    // Usage: a list needs to know whose; unknown ids are 404-like failures (exit 1).
    expect((await admin('token', 'list')).code).to.equal(2);
    expect((await admin('session', 'list', '--project', p.projectId, '--member', reader)).code).to.equal(0);
    const stranger = await admin('project', 'show', '--project', 'prj_01M80W1F3RD7BV8C61QAP73X5Y');
    expect([stranger.code, stranger.out.error]).to.deep.equal([1, 'no project prj_01M80W1F3RD7BV8C61QAP73X5Y']);
  });

  it('revokes a token and a session with --yes: refused at once', async () => {
    const p = await newProject(s);
    const token = await p.token(['messages:read']);
    const session = await p.session();
    const tokenId = token.split('_').slice(1, 3).join('_');
    const sessionId = session.split('_').slice(0, 2).join('_');
    expect(await ok('token', 'revoke', '--id', tokenId, '--yes')).to.deep.equal({ id: tokenId, revoked: true });
    expect(await ok('session', 'revoke', '--id', sessionId, '--yes')).to.deep.equal({ id: sessionId, revoked: true });
    expect(await status(token)).to.equal(401);
    expect(await sessionStatus(session)).to.equal(401);
    expect(await ok('session', 'revoke', '--id', sessionId, '--yes')).to.deep.equal({ id: sessionId, revoked: false });
    const [listed] = await ok<Row[]>('session', 'list', '--member', p.memberId);
    expect(listed!.state).to.equal('revoked');
    expect((await admin('session', 'revoke', '--id', 'ses_01M80W1F3RD7BV8C61QAP73X5Y', '--yes')).out.error).to.equal(
      'no session ses_01M80W1F3RD7BV8C61QAP73X5Y',
    );
  });

  it("removes a member with --yes: their credentials stop working, the others' do not", async () => {
    const p = await newProject(s);
    const inbox = await p.inbox();
    const leaving = await p.member();
    await s.postern.admin.grant(leaving, inbox.id, 'member');
    const theirs = await p.token(['messages:read'], { memberId: leaving });
    const theirSession = await p.session({ memberId: leaving });
    const mine = await p.token(['messages:read']);
    expect(await status(theirs)).to.equal(200);

    expect(await ok('member', 'remove', '--member', leaving, '--yes')).to.deep.equal({ id: leaving, removed: true });
    expect(await status(theirs)).to.equal(401);
    expect(await sessionStatus(theirSession)).to.equal(401);
    expect(await status(mine)).to.equal(200);
    expect((await ok<Row[]>('member', 'list', '--project', p.projectId)).map((m) => m.id)).to.deep.equal([p.memberId]);
    expect((await ok('inbox', 'show', '--inbox', inbox.id)).members).to.deep.equal([{ memberId: p.memberId, role: 'owner' }]);
    expect((await admin('member', 'remove', '--member', leaving, '--yes')).code).to.equal(1);
  });

  it('deletes a project with --yes: everything in it goes, the running server stops watching its inboxes, the mail stays in Dovecot', async () => {
    const p = await newProject(s);
    const inbox = await p.inbox();
    const token = await p.token(['messages:read', 'events:read']);
    const other = await newProject(s);
    const kept = await other.inbox();
    const keptToken = await other.token(['messages:read']);
    const app = await mailApp(inbox);
    try {
      await append(app, 'INBOX', { subject: 'stays in the mail server' });
    } finally {
      await app.logout();
    }
    const store = s.postern.store;
    const report = async () => (await store.mailIndex.watchReports(0))[0]?.report.inboxes;
    // Other tests' inboxes are on this server too: it watches them all.
    const watched = (await store.directory.listInboxes()).length;
    await until(
      'the server watching every inbox',
      async () => (await report()) === watched && (await store.mailIndex.status(inbox.id)).watcher !== null,
      30_000,
    );

    const deleted = await ok('project', 'delete', '--project', p.projectId, '--yes');
    expect(deleted).to.deep.equal({
      id: p.projectId,
      deleted: true,
      removed: { members: 1, inboxes: 1, tokens: 1, sessions: 0, webhooks: 0, events: (deleted.removed as Row).events },
    });
    expect(await status(token)).to.equal(401);
    expect(await status(keptToken)).to.equal(200);
    expect((await ok<Row[]>('project', 'list')).map((x) => x.id)).to.not.include(p.projectId);
    expect((await admin('project', 'show', '--project', p.projectId)).code).to.equal(1);
    expect(await store.directory.getInbox(inbox.id)).to.equal(null);
    expect(await store.events.positionOf(p.projectId, 'evt_01M80W1F3RD7BV8C61QAP73X5Y')).to.equal(null);

    // The running server lets the inbox go (its next report counts one) and keeps the other.
    await until("the server letting the deleted project's inbox go", async () => (await report()) === watched - 1, 30_000);
    expect((await store.mailIndex.status(inbox.id)).watcher).to.equal(null);
    expect((await store.mailIndex.status(kept.id)).watcher).to.not.equal(null);

    // The mail itself is the mail server's: still there.
    const after = await mailApp(inbox);
    try {
      const box = await after.status('INBOX', { messages: true });
      expect(box && box.messages).to.equal(1);
    } finally {
      await after.logout();
    }
  });
});
