// Keys, devices and sessions in the web app (real Chromium, DevTools' virtual passkeys with PRF):
// a reload brings the member back with one passkey prompt and the same session; "Add a passkey"
// on an unlocked device wraps the key for the new passkey at once (it then unlocks alone); the
// sessions are listed by device and last use and one can be ended; the Activity screen pages from
// the newest event without reading the log. docs/app.md.
import { expect } from 'chai';
import type { Browser, Page } from 'playwright-core';
import { call, expectError, newProject, type TestProject, type TestServer } from '../helpers/harness.ts';
import { addInbox, post, register } from '../helpers/events-helpers.ts';
import {
  copyPasskeys,
  enrollMember,
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

const PASSPHRASE = 'correct horse battery staple';

describe('web app: keys, devices and sessions (Chromium, virtual passkeys)', function () {
  this.timeout(180_000);
  let s: TestServer;
  let p: TestProject;
  let browser: Browser;
  let origin: string;
  const devices: Device[] = [];

  before(async () => {
    ({ s, origin } = await startAppServer({ POSTERN_EVENTS_SETTLE_MS: '0' }));
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

  const device = async (options: { prf: boolean; width?: number }) => {
    const d = await newDevice(browser, options);
    devices.push(d);
    return d;
  };
  const sessionOf = async (page: Page) =>
    (JSON.parse(await inPage<string>(page, "sessionStorage.getItem('postern.session')")) as { session: string }).session;
  /** Every assertion the device's passkeys have made: the virtual authenticator counts them. */
  const assertions = async (d: Device) => {
    const { credentials } = await d.cdp.send('WebAuthn.getCredentials', { authenticatorId: d.authenticatorId });
    return credentials.reduce((n, c) => n + c.signCount, 0);
  };
  const wrapsOf = async (session: string) => {
    const { blob } = (await (await call(`${s.app}/me/key-backup`, { session })).json()) as { blob: string };
    return (JSON.parse(Buffer.from(blob, 'base64url').toString('utf8')) as { wraps: Array<{ kind: string; credentialId?: string }> }).wraps;
  };
  /** DevTools names credentials in base64, WebAuthn (and the envelope) in base64url. */
  const credentialIdOf = (c: { credentialId: string }) => Buffer.from(c.credentialId, 'base64').toString('base64url');
  const enroll = async (d: Device, memberId: string) => {
    const { link } = await s.postern.passkeys.invite(memberId);
    await d.page.goto(link);
    await d.page.locator('#enroll').waitFor({ timeout: 90_000 });
    await d.page.click('#enroll');
    return keyFingerprint(d.page);
  };

  it('a reload brings the member back with one passkey prompt, the same session and screen, never a sign-out', async () => {
    const member = await p.member();
    await addInbox(s, p, { memberId: member });
    const a = await device({ prf: true });
    const fingerprint = await enroll(a, member);
    const session = await sessionOf(a.page);
    await go(a.page, '#/events');
    await a.page.locator('#events-position:not(:empty)').waitFor({ timeout: 60_000 });
    const before = await assertions(a);

    await a.page.reload();
    // The screen asked for, after one prompt: the key is open again (no "Locked" on home).
    await a.page.locator('#events-position:not(:empty)').waitFor({ timeout: 60_000 });
    expect(await assertions(a)).to.equal(before + 1);
    expect(await sessionOf(a.page)).to.equal(session);
    await go(a.page, '#');
    expect(await keyFingerprint(a.page)).to.equal(fingerprint);
    expect(await a.page.locator('#sign-in').count()).to.equal(0);
    // Nothing of the key went into the browser's storage to make this possible.
    expect(await inPage(a.page, 'localStorage.length')).to.equal(0);
    expect(await inPage(a.page, 'sessionStorage.length')).to.equal(1);
    expect(await inPage(a.page, 'indexedDB.databases().then((d) => d.length)')).to.equal(0);

    // "Not now" goes on locked; the home screen offers to unlock, with one prompt again.
    const cancelled = await assertions(a);
    await a.cdp.send('WebAuthn.setAutomaticPresenceSimulation', { authenticatorId: a.authenticatorId, enabled: false });
    await a.page.reload();
    await a.page.getByRole('heading', { name: 'Welcome back' }).waitFor({ timeout: 60_000 });
    await a.page.locator('#unlock-later').waitFor();
    expect(await axeViolations(a.page, 'the unlock screen'), 'the unlock screen').to.deep.equal([]);
    await screenshot(a.page, 'keys-0-welcome-back');
    await a.page.locator('#unlock-later').click();
    await a.page.locator('#unlock-link').waitFor({ timeout: 60_000 });
    expect(await a.page.locator('#key-status').textContent()).to.include('Locked on this page.');
    await a.cdp.send('WebAuthn.setAutomaticPresenceSimulation', { authenticatorId: a.authenticatorId, enabled: true });
    // The unlock screen starts the prompt itself (the button is there for browsers that refuse that).
    await a.page.click('#unlock-link');
    expect(await keyFingerprint(a.page)).to.equal(fingerprint);
    expect(await assertions(a)).to.equal(cancelled + 1);
    await screenshot(a.page, 'keys-1-back-after-reload');
  });

  it('a reload where no passkey can unlock asks for the passphrase, with no passkey prompt', async () => {
    const member = await p.member();
    const d = await device({ prf: false });
    const fingerprint = await enrollMember(d, (await s.postern.passkeys.invite(member)).link, PASSPHRASE);
    const session = await sessionOf(d.page);
    const before = await assertions(d);
    await d.page.reload();
    await d.page.getByRole('heading', { name: 'Unlock your key' }).waitFor({ timeout: 60_000 });
    await d.page.fill('#passphrase', PASSPHRASE);
    await d.page.click('#passphrase-submit');
    expect(await keyFingerprint(d.page)).to.equal(fingerprint);
    expect(await assertions(d)).to.equal(before);
    expect(await sessionOf(d.page)).to.equal(session);
  });

  it('"Add a passkey" on an unlocked device wraps the key for it at once: it then unlocks alone', async () => {
    const member = await p.member();
    const a = await device({ prf: true });
    const fingerprint = await enroll(a, member);
    const session = await sessionOf(a.page);
    const {
      credentials: [first],
    } = await a.cdp.send('WebAuthn.getCredentials', { authenticatorId: a.authenticatorId });
    expect((await wrapsOf(session)).map((w) => w.credentialId)).to.deep.equal([credentialIdOf(first!)]);

    // One virtual authenticator cannot both hold the passkey that confirms and make one the
    // options exclude (test/app/app.test.ts): once the confirmation is done, the old one leaves it.
    await a.page.route('**/api/v1/auth/passkeys/options', async (route) => {
      await a.cdp.send('WebAuthn.removeCredential', { authenticatorId: a.authenticatorId, credentialId: first!.credentialId });
      await route.continue();
    });
    await a.page.click('#add-passkey');
    await a.page.locator('#passkey-status', { hasText: 'It also unlocks your encrypted mail.' }).waitFor({ timeout: 60_000 });
    expect(await a.page.locator('#passkeys li').count()).to.equal(2);
    const { credentials } = await a.cdp.send('WebAuthn.getCredentials', { authenticatorId: a.authenticatorId });
    expect(credentials).to.have.length(1);
    expect(credentials[0]!.credentialId).to.not.equal(first!.credentialId);
    const added = credentials[0]!;
    const wraps = await wrapsOf(session);
    expect(wraps.map((w) => w.kind)).to.deep.equal(['prf', 'prf']);
    expect(wraps.map((w) => w.credentialId)).to.have.members([credentialIdOf(first!), credentialIdOf(added)]);
    // No passphrase on screen or in the envelope: the passkeys are the only ways in.
    expect(await a.page.locator('#key-status').textContent()).to.include('It unlocks with this passkey (and its synced copies).');

    // Signed out and in with the new passkey (the first is gone from the authenticator): it
    // alone unlocks the key, no passphrase asked.
    await a.page.click('#sign-out');
    await a.page.locator('#sign-in').waitFor();
    await a.page.click('#sign-in');
    expect(await keyFingerprint(a.page)).to.equal(fingerprint);
    expect(await a.page.locator('#passphrase').count()).to.equal(0);
  });

  it('sessions are listed by device and last use, in plain words, and one can be ended', async () => {
    const member = await p.member();
    const a = await device({ prf: true });
    await enroll(a, member);
    // A second device signs in with a copy of the passkey (no PRF on a copy, no passphrase set:
    // only another device could hand it the key, "Not now" goes on locked; its session is good).
    const b = await device({ prf: true });
    await copyPasskeys(a, b);
    await b.page.goto(`${origin}/app/`);
    await b.page.click('#sign-in');
    await b.page.click('#handover-later', { timeout: 60_000 });
    await b.page.locator('#sessions li').first().waitFor({ timeout: 60_000 });
    const sessionB = await sessionOf(b.page);

    await go(a.page, '#/events');
    await go(a.page, '#');
    await a.page.locator('#sessions li').nth(1).waitFor({ timeout: 60_000 });
    expect(await axeViolations(a.page, 'the home screen with its sessions'), 'the home screen with its sessions').to.deep.equal([]);
    const rows = a.page.locator('#sessions li');
    expect(await rows.count()).to.equal(2);
    const texts = await rows.allInnerTexts();
    // Headless Chromium on Linux says "HeadlessChrome … X11; Linux": named as a person would.
    for (const t of texts) expect(t).to.match(/^Chrome on Linux/);
    expect(texts.filter((t) => t.includes('this device'))).to.have.length(1);
    for (const t of texts) expect(t).to.include('Last used').and.include('signed in');
    const visible = (await a.page.locator('main').innerText()).toLowerCase();
    for (const word of ['prf', 'epoch', 'wrap', 'ses_', 'pky_', 'user agent']) expect(visible).to.not.include(word);
    const end = rows.filter({ hasNotText: 'this device' }).getByRole('button', { name: /^End the session on Chrome on Linux, last used / });
    await screenshot(a.page, 'keys-2-sessions');
    await end.click();
    await a.page.locator('#sessions li').nth(1).waitFor({ state: 'detached', timeout: 30_000 });
    await expectError(await call(`${s.app}/inboxes`, { session: sessionB }), 401, /session ended/);
  });

  it('the Activity screen pages from the newest event: one request a page, Newer from what was read', async () => {
    const member = await p.member();
    const inbox = await addInbox(s, p, { memberId: member });
    const writer = await p.token(['events:write'], { memberId: member });
    await register(s, writer, {
      name: 'ext.keys.step',
      description: 'A numbered step.',
      data: [{ name: 'n', type: 'integer', required: true }],
    });
    for (let n = 0; n < 120; n++) {
      const res = await post(s, writer, { type: 'ext.keys.step', subject: `step ${n}`, inbox, data: { n } });
      expect(res.status).to.equal(201);
    }
    const a = await device({ prf: true });
    await enroll(a, member);
    const reads: string[] = [];
    a.page.on('request', (r) => {
      if (new URL(r.url()).pathname === '/api/v1/events') reads.push(new URL(r.url()).search);
    });
    await go(a.page, '#/events');
    const position = a.page.locator('#events-position');
    await position.filter({ hasText: 'Events 1–50' }).waitFor({ timeout: 60_000 });
    expect(reads).to.have.length(1);
    expect(reads[0]).to.include('order=desc').and.include('limit=50').and.not.include('before');
    expect(await a.page.locator('#events li').first().textContent()).to.include('step 119');
    await a.page.click('#events-older');
    await position.filter({ hasText: 'Events 51–100' }).waitFor();
    expect(reads).to.have.length(2);
    expect(reads[1]).to.include('before=');
    expect(await a.page.locator('#events li').first().textContent()).to.include('step 69');
    await a.page.click('#events-older');
    await position.filter({ hasText: 'Events 101–120, newest first (the oldest)' }).waitFor();
    expect(await a.page.locator('#events li').last().textContent()).to.include('step 0');
    expect(await a.page.locator('#events-older').isDisabled()).to.equal(true);
    const read = reads.length;
    await a.page.click('#events-newer');
    await position.filter({ hasText: 'Events 51–100' }).waitFor();
    expect(reads).to.have.length(read);
    await screenshot(a.page, 'keys-3-activity');
  });
});
