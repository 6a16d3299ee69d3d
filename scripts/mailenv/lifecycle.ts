// Bringing an environment up and down: prepare, configure, start what is not running, wait
// until every port answers; stop exactly the processes this env dir started.
import { existsSync } from 'node:fs';
import * as fs from 'node:fs/promises';
import * as path from 'node:path';
import { ensureVmailUser } from './accounts.ts';
import { fileTail } from './commands.ts';
import { describe, type MailEnv } from './env.ts';
import { withLock } from './files.ts';
import { layout, type Layout, type MailEnvOptions } from './layout.ts';
import { installMissing } from './packages.ts';
import { ensureMasterUsersFile, syncUsersDir } from './passwd.ts';
import { HOST } from './ports.ts';
import { portOpen, probeOnce, type Probe } from './probes.ts';
import { isAlive, readPid, signal, waitGone, withDescendants } from './processes.ts';
import { ensureCryptKeys, masterPassword, postgresPassword, pushSecret, SECRETS_PACKAGES } from './secrets.ts';
import { SERVICES, type Service, type ServiceName } from './services/index.ts';
import { sleep } from './util.ts';

const START_TIMEOUT_MS = 20_000;
const STOP_TIMEOUT_MS = 15_000;

/**
 * Installs the Debian packages the environment needs, when missing; returns what it installed.
 */
export async function ensurePackages(): Promise<string[]> {
  return installMissing([...SERVICES.flatMap((s) => s.packages), ...SECRETS_PACKAGES]);
}

/**
 * The pid of a service of this env dir, or null. A pid file can outlive its process and the
 * pid be reused, so the process must also look like ours.
 */
async function servicePid(l: Layout, service: Service): Promise<number | null> {
  const pid = await readPid(service.pidFile(l));
  if (pid === null || !isAlive(pid)) return null;
  return service.isOurs(l, pid) ? pid : null;
}

/** The env dir and the per-service directories below it. */
async function prepareDirs(l: Layout, ctx: { vmail: { uid: number; gid: number } }): Promise<void> {
  await fs.mkdir(l.dir, { recursive: true });
  // Dovecot's auth process (user dovecot) and mail processes (postern-vmail) must reach files here.
  const st = await fs.stat(l.dir);
  if ((st.mode & 0o011) !== 0o011) await fs.chmod(l.dir, st.mode | 0o011);
  for (let d = path.dirname(l.dir); ; d = path.dirname(d)) {
    const s = await fs.stat(d);
    if ((s.mode & 0o001) === 0) {
      throw new Error(
        `mailenv: ${d} is not searchable by other users; Dovecot's unprivileged processes cannot reach ${l.dir}. Use another dir (POSTERN_ENV_DIR) or chmod o+x ${d}`,
      );
    }
    if (path.dirname(d) === d) break;
  }
  for (const service of SERVICES) await service.prepare(l, ctx);
}

async function waitReady(l: Layout, service: Service, probe: Probe): Promise<void> {
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
    const gone = Date.now() - started > 1500 && (await servicePid(l, service)) === null;
    if (gone || Date.now() > deadline) {
      const why = gone ? 'is not running' : `did not answer within ${START_TIMEOUT_MS / 1000} s`;
      const log = service.log(l);
      throw new Error(
        `mailenv: ${service.name} ${why}: ${probe.what} on ${HOST}:${probe.port} (${last}).\n--- ${log} ---\n${await fileTail(log)}`,
      );
    }
    await sleep(100);
  }
}

async function assertPortsFree(l: Layout, service: Service): Promise<void> {
  const taken: string[] = [];
  for (const probe of service.probes(l)) {
    if (await portOpen(probe.port)) taken.push(`${HOST}:${probe.port} (${probe.what})`);
  }
  if (taken.length > 0) {
    throw new Error(
      `mailenv: cannot start ${service.name}: ${taken.join(', ')} already in use by another process (another env with the same basePort?)`,
    );
  }
}

async function stopService(l: Layout, service: Service): Promise<boolean> {
  const pid = await servicePid(l, service);
  if (pid === null) {
    await service.afterStop?.(l);
    return false;
  }
  const family = await withDescendants(pid);
  if (service.stop) await service.stop(l, pid);
  else signal(pid, 'SIGTERM');
  const left = await waitGone(family, STOP_TIMEOUT_MS);
  for (const p of left) signal(p, 'SIGKILL');
  if ((await waitGone(left, 5000)).length > 0) throw new Error(`mailenv: ${service.name} processes ${left.join(' ')} did not exit`);
  await service.afterStop?.(l);
  return true;
}

/** Starts what is not running yet (installing packages when missing) and waits until it answers. */
export async function up(opts: MailEnvOptions = {}): Promise<MailEnv & { startedNow: string[] }> {
  const l = layout(opts);
  if (process.getuid?.() !== 0) throw new Error('mailenv: up must run as root (Dovecot and Postfix masters, apt-get)');
  await fs.mkdir(l.dir, { recursive: true });
  return withLock(l.lockFile, 600_000, async () => {
    await ensurePackages();
    const ctx = { vmail: await ensureVmailUser() };
    await prepareDirs(l, ctx);
    const password = await masterPassword(l);
    await ensureCryptKeys(l);
    const hintSecret = await pushSecret(l);
    await ensureMasterUsersFile(l, password);
    await syncUsersDir(l);
    const changed = new Set<ServiceName>();
    for (const service of SERVICES) if (await service.configure?.(l, ctx)) changed.add(service.name);

    const toStart: Service[] = [];
    for (const service of SERVICES) {
      if ((await servicePid(l, service)) === null) toStart.push(service);
      // A running service whose rendered config changed picks it up without a restart.
      else if (changed.has(service.name)) await service.reload?.(l);
    }
    // Check every port before starting anything, so a clash leaves nothing half started.
    for (const service of toStart) await assertPortsFree(l, service);
    const startedNow: string[] = [];
    for (const service of toStart) {
      await service.start(l);
      startedNow.push(service.name);
    }
    await Promise.all(SERVICES.flatMap((service) => service.probes(l).map((probe) => waitReady(l, service, probe))));
    return { ...describe(l, password, hintSecret, await postgresPassword(l)), startedNow };
  });
}

/** Stops the processes this env dir started (by their pid files) and waits until they are gone. */
export async function down(opts: MailEnvOptions = {}): Promise<{ stopped: string[] }> {
  const l = layout(opts);
  if (!existsSync(l.dir)) return { stopped: [] };
  return withLock(l.lockFile, 120_000, async () => {
    // In parallel: mail Postfix cannot hand over meanwhile stays queued for the next up.
    const results = await Promise.all(SERVICES.map(async (service) => ((await stopService(l, service)) ? service.name : null)));
    return { stopped: results.filter((x): x is ServiceName => x !== null) };
  });
}

/** True when none of the env's ports is taken by anything (this env included). */
export async function portsFree(opts: MailEnvOptions = {}): Promise<boolean> {
  const l = layout(opts);
  for (const probe of SERVICES.flatMap((s) => s.probes(l))) if (await portOpen(probe.port)) return false;
  return true;
}

export async function status(opts: MailEnvOptions = {}): Promise<{ running: Record<ServiceName, boolean>; env: MailEnv }> {
  const l = layout(opts);
  const running = {} as Record<ServiceName, boolean>;
  for (const service of SERVICES) running[service.name] = (await servicePid(l, service)) !== null;
  return { running, env: describe(l, await masterPassword(l), await pushSecret(l), await postgresPassword(l)) };
}
