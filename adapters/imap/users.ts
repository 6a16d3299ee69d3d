// Whether an IMAP user exists, as `postern admin inbox add` checks before it writes anything: the
// master user logs in as that user, exactly as every connection of the pool will.
import type { MailUsers } from '../../lib/directory/ports.ts';
import { ConfigError } from '../../lib/config.ts';
import { unavailable } from '../../lib/errors.ts';
import { asUser, type ImapSettings } from './pool.ts';

export class ImapMailUsers implements MailUsers {
  constructor(
    private readonly settings: Pick<ImapSettings, 'host' | 'port' | 'secure' | 'masterUser' | 'masterPassword' | 'masterSeparator'>,
  ) {}

  async exists(user: string): Promise<boolean> {
    const s = this.settings;
    if (!s.masterPassword)
      throw new ConfigError(
        'POSTERN_IMAP_MASTER_PASSWORD is not set: cannot check that the IMAP user exists (set it as for postern serve)',
      );
    const client = asUser(s, user);
    client.on('error', () => undefined);
    try {
      await client.connect();
    } catch (err) {
      client.close();
      // Dovecot refuses a master login as an unknown user as it refuses a wrong password.
      if ((err as { authenticationFailed?: boolean }).authenticationFailed === true) return false;
      throw unavailable(`cannot check the IMAP user: the mail server at ${s.host}:${s.port} is not reachable (${(err as Error).message})`);
    }
    await client.logout().catch(() => client.close());
    return true;
  }
}
