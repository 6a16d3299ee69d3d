// A private PostgreSQL cluster for the store's second engine (docs/deployment.md): Debian's binaries, its
// own data directory under the env dir, 127.0.0.1 and its own port only, never a system cluster.
// PostgreSQL refuses to run as root, so the cluster belongs to the env's unprivileged mail user.
import { existsSync, readdirSync } from 'node:fs';
import * as fs from 'node:fs/promises';
import * as path from 'node:path';
import type { Account } from '../accounts.ts';
import { fileTail, mustRun, runCommand } from '../commands.ts';
import { writeAtomic } from '../files.ts';
import type { Layout } from '../layout.ts';
import { HOST, ports } from '../ports.ts';
import { procCmdline, signal } from '../processes.ts';
import { postgresPassword } from '../secrets.ts';
import type { PrepareContext, Service } from './service.ts';

/** The cluster's superuser, and the database Postern uses. */
export const POSTGRES_USER = 'postern';
export const POSTGRES_DATABASE = 'postern';

const PG_ROOT = '/usr/lib/postgresql';

/** The bin dir of the highest PostgreSQL version installed (Debian keeps each in its own dir, off PATH). */
export function postgresBinDir(): string | null {
  let versions: number[];
  try {
    versions = readdirSync(PG_ROOT)
      .filter((v) => /^\d+$/.test(v))
      .map(Number);
  } catch {
    return null;
  }
  for (const v of versions.sort((a, b) => b - a)) {
    const bin = path.join(PG_ROOT, String(v), 'bin');
    if (existsSync(path.join(bin, 'postgres'))) return bin;
  }
  return null;
}

function bin(name: string): string {
  const dir = postgresBinDir();
  if (!dir) throw new Error(`mailenv: no PostgreSQL under ${PG_ROOT}/*/bin (Debian package postgresql)`);
  return path.join(dir, name);
}

/**
 * Settings of the private cluster, included from postgresql.conf. Durability is traded for speed
 * (fsync off): the cluster holds test data only, and is rebuilt by deleting its dir.
 */
function settings(l: Layout): string {
  return [
    '# Written by scripts/mailenv (services/postgres.ts) at every up; edits are overwritten.',
    `listen_addresses = '${HOST}'`,
    `port = ${ports(l.basePort).postgres}`,
    `unix_socket_directories = '${l.postgresSocketDir}'`,
    'max_connections = 200',
    'fsync = off',
    'synchronous_commit = off',
    'full_page_writes = off',
    "password_encryption = 'scram-sha-256'",
    "log_line_prefix = '%m [%p] %q%u@%d '",
    '',
  ].join('\n');
}

const SETTINGS_FILE = 'postern.conf';

/**
 * Creates the cluster once: initdb into a side dir (scram passwords for every connection), the
 * database `postern` made in single-user mode, then renamed into place, so a start that died
 * half way leaves no half-made cluster behind.
 */
async function initCluster(l: Layout, vmail: Account): Promise<void> {
  const building = `${l.postgresDataDir}.new`;
  await fs.rm(building, { recursive: true, force: true });
  await fs.mkdir(building, { mode: 0o700 });
  await fs.chown(building, vmail.uid, vmail.gid);
  const pwFile = path.join(l.postgresDir, 'initdb-password');
  await writeAtomic(pwFile, `${await postgresPassword(l)}\n`, 0o600, vmail);
  try {
    await mustRun(
      bin('initdb'),
      [
        '-D',
        building,
        '-U',
        POSTGRES_USER,
        `--pwfile=${pwFile}`,
        '--auth-host=scram-sha-256',
        '--auth-local=scram-sha-256',
        // C: lower() folds ASCII only, as SQLite's lower() and NOCASE do.
        '--encoding=UTF8',
        '--locale=C',
        '--no-sync',
      ],
      'initdb of the private PostgreSQL cluster',
      { as: vmail, cwd: l.postgresDir },
    );
  } finally {
    await fs.rm(pwFile, { force: true });
  }
  await fs.appendFile(path.join(building, 'postgresql.conf'), `\ninclude '${SETTINGS_FILE}'\n`);
  await writeAtomic(path.join(building, SETTINGS_FILE), settings(l), 0o600, vmail);
  await mustRun(bin('postgres'), ['--single', '-D', building, '-j', 'template1'], 'creating the database postern', {
    as: vmail,
    cwd: l.postgresDir,
    input: `CREATE DATABASE ${POSTGRES_DATABASE};\n`,
  });
  await fs.rename(building, l.postgresDataDir);
}

/** pg_ctl as the data dir's owner; returns once the postmaster is forked (-W), the probe waits. */
async function pgCtl(l: Layout, args: string[], what: string): Promise<void> {
  const owner = await fs.stat(l.postgresDataDir);
  const res = await runCommand(bin('pg_ctl'), [...args, '-D', l.postgresDataDir, '-l', l.postgresLog, '-W', '-s'], {
    as: { uid: owner.uid, gid: owner.gid },
    cwd: l.postgresDir,
  });
  if (res.code !== 0) {
    throw new Error(
      `mailenv: ${what} failed (exit ${res.code}): ${res.stderr.trim()}\n--- ${l.postgresLog} ---\n${await fileTail(l.postgresLog)}`,
    );
  }
}

export const postgres: Service<'postgres'> = {
  name: 'postgres',
  packages: [
    {
      pkg: 'postgresql',
      // A getter: the version (so the path) is known only once the package is there.
      get files() {
        const dir = postgresBinDir() ?? path.join(PG_ROOT, 'none', 'bin');
        return ['initdb', 'pg_ctl', 'postgres'].map((b) => path.join(dir, b));
      },
    },
  ],

  async prepare(l: Layout, { vmail }: PrepareContext): Promise<void> {
    await fs.mkdir(l.postgresDir, { recursive: true, mode: 0o700 });
    // status() may have made it first (for the password file), with another mode.
    await fs.chmod(l.postgresDir, 0o700);
    await fs.chown(l.postgresDir, vmail.uid, vmail.gid);
    await fs.mkdir(l.postgresSocketDir, { recursive: true, mode: 0o755 });
    await fs.chown(l.postgresSocketDir, vmail.uid, vmail.gid);
    if (!existsSync(path.join(l.postgresDataDir, 'PG_VERSION'))) await initCluster(l, vmail);
  },

  async configure(l: Layout, { vmail }: PrepareContext): Promise<boolean> {
    return writeAtomic(path.join(l.postgresDataDir, SETTINGS_FILE), settings(l), 0o600, vmail);
  },

  // A restart, not SIGHUP: the port and the socket dir (all that changes with the env) are read
  // at start only. Connections still open are ended, as by `down`.
  async reload(l: Layout): Promise<void> {
    await pgCtl(l, ['restart', '-m', 'fast'], 'restarting postgres');
  },

  probes(l: Layout) {
    // SSLRequest (length 8, code 80877103): a server without SSL answers the single byte 'N'.
    return [
      {
        what: 'PostgreSQL',
        port: ports(l.basePort).postgres,
        send: '\x00\x00\x00\x08\x04\xd2\x16\x2f',
        expect: 'N',
        quit: '',
        binary: true,
      },
    ];
  },

  log: (l) => l.postgresLog,
  pidFile: (l) => l.postgresPidFile,
  isOurs: (l, pid) => procCmdline(pid).includes(l.postgresDataDir),

  async start(l: Layout): Promise<void> {
    // Only called when the pid file names no live postmaster of ours (one left by a kill -9).
    await fs.rm(l.postgresPidFile, { force: true });
    await pgCtl(l, ['start'], 'starting postgres');
  },

  // SIGINT is PostgreSQL's fast shutdown: clients still connected (a test's pool) are ended,
  // where SIGTERM would wait for them.
  async stop(_l: Layout, pid: number): Promise<void> {
    signal(pid, 'SIGINT');
  },
};
