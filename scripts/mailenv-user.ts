// `postern admin inbox add --create-imap-user`: adds the Dovecot user to the bundled mail
// environment (scripts/mailenv.ts), and lets it send as the inbox's other addresses through
// Postfix's submission (its sender login table), as sending needs (docs/sending.md). Against
// your own Dovecot and Postfix, create users and sender logins your usual way.
import { randomBytes } from 'node:crypto';
import { addSenderLogins, addUser, status } from './mailenv.ts';

export async function createBundledImapUser(user: string, password?: string, addresses: readonly string[] = []): Promise<string> {
  const { env } = await status();
  const secret = password ?? randomBytes(18).toString('base64url');
  await addUser(env, user, secret);
  // The user's own name is its own already (the table's regexp); every other address is listed.
  const extra = [...new Set(addresses.map((a) => a.toLowerCase()))].filter((a) => a !== user.toLowerCase());
  if (extra.length > 0)
    await addSenderLogins(
      env,
      extra.map((a) => [a, user] as const),
    );
  return secret;
}
