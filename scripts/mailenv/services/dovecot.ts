// Dovecot: IMAP for Postern, LMTP for Postfix's local deliveries, the mail store itself.
import * as fs from 'node:fs/promises';
import * as path from 'node:path';
import { mustRun, runStarter } from '../commands.ts';
import { VMAIL_USER, type Layout } from '../layout.ts';
import { HOST, ports } from '../ports.ts';
import { procCmdline, procCwd, signal, waitGone } from '../processes.ts';
import { renderTemplate } from '../templates.ts';
import type { PrepareContext, Service } from './service.ts';

export const dovecot: Service<'dovecot'> = {
  name: 'dovecot',
  packages: [
    { pkg: 'dovecot-imapd', files: ['/usr/sbin/dovecot', '/usr/bin/doveconf', '/usr/lib/dovecot/imap'] },
    { pkg: 'dovecot-lmtpd', files: ['/usr/lib/dovecot/lmtp'] },
    // Body search from a full-text index (docs/search.md, "Body and text").
    { pkg: 'dovecot-fts-xapian', files: ['/usr/lib/dovecot/modules/lib21_fts_xapian_plugin.so'] },
    // ss(8): test/mail/dovecot-lmtp.test.ts watches the ingress's LMTP connections to Dovecot.
    { pkg: 'iproute2', files: ['/usr/bin/ss'] },
  ],

  async prepare(l: Layout, { vmail }: PrepareContext): Promise<void> {
    for (const d of [l.dovecotDir, l.dovecotStateDir, l.dovecotBaseDir]) await fs.mkdir(d, { recursive: true, mode: 0o755 });
    await fs.mkdir(l.mailRoot, { recursive: true, mode: 0o700 });
    await fs.chown(l.mailRoot, vmail.uid, vmail.gid);
  },

  async configure(l: Layout, { vmail }: PrepareContext): Promise<boolean> {
    const p = ports(l.basePort);
    // The push script is read by the imap and lmtp processes (the vmail user): 0644 like the config.
    const script = await renderTemplate('dovecot/postern-push.lua', l.pushLuaFile, {});
    const conf = await renderTemplate('dovecot/dovecot.conf', l.dovecotConf, {
      BASE_DIR: l.dovecotBaseDir,
      STATE_DIR: l.dovecotStateDir,
      INSTANCE_NAME: `postern-${p.imap}`,
      LOG_PATH: l.dovecotLog,
      LISTEN: HOST,
      // Tests try wrong passwords on purpose; nobody else can reach loopback.
      AUTH_FAILURE_DELAY: '0 secs',
      AUTH_PENALTY_SOCKET_MODE: '0',
      IMAP_PORT: p.imap,
      LMTP_PORT: p.lmtp,
      SASL_PORT: p.sasl,
      MASTER_USERS_FILE: l.masterUsersFile,
      USERS_DIR: l.usersDir,
      VMAIL_USER,
      VMAIL_UID: vmail.uid,
      MAIL_ROOT: l.mailRoot,
      CRYPT_PRIVATE_KEY: l.cryptPrivateKey,
      CRYPT_PUBLIC_KEY: l.cryptPublicKey,
      PUSH_LUA_FILE: l.pushLuaFile,
      PUSH_URL: `http://${HOST}:${p.hints}/hints`,
      PUSH_SECRET_FILE: l.pushSecretFile,
    });
    return script || conf;
  },

  async reload(l: Layout): Promise<void> {
    await mustRun('dovecot', ['-c', l.dovecotConf, 'reload'], 'reloading dovecot');
  },

  probes(l: Layout) {
    const p = ports(l.basePort);
    return [
      { what: 'IMAP', port: p.imap, expect: '* OK', quit: 'a LOGOUT\r\n' },
      { what: 'LMTP', port: p.lmtp, expect: '220 ', quit: 'QUIT\r\n' },
    ];
  },

  log: (l) => l.dovecotLog,
  pidFile: (l) => l.dovecotPidFile,
  isOurs: (l, pid) => procCmdline(pid).includes(l.dovecotConf),

  async start(l: Layout): Promise<void> {
    // Only called when the pid file names no live Dovecot of ours; Dovecot itself would refuse to
    // start while that pid exists at all (a not yet reaped zombie, or a reused pid).
    await fs.rm(l.dovecotPidFile, { force: true });
    await runStarter('dovecot', ['-c', l.dovecotConf], path.join(l.dovecotDir, 'start.out'), `starting dovecot (log: ${l.dovecotLog})`);
  },
  // Dovecot's master shuts down cleanly on SIGTERM: the default stop.
  async afterStop(l: Layout): Promise<void> {
    // An indexer-worker busy with a large mailbox (a first body search) can outlive its master:
    // it is ours when it runs in this env dir (Dovecot's processes work in base_dir or the user's
    // home), whatever its title ("dovecot-<instance_name>/indexer-worker").
    const orphans = (await fs.readdir('/proc'))
      .filter((name) => /^\d+$/.test(name))
      .map(Number)
      .filter((pid) => /^dovecot[^/]*\//.test(procCmdline(pid)[0] ?? '') && isInside(procCwd(pid), l.dir));
    for (const pid of orphans) signal(pid, 'SIGKILL');
    if ((await waitGone(orphans, 5000)).length > 0) throw new Error(`mailenv: dovecot processes ${orphans.join(' ')} did not exit`);
  },
};

function isInside(dir: string | undefined, root: string): boolean {
  return dir !== undefined && (dir === root || dir.startsWith(root + path.sep));
}
