// The IMAP part of readiness (GET /readyz): a fresh master login, as every pool connection makes,
// then LOGOUT. Dovecot refuses a master login as an unknown user exactly as it refuses a wrong
// master password, so the login is made as a user that exists: an inbox's IMAP user, remembered
// while it keeps working, another tried when it is refused. With no inbox yet there is no one to
// log in as, and the check is Dovecot's greeting alone.
import { connect as netConnect } from 'node:net';
import { connect as tlsConnect } from 'node:tls';
import { unavailable } from '../../lib/errors.ts';
import { asUser, type ImapSettings } from './pool.ts';

export type ImapCheckSettings = Pick<ImapSettings, 'host' | 'port' | 'secure' | 'masterUser' | 'masterPassword' | 'masterSeparator'>;

export class ImapLoginCheck {
  private user: string | null = null;

  constructor(
    private readonly settings: ImapCheckSettings,
    /** One of the IMAP users Postern serves, other than `not` (null: none). */
    private readonly someUser: (not?: string) => Promise<string | null>,
    private readonly timeoutMs: number,
  ) {}

  async check(): Promise<void> {
    const user = this.user ?? (await this.someUser());
    if (user === null) return this.greeting();
    try {
      await this.login(user);
      this.user = user;
    } catch (err) {
      if (!isRefused(err)) throw why(err);
      // That user may be gone from Dovecot (an inbox left in Postern): one more try as another.
      this.user = null;
      const other = await this.someUser(user);
      if (other === null) throw why(err);
      await this.login(other).catch((again: unknown) => {
        throw why(again);
      });
      this.user = other;
    }
  }

  private async login(user: string): Promise<void> {
    const ms = this.timeoutMs;
    const client = asUser(this.settings, user, { connectionTimeout: ms, greetingTimeout: ms, socketTimeout: ms, disableAutoIdle: true });
    client.on('error', () => undefined);
    try {
      await client.connect();
    } catch (err) {
      client.close();
      throw err;
    }
    await client.logout().catch(() => client.close());
  }

  /** Connects and reads Dovecot's "* OK" greeting, then logs out. */
  private greeting(): Promise<void> {
    const { host, port, secure } = this.settings;
    return new Promise((resolve, reject) => {
      const socket = secure ? tlsConnect({ host, port }) : netConnect({ host, port });
      let seen = '';
      const done = (err?: Error) => {
        socket.destroy();
        if (err) reject(unavailable(`no IMAP greeting: ${(err as NodeJS.ErrnoException).code ?? err.message}`));
        else resolve();
      };
      socket.setTimeout(this.timeoutMs, () => done(new Error(`none within ${this.timeoutMs} ms`)));
      socket.on('error', done);
      socket.on('close', () => done(new Error('the connection closed')));
      socket.on('data', (chunk: Buffer) => {
        seen += chunk.toString('latin1');
        if (!seen.includes('\n')) return;
        if (!/^\* (OK|PREAUTH)/.test(seen)) return done(new Error('an unexpected greeting'));
        socket.end('a LOGOUT\r\n');
        done();
      });
    });
  }
}

function isRefused(err: unknown): boolean {
  return (err as { authenticationFailed?: boolean }).authenticationFailed === true;
}

/** Said to anyone who asks (/readyz is unauthenticated): no user name, no address. */
function why(err: unknown) {
  if (isRefused(err)) return unavailable('the master login was refused');
  const e = err as Error & { code?: string };
  return unavailable(`no master login: ${e.code ?? e.message}`);
}
