// `postern admin inbox add --create-imap-user`: adds the Dovecot user to the bundled mail
// environment (scripts/mailenv.ts). Against your own Dovecot, create users your usual way.
import { randomBytes } from 'node:crypto';
import { addUser, status } from './mailenv.ts';

export async function createBundledImapUser(user: string, password?: string): Promise<string> {
  const { env } = await status();
  const secret = password ?? randomBytes(18).toString('base64url');
  await addUser(env, user, secret);
  return secret;
}
