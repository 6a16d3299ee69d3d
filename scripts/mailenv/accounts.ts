// System users and groups: the mail owner, and those Dovecot and Postfix run as.
import { runCommand } from './commands.ts';
import { VMAIL_USER } from './layout.ts';

export interface Account {
  uid: number;
  gid: number;
}

export async function lookupUser(name: string): Promise<Account | null> {
  const res = await runCommand('getent', ['passwd', name]);
  if (res.code !== 0) return null;
  const f = res.stdout.trim().split(':');
  return { uid: Number(f[2]), gid: Number(f[3]) };
}

export async function lookupGroupId(name: string): Promise<number | null> {
  const res = await runCommand('getent', ['group', name]);
  return res.code === 0 ? Number(res.stdout.trim().split(':')[2]) : null;
}

/** The unprivileged system user owning all mail; created when missing. */
export async function ensureVmailUser(): Promise<Account> {
  const found = await lookupUser(VMAIL_USER);
  if (found) return found;
  const res = await runCommand('useradd', [
    '--system',
    '--user-group',
    '--no-create-home',
    '--home-dir',
    '/nonexistent',
    '--shell',
    '/usr/sbin/nologin',
    '--comment',
    'Postern mail storage',
    VMAIL_USER,
  ]);
  // Another process may have created it meanwhile.
  const created = await lookupUser(VMAIL_USER);
  if (!created) throw new Error(`mailenv: useradd ${VMAIL_USER} failed: ${res.stderr.trim()}`);
  return created;
}
