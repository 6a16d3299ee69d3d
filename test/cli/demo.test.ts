// The README's first command: `postern demo` gives a running service whose printed curl lines work.
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import { ImapFlow } from 'imapflow';
import nodemailer from 'nodemailer';
import { ROOT } from '../../lib/paths.ts';
import { mailEnv } from '../helpers/harness.ts';
import { until } from '../helpers/mail-fixtures.ts';

/**
 * Sends what the demo's printed testMail line sends (curl's SMTP upload of the file) through the
 * printed MX address, then waits for the zero-access inbox's next UID and returns every message
 * from that UID on: a plaintext copy stored first and sealed later would take that UID and leave
 * the sealed one a higher UID.
 */
async function sendTestMail(summary: DemoSummary): Promise<{ expectedUid: number; stored: Array<{ uid: number; source: Buffer }> }> {
  const m = /^curl -s smtp:\/\/([^:\s]+):(\d+) --mail-from (\S+) --mail-rcpt (\S+) -T (\S+)$/.exec(summary.testMail);
  expect(m, summary.testMail).to.not.equal(null);
  const [, host, port, from, rcpt, file] = m!;
  expect(`${host}:${port}`).to.equal(summary.mailApp.mx);
  expect(rcpt).to.equal(summary.inboxes.zeroAccess.address);
  const [imapHost, imapPort] = summary.mailApp.imap.split(':');
  const client = new ImapFlow({
    host: imapHost!,
    port: Number(imapPort),
    secure: false,
    auth: { user: summary.mailApp.users[1]!, pass: summary.mailApp.password },
    logger: false,
  });
  client.on('error', () => undefined);
  await client.connect();
  try {
    const expectedUid = Number((await client.mailboxOpen('INBOX')).uidNext);
    const mx = nodemailer.createTransport({ host, port: Number(port), secure: false, ignoreTLS: true });
    try {
      await mx.sendMail({ envelope: { from: from!, to: [rcpt!] }, raw: readFileSync(file!) });
    } finally {
      mx.close();
    }
    const stored = await until(
      'the test mail in the zero-access inbox',
      async () => {
        const got: Array<{ uid: number; source: Buffer }> = [];
        // Whatever Dovecot stored from that UID on ("n:*" also names the last message when none is that new).
        for await (const msg of client.fetch(`${expectedUid}:*`, { uid: true, source: true }, { uid: true }))
          if (msg.uid >= expectedUid) got.push({ uid: msg.uid, source: msg.source! });
        return got.length > 0 && got.sort((a, b) => a.uid - b.uid);
      },
      30_000,
    );
    return { expectedUid, stored };
  } finally {
    await client.logout().catch(() => undefined);
  }
}

interface DemoSummary {
  baseUrl: string;
  appUrl: string;
  apiReference: string;
  inboxes: { compatible: { id: string; address: string }; zeroAccess: { id: string; address: string } };
  tokens: Record<string, string>;
  session: string;
  webApp: string;
  enrollmentLink: string;
  mailApp: { imap: string; users: string[]; password: string; smtp: string; mx: string };
  testMail: string;
  try: string[];
}

describe('postern demo', function () {
  this.timeout(90_000);

  it('starts a seeded service and prints curl lines that work', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'postern-demo-'));
    const child = spawn(join(ROOT, 'bin', 'postern'), ['demo'], {
      env: { ...process.env, POSTERN_PORT: '0', POSTERN_DEMO_DIR: dir },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    try {
      let out = '';
      const summary = await new Promise<DemoSummary>((resolve, reject) => {
        child.stdout.on('data', (d: Buffer) => {
          out += d.toString();
          try {
            resolve(JSON.parse(out) as DemoSummary);
          } catch {
            // The object is not complete yet.
          }
        });
        child.once('exit', (code) => reject(new Error(`demo exited with ${code}: ${out}`)));
      });
      expect(summary.try).to.have.length(3);
      // Run each printed curl line as a user would.
      const results = summary.try.map((line) => {
        const m = /^curl -s -H '([^:]+): ([^']+)' (\S+)$/.exec(line);
        expect(m, line).to.not.equal(null);
        return fetch(m![3]!, { headers: { [m![1]!]: m![2]! } }).then(async (r) => ({
          status: r.status,
          body: (await r.json()) as Record<string, unknown>,
        }));
      });
      const [inboxes, labels, sessionInboxes] = await Promise.all(results);
      expect(inboxes!.status).to.equal(200);
      const ids = (inboxes!.body.inboxes as Array<{ inboxId: string }>).map((i) => i.inboxId);
      expect(ids).to.deep.equal([summary.inboxes.compatible.id, summary.inboxes.zeroAccess.id]);
      expect(sessionInboxes!.body).to.deep.equal(inboxes!.body);
      expect(labels!.status).to.equal(200);
      const names = (labels!.body.labels as Array<{ name: string; total: number }>).map((l) => l.name);
      expect(names).to.include.members(['INBOX', 'Sent', 'Archive', 'Projects']);
      const inbox = (labels!.body.labels as Array<{ name: string; total: number }>).find((l) => l.name === 'INBOX');
      expect(inbox!.total).to.be.at.least(3);
      expect(Object.keys(summary.tokens)).to.include('messages:read');
      // The token with every scope organizes mail too (scripts/container-test.ts relies on its scopes).
      expect(Object.keys(summary.tokens).some((scopes) => scopes.split(',').includes('messages:write'))).to.equal(true);
      const reference = await fetch(summary.apiReference);
      expect(reference.status).to.equal(200);
      expect(reference.headers.get('content-type')).to.match(/^text\/html/);
      // The web app is built and served, and the enrollment link's invite opens a ceremony.
      const page = await fetch(summary.webApp);
      expect(page.status).to.equal(200);
      expect(page.headers.get('content-security-policy')).to.include("script-src 'self'");
      expect(summary.enrollmentLink.startsWith(`${summary.webApp}#enroll=inv_`)).to.equal(true);
      const invite = summary.enrollmentLink.split('#enroll=')[1]!;
      const options = await fetch(`${summary.appUrl}/auth/enroll/options`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ invite }),
      });
      expect(options.status).to.equal(200);
      // The printed outgoing server is the one a mail app sends through: it takes the demo
      // user's login and relays the user's mail (the MX port would refuse both).
      // Test mail to the zero-access inbox through the printed MX address passes Postern's
      // ingress: the first copy Dovecot stores is the sealed one, no plaintext ever rests there.
      expect(summary.mailApp.mx).to.equal(`${mailEnv().smtp.host}:${mailEnv().smtp.port}`);
      const { expectedUid, stored } = await sendTestMail(summary);
      expect(stored[0]!.uid, 'the first stored copy').to.equal(expectedUid);
      const first = stored[0]!.source.toString('latin1');
      expect(first).to.match(/^Content-Type: multipart\/encrypted; protocol="application\/pgp-encrypted";/m);
      expect(first).to.match(/^X-Postern-Sealed: epoch=1;/m);
      expect(first).to.not.include('For your eyes only');
      expect(first).to.match(/^Subject: For the vault\r$/m);

      const [host, port] = summary.mailApp.smtp.split(':');
      expect(Number(port)).to.equal(mailEnv().submission.port);
      const user = summary.mailApp.users[0]!;
      const outgoing = nodemailer.createTransport({
        host,
        port: Number(port),
        secure: false,
        auth: { user, pass: summary.mailApp.password },
      });
      try {
        const to = `demo-${Date.now()}@example.org`;
        const sent = await outgoing.sendMail({
          envelope: { from: user, to: [to] },
          raw: `From: <${user}>\r\nTo: <${to}>\r\nSubject: from the demo's mail app\r\n\r\nhello\r\n`,
        });
        expect(sent.accepted).to.deep.equal([to]);
      } finally {
        outgoing.close();
      }
    } finally {
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGTERM');
      expect(await exited).to.equal(0);
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
