// Epoch keys: made with the inbox (and for inboxes older than keys at the first start), rotated
// with old epochs still opening, sealed under the master key, which `serve` cannot do without.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import * as openpgp from 'openpgp';
import { pino } from 'pino';
import { openStore } from '../../adapters/store/open.ts';
import { loadConfig } from '../../lib/config.ts';
import { MasterKey, MasterKeyError } from '../../lib/crypto/master-key.ts';
import { ROOT } from '../../lib/paths.ts';
import { openPostern } from '../../lib/server.ts';
import { envVars, mailEnv, newProject, newStore, startPostern, TEST_MASTER_KEY, type TestServer } from '../helpers/harness.ts';

async function sealAndOpen(pub: openpgp.PublicKey, priv: openpgp.PrivateKey): Promise<string> {
  const sealed = await openpgp.encrypt({ message: await openpgp.createMessage({ text: 'hello epoch' }), encryptionKeys: pub });
  const { data } = await openpgp.decrypt({ message: await openpgp.readMessage({ armoredMessage: sealed }), decryptionKeys: priv });
  return data as string;
}

function runCli(args: string[], env: Record<string, string>): Promise<{ code: number; out: Record<string, unknown> }> {
  return new Promise((resolve, reject) => {
    const child = spawn(join(ROOT, 'bin', 'postern'), args, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.on('error', reject);
    child.on('close', (code) =>
      resolve({ code: code ?? -1, out: JSON.parse(stdout.trim().split('\n').at(-1) || '{}') as Record<string, unknown> }),
    );
  });
}

describe('epoch keys', function () {
  this.timeout(60_000);
  let s: TestServer;
  before(async () => (s = await startPostern()));
  after(async () => s?.close());

  it('makes epoch 1 with the inbox: a v4 Ed25519 key with a Curve25519 encryption subkey that opens what is sealed to it', async () => {
    const p = await newProject(s);
    const inbox = await p.inbox();
    expect(await s.postern.keys.epochs(inbox.id)).to.deep.equal([1]);
    const current = await s.postern.keys.current(inbox.id);
    expect(current.epoch).to.equal(1);
    expect(current.publicKey.keyPacket.version).to.equal(4);
    expect(current.publicKey.getAlgorithmInfo()).to.deep.include({ algorithm: 'eddsaLegacy', curve: 'ed25519Legacy' });
    const sub = await current.publicKey.getEncryptionKey();
    expect(sub.getAlgorithmInfo()).to.deep.include({ algorithm: 'ecdh', curve: 'curve25519Legacy' });
    expect(current.fingerprint)
      .to.equal(current.publicKey.getFingerprint().toUpperCase())
      .and.match(/^[0-9A-F]{40}$/);
    expect(await sealAndOpen(current.publicKey, await s.postern.keys.privateKey(inbox.id, 1))).to.equal('hello epoch');
    // The private key rests sealed: the stored row never holds it in the clear.
    const stored = await s.postern.store.keys.get(inbox.id, 1);
    const priv = (await s.postern.keys.privateKey(inbox.id, 1)).write();
    expect(Buffer.from(stored!.sealedPrivate).includes(Buffer.from(priv.subarray(0, 64)))).to.equal(false);
  });

  it('rotates to a new epoch; the old one still opens, in this process and in a fresh one', async () => {
    const p = await newProject(s);
    const inbox = await p.inbox();
    const first = await s.postern.keys.current(inbox.id);
    const rotated = await s.postern.admin.rotateKey(inbox.id);
    expect(rotated.epoch).to.equal(2);
    expect(rotated.fingerprint).to.not.equal(first.fingerprint);
    expect((await s.postern.keys.current(inbox.id)).epoch).to.equal(2);
    expect(await s.postern.keys.epochs(inbox.id)).to.deep.equal([1, 2]);
    const other = await openPostern(loadConfig(envVars(mailEnv(), s.storeEnv)), pino({ level: 'silent' }));
    try {
      expect(await sealAndOpen(first.publicKey, await other.keys.privateKey(inbox.id, 1))).to.equal('hello epoch');
      const second = await other.keys.current(inbox.id);
      expect(await sealAndOpen(second.publicKey, await other.keys.privateKey(inbox.id, 2))).to.equal('hello epoch');
    } finally {
      await other.close();
    }
  });

  it('rotates from the CLI with the same master key, and refuses with the reason without it', async () => {
    const p = await newProject(s);
    const inbox = await p.inbox();
    const env = envVars(mailEnv(), s.storeEnv);
    const ok = await runCli(['admin', 'inbox', 'rotate-key', '--inbox', inbox.id], env);
    expect(ok.code, JSON.stringify(ok.out)).to.equal(0);
    expect(ok.out).to.deep.include({ inboxId: inbox.id, epoch: 2 });
    const missing = await runCli(['admin', 'inbox', 'rotate-key', '--inbox', inbox.id], { ...env, POSTERN_MASTER_KEY: '' });
    expect(missing.code).to.equal(1);
    expect(missing.out.error).to.match(/POSTERN_MASTER_KEY is not set/);
    const wrong = await runCli(['admin', 'inbox', 'rotate-key', '--inbox', inbox.id], { ...env, POSTERN_MASTER_KEY: MasterKey.generate() });
    expect(wrong.code).to.equal(1);
    expect(wrong.out.error).to.match(/does not open the stored epoch keys/);
    expect(await s.postern.keys.epochs(inbox.id)).to.deep.equal([1, 2]);
  });

  it('sets a member key from the CLI (armored or binary file), refusing a key that cannot encrypt with the reason', async () => {
    const p = await newProject(s);
    const env = envVars(mailEnv(), s.storeEnv);
    const { privateKey } = await openpgp.generateKey({
      type: 'ecc',
      curve: 'ed25519Legacy',
      userIDs: [{ email: 'm@example.org' }],
      format: 'object',
    });
    const dir = mkdtempSync(join(tmpdir(), 'postern-key-'));
    try {
      writeFileSync(join(dir, 'key.asc'), privateKey.toPublic().armor());
      writeFileSync(join(dir, 'key.gpg'), privateKey.toPublic().write());
      const { privateKey: signOnly } = await openpgp.generateKey({
        type: 'ecc',
        curve: 'ed25519Legacy',
        userIDs: [{ email: 's@example.org' }],
        subkeys: [],
        format: 'object',
      });
      writeFileSync(join(dir, 'sign.asc'), signOnly.toPublic().armor());
      for (const file of ['key.asc', 'key.gpg']) {
        const ok = await runCli(['admin', 'member', 'set-key', '--member', p.memberId, '--public-key-file', join(dir, file)], env);
        expect(ok.code, JSON.stringify(ok.out)).to.equal(0);
        expect(ok.out).to.deep.equal({ memberId: p.memberId, fingerprint: privateKey.getFingerprint().toUpperCase() });
      }
      const refused = await runCli(['admin', 'member', 'set-key', '--member', p.memberId, '--public-key-file', join(dir, 'sign.asc')], env);
      expect(refused.code).to.equal(1);
      expect(refused.out.error).to.match(/cannot encrypt/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('serve refuses to start without a master key, with a malformed one, or with one that does not open the stored keys', async () => {
    for (const [value, reason] of [
      ['', /is not set/],
      ['not base64 at all!', /malformed/],
      [Buffer.alloc(16, 7).toString('base64'), /too short: 16 bytes/],
    ] as const) {
      const refused = await openPostern(
        loadConfig(envVars(mailEnv(), { ...s.storeEnv, POSTERN_MASTER_KEY: value })),
        pino({ level: 'silent' }),
      ).then(
        async (p) => {
          await p.close();
          return null;
        },
        (err: unknown) => err,
      );
      expect(refused).to.be.instanceOf(MasterKeyError).with.property('message').that.matches(reason);
    }
    const wrong = await openPostern(
      loadConfig(envVars(mailEnv(), { ...s.storeEnv, POSTERN_MASTER_KEY: MasterKey.generate() })),
      pino({ level: 'silent' }),
    );
    try {
      let failure: unknown = null;
      await wrong.listen().catch((err: unknown) => (failure = err));
      expect(failure).to.be.instanceOf(MasterKeyError);
      expect((failure as Error).message).to.match(/does not open the stored epoch keys/);
    } finally {
      await wrong.close();
    }
    // And `postern serve` says so on stdout, exiting non-zero.
    const cli = await runCli(['serve'], envVars(mailEnv(), { ...s.storeEnv, POSTERN_MASTER_KEY: '' }));
    expect(cli.code).to.equal(1);
    expect(cli.out.error).to.match(/POSTERN_MASTER_KEY is not set/);
  });

  it('gives inboxes made before keys existed their epoch 1 on the first start (store made by the previous code)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'postern-keys-'));
    const store = await newStore(dir);
    const ids = ['ibx_01JC0000000000000000000001', 'ibx_01JC0000000000000000000002'];
    try {
      // Filled the way the previous code filled it: inboxes in the directory, no keys made.
      const old = await openStore(loadConfig(envVars(mailEnv(), store.env)));
      try {
        await old.directory.createProject({ id: 'prj_01JC0000000000000000000000', name: 'old', createdAt: 1 });
        for (const [i, id] of ids.entries()) {
          await old.directory.createInbox({
            id,
            projectId: 'prj_01JC0000000000000000000000',
            imapUser: `old${i}@example.org`,
            addresses: [`old${i}@example.org`],
            mode: 'compatible',
            createdAt: 1,
          });
        }
        expect(await old.keys.inboxesWithoutKeys()).to.have.members(ids);
      } finally {
        await old.close();
      }
      const upgraded = await startPostern(store.env);
      try {
        for (const id of ids) {
          expect(await upgraded.postern.keys.epochs(id)).to.deep.equal([1]);
          const current = await upgraded.postern.keys.current(id);
          expect(await sealAndOpen(current.publicKey, await upgraded.postern.keys.privateKey(id, 1))).to.equal('hello epoch');
        }
      } finally {
        await upgraded.close();
      }
    } finally {
      await store.drop();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('keeps the master key out of the store', async () => {
    const { directory, keys } = s.postern.store;
    const stored = (await Promise.all((await directory.listInboxes()).map((inbox) => keys.list(inbox.id)))).flat();
    const master = Buffer.from(TEST_MASTER_KEY, 'base64');
    expect(stored.length).to.be.greaterThan(0);
    for (const r of stored) expect(Buffer.from(r.sealedPrivate).includes(master.subarray(0, 16))).to.equal(false);
  });
});
