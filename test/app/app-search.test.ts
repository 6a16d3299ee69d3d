// The web app's search box (docs/search.md) in real Chromium: typed conditions show only the
// matching messages, in the list's rows, which open the message; more results by cursor; an
// empty result, a slip in the syntax and the API's refusal are each said; Escape and an empty
// search go back to the list; a zero-access inbox's mail is found by its clear headers and opens
// decrypted. Screenshots go to test-artifacts/app/ (git-ignored).
import { randomBytes } from 'node:crypto';
import { expect } from 'chai';
import nodemailer from 'nodemailer';
import type { Browser, Page } from 'playwright-core';
import { call, json, mailEnv, newProject, type TestInbox, type TestProject, type TestServer } from '../helpers/harness.ts';
import { enrollMember, inPage, launchChromium, newDevice, screenshot, startAppServer, type Device } from '../helpers/browser.ts';
import { ingressInbox, untilDelivered } from '../helpers/ingress-helpers.ts';
import { importMessages, mailApp, rfc822 } from '../helpers/mail-fixtures.ts';
import { labelIds, listLabel } from '../helpers/send-fixtures.ts';
import type { MessageSearchPage } from '../../schemas/wire.ts';

const PASSPHRASE = 'correct horse battery staple';

describe('web app: searching an inbox (Chromium, virtual passkeys)', function () {
  this.timeout(180_000);
  let s: TestServer;
  let p: TestProject;
  let browser: Browser;
  let token: string;
  let a: Device;
  let inbox: TestInbox;
  const tag = `t${randomBytes(3).toString('hex')}`;
  const day = (iso: string) => new Date(`${iso}T12:00:00Z`);

  before(async () => {
    ({ s } = await startAppServer({ POSTERN_LMTP_PORT: String(mailEnv().ingress.port) }));
    p = await newProject(s);
    token = await p.token(['messages:read']);
    inbox = await p.inbox();
    const app = await mailApp(inbox);
    try {
      await app.mailboxCreate('Projects');
      await app.append('INBOX', rfc822({ from: 'Ada Lovelace <ada@example.org>', subject: `Invoice ${tag} March` }), [], day('2024-03-10'));
      await app.append(
        'INBOX',
        rfc822({ from: 'Bob Builder <bob@example.net>', subject: `Invoice ${tag} April` }),
        ['\\Flagged'],
        day('2024-04-10'),
      );
      await app.append('INBOX', rfc822({ from: 'Ada Lovelace <ada@example.org>', subject: `Lunch ${tag}` }), ['\\Seen'], day('2024-05-10'));
      await app.append('Projects', rfc822({ from: 'Carol <carol@example.com>', subject: `Plan ${tag}` }), [], day('2024-02-10'));
    } finally {
      await app.logout();
    }
    // Listing each label indexes it, as a member's first visit would.
    const ids = await labelIds(s, token, inbox.id);
    for (const id of Object.values(ids)) await listLabel(s, token, inbox.id, id);
    browser = await launchChromium();
    const { link } = await s.postern.passkeys.invite(p.memberId);
    a = await newDevice(browser, { prf: false });
    await enrollMember(a, link, PASSPHRASE);
  });
  after(async () => {
    await browser?.close();
    await s?.close();
  });
  afterEach(() => {
    expect(a.problems, 'CSP violations or page errors').to.deep.equal([]);
  });

  /** Types `text` in the box and presses Enter; resolves once the results (or a refusal) show. */
  const search = async (page: Page, text: string) => {
    // What the screen before showed is marked, so only the new screen's answer counts.
    await page.evaluate(`document.querySelectorAll('#search-status, #search-error').forEach((e) => e.setAttribute('data-stale', ''))`);
    await page.fill('#search', text);
    await page.press('#search', 'Enter');
    await page
      .locator('#search-status[data-found]:not([data-stale]), #search-error:not([data-stale])')
      .first()
      .waitFor({ timeout: 30_000 });
    expect(await page.locator('#results-heading').textContent()).to.equal(`Results for “${text}”`);
  };
  /**
   * Shows the inbox screen. Without a reload (which would lock the key): a hash change, so the
   * screen before stays up until the new one is drawn; its box is marked to be told apart.
   */
  const openInbox = async (page: Page, inboxId: string) => {
    const hash = `#/inbox/${inboxId}`;
    await page.evaluate(`document.getElementById('search')?.setAttribute('data-stale', '');
      if (location.hash === ${JSON.stringify(hash)}) window.dispatchEvent(new HashChangeEvent('hashchange')); else location.hash = ${JSON.stringify(hash)};`);
    await page.locator('#search:not([data-stale])').waitFor({ timeout: 30_000 });
    await page.locator('#messages').waitFor({ state: 'attached' });
  };
  const subjects = (page: Page) => page.locator('#search-results li .subject').allTextContents();

  it('finds by subject words, sender, flag and label; a result opens; Escape goes back to the list', async () => {
    const page = a.page;
    await openInbox(page, inbox.id);
    await page.locator('#messages li', { hasText: `Lunch ${tag}` }).waitFor({ timeout: 30_000 });
    // The box has a name and a hint (what it accepts).
    expect(await page.getByRole('searchbox', { name: 'Search this inbox' }).count()).to.equal(1);
    expect(await page.locator('#search').getAttribute('aria-describedby')).to.equal('search-hint');

    await search(page, `from:ada ${tag}`);
    expect(await subjects(page)).to.deep.equal([`Lunch ${tag}`, `Invoice ${tag} March`]);
    expect(await page.locator('#search-status').textContent()).to.equal('2 messages.');
    // The list's rows: the same marks (Lunch was read, March not).
    expect(await page.locator('#search-results li.unread .subject').allTextContents()).to.deep.equal([`Invoice ${tag} March`]);
    expect(await inPage(page, 'document.activeElement?.id')).to.equal('results-heading');
    await screenshot(page, 'search-1-results');
    // Readable at 320 px: nothing overflows.
    await page.setViewportSize({ width: 320, height: 700 });
    expect(await inPage(page, 'document.documentElement.scrollWidth <= window.innerWidth')).to.equal(true);
    await screenshot(page, 'search-2-results-320');
    await page.setViewportSize({ width: 1024, height: 800 });

    await search(page, `invoice is:flagged`);
    expect(await subjects(page)).to.deep.equal([`Invoice ${tag} April`]);
    await search(page, `in:projects ${tag}`);
    expect(await subjects(page)).to.deep.equal([`Plan ${tag}`]);
    await search(page, `${tag} after:2024-03-01 before:2024-05-01`);
    expect(await subjects(page)).to.deep.equal([`Invoice ${tag} April`, `Invoice ${tag} March`]);

    // A result opens the message screen, whose way back is the results.
    await search(page, `from:"Bob Builder"`);
    await page
      .locator('#search-results li', { hasText: `Invoice ${tag} April` })
      .locator('a')
      .click();
    await page.locator('#message-subject', { hasText: `Invoice ${tag} April` }).waitFor({ timeout: 60_000 });
    // Opening marks it read once the screen is drawn: the Read toggle shows when that is done.
    await page.locator('#toggle-seen[aria-pressed="true"]').waitFor({ timeout: 30_000 });
    expect(await page.locator('#back').textContent()).to.equal('← Back to the results');
    await page.click('#back');
    await page.locator('#search-status[data-found="1"]').waitFor({ timeout: 30_000 });
    expect(await page.inputValue('#search')).to.equal('from:"Bob Builder"');
    // Opening it read it: the results are read again on the way back.
    expect(await page.locator('#search-results li.unread').count()).to.equal(0);

    // Escape in the box leaves the search for the list it came from.
    await page.focus('#search');
    await page.keyboard.press('Escape');
    await page.locator('#messages li', { hasText: `Lunch ${tag}` }).waitFor({ timeout: 30_000 });
    expect(await inPage(page, 'location.hash')).to.equal(`#/inbox/${inbox.id}`);
    expect(await page.inputValue('#search')).to.equal('');
    // On the list, Escape only empties the box.
    await page.fill('#search', 'half typed');
    await page.press('#search', 'Escape');
    expect(await page.inputValue('#search')).to.equal('');
    expect(await inPage(page, 'location.hash')).to.equal(`#/inbox/${inbox.id}`);

    // An empty search from the results goes back to the list too.
    await search(page, tag);
    expect(await subjects(page)).to.have.length(4);
    await page.fill('#search', '');
    await page.press('#search', 'Enter');
    await page.locator('#messages li').first().waitFor({ timeout: 30_000 });
    expect(await inPage(page, 'location.hash')).to.equal(`#/inbox/${inbox.id}`);
  });

  it('says when nothing matches, a slip in the syntax, and the API refusing a condition', async () => {
    const page = a.page;
    await openInbox(page, inbox.id);
    await search(page, `subject:nothing${tag}`);
    expect(await page.locator('#search-status').textContent()).to.equal('No messages match.');
    expect(await page.locator('#search-results li').count()).to.equal(0);

    // Said under the box, without leaving the screen.
    const hash = await inPage<string>(page, 'location.hash');
    await page.fill('#search', 'body:kumquat');
    await page.press('#search', 'Enter');
    await page.locator('#search-problem', { hasText: 'Unknown search term "body:"' }).waitFor();
    expect(await inPage(page, 'location.hash')).to.equal(hash);
    await page.fill('#search', 'in:Nowhere');
    await page.press('#search', 'Enter');
    await page.locator('#search-problem', { hasText: 'This inbox has no label "Nowhere"' }).waitFor();

    // The API's own message for its 400.
    const refused = await call(`${s.base}/inboxes/${inbox.id}/search?subject=${encodeURIComponent('!!!')}`, { token });
    expect(refused.status).to.equal(400);
    const { error } = await json<{ error: string }>(refused);
    await search(page, 'subject:!!!');
    expect(await page.locator('#search-error').textContent()).to.equal(error);
    expect(await page.locator('#search-error').getAttribute('role')).to.equal('alert');
  });

  it('pages with the cursor: More results', async () => {
    const big = await p.inbox();
    await importMessages(big.imapUser, 'Projects', 55);
    const { Projects } = await labelIds(s, token, big.id);
    await listLabel(s, token, big.id, Projects!);
    const expected = await json<MessageSearchPage>(await call(`${s.base}/inboxes/${big.id}/search?subject=imported&limit=50`, { token }));
    const page = a.page;
    await openInbox(page, big.id);
    await search(page, 'imported');
    expect(await page.locator('#search-results li').count()).to.equal(50);
    expect(await page.locator('#search-status').textContent()).to.equal('50 messages so far.');
    expect(await subjects(page)).to.deep.equal(expected.messages.map((m) => m.subject));
    await page.click('#more-results');
    await page.locator('#search-status[data-found="55"]').waitFor({ timeout: 30_000 });
    expect(new Set(await subjects(page)).size).to.equal(55);
    expect(await page.locator('#more-results').count()).to.equal(0);
  });

  it('zero-access: metadata search finds sealed mail, which opens decrypted', async () => {
    const sealed = await ingressInbox(s, p.projectId, p.memberId, 'zero-access');
    const env = mailEnv();
    const transport = nodemailer.createTransport({ host: env.smtp.host, port: env.smtp.port, secure: false, ignoreTLS: true });
    try {
      await transport.sendMail({
        from: 'Dora Sealed <dora@example.org>',
        to: sealed.address,
        subject: `Secret plan ${tag}`,
        text: 'Only the browser reads this.',
      });
      await transport.sendMail({
        from: 'Eve Other <eve@example.org>',
        to: sealed.address,
        subject: `Other note ${tag}`,
        text: 'Not this one.',
      });
    } finally {
      transport.close();
    }
    const { INBOX } = await labelIds(s, token, sealed.id);
    await untilDelivered('both sealed deliveries', async () => (await listLabel(s, token, sealed.id, INBOX!)).length === 2, 60_000);
    const page = a.page;
    await openInbox(page, sealed.id);
    await search(page, `from:dora ${tag}`);
    expect(await subjects(page)).to.deep.equal([`Secret plan ${tag}`]);
    await page.locator('#search-results li a').click();
    await page.locator('#message-text', { hasText: 'Only the browser reads this.' }).waitFor({ timeout: 60_000 });
  });
});
