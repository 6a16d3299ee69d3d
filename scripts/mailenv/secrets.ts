// The environment's secrets, created once per env dir: the master password, the mail_crypt keys.
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import * as fs from 'node:fs/promises';
import * as path from 'node:path';
import { mustRun } from './commands.ts';
import { writeAtomic } from './files.ts';
import type { Layout } from './layout.ts';
import type { PackageNeed } from './packages.ts';
import { errCode } from './util.ts';

/** What generating the keys needs. */
export const SECRETS_PACKAGES: readonly PackageNeed[] = [{ pkg: 'openssl', files: ['/usr/bin/openssl'] }];

/** The master password: random, created once per env dir, kept there with mode 0600. */
export function masterPassword(l: Layout): Promise<string> {
  return randomSecret(l.masterPasswordFile);
}

/** The shared secret of Dovecot's push hints to Postern (POSTERN_HINT_SECRET), like the master password. */
export function pushSecret(l: Layout): Promise<string> {
  return randomSecret(l.pushSecretFile);
}

/** The password of the private PostgreSQL cluster's superuser `postern`, like the master password. */
export function postgresPassword(l: Layout): Promise<string> {
  return randomSecret(l.postgresPasswordFile);
}

async function randomSecret(file: string): Promise<string> {
  const existing = await fs.readFile(file, 'utf8').catch(() => null);
  if (existing !== null && existing.trim().length > 0) return existing.trim();
  await fs.mkdir(path.dirname(file), { recursive: true });
  const tmp = `${file}.${process.pid}.tmp`;
  await fs.writeFile(tmp, `${randomBytes(24).toString('base64url')}\n`, { mode: 0o600 });
  // link() does not replace: when two processes race, both end up with the first one's password.
  await fs.link(tmp, file).catch((e: unknown) => {
    if (errCode(e) !== 'EEXIST') throw e;
  });
  await fs.rm(tmp, { force: true });
  return (await fs.readFile(file, 'utf8')).trim();
}

/** The global mail_crypt key pair. Generated once: losing it makes all stored mail unreadable. */
export async function ensureCryptKeys(l: Layout): Promise<void> {
  const keyDir = path.dirname(l.cryptPrivateKey);
  await fs.mkdir(keyDir, { recursive: true, mode: 0o700 });
  if (!existsSync(l.cryptPrivateKey)) {
    const ec = await mustRun('openssl', ['ecparam', '-name', 'prime256v1', '-genkey', '-noout'], 'generating the mail_crypt key');
    const pkcs8 = await mustRun('openssl', ['pkey'], 'converting the mail_crypt key', { input: ec.stdout });
    await writeAtomic(l.cryptPrivateKey, pkcs8.stdout, 0o600);
  }
  if (!existsSync(l.cryptPublicKey)) {
    const pub = await mustRun('openssl', ['pkey', '-in', l.cryptPrivateKey, '-pubout'], 'deriving the mail_crypt public key');
    await writeAtomic(l.cryptPublicKey, pub.stdout, 0o600);
  }
}
