// The web app under attack (docs/app.md, "Security review"): the server's headers on every /app response, a
// hostile HTML message that tries every way to load something remote, navigate, run script or
// spoof a file name, an HTML attachment opened in a tab, and a session that ends while decrypted
// mail is on screen. Remote loads are counted by a local HTTP server standing in for the sender's.
import { randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { expect } from 'chai';
import type { Browser, Page } from 'playwright-core';
import { APP_CSP } from '../../lib/http/routes/web-app.ts';
import { call, expectError, newProject, type TestInbox, type TestProject, type TestServer } from '../helpers/harness.ts';
import { enrollMember, inPage, launchChromium, newDevice, startAppServer, type Device } from '../helpers/browser.ts';
import { ingressInbox } from '../helpers/ingress-helpers.ts';
import { mailApp, until } from '../helpers/mail-fixtures.ts';

/** A 1×1 PNG. */
const PNG = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==', 'base64');

/** Every way a message's HTML could reach the sender's server (R), navigate, or run. */
function hostileHtml(R: string): string {
  return `<html><head>
<meta http-equiv="refresh" content="0;url=${R}/refresh">
<base href="${R}/base/">
<link rel="stylesheet" href="${R}/link-css"><link rel="prefetch" href="${R}/prefetch"><link rel="preload" as="image" href="${R}/preload">
<style>@import url("${R}/import"); @font-face { font-family: hostile; src: url("${R}/font"); } body { font-family: hostile } .bg { background-image: url("${R}/img/css-bg") } .bg2 { background-image: url("${R}/img/sheet-bg") }</style>
</head><body>
<p class="bg2">Sheet background.</p>
<p class="bg" style="background: url('${R}/img/inline-bg')">Hostile message.</p>
<img alt="logo" src="cid:logo@hostile.test">
<img alt="remote" src="${R}/img/plain">
<img alt="referrer" src="${R}/img/referrer" referrerpolicy="unsafe-url">
<img alt="srcset" srcset="${R}/img/srcset 2x">
<picture><source srcset="${R}/img/picture"><img alt="picture"></picture>
<video poster="${R}/img/poster" src="${R}/media-video"></video><audio src="${R}/media-audio" autoplay></audio>
<object data="${R}/object"></object><embed src="${R}/embed">
<iframe src="${R}/iframe"></iframe><iframe srcdoc="<img src='${R}/srcdoc'>"></iframe>
<svg width="10" height="10"><image href="${R}/img/svg-image"/><script>fetch('${R}/svg-script')</script>
  <a id="svg-link"><animate attributeName="href" values="javascript:fetch('${R}/svg-js')"/><text y="10">svg</text></a></svg>
<form action="${R}/form" method="post"><input name="q" value="1"><button id="submit">Send</button></form>
<a id="top" href="https://example.org/top" target="_top" ping="${R}/ping">top</a>
<a id="js" href="javascript:fetch('${R}/js')">js</a>
<a id="data" href="data:text/html,&lt;script&gt;fetch('${R}/data')&lt;/script&gt;">data</a>
<a id="relative" href="../api/v1/inboxes">relative</a>
<div id="shadow-host"><template shadowrootmode="open"><p>shadow</p><iframe src="${R}/shadow-iframe"></iframe><link rel="stylesheet" href="${R}/shadow-css"><a id="shadow-top" href="https://example.org/" target="_top">shadow link</a></template></div>
<table background="${R}/img/table-bg"><tr><td>cell</td></tr></table>
<div id="overlay" style="position: fixed; inset: 0; z-index: 2147483647; background: rgb(255, 0, 0)">overlay</div>
</body></html>`;
}

/** The raw message: HTML with an inline image, an HTML attachment, a file name with a bidi override. */
function hostileMessage(to: string, subject: string, R: string): string {
  const b64 = (data: Buffer | string) => Buffer.from(data).toString('base64').replace(/.{76}/g, '$&\r\n');
  const page = `<!doctype html><h1 id="attached">Sign in again</h1><script>fetch('${R}/attachment-script')</script><img src="${R}/attachment-img">`;
  return [
    'From: Mallory <mallory@example.org>',
    `To: ${to}`,
    `Subject: ${subject}`,
    'MIME-Version: 1.0',
    'Content-Type: multipart/mixed; boundary="outer"',
    '',
    '--outer',
    'Content-Type: multipart/related; boundary="rel"',
    '',
    '--rel',
    'Content-Type: text/html; charset=utf-8',
    'Content-Transfer-Encoding: base64',
    '',
    b64(hostileHtml(R)),
    '--rel',
    'Content-Type: image/png',
    'Content-ID: <logo@hostile.test>',
    'Content-Disposition: inline; filename="logo.png"',
    'Content-Transfer-Encoding: base64',
    '',
    b64(PNG),
    '--rel--',
    '--outer',
    'Content-Type: text/html; charset=utf-8',
    'Content-Disposition: attachment; filename="page.html"',
    'Content-Transfer-Encoding: base64',
    '',
    b64(page),
    '--outer',
    'Content-Type: application/octet-stream',
    "Content-Disposition: attachment; filename*=utf-8''invoice%E2%80%AEfdp.exe",
    'Content-Transfer-Encoding: base64',
    '',
    b64('MZ not really'),
    '--outer--',
    '',
  ].join('\r\n');
}

describe('web app security (Chromium, hostile mail)', function () {
  this.timeout(180_000);
  let s: TestServer;
  let p: TestProject;
  let browser: Browser;
  let origin: string;
  let sender: Server;
  let R: string;
  /** Paths the "sender's" server was asked for. */
  const hits: string[] = [];
  /** Referer headers the "sender's" server was sent: the app's address is none of its business. */
  const referers: string[] = [];
  let inbox: TestInbox;
  let a: Device;
  const subject = `Hostile ${randomBytes(3).toString('hex')}`;
  const malformed = `Malformed cid ${randomBytes(3).toString('hex')}`;

  before(async () => {
    ({ s, origin } = await startAppServer());
    p = await newProject(s);
    sender = createServer((req, res) => {
      hits.push(req.url ?? '');
      if (req.headers.referer) referers.push(`${req.url} ${req.headers.referer}`);
      res.writeHead(200, { 'content-type': req.url?.startsWith('/img/') ? 'image/png' : 'text/html', 'cache-control': 'no-store' });
      res.end(req.url?.startsWith('/img/') ? PNG : '<p>remote</p>');
    });
    await new Promise<void>((resolve) => sender.listen(0, '127.0.0.1', resolve));
    R = `http://127.0.0.1:${(sender.address() as AddressInfo).port}`;
    inbox = await ingressInbox(s, p.projectId, p.memberId, 'compatible');
    const app = await mailApp(inbox);
    try {
      await app.append('INBOX', hostileMessage(inbox.address, subject, R));
      await app.append(
        'INBOX',
        [
          'From: mallory@example.org',
          `To: ${inbox.address}`,
          `Subject: ${malformed}`,
          'MIME-Version: 1.0',
          'Content-Type: text/html; charset=utf-8',
          '',
          '<p>Still readable.</p><img alt="malformed" src="cid:%E0%A4%A">',
          '',
        ].join('\r\n'),
      );
    } finally {
      await app.logout();
    }
    browser = await launchChromium();
    // With PRF the key unlocks through the passkey: no scrypt in this file.
    a = await newDevice(browser, { prf: true });
    await enrollMember(a, (await s.postern.passkeys.invite(p.memberId)).link, 'unused passphrase');
  });
  after(async () => {
    await browser?.close();
    await new Promise((resolve) => sender?.close(resolve));
    await s?.close();
  });

  it('every /app response carries the CSP, anti-framing, nosniff and a caching rule', async () => {
    for (const path of ['/app/', '/app', '/app/main.js', '/app/style.css', '/app/missing.js', '/app/a/b', '/app/..%2Fpackage.json']) {
      const res = await fetch(`${origin}${path}`, { redirect: 'manual' });
      expect(res.status, path).to.be.oneOf([200, 302, 404]);
      expect(res.headers.get('content-security-policy'), path).to.equal(APP_CSP);
      expect(res.headers.get('x-frame-options'), path).to.equal('DENY');
      expect(res.headers.get('x-content-type-options'), path).to.equal('nosniff');
      expect(res.headers.get('referrer-policy'), path).to.equal('no-referrer');
      expect(res.headers.get('cache-control'), path).to.be.oneOf(['no-cache', 'no-store']);
      await res.arrayBuffer();
    }
    // no-cache revalidates: an unchanged file is a 304, still with the headers. (A browser's
    // revalidation says max-age=0; fetch() alone would say no-cache, which forbids a 304.)
    const first = await fetch(`${origin}/app/main.js`);
    await first.arrayBuffer();
    const again = await fetch(`${origin}/app/main.js`, {
      headers: { 'if-none-match': first.headers.get('etag')!, 'cache-control': 'max-age=0' },
    });
    expect(again.status).to.equal(304);
    expect(again.headers.get('content-security-policy')).to.equal(APP_CSP);
    expect(APP_CSP).to.include("frame-ancestors 'none'").and.include("base-uri 'none'").and.include("form-action 'none'");
  });

  it('a mangled enrollment link still shows the enrollment page', async () => {
    const d = await newDevice(browser, { prf: true });
    try {
      await d.page.goto(`${origin}/app/#enroll=%E0%A4%A`);
      await d.page.getByRole('heading', { name: 'Set up your passkey' }).waitFor({ timeout: 30_000 });
      expect(d.problems).to.deep.equal([]);
    } finally {
      await d.context.close();
    }
  });

  /** Opens the hostile message in the app; resolves once its frame has loaded and been styled. */
  const openHostile = async (page: Page, wanted = subject) => {
    await page.goto(`${origin}/app/#/inbox/${inbox.id}`);
    const item = page.locator('#messages li', { hasText: wanted });
    await item.waitFor({ timeout: 30_000 });
    await item.locator('a').click();
    await page.locator('#message-subject', { hasText: wanted }).waitFor({ timeout: 60_000 });
    await page.locator('#message-html[data-styled]').waitFor();
  };

  it('a malformed cid: URL leaves the message readable', async () => {
    await openHostile(a.page, malformed);
    await a.page.frameLocator('#message-html').locator('p', { hasText: 'Still readable.' }).waitFor();
    expect(await a.page.locator('#error').count()).to.equal(0);
    a.problems.length = 0;
  });

  it('hostile HTML: nothing remote before "Show images", only images after; no navigation, script, overlay', async () => {
    const page = a.page;
    hits.length = 0;
    await openHostile(page);
    const frame = page.frameLocator('#message-html');
    // Positive signals first: the frame's load event has fired (data-styled: every load it was
    // going to make has been made or refused) and its own cid: image has decoded.
    await until(
      'the cid: image rendered',
      async () => (await frame.locator('img[alt="logo"]').evaluate((img) => (img as unknown as { naturalWidth: number }).naturalWidth)) > 0,
    );
    expect(await frame.locator('p.bg').textContent()).to.equal('Hostile message.');
    expect(hits, 'requests to the sender before "Show images"').to.deep.equal([]);

    // Nothing in it can navigate, submit or run: links open in a new tab or not at all.
    expect(await page.locator('#message-html').getAttribute('sandbox')).to.not.include('allow-scripts');
    expect(await frame.locator('meta[http-equiv="refresh" i], base[href], form, iframe, object, embed, link, script').count()).to.equal(0);
    expect(await frame.locator('#top').getAttribute('target')).to.equal('_blank');
    expect(await frame.locator('#top').getAttribute('ping')).to.equal(null);
    // A declarative shadow root (which DOMParser leaves as an inert template but the frame's own
    // parser would attach) would hide its contents from the sanitising above.
    expect(await frame.locator('#shadow-host').evaluate((el) => (el as unknown as { shadowRoot: unknown }).shadowRoot === null)).to.equal(
      true,
    );
    for (const id of ['js', 'data', 'relative']) expect(await frame.locator(`#${id}`).getAttribute('href'), id).to.equal(null);
    // The overlay covers the frame (its own business): events go to the elements directly.
    await frame.locator('#submit').dispatchEvent('click');
    await frame.locator('#svg-link').dispatchEvent('click');
    // The message's fixed overlay is confined to its frame: the app's controls stay on top.
    const toggle = await page.locator('#toggle-flagged').boundingBox();
    expect(
      await inPage(page, `document.elementFromPoint(${toggle!.x + toggle!.width / 2}, ${toggle!.y + toggle!.height / 2})?.id`),
    ).to.equal('toggle-flagged');

    await page.click('#show-images');
    await page.locator('#message-html[data-styled]').waitFor();
    await until(
      'the remote image rendered',
      async () =>
        (await frame.locator('img[alt="remote"]').evaluate((img) => (img as unknown as { naturalWidth: number }).naturalWidth)) > 0,
    );
    expect(hits).to.include('/img/plain');
    await until(
      'the referrer-policy image rendered',
      async () =>
        (await frame.locator('img[alt="referrer"]').evaluate((img) => (img as unknown as { naturalWidth: number }).naturalWidth)) > 0,
    );
    // The style attribute's background beats the class rule's, as an inline style does.
    await until("the inline style's background", async () => hits.includes('/img/inline-bg'));
    expect(hits).to.not.include('/img/css-bg');
    expect(referers, 'Referer headers sent to the sender').to.deep.equal([]);
    // Images only: no font, stylesheet, @import, media, frame, object, form or script, ever.
    expect(
      hits.filter((h) => !h.startsWith('/img/')),
      'non-image requests after "Show images"',
    ).to.deep.equal([]);
    // Still the app, on this message: nothing navigated the page or opened a tab.
    expect(page.url()).to.match(new RegExp(`^${origin}/app/#/inbox/${inbox.id}/message/msg_`));
    expect(a.context.pages()).to.have.length(1);
    // The page's problems: only CSP refusals of what the message asked for, never a page error.
    expect(
      a.problems.filter((m) => !/Content Security Policy|Refused to|Blocked script execution|Not allowed to/i.test(m)),
      'page errors',
    ).to.deep.equal([]);
    a.problems.length = 0;
  });

  it('attachments: safe names, and an HTML attachment opened in a tab downloads instead of running in the app', async () => {
    const page = a.page;
    hits.length = 0;
    await openHostile(page);
    const names = await page.locator('#attachments a').allTextContents();
    expect(names).to.have.length(2);
    for (const name of names) expect(name, 'no bidirectional controls').to.not.match(/[\u202a-\u202e\u2066-\u2069]/);
    const exe = page.locator('#attachments a', { hasText: 'invoice' });
    const [download] = await Promise.all([page.waitForEvent('download'), exe.click()]);
    expect(download.suggestedFilename()).to.equal('invoicefdp.exe');

    // Opened in a tab of its own (middle click, "open in new tab"): a blob: URL is this origin's.
    const href = (await page.locator('#attachments a', { hasText: 'page.html' }).getAttribute('href'))!;
    expect(href).to.match(/^blob:/);
    const tab = await a.context.newPage();
    const downloaded = tab.waitForEvent('download');
    await tab.goto(href).catch(() => undefined);
    expect((await downloaded).suggestedFilename()).to.not.equal('');
    expect(await tab.locator('#attached').count()).to.equal(0);
    await tab.close();
    expect(
      hits.filter((h) => h.startsWith('/attachment')),
      'the attachment ran or loaded',
    ).to.deep.equal([]);

    // Leaving the message revokes its decrypted attachments' URLs.
    await page.goto(`${origin}/app/#/inbox/${inbox.id}`);
    await page.locator('#messages li', { hasText: subject }).waitFor();
    expect(await inPage(page, `fetch(${JSON.stringify(href)}).then(() => 'readable', () => 'revoked')`)).to.equal('revoked');
    a.problems.length = 0;
  });

  // However the session ends, the tab finds out on its next request and drops what it decrypted.
  const sessionEnds: Array<{ how: string; end: (page: Page) => Promise<void> }> = [
    {
      how: 'that expires in this tab',
      // Its expiry passes (as it would with the tab left open past the session's lifetime).
      end: (page) =>
        inPage(
          page,
          `(() => { const s = JSON.parse(sessionStorage.getItem('postern.session')); s.expiresAt = new Date(Date.now() - 1000).toISOString(); sessionStorage.setItem('postern.session', JSON.stringify(s)); })()`,
        ),
    },
    {
      how: 'ended elsewhere',
      end: async (page) => {
        const { session } = JSON.parse(await inPage<string>(page, "sessionStorage.getItem('postern.session')")) as { session: string };
        // Ended from another device.
        expect((await call(`${s.app}/auth/sign-out`, { method: 'POST', session })).status).to.equal(204);
        await expectError(await call(`${s.app}/inboxes`, { session }), 401);
      },
    },
  ];
  for (const { how, end } of sessionEnds) {
    it(`a session ${how} clears the decrypted message and its attachments from this tab`, async () => {
      const page = a.page;
      await openHostile(page);
      const href = (await page.locator('#attachments a').first().getAttribute('href'))!;
      await end(page);
      await page.click('#toggle-flagged');
      await page.getByRole('heading', { name: 'Sign in to Postern' }).waitFor({ timeout: 30_000 });
      expect(await page.locator('#message-html, #message-body, #attachments').count()).to.equal(0);
      expect(await inPage(page, `fetch(${JSON.stringify(href)}).then(() => 'readable', () => 'revoked')`)).to.equal('revoked');
      expect(await inPage(page, 'sessionStorage.length')).to.equal(0);
      // Signing in again must unlock the key afresh (it was dropped), through the passkey's PRF;
      // it lands in the inbox used last, whose message opens again.
      await page.click('#sign-in');
      await page.locator('#messages li.message').first().waitFor({ timeout: 60_000 });
      await page.locator('#messages li.message > a').first().click();
      await page.locator('#message-subject').waitFor({ timeout: 60_000 });
      a.problems.length = 0;
    });
  }
});
