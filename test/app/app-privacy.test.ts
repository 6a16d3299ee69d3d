// The web app's promise, checked from the outside: nothing Postern stores or logs holds the
// member's private key or a decrypted body of a zero-access message. The app is driven for real
// (enrollment, the key made in the browser, a zero-access message opened there, a reply sent from
// there); then the store (SQLite's file with its WAL, or PostgreSQL's rows, files and WAL: see
// storeAtRest in test/helpers/store-backdoor.ts), Postern's log at trace level, and the Dovecot mail store
// (the files on disk, and every message as Dovecot serves it) are scanned for the body markers
// and the key, in several encodings. A positive control proves the scan finds a
// marker where it must: in a compatible inbox, whose plaintext Dovecot holds by design.
import { createDecipheriv, randomBytes, scryptSync } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import { ImapFlow } from 'imapflow';
import nodemailer from 'nodemailer';
import * as openpgp from 'openpgp';
import type { Browser } from 'playwright-core';
import { addSenderLogin } from '../../scripts/mailenv.ts';
import { call, mailEnv, newProject, type TestInbox, type TestProject, type TestServer } from '../helpers/harness.ts';
import { ingressInbox, untilDelivered } from '../helpers/ingress-helpers.ts';
import { until } from '../helpers/mail-fixtures.ts';
import { atSink, labelIds, listLabel, rcpt } from '../helpers/send-fixtures.ts';
import { enrollMember, go, launchChromium, newDevice, screenshot, startAppServer, type Device } from '../helpers/browser.ts';
import { storeAtRest } from '../helpers/store-backdoor.ts';

const PASSPHRASE = 'privacy proof passphrase';

/** What a scan looks for: each needle in several encodings a log or a store might use. */
function variants(needle: Uint8Array): Buffer[] {
  const b = Buffer.from(needle);
  const out = [b, Buffer.from(b.toString('hex')), Buffer.from(b.toString('hex').toUpperCase())];
  // base64 of the needle at each of the three alignments it can have inside a longer text.
  for (let shift = 0; shift < 3; shift++) {
    const encoded = Buffer.concat([Buffer.alloc(shift), b]).toString('base64');
    // Drop the characters that mix in the neighbours' bits.
    const start = Math.ceil((shift * 4) / 3) + (shift ? 1 : 0);
    const end = encoded.replace(/=+$/, '').length - 2;
    if (end - start >= 8) {
      out.push(Buffer.from(encoded.slice(start, end)));
      out.push(Buffer.from(encoded.slice(start, end).replace(/\+/g, '-').replace(/\//g, '_')));
    }
  }
  return out;
}

function filesUnder(dir: string): string[] {
  if (!existsSync(dir)) return [];
  const out: string[] = [];
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    const st = statSync(path);
    if (st.isDirectory()) out.push(...filesUnder(path));
    else if (st.isFile()) out.push(path);
  }
  return out;
}

/** Every message of every mailbox of the inbox's user, as Dovecot serves it (after mail_crypt). */
async function servedMessages(inbox: TestInbox): Promise<Array<{ where: string; bytes: Buffer }>> {
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
  const out: Array<{ where: string; bytes: Buffer }> = [];
  try {
    for (const box of await client.list()) {
      const lock = await client.getMailboxLock(box.path);
      try {
        if (client.mailbox && client.mailbox.exists > 0) {
          for await (const m of client.fetch('1:*', { uid: true, source: true }))
            out.push({ where: `IMAP ${inbox.imapUser} ${box.path} ${m.uid}`, bytes: m.source! });
        }
      } finally {
        lock.release();
      }
    }
  } finally {
    await client.logout().catch(() => undefined);
  }
  return out;
}

type Haystack = { where: string; bytes: Buffer };

function findings(haystacks: Haystack[], needles: Record<string, Uint8Array>): string[] {
  const found: string[] = [];
  for (const [name, needle] of Object.entries(needles)) {
    for (const v of variants(needle)) {
      for (const h of haystacks) if (h.bytes.includes(v)) found.push(`${name} (as ${v.toString('latin1').slice(0, 24)}…) in ${h.where}`);
    }
  }
  return [...new Set(found)];
}

/** The member's armored private key, from the stored envelope and the passphrase (web/keys.ts, in reverse). */
function unlockEnvelope(blob: string, passphrase: string): string {
  const envelope = JSON.parse(Buffer.from(blob, 'base64url').toString('utf8')) as {
    key: { iv: string; data: string };
    wraps: Array<{ kind: string; N: number; r: number; p: number; salt: string; iv: string; wrapped: string }>;
  };
  const wrap = envelope.wraps.find((w) => w.kind === 'passphrase')!;
  const kek = scryptSync(Buffer.from(passphrase.normalize('NFKC')), Buffer.from(wrap.salt, 'base64url'), 32, {
    N: wrap.N,
    r: wrap.r,
    p: wrap.p,
    maxmem: 512 * 1024 * 1024,
  });
  const gcm = (key: Buffer, iv: string, data: string, aad?: Buffer) => {
    const bytes = Buffer.from(data, 'base64url');
    const d = createDecipheriv('aes-256-gcm', key, Buffer.from(iv, 'base64url'));
    if (aad) d.setAAD(aad);
    d.setAuthTag(bytes.subarray(bytes.length - 16));
    return Buffer.concat([d.update(bytes.subarray(0, bytes.length - 16)), d.final()]);
  };
  const dataKey = gcm(kek, wrap.iv, wrap.wrapped, Buffer.from('postern/data-key/v1'));
  return gcm(dataKey, envelope.key.iv, envelope.key.data).toString('utf8');
}

describe('web app: nothing stored or logged holds the private key or a zero-access plaintext', function () {
  this.timeout(180_000);
  let s: TestServer;
  let p: TestProject;
  let browser: Browser;
  let device: Device;
  let logDir: string;
  let logFile: string;

  before(async () => {
    logDir = mkdtempSync(join(tmpdir(), 'postern-privacy-log-'));
    logFile = join(logDir, 'postern.log');
    // Everything Postern can log, into a file of its own.
    ({ s } = await startAppServer({ POSTERN_LMTP_PORT: String(mailEnv().ingress.port), POSTERN_LOG_LEVEL: 'trace' }, { logFile }));
    p = await newProject(s);
    browser = await launchChromium();
  });
  after(async () => {
    await browser?.close();
    await s?.close();
    if (logDir) rmSync(logDir, { recursive: true, force: true });
  });

  it('scans the store, the WAL, the log and the mail store after the app read and sent zero-access mail', async () => {
    const zero = await ingressInbox(s, p.projectId, p.memberId, 'zero-access');
    const compatible = await ingressInbox(s, p.projectId, p.memberId, 'compatible');
    // Its address is in the ingress domain: Postfix must know the inbox's user may send as it.
    await addSenderLogin(mailEnv(), zero.address, zero.imapUser);
    const token = await p.token(['messages:read']);
    const inboundMarker = `INBOUND-${randomBytes(12).toString('hex')}`;
    const outboundMarker = `OUTBOUND-${randomBytes(12).toString('hex')}`;
    const controlMarker = `CONTROL-${randomBytes(12).toString('hex')}`;

    // Mail arrives through Postfix and Postern's ingress, which seals the zero-access copy.
    const env = mailEnv();
    const transport = nodemailer.createTransport({ host: env.smtp.host, port: env.smtp.port, secure: false, ignoreTLS: true });
    try {
      await transport.sendMail({
        from: 'Erin <erin@example.org>',
        to: zero.address,
        subject: 'zero-access inbound',
        text: `The secret is ${inboundMarker}.\n`,
      });
      await transport.sendMail({
        from: 'erin@example.org',
        to: compatible.address,
        subject: 'compatible inbound',
        text: `The control is ${controlMarker}.\n`,
      });
    } finally {
      transport.close();
    }
    const ids = await labelIds(s, token, zero.id);
    const inbound = await untilDelivered(
      'the zero-access message',
      async () => (await listLabel(s, token, zero.id, ids.INBOX!)).find((m) => m.subject === 'zero-access inbound'),
      30_000,
    );
    const compatibleIds = await labelIds(s, token, compatible.id);
    await untilDelivered(
      'the compatible message',
      async () => (await listLabel(s, token, compatible.id, compatibleIds.INBOX!)).find((m) => m.subject === 'compatible inbound'),
      30_000,
    );

    // The member enrolls; without PRF the key is protected by a passphrase (so this test can
    // recover the key from the stored envelope to know what to look for).
    device = await newDevice(browser, { prf: false });
    const { page } = device;
    const fingerprint = await enrollMember(device, (await s.postern.passkeys.invite(p.memberId)).link, PASSPHRASE);

    // The app opens the zero-access message (decrypted in the page: its text is quoted in the
    // reply form) and sends a reply with another marker.
    await go(page, `#/compose/${zero.id}/reply/${inbound.id}`);
    await page.locator('#compose-to').waitFor({ timeout: 60_000 });
    expect(await page.locator('#compose-body').inputValue()).to.include(`> The secret is ${inboundMarker}.`);
    const outside = rcpt('privacy');
    await page.fill('#compose-to', outside);
    await page.locator('#compose-body').press('Control+Home');
    await page.keyboard.type(`Reply with ${outboundMarker}.`);
    await page.click('#compose-send');
    await page.locator('#compose-status[data-state="sent"], #compose-status[data-state="failed"]').first().waitFor({ timeout: 60_000 });
    expect(await page.locator('#compose-status').getAttribute('data-state'), await page.locator('#compose-status').innerText()).to.equal(
      'sent',
    );
    await screenshot(page, '20-privacy-reply');
    // It went out (the recipient holds the plaintext, as any recipient does) and its sealed copy is filed in Sent.
    const [delivered] = await atSink(outside);
    expect(delivered!.raw.toString()).to.include(outboundMarker);
    await until(
      'the sealed copy in Sent',
      async () => (await listLabel(s, token, zero.id, ids.Sent!)).find((m) => m.subject === 'Re: zero-access inbound'),
      30_000,
    );
    await until(
      '\\Answered on the original',
      async () => (await listLabel(s, token, zero.id, ids.INBOX!)).find((m) => m.id === inbound.id && m.flags.includes('answered')),
      30_000,
    );

    // The member's private key, recovered from what the server stores, and its secret numbers.
    const session = JSON.parse(await page.evaluate<string>("sessionStorage.getItem('postern.session')")) as { session: string };
    const { blob } = (await (await call(`${s.app}/me/key-backup`, { session: session.session })).json()) as { blob: string };
    const armored = unlockEnvelope(blob, PASSPHRASE);
    const key = await openpgp.readPrivateKey({ armoredKey: armored });
    expect(key.getFingerprint()).to.equal(fingerprint);
    const secrets: Record<string, Uint8Array> = {
      'armored private key': Buffer.from(armored),
      'armored key body': Buffer.from(
        armored
          .split('\n')
          .filter((l) => /^[A-Za-z0-9+/=]{40,}$/.test(l))
          .slice(0, 2)
          .join(''),
      ),
      'secret key packet': key.keyPacket.write(),
    };
    for (const [i, packet] of [key.keyPacket, ...key.subkeys.map((k) => k.keyPacket)].entries()) {
      for (const [name, value] of Object.entries((packet as unknown as { privateParams: Record<string, Uint8Array> }).privateParams))
        secrets[`secret ${name} of key ${i}`] = value;
    }
    expect(Object.keys(secrets).length).to.be.greaterThan(4);

    // Everything Postern stores and logs, and everything Dovecot holds for the zero-access inbox.
    // Read while Postern runs, so the WAL is still there (a clean close checkpoints it away).
    const atRest = await storeAtRest(s.storeEnv);
    // The scan reads the store itself: what it certainly holds, the inbox's id, is found there.
    expect(findings(atRest, { 'the inbox id': Buffer.from(zero.id) })).to.not.deep.equal([]);
    const stored: Haystack[] = [
      ...atRest,
      ...filesUnder(s.dir)
        .filter((f) => !atRest.some((h) => h.where === f))
        .map((f) => ({ where: f, bytes: readFileSync(f) })),
    ];
    const log = { where: 'Postern log', bytes: readFileSync(logFile) };
    expect(log.bytes.length, 'the log captured something').to.be.greaterThan(1000);
    const onDisk: Haystack[] = filesUnder(join(env.dir, 'mail', env.domain, zero.imapUser.split('@')[0]!)).map((f) => ({
      where: f,
      bytes: readFileSync(f),
    }));
    expect(onDisk.length, 'the zero-access mailbox files').to.be.greaterThan(0);
    const served = await servedMessages(zero);
    expect(served.length, 'inbound, and the Sent copy').to.be.greaterThanOrEqual(2);
    const everything = [...stored, log, ...onDisk, ...served];

    expect(
      findings(everything, { 'inbound marker': Buffer.from(inboundMarker), 'outbound marker': Buffer.from(outboundMarker), ...secrets }),
    ).to.deep.equal([]);
    // The control: the same scan finds the compatible inbox's marker where Dovecot holds it.
    expect(findings(await servedMessages(compatible), { 'control marker': Buffer.from(controlMarker) })).to.not.deep.equal([]);
    // And it would find the key and the markers, were they there.
    const planted = findings(
      [{ where: 'a planted copy', bytes: Buffer.from(`x${Buffer.from(armored).toString('base64')}y ${inboundMarker}`) }],
      { key: Buffer.from(armored), marker: Buffer.from(inboundMarker) },
    );
    expect(planted.some((f) => f.startsWith('key '))).to.equal(true);
    expect(planted.some((f) => f.startsWith('marker '))).to.equal(true);
  });
});
