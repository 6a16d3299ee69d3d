// The web app's mail client in real Chromium (docs/app.md, "Reading mail"): a message that arrived through
// Postfix (text, HTML with a remote image, an inline cid: image, an attachment) read in a
// compatible and a zero-access inbox, decrypted in the browser; the remote image provably not
// fetched until "Show images"; the attachment saved byte for byte; a flag set in the app seen
// over IMAP; a mail app's APPEND appearing live; a second device reading the same message.
// Screenshots go to test-artifacts/app/ (git-ignored).
import { randomBytes } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { expect } from 'chai';
import nodemailer from 'nodemailer';
import type { Browser, Page } from 'playwright-core';
import { mailEnv, newProject, type TestInbox, type TestProject, type TestServer } from '../helpers/harness.ts';
import {
  copyPasskeys,
  enrollMember,
  inPage,
  launchChromium,
  newDevice,
  screenshot,
  signInWithPassphrase,
  startAppServer,
  type Device,
} from '../helpers/browser.ts';
import { ingressInbox, untilDelivered } from '../helpers/ingress-helpers.ts';
import { append, importMessages, mailApp, until } from '../helpers/mail-fixtures.ts';
import { labelIds, listLabel } from '../helpers/send-fixtures.ts';

const PASSPHRASE = 'correct horse battery staple';
/** A 1×1 PNG. */
const PNG = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==', 'base64');

describe('web app: reading mail (Chromium, virtual passkeys)', function () {
  // Key work and decryption run in the browser, on a shared two-core machine.
  this.timeout(180_000);
  let s: TestServer;
  let p: TestProject;
  let browser: Browser;
  let origin: string;
  let images: Server;
  let imageUrl: string;
  let imageRequests = 0;
  let token: string;
  let a: Device;
  let compatible: TestInbox;
  let sealed: TestInbox;
  const attachment = randomBytes(3000);
  const subject = `Quarterly report ${randomBytes(3).toString('hex')}`;
  const devices: Device[] = [];

  const device = async (options: { prf: boolean; width?: number }) => {
    const d = await newDevice(browser, options);
    devices.push(d);
    return d;
  };
  // Evaluated in the page (as text: this file is compiled without the DOM's types).

  before(async () => {
    // The ingress seals what Postfix delivers to the zero-access inbox.
    // Streams end every few seconds, so the app's reconnecting is exercised too.
    ({ s, origin } = await startAppServer({ POSTERN_LMTP_PORT: String(mailEnv().ingress.port), POSTERN_STREAM_MAX_MS: '4000' }));
    p = await newProject(s);
    token = await p.token(['messages:read']);
    images = createServer((req, res) => {
      if (req.url?.startsWith('/pixel.png')) imageRequests++;
      res.writeHead(200, { 'content-type': 'image/png', 'cache-control': 'no-store' });
      res.end(PNG);
    });
    await new Promise<void>((resolve) => images.listen(0, '127.0.0.1', resolve));
    imageUrl = `http://127.0.0.1:${(images.address() as AddressInfo).port}/pixel.png`;
    compatible = await ingressInbox(s, p.projectId, p.memberId, 'compatible');
    sealed = await ingressInbox(s, p.projectId, p.memberId, 'zero-access');
    browser = await launchChromium();
    const { link } = await s.postern.passkeys.invite(p.memberId);
    a = await device({ prf: false });
    await enrollMember(a, link, PASSPHRASE);

    // One message, through Postfix, to both inboxes.
    const env = mailEnv();
    const transport = nodemailer.createTransport({ host: env.smtp.host, port: env.smtp.port, secure: false, ignoreTLS: true });
    try {
      await transport.sendMail({
        from: 'Ada Sender <ada@example.org>',
        to: [compatible.address, sealed.address],
        subject,
        text: 'The plain text version.',
        html: `<style>.note { color: rgb(0, 128, 0) }</style><p style="color: rgb(200, 0, 0)">Hello <b>there</b>.</p><p class="note">A styled note.</p><p title="style=kept">Text that says style=plain stays.</p><p><img alt="logo" src="cid:logo@postern.test"></p><p><img alt="remote" src="${imageUrl}"></p>`,
        attachments: [
          { filename: 'logo.png', content: PNG, cid: 'logo@postern.test', contentType: 'image/png' },
          { filename: 'report.bin', content: attachment, contentType: 'application/octet-stream' },
        ],
      });
    } finally {
      transport.close();
    }
    for (const inbox of [compatible, sealed]) {
      const { INBOX } = await labelIds(s, token, inbox.id);
      await untilDelivered(
        `the delivery to ${inbox.address}`,
        async () => (await listLabel(s, token, inbox.id, INBOX!)).some((m) => m.subject === subject),
        60_000,
      );
    }
  });
  after(async () => {
    await browser?.close();
    await new Promise((resolve) => images?.close(resolve));
    await s?.close();
  });
  /** The message frame's own policy refusing remote images is the point; any other violation is not. */
  const BLOCKED_REMOTE_IMAGE =
    /^Loading the image 'http:\/\/127\.0\.0\.1:\d+\/pixel\.png' violates the following Content Security Policy directive: "img-src data:"/;
  afterEach(() => {
    for (const d of devices) {
      expect(
        d.problems.filter((m) => !BLOCKED_REMOTE_IMAGE.test(m)),
        'CSP violations or page errors',
      ).to.deep.equal([]);
      d.problems.length = 0;
    }
  });

  /** Opens the inbox screen and the message with this subject; resolves with its id. */
  const openFromList = async (page: Page, inbox: TestInbox, wanted: string): Promise<string> => {
    await page.goto(`${origin}/app/#/inbox/${inbox.id}`);
    const item = page.locator('#messages li', { hasText: wanted });
    await item.waitFor({ timeout: 30_000 });
    const id = (await item.getAttribute('data-msg'))!;
    await item.locator('a').click();
    await page.locator('#message-subject', { hasText: wanted }).waitFor({ timeout: 60_000 });
    return id;
  };

  /** IMAP flags of the message with this subject in INBOX, as a mail app sees them. */
  const imapFlags = async (inbox: TestInbox, wanted: string): Promise<Set<string>> => {
    const app = await mailApp(inbox);
    try {
      const lock = await app.getMailboxLock('INBOX');
      try {
        for await (const m of app.fetch('1:*', { envelope: true, flags: true }))
          if (m.envelope?.subject === wanted) return m.flags ?? new Set();
      } finally {
        lock.release();
      }
      throw new Error(`no message "${wanted}" in INBOX`);
    } finally {
      await app.logout();
    }
  };

  for (const mode of ['compatible', 'zero-access'] as const) {
    it(`${mode}: HTML with remote images blocked until asked, the cid: image, the attachment, flags seen over IMAP`, async () => {
      const inbox = mode === 'compatible' ? compatible : sealed;
      imageRequests = 0;
      const page = a.page;
      await openFromList(page, inbox, subject);
      await page.getByRole('heading', { name: subject }).waitFor();
      expect(await inPage(page, 'document.activeElement?.id')).to.equal('message-subject');
      expect(await page.locator('#message-from').textContent()).to.include('ada@example.org');

      // Positive signal first: the frame's own cid: image has rendered, so its loads have run.
      const frame = page.frameLocator('#message-html');
      await frame.locator('p', { hasText: 'Hello there.' }).waitFor();
      await until(
        'the cid: image rendered',
        async () =>
          (await frame.locator('img[alt="logo"]').evaluate((img) => (img as unknown as { naturalWidth: number }).naturalWidth)) > 0,
      );
      expect(await frame.locator('img[alt="logo"]').getAttribute('src')).to.match(/^data:image\/png;base64,/);
      // The message's own styles apply (through CSSOM: the app's CSP refuses inline styles).
      await page.locator('#message-html[data-styled]').waitFor();
      const color = (text: string) =>
        frame
          .locator('p', { hasText: text })
          .evaluate((el) => (globalThis as unknown as { getComputedStyle(e: unknown): { color: string } }).getComputedStyle(el).color);
      expect(await color('Hello there.')).to.equal('rgb(200, 0, 0)');
      expect(await color('A styled note.')).to.equal('rgb(0, 128, 0)');
      expect(await frame.locator('p[title="style=kept"]').textContent()).to.equal('Text that says style=plain stays.');
      expect(imageRequests, 'remote image requests before "Show images"').to.equal(0);
      await screenshot(page, `mail-2-message-${mode}`);

      await page.click('#show-images');
      await until(
        'the remote image rendered',
        async () =>
          (await frame.locator('img[alt="remote"]').evaluate((img) => (img as unknown as { naturalWidth: number }).naturalWidth)) > 0,
      );
      expect(imageRequests, 'remote image requests after "Show images"').to.equal(1);

      // The attachment, from the decrypted parts, byte for byte; the inline image is not listed.
      expect(await page.locator('#attachments a').allTextContents()).to.have.length(1);
      const [download] = await Promise.all([page.waitForEvent('download'), page.click('#attachments a')]);
      expect(download.suggestedFilename()).to.equal('report.bin');
      expect(Buffer.compare(await readFile(await download.path()), attachment)).to.equal(0);

      // Opening marked it seen; flagging it is what a mail app sees.
      await page.locator('#flag-actions[data-flags~="seen"]').waitFor();
      await page.click('#toggle-flagged');
      await page.locator('#flag-actions[data-flags~="flagged"]').waitFor();
      expect(await page.locator('#toggle-flagged').getAttribute('aria-pressed')).to.equal('true');
      // The inbox stream may show the flag before the POST answers; focus is kept once it has.
      await page.locator('#toggle-flagged:enabled').waitFor();
      expect(await inPage(page, 'document.activeElement?.id'), 'focus stays on the toggle').to.equal('toggle-flagged');
      const flags = await imapFlags(inbox, subject);
      expect([...flags]).to.include.members(['\\Seen', '\\Flagged']);
      await page.click('#toggle-flagged');
      await page.locator('#flag-actions:not([data-flags~="flagged"])').waitFor();
      expect([...(await imapFlags(inbox, subject))]).to.not.include('\\Flagged');

      // Reply and forward lead to the compose screens (another part of the app).
      expect(await page.locator('#reply').getAttribute('href')).to.match(new RegExp(`^#/compose/${inbox.id}/reply/msg_`));
      expect(await page.locator('#forward').getAttribute('href')).to.match(new RegExp(`^#/compose/${inbox.id}/forward/msg_`));
    });
  }

  it("a mail app's APPEND appears live; text mail is shown as text; counts follow", async () => {
    const page = a.page;
    await page.goto(`${origin}/app/#/inbox/${compatible.id}`);
    // From the last test's message the address changes only in its fragment: no reload, and the
    // list that message was opened beside (another inbox's) is up until this one replaces it.
    await page.locator(`#compose[href="#/compose/${compatible.id}"]`).waitFor({ timeout: 30_000 });
    await page.locator('#live-status[data-live]').waitFor({ timeout: 30_000 });
    const unreadBefore = Number(await page.locator('#labels a[aria-current="page"] .count').getAttribute('data-unread'));
    expect(await page.locator('#compose').getAttribute('href')).to.equal(`#/compose/${compatible.id}`);
    expect(await page.locator('#activity').getAttribute('href')).to.equal('#/events');

    // The server ended the first stream (POSTERN_STREAM_MAX_MS): changes still arrive on the next.
    await until(
      'the stream reconnected',
      async () => Number(await page.locator('#live-status').getAttribute('data-connects')) >= 2,
      30_000,
    );
    const app = await mailApp(compatible);
    const tag = randomBytes(3).toString('hex');
    const liveSubject = `Appended ${tag} 3`;
    try {
      // A burst of three, then the mail app flags the first of them.
      const first = await append(app, 'INBOX', { subject: `Appended ${tag} 1` });
      await append(app, 'INBOX', { subject: `Appended ${tag} 2` });
      await append(app, 'INBOX', { subject: liveSubject, body: 'Plain <b>not markup</b> & more' });
      const row = page.locator('#messages li', { hasText: liveSubject });
      await row.waitFor({ timeout: 30_000 });
      // Newest first, marked unread; the label's unread count went up, without a reload.
      await until('all three listed', async () => (await page.locator('#messages li', { hasText: `Appended ${tag}` }).count()) === 3);
      expect((await page.locator('#messages li .subject').allTextContents()).slice(0, 3)).to.deep.equal(
        [3, 2, 1].map((n) => `Appended ${tag} ${n}`),
      );
      expect(await row.getAttribute('class')).to.include('unread');
      await page.locator(`#labels a[aria-current="page"] .count[data-unread="${unreadBefore + 3}"]`).waitFor();
      await app.mailboxOpen('INBOX');
      await app.messageFlagsAdd(String(first), ['\\Flagged'], { uid: true });
      await page.locator('#messages li.flagged', { hasText: `Appended ${tag} 1` }).waitFor({ timeout: 30_000 });
    } finally {
      await app.logout();
    }
    await screenshot(page, 'mail-1-inbox');

    // Keyboard only: from the heading, Tab reaches the message's link; Enter opens it.
    for (
      let i = 0;
      i < 30 &&
      !(await inPage<boolean>(
        page,
        `document.activeElement?.closest('#messages li')?.textContent?.includes(${JSON.stringify(liveSubject)}) ?? false`,
      ));
      i++
    )
      await page.keyboard.press('Tab');
    await page.keyboard.press('Enter');
    await page.locator('#message-text').waitFor({ timeout: 60_000 });
    expect(await inPage(page, 'document.activeElement?.id')).to.equal('message-subject');
    expect(await page.locator('#message-text').textContent()).to.include('Plain <b>not markup</b> & more');
    expect(await page.locator('#message-body b').count()).to.equal(0);
  });

  it("pages newest first with the API's limit and before, in another label", async () => {
    const inbox = await p.inbox();
    await importMessages(inbox.imapUser, 'Projects', 55);
    const page = a.page;
    await page.goto(`${origin}/app/#/inbox/${inbox.id}`);
    await page.locator('#labels a', { hasText: 'Projects' }).click();
    await page.locator('#label-heading', { hasText: 'Projects' }).waitFor({ timeout: 30_000 });
    await page.locator('#messages li').first().waitFor({ timeout: 30_000 });
    expect(await page.locator('#messages li').count()).to.equal(50);
    expect(await page.locator('#labels a[aria-current="page"] .count').getAttribute('data-unread')).to.equal('55');
    expect(await page.locator('#messages li .subject').first().textContent()).to.equal('imported 54');
    // The end of the list coming into view loads the next page (docs/app.md, "Large labels").
    await until('the second page', async () => {
      await inPage(page, "document.getElementById('older')?.scrollIntoView()");
      return (await page.locator('#messages li').count()) === 55;
    });
    expect(await page.locator('#messages li .subject').last().textContent()).to.equal('imported 0');
    expect(await page.locator('#older').count()).to.equal(0);
  });

  it('a second device (phone width) signs in and reads the same zero-access message', async () => {
    const b = await device({ prf: false, width: 375 });
    await copyPasskeys(a, b);
    await signInWithPassphrase(b, origin, PASSPHRASE);
    await b.page.locator(`#inboxes li[data-inbox="${sealed.id}"] a`).click();
    await b.page.locator('#messages li', { hasText: subject }).waitFor({ timeout: 30_000 });
    expect(await inPage(b.page, 'document.documentElement.scrollWidth <= window.innerWidth')).to.equal(true);
    await screenshot(b.page, 'mail-3-inbox-phone');
    await b.page.locator('#messages li', { hasText: subject }).locator('a').click();
    await b.page.locator('#message-subject', { hasText: subject }).waitFor({ timeout: 60_000 });
    await b.page.frameLocator('#message-html').locator('p', { hasText: 'Hello there.' }).waitFor();
    expect(await inPage(b.page, 'document.documentElement.scrollWidth <= window.innerWidth')).to.equal(true);
    await screenshot(b.page, 'mail-4-message-phone');
  });
});
