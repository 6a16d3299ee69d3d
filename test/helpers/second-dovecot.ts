// A second Dovecot for tests that need one configured otherwise than the environment's (no list
// index: test/mail/mail-no-notify.test.ts; no \\Archive folder: test/mail/organize.test.ts).
import { execFile, spawn } from 'node:child_process';
import {
  chmodSync,
  chownSync,
  closeSync,
  existsSync,
  mkdirSync,
  openSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { ImapFlow } from 'imapflow';
import { mailEnv } from './harness.ts';
import { until } from './mail-fixtures.ts';
import { freePort } from './processes.ts';

const run = promisify(execFile);

export type Replace = (text: string, pattern: RegExp, by: string) => string;

/**
 * A Dovecot of the test's own, rendered from the running environment's configuration and then
 * changed by `change` (which gets a `replace` that fails when its pattern is missing), on its own
 * port and directories; the users are the environment's.
 */
export async function startSecondDovecot(
  name: string,
  change: (conf: string, replace: Replace) => string,
): Promise<{ port: number; dir: string; stop(): Promise<void> }> {
  const env = mailEnv();
  const dir = mkdtempSync(join(tmpdir(), `postern-${name}-`));
  // Dovecot's unprivileged processes must reach it; the mail root belongs to the mail user.
  chmodSync(dir, 0o755);
  const owner = statSync(join(env.dir, 'mail'));
  const mail = join(dir, 'mail');
  mkdirSync(mail, { mode: 0o700 });
  chownSync(mail, owner.uid, owner.gid);
  for (const d of ['run', 'state']) mkdirSync(join(dir, d), { mode: 0o755 });
  const port = await freePort();
  const base = readFileSync(join(env.dir, 'dovecot', 'dovecot.conf'), 'utf8');
  const replace = (text: string, pattern: RegExp, by: string) => {
    if (!pattern.test(text)) throw new Error(`dovecot.conf: no ${pattern}`);
    return text.replace(pattern, by);
  };
  let conf = base;
  conf = replace(conf, /^base_dir = .*$/m, `base_dir = ${join(dir, 'run')}`);
  conf = replace(conf, /^state_dir = .*$/m, `state_dir = ${join(dir, 'state')}`);
  conf = replace(conf, /^instance_name = .*$/m, `instance_name = postern-${name}-${port}`);
  conf = replace(conf, /^log_path = .*$/m, `log_path = ${join(dir, 'dovecot.log')}`);
  conf = replace(conf, /home=\S+\/%d\/%n/, `home=${mail}/%d/%n`);
  conf = replace(conf, /(inet_listener imap \{\s*port = )\d+/, `$1${port}`);
  conf = replace(conf, /(inet_listener lmtp \{\s*port = )\d+/, '$10');
  // Postfix's SASL listener belongs to the environment's Dovecot.
  conf = replace(conf, /(inet_listener sasl-postfix \{\s*port = )\d+/, '$10');
  conf = change(conf, replace);
  const file = join(dir, 'dovecot.conf');
  writeFileSync(file, conf);
  // Dovecot's master stays behind with the starter's stdio: give it a file, and wait for the starter only.
  const out = openSync(join(dir, 'start.out'), 'w');
  try {
    const code = await new Promise<number | null>((resolve, reject) => {
      const child = spawn('dovecot', ['-c', file], { stdio: ['ignore', out, out] });
      child.on('error', reject);
      child.on('exit', resolve);
    });
    if (code !== 0) throw new Error(`dovecot did not start (exit ${code}): ${readFileSync(join(dir, 'start.out'), 'utf8')}`);
  } finally {
    closeSync(out);
  }
  await until('the second Dovecot to answer', async () => {
    const probe = new ImapFlow({ host: env.imap.host, port, secure: false, logger: false, auth: { user: 'nobody', pass: 'x' } });
    probe.on('error', () => undefined);
    try {
      await probe.connect();
      return true;
    } catch (err) {
      // Refused until it listens; an authentication failure means it is up.
      return (err as { authenticationFailed?: boolean }).authenticationFailed === true;
    } finally {
      probe.close();
    }
  });
  return {
    port,
    dir,
    async stop() {
      await run('dovecot', ['-c', file, 'stop']).catch(() => undefined);
      await until('the second Dovecot to stop', async () => !existsSync(join(dir, 'run', 'master.pid'))).catch(() => undefined);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
