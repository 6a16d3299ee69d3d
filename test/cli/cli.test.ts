// The staff CLI is a contract: commands, flags, one JSON object on stdout, exit codes.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import { ImapFlow } from 'imapflow';
import nodemailer from 'nodemailer';
import { ROOT } from '../../lib/paths.ts';
import { openStore } from '../../adapters/store/open.ts';
import { loadConfig } from '../../lib/config.ts';
import type { Store } from '../../lib/store.ts';
import { memberKeyPair } from '../helpers/crypto-fixtures.ts';
import { envVars, mailEnv, newStore, unique, type TestStore } from '../helpers/harness.ts';
import { runPostern, spawnListening, stopProcess, type PosternRun } from '../helpers/processes.ts';

const BIN = join(ROOT, 'bin', 'postern');

/** The store the staff commands run on (`env`'s), opened by this process to read what they did. */
const openStoreOf = (env: Record<string, string>): Promise<Store> => openStore(loadConfig(env));

describe('staff CLI', function () {
  // Each command is a fresh Node process: seconds apiece on a busy machine.
  this.timeout(180_000);
  let dir: string;
  let store: TestStore;
  let env: Record<string, string>;

  const run = (...args: string[]): Promise<PosternRun> => runPostern(args, env);

  const ok = async (...args: string[]) => {
    const r = await run(...args);
    expect(r.code, `${args.join(' ')}\n${r.stdout}${r.stderr}`).to.equal(0);
    expect(r.stdout.trim().split('\n'), 'exactly one line of JSON').to.have.length(1);
    return r.out;
  };

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'postern-cli-'));
    store = await newStore(dir);
    env = envVars(mailEnv(), store.env);
  });
  after(async () => {
    await store?.drop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('issues everything a caller needs, and `serve` honours it; revocations work at once', async () => {
    const project = (await ok('admin', 'project', 'create', '--name', 'CLI test')).id as string;
    expect(project).to.match(/^prj_[0-9A-Z]{26}$/);
    const member = (await ok('admin', 'member', 'add', '--project', project, '--email', `${unique('ops')}@example.org`)).id as string;
    expect(member).to.match(/^mem_[0-9A-Z]{26}$/);

    const user = `${unique('cli')}@${mailEnv().domain}`;
    const alias = `${unique('alias')}@${mailEnv().domain}`;
    const inbox = await ok(
      'admin',
      'inbox',
      'add',
      '--project',
      project,
      '--imap-user',
      user,
      '--address',
      user,
      '--address',
      alias,
      '--create-imap-user',
    );
    expect(inbox.id).to.match(/^ibx_[0-9A-Z]{26}$/);
    expect(inbox.imapUser).to.equal(user);
    // The created Dovecot user is real: a mail app can log in with the printed password.
    const imap = new ImapFlow({
      host: mailEnv().imap.host,
      port: mailEnv().imap.port,
      secure: false,
      auth: { user, pass: inbox.imapPassword as string },
      logger: false,
    });
    await imap.connect();
    await imap.logout();
    // And it may send as the inbox's other address through submission: Postfix's sender login
    // table lists it for the user (without, Postfix refuses it as not owned by the user).
    const submission = nodemailer.createTransport({
      host: mailEnv().submission.host,
      port: mailEnv().submission.port,
      secure: false,
      auth: { user, pass: inbox.imapPassword as string },
    });
    try {
      const to = `${unique('to')}@example.org`;
      const sent = await submission.sendMail({
        envelope: { from: alias, to: [to] },
        raw: `From: <${alias}>\r\nTo: <${to}>\r\nSubject: as the alias\r\n\r\nhello\r\n`,
      });
      expect(sent.accepted).to.deep.equal([to]);
    } finally {
      submission.close();
    }

    const vaultAddress = `${unique('vault')}@${mailEnv().domain}`;
    const vault = (
      await ok(
        'admin',
        'inbox',
        'add',
        '--project',
        project,
        '--imap-user',
        vaultAddress,
        '--address',
        vaultAddress,
        '--mode',
        'zero-access',
        '--create-imap-user',
      )
    ).id as string;

    expect(await ok('admin', 'grant', '--member', member, '--inbox', inbox.id as string, '--role', 'owner')).to.deep.equal({
      memberId: member,
      inboxId: inbox.id,
      role: 'owner',
    });
    await ok('admin', 'grant', '--member', member, '--inbox', vault, '--role', 'reader');
    const token = await ok('admin', 'token', 'create', '--member', member, '--scopes', 'messages:read,send', '--expires-in', '3600');
    expect(token.id).to.match(/^tok_[0-9A-Z]{26}$/);
    expect(token.token).to.match(new RegExp(`^svc_${token.id as string}_[A-Za-z0-9_-]{43}$`));
    const narrowed = await ok('admin', 'token', 'create', '--member', member, '--scopes', 'messages:read', '--inboxes', vault);
    const session = await ok('admin', 'session', 'create', '--member', member, '--expires-in', '600');
    expect(session.token).to.match(/^ses_[0-9A-Z]{26}_[A-Za-z0-9_-]{43}$/);
    const invite = await ok('admin', 'member', 'invite', '--member', member, '--expires-in', '3600');
    expect(invite.link).to.match(/^http:\/\/localhost:8787\/app\/#enroll=inv_[0-9A-Z]{26}_[A-Za-z0-9_-]{43}$/);
    expect(Date.parse(invite.expiresAt as string) - Date.now()).to.be.within(3_500_000, 3_600_000);

    const server = await serve(env);
    try {
      const list = async (headers: Record<string, string>, base = server.base) => {
        const res = await fetch(`${base}/inboxes`, { headers });
        return {
          status: res.status,
          body: (await res.json()) as { inboxes?: Array<{ inboxId: string; role: string; mode?: string; label?: string }> },
        };
      };
      const bearer = (t: unknown) => ({ authorization: `Bearer ${t as string}` });
      const all = await list(bearer(token.token));
      expect(all.status).to.equal(200);
      expect(all.body.inboxes).to.deep.equal([
        { inboxId: inbox.id, role: 'owner', mode: 'compatible', label: user },
        { inboxId: vault, role: 'reader', mode: 'zero-access', label: vaultAddress },
      ]);
      expect((await list(bearer(narrowed.token))).body.inboxes!.map((i) => i.inboxId)).to.deep.equal([vault]);
      expect((await list({ 'x-svc-token': session.token as string }, server.app)).status).to.equal(200);
      // The invite the CLI printed opens an enrollment ceremony on the served app.
      const enroll = await fetch(`${server.app}/auth/enroll/options`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ invite: (invite.link as string).split('#enroll=')[1] }),
      });
      expect(enroll.status).to.equal(200);

      expect(await ok('admin', 'revoke', '--member', member, '--inbox', vault)).to.deep.equal({ revoked: true });
      expect((await list(bearer(token.token))).body.inboxes!.map((i) => i.inboxId)).to.deep.equal([inbox.id]);

      expect(await ok('admin', 'token', 'revoke', '--id', token.id as string, '--yes')).to.deep.equal({ id: token.id, revoked: true });
      expect((await list(bearer(token.token))).status).to.equal(401);
    } finally {
      await server.stop();
    }
  });

  it("member set-key records access.key.set as staff, once per change, like a member's own change", async () => {
    const project = (await ok('admin', 'project', 'create', '--name', 'keys')).id as string;
    const member = (await ok('admin', 'member', 'add', '--project', project, '--email', `${unique('k')}@example.org`)).id as string;
    const [first, second] = [(await memberKeyPair()).armoredPublic, (await memberKeyPair()).armoredPublic];
    writeFileSync(join(dir, 'first.asc'), first);
    writeFileSync(join(dir, 'second.asc'), second);
    const a = await ok('admin', 'member', 'set-key', '--member', member, '--public-key-file', join(dir, 'first.asc'));
    // The same key again changes nothing, and records nothing.
    expect(await ok('admin', 'member', 'set-key', '--member', member, '--public-key-file', join(dir, 'first.asc'))).to.deep.equal(a);
    const b = await ok('admin', 'member', 'set-key', '--member', member, '--public-key-file', join(dir, 'second.asc'));
    const opened = await openStoreOf(env);
    try {
      const recorded = (await opened.events.readAll(0, 10_000))
        .filter((e) => e.projectId === project && e.type === 'access.key.set')
        .map((e) => JSON.parse(e.json) as { actor: string; subject: string; data: Record<string, unknown> });
      expect(recorded.map((e) => [e.actor, e.subject, e.data])).to.deep.equal([
        ['sys_postern', member, { memberId: member, fingerprint: a.fingerprint, confirmedBy: 'staff' }],
        ['sys_postern', member, { memberId: member, fingerprint: b.fingerprint, previousFingerprint: a.fingerprint, confirmedBy: 'staff' }],
      ]);
    } finally {
      await opened.close();
    }
  });

  it('serve --help lists the configuration', async () => {
    const r = await run('serve', '--help');
    expect(r.code).to.equal(0);
    for (const name of ['POSTERN_DB', 'POSTERN_IMAP_MASTER_PASSWORD', 'REDIS_URL', 'POSTERN_TOKEN_TTL']) expect(r.stdout).to.contain(name);
  });

  const failures: Array<[string, string[], number, RegExp]> = [
    ['a missing flag is a usage error', ['admin', 'project', 'create'], 2, /--name is required/],
    ['an unknown flag is a usage error', ['admin', 'project', 'create', '--name', 'x', '--colour', 'red'], 2, /colour/],
    ['an unknown command is a usage error', ['admin', 'project', 'rename', '--name', 'x'], 2, /unknown admin command/],
    [
      'an unknown project',
      ['admin', 'member', 'add', '--project', 'prj_01M80W1F3RD7BV8C61QAP73X5Y', '--email', 'a@b.example'],
      1,
      /no project/,
    ],
    ['a bad e-mail', ['admin', 'member', 'add', '--project', 'prj_nope', '--email', 'nope'], 1, /no project|e-mail/],
    ['an unknown member', ['admin', 'token', 'create', '--member', 'mem_01M80W1F3RD7BV8C61QAP73X5Y', '--scopes', 'send'], 1, /no member/],
    ['a non-numeric expiry', ['admin', 'session', 'create', '--member', 'mem_x', '--expires-in', 'soon'], 2, /whole number/],
    ['an unknown token', ['admin', 'token', 'revoke', '--id', 'tok_01M80W1F3RD7BV8C61QAP73X5Y', '--yes'], 1, /no token/],
    ['an invite for an unknown member', ['admin', 'member', 'invite', '--member', 'mem_01M80W1F3RD7BV8C61QAP73X5Y'], 1, /no member/],
    ['an invite with a non-numeric expiry', ['admin', 'member', 'invite', '--member', 'mem_x', '--expires-in', 'soon'], 2, /whole number/],
  ];
  for (const [what, args, code, message] of failures) {
    it(`fails cleanly: ${what}`, async () => {
      const r = await run(...args);
      expect(r.code).to.equal(code);
      expect(Object.keys(r.out)).to.deep.equal(['error']);
      expect(r.out.error).to.match(message);
    });
  }

  it('refuses bad scopes, roles, modes and duplicate inboxes with a clear error', async () => {
    const project = (await ok('admin', 'project', 'create', '--name', 'errors')).id as string;
    const member = (await ok('admin', 'member', 'add', '--project', project, '--email', 'x@example.org')).id as string;
    const dup = await run('admin', 'member', 'add', '--project', project, '--email', 'X@example.org');
    expect([dup.code, dup.out.error]).to.deep.equal([1, 'member with this email already exists']);
    const badScope = await run('admin', 'token', 'create', '--member', member, '--scopes', 'messages:read,root');
    expect(badScope.code).to.equal(1);
    expect(badScope.out.error).to.match(/unknown scope root/);
    const user = `${unique('d')}@${mailEnv().domain}`;
    const badMode = await run('admin', 'inbox', 'add', '--project', project, '--imap-user', user, '--address', user, '--mode', 'open');
    expect(badMode.out.error).to.match(/mode must be one of/);
    const inbox = (await ok('admin', 'inbox', 'add', '--project', project, '--imap-user', user, '--address', user, '--create-imap-user'))
      .id as string;
    const again = await run('admin', 'inbox', 'add', '--project', project, '--imap-user', `${unique('e')}@x.example`, '--address', user);
    expect(again.out.error).to.match(/address .* already exists/);
    const badRole = await run('admin', 'grant', '--member', member, '--inbox', inbox, '--role', 'god');
    expect(badRole.out.error).to.match(/role must be one of owner, member, reader/);
  });
});

describe('staff CLI: a command that fails changes nothing', function () {
  this.timeout(300_000);
  let dir: string;
  let store: TestStore;
  let env: Record<string, string>;
  let opened: Store | null = null;

  const run = (args: string[], extra: Record<string, string | undefined> = {}): Promise<{ code: number; out: Record<string, unknown> }> =>
    new Promise((resolve, reject) => {
      const childEnv: Record<string, string | undefined> = { ...process.env, ...env, ...extra };
      for (const [k, v] of Object.entries(extra)) if (v === undefined) delete childEnv[k];
      const child = spawn(BIN, args, { env: childEnv, stdio: ['ignore', 'pipe', 'ignore'] });
      let stdout = '';
      child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
      child.on('error', reject);
      child.on('close', (code) =>
        resolve({ code: code ?? -1, out: JSON.parse(stdout.trim().split('\n').at(-1) || '{}') as Record<string, unknown> }),
      );
    });
  const ok = async (...args: string[]) => {
    const r = await run(args);
    expect(r.code, JSON.stringify(r.out)).to.equal(0);
    return r.out;
  };
  /** Fails with `code` and a message matching `message`, and the directory is as it was. */
  const refused = async (args: string[], code: number, message: RegExp, extra: Record<string, string | undefined> = {}) => {
    const before = await snapshot();
    const r = await run(args, extra);
    expect(r.code, `${args.join(' ')}: ${JSON.stringify(r.out)}`).to.equal(code);
    expect(Object.keys(r.out)).to.deep.equal(['error']);
    expect(r.out.error).to.match(message);
    expect(await snapshot(), `${args.join(' ')} changed the store`).to.deep.equal(before);
  };
  /** What the staff commands write, read through the stores' own API. */
  const snapshot = async () => {
    const { directory, keys } = opened!;
    const inboxes = await directory.listInboxes();
    return {
      version: await directory.inboxesVersion(),
      inboxes: await Promise.all(inboxes.map(async (i) => ({ ...i, epochs: (await keys.list(i.id)).map((k) => k.epoch) }))),
    };
  };

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'postern-cli-'));
    store = await newStore(dir);
    env = envVars(mailEnv(), store.env);
  });
  after(async () => {
    await opened?.close();
    await store?.drop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('checks the master key, the IMAP user and every argument before it writes', async () => {
    const project = (await ok('admin', 'project', 'create', '--name', 'checks')).id as string;
    const member = (await ok('admin', 'member', 'add', '--project', project, '--email', `${unique('m')}@example.org`)).id as string;
    opened = await openStoreOf(env);
    const user = `${unique('chk')}@${mailEnv().domain}`;
    const add = ['admin', 'inbox', 'add', '--project', project, '--imap-user', user, '--address', user];

    // inbox add: no master key (with and without making the IMAP user), no such IMAP user, a
    // password without the user, a bad mode, an unknown project: no inbox row, no key, no user.
    await refused(add, 1, /POSTERN_MASTER_KEY is not set/, { POSTERN_MASTER_KEY: undefined });
    await refused([...add, '--create-imap-user'], 1, /POSTERN_MASTER_KEY is not set/, { POSTERN_MASTER_KEY: undefined });
    await refused(add, 1, /has no IMAP user/);
    await refused([...add, '--imap-password', 'secret-pw'], 2, /--imap-password goes with --create-imap-user/);
    await refused([...add, '--mode', 'open', '--create-imap-user'], 1, /mode must be one of/);
    await refused(
      [
        'admin',
        'inbox',
        'add',
        '--project',
        'prj_01M80W1F3RD7BV8C61QAP73X5Y',
        '--imap-user',
        user,
        '--address',
        user,
        '--create-imap-user',
      ],
      1,
      /no project/,
    );
    // None of those made the Dovecot user: this add checks it and still finds none.
    await refused(add, 1, /has no IMAP user/);
    const inbox = (await ok(...add, '--create-imap-user')).id as string;
    expect((await snapshot()).inboxes.map((i) => [i.id, i.epochs])).to.deep.equal([[inbox, [1]]]);
    // Over a user that exists: added (the check passes), once.
    await refused(add, 1, /inbox for this IMAP user already exists/);
    const other = `${unique('chk')}@${mailEnv().domain}`;
    await refused(
      ['admin', 'inbox', 'add', '--project', project, '--imap-user', other, '--address', user, '--create-imap-user'],
      1,
      /address .* already exists/,
    );

    // inbox rotate-key without the master key: no new epoch.
    await refused(['admin', 'inbox', 'rotate-key', '--inbox', inbox], 1, /POSTERN_MASTER_KEY is not set/, {
      POSTERN_MASTER_KEY: undefined,
    });
    expect(await ok('admin', 'inbox', 'rotate-key', '--inbox', inbox)).to.include({ epoch: 2 });
    await refused(['admin', 'inbox', 'rotate-key', '--inbox', 'ibx_01M80W1F3RD7BV8C61QAP73X5Y'], 1, /no inbox/);
    // inbox remove / status of an unknown inbox.
    await refused(['admin', 'inbox', 'remove', '--inbox', 'ibx_01M80W1F3RD7BV8C61QAP73X5Y', '--yes'], 1, /no inbox/);
    await refused(['admin', 'inbox', 'status', '--inbox', 'ibx_01M80W1F3RD7BV8C61QAP73X5Y'], 1, /no inbox/);

    // grant with a bad role, or across projects: no grant (revoke finds none).
    await refused(['admin', 'grant', '--member', member, '--inbox', inbox, '--role', 'god'], 1, /role must be one of/);
    const elsewhere = (await ok('admin', 'project', 'create', '--name', 'elsewhere')).id as string;
    const stranger = (await ok('admin', 'member', 'add', '--project', elsewhere, '--email', `${unique('s')}@example.org`)).id as string;
    await refused(['admin', 'grant', '--member', stranger, '--inbox', inbox, '--role', 'owner'], 1, /different projects/);
    expect(await ok('admin', 'revoke', '--member', member, '--inbox', inbox)).to.deep.equal({ revoked: false });
    await refused(['admin', 'revoke', '--member', stranger, '--inbox', inbox], 1, /different projects/);

    // project create, member add, member set-key, member invite, token and session create.
    await refused(['admin', 'project', 'create', '--name', '   '], 1, /project name/);
    await refused(['admin', 'member', 'add', '--project', project, '--email', 'not-an-address'], 1, /not an e-mail address/);
    await refused(['admin', 'member', 'set-key', '--member', member, '--public-key-file', join(dir, 'missing.asc')], 2, /cannot read/);
    await refused(['admin', 'member', 'invite', '--member', member, '--expires-in', '0'], 1, /positive whole number/);
    await refused(
      ['admin', 'token', 'create', '--member', stranger, '--scopes', 'messages:read', '--inboxes', inbox],
      1,
      /no inbox .* in the member's project/,
    );
    await refused(['admin', 'token', 'create', '--member', member, '--scopes', 'root'], 1, /unknown scope/);
    await refused(['admin', 'session', 'create', '--member', member, '--expires-in', '0'], 1, /positive whole number/);
    await refused(['admin', 'token', 'revoke', '--id', 'tok_01M80W1F3RD7BV8C61QAP73X5Y', '--yes'], 1, /no token/);
  });
});

/** `bin/postern serve` itself, the wrapper a user runs. */
async function serve(env: Record<string, string>): Promise<{ base: string; app: string; stop(): Promise<void> }> {
  const { child, url } = await spawnListening(BIN, ['serve'], env);
  return { base: `${url}/v1`, app: `${url}/api/v1`, stop: () => stopProcess(child) };
}
