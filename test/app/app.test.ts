// The web app in real Chromium: enrollment from an invite link, passkey sign-in on a second
// "device" (a fresh browser context holding a copy of the passkey, as a synced passkey would),
// the member's key made in the browser and unlocked again there through the passkey's PRF or a
// passphrase, the inbox list, sign-out. Screenshots go to test-artifacts/app/ (git-ignored).
import { expect } from 'chai';
import type { Browser, Page } from 'playwright-core';
import { APP_CSP } from '../../lib/http/routes/web-app.ts';
import { call, expectError, newProject, type TestProject, type TestServer } from '../helpers/harness.ts';
import {
  copyPasskeys,
  inPage,
  keyFingerprint,
  launchChromium,
  newDevice,
  screenshot,
  startAppServer,
  type Device,
} from '../helpers/browser.ts';
import { onStore } from '../helpers/store-backdoor.ts';

const PASSPHRASE = 'correct horse battery staple';

describe('web app (Chromium, virtual passkeys)', function () {
  // Key generation and scrypt run in the browser, on a shared two-core machine.
  this.timeout(120_000);
  let s: TestServer;
  let p: TestProject;
  let browser: Browser;
  let origin: string;
  const devices: Device[] = [];

  before(async () => {
    ({ s, origin } = await startAppServer());
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
  const fingerprint = keyFingerprint;
  // Evaluated in the page (as text: this file is compiled without the DOM's types).
  const sessionOf = async (page: Page) =>
    JSON.parse(await inPage<string>(page, "sessionStorage.getItem('postern.session')")) as { session: string };

  it('serves the app under /app/ with a strict CSP', async () => {
    const res = await fetch(`${origin}/app/`);
    expect(res.status).to.equal(200);
    expect(res.headers.get('content-security-policy')).to.equal(APP_CSP);
    expect(APP_CSP).to.include("script-src 'self'").and.not.include('unsafe');
    // Loosened only for images: a message's frame inherits this policy, and its remote images may be
    // shown once the member asks (web/mail/html.ts). Scripts, styles and requests stay this origin's.
    const directives = Object.fromEntries(APP_CSP.split('; ').map((d) => [d.split(' ')[0], d.split(' ').slice(1).join(' ')]));
    expect(directives).to.deep.include({
      'script-src': "'self'",
      'style-src': "'self'",
      'connect-src': "'self'",
      'img-src': "'self' data: http: https:",
      'frame-ancestors': "'none'",
    });
    expect(directives).to.not.have.any.keys('frame-src', 'child-src');
    const html = await res.text();
    expect(html).to.not.match(/<script(?![^>]*\bsrc=)[^>]*>/);
    const redirect = await fetch(`${origin}/app`, { redirect: 'manual' });
    expect(redirect.status).to.equal(302);
    expect(redirect.headers.get('location')).to.equal('/app/');
    await expectError(await fetch(`${origin}/app/..%2Fpackage.json`), 404);
  });

  it('PRF: enroll, list inboxes, unlock again with the passkey, a second device, sign out', async () => {
    const inbox = await p.inbox();
    const { link } = await s.postern.passkeys.invite(p.memberId);
    const a = await device({ prf: true });
    await a.page.goto(link);
    await a.page.getByRole('heading', { name: 'Set up your passkey' }).waitFor();
    await screenshot(a.page, '1-enroll');
    await a.page.click('#enroll');
    const first = await fingerprint(a.page);
    expect(first).to.match(/^[0-9a-f]{40,64}$/);
    expect(await a.page.locator('#key-status').textContent())
      .to.include('It unlocks with this passkey (and its synced copies).')
      .and.include('Your public key (what others encrypt mail to you with): published.');
    await a.page.locator(`#inboxes li[data-inbox="${inbox.id}"]`).waitFor();
    expect(a.page.url()).to.not.include('#enroll');
    await screenshot(a.page, '2-home');
    // The session is in this tab's sessionStorage only: no cookie, nothing in localStorage.
    expect(await a.context.cookies()).to.deep.equal([]);
    expect(await inPage(a.page, 'localStorage.length')).to.equal(0);
    const sessionA = (await sessionOf(a.page)).session;

    // The stored key is opaque to the server: no PEM/armor, no private key material in clear.
    const stored = await call(`${s.app}/me/key-backup`, { session: sessionA });
    const { blob } = (await stored.json()) as { blob: string };
    const envelope = Buffer.from(blob, 'base64url').toString('utf8');
    expect(envelope).to.not.include('PRIVATE KEY');
    expect((JSON.parse(envelope) as { wraps: Array<{ kind: string }> }).wraps.map((w) => w.kind)).to.deep.equal(['prf']);

    // Signed out and in again on this device: the passkey's PRF unlocks the same key, no passphrase.
    await a.page.click('#sign-out');
    await a.page.getByRole('heading', { name: 'Sign in to Postern' }).waitFor();
    await screenshot(a.page, '3-sign-in');
    // Keyboard only: focus starts on the heading; Tab reaches the button, Enter presses it.
    await a.page.keyboard.press('Tab');
    expect(await inPage(a.page, 'document.activeElement?.id')).to.equal('sign-in');
    await a.page.keyboard.press('Enter');
    expect(await fingerprint(a.page)).to.equal(first);
    await expectError(await call(`${s.app}/inboxes`, { session: sessionA }), 401, /session ended/);

    // A passphrase too, for devices whose passkey gives no PRF output.
    await a.page.fill('#new-passphrase', PASSPHRASE);
    await a.page.click('#passphrase-form button');
    await a.page.getByText('It unlocks with this passkey (and its synced copies) or your passphrase.').waitFor({ timeout: 60_000 });

    // Another device with a copy of the passkey. Chromium's virtual authenticator does not copy a
    // credential's PRF secret (DevTools' Credential has no field for it: the copy answers without
    // PRF output), so here the key unlocks with the passphrase; a synced passkey would carry it.
    const b = await device({ prf: true });
    expect(await copyPasskeys(a, b)).to.equal(1);
    await b.page.goto(`${origin}/app/`);
    await b.page.click('#sign-in');
    await b.page.getByRole('heading', { name: 'Unlock your key' }).waitFor({ timeout: 60_000 });
    await b.page.fill('#passphrase', PASSPHRASE);
    await b.page.click('#passphrase-submit');
    expect(await fingerprint(b.page)).to.equal(first);
    await b.page.locator(`#inboxes li[data-inbox="${inbox.id}"]`).waitFor();
    expect(await b.page.locator('#sessions li').count()).to.equal(2);
    await screenshot(b.page, '4-second-device');

    const sessionB = (await sessionOf(b.page)).session;
    await b.page.click('#sign-out');
    await b.page.getByRole('heading', { name: 'Sign in to Postern' }).waitFor();
    expect(await inPage(b.page, 'sessionStorage.length')).to.equal(0);
    await expectError(await call(`${s.app}/inboxes`, { session: sessionB }), 401, /session ended/);
    expect((await call(`${s.app}/inboxes`, { session: (await sessionOf(a.page)).session })).status).to.equal(200);
  });

  it('re-authentication: the first key rides on the sign-in; replacing it or adding a passkey, the app runs a passkey ceremony first', async () => {
    const member = await p.member();
    const { link } = await s.postern.passkeys.invite(member);
    const a = await device({ prf: true });
    const asked: string[] = [];
    a.page.on('request', (r) => {
      const path = new URL(r.url()).pathname;
      if (path.startsWith('/api/v1/me/') || path.startsWith('/api/v1/auth/')) asked.push(`${r.method()} ${path}`);
    });
    await a.page.goto(link);
    await a.page.click('#enroll');
    const first = await fingerprint(a.page);
    expect(await a.page.locator('#key-status').textContent()).to.include(
      'Your public key (what others encrypt mail to you with): published.',
    );
    // Set right after the enrollment ceremony: no second one.
    expect(asked).to.include('PUT /api/v1/me/key').and.not.include('POST /api/v1/me/reauth/options');
    const keyEvents = async () => {
      const { events } = await s.postern.events.backfill(
        {
          projectId: p.projectId,
          inboxes: null,
          allowedInboxes: [],
          visibilities: ['project'],
          types: ['access.key.set'],
          redactActor: false,
        },
        0,
        1000,
      );
      return events.map((e) => (JSON.parse(e.json) as { data: Record<string, string> }).data).filter((d) => d.memberId === member);
    };
    expect((await keyEvents()).map((d) => d.confirmedBy)).to.deep.equal(['fresh-session']);

    // The key envelope is lost (say, a restore from an old backup): the next sign-in makes a new
    // key pair, and registering it replaces the key the server has. The server refuses that on
    // the session alone; the app confirms with the passkey and sends it again.
    await onStore(s.storeEnv, 'DELETE FROM member_key_blobs WHERE member_id = ?', member);
    await a.page.click('#sign-out');
    await a.page.getByRole('heading', { name: 'Sign in to Postern' }).waitFor();
    asked.length = 0;
    await a.page.click('#sign-in');
    const second = await fingerprint(a.page);
    expect(second).to.not.equal(first);
    expect(await a.page.locator('#key-status').textContent()).to.include(
      'Your public key (what others encrypt mail to you with): published.',
    );
    expect(asked.filter((r) => r !== 'GET /api/v1/me/key-backup' && r !== 'PUT /api/v1/me/key-backup')).to.deep.equal([
      'POST /api/v1/auth/sign-in/options',
      'POST /api/v1/auth/sign-in',
      'PUT /api/v1/me/key',
      'POST /api/v1/me/reauth/options',
      'PUT /api/v1/me/key',
      'GET /api/v1/auth/passkeys',
      'GET /api/v1/auth/sessions',
      // Devices asking for the key, listed while it is unlocked here (docs/app.md, "A new device").
      'GET /api/v1/me/key-handovers',
    ]);
    const events = await keyEvents();
    expect(events.map((d) => [d.confirmedBy, d.fingerprint?.toLowerCase(), d.previousFingerprint?.toLowerCase()])).to.deep.equal([
      ['fresh-session', first, undefined],
      ['passkey', second, first],
    ]);

    // "Add a passkey": the passkey it has confirms first. One virtual authenticator cannot both
    // hold the passkey that confirms and make one the options exclude, so once the confirmation
    // is done (the creation options are asked for next) the old credential leaves it.
    const [enrolledKey] = (await a.cdp.send('WebAuthn.getCredentials', { authenticatorId: a.authenticatorId })).credentials;
    await a.page.route('**/api/v1/auth/passkeys/options', async (route) => {
      await a.cdp.send('WebAuthn.removeCredential', { authenticatorId: a.authenticatorId, credentialId: enrolledKey!.credentialId });
      await route.continue();
    });
    asked.length = 0;
    await a.page.click('#add-passkey');
    await a.page.locator('#passkeys li').nth(1).waitFor({ timeout: 60_000 });
    expect(asked.slice(0, 3)).to.deep.equal([
      'POST /api/v1/me/reauth/options',
      'POST /api/v1/auth/passkeys/options',
      'POST /api/v1/auth/passkeys',
    ]);
    const { events: added } = await s.postern.events.backfill(
      {
        projectId: p.projectId,
        inboxes: null,
        allowedInboxes: [],
        visibilities: ['project'],
        types: ['access.passkey.added'],
        redactActor: false,
      },
      0,
      1000,
    );
    const mine = added.map((e) => (JSON.parse(e.json) as { data: Record<string, string> }).data).filter((d) => d.memberId === member);
    expect(mine.map((d) => d.via)).to.deep.equal(['invite', 'session']);
    expect(mine[1]!.confirmedWith).to.equal(mine[0]!.passkeyId);
  });

  it('passphrase: without PRF the member chooses a passphrase; another device unlocks with it', async () => {
    const member = await p.member();
    const inbox = await p.inbox({ memberId: member });
    const { link } = await s.postern.passkeys.invite(member);
    // A phone-width screen.
    const a = await device({ prf: false, width: 375 });
    await a.page.goto(link);
    await a.page.click('#enroll');
    await a.page.getByRole('heading', { name: 'Protect your key' }).waitFor({ timeout: 60_000 });
    await screenshot(a.page, '5-choose-passphrase');
    await a.page.fill('#passphrase', PASSPHRASE);
    await a.page.click('#passphrase-submit');
    const first = await fingerprint(a.page);
    expect(await a.page.locator('#key-status').textContent())
      .to.include('It unlocks with your passphrase.')
      .and.include('Your public key (what others encrypt mail to you with): published.');
    await a.page.locator(`#inboxes li[data-inbox="${inbox.id}"]`).waitFor();
    expect(await inPage(a.page, 'document.documentElement.scrollWidth <= window.innerWidth')).to.equal(true);
    await screenshot(a.page, '6-home-phone');

    const b = await device({ prf: false, width: 375 });
    await copyPasskeys(a, b);
    await b.page.goto(`${origin}/app/`);
    await b.page.click('#sign-in');
    await b.page.getByRole('heading', { name: 'Unlock your key' }).waitFor({ timeout: 60_000 });
    await b.page.fill('#passphrase', 'not the passphrase');
    await b.page.click('#passphrase-submit');
    await b.page.getByText('That passphrase does not unlock your key.').waitFor({ timeout: 60_000 });
    await screenshot(b.page, '7-wrong-passphrase');
    await b.page.fill('#passphrase', PASSPHRASE);
    await b.page.click('#passphrase-submit');
    expect(await fingerprint(b.page)).to.equal(first);
  });
});
