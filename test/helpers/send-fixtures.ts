// Shared by the send tests: posting a message, finding what the sink received, reading the Sent
// label, the delivery events, and stopping/starting Postfix and Dovecot of this run's environment.
import { execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import * as net from 'node:net';
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { SinkMessage } from '../../scripts/mailenv.ts';
import type { CloudEvent } from '../../lib/events/types.ts';
import * as openpgp from 'openpgp';
import { splitPkesk } from '../../lib/crypto/mail-opening.ts';
import { call, mailEnv, type TestInbox, type TestServer } from './harness.ts';
import { mailApp, until } from './mail-fixtures.ts';
import { postfixLog } from './ingress-helpers.ts';

const run = promisify(execFile);

/** A fresh /send draft id. */
export const draft = () => `draft_${randomBytes(12).toString('base64url')}`;

/** What the web app does: seal the message to the epoch key, naming the literal data after the draft. */
export async function sealDraft(epochPublic: string, raw: string, filename: string): Promise<{ wrappedDek: string; ciphertext: string }> {
  const key = await openpgp.readKey({ binaryKey: Buffer.from(epochPublic, 'base64') });
  const sealed = await openpgp.encrypt({
    message: await openpgp.createMessage({ binary: Buffer.from(raw), filename }),
    encryptionKeys: key,
    format: 'binary',
  });
  const parts = splitPkesk(sealed);
  if (!parts) throw new Error('no PKESK in the sealed message');
  return { wrappedDek: Buffer.from(parts.wrappedDek).toString('base64'), ciphertext: Buffer.from(parts.raw).toString('base64') };
}

/** A recipient nobody else uses: what the sink got for it is this test's. */
export const rcpt = (label = 'to') => `${label}-${randomBytes(5).toString('hex')}@example.org`;

export function postRaw(
  s: Pick<TestServer, 'base'>,
  token: string,
  inboxId: string,
  body: { from: string; to: string[]; raw: string | Buffer },
): Promise<Response> {
  const raw = typeof body.raw === 'string' ? Buffer.from(body.raw) : body.raw;
  return call(`${s.base}/inboxes/${inboxId}/messages`, {
    method: 'POST',
    token,
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ from: body.from, to: body.to, raw: raw.toString('base64') }),
  });
}

/**
 * What the sink received addressed to `recipient` (waits until there are `count`). Reads each
 * envelope once and a message's bytes only when it matches: the sink keeps every run's mail.
 */
export async function atSink(
  recipient: string | ((envelope: { rcptTo: string[]; envid?: string | null }) => boolean),
  count = 1,
  timeoutMs = 30_000,
): Promise<SinkMessage[]> {
  const dir = mailEnv().sink.dir;
  const wanted = typeof recipient === 'string' ? (m: { rcptTo: string[] }) => m.rcptTo.includes(recipient) : recipient;
  const seen = new Map<string, SinkMessage | null>();
  return until(
    `${count} message(s) for ${typeof recipient === 'string' ? recipient : 'the test'} at the sink`,
    async () => {
      for (const name of await readdir(dir)) {
        if (!name.endsWith('.json') || seen.has(name)) continue;
        const meta = JSON.parse(await readFile(join(dir, name), 'utf8')) as {
          id: string;
          mailFrom: string;
          rcptTo: string[];
          envid?: string | null;
          receivedAt: string;
        };
        if (!wanted(meta)) {
          seen.set(name, null);
          continue;
        }
        const msg: SinkMessage = {
          id: meta.id,
          mailFrom: meta.mailFrom,
          rcptTo: meta.rcptTo,
          receivedAt: meta.receivedAt,
          raw: await readFile(join(dir, `${meta.id}.eml`)),
        };
        if (meta.envid) msg.envid = meta.envid;
        seen.set(name, msg);
      }
      const got = [...seen.values()]
        .filter((m): m is SinkMessage => m !== null)
        .sort((a, b) => a.receivedAt.localeCompare(b.receivedAt) || a.id.localeCompare(b.id));
      return got.length >= count ? got : null;
    },
    timeoutMs,
  );
}

/** The bytes Postfix passed on, without the one Received field it put on top (its trace). */
export function withoutTrace(raw: Buffer): Buffer {
  const first = raw.subarray(0, raw.indexOf(0x0a) + 1).toString('latin1');
  if (!/^Received:/i.test(first)) return raw;
  // The field and its continuation lines.
  let pos = first.length;
  while (raw[pos] === 0x20 || raw[pos] === 0x09) pos = raw.indexOf(0x0a, pos) + 1;
  return raw.subarray(pos);
}

export interface Summary {
  id: string;
  uid: number;
  flags: string[];
  subject?: string;
  direction?: string;
}

export async function labelIds(s: Pick<TestServer, 'base'>, token: string, inboxId: string): Promise<Record<string, string>> {
  const res = await call(`${s.base}/inboxes/${inboxId}/labels`, { token });
  const { labels } = (await res.json()) as { labels: Array<{ id: string; name: string }> };
  return Object.fromEntries(labels.map((l) => [l.name, l.id]));
}

export async function listLabel(s: Pick<TestServer, 'base'>, token: string, inboxId: string, labelId: string): Promise<Summary[]> {
  const res = await call(`${s.base}/inboxes/${inboxId}/labels/${labelId}/messages?limit=100`, { token });
  if (res.status !== 200) throw new Error(`listing ${labelId}: ${res.status} ${await res.text()}`);
  return ((await res.json()) as { messages: Summary[] }).messages;
}

/** The inbox's events of these types, as recorded (no settle delay). */
export async function eventsOf(s: TestServer, projectId: string, inboxId: string, types: string[]): Promise<CloudEvent[]> {
  const { events } = await s.postern.events.backfill(
    { projectId, inboxes: [inboxId], allowedInboxes: [inboxId], visibilities: ['inbox', 'project'], types, redactActor: false },
    0,
    500,
  );
  return events.map((e) => JSON.parse(e.json) as CloudEvent);
}

function portAnswers(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const sock = net.connect({ host: '127.0.0.1', port });
    sock.once('data', () => {
      sock.destroy();
      resolve(true);
    });
    sock.once('error', () => resolve(false));
  });
}

const postfixDir = () => join(mailEnv().dir, 'postfix', 'conf');

export async function stopPostfix(): Promise<void> {
  await run('postfix', ['-c', postfixDir(), 'stop']);
  await until('Postfix to stop', async () => !(await portAnswers(mailEnv().submission.port)), 20_000);
}

export async function startPostfix(): Promise<void> {
  if (!(await portAnswers(mailEnv().submission.port))) await run('postfix', ['-c', postfixDir(), 'start']).catch(() => undefined);
  await until('Postfix to answer', () => portAnswers(mailEnv().submission.port), 20_000);
}

/** Changes main.cf settings for a test (postconf -e, reload); returns the values to restore. */
export async function postconf(settings: Record<string, string>): Promise<Record<string, string>> {
  const before: Record<string, string> = {};
  for (const name of Object.keys(settings)) {
    const { stdout } = await run('postconf', ['-c', postfixDir(), '-h', name]);
    before[name] = stdout.trim();
  }
  await run('postconf', ['-c', postfixDir(), '-e', ...Object.entries(settings).map(([k, v]) => `${k}=${v}`)]);
  await reloadPostfix();
  const size = settings.message_size_limit;
  if (size !== undefined) {
    // A reload returns before every smtpd runs the new settings (an old one finishes its session
    // first): wait until fresh connections, three in a row, advertise the new limit.
    let inARow = 0;
    await until(
      `submission to advertise SIZE ${size}`,
      async () => {
        inARow = (await submissionSize()) === Number(size) ? inARow + 1 : 0;
        return inARow >= 3;
      },
      20_000,
    );
  }
  return before;
}

/** The SIZE a fresh submission connection advertises in its EHLO answer (0: none). */
export function submissionSize(): Promise<number> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(mailEnv().submission.port, mailEnv().submission.host);
    let text = '';
    let greeted = false;
    socket.setTimeout(5000, () => socket.destroy(new Error('submission did not answer EHLO')));
    socket.on('error', reject);
    socket.on('data', (chunk) => {
      text += chunk.toString('latin1');
      if (!greeted && /^220 .*\r\n/m.test(text)) {
        greeted = true;
        text = '';
        socket.write('EHLO size-probe.postern.test\r\n');
      } else if (greeted && /^250 .*\r\n/m.test(text)) {
        socket.end('QUIT\r\n');
        resolve(Number(/^250[- ]SIZE (\d+)/m.exec(text)?.[1] ?? 0));
      }
    });
  });
}

/** Sets master.cf -o settings (service/type/name; null removes one) and reloads. */
export async function postconfService(settings: Record<string, string | null>): Promise<void> {
  for (const [name, value] of Object.entries(settings)) {
    await run('postconf', ['-c', postfixDir(), ...(value === null ? ['-PX', name] : ['-P', `${name}=${value}`])]);
  }
  await reloadPostfix();
}

/**
 * `postfix reload` only signals the master; this returns once the master has logged that it
 * re-read its settings, so a connection opened after it meets an smtpd that runs them (one
 * already in a session, such as a pooled one, keeps the old settings until its session ends).
 * After Dovecot restarts, an smtpd that kept its connection to Dovecot's auth answers its next
 * AUTH with 454 "Connection lost to authentication server"; a reload replaces those smtpd
 * processes, so the next test in the same environment (docs/testing.md, lanes) signs in at once.
 */
export async function reloadPostfix(): Promise<void> {
  const reloads = async () =>
    postfixLog()
      .split('\n')
      .filter((l) => /\/master\[\d+\]: reload /.test(l)).length;
  const before = await reloads();
  await run('postfix', ['-c', postfixDir(), 'reload']);
  await until('the Postfix master to reload', async () => (await reloads()) > before, 20_000);
}

const dovecotConf = () => join(mailEnv().dir, 'dovecot', 'dovecot.conf');

export async function stopDovecot(): Promise<void> {
  await run('dovecot', ['-c', dovecotConf(), 'stop']);
  await until('Dovecot to stop', async () => !(await portAnswers(mailEnv().imap.port)), 20_000);
}

/** `dovecot -c FILE` daemonizes; its children keep inherited pipes open, so none are given. */
export async function startDovecot(): Promise<void> {
  if (!(await portAnswers(mailEnv().imap.port))) {
    await new Promise<void>((resolve) => {
      const child = spawn('dovecot', ['-c', dovecotConf()], { stdio: 'ignore' });
      child.once('exit', () => resolve());
      child.once('error', () => resolve());
    });
  }
  await until('Dovecot to answer', () => portAnswers(mailEnv().imap.port), 20_000);
  await reloadPostfix();
}

/** Each subject in the inbox's Sent mailbox (read over IMAP, not through Postern), with how many copies. */
export async function sentCopies(inbox: TestInbox): Promise<Map<string, number>> {
  const app = await mailApp(inbox);
  const counts = new Map<string, number>();
  try {
    const box = await app.mailboxOpen('Sent');
    if (box.exists > 0) {
      for await (const m of app.fetch('1:*', { envelope: true })) {
        const subject = m.envelope?.subject ?? '';
        counts.set(subject, (counts.get(subject) ?? 0) + 1);
      }
    }
    return counts;
  } finally {
    await app.logout().catch(() => undefined);
  }
}
