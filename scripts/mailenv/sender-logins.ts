// Postfix's smtpd_sender_login_maps for the submission service: which login may use which
// envelope sender. Every address belongs to the user of the same name (a regexp), and extra
// addresses an inbox sends as are listed in a hash table. Postfix's daemons notice a rebuilt
// hash table and restart before their next connection, so an added line applies without a reload.
import { existsSync } from 'node:fs';
import * as fs from 'node:fs/promises';
import * as path from 'node:path';
import { mustRun } from './commands.ts';
import type { MailEnv } from './env.ts';
import { withLock, writeAtomic } from './files.ts';
import { layout, type Layout } from './layout.ts';

const tableOf = (l: Layout) => path.join(l.postfixRoot, 'sender-logins');
const selfOf = (l: Layout) => path.join(l.postfixRoot, 'sender-self.regexp');

/** The value of smtpd_sender_login_maps (no spaces: it goes into master.cf as an -o option). */
export function senderLoginMaps(l: Layout): string {
  return `hash:${tableOf(l)},regexp:${selfOf(l)}`;
}

export async function prepareSenderLogins(l: Layout): Promise<void> {
  await writeAtomic(selfOf(l), '# Every address is owned by the login of the same name.\n/^(.+)$/ ${1}\n', 0o644);
  if (!existsSync(tableOf(l))) await writeAtomic(tableOf(l), '', 0o644);
  if (!existsSync(`${tableOf(l)}.db`))
    await mustRun('postmap', ['-c', l.postfixDir, `hash:${tableOf(l)}`], 'building the sender login table');
}

/** Lets `user` send with envelope sender `address` through submission (an inbox's extra address). */
export async function addSenderLogin(env: MailEnv, address: string, user: string): Promise<void> {
  await addSenderLogins(env, [[address, user]]);
}

/** Several at once: one rebuild of the table. */
export async function addSenderLogins(env: MailEnv, entries: ReadonlyArray<readonly [address: string, user: string]>): Promise<void> {
  const l = layout({ dir: env.dir });
  const table = tableOf(l);
  await withLock(`${table}.lock`, 30_000, async () => {
    const owners = new Map<string, string>();
    for (const line of (await fs.readFile(table, 'utf8').catch(() => '')).split('\n')) {
      const [key, owner] = line.split(' ');
      if (key && owner) owners.set(key, owner);
    }
    for (const [address, user] of entries) owners.set(address.toLowerCase(), user.toLowerCase());
    await writeAtomic(table, [...owners].map(([k, v]) => `${k} ${v}\n`).join(''), 0o644);
    await mustRun('postmap', ['-c', l.postfixDir, `hash:${table}`], 'rebuilding the sender login table');
  });
}
