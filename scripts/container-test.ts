// `npm run test:container`: builds Postern's image and the mail image, runs docker/compose.yaml with
// podman and podman-compose (installed when missing), and smoke-tests it from the host: an API
// call with a token, a message delivered by SMTP and listed through the API, a send relayed,
// /metrics scraped, a replica killed and the other still serving. Everything it started is
// stopped and removed at the end, failed or not (docs/operations.md, "Images and compose").
//
// No image registry reachable (this project's CI machines): the base images it cannot pull are
// replaced by stand-ins built here from Debian's packages (debootstrap from the machine's apt
// mirror, the machine's own Node binary copied in; docker/standins/), kept for the next run.
//
// Settings: POSTERN_CONTAINER_TEST_PORT (18700): the first of seven host ports on 127.0.0.1;
// POSTERN_CONTAINER_TEST_KEEP=1 leaves the compose project running for a look (then
// `podman-compose -p postern-ctest -f docker/compose.yaml down -v` with CONTAINERS_CONF as printed).
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync, readdirSync, realpathSync } from 'node:fs';
import * as fs from 'node:fs/promises';
import { dirname, join } from 'node:path';
import nodemailer from 'nodemailer';
import { ROOT } from '../lib/paths.ts';
import { installMissing } from './mailenv/packages.ts';

const WORK = join(ROOT, '.container-test');
const PROJECT = 'postern-ctest';
const COMPOSE_FILE = join(ROOT, 'docker', 'compose.yaml');
const BASE_PORT = Number(process.env.POSTERN_CONTAINER_TEST_PORT ?? 18700);
const PORTS = {
  api1: BASE_PORT,
  api2: BASE_PORT + 1,
  metrics1: BASE_PORT + 2,
  metrics2: BASE_PORT + 3,
  smtp: BASE_PORT + 4,
  imap: BASE_PORT + 5,
  submission: BASE_PORT + 6,
};
const DOMAIN = 'postern.test';

/** The official images the compose file names, and the stand-ins built when one cannot be pulled. */
const OFFICIAL = {
  node: 'docker.io/library/node:20-bookworm-slim',
  debian: 'docker.io/library/debian:bookworm-slim',
  postgres: 'docker.io/library/postgres:16-bookworm',
  redis: 'docker.io/library/redis:7-bookworm',
};
const STANDIN = {
  node: 'localhost/postern-standin-node:20',
  postgres: 'localhost/postern-standin-postgres:latest',
  redis: 'localhost/postern-standin-redis:latest',
};
const POSTERN_IMAGE = 'localhost/postern:latest';
const MAIL_IMAGE = 'localhost/postern-mail:latest';
const BUILD_STAGE_IMAGE = 'localhost/postern-build:latest';

// podman's defaults fail on these machines: crun cannot run under hybrid cgroups, and a container
// without explicit limits fails to set them. One file of our own, for podman and podman-compose.
const CONTAINERS_CONF = join(WORK, 'containers.conf');

/**
 * Limits a container may have here: no more open files than this process may (a container's limit
 * above the machine's hard limit is refused), and a few thousand processes (more was refused here
 * although below the hard limit).
 */
function containersConf(): string {
  const limits = existsSync('/proc/self/limits') ? readFileSync('/proc/self/limits', 'utf8') : '';
  const hard = /^Max open files\s+\S+\s+(\d+)/m.exec(limits)?.[1];
  const nofile = Math.min(Number(hard ?? 1024), 65536);
  return `# Written by scripts/container-test.ts.
[containers]
default_ulimits = ["nofile=${nofile}:${nofile}", "nproc=4096:4096"]
[engine]
runtime = "runc"
`;
}

function log(message: string): void {
  process.stderr.write(`container-test: ${message}\n`);
}

interface Run {
  code: number;
  out: string;
}

/** Runs a command with CONTAINERS_CONF set; its output is kept (and shown when asked to). */
function run(
  cmd: string,
  args: string[],
  opts: { env?: Record<string, string>; timeoutMs?: number; show?: boolean; input?: NodeJS.ReadableStream } = {},
): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, {
      cwd: ROOT,
      env: { ...process.env, CONTAINERS_CONF, ...opts.env },
      stdio: [opts.input ? 'pipe' : 'ignore', 'pipe', 'pipe'],
    });
    let out = '';
    const take = (chunk: Buffer) => {
      out += chunk.toString();
      if (opts.show) process.stderr.write(chunk);
    };
    child.stdout!.on('data', take);
    child.stderr!.on('data', take);
    if (opts.input) opts.input.pipe(child.stdin!);
    const timer = opts.timeoutMs ? setTimeout(() => child.kill('SIGKILL'), opts.timeoutMs) : null;
    child.on('error', reject);
    child.on('close', (code) => {
      if (timer) clearTimeout(timer);
      resolve({ code: code ?? 1, out });
    });
  });
}

async function must(cmd: string, args: string[], opts: Parameters<typeof run>[2] = {}): Promise<string> {
  const res = await run(cmd, args, opts);
  if (res.code !== 0)
    throw new Error(`${cmd} ${args.join(' ')} failed (exit ${res.code}):\n${res.out.trimEnd().split('\n').slice(-40).join('\n')}`);
  return res.out;
}

async function timed<T>(what: string, fn: () => Promise<T>): Promise<T> {
  const t0 = Date.now();
  log(`${what}…`);
  const result = await fn();
  log(`${what}: done in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  return result;
}

const imageExists = async (ref: string) => (await run('podman', ['image', 'exists', ref])).code === 0;

/** The official image, when it is here or can be pulled (within a minute); else null. */
async function pulled(ref: string): Promise<string | null> {
  if (await imageExists(ref)) return ref;
  const res = await run('podman', ['pull', '--quiet', ref], { timeoutMs: 60_000 });
  return res.code === 0 ? ref : null;
}

/** The apt mirror this machine uses (debootstrap's source for the stand-in). */
function aptMirror(): string {
  const files = [
    '/etc/apt/sources.list',
    ...(existsSync('/etc/apt/sources.list.d') ? readdirSync('/etc/apt/sources.list.d').map((f) => join('/etc/apt/sources.list.d', f)) : []),
  ];
  for (const file of files) {
    const text = existsSync(file) ? readFileSync(file, 'utf8') : '';
    // deb822 (URIs: …) or one-line (deb URI suite …) entries; the main Debian archive, not security.
    const uris = [...text.matchAll(/^URIs:\s*(\S+)/gm), ...text.matchAll(/^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+\S+/gm)].map((m) => m[1]!);
    const debian = uris.find((u) => /\/debian\/?$/.test(u));
    if (debian) return debian;
  }
  return 'http://deb.debian.org/debian';
}

/**
 * A stand-in for the official Node 20 image: Debian bookworm from debootstrap with this machine's
 * node, npm and Node headers where the official image has them (/usr/local), and this machine's
 * CA bundle (its network may pass a TLS-inspecting proxy the official image would not trust).
 */
async function buildNodeStandin(): Promise<void> {
  const node = realpathSync(process.execPath);
  if (!process.version.startsWith('v20.'))
    log(`warning: this machine's Node is ${process.version}, not 20: the stand-in carries it anyway`);
  const prefix = dirname(dirname(node));
  const npmDir = [join(prefix, 'lib', 'node_modules', 'npm'), '/usr/lib/node_modules/npm', '/usr/local/lib/node_modules/npm'].find((d) =>
    existsSync(join(d, 'bin', 'npm-cli.js')),
  );
  const headers = join(prefix, 'include', 'node');
  if (!npmDir) throw new Error("npm not found beside this machine's node: the stand-in needs it");
  if (!existsSync(join(headers, 'node.h')))
    throw new Error(`Node's headers not found at ${headers}: the stand-in needs them to compile better-sqlite3`);
  const rootfs = join(WORK, 'rootfs');
  await fs.rm(rootfs, { recursive: true, force: true });
  const mirror = aptMirror();
  try {
    await timed(`debootstrap bookworm from ${mirror}`, () => must('debootstrap', ['--variant=minbase', 'bookworm', rootfs, mirror]));
    await fs.mkdir(join(rootfs, 'usr/local/bin'), { recursive: true });
    await fs.mkdir(join(rootfs, 'usr/local/lib/node_modules'), { recursive: true });
    await fs.mkdir(join(rootfs, 'usr/local/include'), { recursive: true });
    await fs.copyFile(node, join(rootfs, 'usr/local/bin/node'));
    await fs.cp(npmDir, join(rootfs, 'usr/local/lib/node_modules/npm'), { recursive: true, verbatimSymlinks: true });
    await fs.cp(headers, join(rootfs, 'usr/local/include/node'), { recursive: true });
    await fs.symlink('../lib/node_modules/npm/bin/npm-cli.js', join(rootfs, 'usr/local/bin/npm'));
    await fs.symlink('../lib/node_modules/npm/bin/npx-cli.js', join(rootfs, 'usr/local/bin/npx'));
    const bundle = '/etc/ssl/certs/ca-certificates.crt';
    if (existsSync(bundle)) {
      await fs.mkdir(join(rootfs, 'etc/ssl/certs'), { recursive: true });
      await fs.copyFile(bundle, join(rootfs, 'etc/ssl/certs/ca-certificates.crt'));
    }
    await fs.rm(join(rootfs, 'var/cache/apt/archives'), { recursive: true, force: true });
    await fs.mkdir(join(rootfs, 'var/cache/apt/archives/partial'), { recursive: true });
    const tar = spawn('tar', ['-C', rootfs, '-c', '.'], { stdio: ['ignore', 'pipe', 'inherit'] });
    await timed('podman import', () =>
      must(
        'podman',
        [
          'import',
          '--change',
          'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
          '--change',
          'ENV NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt',
          '--change',
          'ENV npm_config_cafile=/etc/ssl/certs/ca-certificates.crt',
          '--change',
          'CMD ["node"]',
          '-',
          STANDIN.node,
        ],
        { input: tar.stdout },
      ),
    );
  } finally {
    await fs.rm(rootfs, { recursive: true, force: true });
  }
}

interface Images {
  node: string;
  debian: string;
  postgres: string;
  redis: string;
}

async function baseImages(): Promise<Images> {
  const official = {
    node: await pulled(OFFICIAL.node),
    debian: await pulled(OFFICIAL.debian),
    postgres: await pulled(OFFICIAL.postgres),
    redis: await pulled(OFFICIAL.redis),
  };
  const missing = Object.entries(official)
    .filter(([, v]) => v === null)
    .map(([k]) => OFFICIAL[k as keyof Images]);
  if (missing.length === 0) return official as Images;
  log(
    `cannot pull ${missing.join(', ')} (no registry reachable?): using stand-ins built from Debian's packages (docker/standins/README.md)`,
  );
  if (await imageExists(STANDIN.node)) log(`${STANDIN.node}: kept from an earlier run (podman rmi it to rebuild)`);
  else await timed(`building ${STANDIN.node} with debootstrap and this machine's Node`, buildNodeStandin);
  for (const name of ['postgres', 'redis'] as const) {
    if (official[name] !== null) continue;
    if (await imageExists(STANDIN[name])) continue;
    await timed(`building ${STANDIN[name]}`, () =>
      must('podman', [
        'build',
        '--format',
        'docker',
        '-f',
        `docker/standins/${name}.Dockerfile`,
        '--build-arg',
        `BASE_IMAGE=${STANDIN.node}`,
        '-t',
        STANDIN[name],
        '.',
      ]),
    );
  }
  return {
    node: official.node ?? STANDIN.node,
    // The node stand-in is a Debian bookworm like the official debian image, and more.
    debian: official.debian ?? STANDIN.node,
    postgres: official.postgres ?? STANDIN.postgres,
    redis: official.redis ?? STANDIN.redis,
  };
}

async function buildImages(images: Images): Promise<void> {
  const nodeArg = ['--build-arg', `NODE_IMAGE=${images.node}`];
  // The build stage tagged too, so it stays the cache of the next run while the earlier ones,
  // untagged now, are pruned below.
  await timed(`building ${BUILD_STAGE_IMAGE} (docker/Dockerfile's build stage on ${images.node})`, () =>
    must('podman', [
      'build',
      '--format',
      'docker',
      '-f',
      'docker/Dockerfile',
      '--target',
      'build',
      ...nodeArg,
      '-t',
      BUILD_STAGE_IMAGE,
      '.',
    ]),
  );
  // --format docker: the OCI format has no HEALTHCHECK.
  await timed(`building ${POSTERN_IMAGE} (docker/Dockerfile)`, () =>
    must('podman', ['build', '--format', 'docker', '-f', 'docker/Dockerfile', ...nodeArg, '-t', POSTERN_IMAGE, '.']),
  );
  await timed(`building ${MAIL_IMAGE} (docker/mail/Dockerfile on ${images.debian})`, () =>
    must('podman', [
      'build',
      '--format',
      'docker',
      '-f',
      'docker/mail/Dockerfile',
      '--build-arg',
      `BASE_IMAGE=${images.debian}`,
      '-t',
      MAIL_IMAGE,
      '.',
    ]),
  );
  // Earlier builds of these images (the Dockerfiles label them), no longer tagged: a gigabyte each.
  await must('podman', ['image', 'prune', '-f', '--filter', 'label=org.postern.image']);
}

const secret = () => randomBytes(24).toString('hex');

/** What docker/.env.example asks for, with this run's ports and images. */
function composeEnv(images: Images): Record<string, string> {
  return {
    POSTERN_MASTER_KEY: randomBytes(32).toString('base64'),
    POSTERN_IMAP_MASTER_PASSWORD: secret(),
    POSTERN_HINT_SECRET: secret(),
    POSTGRES_PASSWORD: secret(),
    POSTERN_APP_ORIGIN: `http://localhost:${PORTS.api1}`,
    POSTERN_PORT_1: String(PORTS.api1),
    POSTERN_PORT_2: String(PORTS.api2),
    POSTERN_METRICS_PORT_1: String(PORTS.metrics1),
    POSTERN_METRICS_PORT_2: String(PORTS.metrics2),
    MAIL_SMTP_PORT: String(PORTS.smtp),
    MAIL_IMAP_PORT: String(PORTS.imap),
    MAIL_SUBMISSION_PORT: String(PORTS.submission),
    MAIL_DOMAIN: DOMAIN,
    POSTERN_IMAGE,
    POSTERN_MAIL_IMAGE: MAIL_IMAGE,
    POSTGRES_IMAGE: images.postgres,
    REDIS_IMAGE: images.redis,
  };
}

const compose = (env: Record<string, string>, args: string[], opts: { timeoutMs?: number } = {}) =>
  run('podman-compose', ['-p', PROJECT, '-f', COMPOSE_FILE, ...args], { env, ...opts });

const container = (service: string) => `${PROJECT}_${service}_1`;
const SERVICES = ['postern-1', 'postern-2', 'demo-seed', 'mail', 'postgres', 'redis'];

async function until<T>(what: string, ms: number, fn: () => Promise<T | null | undefined>): Promise<T> {
  const deadline = Date.now() + ms;
  let last: unknown = null;
  for (;;) {
    try {
      const v = await fn();
      if (v !== null && v !== undefined) return v;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) throw new Error(`${what}: not within ${ms / 1000} s${last ? ` (${(last as Error).message})` : ''}`);
    await new Promise((r) => setTimeout(r, 500));
  }
}

/** An API call; the body as the caller expects it to be (the checks that follow say when it is not). */
async function api<T>(port: number, path: string, token: string, init: RequestInit = {}): Promise<{ status: number; body: Partial<T> }> {
  const res = await fetch(`http://127.0.0.1:${port}${path}`, {
    ...init,
    headers: { authorization: `Bearer ${token}`, ...(init.body ? { 'content-type': 'application/json' } : {}) },
    signal: AbortSignal.timeout(10_000),
  });
  const text = await res.text();
  return { status: res.status, body: (text ? JSON.parse(text) : {}) as Partial<T> };
}

interface Seed {
  inboxes: { compatible: { id: string; address: string } };
  tokens: Record<string, string>;
  enrollmentLink: string;
}

/** The subjects of the INBOX label's newest messages, through the API. */
async function inboxSubjects(port: number, seed: Seed, token: string): Promise<string[]> {
  const inbox = seed.inboxes.compatible.id;
  const labels = await api<{ labels: Array<{ id: string; name: string }> }>(port, `/v1/inboxes/${inbox}/labels`, token);
  const label = labels.body.labels?.find((l) => l.name === 'INBOX');
  if (!label) throw new Error('no INBOX label');
  const list = await api<{ messages: Array<{ subject?: string }> }>(
    port,
    `/v1/inboxes/${inbox}/labels/${encodeURIComponent(label.id)}/messages?limit=50`,
    token,
  );
  return (list.body.messages ?? []).map((m) => m.subject ?? '');
}

async function deliverBySmtp(subject: string, to: string): Promise<void> {
  const transport = nodemailer.createTransport({ host: '127.0.0.1', port: PORTS.smtp, secure: false, ignoreTLS: true });
  try {
    await transport.sendMail({ from: 'smoke@example.com', to, subject, text: 'From the container test.\n' });
  } finally {
    transport.close();
  }
}

async function smoke(): Promise<void> {
  // Both replicas serving.
  for (const port of [PORTS.api1, PORTS.api2]) {
    await until(`Postern on 127.0.0.1:${port} answering /healthz`, 180_000, async () =>
      (await fetch(`http://127.0.0.1:${port}/healthz`)).ok ? true : null,
    );
  }
  log('both replicas answer /healthz');

  const seedOut = await until('the demo-seed service finishing', 180_000, async () => {
    const state = (await must('podman', ['inspect', '--format', '{{.State.Status}} {{.State.ExitCode}}', container('demo-seed')])).trim();
    return state.startsWith('exited 0') ? must('podman', ['logs', container('demo-seed')]) : null;
  });
  const json = seedOut.slice(seedOut.indexOf('\n{') + 1, seedOut.lastIndexOf('\n}') + 2);
  const seed = JSON.parse(json) as Seed;
  if (!seed.tokens?.['messages:read'] || !seed.enrollmentLink) throw new Error(`demo-seed printed no tokens:\n${seedOut}`);
  log(`demo-seed printed the tokens and the enrollment link (${seed.enrollmentLink})`);
  // The demo's token with every scope (scripts/demo-seed.ts, TOKEN_SETS.all), messages:write included.
  const all = seed.tokens['messages:read,content:read,flags:write,messages:write,send,events:read,events:write,project:read,audit:read'];
  if (!all) throw new Error(`demo-seed printed no token with every scope:\n${seedOut}`);

  // An API call with a token.
  const inboxes = await api<{ inboxes: unknown[] }>(PORTS.api1, '/v1/inboxes', seed.tokens['messages:read']);
  if (inboxes.status !== 200 || inboxes.body.inboxes?.length !== 2)
    throw new Error(`GET /v1/inboxes: ${inboxes.status} ${JSON.stringify(inboxes.body)}`);
  log('GET /v1/inboxes with a token: the two demo inboxes');

  // A message delivered by SMTP to the mail container (through Postern's ingress), listed through the API.
  const delivered = `smtp smoke ${secret()}`;
  await deliverBySmtp(delivered, seed.inboxes.compatible.address);
  await until('the SMTP-delivered message listed through the API', 90_000, async () =>
    (await inboxSubjects(PORTS.api1, seed, all)).includes(delivered) ? true : null,
  );
  log('a message delivered by SMTP is listed through the API');

  // A send relayed: Postern → the mail container's submission → its MX → the ingress → the inbox.
  const sent = `send smoke ${secret()}`;
  const address = seed.inboxes.compatible.address;
  const raw = Buffer.from(`From: ${address}\r\nTo: ${address}\r\nSubject: ${sent}\r\n\r\nRelayed.\r\n`).toString('base64');
  const send = await api<{ sent: boolean }>(PORTS.api1, `/v1/inboxes/${seed.inboxes.compatible.id}/messages`, all, {
    method: 'POST',
    body: JSON.stringify({ from: address, to: [address], raw }),
  });
  if (send.status !== 200 || send.body?.sent !== true) throw new Error(`POST …/messages: ${send.status} ${JSON.stringify(send.body)}`);
  await until('the sent message arriving back through the relay', 90_000, async () =>
    (await inboxSubjects(PORTS.api1, seed, all)).includes(sent) ? true : null,
  );
  log('a send was relayed by the mail container and arrived');

  // /metrics on the internal listener (POSTERN_METRICS_LISTEN in the compose file): after the
  // traffic above, the request histogram has the routes called and the send counted.
  const metrics = await fetch(`http://127.0.0.1:${PORTS.metrics1}/metrics`, { signal: AbortSignal.timeout(5000) });
  const text = await metrics.text();
  if (metrics.status !== 200) throw new Error(`GET /metrics: ${metrics.status} ${text.slice(0, 200)}`);
  for (const family of ['http_request_duration_seconds_bucket', 'process_cpu_seconds_total', 'postern_sends_total']) {
    if (!text.includes(family)) throw new Error(`GET /metrics has no ${family}`);
  }
  if ((await fetch(`http://127.0.0.1:${PORTS.api1}/metrics`)).status !== 404) throw new Error('/metrics answers on the public port');
  log('/metrics scraped (and not served on the public port)');

  // A replica killed: the other still serves the API, and the mail server's ingress falls back to it.
  await must('podman', ['kill', container('postern-1')]);
  const after = await api<{ inboxes: unknown[] }>(PORTS.api2, '/v1/inboxes', seed.tokens['messages:read']);
  if (after.status !== 200 || after.body.inboxes?.length !== 2)
    throw new Error(`replica 2 after replica 1 was killed: ${after.status} ${JSON.stringify(after.body)}`);
  const failover = `failover smoke ${secret()}`;
  await deliverBySmtp(failover, address);
  await until('mail delivered while replica 1 is down, listed by replica 2', 120_000, async () =>
    (await inboxSubjects(PORTS.api2, seed, all)).includes(failover) ? true : null,
  );
  log('replica 1 killed: replica 2 still serves the API and takes the mail');
}

async function showLogs(): Promise<void> {
  for (const service of SERVICES) {
    const res = await run('podman', ['logs', '--tail', '40', container(service)]);
    process.stderr.write(`\n--- ${container(service)} (last 40 lines) ---\n${res.out}`);
  }
}

async function down(env: Record<string, string>): Promise<void> {
  // podman-compose 1.0's down removes containers without their anonymous volumes (each Postern
  // container's /var/lib/postern) and leaves the network: the project's containers go first, with
  // their volumes, then down -v takes the named volumes, then the network.
  const ids = (await must('podman', ['ps', '-a', '-q', '--filter', `label=io.podman.compose.project=${PROJECT}`]))
    .split('\n')
    .filter(Boolean);
  if (ids.length > 0) await must('podman', ['rm', '-f', '-v', '-t', '5', ...ids]);
  await compose(env, ['down', '-v'], { timeoutMs: 120_000 });
  await run('podman', ['network', 'rm', '-f', `${PROJECT}_default`]);
}

async function main(): Promise<void> {
  const t0 = Date.now();
  await timed('checking podman, podman-compose, debootstrap, runc and CNI dnsname', () =>
    installMissing([
      { pkg: 'podman', files: ['/usr/bin/podman'] },
      { pkg: 'podman-compose', files: ['/usr/bin/podman-compose'] },
      { pkg: 'debootstrap', files: ['/usr/sbin/debootstrap'] },
      { pkg: 'runc', files: ['/usr/sbin/runc'] },
      // CNI's DNS for compose's service names (postgres, redis, mail): podman does not pull it in.
      { pkg: 'golang-github-containernetworking-plugin-dnsname', files: ['/usr/lib/cni/dnsname'] },
    ]),
  );
  await fs.mkdir(WORK, { recursive: true });
  await fs.writeFile(CONTAINERS_CONF, containersConf());
  const images = await timed('finding the base images', baseImages);
  await buildImages(images);
  const env = composeEnv(images);
  // What an earlier run that was killed may have left.
  await down(env);
  let failed = true;
  try {
    await timed('podman-compose up', () => must('podman-compose', ['-p', PROJECT, '-f', COMPOSE_FILE, 'up', '-d', '--no-build'], { env }));
    await timed('smoke test', smoke);
    failed = false;
  } finally {
    if (failed) await showLogs();
    if (process.env.POSTERN_CONTAINER_TEST_KEEP === '1')
      log(`left running: CONTAINERS_CONF=${CONTAINERS_CONF} podman-compose -p ${PROJECT} -f ${COMPOSE_FILE} ps`);
    else await timed('podman-compose down (containers, network, volumes)', () => down(env));
  }
  log(`passed in ${((Date.now() - t0) / 1000).toFixed(0)} s`);
}

main().catch((err: unknown) => {
  log(`FAILED: ${(err as Error).stack ?? String(err)}`);
  process.exitCode = 1;
});
