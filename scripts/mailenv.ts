/**
 * Postern's real mail environment: Dovecot (IMAP + LMTP), Postfix (SMTP relay), an SMTP sink
 * standing in for the internet, and a private Redis, all on 127.0.0.1 and non-standard ports,
 * all state under one data directory, no systemd. Tests, `postern demo` and developers share it.
 *
 *   node --import tsx scripts/mailenv.ts up|down|status|add-user USER [PASSWORD]
 *
 * Runs as root: Dovecot and Postfix masters need it, and missing packages are installed with
 * apt-get. Configuration comes from the templates in docker/ (shared with the Docker image).
 *
 * This file is the public API and the command line; the work is done in scripts/mailenv/
 * (one service per file in services/, every port in ports.ts).
 */
import { randomBytes } from 'node:crypto';
import { realpathSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { addUser } from './mailenv/passwd.ts';
import { down, status, up } from './mailenv/lifecycle.ts';

export { runCommand, type CommandResult } from './mailenv/commands.ts';
export { posternEnv, type MailEnv } from './mailenv/env.ts';
export type { MailEnvOptions } from './mailenv/layout.ts';
export { down, ensurePackages, portsFree, status, up } from './mailenv/lifecycle.ts';
export { addUser } from './mailenv/passwd.ts';
export { flushQueue } from './mailenv/services/postfix.ts';
export { addSenderLogin, addSenderLogins } from './mailenv/sender-logins.ts';
export type { ServiceName } from './mailenv/services/index.ts';
export { readSink, type SinkMessage } from './mailenv/sink-messages.ts';

async function cli(argv: string[]): Promise<unknown> {
  const [command, ...args] = argv;
  switch (command) {
    case 'up':
      return up();
    case 'down':
      return down();
    case 'status':
      return status();
    case 'add-user': {
      const [user, given] = args;
      if (!user) throw new Error('usage: mailenv add-user USER [PASSWORD]');
      const password = given ?? randomBytes(12).toString('base64url');
      const { env } = await status();
      await addUser(env, user, password);
      return { user: user.toLowerCase(), password, imap: env.imap, smtp: env.smtp };
    }
    default:
      throw new Error('usage: mailenv up|down|status|add-user USER [PASSWORD]');
  }
}

/** Whether the module at `url` is the program run (node scripts/x.ts), not imported. */
export function isMain(url: string = import.meta.url): boolean {
  if (!process.argv[1]) return false;
  try {
    return realpathSync(process.argv[1]) === realpathSync(fileURLToPath(url));
  } catch {
    return false;
  }
}

if (isMain()) {
  cli(process.argv.slice(2)).then(
    (result) => {
      process.stdout.write(`${JSON.stringify(result, null, 2)}\n`);
    },
    (e: unknown) => {
      process.stdout.write(`${JSON.stringify({ error: e instanceof Error ? e.message : String(e) }, null, 2)}\n`);
      process.exitCode = 1;
    },
  );
}
