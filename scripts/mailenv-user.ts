// `postern admin inbox add --create-imap-user`: adds the Dovecot user to the bundled mail
// environment (scripts/mailenv.ts), and lets it send as the inbox's other addresses through
// Postfix's submission (its sender login table), as sending needs (docs/sending.md). Against
// your own Dovecot and Postfix, create users and sender logins your usual way.
import { randomBytes } from 'node:crypto';
import { parseArgs } from 'node:util';
import { addSenderLogins, addUser, isMain, status } from './mailenv.ts';

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

// Run by `postern admin inbox add --create-imap-user` (bin/postern.ts) as a process of its own:
// `mailenv-user.ts USER [--password PW] [--address ADDR...]` prints {"password"} or {"error"}.
if (isMain(import.meta.url)) {
  const { values, positionals } = parseArgs({
    args: process.argv.slice(2),
    options: { password: { type: 'string' }, address: { type: 'string', multiple: true } },
    allowPositionals: true,
  });
  createBundledImapUser(positionals[0]!, values.password, values.address ?? []).then(
    (password) => process.stdout.write(`${JSON.stringify({ password })}\n`),
    (err: unknown) => {
      process.stdout.write(`${JSON.stringify({ error: (err as Error).message ?? String(err) })}\n`);
      process.exitCode = 1;
    },
  );
}
