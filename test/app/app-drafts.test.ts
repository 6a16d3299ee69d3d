// The web app's compose screen in real Chromium, beyond sending (test/app/app-compose.test.ts): reply
// to all, forward with the original quoted inline and its attachments carried, address
// suggestions from the inbox's mail, the identity's signature, and drafts saved to the server
// while typing and found again after the tab is killed, in a compatible and a zero-access inbox.
import { randomBytes } from 'node:crypto';
import { expect } from 'chai';
import type { Browser, Page } from 'playwright-core';
import { call, newProject, unique, type TestInbox, type TestProject, type TestServer } from '../helpers/harness.ts';
import { mailApp, until } from '../helpers/mail-fixtures.ts';
import { untilDelivered } from '../helpers/ingress-helpers.ts';
import { labelIds, listLabel, type Summary } from '../helpers/send-fixtures.ts';
import {
  enrollMember,
  go,
  launchChromium,
  newDevice,
  screenshot,
  signInWithPassphrase,
  startAppServer,
  type Device,
} from '../helpers/browser.ts';

const PASSPHRASE = 'drafts test passphrase';

describe('web app: reply all, forward inline, suggestions, signature, drafts (Chromium)', function () {
  this.timeout(180_000);
  let s: TestServer;
  let origin: string;
  let p: TestProject;
  let browser: Browser;
  let device: Device;
  let a: TestInbox;
  let z: TestInbox;
  let b: TestInbox;
  let token: string;

  before(async () => {
    ({ s, origin } = await startAppServer({ POSTERN_EVENTS_SETTLE_MS: '100' }));
    p = await newProject(s);
    a = await p.inbox();
    z = await p.inbox({ mode: 'zero-access' });
    b = await p.inbox();
    token = await p.token(['messages:read', 'content:read', 'send']);
    browser = await launchChromium();
    // Without PRF, so that a new tab unlocks with the passphrase (the virtual authenticator's
    // copy of a passkey carries no PRF secret: test/app/app.test.ts).
    device = await newDevice(browser, { prf: false });
    await enrollMember(device, (await s.postern.passkeys.invite(p.memberId)).link, PASSPHRASE);
  });
  after(async () => {
    await browser?.close();
    await s?.close();
  });
  afterEach(() => {
    expect(device.problems, 'CSP violations or page errors').to.deep.equal([]);
  });

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
  const attachmentBytes = async (inbox: TestInbox, msg: string, index: number) =>
    Buffer.from(await (await call(`${s.base}/inboxes/${inbox.id}/messages/${msg}/attachments/${index}`, { token })).arrayBuffer());
  const sent = async (page: Page) => {
    await page.locator('#compose-status[data-state="sent"], #compose-status[data-state="failed"]').first().waitFor({ timeout: 60_000 });
    if (!(await page.locator('#compose-status').getAttribute('data-sent')))
      throw new Error(`the page says: ${await page.locator('#compose-status').innerText()}`);
  };
  const drafts = async (inbox: TestInbox) =>
    (
      (await (await call(`${s.base}/inboxes/${inbox.id}/drafts`, { token })).json()) as {
        drafts: Array<{ id: string; sealed: boolean; subject: string | null; to: string[] }>;
      }
    ).drafts;
  const append = async (inbox: TestInbox, lines: string[]) => {
    const app = await mailApp(inbox);
    try {
      await app.append('INBOX', lines.join('\r\n'));
    } finally {
      await app.logout().catch(() => undefined);
    }
  };

  /**
   * Kills the tab (closed without its beforeunload handlers, as a crash or a killed process
   * leaves it) and opens the app in a new one, signed in again: sessionStorage is per tab.
   */
  const killAndReopen = async () => {
    const { credentials } = await device.cdp.send('WebAuthn.getCredentials', { authenticatorId: device.authenticatorId });
    await device.page.close({ runBeforeUnload: false });
    const page = await device.context.newPage();
    const problems: string[] = [];
    page.on('console', (m) => {
      if (m.type() === 'error' && /Content Security Policy|Refused to/i.test(m.text())) problems.push(m.text());
    });
    page.on('pageerror', (e) => problems.push(e.message));
    const cdp = await device.context.newCDPSession(page);
    await cdp.send('WebAuthn.enable');
    const { authenticatorId } = await cdp.send('WebAuthn.addVirtualAuthenticator', {
      options: {
        protocol: 'ctap2',
        transport: 'internal',
        hasResidentKey: true,
        hasUserVerification: true,
        isUserVerified: true,
        automaticPresenceSimulation: true,
      },
    });
    for (const credential of credentials) await cdp.send('WebAuthn.addCredential', { authenticatorId, credential });
    device = { context: device.context, page, cdp, authenticatorId, problems };
    await signInWithPassphrase(device, origin, PASSPHRASE);
  };

  it('reply all: To is the sender, Cc the other recipients, the inbox itself left out', async () => {
    const subject = `Team plans ${unique('ra')}`;
    await append(a, [
      'From: Carol Example <carol@example.org>',
      `To: ${a.address}, Xavier <xavier@example.org>`,
      `Cc: yvonne@example.org, ${a.address.toUpperCase()}`,
      `Subject: ${subject}`,
      `Date: ${new Date().toUTCString()}`,
      `Message-ID: <ra-${randomBytes(6).toString('hex')}@example.org>`,
      '',
      'Shall we?',
      '',
    ]);
    const original = await arrived(a, subject);
    const { page } = device;
    await go(page, `#/inbox/${a.id}/message/${original.id}`);
    await page.click('#reply-all', { timeout: 60_000 });
    await page.locator('#compose-to').waitFor({ timeout: 60_000 });
    await until('the reply-all form', async () => (await page.locator('#compose-subject').inputValue()) !== '');
    expect(await page.locator('#compose-to').inputValue()).to.equal('Carol Example <carol@example.org>');
    expect(await page.locator('#compose-cc').inputValue()).to.equal('Xavier <xavier@example.org>, yvonne@example.org');
    expect(await page.locator('#compose-subject').inputValue()).to.equal(`Re: ${subject}`);
    expect(await page.locator('#compose-body').inputValue()).to.include('> Shall we?');
  });

  it('forwards inline: the original quoted under a "Forwarded message" block, its attachment carried intact', async () => {
    const subject = `Forward inline ${unique('fi')}`;
    const pdf = randomBytes(2000);
    const boundary = 'b-fwd-1';
    await append(a, [
      'From: Dave <dave@example.org>',
      `To: ${a.address}`,
      `Subject: ${subject}`,
      `Date: ${new Date().toUTCString()}`,
      `Message-ID: <fi-${randomBytes(6).toString('hex')}@example.org>`,
      'MIME-Version: 1.0',
      `Content-Type: multipart/mixed; boundary="${boundary}"`,
      '',
      `--${boundary}`,
      'Content-Type: text/plain; charset=utf-8',
      '',
      'The original body.',
      `--${boundary}`,
      'Content-Type: application/pdf; name="report.pdf"',
      'Content-Disposition: attachment; filename="report.pdf"',
      'Content-Transfer-Encoding: base64',
      '',
      ...(pdf.toString('base64').match(/.{1,76}/g) ?? []),
      `--${boundary}--`,
      '',
    ]);
    const original = await arrived(a, subject);
    const { page } = device;
    await go(page, `#/compose/${a.id}/forward/${original.id}`);
    await page.locator('#compose-attachment-list li').first().waitFor({ timeout: 60_000 });
    expect(await page.locator('#compose-subject').inputValue()).to.equal(`Fwd: ${subject}`);
    const body = await page.locator('#compose-body').inputValue();
    expect(body).to.include('---------- Forwarded message ---------\nFrom: Dave <dave@example.org>');
    expect(body).to.include(`Subject: ${subject}`).and.include('The original body.');
    expect(await page.locator('#compose-attachment-list').innerText()).to.include('report.pdf');
    await page.fill('#compose-to', b.address);
    await page.locator('#compose-body').press('Control+Home');
    await page.keyboard.type('FYI.');
    await page.click('#compose-send');
    await sent(page);
    const fwd = await arrived(b, `Fwd: ${subject}`);
    const c = await content(b, fwd.id);
    expect(c.text)
      .to.match(/^FYI\./)
      .and.include('The original body.');
    expect(c.attachments.map((x) => x.filename)).to.deep.equal(['report.pdf']);
    expect((await attachmentBytes(b, fwd.id, c.attachments[0]!.index)).equals(pdf)).to.equal(true);
  });

  it("suggests addresses from the inbox's mail, and puts the identity's signature and display name on a new message", async () => {
    const put = await call(`${s.base}/inboxes/${a.id}/identities/${encodeURIComponent(a.address)}`, {
      method: 'PUT',
      token,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ displayName: 'Ann Sender', signatureText: 'Ann\nhttps://example.org' }),
    });
    expect(put.status, await put.clone().text()).to.equal(200);
    const carol = `carol.${unique('c').toLowerCase()}@example.org`;
    const xavier = `xavier.${unique('x').toLowerCase()}@example.org`;
    const hello = `Hello from Carol ${unique('h')}`;
    await append(a, [
      `From: Carol Example <${carol}>`,
      `To: ${a.address}, Xavier <${xavier}>`,
      `Subject: ${hello}`,
      `Date: ${new Date().toUTCString()}`,
      '',
      'Hi.',
      '',
    ]);
    await arrived(a, hello);
    const { page } = device;
    await go(page, `#/compose/${a.id}`);
    await page.locator('#compose-to').waitFor({ timeout: 60_000 });
    expect(await page.locator('#compose-body').inputValue()).to.equal('\n\n-- \nAnn\nhttps://example.org');
    // Carol wrote to this inbox: typing part of her name offers her.
    await page.locator('#compose-to').pressSequentially('caro');
    await page.locator(`#compose-addresses option[value="Carol Example <${carol}>"]`).waitFor({ state: 'attached', timeout: 30_000 });
    // After a first entry, the suggestion completes the second and keeps the first.
    await page.fill('#compose-to', '');
    await page.locator('#compose-to').pressSequentially(`${b.address}, xav`);
    await page
      .locator(`#compose-addresses option[value="${b.address}, Xavier <${xavier}>"]`)
      .waitFor({ state: 'attached', timeout: 30_000 });
    await page.fill('#compose-to', b.address);
    const subject = `Signed ${unique('sig')}`;
    await page.fill('#compose-subject', subject);
    await page.locator('#compose-body').press('Control+Home');
    await page.keyboard.type('Hello.');
    await page.click('#compose-send');
    await sent(page);
    const got = await arrived(b, subject);
    const c = await content(b, got.id);
    expect(c.text.trimEnd()).to.equal('Hello.\n\n-- \nAnn\nhttps://example.org');
    expect(c.headers.from).to.include('Ann Sender');
  });

  for (const mode of ['compatible', 'zero-access'] as const) {
    it(`${mode}: the draft is saved while typing and found again after the tab is killed, then sent with its attachment intact`, async () => {
      const inbox = mode === 'zero-access' ? z : a;
      const subject = `Draft ${mode} ${unique('d')}`;
      const attachment = randomBytes(4000);
      let page = device.page;
      // From another screen: the previous test may have left this very address showing its sent form.
      await go(page, `#/compose/${inbox.id}/drafts`);
      await page.locator('#drafts, #drafts-empty').first().waitFor({ timeout: 60_000 });
      await go(page, `#/compose/${inbox.id}`);
      await page.locator('#compose-to:enabled').waitFor({ timeout: 60_000 });
      await page.fill('#compose-to', `Bee <${b.address}>`);
      await page.fill('#compose-subject', subject);
      await page.locator('#compose-body').press('Control+Home');
      await page.keyboard.type('First part.');
      await page.setInputFiles('#compose-attachments', { name: 'notes.bin', mimeType: 'application/octet-stream', buffer: attachment });
      await page.locator('#compose-attachment-list li').waitFor();
      const saved = page.locator('#compose-draft-status[data-saved]');
      await saved.waitFor({ timeout: 60_000 });
      const draftId = (await saved.getAttribute('data-saved'))!;
      expect(await page.evaluate('location.hash')).to.equal(`#/compose/${inbox.id}/draft/${draftId}`);
      // Typing on saves again, under the same id.
      const firstSave = await page.locator('#compose-draft-status').innerText();
      await page.keyboard.type(' Second part.');
      await until('the second save', async () => (await page.locator('#compose-draft-status').innerText()) !== firstSave, 30_000);
      const typed = await page.locator('#compose-body').inputValue();
      const onServer = (await drafts(inbox)).find((d) => d.id === draftId);
      expect(onServer, 'the draft on the server').to.not.equal(undefined);
      expect(onServer!.sealed).to.equal(mode === 'zero-access');
      expect(onServer!.subject).to.equal(mode === 'zero-access' ? null : subject);
      expect(onServer!.to).to.deep.equal([b.address]);

      await killAndReopen();
      page = device.page;
      await go(page, `#/compose/${inbox.id}/drafts`);
      await page.locator(`#drafts li[data-draft="${draftId}"] a`).click({ timeout: 60_000 });
      await page.locator('#compose-attachment-list li').waitFor({ timeout: 60_000 });
      await screenshot(page, `14-draft-restored-${mode}`);
      expect(await page.locator('#compose-to').inputValue()).to.equal(`Bee <${b.address}>`);
      expect(await page.locator('#compose-subject').inputValue()).to.equal(subject);
      expect((await page.locator('#compose-body').inputValue()).trimEnd()).to.equal(typed.trimEnd());
      expect(await page.locator('#compose-attachment-list').innerText()).to.include('notes.bin');

      await page.click('#compose-send');
      await sent(page);
      const got = await arrived(b, subject);
      const c = await content(b, got.id);
      expect(typed).to.match(/^First part\. Second part\./);
      expect(c.text.trimEnd()).to.equal(typed.trimEnd());
      expect(c.attachments.map((x) => x.filename)).to.deep.equal(['notes.bin']);
      expect((await attachmentBytes(b, got.id, c.attachments[0]!.index)).equals(attachment)).to.equal(true);
      // Sent: the draft left Drafts.
      await until('the draft removed', async () => !(await drafts(inbox)).some((d) => d.id === draftId), 30_000);
    });
  }
});
