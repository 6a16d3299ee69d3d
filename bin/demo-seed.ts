// The demo's project, seeded into a running mail server and Postern's store: a compatible inbox
// with a few realistic messages in several labels and an empty zero-access inbox, a member owning
// both, tokens, a session and a passkey enrollment link. `postern demo` (scripts/demo.ts) seeds it
// into the bundled mail environment; `postern demo-seed` into any mail server whose demo users
// exist already (the compose file's mail image, docs/operations.md "Images and compose").
import { ImapFlow } from 'imapflow';
import nodemailer from 'nodemailer';
import type { Admin } from '../lib/directory/admin.ts';
import type { Passkeys } from '../lib/auth/passkeys.ts';

export const DEMO_PASSWORD = 'demo-password';

export interface HostPort {
  host: string;
  port: number;
}

/** The mail server the demo seeds: its IMAP, its MX (mail arriving as from the internet), its users. */
export interface DemoMail {
  imap: HostPort;
  mx: HostPort;
  /** The compatible inbox's and the zero-access inbox's IMAP users (their addresses too). */
  demoUser: string;
  vaultUser: string;
  password: string;
}

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
    {
      folder: 'INBOX',
      flags: [],
      from: 'Maria Lopez <maria@example.com>',
      to: address,
      subject: 'Quarterly report draft',
      date: day(0),
      text: 'Hi,\n\nThe draft of the Q3 report is ready for review. Could you look at the revenue table by Friday?\n\nThanks,\nMaria\n',
    },
    {
      folder: 'INBOX',
      flags: ['\\Seen', '\\Flagged'],
      from: 'Build bot <ci@example.net>',
      to: address,
      subject: 'Build #4821 passed',
      date: day(1),
      text: 'All 1,204 tests passed on main (8m 12s).\n',
    },
    {
      folder: 'INBOX',
      flags: ['\\Seen'],
      from: 'Jonas Berg <jonas@example.org>',
      to: address,
      subject: 'Re: Lunch on Thursday?',
      date: day(2),
      text: 'Thursday works. 12:30 at the usual place?\n\n> Are you free for lunch on Thursday?\n',
    },
    {
      folder: 'Archive',
      flags: ['\\Seen'],
      from: 'Accounts <billing@example.com>',
      to: address,
      subject: 'Your invoice for October',
      date: day(20),
      text: 'Invoice INV-2041 for October is attached to your account page. Amount due: EUR 120.00.\n',
    },
    {
      folder: 'Projects',
      flags: ['\\Seen', '$label1'],
      from: 'Priya Shah <priya@example.com>',
      to: address,
      subject: 'Kick-off notes',
      date: day(6),
      text: 'Notes from the kick-off:\n- scope agreed\n- first milestone in two weeks\n',
    },
    {
      folder: 'Sent',
      flags: ['\\Seen'],
      from: address,
      to: 'Maria Lopez <maria@example.com>',
      subject: 'Re: Quarterly report draft',
      date: day(0),
      text: 'Thanks Maria, I will review it tomorrow morning.\n',
    },
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

/** A mail app's session as a demo user. */
async function asMailApp<T>(mail: DemoMail, user: string, fn: (client: ImapFlow) => Promise<T>): Promise<T> {
  const client = new ImapFlow({
    host: mail.imap.host,
    port: mail.imap.port,
    secure: false,
    auth: { user, pass: mail.password },
    logger: false,
  });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.logout();
  }
}

/**
 * Appends the seed messages as a mail app would, before Postern indexes the inbox; false when an
 * earlier run seeded it already.
 */
export async function seedMailbox(mail: DemoMail): Promise<boolean> {
  return asMailApp(mail, mail.demoUser, async (client) => {
    if ((await countInbox(client)) > 0) return false;
    const list = await client.list();
    if (!list.some((f) => f.path === 'Projects')) await client.mailboxCreate('Projects');
    const [, ...appended] = seedMessages(mail.demoUser);
    for (const [i, m] of appended.entries()) await client.append(m.folder, rfc5322(m, i + 1), m.flags, new Date(m.date));
    return true;
  });
}

/**
 * The newest INBOX message arrives the way mail really does: through the MX and Postern's ingress
 * into Dovecot (so a Postern must be listening for it). Waits for it so the first listing shows
 * it; `nudge` (every 2 s) may ask the MTA to retry its queue. False when it has not arrived in 60 s.
 */
export async function deliverSeed(mail: DemoMail, nudge?: () => Promise<void>): Promise<boolean> {
  const [delivered] = seedMessages(mail.demoUser);
  const transport = nodemailer.createTransport({ host: mail.mx.host, port: mail.mx.port, secure: false, ignoreTLS: true });
  try {
    await transport.sendMail({ envelope: { from: 'maria@example.com', to: [mail.demoUser] }, raw: rfc5322(delivered!, 0) });
  } finally {
    transport.close();
  }
  return asMailApp(mail, mail.demoUser, async (client) => {
    for (let i = 1; i <= 300; i++) {
      if ((await countInbox(client)) >= 3) return true;
      if (nudge && i % 10 === 0) await nudge();
      await new Promise((r) => setTimeout(r, 200));
    }
    return false;
  });
}

const TOKEN_SETS: Record<string, string[]> = {
  read: ['messages:read'],
  content: ['messages:read', 'content:read'],
  flags: ['messages:read', 'flags:write'],
  send: ['messages:read', 'send'],
  events: ['events:read', 'events:write', 'project:read'],
  // messages:write: the demo's "all" token organizes mail too (docs/organize.md, "Who may").
  all: [
    'messages:read',
    'content:read',
    'flags:write',
    'messages:write',
    'send',
    'events:read',
    'events:write',
    'project:read',
    'audit:read',
  ],
};

export interface SeededProject {
  project: string;
  member: string;
  inbox: string;
  vault: string;
  /** By the token set's short name (read, content, flags, send, events, all). */
  tokens: Record<string, string>;
  session: string;
  enrollmentLink: string;
}

/** The demo's project, member, both inboxes, grants, tokens, a session and an enrollment link. */
export async function seedProject(admin: Admin, passkeys: Passkeys, mail: DemoMail): Promise<SeededProject> {
  const project = await admin.createProject('Demo');
  const member = await admin.addMember(project.id, 'you@example.com');
  const inbox = await admin.addInbox({ projectId: project.id, imapUser: mail.demoUser, addresses: [mail.demoUser] });
  const vault = await admin.addInbox({ projectId: project.id, imapUser: mail.vaultUser, addresses: [mail.vaultUser], mode: 'zero-access' });
  await admin.grant(member.id, inbox.id, 'owner');
  await admin.grant(member.id, vault.id, 'owner');
  const tokens: Record<string, string> = {};
  for (const [name, scopes] of Object.entries(TOKEN_SETS)) tokens[name] = (await admin.createToken({ memberId: member.id, scopes })).token;
  const session = await admin.createSession(member.id);
  const invite = await passkeys.invite(member.id);
  return {
    project: project.id,
    member: member.id,
    inbox: inbox.id,
    vault: vault.id,
    tokens,
    session: session.token,
    enrollmentLink: invite.link,
  };
}

/** What the demo prints: where the API is, the ids, the tokens keyed by their scopes, how to try it. */
export function describeDemo(seeded: SeededProject, mail: DemoMail, origins: { api: string; app: string }) {
  const base = `${origins.api}/v1`;
  const app = `${origins.api}/api/v1`;
  return {
    baseUrl: base,
    appUrl: app,
    apiReference: `${origins.api}/docs`,
    project: seeded.project,
    member: seeded.member,
    inboxes: { compatible: { id: seeded.inbox, address: mail.demoUser }, zeroAccess: { id: seeded.vault, address: mail.vaultUser } },
    // Keyed by the scopes each token holds, so the reader can pick one without a lookup.
    tokens: Object.fromEntries(Object.entries(TOKEN_SETS).map(([name, scopes]) => [scopes.join(','), seeded.tokens[name]])),
    session: seeded.session,
    // Open the enrollment link in a browser to make a passkey; then sign in at webApp.
    webApp: `${origins.app}/app/`,
    enrollmentLink: seeded.enrollmentLink,
    try: [
      `curl -s -H 'Authorization: Bearer ${seeded.tokens.read}' ${base}/inboxes`,
      `curl -s -H 'Authorization: Bearer ${seeded.tokens.read}' ${base}/inboxes/${seeded.inbox}/labels`,
      `curl -s -H 'x-svc-token: ${seeded.session}' ${app}/inboxes`,
    ],
  };
}

export interface DemoSeedOptions {
  /** The demo users' domain: demo@ and vault@ it must exist with `password` already. */
  domain: string;
  mx: HostPort;
  password: string;
  /** Where the API is as its users reach it (default: POSTERN_APP_ORIGIN). */
  publicUrl?: string;
}

/**
 * `postern demo-seed`: seeds the demo through the configured store (POSTERN_* as for `serve`)
 * while a Postern serves it, and says what to try. A second run finds it seeded and says so
 * (tokens are shown once; `postern admin token create` makes more).
 */
export async function runDemoSeed(opts: DemoSeedOptions): Promise<unknown> {
  const { loadConfig } = await import('../lib/config.ts');
  const { openStaff } = await import('./staff.ts');
  const config = loadConfig();
  const mail: DemoMail = {
    imap: { host: config.imap.host, port: config.imap.port },
    mx: opts.mx,
    demoUser: `demo@${opts.domain}`.toLowerCase(),
    vaultUser: `vault@${opts.domain}`.toLowerCase(),
    password: opts.password,
  };
  const staff = await openStaff(config);
  try {
    const existing = await staff.store.directory.getInboxByImapUser(mail.demoUser);
    if (existing)
      return {
        seeded: false,
        reason: `the demo is seeded already (inbox ${existing.id}); its tokens were printed then: make more with postern admin token create`,
      };
    // The mail server may still be starting (compose starts both at once).
    const seededMail = await retrying(60_000, () => seedMailbox(mail));
    const seeded = await seedProject(staff.admin, await staff.passkeys(), mail);
    const arrived = seededMail ? await deliverSeed(mail) : true;
    return {
      ...describeDemo(seeded, mail, { api: opts.publicUrl ?? config.app.origin, app: config.app.origin }),
      ...(arrived
        ? {}
        : {
            warning:
              'the delivered demo message has not arrived in 60 s: is a Postern with its LMTP ingress running? (the mail server keeps it queued)',
          }),
    };
  } finally {
    await staff.close();
  }
}

async function retrying<T>(ms: number, fn: () => Promise<T>): Promise<T> {
  const until = Date.now() + ms;
  for (;;) {
    try {
      return await fn();
    } catch (err) {
      if (Date.now() > until) throw err;
      await new Promise((r) => setTimeout(r, 1000));
    }
  }
}
