// Dovecot's passwd-files: the mail users (one file each in users.d/) and the master user.
import { pbkdf2Sync, randomBytes, timingSafeEqual } from 'node:crypto';
import { existsSync } from 'node:fs';
import * as fs from 'node:fs/promises';
import * as path from 'node:path';
import { lookupGroupId, type Account } from './accounts.ts';
import type { MailEnv } from './env.ts';
import { withLock, writeAtomic } from './files.ts';
import { MASTER_USER, type Layout } from './layout.ts';
import { sleep } from './util.ts';

const PBKDF2_ROUNDS = 5000;

/** Dovecot's {PBKDF2} scheme: $1$salt$rounds$hex(PBKDF2-HMAC-SHA1, 20 bytes). */
function pbkdf2Hash(password: string): string {
  const salt = randomBytes(12).toString('base64').replace(/[+/]/g, '.');
  return `{PBKDF2}$1$${salt}$${PBKDF2_ROUNDS}$${pbkdf2Sync(password, salt, PBKDF2_ROUNDS, 20, 'sha1').toString('hex')}`;
}

function pbkdf2Verify(hash: string, password: string): boolean {
  const m = /^\{PBKDF2\}\$1\$([^$]+)\$(\d+)\$([0-9a-f]{40})$/.exec(hash);
  if (!m) return false;
  const actual = pbkdf2Sync(password, m[1]!, Number(m[2]), 20, 'sha1');
  return timingSafeEqual(actual, Buffer.from(m[3]!, 'hex'));
}

/** Dovecot's auth process runs as the "dovecot" user and must read the passwd-files. */
let passwdOwnerCache: Promise<Account> | undefined;
async function passwdOwner(): Promise<Account> {
  passwdOwnerCache ??= lookupGroupId('dovecot').then((gid) => ({ uid: 0, gid: gid ?? 0 }));
  return passwdOwnerCache;
}

/**
 * Replaces a passwd-file atomically. Dovecot re-reads a passwd-file when its mtime or size
 * changes; a same-size rewrite within the same second would go unnoticed, so then the mtime
 * is moved past the old one.
 */
async function replacePasswdFile(file: string, content: string): Promise<void> {
  const before = await fs.stat(file).catch(() => null);
  const changed = await writeAtomic(file, content, 0o640, await passwdOwner());
  if (!changed || !before) return;
  const after = await fs.stat(file);
  if (after.size === before.size && Math.floor(after.mtimeMs / 1000) <= Math.floor(before.mtimeMs / 1000)) {
    const t = new Date((Math.floor(before.mtimeMs / 1000) + 1) * 1000);
    await fs.utimes(file, t, t);
  }
}

// Also keeps the name one path component (it names the user's file in users.d/).
const USER_RE = /^[a-z0-9!#&'+=?^_`{|}~.-]+@[a-z0-9-]+(\.[a-z0-9-]+)*$/;

/** users.d/ next to the passwd-file: what Dovecot reads (see dovecot.conf). */
function usersDirOf(passwdFile: string): string {
  return path.join(path.dirname(passwdFile), 'users.d');
}

async function ensureUsersDir(usersDir: string): Promise<void> {
  await fs.mkdir(usersDir, { recursive: true, mode: 0o750 });
  const owner = await passwdOwner();
  await fs.chown(usersDir, owner.uid, owner.gid);
}

/**
 * Adds a mail user, or sets the password of an existing one. The passwd-file lists every
 * user; Dovecot reads each user's own file in users.d/, so a new user can log in as soon as
 * this returns, without a Dovecot restart. Safe to call from several processes at once.
 */
export async function addUser(env: MailEnv, user: string, password: string): Promise<void> {
  // Dovecot lowercases login names before the lookup (username_format = %Lu).
  const name = user.toLowerCase();
  if (!USER_RE.test(name)) throw new Error(`mailenv: not a usable mail address: ${JSON.stringify(user)}`);
  if (password.length === 0 || /[\r\n\0]/.test(password)) throw new Error('mailenv: the password must be non-empty and on one line');
  const entry = `${name}:${pbkdf2Hash(password)}::::::`;
  const usersDir = usersDirOf(env.passwdFile);
  await ensureUsersDir(usersDir);
  const userFile = path.join(usersDir, name);
  const existed = existsSync(userFile);
  await withLock(`${env.passwdFile}.lock`, 30_000, async () => {
    const lines = (await fs.readFile(env.passwdFile, 'utf8').catch(() => '')).split('\n').filter((s) => s.length > 0);
    const at = lines.findIndex((s) => s.startsWith(`${name}:`));
    if (at >= 0) lines[at] = entry;
    else lines.push(entry);
    await replacePasswdFile(env.passwdFile, `${lines.join('\n')}\n`);
    await replacePasswdFile(userFile, `${entry}\n`);
  });
  // A changed file is noticed at Dovecot's next once-a-second check: wait for that second.
  if (existed) await sleep(1000 - (Date.now() % 1000) + 10);
}

/** Gives every user listed in the passwd-file (edited by hand, or by an older version) a file in users.d/. */
export async function syncUsersDir(l: Layout): Promise<void> {
  await ensureUsersDir(l.usersDir);
  if (!existsSync(l.passwdFile)) await replacePasswdFile(l.passwdFile, '');
  const lines = (await fs.readFile(l.passwdFile, 'utf8')).split('\n').filter((s) => s.length > 0 && !s.startsWith('#'));
  for (const line of lines) {
    const name = line.slice(0, line.indexOf(':'));
    if (!USER_RE.test(name)) continue;
    const file = path.join(l.usersDir, name);
    const current = await fs.readFile(file, 'utf8').catch(() => '');
    if (current.trim() !== line.trim()) await replacePasswdFile(file, `${line}\n`);
  }
}

export async function ensureMasterUsersFile(l: Layout, password: string): Promise<void> {
  const current = await fs.readFile(l.masterUsersFile, 'utf8').catch(() => '');
  const line = current.split('\n').find((s) => s.startsWith(`${MASTER_USER}:`));
  const hash = line?.split(':')[1] ?? '';
  if (pbkdf2Verify(hash, password)) {
    await fs.chown(l.masterUsersFile, 0, (await passwdOwner()).gid);
    return;
  }
  await replacePasswdFile(l.masterUsersFile, `${MASTER_USER}:${pbkdf2Hash(password)}::::::\n`);
}
