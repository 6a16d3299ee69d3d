// Where everything of one environment lives: every path under its data directory, its base port.
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import { MAX_PORT_OFFSET } from './ports.ts';

export interface MailEnvOptions {
  dir?: string;
  basePort?: number;
}

/** The local mail domain, delivered into Dovecot. */
export const DOMAIN = 'postern.test';
/**
 * Mail for this domain goes through Postern's LMTP ingress (Postfix → Postern → Dovecot), as all
 * of a deployment's mail does; DOMAIN goes straight to Dovecot, so tests without a Postern
 * listening for LMTP still get their mail. An inbox receiving here has its IMAP user in DOMAIN,
 * or here too: then no form of its Dovecot user reaches Dovecot around the ingress (the demo's
 * inboxes, scripts/demo.ts).
 */
export const INGRESS_DOMAIN = 'ingress.postern.test';
/** Dovecot master user: log in as `user*postern-master`, or SASL PLAIN with authzid = user. */
export const MASTER_USER = 'postern-master';
/** The unprivileged system user owning all mail. */
export const VMAIL_USER = 'postern-vmail';

const SELF_DIR = path.dirname(fileURLToPath(import.meta.url));

/** The repository root: the nearest ancestor holding the config templates (works from dist/ too). */
export function findRepoRoot(): string {
  for (let d = SELF_DIR; ; d = path.dirname(d)) {
    if (existsSync(path.join(d, 'docker', 'dovecot', 'dovecot.conf'))) return d;
    if (path.dirname(d) === d) throw new Error(`mailenv: docker/dovecot/dovecot.conf not found above ${SELF_DIR}`);
  }
}

export interface Layout {
  dir: string;
  basePort: number;
  lockFile: string;
  masterPasswordFile: string;
  dovecotDir: string;
  dovecotConf: string;
  dovecotBaseDir: string;
  dovecotStateDir: string;
  dovecotLog: string;
  dovecotPidFile: string;
  passwdFile: string;
  usersDir: string;
  masterUsersFile: string;
  cryptPrivateKey: string;
  cryptPublicKey: string;
  /** The push-notification Lua script Dovecot runs (docker/dovecot/postern-push.lua), and the hints' shared secret. */
  pushLuaFile: string;
  pushSecretFile: string;
  mailRoot: string;
  postfixRoot: string;
  /** config_directory; only main.cf and master.cf (postfix check wants all of it owned by root). */
  postfixDir: string;
  postfixQueueDir: string;
  postfixDataDir: string;
  postfixLog: string;
  postfixPidFile: string;
  sinkDir: string;
  sinkMessagesDir: string;
  sinkPidFile: string;
  sinkLog: string;
  redisDir: string;
  redisPidFile: string;
  redisLog: string;
  /** The private PostgreSQL cluster: its data directory (owned by VMAIL_USER), socket dir, log, password. */
  postgresDir: string;
  postgresDataDir: string;
  postgresSocketDir: string;
  postgresLog: string;
  postgresPidFile: string;
  postgresPasswordFile: string;
}

// Unix socket paths are limited to 107 bytes; Dovecot's longest below base_dir is about 25.
const MAX_BASE_DIR_LENGTH = 80;

export function layout(opts: MailEnvOptions = {}): Layout {
  const dir = path.resolve(opts.dir ?? process.env.POSTERN_ENV_DIR ?? path.join(findRepoRoot(), '.mailenv'));
  // Dovecot and Postfix split their settings on whitespace and commas.
  if (/[\s,"'{}%$\\]/.test(dir)) throw new Error(`mailenv: the env dir must not contain whitespace or ,"'{}%$\\: ${dir}`);
  const basePort = opts.basePort ?? Number(process.env.POSTERN_ENV_BASE_PORT ?? 14100);
  if (!Number.isInteger(basePort) || basePort < 1024 || basePort > 65535 - MAX_PORT_OFFSET) {
    throw new Error(`mailenv: basePort must be an integer between 1024 and ${65535 - MAX_PORT_OFFSET}, got ${basePort}`);
  }
  const dovecotDir = path.join(dir, 'dovecot');
  let dovecotBaseDir = path.join(dovecotDir, 'run');
  if (dovecotBaseDir.length > MAX_BASE_DIR_LENGTH) {
    const h = createHash('sha256').update(dir).digest('hex').slice(0, 12);
    dovecotBaseDir = path.join(os.tmpdir(), `postern-dovecot-${h}`);
  }
  const postfixRoot = path.join(dir, 'postfix');
  const sinkDir = path.join(dir, 'sink');
  const redisDir = path.join(dir, 'redis');
  const postgresDir = path.join(dir, 'postgres');
  const postgresDataDir = path.join(postgresDir, 'data');
  // The socket path (dir + "/.s.PGSQL.NNNNN") must fit in 107 bytes too.
  let postgresSocketDir = path.join(postgresDir, 'run');
  if (postgresSocketDir.length > MAX_BASE_DIR_LENGTH) {
    const h = createHash('sha256').update(dir).digest('hex').slice(0, 12);
    postgresSocketDir = path.join(os.tmpdir(), `postern-postgres-${h}`);
  }
  return {
    dir,
    basePort,
    lockFile: path.join(dir, '.lock'),
    masterPasswordFile: path.join(dir, 'master-password'),
    dovecotDir,
    dovecotConf: path.join(dovecotDir, 'dovecot.conf'),
    dovecotBaseDir,
    dovecotStateDir: path.join(dovecotDir, 'state'),
    dovecotLog: path.join(dovecotDir, 'dovecot.log'),
    dovecotPidFile: path.join(dovecotBaseDir, 'master.pid'),
    passwdFile: path.join(dovecotDir, 'users'),
    usersDir: path.join(dovecotDir, 'users.d'),
    masterUsersFile: path.join(dovecotDir, 'master-users'),
    cryptPrivateKey: path.join(dovecotDir, 'mail-crypt', 'ecprivkey.pem'),
    cryptPublicKey: path.join(dovecotDir, 'mail-crypt', 'ecpubkey.pem'),
    pushLuaFile: path.join(dovecotDir, 'postern-push.lua'),
    pushSecretFile: path.join(dovecotDir, 'push-secret'),
    mailRoot: path.join(dir, 'mail'),
    postfixRoot,
    postfixDir: path.join(postfixRoot, 'conf'),
    postfixQueueDir: path.join(postfixRoot, 'spool'),
    postfixDataDir: path.join(postfixRoot, 'data'),
    postfixLog: path.join(postfixRoot, 'postfix.log'),
    postfixPidFile: path.join(postfixRoot, 'spool', 'pid', 'master.pid'),
    sinkDir,
    sinkMessagesDir: path.join(sinkDir, 'messages'),
    sinkPidFile: path.join(sinkDir, 'sink.pid'),
    sinkLog: path.join(sinkDir, 'sink.log'),
    redisDir,
    redisPidFile: path.join(redisDir, 'redis.pid'),
    redisLog: path.join(redisDir, 'redis.log'),
    postgresDir,
    postgresDataDir,
    postgresSocketDir,
    postgresLog: path.join(postgresDir, 'postgres.log'),
    postgresPidFile: path.join(postgresDataDir, 'postmaster.pid'),
    postgresPasswordFile: path.join(postgresDir, 'password'),
  };
}
