// `postern demo`: the mail environment, a seeded project and the running service, in one command.
// Seeds a compatible inbox with a few realistic messages in several labels (one delivered through
// Postfix, the rest appended as a mail app would) and an empty zero-access inbox, then prints how
// to call the API. Mail reaches both inboxes as in a deployment (docs/ingress.md): Postfix →
// Postern's LMTP ingress → Dovecot, so the zero-access inbox never holds a plaintext copy, not
// even briefly. Ctrl-C stops the service and whatever part of the environment it started.
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type AddressInfo } from 'node:net';
import { join } from 'node:path';
import { pino } from 'pino';
import { untilSignal } from '../bin/signals.ts';
import { loadConfig } from '../lib/config.ts';
import { MasterKey } from '../lib/crypto/master-key.ts';
import { openPostern } from '../lib/server.ts';
import { addUser, down, flushQueue, isMain, posternEnv, up } from './mailenv.ts';
import { buildApp } from './build-app.ts';
import { DEMO_PASSWORD, deliverSeed, describeDemo, seedMailbox, seedProject, type DemoMail } from '../bin/demo-seed.ts';

function anyFreePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

export async function runDemo(_args: string[]): Promise<void> {
  process.stderr.write('Starting the mail environment (the first run installs Dovecot, Postfix, Redis and PostgreSQL)…\n');
  const env = await up();
  const dir = process.env.POSTERN_DEMO_DIR ?? join(env.dir, 'demo');
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });

  // In the env's ingress domain, which Postfix delivers only through the ingress: every form of
  // these users (their addresses, details, the IMAP user names) passes Postern on the way in.
  const demoUser = `demo@${env.ingress.domain}`;
  const vaultUser = `vault@${env.ingress.domain}`;
  await addUser(env, demoUser, DEMO_PASSWORD);
  await addUser(env, vaultUser, DEMO_PASSWORD);
  const mail: DemoMail = { imap: env.imap, mx: env.smtp, demoUser, vaultUser, password: DEMO_PASSWORD };
  const seeded = await seedMailbox(mail);

  // The demo's own master key, kept beside its database (0600) so `postern admin` commands on
  // that database can use it: POSTERN_MASTER_KEY=$(cat <dir>/master.key).
  const masterKeyFile = join(dir, 'master.key');
  writeFileSync(masterKeyFile, `${MasterKey.generate()}\n`, { mode: 0o600 });
  // A fixed port even when asked for any (0): the passkey origin must name the port browsers use.
  const port = process.env.POSTERN_PORT === '0' ? String(await anyFreePort()) : (process.env.POSTERN_PORT ?? '8787');
  const config = loadConfig({
    ...process.env,
    POSTERN_PORT: port,
    // Passkeys are bound to the origin the browser sees: localhost on the demo's port.
    POSTERN_APP_ORIGIN: process.env.POSTERN_APP_ORIGIN ?? `http://localhost:${port}`,
    POSTERN_DB: join(dir, 'postern.db'),
    ...posternEnv(env),
    // The delivery ingress on the port the env's Postfix delivers the ingress domain to.
    POSTERN_LMTP_HOST: env.ingress.host,
    POSTERN_LMTP_PORT: String(env.ingress.port),
    POSTERN_MASTER_KEY: readFileSync(masterKeyFile, 'utf8').trim(),
  });
  const postern = await openPostern(config, pino({ level: process.env.POSTERN_LOG_LEVEL ?? 'warn' }));
  const project = await seedProject(postern.admin, postern.passkeys, mail);
  // The web app is built from web/ on every demo run (dist/ is not committed).
  await buildApp();

  const testMailFile = join(dir, 'test-mail.eml');
  writeFileSync(
    testMailFile,
    ['From: You <you@example.com>', `To: ${vaultUser}`, 'Subject: For the vault', '', 'For your eyes only.', ''].join('\r\n'),
  );
  const { url } = await postern.listen().catch((err: unknown) => {
    const taken = (err as NodeJS.ErrnoException).code === 'EADDRINUSE';
    throw taken
      ? new Error(
          `a port the demo needs is taken (${(err as Error).message}): is another demo, or an ingress test, running on this mail environment?`,
        )
      : err;
  });
  if (seeded) {
    // Postfix may hold it back a while if it found the ingress port closed before Postern
    // listened (an earlier run, a test): its queue is flushed every 2 s, so it waits for Postern only.
    const arrived = await deliverSeed(mail, () => flushQueue(env.dir));
    if (!arrived)
      process.stderr.write('The delivered demo message has not arrived in 60 s: see the Postfix log in the environment directory.\n');
    // Dovecot has it; the index learns of it from the push hint a moment later. The first listing
    // a user makes should show it, so one pass now.
    await postern.mailMirror.syncNow({ id: project.inbox, imapUser: demoUser, addresses: [demoUser] });
  }
  const summary = {
    ...describeDemo(project, mail, { api: url, app: config.app.origin }),
    // For `postern admin` on this database: POSTERN_MASTER_KEY=$(cat <this file>).
    masterKeyFile,
    // A mail app's outgoing server is Postfix's submission service (login with the same user and
    // password). mx is where mail from outside arrives (Postfix's MX port, no login, relays
    // nothing): send test mail to the inboxes' addresses there; it goes through Postern's ingress.
    mailApp: {
      imap: `${env.imap.host}:${env.imap.port}`,
      users: [demoUser, vaultUser],
      password: DEMO_PASSWORD,
      smtp: `${env.submission.host}:${env.submission.port}`,
      mx: `${env.smtp.host}:${env.smtp.port}`,
    },
    // Test mail for the zero-access inbox, as from the internet: it is stored sealed.
    testMail: `curl -s smtp://${env.smtp.host}:${env.smtp.port} --mail-from you@example.com --mail-rcpt ${vaultUser} -T ${testMailFile}`,
  };
  process.stdout.write(`${JSON.stringify(summary, null, 2)}\n`);
  process.stderr.write(
    `\nPostern is running at ${summary.baseUrl} — try the curl lines above, or open the enrollment link, then ${summary.webApp}.\n`,
  );
  process.stderr.write(
    `Mail to ${demoUser} or ${vaultUser} arrives at ${summary.mailApp.mx} (SMTP, as from the internet) and passes Postern's ingress; testMail above sends one. Ctrl-C stops it.\n`,
  );

  await untilSignal();
  await postern.close();
  if (env.startedNow.length > 0) await down();
}

// Run by `postern demo` (bin/postern.ts) as a process of its own, with the command's arguments.
if (isMain(import.meta.url)) {
  runDemo(process.argv.slice(2)).catch((err: unknown) => {
    process.stdout.write(`${JSON.stringify({ error: (err as Error).message ?? String(err) })}\n`);
    process.stderr.write(`${(err as Error).stack ?? String(err)}\n`);
    process.exitCode = 1;
  });
}
