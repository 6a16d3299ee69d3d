// Postfix: the SMTP relay Postern submits to, delivering the local domain to Dovecot over LMTP
// and everything else to the sink.
import * as fs from 'node:fs/promises';
import * as path from 'node:path';
import { lookupUser } from '../accounts.ts';
import { mustRun, runCommand, runStarter } from '../commands.ts';
import { DOMAIN, INGRESS_DOMAIN, type Layout } from '../layout.ts';
import { HOST, ports } from '../ports.ts';
import { procEnviron, signal } from '../processes.ts';
import { renderTemplate } from '../templates.ts';
import type { Service } from './service.ts';
import { prepareSenderLogins, senderLoginMaps } from '../sender-logins.ts';

export const postfix: Service<'postfix'> = {
  name: 'postfix',
  packages: [{ pkg: 'postfix', files: ['/usr/sbin/postfix', '/usr/sbin/postconf'] }],

  async prepare(l: Layout): Promise<void> {
    for (const d of [l.postfixDir, l.postfixQueueDir]) await fs.mkdir(d, { recursive: true, mode: 0o755 });
    const account = await lookupUser('postfix');
    await fs.mkdir(l.postfixDataDir, { recursive: true, mode: 0o700 });
    if (account) await fs.chown(l.postfixDataDir, account.uid, account.gid);
  },

  async configure(l: Layout): Promise<boolean> {
    const p = ports(l.basePort);
    const vars = {
      QUEUE_DIR: l.postfixQueueDir,
      DATA_DIR: l.postfixDataDir,
      SYSLOG_NAME: `postern-postfix-${p.smtp}`,
      MAILLOG_FILE: l.postfixLog,
      MAILLOG_PREFIX: l.postfixRoot,
      MYHOSTNAME: `mx.${DOMAIN}`,
      LISTEN: HOST,
      MYNETWORKS: '127.0.0.0/8',
      DOMAIN,
      LMTP_HOST: HOST,
      LMTP_PORT: p.lmtp,
      INGRESS_DOMAIN,
      INGRESS_HOST: HOST,
      INGRESS_PORT: p.ingress,
      // alias-NAME@INGRESS_DOMAIN → NAME@INGRESS_DOMAIN: an alias Postfix rewrites before the ingress
      // ($$ is a literal $ in main.cf).
      VIRTUAL_ALIAS_MAPS: `regexp:{ {/^alias-(.+)@${INGRESS_DOMAIN.replace(/\./g, '\\.')}$/ $1@${INGRESS_DOMAIN}} }`.replaceAll(
        '$',
        '$$$$',
      ),
      RELAYHOST: `[${HOST}]:${p.sink}`,
      RETRY_DELAY: '1s',
      MAX_BACKOFF: '5s',
      SMTP_PORT: p.smtp,
      SUBMISSION_PORT: p.submission,
      SASL_HOST: HOST,
      SASL_PORT: p.sasl,
      SENDER_LOGIN_MAPS: senderLoginMaps(l),
    };
    const mainCf = await renderTemplate('postfix/main.cf', path.join(l.postfixDir, 'main.cf'), vars);
    const masterCf = await renderTemplate('postfix/master.cf', path.join(l.postfixDir, 'master.cf'), vars);
    // postmap reads main.cf: the table is built once it is in place.
    await prepareSenderLogins(l);
    return mainCf || masterCf;
  },

  async reload(l: Layout): Promise<void> {
    await mustRun('postfix', ['-c', l.postfixDir, 'reload'], 'reloading postfix');
  },

  probes(l: Layout) {
    return [
      { what: 'SMTP', port: ports(l.basePort).smtp, expect: '220 ', quit: 'QUIT\r\n' },
      { what: 'submission', port: ports(l.basePort).submission, expect: '220 ', quit: 'QUIT\r\n' },
    ];
  },

  log: (l) => l.postfixLog,
  pidFile: (l) => l.postfixPidFile,
  isOurs: (l, pid) => procEnviron(pid, 'MAIL_CONFIG') === l.postfixDir,

  async start(l: Layout): Promise<void> {
    await runStarter(
      'postfix',
      ['-c', l.postfixDir, 'start'],
      path.join(l.postfixRoot, 'start.out'),
      `starting postfix (log: ${l.postfixLog})`,
    );
  },

  async stop(l: Layout, pid: number): Promise<void> {
    // Postfix's own stop also removes its lock and pid files.
    const res = await runCommand('postfix', ['-c', l.postfixDir, 'stop']);
    if (res.code !== 0) signal(pid, 'SIGTERM');
  },
};

/**
 * Asks this environment's Postfix to retry its deferred mail now (`postqueue -f`), forgetting any
 * next hop it marked dead: mail for the ingress waits for Postern then, not for Postfix's backoff
 * of minutes (a next hop refused while no Postern listened on it is paused for a while).
 */
export async function flushQueue(envDir: string): Promise<void> {
  await mustRun('postqueue', ['-c', path.join(envDir, 'postfix', 'conf'), '-f'], 'flushing the Postfix queue');
}
