// For the delivery ingress tests (and its benchmark): inboxes that receive through Postern's
// LMTP ingress, an LMTP client that talks to the ingress directly, the stored copies of a
// message as a mail app sees them, and Postfix's log for its delivery attempts.
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ImapFlow } from 'imapflow';
import SMTPConnection from 'nodemailer/lib/smtp-connection';
import { addUser, flushQueue } from '../../scripts/mailenv.ts';
import { mailEnv, unique, type TestInbox, type TestServer } from './harness.ts';
import { until } from './mail-fixtures.ts';

/**
 * An inbox whose address is in the env's ingress domain (Postfix delivers it through Postern's
 * ingress); its IMAP user is in the plain domain, as the ingress maps address → IMAP user.
 */
export async function ingressInbox(
  s: TestServer,
  projectId: string,
  memberId: string,
  mode: 'compatible' | 'zero-access',
): Promise<TestInbox> {
  const env = mailEnv();
  const name = unique('box');
  const imapUser = `${name}@${env.domain}`;
  const imapPassword = randomBytes(12).toString('hex');
  await addUser(env, imapUser, imapPassword);
  const address = `${name}@${env.ingress.domain}`;
  const { id } = await s.postern.admin.addInbox({ projectId, imapUser, addresses: [address], mode });
  await s.postern.admin.grant(memberId, id, 'owner');
  return { id, address, imapUser, imapPassword };
}

/**
 * An inbox whose IMAP user, and so its Dovecot user, is itself in the ingress domain, beside a
 * listed address `NAME.box@…`: every form Dovecot resolves to the user (a detail, another case,
 * the IMAP user name, the env's `alias-NAME@…` that Postfix rewrites) reaches it only through the
 * ingress, as all mail does in a deployment.
 */
export async function ingressUserInbox(
  s: TestServer,
  projectId: string,
  memberId: string,
  mode: 'compatible' | 'zero-access',
): Promise<TestInbox & { name: string }> {
  const env = mailEnv();
  const name = unique('user');
  const imapUser = `${name}@${env.ingress.domain}`;
  const imapPassword = randomBytes(12).toString('hex');
  await addUser(env, imapUser, imapPassword);
  const address = `${name}.box@${env.ingress.domain}`;
  const { id } = await s.postern.admin.addInbox({ projectId, imapUser, addresses: [address], mode });
  await s.postern.admin.grant(memberId, id, 'owner');
  return { id, address, imapUser, imapPassword, name };
}

export interface LmtpResult {
  accepted: string[];
  rejected: Array<{ recipient: string; code: number; response: string }>;
}

/** Speaks LMTP to the ingress (or any LMTP server): one message, each recipient's answer. */
export function lmtpSend(port: number, from: string, to: string[], message: Buffer | string): Promise<LmtpResult> {
  return new Promise((resolve, reject) => {
    const conn = new SMTPConnection({ host: '127.0.0.1', port, lmtp: true, ignoreTLS: true, name: 'test-mta' });
    conn.on('error', reject);
    conn.connect((err) => {
      if (err) return reject(err);
      conn.send({ from, to }, message, (e, info) => {
        conn.quit();
        const failure = e as
          | (SMTPConnection.SMTPError & { rejectedErrors?: Array<SMTPConnection.SMTPError & { recipient: string }> })
          | null;
        if (failure && !failure.rejectedErrors) return reject(failure);
        const rejectedErrors = (failure?.rejectedErrors ?? info.rejectedErrors ?? []) as Array<
          SMTPConnection.SMTPError & { recipient: string }
        >;
        resolve({
          accepted: failure ? [] : info.accepted.map(String),
          rejected: rejectedErrors.map((r) => ({ recipient: r.recipient, code: r.responseCode ?? 0, response: r.response ?? '' })),
        });
      });
    });
  });
}

/**
 * lmtpSend as Postfix delivers: a message every recipient deferred (4xx: the ingress could not
 * reach Dovecot's LMTP just then) is sent again, up to three times, a second apart.
 */
export async function lmtpDeliver(port: number, from: string, to: string[], message: Buffer | string): Promise<LmtpResult> {
  for (let attempt = 1; ; attempt++) {
    const result = await lmtpSend(port, from, to, message);
    const deferred =
      result.accepted.length === 0 && result.rejected.length > 0 && result.rejected.every((r) => r.code >= 400 && r.code < 500);
    if (!deferred || attempt === 3) return result;
    await new Promise((r) => setTimeout(r, 1000));
  }
}

/** Every message in the inbox's INBOX, oldest first, as stored (what a mail app downloads). */
export async function storedMessages(
  inbox: TestInbox,
): Promise<Array<{ uid: number; source: Buffer; flags: Set<string>; internalDate: Date }>> {
  const env = mailEnv();
  const client = new ImapFlow({
    host: env.imap.host,
    port: env.imap.port,
    secure: false,
    auth: { user: inbox.imapUser, pass: inbox.imapPassword },
    logger: false,
  });
  client.on('error', () => undefined);
  await client.connect();
  try {
    await client.mailboxOpen('INBOX');
    const out: Array<{ uid: number; source: Buffer; flags: Set<string>; internalDate: Date }> = [];
    for await (const m of client.fetch('1:*', { uid: true, source: true, flags: true, internalDate: true })) {
      out.push({ uid: m.uid, source: m.source!, flags: m.flags ?? new Set(), internalDate: new Date(m.internalDate!) });
    }
    return out.sort((a, b) => a.uid - b.uid);
  } catch (err) {
    // An empty mailbox has no 1:*.
    if (String(err).includes('Invalid messageset')) return [];
    throw err;
  } finally {
    await client.logout().catch(() => undefined);
  }
}

/** Postfix's log of this env (every delivery attempt and its outcome). */
export function postfixLog(): string {
  return readFileSync(join(mailEnv().dir, 'postfix', 'postfix.log'), 'utf8');
}

/**
 * Asks this env's Postfix to retry its deferred mail now (`postqueue -f`), forgetting any next hop
 * it has marked dead. A test waiting for a retry then waits for Postern, not Postfix's backoff.
 */
export async function flushPostfixQueue(): Promise<void> {
  await flushQueue(mailEnv().dir);
}

/**
 * `until` for mail on its way through Postfix: the queue is flushed every 2 s meanwhile, so a
 * delivery deferred by a busy or restarting receiver (or to a next hop an earlier test left
 * marked dead) is retried now rather than after Postfix's backoff of minutes.
 */
export async function untilDelivered<T>(what: string, probe: () => Promise<T | null | undefined | false>, timeoutMs = 15_000): Promise<T> {
  let flushed = Date.now();
  return until(
    what,
    async () => {
      const found = await probe();
      if (!found && Date.now() - flushed > 2000) {
        flushed = Date.now();
        await flushPostfixQueue();
      }
      return found;
    },
    timeoutMs,
  );
}

/** Postfix's queue id for the message with this Message-ID, once cleanup has logged it. */
export function queueIdOf(messageId: string): string | null {
  const m = new RegExp(`/cleanup\\[\\d+\\]: ([0-9A-F]+): message-id=<?${messageId.replace(/[.*+?^${}()|[\]\\<>]/g, '\\$&')}>?`).exec(
    postfixLog(),
  );
  return m ? m[1]! : null;
}
