// The web app's accessibility (docs/app.md, "Accessibility, dark mode and HTML mail") in real
// Chromium: axe-core's WCAG 2.2 AA rules on every screen the app has, light and dark
// (prefers-color-scheme), desktop and 360 px wide, with 0 violations; and the HTML mail frame
// sized to its content, on a light surface in dark mode, with its remote image not fetched until
// "Show images". axe comes from node_modules (never the network) and is evaluated through
// DevTools, which the app's CSP does not govern; the CSP watch still sees no violation.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { expect } from 'chai';
import type { Browser, Page } from 'playwright-core';
import { newProject, type TestInbox, type TestProject, type TestServer } from '../helpers/harness.ts';
import { go, inPage, launchChromium, newDevice, screenshot, startAppServer, type Device } from '../helpers/browser.ts';
import { mailApp, rfc822, until } from '../helpers/mail-fixtures.ts';
import { axeViolations } from '../helpers/axe.ts';

const PASSPHRASE = 'correct horse battery staple';
/** A 1×1 PNG. */
const PNG = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==', 'base64');

/** An HTML message: many paragraphs (taller than a screen), its own colours, one remote image. */
function htmlMessage(subject: string, imageUrl: string, body?: string): string {
  const paragraphs = Array.from(
    { length: 40 },
    (_, i) => `<p>Paragraph ${i + 1} of the newsletter, long enough to wrap on a phone.</p>`,
  ).join('');
  // Its own dark-mode rule would make the text white: on the frame's light surface it must not apply.
  const html = `<html><head><style>@media (prefers-color-scheme: dark) { body { color: #fff } }</style></head><body>${body ?? `<h1 style="color: #1a4d8f">Newsletter</h1>${paragraphs}<p><img alt="remote" width="40" height="40" src="${imageUrl}"></p><p id="last">The end.</p>`}</body></html>`;
  return [
    'From: Ada Sender <ada@example.org>',
    'To: someone@postern.test',
    `Subject: ${subject}`,
    `Date: ${new Date().toUTCString()}`,
    `Message-ID: <a11y.${Date.now()}@example.org>`,
    'MIME-Version: 1.0',
    'Content-Type: text/html; charset=utf-8',
    '',
    html,
    '',
  ].join('\r\n');
}

describe('web app: accessibility, dark mode, the HTML frame (Chromium, axe-core)', function () {
  this.timeout(180_000);
  let s: TestServer;
  let p: TestProject;
  let browser: Browser;
  let origin: string;
  let a: Device;
  let inbox: TestInbox;
  let images: Server;
  let imageUrl: string;
  let imageRequests = 0;
  const subject = 'Newsletter for the accessibility check';
  const screenful = 'A page designed for one screen';
  const devices: Device[] = [];

  before(async () => {
    ({ s, origin } = await startAppServer());
    p = await newProject(s);
    images = createServer((req, res) => {
      if (req.url?.startsWith('/pixel.png')) imageRequests++;
      res.writeHead(200, { 'content-type': 'image/png', 'cache-control': 'no-store' });
      res.end(PNG);
    });
    await new Promise<void>((resolve) => images.listen(0, '127.0.0.1', resolve));
    imageUrl = `http://127.0.0.1:${(images.address() as AddressInfo).port}/pixel.png`;
    inbox = await p.inbox();
    const app = await mailApp(inbox);
    try {
      await app.mailboxCreate('Projects');
      await app.mailboxCreate('Projects/2026');
      await app.append('INBOX', rfc822({ from: 'Bob Builder <bob@example.net>', subject: 'Plans for Monday' }), ['\\Seen', '\\Flagged']);
      await app.append('INBOX', rfc822({ from: 'Carol <carol@example.com>', subject: 'Lunch?' }), ['\\Answered', '\\Seen']);
      await app.append('INBOX', htmlMessage(subject, imageUrl), []);
      await app.append('INBOX', htmlMessage(screenful, '', '<div style="min-height: 100vh"><p id="last">One screen.</p></div>'), [
        '\\Seen',
      ]);
    } finally {
      await app.logout();
    }
    browser = await launchChromium();
  });
  after(async () => {
    await browser?.close();
    await new Promise((resolve) => images?.close(resolve));
    await s?.close();
  });
  afterEach(() => {
    for (const d of devices) {
      expect(
        d.problems.filter((m) => !/Loading the image 'http:\/\/127\.0\.0\.1:\d+\/pixel\.png' violates/.test(m)),
        'CSP violations or page errors',
      ).to.deep.equal([]);
      d.problems.length = 0;
    }
  });

  const device = async (options: { prf: boolean; width?: number }) => {
    const d = await newDevice(browser, options);
    devices.push(d);
    return d;
  };

  /**
   * axe's WCAG 2.2 AA rules on the page as it is, light and dark, desktop and 360 px wide; the
   * violations of each, described for the failure message. The message's own HTML (a sandboxed
   * frame without scripts, the sender's content) is not the app's to answer for: iframes: false.
   */
  const audit = (page: Page, screen: string): Promise<string[]> =>
    axeViolations(page, screen, {
      widths: [1024, 360],
      restoreWidth: 1024,
      after: (width, colorScheme) =>
        screenshot(page, width === 360 ? `a11y-${screen}-phone-${colorScheme}` : `a11y-${screen}-${colorScheme}`),
    });

  /**
   * Tabs through the first stops of the screen, light and dark, and names those whose focus is not
   * drawn (axe does not check it; WCAG 2.4.7): an outline of at least 2 px.
   */
  const unseenFocus = async (page: Page, screen: string, stops = 12): Promise<string[]> => {
    const found: string[] = [];
    for (const colorScheme of ['light', 'dark'] as const) {
      await page.emulateMedia({ colorScheme });
      await inPage(page, `document.querySelector('h1').focus()`);
      for (let i = 0; i < stops; i++) {
        await page.keyboard.press('Tab');
        const focus = await inPage<{ what: string; outline: string; width: number }>(
          page,
          `(() => { const el = document.activeElement; const st = getComputedStyle(el); return { what: el.id || el.tagName + ' ' + (el.textContent || '').trim().slice(0, 30), outline: st.outlineStyle, width: parseFloat(st.outlineWidth) }; })()`,
        );
        // The body: Tab went past the last stop, out of the page.
        if (focus.what.startsWith('BODY')) continue;
        if (focus.outline === 'none' || focus.width < 2) found.push(`${screen} (${colorScheme}): focus not drawn on ${focus.what}`);
      }
    }
    await page.emulateMedia({ colorScheme: 'light' });
    return found;
  };

  /** The message frame's height, what it holds (its root's box) and what it would scroll to. */
  const frameSizes = (page: Page) =>
    page.locator('#message-html').evaluate((el) => {
      const f = el as unknown as {
        clientHeight: number;
        contentDocument: { documentElement: { scrollHeight: number; getBoundingClientRect(): { height: number } } };
      };
      const root = f.contentDocument.documentElement;
      return { frame: f.clientHeight, content: Math.ceil(root.getBoundingClientRect().height), scroll: root.scrollHeight };
    });

  it('every screen, light and dark, desktop and 360 px: 0 axe violations (WCAG 2.2 AA), focus drawn', async () => {
    const found: string[] = [];
    // Signed out: the sign-in screen.
    const fresh = await device({ prf: false });
    await fresh.page.goto(`${origin}/app/`);
    await fresh.page.locator('#sign-in').waitFor({ timeout: 60_000 });
    found.push(...(await audit(fresh.page, 'sign-in')));

    // Enrollment, and the passphrase prompt a passkey without PRF leads to.
    a = await device({ prf: false });
    const { link } = await s.postern.passkeys.invite(p.memberId);
    await a.page.goto(link);
    await a.page.locator('#enroll').waitFor({ timeout: 60_000 });
    found.push(...(await audit(a.page, 'enroll')));
    await a.page.click('#enroll');
    await a.page.getByRole('heading', { name: 'Protect your key' }).waitFor({ timeout: 60_000 });
    found.push(...(await audit(a.page, 'passphrase')));
    await a.page.fill('#passphrase', PASSPHRASE);
    await a.page.click('#passphrase-submit');
    await a.page.locator('#key-fingerprint').waitFor({ timeout: 90_000 });
    found.push(...(await audit(a.page, 'home')));
    found.push(...(await unseenFocus(a.page, 'home')));

    const page = a.page;
    await go(page, `#/inbox/${inbox.id}`);
    await page.locator('#messages li', { hasText: subject }).waitFor({ timeout: 30_000 });
    await page.locator('#live-status[data-live]').waitFor({ timeout: 30_000 });
    found.push(...(await audit(page, 'inbox')));
    found.push(...(await unseenFocus(page, 'inbox', 20)));

    await page.locator('#messages li', { hasText: subject }).locator('a').click();
    await page.locator('#message-subject', { hasText: subject }).waitFor({ timeout: 60_000 });
    await page.locator('#message-html[data-styled]').waitFor();
    found.push(...(await audit(page, 'message')));

    await go(page, `#/compose/${inbox.id}`);
    await page.locator('#compose-send').waitFor({ timeout: 30_000 });
    found.push(...(await audit(page, 'compose')));
    found.push(...(await unseenFocus(page, 'compose')));

    await go(page, `#/inbox/${inbox.id}/search/${encodeURIComponent('from:bob')}`);
    await page.locator('#search-status[data-found]').waitFor({ timeout: 30_000 });
    found.push(...(await audit(page, 'search')));

    await go(page, '#/events');
    await page.locator('#events-refresh').waitFor({ timeout: 30_000 });
    found.push(...(await audit(page, 'activity')));

    expect(found, found.join('\n')).to.deep.equal([]);
  });

  it('the HTML frame: its content’s height, a light surface in dark mode, no remote image until asked', async () => {
    imageRequests = 0;
    const page = a.page;
    await page.emulateMedia({ colorScheme: 'dark' });
    await go(page, `#/inbox/${inbox.id}`);
    await page.locator('#messages li', { hasText: subject }).locator('a').click();
    await page.locator('#message-subject', { hasText: subject }).waitFor({ timeout: 60_000 });
    const frame = page.frameLocator('#message-html');
    await frame.locator('#last').waitFor();
    await page.locator('#message-html[data-styled][data-sized]').waitFor();

    // Sized to its content: the whole message shows without a scrollbar of its own, and the frame
    // is not taller than what it holds.
    const fitted = async () => {
      await page.locator('#message-html[data-styled][data-sized]').waitFor();
      const sizes = await frameSizes(page);
      expect(sizes.frame, JSON.stringify(sizes)).to.equal(sizes.content).and.to.equal(sizes.scroll);
      return sizes.frame;
    };
    expect(await fitted()).to.be.greaterThan(800);

    // Dark mode: the app is dark, the message keeps its sender's colours on a light surface.
    const colours = await page.locator('#message-html').evaluate((el) => {
      const g = globalThis as unknown as { getComputedStyle(e: unknown): { backgroundColor: string; color: string } };
      const f = el as unknown as { contentDocument: { body: unknown; querySelector(s: string): unknown } };
      return {
        app: g.getComputedStyle((el as unknown as { ownerDocument: { body: unknown } }).ownerDocument.body).backgroundColor,
        frame: g.getComputedStyle(el).backgroundColor,
        text: g.getComputedStyle(f.contentDocument.body).color,
        heading: g.getComputedStyle(f.contentDocument.querySelector('h1')).color,
      };
    });
    expect(colours.frame).to.equal('rgb(255, 255, 255)');
    expect(colours.app).to.not.equal('rgb(255, 255, 255)');
    expect(colours.text).to.equal('rgb(0, 0, 0)');
    expect(colours.heading).to.equal('rgb(26, 77, 143)');
    await screenshot(page, 'a11y-html-frame-dark');

    // Positive signal first: the frame loaded, its styles applied and it was measured after its
    // layout, so an image it would fetch has had its chance; then none was fetched.
    expect(imageRequests, 'remote image requests before "Show images"').to.equal(0);
    await page.click('#show-images');
    await until(
      'the remote image rendered',
      async () =>
        (await frame.locator('img[alt="remote"]').evaluate((img) => (img as unknown as { naturalWidth: number }).naturalWidth)) > 0,
    );
    expect(imageRequests, 'remote image requests after "Show images"').to.equal(1);
    // Rendered again with images, and measured again.
    const desktop = await fitted();
    // Narrower: the text wraps into more lines and the frame follows.
    await page.setViewportSize({ width: 360, height: 800 });
    await until('the frame taller at 360 px', async () => {
      const sizes = await frameSizes(page);
      return sizes.frame > desktop && sizes.frame === sizes.content;
    });
    expect(await inPage(page, 'document.documentElement.scrollWidth <= window.innerWidth')).to.equal(true);
    await page.setViewportSize({ width: 1024, height: 800 });
    await page.emulateMedia({ colorScheme: 'light' });
  });

  it('the HTML frame: content that grows with its frame (min-height: 100vh) gets one screen, not an endless frame', async () => {
    const page = a.page;
    await go(page, `#/inbox/${inbox.id}`);
    await page.locator('#messages li', { hasText: screenful }).locator('a').click();
    await page.locator('#message-subject', { hasText: screenful }).waitFor({ timeout: 60_000 });
    await page.frameLocator('#message-html').locator('#last').waitFor();
    await page.locator('#message-html[data-styled][data-sized]').waitFor();
    // Positive signal: a few frames rendered, so the observer has had its rounds.
    await inPage(page, 'new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(() => requestAnimationFrame(r))))');
    const height = await page.locator('#message-html').evaluate((el) => (el as unknown as { offsetHeight: number }).offsetHeight);
    expect(height).to.be.within(500, 800);
  });
});
