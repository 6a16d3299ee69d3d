// The ingress's hand-on to Dovecot keeps its LMTP sessions: consecutive messages go over the same
// connection (RSET between them), and a pooled session that Dovecot's side dropped is replaced.
// Connections are observed with ss(8): this process's sockets to Dovecot's LMTP port.
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { promisify } from 'node:util';
import { expect } from 'chai';
import { ImapFlow } from 'imapflow';
import { DovecotLmtp } from '../../adapters/smtp/dovecot-lmtp.ts';
import { addUser } from '../../scripts/mailenv.ts';
import { mailEnv, unique } from '../helpers/harness.ts';
import { rfc822, until } from '../helpers/mail-fixtures.ts';

const run = promisify(execFile);

/** Established TCP connections matching an ss filter: local port and owning pid of each. */
async function sockets(filter: string): Promise<Array<{ localPort: number; peerPort: number; pid: number }>> {
  const { stdout } = await run('ss', ['-tnpH', 'state', 'established', filter]);
  return stdout
    .split('\n')
    .filter(Boolean)
    .map((line) => {
      const [local, peer] = line.trim().split(/\s+/).slice(2, 4) as [string, string];
      return {
        localPort: Number(local.split(':').pop()),
        peerPort: Number(peer.split(':').pop()),
        pid: Number(/pid=(\d+)/.exec(line)?.[1] ?? 0),
      };
    });
}

/** This process's connections to Dovecot's LMTP listener. */
const ours = async () => (await sockets(`( dport = :${mailEnv().lmtp.port} )`)).filter((s) => s.pid === process.pid);

describe('hand-on to Dovecot over pooled LMTP sessions', function () {
  this.timeout(60_000);
  let lmtp: DovecotLmtp;
  let user: string;
  let password: string;
  before(async () => {
    const env = mailEnv();
    user = `${unique('pool')}@${env.domain}`;
    password = randomBytes(12).toString('hex');
    await addUser(env, user, password);
    lmtp = new DovecotLmtp(env.lmtp);
  });
  after(async () => lmtp?.close());

  const message = (subject: string) => Buffer.from(rfc822({ subject, to: user }));

  it('delivers consecutive messages over one connection', async () => {
    const ports: number[] = [];
    for (let i = 0; i < 3; i++) {
      expect(await lmtp.deliver({ from: 'a@example.org', to: [user] }, message(`pooled ${i}`))).to.deep.equal([{ ok: true }]);
      // Back in the pool once RSET is answered.
      const [conn] = await until('the session back in the pool', async () => {
        const c = await ours();
        return c.length === 1 && c;
      });
      ports.push(conn!.localPort);
    }
    expect(new Set(ports).size).to.equal(1);
    const client = new ImapFlow({
      host: mailEnv().imap.host,
      port: mailEnv().imap.port,
      secure: false,
      auth: { user, pass: password },
      logger: false,
    });
    await client.connect();
    const status = await client.status('INBOX', { messages: true });
    expect(status && status.messages).to.equal(3);
    await client.logout();
  });

  it('replaces a pooled session that Dovecot dropped, and delivers on a fresh one', async () => {
    const [before] = await ours();
    expect(before, 'a pooled session from the previous test').to.not.equal(undefined);
    // Dovecot's process serving that session (lmtp's client_limit is 1): ended, as a restart would.
    const [server] = await sockets(`( sport = :${mailEnv().lmtp.port} and dport = :${before!.localPort} )`);
    expect(server?.pid).to.be.greaterThan(0);
    process.kill(server!.pid, 'SIGTERM');
    await until('the pooled connection closed', async () => !(await ours()).some((c) => c.localPort === before!.localPort));
    expect(await lmtp.deliver({ from: 'a@example.org', to: [user] }, message('after the drop'))).to.deep.equal([{ ok: true }]);
    const [after] = await until('the new session in the pool', async () => {
      const c = await ours();
      return c.length === 1 && c;
    });
    expect(after!.localPort).to.not.equal(before!.localPort);
  });
});
