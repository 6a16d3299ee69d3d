// `postern demo`: the mail environment, a seeded project and the running service, in one command.
// Seeds a compatible inbox with a few realistic messages in several labels (one delivered through
// Postfix, the rest appended as a mail app would) and an empty zero-access inbox, then prints how
// to call the API. Mail reaches both inboxes as in a deployment (docs/ingress.md): Postfix →
// Postern's LMTP ingress → Dovecot, so the zero-access inbox never holds a plaintext copy, not
// even briefly. Ctrl-C stops the service and whatever part of the environment it started.
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type AddressInfo } from 'node:net';
import { join } from 'node:path';
import { ImapFlow } from 'imapflow';
import nodemailer from 'nodemailer';
import { pino } from 'pino';
import { untilSignal } from '../bin/signals.ts';
import { loadConfig } from '../lib/config.ts';
import { MasterKey } from '../lib/crypto/master-key.ts';
import { openPostern } from '../lib/server.ts';
import { addUser, down, flushQueue, posternEnv, up, type MailEnv } from './mailenv.ts';
import { buildApp } from './build-app.ts';

const DEMO_PASSWORD = 'demo-password';

interface SeedMessage {
  folder: string;
  flags: string[];
  from: string;
  to: string;
  subject: string;
  date: string;
  text: string;
}

function seedMessages(address: string): SeedMessage[] {
  const day = (n: number) => new Date(Date.now() - n * 86_400_000).toUTCString().replace('GMT', '+0000');
  return [
    { folder: 'INBOX', flags: [], from: 'Maria Lopez <maria@example.com>', to: address, subject: 'Quarterly report draft', date: day(0), text: 'Hi,\n\nThe draft of the Q3 report is ready for review. Could you look at the revenue table by Friday?\n\nThanks,\nMaria\n' },
    { folder: 'INBOX', flags: ['\\Seen', '\\Flagged'], from: 'Build bot <ci@example.net>', to: address, subject: 'Build #4821 passed', date: day(1), text: 'All 1,204 tests passed on main (8m 12s).\n' },
    { folder: 'INBOX', flags: ['\\Seen'], from: 'Jonas Berg <jonas@example.org>', to: address, subject: 'Re: Lunch on Thursday?', date: day(2), text: 'Thursday works. 12:30 at the usual place?\n\n> Are you free for lunch on Thursday?\n' },
    { folder: 'Archive', flags: ['\\Seen'], from: 'Accounts <billing@example.com>', to: address, subject: 'Your invoice for October', date: day(20), text: 'Invoice INV-2041 for October is attached to your account page. Amount due: EUR 120.00.\n' },
    { folder: 'Projects', flags: ['\\Seen', '$label1'], from: 'Priya Shah <priya@example.com>', to: address, subject: 'Kick-off notes', date: day(6), text: 'Notes from the kick-off:\n- scope agreed\n- first milestone in two weeks\n' },
    { folder: 'Sent', flags: ['\\Seen'], from: address, to: 'Maria Lopez <maria@example.com>', subject: 'Re: Quarterly report draft', date: day(0), text: 'Thanks Maria, I will review it tomorrow morning.\n' },
  ];
}

function rfc5322(m: SeedMessage, n: number): string {
  return [
    `From: ${m.from}`,
    `To: ${m.to}`,
    `Subject: ${m.subject}`,
    `Date: ${m.date}`,
    `Message-ID: <demo-${n}-${Date.now()}@postern.test>`,
    'MIME-Version: 1.0',
    'Content-Type: text/plain; charset=utf-8',
    '',
    m.text.replace(/\n/g, '\r\n'),
  ].join('\r\n');
}

async function countInbox(client: ImapFlow): Promise<number> {
  const status = await client.status('INBOX', { messages: true });
  return status ? (status.messages ?? 0) : 0;
}

/** A mail app's session as the demo user. */
async function asMailApp<T>(env: MailEnv, user: string, fn: (client: ImapFlow) => Promise<T>): Promise<T> {
  const client = new ImapFlow({ host: env.imap.host, port: env.imap.port, secure: false, auth: { user, pass: DEMO_PASSWORD }, logger: false });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.logout();
  }
}

/**
 * Appends the seed messages as a mail app would, before Postern indexes the inbox; false when an
 * earlier demo run seeded it already.
 */
async function seedMailbox(env: MailEnv, user: string): Promise<boolean> {
  return asMailApp(env, user, async (client) => {
    if ((await countInbox(client)) > 0) return false;
    const list = await client.list();
    if (!list.some((f) => f.path === 'Projects')) await client.mailboxCreate('Projects');
    const [, ...appended] = seedMessages(user);
    for (const [i, m] of appended.entries()) await client.append(m.folder, rfc5322(m, i + 1), m.flags, new Date(m.date));
    return true;
  });
}

/**
 * The newest INBOX message arrives the way mail really does: through Postfix's MX port and
 * Postern's ingress into Dovecot (so Postern must be listening). Waits for it so the first
 * listing shows it.
 */
async function deliverSeed(env: MailEnv, user: string): Promise<void> {
  const [delivered] = seedMessages(user);
  const transport = nodemailer.createTransport({ host: env.smtp.host, port: env.smtp.port, secure: false, ignoreTLS: true });
  try {
    await transport.sendMail({ envelope: { from: 'maria@example.com', to: [user] }, raw: rfc5322(delivered!, 0) });
  } finally {
    transport.close();
  }
  // Postfix may hold it back a while if it found the ingress port closed before Postern listened
  // (an earlier run, a test): its queue is flushed every 2 s, so it waits for Postern only.
  const arrived = await asMailApp(env, user, async (client) => {
    for (let i = 1; i <= 300; i++) {
      if ((await countInbox(client)) >= 3) return true;
      if (i % 10 === 0) await flushQueue(env.dir);
      await new Promise((r) => setTimeout(r, 200));
    }
    return false;
  });
  if (!arrived) process.stderr.write('The delivered demo message has not arrived in 60 s: see the Postfix log in the environment directory.\n');
}

const TOKEN_SETS: Record<string, string[]> = {
  read: ['messages:read'],
  content: ['messages:read', 'content:read'],
  flags: ['messages:read', 'flags:write'],
  send: ['messages:read', 'send'],
  events: ['events:read', 'events:write', 'project:read'],
  all: ['messages:read', 'content:read', 'flags:write', 'send', 'events:read', 'events:write', 'project:read', 'audit:read'],
};

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
  const seeded = await seedMailbox(env, demoUser);

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
  const { admin } = postern;
  const project = await admin.createProject('Demo');
  const member = await admin.addMember(project.id, 'you@example.com');
  const inbox = await admin.addInbox({ projectId: project.id, imapUser: demoUser, addresses: [demoUser] });
  const vault = await admin.addInbox({ projectId: project.id, imapUser: vaultUser, addresses: [vaultUser], mode: 'zero-access' });
  await admin.grant(member.id, inbox.id, 'owner');
  await admin.grant(member.id, vault.id, 'owner');
  const tokens: Record<string, string> = {};
  for (const [name, scopes] of Object.entries(TOKEN_SETS)) tokens[name] = (await admin.createToken({ memberId: member.id, scopes })).token;
  const session = await admin.createSession(member.id);
  const invite = await postern.passkeys.invite(member.id);
  // The web app is built from web/ on every demo run (dist/ is not committed).
  await buildApp();

  const testMailFile = join(dir, 'test-mail.eml');
  writeFileSync(testMailFile, ['From: You <you@example.com>', `To: ${vaultUser}`, 'Subject: For the vault', '', 'For your eyes only.', ''].join('\r\n'));
  const { url } = await postern.listen().catch((err: unknown) => {
    const taken = (err as NodeJS.ErrnoException).code === 'EADDRINUSE';
    throw taken ? new Error(`a port the demo needs is taken (${(err as Error).message}): is another demo, or an ingress test, running on this mail environment?`) : err;
  });
  if (seeded) {
    await deliverSeed(env, demoUser);
    // Dovecot has it; the index learns of it from the push hint a moment later. The first listing
    // a user makes should show it, so one pass now.
    await postern.mailMirror.syncNow({ id: inbox.id, imapUser: demoUser, addresses: [demoUser] });
  }
  const base = `${url}/v1`;
  const app = `${url}/api/v1`;
  const summary = {
    baseUrl: base,
    appUrl: app,
    apiReference: `${url}/docs`,
    project: project.id,
    member: member.id,
    inboxes: { compatible: { id: inbox.id, address: demoUser }, zeroAccess: { id: vault.id, address: vaultUser } },
    // Keyed by the scopes each token holds, so the reader can pick one without a lookup.
    tokens: Object.fromEntries(Object.entries(TOKEN_SETS).map(([name, scopes]) => [scopes.join(','), tokens[name]])),
    session: session.token,
    // For `postern admin` on this database: POSTERN_MASTER_KEY=$(cat <this file>).
    masterKeyFile,
    // Open the enrollment link in a browser to make a passkey; then sign in at webApp.
    webApp: `${config.app.origin}/app/`,
    enrollmentLink: invite.link,
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
    try: [
      `curl -s -H 'Authorization: Bearer ${tokens.read}' ${base}/inboxes`,
      `curl -s -H 'Authorization: Bearer ${tokens.read}' ${base}/inboxes/${inbox.id}/labels`,
      `curl -s -H 'x-svc-token: ${session.token}' ${app}/inboxes`,
    ],
  };
  process.stdout.write(`${JSON.stringify(summary, null, 2)}\n`);
  process.stderr.write(`\nPostern is running at ${base} — try the curl lines above, or open the enrollment link, then ${summary.webApp}.\n`);
  process.stderr.write(`Mail to ${demoUser} or ${vaultUser} arrives at ${summary.mailApp.mx} (SMTP, as from the internet) and passes Postern's ingress; testMail above sends one. Ctrl-C stops it.\n`);

  await untilSignal();
  await postern.close();
  if (env.startedNow.length > 0) await down();
}
