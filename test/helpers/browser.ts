// Real Chromium (Debian's) driven by playwright-core, with DevTools' WebAuthn virtual
// authenticators standing in for passkeys. Nothing here downloads a browser.
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { chromium, type Browser, type BrowserContext, type CDPSession, type Page } from 'playwright-core';
import { ROOT } from '../../lib/paths.ts';
import { ensureChromium } from '../../scripts/chromium.ts';
import { buildApp } from '../../scripts/build-app.ts';
import { startPostern, type TestServer } from './harness.ts';
import { freePort } from './processes.ts';

// playwright-core has no browser download of its own; this keeps any other part from trying one.
process.env.PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD = '1';

/** Screenshots of the main screens (git-ignored). */
export const ARTIFACTS = join(ROOT, 'test-artifacts', 'app');

export async function launchChromium(): Promise<Browser> {
  const executablePath = await ensureChromium();
  // Playwright gives every launch a fresh temporary --user-data-dir of its own (and refuses one in args).
  return chromium.launch({
    executablePath,
    headless: true,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
}

export interface Device {
  context: BrowserContext;
  page: Page;
  cdp: CDPSession;
  authenticatorId: string;
  /** Content-Security-Policy violations and page errors seen so far. */
  problems: string[];
}

/** An expression evaluated in the page, its value typed as the caller expects. */
export const inPage = <T>(page: Page, expression: string) => page.evaluate<T>(expression);

/** A fresh browser context (its own storage: another "device") with a virtual passkey authenticator. */
export async function newDevice(browser: Browser, options: { prf: boolean; width?: number }): Promise<Device> {
  const context = await browser.newContext({ viewport: { width: options.width ?? 1024, height: 800 } });
  const page = await context.newPage();
  const problems: string[] = [];
  page.on('console', (m) => {
    if (m.type() === 'error' && /Content Security Policy|Refused to/i.test(m.text())) problems.push(m.text());
  });
  page.on('pageerror', (e) => problems.push(e.message));
  const cdp = await context.newCDPSession(page);
  await cdp.send('WebAuthn.enable');
  const { authenticatorId } = await cdp.send('WebAuthn.addVirtualAuthenticator', {
    options: {
      protocol: 'ctap2',
      transport: 'internal',
      hasResidentKey: true,
      hasUserVerification: true,
      isUserVerified: true,
      hasPrf: options.prf,
      automaticPresenceSimulation: true,
    },
  });
  return { context, page, cdp, authenticatorId, problems };
}

/** What a synced passkey does: the credentials of one device's authenticator, on another's. */
export async function copyPasskeys(from: Device, to: Device): Promise<number> {
  const { credentials } = await from.cdp.send('WebAuthn.getCredentials', { authenticatorId: from.authenticatorId });
  for (const credential of credentials) await to.cdp.send('WebAuthn.addCredential', { authenticatorId: to.authenticatorId, credential });
  return credentials.length;
}

export async function screenshot(page: Page, name: string): Promise<void> {
  mkdirSync(ARTIFACTS, { recursive: true });
  await page.screenshot({ path: join(ARTIFACTS, `${name}.png`), fullPage: true });
}

/** The unlocked key's fingerprint once the home screen shows it, or the error the page shows instead. */
export async function keyFingerprint(page: Page): Promise<string> {
  await page.locator('#key-fingerprint, #error').first().waitFor({ timeout: 90_000 });
  if (await page.locator('#error').count()) throw new Error(`the page says: ${await page.locator('main').innerText()}`);
  return (await page.locator('#key-fingerprint').textContent())!;
}

/**
 * Enrolls from an invite link on a device whose passkey has no PRF, choosing `passphrase`, or
 * (with PRF) unlocking through the passkey; resolves with the key's fingerprint.
 */
export async function enrollMember(device: Device, link: string, passphrase: string): Promise<string> {
  await device.page.goto(link);
  // The first page of a new Chromium can take long on a loaded machine (five test lanes beside
  // it); an error the page shows instead is reported as such.
  await device.page.locator('#enroll, #error').first().waitFor({ timeout: 90_000 });
  if (await device.page.locator('#error').count()) throw new Error(`the page says: ${await device.page.locator('main').innerText()}`);
  await device.page.click('#enroll');
  const prompt = device.page.getByRole('heading', { name: 'Protect your key' });
  await Promise.race([prompt.waitFor({ timeout: 60_000 }), device.page.locator('#key-fingerprint').waitFor({ timeout: 60_000 })]);
  if (await prompt.count()) {
    await device.page.fill('#passphrase', passphrase);
    await device.page.click('#passphrase-submit');
  }
  return keyFingerprint(device.page);
}

/** Signs in at `origin` on a device holding a copy of the passkey, unlocking with the passphrase. */
export async function signInWithPassphrase(device: Device, origin: string, passphrase: string): Promise<string> {
  await device.page.goto(`${origin}/app/`);
  await device.page.click('#sign-in');
  await device.page.getByRole('heading', { name: 'Unlock your key' }).waitFor({ timeout: 60_000 });
  await device.page.fill('#passphrase', passphrase);
  await device.page.click('#passphrase-submit');
  return keyFingerprint(device.page);
}

/** Moves the app to a screen without reloading it (a reload would lock the key again). */
export async function go(page: Page, hash: string): Promise<void> {
  await page.evaluate(`location.hash = ${JSON.stringify(hash)}`);
}

/**
 * Postern serving the freshly built app at http://localhost:<free port>, its POSTERN_APP_ORIGIN:
 * passkeys need a host name, not an IP, and Chromium resolves localhost itself.
 */
export async function startAppServer(
  extra: Record<string, string> = {},
  options: { logFile?: string } = {},
): Promise<{ s: TestServer; origin: string }> {
  await buildApp();
  const port = await freePort();
  const origin = `http://localhost:${port}`;
  const s = await startPostern({ POSTERN_PORT: String(port), POSTERN_APP_ORIGIN: origin, ...extra }, options);
  return { s, origin };
}
