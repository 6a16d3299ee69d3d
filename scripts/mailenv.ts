/**
 * Postern's real mail environment: Dovecot (IMAP + LMTP), Postfix (SMTP relay), an SMTP sink
 * standing in for the internet, and a private Redis, all on 127.0.0.1 and non-standard ports,
 * all state under one data directory, no systemd. Tests, `postern demo` and developers share it.
 *
 *   node --import tsx scripts/mailenv.ts up|down|status|add-user USER [PASSWORD]
 *
 * Runs as root: Dovecot and Postfix masters need it, and missing packages are installed with
 * apt-get. Configuration comes from the templates in docker/ (shared with the Docker image).
 */
import { spawn } from 'node:child_process';
import { createHash, pbkdf2Sync, randomBytes, timingSafeEqual } from 'node:crypto';
import { closeSync, existsSync, openSync, readFileSync, readlinkSync, realpathSync, writeSync } from 'node:fs';
import * as fs from 'node:fs/promises';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';

export interface MailEnvOptions { dir?: string; basePort?: number }

export interface MailEnv {
  dir: string;
  /** The local mail domain, delivered into Dovecot. */
  domain: string;
  imap: { host: string; port: number };
  lmtp: { host: string; port: number };
  /** Postfix smtpd: where Postern submits mail, and the MX of `domain`. */
  smtp: { host: string; port: number };
  /** The SMTP sink that receives everything relayed outside `domain`. */
  sink: { host: string; port: number; dir: string };
  redis: { url: string };
  /** Dovecot master user: log in as `user*master.user`, or SASL PLAIN with authzid = user. */
  master: { user: string; password: string };
  passwdFile: string;
}

/** The POSTERN_* variables that point a Postern process at this environment. */
export function posternEnv(env: MailEnv): Record<string, string> {
  return {
    POSTERN_IMAP_HOST: env.imap.host,
    POSTERN_IMAP_PORT: String(env.imap.port),
    POSTERN_IMAP_MASTER_USER: env.master.user,
    POSTERN_IMAP_MASTER_PASSWORD: env.master.password,
    POSTERN_SMTP_HOST: env.smtp.host,
    POSTERN_SMTP_PORT: String(env.smtp.port),
  };
}

export interface SinkMessage { id: string; mailFrom: string; rcptTo: string[]; envid?: string; receivedAt: string; raw: Buffer }

export type ServiceName = 'dovecot' | 'postfix' | 'sink' | 'redis';
const SERVICES: readonly ServiceName[] = ['dovecot', 'postfix', 'sink', 'redis'];

const HOST = '127.0.0.1';
const DOMAIN = 'postern.test';
const MASTER_USER = 'postern-master';
const VMAIL_USER = 'postern-vmail';
const START_TIMEOUT_MS = 20_000;
const STOP_TIMEOUT_MS = 15_000;
const PBKDF2_ROUNDS = 5000;

const SELF_FILE = fileURLToPath(import.meta.url);
const SELF_DIR = path.dirname(SELF_FILE);

/** The repository root: the nearest ancestor holding the config templates (works from dist/ too). */
function findRepoRoot(): string {
  for (let d = SELF_DIR; ; d = path.dirname(d)) {
    if (existsSync(path.join(d, 'docker', 'dovecot', 'dovecot.conf'))) return d;
    if (path.dirname(d) === d) throw new Error(`mailenv: docker/dovecot/dovecot.conf not found above ${SELF_DIR}`);
  }
}

// ---------------------------------------------------------------------------------------------
// Layout

interface Layout {
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
}

// Unix socket paths are limited to 107 bytes; Dovecot's longest below base_dir is about 25.
const MAX_BASE_DIR_LENGTH = 80;

function layout(opts: MailEnvOptions = {}): Layout {
  const dir = path.resolve(opts.dir ?? process.env.POSTERN_ENV_DIR ?? path.join(findRepoRoot(), '.mailenv'));
  // Dovecot and Postfix split their settings on whitespace and commas.
  if (/[\s,"'{}%$\\]/.test(dir)) throw new Error(`mailenv: the env dir must not contain whitespace or ,"'{}%$\\: ${dir}`);
  const basePort = opts.basePort ?? Number(process.env.POSTERN_ENV_BASE_PORT ?? 14100);
  if (!Number.isInteger(basePort) || basePort < 1024 || basePort > 65535 - 100) {
    throw new Error(`mailenv: basePort must be an integer between 1024 and 65435, got ${basePort}`);
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
  };
}

function ports(basePort: number): Record<'imap' | 'lmtp' | 'smtp' | 'sink' | 'redis', number> {
  return { imap: basePort + 43, lmtp: basePort + 24, smtp: basePort + 25, sink: basePort + 26, redis: basePort + 79 };
}

function describe(l: Layout, masterPassword: string): MailEnv {
  const p = ports(l.basePort);
  return {
    dir: l.dir,
    domain: DOMAIN,
    imap: { host: HOST, port: p.imap },
    lmtp: { host: HOST, port: p.lmtp },
    smtp: { host: HOST, port: p.smtp },
    sink: { host: HOST, port: p.sink, dir: l.sinkMessagesDir },
    redis: { url: `redis://${HOST}:${p.redis}` },
    master: { user: MASTER_USER, password: masterPassword },
    passwdFile: l.passwdFile,
  };
}

// ---------------------------------------------------------------------------------------------
// Small utilities

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

function errCode(e: unknown): string | undefined {
  return (e as NodeJS.ErrnoException | null)?.code;
}

export interface CommandResult { code: number; stdout: string; stderr: string }

/** Runs a command to completion; never rejects on a non-zero exit (callers decide). */
export function runCommand(
  cmd: string,
  args: string[],
  opts: { input?: string; env?: NodeJS.ProcessEnv } = {},
): Promise<CommandResult> {
  return new Promise((resolve, reject) => {
    const input = opts.input;
    const child = spawn(cmd, args, { env: opts.env ?? process.env, stdio: [input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'] });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout?.on('data', (b: Buffer) => out.push(b));
    child.stderr?.on('data', (b: Buffer) => err.push(b));
    child.on('error', reject);
    child.on('close', (code, signal) =>
      resolve({
        code: code ?? (signal ? 128 : 1),
        stdout: Buffer.concat(out).toString('utf8'),
        stderr: Buffer.concat(err).toString('utf8'),
      }),
    );
    if (child.stdin) {
      child.stdin.on('error', () => undefined); // a command that exits without reading: EPIPE
      child.stdin.end(input);
    }
  });
}

/**
 * Runs a command that daemonizes. Its forked daemon inherits stdout/stderr, so pipes would
 * never close: the output goes to a file instead, and only the command's own exit is awaited.
 */
async function runStarter(cmd: string, args: string[], outFile: string, what: string): Promise<void> {
  const fd = openSync(outFile, 'w', 0o644);
  let code: number;
  try {
    code = await new Promise<number>((resolve, reject) => {
      const child = spawn(cmd, args, { stdio: ['ignore', fd, fd] });
      child.on('error', reject);
      child.on('exit', (c, sig) => resolve(c ?? (sig ? 128 : 1)));
    });
  } finally {
    closeSync(fd);
  }
  if (code !== 0) throw new Error(`mailenv: ${what} failed (${cmd} ${args.join(' ')}, exit ${code}):\n${await fileTail(outFile)}`);
}

async function mustRun(cmd: string, args: string[], what: string, opts: { input?: string; env?: NodeJS.ProcessEnv } = {}): Promise<CommandResult> {
  const res = await runCommand(cmd, args, opts);
  if (res.code !== 0) throw new Error(`mailenv: ${what} failed (${cmd} ${args.join(' ')}, exit ${res.code}):\n${tail(res.stdout + res.stderr)}`);
  return res;
}

function tail(text: string, lines = 30): string {
  return text.trimEnd().split('\n').slice(-lines).join('\n');
}

async function fileTail(file: string, lines = 30): Promise<string> {
  try {
    return tail(await fs.readFile(file, 'utf8'), lines);
  } catch {
    return `(no ${file})`;
  }
}

/** Writes a file atomically (temp file + rename); returns whether the content changed. */
async function writeAtomic(file: string, content: string | Buffer, mode: number, owner?: { uid: number; gid: number }): Promise<boolean> {
  const current = await fs.readFile(file).catch(() => null);
  const next = typeof content === 'string' ? Buffer.from(content) : content;
  if (current && current.equals(next)) {
    await fs.chmod(file, mode);
    if (owner) await fs.chown(file, owner.uid, owner.gid);
    return false;
  }
  const tmp = `${file}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`;
  try {
    await fs.writeFile(tmp, next, { mode, flag: 'wx' });
    await fs.chmod(tmp, mode); // the umask may have narrowed it
    if (owner) await fs.chown(tmp, owner.uid, owner.gid);
    await fs.rename(tmp, file);
  } catch (e) {
    await fs.rm(tmp, { force: true });
    throw e;
  }
  return true;
}

/**
 * A lock file created with O_EXCL naming its holder's pid, shared by processes. A holder that
 * died leaves it behind; it is taken over once that pid is gone.
 */
async function withLock<T>(lockFile: string, timeoutMs: number, fn: () => Promise<T>): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      const fd = openSync(lockFile, 'wx', 0o600);
      try {
        writeSync(fd, `${process.pid}\n`);
      } finally {
        closeSync(fd);
      }
      break;
    } catch (e) {
      if (errCode(e) !== 'EEXIST') throw e;
    }
    const holder = Number.parseInt((await fs.readFile(lockFile, 'utf8').catch(() => '')).trim(), 10);
    const age = await fs.stat(lockFile).then((s) => Date.now() - s.mtimeMs, () => 0);
    // An empty file younger than a second is a holder between open and write.
    const stale = Number.isInteger(holder) ? !isAlive(holder) : age > 1000;
    if (stale) {
      // Rename first so that two waiters cannot both delete a lock a third just took.
      const moved = `${lockFile}.stale.${process.pid}.${randomBytes(4).toString('hex')}`;
      try {
        await fs.rename(lockFile, moved);
        const movedHolder = Number.parseInt((await fs.readFile(moved, 'utf8').catch(() => '')).trim(), 10);
        if (Number.isInteger(movedHolder) && isAlive(movedHolder)) await fs.link(moved, lockFile).catch(() => undefined);
        await fs.rm(moved, { force: true });
      } catch (e) {
        if (errCode(e) !== 'ENOENT') throw e;
      }
      continue;
    }
    if (Date.now() > deadline) throw new Error(`mailenv: timed out waiting for ${lockFile} (held by pid ${holder})`);
    await sleep(25 + Math.random() * 50);
  }
  try {
    return await fn();
  } finally {
    await fs.rm(lockFile, { force: true });
  }
}

// ---------------------------------------------------------------------------------------------
// Processes (Linux /proc)

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (e) {
    return errCode(e) === 'EPERM';
  }
  // A zombie is as good as gone.
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch {
    return true;
  }
}

function procCmdline(pid: number): string[] {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter((s) => s.length > 0);
  } catch {
    return [];
  }
}

function procCwd(pid: number): string | undefined {
  try {
    return readlinkSync(`/proc/${pid}/cwd`);
  } catch {
    return undefined;
  }
}

function procEnviron(pid: number, name: string): string | undefined {
  try {
    const entry = readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0').find((s) => s.startsWith(`${name}=`));
    return entry?.slice(name.length + 1);
  } catch {
    return undefined;
  }
}

/** pid -> parent pid, for every process. */
async function processTable(): Promise<Map<number, number>> {
  const table = new Map<number, number>();
  for (const name of await fs.readdir('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = await fs.readFile(`/proc/${name}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      table.set(Number(name), Number(fields[1]));
    } catch {
      // exited meanwhile
    }
  }
  return table;
}

async function withDescendants(pid: number): Promise<number[]> {
  const table = await processTable();
  const found = [pid];
  for (let i = 0; i < found.length; i++) {
    for (const [child, parent] of table) if (parent === found[i] && !found.includes(child)) found.push(child);
  }
  return found;
}

async function readPid(file: string): Promise<number | null> {
  const text = await fs.readFile(file, 'utf8').catch(() => '');
  const pid = Number.parseInt(text.trim(), 10);
  return Number.isInteger(pid) && pid > 0 ? pid : null;
}

/**
 * The pid of a service of this env dir, or null. A pid file can outlive its process and the
 * pid be reused, so the process must also look like ours.
 */
async function servicePid(l: Layout, name: ServiceName): Promise<number | null> {
  const p = ports(l.basePort);
  const file = { dovecot: l.dovecotPidFile, postfix: l.postfixPidFile, sink: l.sinkPidFile, redis: l.redisPidFile }[name];
  const pid = await readPid(file);
  if (pid === null || !isAlive(pid)) return null;
  const argv = procCmdline(pid);
  const ours: Record<ServiceName, () => boolean> = {
    dovecot: () => argv.includes(l.dovecotConf),
    postfix: () => procEnviron(pid, 'MAIL_CONFIG') === l.postfixDir,
    sink: () => argv.includes(l.sinkMessagesDir),
    // redis-server rewrites its title to "redis-server HOST:PORT"; it works in its --dir.
    redis: () => argv.join(' ').includes(`redis-server ${HOST}:${p.redis}`) && procCwd(pid) === l.redisDir,
  };
  return ours[name]() ? pid : null;
}

// ---------------------------------------------------------------------------------------------
// Packages and the mail user

// Debian packages and files each provides; a missing file means the package is missing.
const PACKAGES: ReadonlyArray<{ pkg: string; files: string[] }> = [
  { pkg: 'dovecot-imapd', files: ['/usr/sbin/dovecot', '/usr/bin/doveconf', '/usr/lib/dovecot/imap'] },
  { pkg: 'dovecot-lmtpd', files: ['/usr/lib/dovecot/lmtp'] },
  { pkg: 'postfix', files: ['/usr/sbin/postfix', '/usr/sbin/postconf'] },
  { pkg: 'redis-server', files: ['/usr/bin/redis-server'] },
  { pkg: 'openssl', files: ['/usr/bin/openssl'] },
];
const POLICY_RC_D = '/usr/sbin/policy-rc.d';

function missingPackages(): string[] {
  return PACKAGES.filter((p) => p.files.some((f) => !existsSync(f))).map((p) => p.pkg);
}

/**
 * Installs the Debian packages the environment needs, when missing; returns what it installed.
 * Maintainer scripts must not start system-wide daemons (they would take ports 25/143/6379), so
 * a policy-rc.d that denies every start is in place for the duration, unless one already is.
 */
export async function ensurePackages(): Promise<string[]> {
  const missing = missingPackages();
  if (missing.length === 0) return [];
  if (process.getuid?.() !== 0) {
    throw new Error(`mailenv: packages missing (${missing.join(' ')}); run as root, or apt-get install them`);
  }
  const env: NodeJS.ProcessEnv = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  await mustRun('debconf-set-selections', [], 'preseeding postfix', {
    env,
    input: 'postfix postfix/main_mailer_type select No configuration\n',
  });
  let createdPolicy = false;
  try {
    await fs.writeFile(POLICY_RC_D, '#!/bin/sh\n# Postern scripts/mailenv.ts: no daemon starts during apt-get install\nexit 101\n', {
      mode: 0o755,
      flag: 'wx',
    });
    createdPolicy = true;
  } catch (e) {
    if (errCode(e) !== 'EEXIST') throw e;
  }
  try {
    const install = (): Promise<CommandResult> =>
      runCommand(
        'apt-get',
        [
          'install', '-y', '-q', '--no-install-recommends',
          '-o', 'DPkg::Lock::Timeout=300',
          '-o', 'Dpkg::Options::=--force-confdef', '-o', 'Dpkg::Options::=--force-confold',
          ...missing,
        ],
        { env },
      );
    let res = await install();
    // Only refresh the package lists when they are what is missing.
    if (res.code !== 0 && /Unable to locate package|has no installation candidate|Failed to fetch|404\s+Not Found/i.test(res.stdout + res.stderr)) {
      await mustRun('apt-get', ['update', '-q', '-o', 'DPkg::Lock::Timeout=300'], 'apt-get update', { env });
      res = await install();
    }
    if (res.code !== 0) throw new Error(`mailenv: apt-get install ${missing.join(' ')} failed:\n${tail(res.stdout + res.stderr)}`);
  } finally {
    if (createdPolicy) await fs.rm(POLICY_RC_D, { force: true });
  }
  const still = missingPackages();
  if (still.length > 0) throw new Error(`mailenv: still missing after apt-get install: ${still.join(' ')}`);
  return missing;
}

interface Account { uid: number; gid: number }

async function lookupUser(name: string): Promise<Account | null> {
  const res = await runCommand('getent', ['passwd', name]);
  if (res.code !== 0) return null;
  const f = res.stdout.trim().split(':');
  return { uid: Number(f[2]), gid: Number(f[3]) };
}

async function lookupGroupId(name: string): Promise<number | null> {
  const res = await runCommand('getent', ['group', name]);
  return res.code === 0 ? Number(res.stdout.trim().split(':')[2]) : null;
}

/** The unprivileged system user owning all mail; created when missing. */
async function ensureVmailUser(): Promise<Account> {
  const found = await lookupUser(VMAIL_USER);
  if (found) return found;
  const res = await runCommand('useradd', [
    '--system', '--user-group', '--no-create-home', '--home-dir', '/nonexistent',
    '--shell', '/usr/sbin/nologin', '--comment', 'Postern mail storage', VMAIL_USER,
  ]);
  // Another process may have created it meanwhile.
  const created = await lookupUser(VMAIL_USER);
  if (!created) throw new Error(`mailenv: useradd ${VMAIL_USER} failed: ${res.stderr.trim()}`);
  return created;
}

// ---------------------------------------------------------------------------------------------
// Secrets and passwd files

/** Dovecot's {PBKDF2} scheme: $1$salt$rounds$hex(PBKDF2-HMAC-SHA1, 20 bytes). */
function pbkdf2Hash(password: string): string {
  const salt = randomBytes(12).toString('base64').replace(/[+/]/g, '.');
  return `{PBKDF2}$1$${salt}$${PBKDF2_ROUNDS}$${pbkdf2Sync(password, salt, PBKDF2_ROUNDS, 20, 'sha1').toString('hex')}`;
}

function pbkdf2Verify(hash: string, password: string): boolean {
  const m = /^\{PBKDF2\}\$1\$([^$]+)\$(\d+)\$([0-9a-f]{40})$/.exec(hash);
  if (!m) return false;
  const actual = pbkdf2Sync(password, m[1]!, Number(m[2]), 20, 'sha1');
  return timingSafeEqual(actual, Buffer.from(m[3]!, 'hex'));
}

/** The master password: random, created once per env dir, kept there with mode 0600. */
async function masterPassword(l: Layout): Promise<string> {
  const existing = await fs.readFile(l.masterPasswordFile, 'utf8').catch(() => null);
  if (existing !== null && existing.trim().length > 0) return existing.trim();
  await fs.mkdir(l.dir, { recursive: true });
  const tmp = `${l.masterPasswordFile}.${process.pid}.tmp`;
  await fs.writeFile(tmp, `${randomBytes(24).toString('base64url')}\n`, { mode: 0o600 });
  // link() does not replace: when two processes race, both end up with the first one's password.
  await fs.link(tmp, l.masterPasswordFile).catch((e: unknown) => {
    if (errCode(e) !== 'EEXIST') throw e;
  });
  await fs.rm(tmp, { force: true });
  return (await fs.readFile(l.masterPasswordFile, 'utf8')).trim();
}

/** Dovecot's auth process runs as the "dovecot" user and must read the passwd-files. */
let passwdOwnerCache: Promise<Account> | undefined;
async function passwdOwner(): Promise<Account> {
  passwdOwnerCache ??= lookupGroupId('dovecot').then((gid) => ({ uid: 0, gid: gid ?? 0 }));
  return passwdOwnerCache;
}

/**
 * Replaces a passwd-file atomically. Dovecot re-reads a passwd-file when its mtime or size
 * changes; a same-size rewrite within the same second would go unnoticed, so then the mtime
 * is moved past the old one.
 */
async function replacePasswdFile(file: string, content: string): Promise<void> {
  const before = await fs.stat(file).catch(() => null);
  const changed = await writeAtomic(file, content, 0o640, await passwdOwner());
  if (!changed || !before) return;
  const after = await fs.stat(file);
  if (after.size === before.size && Math.floor(after.mtimeMs / 1000) <= Math.floor(before.mtimeMs / 1000)) {
    const t = new Date((Math.floor(before.mtimeMs / 1000) + 1) * 1000);
    await fs.utimes(file, t, t);
  }
}

// Also keeps the name one path component (it names the user's file in users.d/).
const USER_RE = /^[a-z0-9!#&'+=?^_`{|}~.-]+@[a-z0-9-]+(\.[a-z0-9-]+)*$/;

/** users.d/ next to the passwd-file: what Dovecot reads (see dovecot.conf). */
function usersDirOf(passwdFile: string): string {
  return path.join(path.dirname(passwdFile), 'users.d');
}

async function ensureUsersDir(usersDir: string): Promise<void> {
  await fs.mkdir(usersDir, { recursive: true, mode: 0o750 });
  const owner = await passwdOwner();
  await fs.chown(usersDir, owner.uid, owner.gid);
}

/**
 * Adds a mail user, or sets the password of an existing one. The passwd-file lists every
 * user; Dovecot reads each user's own file in users.d/, so a new user can log in as soon as
 * this returns, without a Dovecot restart. Safe to call from several processes at once.
 */
export async function addUser(env: MailEnv, user: string, password: string): Promise<void> {
  // Dovecot lowercases login names before the lookup (username_format = %Lu).
  const name = user.toLowerCase();
  if (!USER_RE.test(name)) throw new Error(`mailenv: not a usable mail address: ${JSON.stringify(user)}`);
  if (password.length === 0 || /[\r\n\0]/.test(password)) throw new Error('mailenv: the password must be non-empty and on one line');
  const entry = `${name}:${pbkdf2Hash(password)}::::::`;
  const usersDir = usersDirOf(env.passwdFile);
  await ensureUsersDir(usersDir);
  const userFile = path.join(usersDir, name);
  const existed = existsSync(userFile);
  await withLock(`${env.passwdFile}.lock`, 30_000, async () => {
    const lines = (await fs.readFile(env.passwdFile, 'utf8').catch(() => '')).split('\n').filter((s) => s.length > 0);
    const at = lines.findIndex((s) => s.startsWith(`${name}:`));
    if (at >= 0) lines[at] = entry;
    else lines.push(entry);
    await replacePasswdFile(env.passwdFile, `${lines.join('\n')}\n`);
    await replacePasswdFile(userFile, `${entry}\n`);
  });
  // A changed file is noticed at Dovecot's next once-a-second check: wait for that second.
  if (existed) await sleep(1000 - (Date.now() % 1000) + 10);
}

/** Gives every user listed in the passwd-file (edited by hand, or by an older version) a file in users.d/. */
async function syncUsersDir(l: Layout): Promise<void> {
  await ensureUsersDir(l.usersDir);
  if (!existsSync(l.passwdFile)) await replacePasswdFile(l.passwdFile, '');
  const lines = (await fs.readFile(l.passwdFile, 'utf8')).split('\n').filter((s) => s.length > 0 && !s.startsWith('#'));
  for (const line of lines) {
    const name = line.slice(0, line.indexOf(':'));
    if (!USER_RE.test(name)) continue;
    const file = path.join(l.usersDir, name);
    const current = await fs.readFile(file, 'utf8').catch(() => '');
    if (current.trim() !== line.trim()) await replacePasswdFile(file, `${line}\n`);
  }
}

async function ensureMasterUsersFile(l: Layout, password: string): Promise<void> {
  const current = await fs.readFile(l.masterUsersFile, 'utf8').catch(() => '');
  const line = current.split('\n').find((s) => s.startsWith(`${MASTER_USER}:`));
  const hash = line?.split(':')[1] ?? '';
  if (pbkdf2Verify(hash, password)) {
    await fs.chown(l.masterUsersFile, 0, (await passwdOwner()).gid);
    return;
  }
  await replacePasswdFile(l.masterUsersFile, `${MASTER_USER}:${pbkdf2Hash(password)}::::::\n`);
}

/** The global mail_crypt key pair. Generated once: losing it makes all stored mail unreadable. */
async function ensureCryptKeys(l: Layout): Promise<void> {
  const keyDir = path.dirname(l.cryptPrivateKey);
  await fs.mkdir(keyDir, { recursive: true, mode: 0o700 });
  if (!existsSync(l.cryptPrivateKey)) {
    const ec = await mustRun('openssl', ['ecparam', '-name', 'prime256v1', '-genkey', '-noout'], 'generating the mail_crypt key');
    const pkcs8 = await mustRun('openssl', ['pkey'], 'converting the mail_crypt key', { input: ec.stdout });
    await writeAtomic(l.cryptPrivateKey, pkcs8.stdout, 0o600);
  }
  if (!existsSync(l.cryptPublicKey)) {
    const pub = await mustRun('openssl', ['pkey', '-in', l.cryptPrivateKey, '-pubout'], 'deriving the mail_crypt public key');
    await writeAtomic(l.cryptPublicKey, pub.stdout, 0o600);
  }
}

// ---------------------------------------------------------------------------------------------
// Configuration templates

function render(template: string, vars: Record<string, string | number>, source: string): string {
  return template.replace(/\{\{([A-Z0-9_]+)\}\}/g, (_m, key: string) => {
    const v = vars[key];
    if (v === undefined) throw new Error(`mailenv: ${source} uses {{${key}}}, which has no value`);
    return String(v);
  });
}

async function renderTemplate(name: string, dest: string, vars: Record<string, string | number>): Promise<boolean> {
  const src = path.join(findRepoRoot(), 'docker', name);
  return writeAtomic(dest, render(await fs.readFile(src, 'utf8'), vars, src), 0o644);
}

/** Renders the configs; returns which services' configuration changed. */
async function writeConfigs(l: Layout, vmail: Account): Promise<Set<ServiceName>> {
  const p = ports(l.basePort);
  const changed = new Set<ServiceName>();
  const dovecot = await renderTemplate('dovecot/dovecot.conf', l.dovecotConf, {
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
    MASTER_USERS_FILE: l.masterUsersFile,
    USERS_DIR: l.usersDir,
    VMAIL_USER,
    VMAIL_UID: vmail.uid,
    MAIL_ROOT: l.mailRoot,
    CRYPT_PRIVATE_KEY: l.cryptPrivateKey,
    CRYPT_PUBLIC_KEY: l.cryptPublicKey,
  });
  if (dovecot) changed.add('dovecot');
  const postfixVars = {
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
    RELAYHOST: `[${HOST}]:${p.sink}`,
    RETRY_DELAY: '1s',
    MAX_BACKOFF: '5s',
    SMTP_PORT: p.smtp,
  };
  const mainCf = await renderTemplate('postfix/main.cf', path.join(l.postfixDir, 'main.cf'), postfixVars);
  const masterCf = await renderTemplate('postfix/master.cf', path.join(l.postfixDir, 'master.cf'), postfixVars);
  if (mainCf || masterCf) changed.add('postfix');
  return changed;
}

async function prepareDirs(l: Layout, vmail: Account): Promise<void> {
  await fs.mkdir(l.dir, { recursive: true });
  // Dovecot's auth process (user dovecot) and mail processes (postern-vmail) must reach files here.
  const st = await fs.stat(l.dir);
  if ((st.mode & 0o011) !== 0o011) await fs.chmod(l.dir, st.mode | 0o011);
  for (let d = path.dirname(l.dir); ; d = path.dirname(d)) {
    const s = await fs.stat(d);
    if ((s.mode & 0o001) === 0) {
      throw new Error(`mailenv: ${d} is not searchable by other users; Dovecot's unprivileged processes cannot reach ${l.dir}. Use another dir (POSTERN_ENV_DIR) or chmod o+x ${d}`);
    }
    if (path.dirname(d) === d) break;
  }
  for (const d of [l.dovecotDir, l.dovecotStateDir, l.postfixDir, l.postfixQueueDir, l.sinkDir, l.sinkMessagesDir, l.redisDir]) {
    await fs.mkdir(d, { recursive: true, mode: 0o755 });
  }
  await fs.mkdir(l.dovecotBaseDir, { recursive: true, mode: 0o755 });
  await fs.mkdir(l.mailRoot, { recursive: true, mode: 0o700 });
  await fs.chown(l.mailRoot, vmail.uid, vmail.gid);
  const postfix = await lookupUser('postfix');
  await fs.mkdir(l.postfixDataDir, { recursive: true, mode: 0o700 });
  if (postfix) await fs.chown(l.postfixDataDir, postfix.uid, postfix.gid);
}

// ---------------------------------------------------------------------------------------------
// Readiness probes

/**
 * Connects, reads the greeting (after sending `send`, if given) and checks how it starts; then
 * says goodbye (`quit`) so that the server logs an orderly disconnect.
 */
function probeOnce(probe: Probe): Promise<void> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host: HOST, port: probe.port });
    let buf = '';
    let settled = false;
    const done = (err?: Error): void => {
      if (settled) return;
      settled = true;
      if (err) {
        socket.destroy();
        reject(err);
      } else {
        socket.end(probe.quit);
        socket.on('error', () => undefined);
        socket.setTimeout(1000, () => socket.destroy());
        resolve();
      }
    };
    socket.setTimeout(2000, () => done(new Error('no greeting within 2 s')));
    socket.on('error', (e) => done(e));
    socket.on('connect', () => {
      if (probe.send) socket.write(probe.send);
    });
    socket.on('data', (b: Buffer) => {
      buf += b.toString('latin1');
      if (!buf.includes('\n')) return;
      if (buf.startsWith(probe.expect)) done();
      else done(new Error(`unexpected greeting ${JSON.stringify(buf.split('\r\n')[0])}`));
    });
    socket.on('end', () => done(new Error(`connection closed after ${JSON.stringify(buf)}`)));
  });
}

interface Probe { service: ServiceName; what: string; port: number; expect: string; send?: string; quit: string; log: string }

function probes(l: Layout): Probe[] {
  const p = ports(l.basePort);
  return [
    { service: 'dovecot', what: 'IMAP', port: p.imap, expect: '* OK', quit: 'a LOGOUT\r\n', log: l.dovecotLog },
    { service: 'dovecot', what: 'LMTP', port: p.lmtp, expect: '220 ', quit: 'QUIT\r\n', log: l.dovecotLog },
    { service: 'postfix', what: 'SMTP', port: p.smtp, expect: '220 ', quit: 'QUIT\r\n', log: l.postfixLog },
    { service: 'sink', what: 'SMTP', port: p.sink, expect: '220 ', quit: 'QUIT\r\n', log: l.sinkLog },
    { service: 'redis', what: 'RESP', port: p.redis, expect: '+PONG', send: 'PING\r\n', quit: 'QUIT\r\n', log: l.redisLog },
  ];
}

async function waitReady(l: Layout, probe: Probe): Promise<void> {
  const started = Date.now();
  const deadline = started + START_TIMEOUT_MS;
  let last = '';
  for (;;) {
    try {
      await probeOnce(probe);
      return;
    } catch (e) {
      last = (e as Error).message;
    }
    // Fail fast when the process is already gone (the sink and a failed Dovecot exit at once).
    const gone = Date.now() - started > 1500 && (await servicePid(l, probe.service)) === null;
    if (gone || Date.now() > deadline) {
      const why = gone ? 'is not running' : `did not answer within ${START_TIMEOUT_MS / 1000} s`;
      throw new Error(
        `mailenv: ${probe.service} ${why}: ${probe.what} on ${HOST}:${probe.port} (${last}).\n--- ${probe.log} ---\n${await fileTail(probe.log)}`,
      );
    }
    await sleep(100);
  }
}

function portOpen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ host: HOST, port });
    socket.setTimeout(1000, () => {
      socket.destroy();
      resolve(true);
    });
    socket.on('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.on('error', () => resolve(false));
  });
}

async function assertPortsFree(service: ServiceName, l: Layout): Promise<void> {
  const taken: string[] = [];
  for (const probe of probes(l).filter((x) => x.service === service)) {
    if (await portOpen(probe.port)) taken.push(`${HOST}:${probe.port} (${probe.what})`);
  }
  if (taken.length > 0) {
    throw new Error(`mailenv: cannot start ${service}: ${taken.join(', ')} already in use by another process (another env with the same basePort?)`);
  }
}

// ---------------------------------------------------------------------------------------------
// Starting and stopping

async function startDovecot(l: Layout): Promise<void> {
  // Only called when the pid file names no live Dovecot of ours; Dovecot itself would refuse to
  // start while that pid exists at all (a not yet reaped zombie, or a reused pid).
  await fs.rm(l.dovecotPidFile, { force: true });
  await runStarter('dovecot', ['-c', l.dovecotConf], path.join(l.dovecotDir, 'start.out'), `starting dovecot (log: ${l.dovecotLog})`);
}

async function startPostfix(l: Layout): Promise<void> {
  await runStarter('postfix', ['-c', l.postfixDir, 'start'], path.join(l.postfixRoot, 'start.out'), `starting postfix (log: ${l.postfixLog})`);
}

async function startRedis(l: Layout): Promise<void> {
  const p = ports(l.basePort);
  await runStarter('redis-server', [
    '--bind', HOST, '--port', String(p.redis),
    '--save', '', '--appendonly', 'no',
    '--daemonize', 'yes', '--pidfile', l.redisPidFile, '--logfile', l.redisLog, '--dir', l.redisDir,
  ], path.join(l.redisDir, 'start.out'), `starting redis-server (log: ${l.redisLog})`);
  // The pid file appears just after the daemon forks.
  for (let i = 0; i < 50 && !existsSync(l.redisPidFile); i++) await sleep(20);
}

/** The sink next to this file, run the way this process runs (tsx for .ts, plain node for .js). */
async function startSink(l: Layout): Promise<void> {
  const p = ports(l.basePort);
  const script = path.join(SELF_DIR, `sink${path.extname(SELF_FILE)}`);
  const execArgv = process.execArgv.filter((a) => !/^--(inspect|debug)/.test(a));
  const log = openSync(l.sinkLog, 'a');
  try {
    const child = spawn(process.execPath, [...execArgv, script, '--host', HOST, '--port', String(p.sink), '--dir', l.sinkMessagesDir], {
      detached: true,
      stdio: ['ignore', log, log],
      // `--import tsx` in execArgv resolves against the working directory, so keep ours.
    });
    if (child.pid === undefined) throw new Error(`mailenv: could not spawn ${process.execPath} ${script}`);
    await fs.writeFile(l.sinkPidFile, `${child.pid}\n`);
    child.unref();
  } finally {
    closeSync(log);
  }
}

const STARTERS: Record<ServiceName, (l: Layout) => Promise<void>> = {
  dovecot: startDovecot,
  postfix: startPostfix,
  sink: startSink,
  redis: startRedis,
};

async function waitGone(pids: number[], timeoutMs: number): Promise<number[]> {
  const deadline = Date.now() + timeoutMs;
  let alive = pids.filter(isAlive);
  while (alive.length > 0 && Date.now() < deadline) {
    await sleep(50);
    alive = alive.filter(isAlive);
  }
  return alive;
}

function signal(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(pid, sig);
  } catch (e) {
    if (errCode(e) !== 'ESRCH') throw e;
  }
}

async function stopService(l: Layout, name: ServiceName): Promise<boolean> {
  const pid = await servicePid(l, name);
  if (pid === null) {
    if (name === 'sink') await fs.rm(l.sinkPidFile, { force: true });
    return false;
  }
  const family = await withDescendants(pid);
  if (name === 'postfix') {
    // Postfix's own stop also removes its lock and pid files.
    const res = await runCommand('postfix', ['-c', l.postfixDir, 'stop']);
    if (res.code !== 0) signal(pid, 'SIGTERM');
  } else {
    // Dovecot's master and redis-server shut down cleanly on SIGTERM (no redis persistence).
    signal(pid, 'SIGTERM');
  }
  const left = await waitGone(family, STOP_TIMEOUT_MS);
  for (const p of left) signal(p, 'SIGKILL');
  if ((await waitGone(left, 5000)).length > 0) throw new Error(`mailenv: ${name} processes ${left.join(' ')} did not exit`);
  if (name === 'sink') await fs.rm(l.sinkPidFile, { force: true });
  return true;
}

// ---------------------------------------------------------------------------------------------
// Public API

/** Starts what is not running yet (installing packages when missing) and waits until it answers. */
export async function up(opts: MailEnvOptions = {}): Promise<MailEnv & { startedNow: string[] }> {
  const l = layout(opts);
  if (process.getuid?.() !== 0) throw new Error('mailenv: up must run as root (Dovecot and Postfix masters, apt-get)');
  await fs.mkdir(l.dir, { recursive: true });
  return withLock(l.lockFile, 600_000, async () => {
    await ensurePackages();
    const vmail = await ensureVmailUser();
    await prepareDirs(l, vmail);
    const password = await masterPassword(l);
    await ensureCryptKeys(l);
    await ensureMasterUsersFile(l, password);
    await syncUsersDir(l);
    const changed = await writeConfigs(l, vmail);

    const toStart: ServiceName[] = [];
    for (const name of SERVICES) {
      if ((await servicePid(l, name)) === null) {
        toStart.push(name);
      } else if (changed.has(name)) {
        // A running service whose rendered config changed picks it up without a restart.
        if (name === 'dovecot') await mustRun('dovecot', ['-c', l.dovecotConf, 'reload'], 'reloading dovecot');
        if (name === 'postfix') await mustRun('postfix', ['-c', l.postfixDir, 'reload'], 'reloading postfix');
      }
    }
    // Check every port before starting anything, so a clash leaves nothing half started.
    for (const name of toStart) await assertPortsFree(name, l);
    const startedNow: ServiceName[] = [];
    for (const name of toStart) {
      await STARTERS[name](l);
      startedNow.push(name);
    }
    await Promise.all(probes(l).map((probe) => waitReady(l, probe)));
    return { ...describe(l, password), startedNow };
  });
}

/** Stops the processes this env dir started (by their pid files) and waits until they are gone. */
export async function down(opts: MailEnvOptions = {}): Promise<{ stopped: string[] }> {
  const l = layout(opts);
  if (!existsSync(l.dir)) return { stopped: [] };
  return withLock(l.lockFile, 120_000, async () => {
    // In parallel: mail Postfix cannot hand over meanwhile stays queued for the next up.
    const results = await Promise.all(SERVICES.map(async (name) => ((await stopService(l, name)) ? name : null)));
    return { stopped: results.filter((x): x is ServiceName => x !== null) };
  });
}

/** True when none of the env's ports is taken by anything (this env included). */
export async function portsFree(opts: MailEnvOptions = {}): Promise<boolean> {
  const l = layout(opts);
  for (const probe of probes(l)) if (await portOpen(probe.port)) return false;
  return true;
}

export async function status(opts: MailEnvOptions = {}): Promise<{ running: Record<ServiceName, boolean>; env: MailEnv }> {
  const l = layout(opts);
  const running = {} as Record<ServiceName, boolean>;
  for (const name of SERVICES) running[name] = (await servicePid(l, name)) !== null;
  return { running, env: describe(l, await masterPassword(l)) };
}

interface SinkMeta { id: string; mailFrom: string; rcptTo: string[]; envid?: string | null; receivedAt: string }

/** What the sink received so far, oldest first. */
export async function readSink(env: MailEnv): Promise<SinkMessage[]> {
  const names = await fs.readdir(env.sink.dir).catch((e: unknown) => {
    if (errCode(e) === 'ENOENT') return [] as string[];
    throw e;
  });
  const messages: SinkMessage[] = [];
  // The sink writes <id>.eml before <id>.json, each by rename, so a .json means a whole message.
  for (const name of names.filter((n) => n.endsWith('.json'))) {
    const meta = JSON.parse(await fs.readFile(path.join(env.sink.dir, name), 'utf8')) as SinkMeta;
    const raw = await fs.readFile(path.join(env.sink.dir, `${meta.id}.eml`));
    const msg: SinkMessage = { id: meta.id, mailFrom: meta.mailFrom, rcptTo: meta.rcptTo, receivedAt: meta.receivedAt, raw };
    if (meta.envid) msg.envid = meta.envid;
    messages.push(msg);
  }
  return messages.sort((a, b) => a.receivedAt.localeCompare(b.receivedAt) || a.id.localeCompare(b.id));
}

// ---------------------------------------------------------------------------------------------
// CLI

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

function isMain(): boolean {
  if (!process.argv[1]) return false;
  try {
    return realpathSync(process.argv[1]) === realpathSync(SELF_FILE);
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
