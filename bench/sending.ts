// What the sending benches share: their messages, the inbox and token they send with, and the
// POST they send through.
import { randomBytes } from 'node:crypto';
import { type Agent, request } from 'node:http';
import { pino } from 'pino';
import type { Pool } from 'undici';
import { loadConfig } from '../lib/config.ts';
import { openPostern } from '../lib/server.ts';
import { addUser, type MailEnv } from '../scripts/mailenv.ts';

/** A message of about `size` bytes (base64 lines of random bytes), with a fresh Subject and Message-ID. */
export function benchMessage(from: string, to: string, size: number): Buffer {
  const head = `From: <${from}>\r\nTo: <${to}>\r\nSubject: bench ${randomBytes(4).toString('hex')}\r\nDate: ${new Date().toUTCString()}\r\nMessage-ID: <${randomBytes(12).toString('hex')}@bench>\r\n\r\n`;
  const lines: string[] = [];
  for (let n = head.length; n < size; ) {
    const line = randomBytes(57).toString('base64');
    lines.push(line);
    n += line.length + 2;
  }
  return Buffer.from(`${head}${lines.join('\r\n')}\r\n`);
}

/** A new mail user, and a compatible inbox of it in a new project, with a `send` token. */
export async function sendingInbox(env: MailEnv, serverEnv: Record<string, string>): Promise<{ id: string; user: string; token: string }> {
  const stamp = Date.now().toString(36);
  const user = `bench-send-${stamp}@${env.domain}`;
  await addUser(env, user, 'pw-send');
  const admin = await openPostern(loadConfig(serverEnv), pino({ level: 'silent' }));
  try {
    const project = await admin.admin.createProject('bench');
    const member = await admin.admin.addMember(project.id, `bench-${stamp}@example.org`);
    const { id } = await admin.admin.addInbox({ projectId: project.id, imapUser: user, addresses: [user], mode: 'compatible' });
    await admin.admin.grant(member.id, id, 'owner');
    const { token } = await admin.admin.createToken({ memberId: member.id, scopes: ['send'] });
    return { id, user, token };
  } finally {
    await admin.close();
  }
}

/** POSTs a JSON body with the token; the status and the answer's text. */
export function postJson(agent: Agent, url: string, token: string, body: string | Buffer): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = request(url, {
      method: 'POST',
      agent,
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
    });
    req.on('response', (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (text += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

/**
 * POSTs a JSON body with the token through undici's keep-alive pool: the lean client a script
 * sending at this rate would use, so the load generator's share of the cores stays small.
 */
export async function postPooled(pool: Pool, path: string, token: string, body: Buffer): Promise<{ status: number; text: string }> {
  const res = await pool.request({
    path,
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body,
  });
  return { status: res.statusCode, text: await res.body.text() };
}
