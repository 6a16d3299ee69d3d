// The web app's writing side in real Chromium: compose (non-ASCII subject, an attachment) sealed
// in the browser and sent with /send to another inbox, a retry after a lost answer that sends
// once, reply (threading headers, \Answered on the original over IMAP), forward (the original
// quoted inline; more in test/app/app-drafts.test.ts), and the activity screen.
import { randomBytes } from 'node:crypto';
import { expect } from 'chai';
import type { Browser, Page } from 'playwright-core';
import { call, newProject, unique, type TestInbox, type TestProject, type TestServer } from '../helpers/harness.ts';
import { mailApp, until } from '../helpers/mail-fixtures.ts';
import { untilDelivered } from '../helpers/ingress-helpers.ts';
import { eventsOf, labelIds, listLabel, type Summary } from '../helpers/send-fixtures.ts';
import { enrollMember, go, launchChromium, newDevice, screenshot, startAppServer, type Device } from '../helpers/browser.ts';

describe('web app: compose, reply, forward, activity (Chromium)', function () {
  this.timeout(120_000);
  let s: TestServer;
  let p: TestProject;
  let browser: Browser;
  let device: Device;
  let a: TestInbox;
  let b: TestInbox;
  let token: string;

  before(async () => {
    ({ s } = await startAppServer({ POSTERN_EVENTS_SETTLE_MS: '100' }));
    p = await newProject(s);
    a = await p.inbox();
    b = await p.inbox();
    token = await p.token(['messages:read', 'content:read']);
    browser = await launchChromium();
    device = await newDevice(browser, { prf: true });
    await enrollMember(device, (await s.postern.passkeys.invite(p.memberId)).link, 'compose test passphrase');
  });
  after(async () => {
    await browser?.close();
    await s?.close();
  });
  afterEach(() => {
    expect(device.problems, 'CSP violations or page errors').to.deep.equal([]);
  });

  /** The message in `inbox`'s INBOX whose subject is `subject`, once it has arrived. */
  const arrived = async (inbox: TestInbox, subject: string): Promise<Summary> => {
    const ids = await labelIds(s, token, inbox.id);
    return untilDelivered(
      `"${subject}" in ${inbox.address}`,
      async () => (await listLabel(s, token, inbox.id, ids.INBOX!)).find((m) => m.subject === subject),
      30_000,
    );
  };
  const content = async (inbox: TestInbox, msg: string) =>
    (await (await call(`${s.base}/inboxes/${inbox.id}/messages/${msg}/content`, { token })).json()) as {
      headers: Record<string, string>;
      text: string;
      attachments: Array<{ index: number; contentType: string; filename?: string; size: number }>;
    };
  const source = async (inbox: TestInbox, msg: string) =>
    (await call(`${s.base}/inboxes/${inbox.id}/messages/${msg}/source`, { token })).text();
  const sentDraft = async (page: Page) => {
    await page.locator('#compose-status[data-state="sent"], #compose-status[data-state="failed"]').first().waitFor({ timeout: 60_000 });
    const sent = await page.locator('#compose-status').getAttribute('data-sent');
    if (!sent) throw new Error(`the page says: ${await page.locator('#compose-status').innerText()}`);
    return sent;
  };

  it('composes a message with a non-ASCII subject and an attachment, sealed in the browser, and it arrives intact; a retry sends once', async () => {
    const { page } = device;
    const subject = `Grüße aus Zürich — 測試 ✓ ${unique('s')}`;
    const attachment = randomBytes(3000);
    await go(page, `#/compose/${a.id}`);
    await page.locator('#compose-to').waitFor();
    expect(await page.locator('#compose-from').inputValue()).to.equal(a.address);
    await page.fill('#compose-to', `Bé Recipient <${b.address}>`);
    await page.fill('#compose-subject', subject);
    await page.fill('#compose-body', 'Hallo Björn,\nder Bericht ist angehängt. ½ € 😀\n');
    await page.setInputFiles('#compose-attachments', { name: 'Bericht-ü.bin', mimeType: 'application/octet-stream', buffer: attachment });
    await screenshot(page, '10-compose');
    // Readable on a phone-width screen.
    await page.setViewportSize({ width: 360, height: 800 });
    expect(await page.evaluate('document.documentElement.scrollWidth <= window.innerWidth')).to.equal(true);
    await page.setViewportSize({ width: 1024, height: 800 });

    // The first answer is lost on the way back (the server did take it): the member tries again.
    // The send carries its undo hold as a query (docs/app.md, "Compose"), so the path is matched.
    const drafts: string[] = [];
    const isSend = (url: URL) => url.pathname.endsWith(`/inboxes/${a.id}/send`);
    page.on('request', (r) => {
      if (isSend(new URL(r.url()))) drafts.push((JSON.parse(r.postData()!) as { draftId: string }).draftId);
    });
    let lost = false;
    await page.route(isSend, async (route) => {
      if (lost) return route.continue();
      lost = true;
      const answer = await route.fetch();
      expect(answer.status()).to.equal(202);
      await route.abort('connectionreset');
    });
    await page.click('#compose-send');
    await page.locator('#compose-status[data-state="failed"]').waitFor({ timeout: 60_000 });
    expect(await page.locator('#compose-status').innerText()).to.include('Try again');
    await page.click('#compose-send');
    const draftId = await sentDraft(page);
    await page.unroute(isSend);
    expect(drafts).to.deep.equal([draftId, draftId]);
    await screenshot(page, '11-sent');

    const got = await arrived(b, subject);
    const c = await content(b, got.id);
    expect(c.headers.subject).to.equal(subject);
    expect(c.headers.from).to.include(a.address);
    expect(c.headers.to).to.include('Bé Recipient').and.include(b.address);
    expect(c.text).to.equal('Hallo Björn,\nder Bericht ist angehängt. ½ € 😀\n');
    expect(c.attachments).to.have.length(1);
    expect(c.attachments[0]).to.include({ filename: 'Bericht-ü.bin', size: attachment.length });
    const bytes = Buffer.from(
      await (await call(`${s.base}/inboxes/${b.id}/messages/${got.id}/attachments/${c.attachments[0]!.index}`, { token })).arrayBuffer(),
    );
    expect(bytes.equals(attachment)).to.equal(true);
    // Sent once: the server recorded one acceptance for the draft, however often it was posted.
    const accepted = await until('the delivery event', async () => {
      const all = (await eventsOf(s, p.projectId, a.id, ['mail.delivery.accepted'])).filter(
        (e) => (e.data as { draftId?: string }).draftId === draftId,
      );
      return all.length ? all : null;
    });
    expect(accepted).to.have.length(1);
  });

  it('replies: To from Reply-To, "Re:" once, threading headers, quoted text; the original is \\Answered over IMAP', async () => {
    const app = await mailApp(a);
    const subject = `Quarterly numbers ${unique('q')}`;
    const messageId = `<orig-${randomBytes(6).toString('hex')}@example.org>`;
    try {
      await app.append(
        'INBOX',
        [
          'From: Carol Example <carol@example.org>',
          `Reply-To: Team <${b.address}>`,
          `To: ${a.address}`,
          `Subject: ${subject}`,
          `Date: ${new Date().toUTCString()}`,
          `Message-ID: ${messageId}`,
          'References: <root@example.org>',
          'In-Reply-To: <root@example.org>',
          'MIME-Version: 1.0',
          'Content-Type: text/plain; charset=utf-8',
          'Content-Transfer-Encoding: quoted-printable',
          '',
          'Line one',
          'Zweite Zeile =C3=BC',
          '',
        ].join('\r\n'),
      );
      const original = await arrived(a, subject);
      const { page } = device;
      await go(page, `#/compose/${a.id}/reply/${original.id}`);
      await page.locator('#compose-to').waitFor({ timeout: 60_000 });
      expect(await page.locator('#compose-to').inputValue()).to.include(b.address);
      expect(await page.locator('#compose-subject').inputValue()).to.equal(`Re: ${subject}`);
      const quoted = await page.locator('#compose-body').inputValue();
      expect(quoted).to.include('Carol Example <carol@example.org> wrote:').and.include('> Line one\n> Zweite Zeile ü');
      await page.locator('#compose-body').press('Control+Home');
      await page.keyboard.type('Thanks, looks good.');
      await screenshot(page, '12-reply');
      await page.click('#compose-send');
      await sentDraft(page);

      const reply = await arrived(b, `Re: ${subject}`);
      const raw = await source(b, reply.id);
      expect(raw).to.match(new RegExp(`^In-Reply-To: ${messageId}\\r$`, 'm'));
      expect(raw).to.match(new RegExp(`^References: <root@example.org> ${messageId}\\r$`, 'm'));
      expect((await content(b, reply.id)).text).to.match(/^Thanks, looks good\./);
      // A mail app sees the original answered.
      await app.mailboxOpen('INBOX');
      await until('\\Answered on the original', async () => {
        for await (const m of app.fetch('1:*', { flags: true, envelope: true }))
          if (m.envelope?.messageId === messageId && m.flags?.has('\\Answered')) return true;
        return false;
      });

      // A reply to the reply keeps one "Re:".
      await go(page, `#/compose/${b.id}/reply/${reply.id}`);
      await page.locator('#compose-subject').waitFor({ timeout: 60_000 });
      await until('the reply form', async () => (await page.locator('#compose-subject').inputValue()) !== '');
      expect(await page.locator('#compose-subject').inputValue()).to.equal(`Re: ${subject}`);
    } finally {
      await app.logout().catch(() => undefined);
    }
  });

  it('forwards: the original quoted inline under a "Forwarded message" block', async () => {
    const app = await mailApp(a);
    const subject = `Forward me ${unique('f')}`;
    try {
      await app.append(
        'INBOX',
        [
          `From: dave@example.org`,
          `To: ${a.address}`,
          `Subject: ${subject}`,
          `Date: ${new Date().toUTCString()}`,
          `Message-ID: <fwd-${randomBytes(6).toString('hex')}@example.org>`,
          '',
          'The original body.',
          '',
        ].join('\r\n'),
      );
    } finally {
      await app.logout().catch(() => undefined);
    }
    const original = await arrived(a, subject);
    const { page } = device;
    await go(page, `#/compose/${a.id}/forward/${original.id}`);
    await page.locator('#compose-subject').waitFor({ timeout: 60_000 });
    await until('the forward form', async () => (await page.locator('#compose-subject').inputValue()) !== '');
    expect(await page.locator('#compose-subject').inputValue()).to.equal(`Fwd: ${subject}`);
    await page.fill('#compose-to', b.address);
    // Keyboard: Enter in a one-line box does not send (a send would mark the status at once,
    // within the key press); Ctrl+Enter does.
    await page.locator('#compose-subject').press('Enter');
    expect(await page.locator('#compose-status').getAttribute('data-state')).to.equal(null);
    await page.locator('#compose-body').press('Control+Home');
    await page.keyboard.type('See below.');
    await page.locator('#compose-body').press('Control+Enter');
    await sentDraft(page);
    const fwd = await arrived(b, `Fwd: ${subject}`);
    const c = await content(b, fwd.id);
    expect(c.text)
      .to.match(/^See below\./)
      .and.include('---------- Forwarded message ---------');
    expect(c.text).to.include(`Subject: ${subject}`).and.include('The original body.');
  });

  // mail.delivery.accepted has project visibility: docs/api.md, "Events" shows it only with project:read, which a
  // web session never holds, so the screen shows the inbox events (docs/app.md, "Activity").
  it("the activity screen lists the member's inbox events newest first: the reply's \\Answered among them", async () => {
    const { page } = device;
    await go(page, '#/events');
    await page.locator('#events').waitFor({ timeout: 60_000 });
    // Paged reads see events once settled: refresh until the flag change is there.
    await until(
      'message.flags on the activity screen',
      async () => {
        if (await page.locator('#events li[data-type="message.flags"]:has-text("answered")').count()) return true;
        await page.click('#events-refresh');
        await page.locator('#events').waitFor();
        return false;
      },
      30_000,
    ).catch(async (err: Error) => {
      throw new Error(`${err.message}; the page says: ${await page.locator('main').innerText()}`);
    });
    const flags = page.locator('#events li[data-type="message.flags"]').first();
    expect(await flags.innerText()).to.include(a.address);
    // Each message event links to its message.
    expect(await flags.locator('a').getAttribute('href')).to.match(new RegExp(`^#/inbox/${a.id}/message/msg_`));
    expect(await page.locator('#events li[data-type="message.added"]').count()).to.be.greaterThan(3);
    const times = await page.evaluate<string[]>("Array.from(document.querySelectorAll('#events time'), (e) => e.getAttribute('datetime'))");
    expect([...times].sort().reverse()).to.deep.equal(times);
    await screenshot(page, '13-activity');
  });
});
