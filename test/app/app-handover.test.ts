// Handing the key to a new device in the web app (real Chromium, DevTools' virtual passkeys with
// PRF): device 1 is enrolled and unlocked; device 2 signs in with a copy of the passkey that gives
// no PRF output (as Chromium copies it) and no passphrase is set, so only device 1 can hand it the
// key. Both screens show the same code, device 1 approves after a passkey confirmation, and device
// 2 has the key without a passphrase typed, and opens a zero-access message with it. docs/app.md,
// "A new device: approved from a signed-in one".
import { expect } from 'chai';
import type { Browser } from 'playwright-core';
import { randomBytes } from 'node:crypto';
import nodemailer from 'nodemailer';
import { call, mailEnv, newProject, type TestProject, type TestServer } from '../helpers/harness.ts';
import { ingressInbox, untilDelivered } from '../helpers/ingress-helpers.ts';
import { labelIds, listLabel } from '../helpers/send-fixtures.ts';
import {
  copyPasskeys,
  go,
  inPage,
  keyFingerprint,
  launchChromium,
  newDevice,
  screenshot,
  startAppServer,
  type Device,
} from '../helpers/browser.ts';
import { axeViolations } from '../helpers/axe.ts';

describe('web app: approving a new device (Chromium, virtual passkeys)', function () {
  this.timeout(240_000);
  let s: TestServer;
  let p: TestProject;
  let browser: Browser;
  let origin: string;
  const devices: Device[] = [];

  before(async () => {
    // The ingress seals what Postfix delivers to a zero-access inbox.
    ({ s, origin } = await startAppServer({ POSTERN_EVENTS_SETTLE_MS: '0', POSTERN_LMTP_PORT: String(mailEnv().ingress.port) }));
    p = await newProject(s);
    browser = await launchChromium();
  });
  after(async () => {
    await browser?.close();
    await s?.close();
  });
  afterEach(() => {
    for (const d of devices) expect(d.problems, 'CSP violations or page errors').to.deep.equal([]);
  });

  const device = async () => {
    const d = await newDevice(browser, { prf: true });
    devices.push(d);
    return d;
  };
  const sessionOf = async (d: Device) =>
    (JSON.parse(await inPage<string>(d.page, "sessionStorage.getItem('postern.session')")) as { session: string }).session;

  it('a signed-in device hands the key to a new one: the same code on both, no passphrase; it opens a zero-access message', async () => {
    // The project's own member: the token below reads its inboxes.
    const member = p.memberId;
    const a = await device();
    await a.page.goto((await s.postern.passkeys.invite(member)).link);
    await a.page.locator('#enroll').waitFor({ timeout: 90_000 });
    await a.page.click('#enroll');
    const fingerprint = await keyFingerprint(a.page);

    // A message the ingress sealed, which only the member's key opens.
    const sealed = await ingressInbox(s, p.projectId, member, 'zero-access');
    const subject = `Handed over ${randomBytes(3).toString('hex')}`;
    const env = mailEnv();
    const transport = nodemailer.createTransport({ host: env.smtp.host, port: env.smtp.port, secure: false, ignoreTLS: true });
    try {
      await transport.sendMail({ from: 'Ada Sender <ada@example.org>', to: sealed.address, subject, text: 'Only your key opens this.' });
    } finally {
      transport.close();
    }
    const token = await p.token(['messages:read']);
    const { INBOX } = await labelIds(s, token, sealed.id);
    await untilDelivered('the sealed delivery', async () => (await listLabel(s, token, sealed.id, INBOX!)).length > 0, 60_000);

    const b = await device();
    expect(await copyPasskeys(a, b)).to.equal(1);
    await b.page.goto(`${origin}/app/`);
    await b.page.click('#sign-in');
    // The copy gives no PRF output and there is no passphrase: only another device can help.
    await b.page.locator('#handover-start').waitFor({ timeout: 60_000 });
    expect(await b.page.locator('#passphrase').count()).to.equal(0);
    expect(await axeViolations(b.page, 'the unlock screen with no passphrase'), 'the unlock screen with no passphrase').to.deep.equal([]);
    await b.page.click('#handover-start');
    const code = (await b.page.locator('#handover-code').textContent())!;
    expect(code).to.match(/^\d{3} \d{3}$/);
    expect(await axeViolations(b.page, 'the waiting screen'), 'the waiting screen').to.deep.equal([]);
    await screenshot(b.page, 'handover-1-waiting');

    // Device 1's home screen lists the request with the same code (drawn again to see it).
    await go(a.page, '#/events');
    // Drawn before going back, or it could be drawn over the home screen.
    await a.page.locator('#events-position:not(:empty)').waitFor({ timeout: 60_000 });
    await go(a.page, '#');
    const row = a.page.locator('#handovers li');
    await row.waitFor({ timeout: 60_000 });
    expect(await row.locator('.handover-code').textContent()).to.equal(code);
    expect(await axeViolations(a.page, 'the home screen with a request'), 'the home screen with a request').to.deep.equal([]);
    await screenshot(a.page, 'handover-2-approve');
    await row.getByRole('button', { name: /^Approve/ }).click();
    await a.page.locator('#handovers').waitFor({ state: 'detached', timeout: 60_000 });

    // Device 2 opens the key, the same one, and the request is gone.
    expect(await keyFingerprint(b.page)).to.equal(fingerprint);
    expect(await b.page.locator('#key-status').textContent()).to.include('Unlocked.');
    const list = await call(`${s.app}/me/key-handovers`, { session: await sessionOf(a) });
    expect(((await list.json()) as { handovers: unknown[] }).handovers).to.deep.equal([]);
    await screenshot(b.page, 'handover-3-unlocked');

    // And it opens the zero-access message (no reload: that would lock the key again).
    await go(b.page, `#/inbox/${sealed.id}`);
    const item = b.page.locator('#messages li', { hasText: subject });
    await item.waitFor({ timeout: 60_000 });
    await item.locator('a').click();
    await b.page.locator('#message-subject', { hasText: subject }).waitFor({ timeout: 60_000 });
  });
});
