// The `postern` command: the service, the staff CLI and the demo. Every command prints one JSON
// value on stdout (an object; the staff lists an array); failures print {"error": "..."} and exit
// non-zero. Each command imports what it runs when it runs (lib/server.ts for serve, bin/staff.ts
// for admin): a staff command answers without loading the service (docs/operations.md, "The
// postern command").
import cluster from 'node:cluster';
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { ConfigError, describeSettings, loadConfig } from '../lib/config.ts';
import { DomainError, notFound } from '../lib/errors.ts';
import { readFileSync } from 'node:fs';
import { MasterKey, MasterKeyError } from '../lib/crypto/master-key.ts';
import { REPORT_MS } from '../lib/mail/watch-all.ts';
import { openStore } from '../adapters/store/open.ts';
import { backupStore, DumpError, exportStore, importStore } from '../adapters/store/portable.ts';
import type { ListeningMessage } from './cluster.ts';
import { untilSignal } from './signals.ts';
import { WebhookStaff } from '../lib/webhooks/staff.ts';
import { setKeyByStaff } from '../lib/auth/key-change.ts';

class UsageError extends Error {}

const USAGE = `usage:
  postern serve                      run the service (configured by environment variables; --help lists them)
  postern demo                       start the mail environment, seed a demo project and run the service
  postern mcp --url BASE_URL [--token svc_…]   (or POSTERN_TOKEN) MCP over stdio for desktop clients, relayed to BASE_URL/mcp (docs/mcp.md)
  postern demo-seed --mx HOST:PORT [--domain DOMAIN] [--password PW] [--public-url URL]
                                     seed the demo project into a running deployment whose mail server
                                     has demo@DOMAIN and vault@DOMAIN already (the compose file's demo)
  postern admin project create --name NAME
  postern admin project list
  postern admin project show --project PRJ           its members (with their inboxes and roles) and inboxes
  postern admin project delete --project PRJ --yes   deletes it and all it holds: members, inboxes, keys, tokens,
                                                     sessions, events, webhooks (mail stays in the mail server)
  postern admin member add --project PRJ --email EMAIL
  postern admin member list --project PRJ
  postern admin member remove --member MEM --yes     with their grants, sessions, tokens, passkeys and keys
  postern admin inbox add --project PRJ --imap-user USER --address ADDR [--address ADDR...]
                          [--mode compatible|zero-access] [--create-imap-user [--imap-password PW]]
  postern admin member set-key --member MEM --public-key-file FILE   (OpenPGP public key, armored or binary)
  postern admin inbox list [--project PRJ]
  postern admin inbox show --inbox IBX        the inbox and who may use it
  postern admin inbox remove --inbox IBX --yes   stops watching it and drops its index and keys; its events stay
  postern admin inbox status --inbox IBX      what is indexed, the last sync, how it is watched, what is left to seal
  postern admin grant --member MEM --inbox IBX --role owner|member|reader
  postern admin revoke --member MEM --inbox IBX
  postern admin inbox rotate-key --inbox IBX
  postern admin token create --member MEM --scopes a,b,c [--inboxes IBX,IBX] [--expires-in SECONDS]
  postern admin token list (--project PRJ | --member MEM)   ids, scopes, inboxes, state and times; never secrets
  postern admin token revoke --id TOK --yes
  postern admin webhook list [--project PRJ]  every webhook endpoint: where it sends, enabled or why not, failing since when
  postern admin webhook disable --id WHK [--reason TEXT]   stops sending to it (its deliveries wait; its owner cannot enable it again)
  postern admin webhook enable --id WHK       sends to an endpoint staff disabled again (its waiting deliveries first)
  postern admin session create --member MEM [--expires-in SECONDS]
  postern admin session list (--project PRJ | --member MEM)
  postern admin session revoke --id SES --yes
  postern admin member invite --member MEM [--expires-in SECONDS]   one-time passkey enrollment link
  postern admin migrate                       brings the store's schema up to date (PostgreSQL with POSTERN_DATABASE_URL)
  postern admin backup --to FILE              a consistent copy of the SQLite store, safe while serve runs (PostgreSQL: pg_dump)
  postern admin export --to FILE              the whole store as a portable file, to move it to the other engine
  postern admin import --from FILE            fills an empty store (either engine) from an export`;

type Options = NonNullable<ParseArgsConfig['options']>;

function flags<const O extends Options>(args: string[], options: O) {
  try {
    return parseArgs({ args, options, strict: true, allowPositionals: false }).values;
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
}

function required(values: Record<string, unknown>, name: string): string {
  const v = values[name];
  if (typeof v !== 'string' || v === '') throw new UsageError(`--${name} is required`);
  return v;
}

function seconds(value: string | undefined, name: string): number | undefined {
  if (value === undefined) return undefined;
  if (!/^\d+$/.test(value)) throw new UsageError(`--${name} must be a whole number of seconds`);
  return Number(value);
}

const list = (value: string) =>
  value
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);

const ADMIN_COMMANDS = [
  'project create',
  'project list',
  'project show',
  'project delete',
  'member add',
  'member list',
  'member remove',
  'member set-key',
  'member invite',
  'inbox add',
  'inbox list',
  'inbox show',
  'inbox remove',
  'inbox status',
  'inbox rotate-key',
  'token create',
  'token list',
  'token revoke',
  'session create',
  'session list',
  'session revoke',
  'webhook list',
  'webhook disable',
  'webhook enable',
];

/** Commands that delete or end something for good: they act only with --yes. */
const DESTRUCTIVE = ['project delete', 'member remove', 'inbox remove', 'token revoke', 'session revoke'];

/** The flags naming whose credentials a list covers. */
const OWNER = { project: { type: 'string' }, member: { type: 'string' } } as const;

async function admin(args: string[]): Promise<unknown> {
  // Commands are one word (grant, revoke) or a noun and a verb (token create).
  const twoWords = args.slice(0, 2).join(' ');
  const [command, tail] = ADMIN_COMMANDS.includes(twoWords) ? [twoWords, args.slice(2)] : [args[0] ?? '', args.slice(1)];
  // Before the SQLite store and the keys are opened: migrate is the one command for PostgreSQL.
  if (command === 'migrate') return migrate(tail);
  if (command === 'backup' || command === 'export' || command === 'import') return storeFile(command, tail);
  // Refused before the store is even opened (opening migrates it): nothing changes without --yes.
  if (DESTRUCTIVE.includes(command) && !tail.includes('--yes')) {
    throw new UsageError(`${command} cannot be undone: add --yes to do it`);
  }
  const { openStaff } = await import('./staff.ts');
  const { admin, memberKeys, store, config, passkeys, events, close } = await openStaff(loadConfig());
  const { directory, mailIndex: index, resealJobs: sealing } = store;
  try {
    switch (command) {
      case 'project create': {
        const v = flags(tail, { name: { type: 'string' } });
        return await admin.createProject(required(v, 'name'));
      }
      case 'project list': {
        flags(tail, {});
        return await admin.listProjects();
      }
      case 'project show': {
        const v = flags(tail, { project: { type: 'string' } });
        return await admin.showProject(required(v, 'project'));
      }
      case 'project delete': {
        const v = flags(tail, { project: { type: 'string' }, yes: { type: 'boolean' } });
        return await admin.deleteProject(required(v, 'project'));
      }
      case 'member list': {
        const v = flags(tail, { project: { type: 'string' } });
        return await admin.listMembers(required(v, 'project'));
      }
      case 'member remove': {
        const v = flags(tail, { member: { type: 'string' }, yes: { type: 'boolean' } });
        return await admin.removeMember(required(v, 'member'));
      }
      case 'inbox list': {
        const v = flags(tail, { project: { type: 'string' } });
        return await admin.listInboxes(v.project);
      }
      case 'inbox show': {
        const v = flags(tail, { inbox: { type: 'string' } });
        return await admin.showInbox(required(v, 'inbox'));
      }
      case 'token list': {
        const v = flags(tail, OWNER);
        if (!v.project && !v.member) throw new UsageError('--project or --member is required');
        return await admin.listTokens({ projectId: v.project, memberId: v.member });
      }
      case 'session list': {
        const v = flags(tail, OWNER);
        if (!v.project && !v.member) throw new UsageError('--project or --member is required');
        return await admin.listSessions({ projectId: v.project, memberId: v.member });
      }
      case 'session revoke': {
        const v = flags(tail, { id: { type: 'string' }, yes: { type: 'boolean' } });
        return await admin.revokeSession(required(v, 'id'));
      }
      case 'member add': {
        const v = flags(tail, { project: { type: 'string' }, email: { type: 'string' } });
        return await admin.addMember(required(v, 'project'), required(v, 'email'));
      }
      case 'member invite': {
        const v = flags(tail, { member: { type: 'string' }, 'expires-in': { type: 'string' } });
        return await (await passkeys()).invite(required(v, 'member'), seconds(v['expires-in'], 'expires-in'));
      }
      case 'member set-key': {
        const v = flags(tail, { member: { type: 'string' }, 'public-key-file': { type: 'string' } });
        const memberId = required(v, 'member');
        const file = required(v, 'public-key-file');
        return await setKeyByStaff({ directory, memberKeys, events }, memberId, () => {
          try {
            return readFileSync(file);
          } catch (err) {
            throw new UsageError(`cannot read ${file}: ${(err as Error).message}`);
          }
        });
      }
      case 'inbox add': {
        const v = flags(tail, {
          project: { type: 'string' },
          'imap-user': { type: 'string' },
          address: { type: 'string', multiple: true },
          mode: { type: 'string' },
          'create-imap-user': { type: 'boolean' },
          'imap-password': { type: 'string' },
        });
        const imapUser = required(v, 'imap-user');
        const projectId = required(v, 'project');
        if (v['imap-password'] && !v['create-imap-user']) throw new UsageError('--imap-password goes with --create-imap-user');
        // Every check first (Admin.addInbox); the Dovecot user is made only once they passed.
        let password: string | null = null;
        const createImapUser = async () => {
          const args = [imapUser, ...(v['imap-password'] ? ['--password', v['imap-password']] : [])];
          for (const a of v.address ?? []) args.push('--address', a);
          const made = await runDevTool('mailenv-user.ts', args, { capture: true });
          const answer = JSON.parse(made.stdout) as { password?: string; error?: string };
          if (answer.password === undefined) throw new Error(answer.error ?? `could not create the IMAP user (exit ${made.code})`);
          password = answer.password;
        };
        const created = await admin.addInbox({
          projectId,
          imapUser,
          addresses: v.address ?? [],
          ...(v.mode ? { mode: v.mode } : {}),
          ...(v['create-imap-user'] ? { createImapUser } : {}),
        });
        return password === null ? created : { ...created, imapUser, imapPassword: password };
      }
      case 'inbox rotate-key': {
        const v = flags(tail, { inbox: { type: 'string' } });
        return await admin.rotateKey(required(v, 'inbox'));
      }
      case 'inbox remove': {
        const v = flags(tail, { inbox: { type: 'string' }, yes: { type: 'boolean' } });
        return await admin.removeInbox(required(v, 'inbox'));
      }
      case 'inbox status': {
        const v = flags(tail, { inbox: { type: 'string' } });
        const id = required(v, 'inbox');
        const inbox = await directory.getInbox(id);
        if (!inbox) throw notFound(`no inbox ${id}`);
        const s = await index.status(id);
        return {
          id,
          imapUser: inbox.imapUser,
          // `refilling`: places of a label refill under way, not yet visible to reads.
          indexed: { complete: s.seeded, messages: s.messages, places: s.locations, labels: s.labels, refilling: s.staged },
          // Sends whose Sent copy is not filed yet (counted up to 1,000): a backlog that grows says filing is stuck.
          outbox: { unfiled: (await store.outbox.backlog(id, 1000)).length },
          lastSync: s.syncedAt === null ? null : new Date(s.syncedAt).toISOString(),
          // Zero-access: messages the index holds that are not sealed yet (docs/encryption.md,
          // "Sealing what is already there"); 0 once `indexed.complete` means none is left.
          sealing: inbox.mode === 'zero-access' ? await sealing.status(id) : null,
          // How `postern serve` with this configuration watches it, and why; `notifyWatcher`: the
          // process holding its NOTIFY lease; `lastHint`: the last push hint for it.
          watch: {
            mode: config.watch.mode,
            reason: config.watch.reason,
            sweepMs: config.watch.sweepMs,
            notifyWatcher: s.watcher?.holder ?? null,
            lastHint: s.hintedAt === null ? null : new Date(s.hintedAt).toISOString(),
          },
          // What each running server says of its watch (written every few seconds): push
          // configured but no hint arriving shows here.
          servers: (await index.watchReports(Date.now() - 3 * REPORT_MS)).map(({ origin, report, updatedAt }) => ({
            origin,
            mode: report.mode,
            reason: report.reason,
            pushHealthy: report.pushHealthy,
            verdict: report.verdict,
            hints: report.hints,
            lastHintAt: report.lastHintAt === null ? null : new Date(report.lastHintAt).toISOString(),
            missedHintAt: report.missedHintAt === null ? null : new Date(report.missedHintAt).toISOString(),
            reportedAt: new Date(updatedAt).toISOString(),
          })),
        };
      }
      case 'grant': {
        const v = flags(tail, { member: { type: 'string' }, inbox: { type: 'string' }, role: { type: 'string' } });
        return await admin.grant(required(v, 'member'), required(v, 'inbox'), required(v, 'role'));
      }
      case 'revoke': {
        const v = flags(tail, { member: { type: 'string' }, inbox: { type: 'string' } });
        return await admin.revoke(required(v, 'member'), required(v, 'inbox'));
      }
      case 'token create': {
        const v = flags(tail, {
          member: { type: 'string' },
          scopes: { type: 'string' },
          inboxes: { type: 'string' },
          'expires-in': { type: 'string' },
        });
        if (v.scopes === undefined) throw new UsageError('--scopes is required (it may be empty: --scopes "")');
        return await admin.createToken({
          memberId: required(v, 'member'),
          scopes: list(v.scopes),
          ...(v.inboxes !== undefined ? { inboxes: list(v.inboxes) } : {}),
          ...(v['expires-in'] !== undefined ? { expiresInSeconds: seconds(v['expires-in'], 'expires-in')! } : {}),
        });
      }
      case 'token revoke': {
        const v = flags(tail, { id: { type: 'string' }, yes: { type: 'boolean' } });
        return await admin.revokeToken(required(v, 'id'));
      }
      case 'session create': {
        const v = flags(tail, { member: { type: 'string' }, 'expires-in': { type: 'string' } });
        return await admin.createSession(required(v, 'member'), seconds(v['expires-in'], 'expires-in'));
      }
      case 'webhook list': {
        const v = flags(tail, { project: { type: 'string' } });
        return await new WebhookStaff(store.webhooks, events).list(v.project);
      }
      case 'webhook disable': {
        const v = flags(tail, { id: { type: 'string' }, reason: { type: 'string' } });
        return await new WebhookStaff(store.webhooks, events).disable(required(v, 'id'), v.reason ?? 'no reason given');
      }
      case 'webhook enable': {
        const v = flags(tail, { id: { type: 'string' } });
        return await new WebhookStaff(store.webhooks, events).enable(required(v, 'id'));
      }
      default:
        throw new UsageError(`unknown admin command: ${args.join(' ')}`);
    }
  } finally {
    await close();
  }
}

/**
 * Brings the store's schema up to date and says what it did. Opening a store migrates it (under
 * PostgreSQL's advisory lock, or SQLite's write lock), so `serve` needs no separate step; this
 * runs it explicitly, before a rollout, say.
 */
async function migrate(args: string[]): Promise<unknown> {
  flags(args, {});
  const config = loadConfig(process.env);
  if (config.databaseUrl === null) {
    await (await openStore(config)).close();
    return { store: 'sqlite', file: config.dbFile, migrated: true };
  }
  const { openPgPool, migratePg } = await import('../adapters/store/postgres/db.ts');
  const pool = openPgPool(config.databaseUrl, { max: 1, applicationName: 'postern admin migrate' });
  try {
    const { applied, version } = await migratePg(pool);
    return { store: 'postgresql', applied, version };
  } finally {
    await pool.end();
  }
}

/**
 * The store as a file (docs/deployment.md, "Backup and restore"): `backup` and `export` write a
 * new file (never over one), `import` fills an empty store. No master key: keys travel sealed.
 */
async function storeFile(command: 'backup' | 'export' | 'import', args: string[]): Promise<unknown> {
  const config = loadConfig(process.env);
  if (command === 'import') return importStore(config, required(flags(args, { from: { type: 'string' } }), 'from'));
  const to = required(flags(args, { to: { type: 'string' } }), 'to');
  return command === 'backup' ? backupStore(config, to) : exportStore(config, to);
}

async function demoSeed(args: string[]): Promise<unknown> {
  const v = flags(args, {
    mx: { type: 'string' },
    domain: { type: 'string' },
    password: { type: 'string' },
    'public-url': { type: 'string' },
  });
  const mx = /^([^\s:]+):(\d{1,5})$/.exec(required(v, 'mx'));
  if (!mx) throw new UsageError('--mx must be host:port');
  const { runDemoSeed, DEMO_PASSWORD } = await import('./demo-seed.ts');
  return runDemoSeed({
    mx: { host: mx[1]!, port: Number(mx[2]) },
    domain: v.domain ?? 'postern.test',
    password: v.password ?? DEMO_PASSWORD,
    ...(v['public-url'] ? { publicUrl: v['public-url'] } : {}),
  });
}

async function serve(args: string[]): Promise<number> {
  const v = flags(args, { help: { type: 'boolean' } });
  if (v.help) {
    process.stdout.write(`postern serve: runs the Mailbox Content and Events API.\n\nEnvironment variables:\n${describeSettings()}\n`);
    return 0;
  }
  const config = loadConfig(process.env, { serve: true });
  if (config.workers > 1 && cluster.isPrimary) {
    // Refuse before starting workers that would each refuse.
    MasterKey.parse(config.masterKey);
    // Migrate once here, so the workers start on an up-to-date store instead of racing to it.
    await (await openStore(config, { applicationName: 'postern primary' })).close();
    const { runPrimary } = await import('./cluster.ts');
    return runPrimary(config.workers, config.http.shutdownGraceMs, config.metrics);
  }
  const { openPostern } = await import('../lib/server.ts');
  const postern = await openPostern(config);
  const { url, metricsUrl } = await postern.listen();
  if (cluster.isWorker) {
    const ready: ListeningMessage = { postern: 'listening', url };
    process.send!(ready);
    // A worker whose primary is gone stops too, rather than serving on alone.
    await Promise.race([untilSignal(), new Promise((resolve) => process.once('disconnect', resolve))]);
    // Stopping. A terminal's Ctrl-C reaches the workers and the primary alike, and the primary
    // then sends SIGTERM: that must not cut this shutdown short (the primary SIGKILLs only
    // after the grace and some more).
    const ignore = () => undefined;
    process.on('SIGINT', ignore);
    process.on('SIGTERM', ignore);
  } else {
    process.stdout.write(
      `${JSON.stringify({ listening: url, baseUrl: `${url}/v1`, appUrl: `${url}/api/v1`, ...(metricsUrl ? { metrics: `${metricsUrl}/metrics` } : {}) })}\n`,
    );
    await untilSignal();
  }
  // Requests under way finish (within POSTERN_SHUTDOWN_GRACE_MS), streams are told to reconnect.
  await postern.shutdown();
  // The IPC channel to the primary would keep a worker alive once everything else has stopped.
  if (cluster.isWorker && process.connected) process.disconnect();
  return 0;
}

/**
 * The development commands (`demo`, `admin inbox add --create-imap-user`) use the bundled mail
 * environment, which is the repository's development tooling (scripts/): they run it as a process
 * of its own, so the CLI imports nothing from scripts/ and a production image needs none of it.
 * Without `capture` (the demo) it runs in its own process group and gets SIGINT and SIGTERM from
 * this process, so a terminal's Ctrl-C reaches it once; `capture` keeps its stdout (one JSON
 * value) instead of passing it through.
 */
async function runDevTool(script: string, args: string[], o: { capture: boolean }): Promise<{ code: number; stdout: string }> {
  const { spawn } = await import('node:child_process');
  const { join } = await import('node:path');
  const { ROOT } = await import('../lib/paths.ts');
  const child = spawn(process.execPath, ['--import', import.meta.resolve('tsx'), join(ROOT, 'scripts', script), ...args], {
    stdio: ['ignore', o.capture ? 'pipe' : 'inherit', 'inherit'],
    detached: !o.capture,
  });
  const forward = (signal: NodeJS.Signals) => child.kill(signal);
  if (!o.capture) {
    process.on('SIGINT', forward);
    process.on('SIGTERM', forward);
  }
  let stdout = '';
  child.stdout?.on('data', (d: Buffer) => (stdout += d.toString()));
  try {
    const code = await new Promise<number>((resolve, reject) => {
      child.once('error', reject);
      child.once('exit', (exit, signal) => resolve(exit ?? (signal ? 1 : 0)));
    });
    return { code, stdout };
  } finally {
    process.off('SIGINT', forward);
    process.off('SIGTERM', forward);
  }
}

/** Stdout carries MCP messages only: failures go to stderr, and nothing is printed at the end. */
async function mcp(args: string[]): Promise<number> {
  const v = flags(args, { url: { type: 'string' }, token: { type: 'string' } });
  const raw = required(v, 'url');
  // The environment keeps the token out of `ps` and shell history; --token is for trying it out.
  const token = typeof v.token === 'string' && v.token !== '' ? v.token : process.env.POSTERN_TOKEN;
  if (!token) throw new UsageError('a token is required: set POSTERN_TOKEN (or pass --token)');
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new UsageError('--url must be an absolute URL, such as https://mail.example.org/v1');
  }
  // Given {base_url} (…/v1) or the endpoint itself (…/v1/mcp).
  if (!/\/mcp\/?$/.test(url.pathname)) url.pathname = `${url.pathname.replace(/\/$/, '')}/mcp`;
  const { bridgeStdio } = await import('./mcp-bridge.ts');
  await bridgeStdio({ url, token });
  return 0;
}

async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  try {
    switch (command) {
      case 'serve':
        return await serve(rest);
      case 'mcp':
        return await mcp(rest);
      case 'demo':
        return (await runDevTool('demo.ts', rest, { capture: false })).code;
      case 'demo-seed':
        process.stdout.write(`${JSON.stringify(await demoSeed(rest), null, 2)}\n`);
        return 0;
      case 'admin':
        process.stdout.write(`${JSON.stringify(await admin(rest))}\n`);
        return 0;
      case undefined:
      case 'help':
      case '--help':
      case '-h':
        process.stdout.write(`${USAGE}\n`);
        return command === undefined ? 2 : 0;
      default:
        throw new UsageError(`unknown command: ${command}`);
    }
  } catch (err) {
    const usage = err instanceof UsageError || (err instanceof DumpError && err.usage);
    const known =
      usage || err instanceof DomainError || err instanceof ConfigError || err instanceof MasterKeyError || err instanceof DumpError;
    const message = known ? err.message : `unexpected failure: ${(err as Error).message ?? String(err)}`;
    process.stdout.write(`${JSON.stringify({ error: message })}\n`);
    if (err instanceof UsageError) process.stderr.write(`${USAGE}\n`);
    else if (!known) process.stderr.write(`${(err as Error).stack ?? String(err)}\n`);
    return usage ? 2 : 1;
  }
}

const code = await main(process.argv.slice(2));
process.exitCode = code;
// After a failure, or in a cluster worker, exit rather than wait: a half-started service (a Redis
// connection, an IPC channel to the primary) would otherwise keep the process alive, and a worker
// that never exits leaves its primary waiting for it.
if (code !== 0 || cluster.isWorker) process.stdout.write('', () => process.exit(code));
