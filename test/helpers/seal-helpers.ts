// Keys and openers for zero-access tests: a throwaway epoch key made with openpgp.js, opening a
// sealed message with it, and opening it with GnuPG in a throwaway GNUPGHOME as a mail app would.
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as openpgp from 'openpgp';
import type { SealKey } from '../../lib/mail/sealing.ts';

export interface TestEpochKey {
  sealKey: SealKey;
  privateKey: openpgp.PrivateKey;
  armoredPrivate: string;
}

/** An epoch-shaped key: v4, Ed25519 primary, Curve25519 encryption subkey (docs/encryption.md, "Keys"). */
export async function testEpochKey(epoch = 1): Promise<TestEpochKey> {
  const { privateKey } = await openpgp.generateKey({
    type: 'ecc',
    curve: 'curve25519Legacy',
    userIDs: [{ name: 'test epoch', email: 'epoch@postern.test' }],
    format: 'armored',
  });
  const priv = await openpgp.readPrivateKey({ armoredKey: privateKey });
  return { sealKey: { epoch, publicKey: priv.toPublic() }, privateKey: priv, armoredPrivate: privateKey };
}

/** The encrypted part of a sealed message, opened with openpgp.js. */
export async function openSealed(sealed: Buffer, key: TestEpochKey): Promise<Buffer> {
  const armored = armoredPart(sealed);
  const message = await openpgp.readMessage({ armoredMessage: armored });
  const { data } = await openpgp.decrypt({ message, decryptionKeys: key.privateKey, format: 'binary' });
  return Buffer.from(data as Uint8Array);
}

export function armoredPart(sealed: Buffer): string {
  const text = sealed.toString('latin1');
  const start = text.indexOf('-----BEGIN PGP MESSAGE-----');
  const end = text.indexOf('-----END PGP MESSAGE-----');
  if (start < 0 || end < 0) throw new Error('no PGP message in the sealed message');
  return text.slice(start, end + '-----END PGP MESSAGE-----'.length);
}

/** `gpg --decrypt` of the whole stored message's encrypted part, with the key imported into a fresh GNUPGHOME. */
export async function gpgDecrypt(sealed: Buffer, key: TestEpochKey): Promise<Buffer> {
  const home = mkdtempSync(join(tmpdir(), 'postern-gpg-'));
  const run = (args: string[], input?: string) =>
    new Promise<Buffer>((resolve, reject) => {
      const child = execFile(
        'gpg',
        ['--homedir', home, '--batch', '--yes', '--pinentry-mode', 'loopback', '--passphrase', '', ...args],
        { encoding: 'buffer', maxBuffer: 256 * 1024 * 1024 },
        (err, stdout, stderr) => (err ? reject(new Error(`gpg ${args.join(' ')}: ${err.message}\n${stderr.toString()}`)) : resolve(stdout)),
      );
      if (input !== undefined) child.stdin!.end(input);
    });
  try {
    writeFileSync(join(home, 'key.asc'), key.armoredPrivate);
    await run(['--import', join(home, 'key.asc')]);
    writeFileSync(join(home, 'message.asc'), armoredPart(sealed));
    return await run(['--decrypt', join(home, 'message.asc')]);
  } finally {
    // The agent started for this home goes with it.
    await new Promise<void>((resolve) => execFile('gpgconf', ['--homedir', home, '--kill', 'gpg-agent'], () => resolve()));
    rmSync(home, { recursive: true, force: true });
  }
}
