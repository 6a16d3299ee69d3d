// The web app's open message in real Chromium, kept current by the inbox stream (docs/app.md,
// "Reading mail"): a flag a mail app changes shows without reopening, over the same stream the inbox
// screen reads; a message a mail app expunges says so; plaintext a mail app appends to a
// zero-access inbox shows "being secured" and opens by itself once Postern has sealed it; and the
// mail screens work from the keyboard and at 320 px.
import { randomBytes } from 'node:crypto';
import { expect } from 'chai';
import type { Browser, Page } from 'playwright-core';
import { newProject, type TestInbox, type TestProject, type TestServer } from '../helpers/harness.ts';
import { enrollMember, go, inPage, launchChromium, newDevice, screenshot, startAppServer, type Device } from '../helpers/browser.ts';
import { append, mailApp, until } from '../helpers/mail-fixtures.ts';

describe('web app: the open message stays live; sealing; keyboard and 320 px (Chromium)', function () {
  this.timeout(180_000);
  let s: TestServer;
  let p: TestProject;
  let browser: Browser;
  let device: Device;
  let compatible: TestInbox;
  let sealed: TestInbox;

  // Evaluated in the page (as text: this file is compiled without the DOM's types).

  before(async () => {
    ({ s } = await startAppServer());
    p = await newProject(s);
    compatible = await p.inbox();
    sealed = await p.inbox({ mode: 'zero-access' });
    browser = await launchChromium();
    device = await newDevice(browser, { prf: true });
    await enrollMember(device, (await s.postern.passkeys.invite(p.memberId)).link, 'live test passphrase');
  });
  after(async () => {
    await browser?.close();
    await s?.close();
  });
  afterEach(() => {
    expect(device.problems, 'CSP violations or page errors').to.deep.equal([]);
  });

  /** The inbox screen, live; then the row with this subject once it is listed. */
  const listed = async (page: Page, subject: string) => {
    const row = page.locator('#messages li', { hasText: subject });
    await row.waitFor({ timeout: 30_000 });
    return row;
  };
  const openInbox = async (page: Page, inbox: TestInbox) => {
    await go(page, `#/inbox/${inbox.id}`);
    await page.locator('#live-status[data-live]').waitFor({ timeout: 30_000 });
  };

  it("a mail app's flag change shows on the open message, over the inbox screen's stream; its removal is said", async () => {
    const { page } = device;
    const streams: string[] = [];
    const onRequest = (r: { url(): string }) => {
      if (r.url().endsWith(`/inboxes/${compatible.id}/events`)) streams.push(r.url());
    };
    page.on('request', onRequest);
    await openInbox(page, compatible);
    const subject = `Live flags ${randomBytes(3).toString('hex')}`;
    const app = await mailApp(compatible);
    try {
      const uid = await append(app, 'INBOX', { subject, body: 'Watch my flags.' });
      const row = await listed(page, subject);
      // Said to a screen reader as a count, not by reading the list over.
      await page.locator('#new-mail', { hasText: /^\d+ new messages? in Inbox since you opened it\.$/ }).waitFor();
      expect(await liveRegionProblems(page)).to.deep.equal([]);
      await row.locator('a').click();
      await page.locator('#message-text', { hasText: 'Watch my flags.' }).waitFor({ timeout: 60_000 });
      // Opening marked it seen (the app's own change, echoed by the stream).
      await page.locator('#flag-actions[data-flags~="seen"]').waitFor();
      // One stream for the inbox, shared by the two screens: the message screen opened none of its own.
      expect(streams, 'inbox stream requests').to.have.length(1);

      await app.mailboxOpen('INBOX');
      await app.messageFlagsAdd(String(uid), ['\\Flagged'], { uid: true });
      await page.locator('#flag-actions[data-flags~="flagged"]').waitFor({ timeout: 30_000 });
      expect(await page.locator('#toggle-flagged').getAttribute('aria-pressed')).to.equal('true');
      await app.messageFlagsRemove(String(uid), ['\\Seen'], { uid: true });
      await page.locator('#flag-actions:not([data-flags~="seen"])').waitFor({ timeout: 30_000 });
      expect(await page.locator('#toggle-seen').getAttribute('aria-pressed')).to.equal('false');

      await app.messageDelete(String(uid), { uid: true });
      await page.locator('#message-removed').waitFor({ timeout: 30_000 });
      expect(await page.locator('#message-removed').getAttribute('role')).to.equal('alert');
      // What was open stays readable; its flags can no longer be changed.
      expect(await page.locator('#message-text').textContent()).to.include('Watch my flags.');
      expect(await page.locator('#flag-actions').count()).to.equal(0);
      await screenshot(page, 'live-1-removed');
    } finally {
      page.off('request', onRequest);
      await app.logout();
    }
  });

  /** Holds Postern's re-sealing until `release()`, so the page is seen in the state before it. */
  const holdResealing = () => {
    const resealer = s.postern.resealer as unknown as { replacer: { replace: (...args: unknown[]) => Promise<boolean> } };
    const replace = resealer.replacer.replace;
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const hold = { held: 0, release, restore: () => ((resealer.replacer.replace = replace), release()) };
    resealer.replacer.replace = async function (this: unknown, ...args: unknown[]) {
      hold.held++;
      await gate;
      return replace.apply(this, args);
    };
    return hold;
  };

  /** The sealing state on screen, then the sealed copy opened by itself once the re-seal runs. */
  const sealsAndOpens = async (page: Page, hold: ReturnType<typeof holdResealing>, subject: string, body: string, plaintextId: string) => {
    await page.locator('#sealing').waitFor({ timeout: 30_000 });
    expect(await page.locator('#sealing').textContent()).to.match(/being secured.*open in a moment/);
    await page.locator('main h1', { hasText: subject }).waitFor();
    // The API's 422 is not shown as an error.
    expect(await page.locator('#error:visible, .error:visible').count()).to.equal(0);
    hold.release();
    await page.locator('#message-text', { hasText: body }).waitFor({ timeout: 60_000 });
    const openedId = /\/message\/(msg_[0-9A-Z]+)$/.exec(await inPage<string>(page, 'location.hash'))?.[1];
    expect(openedId).to.be.a('string').and.not.equal(plaintextId);
    expect(await page.locator('#message-subject').textContent()).to.equal(subject);
    expect(await page.locator('#error').count()).to.equal(0);
  };

  it('plaintext a mail app appends to a zero-access inbox says it is being secured, then opens sealed by itself', async () => {
    const { page } = device;
    const hold = holdResealing();
    const app = await mailApp(sealed);
    try {
      await openInbox(page, sealed);
      const subject = `Appended plaintext ${randomBytes(3).toString('hex')}`;
      await append(app, 'INBOX', { subject, body: 'Sealed in a moment.' });
      const row = await listed(page, subject);
      const plaintextId = (await row.getAttribute('data-msg'))!;
      await until('the re-seal held', async () => hold.held > 0, 30_000);
      await row.locator('a').click();
      await page.locator('#sealing').waitFor({ timeout: 30_000 });
      await screenshot(page, 'live-2-sealing');
      await sealsAndOpens(page, hold, subject, 'Sealed in a moment.', plaintextId);
    } finally {
      hold.restore();
      await app.logout();
    }
  });

  it('the same from a link to the plaintext, with no list shown: its listing is found by label', async () => {
    const { page } = device;
    const hold = holdResealing();
    const app = await mailApp(sealed);
    try {
      // The zero-access inbox's own list is not the last one shown: the compatible inbox's is.
      await openInbox(page, sealed);
      const subject = `Linked plaintext ${randomBytes(3).toString('hex')}`;
      await append(app, 'INBOX', { subject, body: 'Opened from a link.' });
      const plaintextId = (await (await listed(page, subject)).getAttribute('data-msg'))!;
      await until('the re-seal held', async () => hold.held > 0, 30_000);
      await openInbox(page, compatible);
      await go(page, `#/inbox/${sealed.id}/message/${plaintextId}`);
      await sealsAndOpens(page, hold, subject, 'Opened from a link.', plaintextId);
    } finally {
      hold.restore();
      await app.logout();
    }
  });

  /** Every control that Tab can reach from the page's heading, in order, until it comes round again. */
  const tabWalk = async (page: Page): Promise<string[]> => {
    await inPage(page, "document.querySelector('main h1').focus()");
    const seen: string[] = [];
    for (let i = 0; i < 80; i++) {
      await page.keyboard.press('Tab');
      const key = await inPage<string>(
        page,
        `(() => { const e = document.activeElement; if (!e || e === document.body) return ''; e.dataset.walk ??= String(Math.random()); return e.dataset.walk; })()`,
      );
      // Past the last control focus leaves the page once, then comes round to the first. A
      // control with parts of its own (a date and time input: day, month, year, hour, minute)
      // keeps the focus for several presses.
      if (key === '' || key === seen.at(-1)) continue;
      if (seen.includes(key)) break;
      seen.push(key);
    }
    return seen;
  };

  /** The page's controls that have no accessible name, or that Tab did not reach (unless disabled). */
  const controlProblems = async (page: Page, reached: string[]) =>
    inPage<string[]>(
      page,
      `(() => {
      const reached = new Set(${JSON.stringify(reached)});
      const problems = [];
      const name = (e) => (e.getAttribute('aria-label') || (e.labels && Array.from(e.labels).map((l) => l.textContent).join(' ')) || e.getAttribute('title') || e.textContent || '').trim();
      for (const e of document.querySelectorAll('a[href], button, input, select, textarea, iframe, [tabindex]:not([tabindex="-1"])')) {
        if (e.closest('[hidden]') || e.getClientRects().length === 0) continue;
        // The message list is one tab stop (a roving tabindex): its other rows are reached with the arrow keys.
        if (e.closest('[data-one-tab-stop]') && e.getAttribute('tabindex') === '-1') continue;
        const what = e.outerHTML.slice(0, 80);
        if (!name(e)) problems.push('no name: ' + what);
        // A disabled control is out of the Tab order by design (Activity's Newer on the first page).
        if (!reached.has(e.dataset.walk) && !e.disabled) problems.push('not reached by Tab: ' + what);
      }
      return problems;
    })()`,
    );

  const visibleFocus = (page: Page) =>
    inPage<boolean>(
      page,
      `(() => { const s = getComputedStyle(document.activeElement); return s.outlineStyle !== 'none' && parseFloat(s.outlineWidth) >= 2; })()`,
    );
  const fits = (page: Page) => inPage<boolean>(page, 'document.documentElement.scrollWidth <= window.innerWidth');

  /**
   * Live regions that hold more than a status message: a screen reader reads out every change in
   * one, so a region around headings, lists or controls reads the screen over as it changes.
   */
  const liveRegionProblems = (page: Page) =>
    inPage<string[]>(
      page,
      `(() => {
      const problems = [];
      for (const e of document.querySelectorAll('[aria-live]:not([aria-live="off"]), [role="status"], [role="alert"], [role="log"]')) {
        const what = e.outerHTML.slice(0, 80);
        if (e.matches('main, body')) problems.push('the page is live: ' + what);
        const inside = e.querySelector('h1, h2, h3, h4, h5, h6, ul, ol, table, form, button, input, select, textarea, iframe');
        if (inside) problems.push('live around ' + inside.tagName.toLowerCase() + ': ' + what);
      }
      return problems;
    })()`,
    );

  /** The screen's checks at 320 px: it fits, Tab reaches every control and each has a name, and its live regions are status messages. */
  const screenChecks = async (page: Page, what: string) => {
    expect(await fits(page), `${what} fits 320 px`).to.equal(true);
    expect(await controlProblems(page, await tabWalk(page)), what).to.deep.equal([]);
    expect(await liveRegionProblems(page), what).to.deep.equal([]);
  };

  it('the mail screens: every control reached by Tab and named, rows walked with arrow keys, focus visible, nothing overflows at 320 px', async () => {
    const { page } = device;
    const tag = randomBytes(3).toString('hex');
    const app = await mailApp(compatible);
    try {
      for (let n = 1; n <= 3; n++)
        await append(app, 'INBOX', {
          subject: `Keyboard ${tag} ${n} with a rather long subject line that has to wrap on a phone`,
          from: `A Very Long Sender Name Indeed <a.very.long.sender.address.${tag}@subdomain.example.org>`,
        });
    } finally {
      await app.logout();
    }
    await page.setViewportSize({ width: 320, height: 700 });
    try {
      await openInbox(page, compatible);
      await until(
        'the three listed',
        async () => (await page.locator('#messages li', { hasText: `Keyboard ${tag}` }).count()) === 3,
        30_000,
      );
      await screenChecks(page, 'the inbox');

      // New mail changes the label's count under a keyboard user's focus: the focus stays put.
      const current = "document.querySelector('#labels a[aria-current=page]')";
      await inPage(page, `${current}.focus()`);
      const unread = Number(await page.locator('#labels a[aria-current="page"] .count').getAttribute('data-unread'));
      const another = await mailApp(compatible);
      try {
        await append(another, 'INBOX', { subject: `Keyboard ${tag} count` });
      } finally {
        await another.logout();
      }
      await page.locator(`#labels a[aria-current="page"] .count[data-unread="${unread + 1}"]`).waitFor({ timeout: 30_000 });
      expect(await inPage<boolean>(page, `document.activeElement === ${current}`), 'focus stays on the label').to.equal(true);

      // Tab to the first row, then the arrow keys, Home and End walk the rows.
      await inPage(page, "document.querySelector('main h1').focus()");
      for (
        let i = 0;
        i < 40 && !(await inPage<boolean>(page, "document.activeElement === document.querySelector('#messages li.message > a')"));
        i++
      )
        await page.keyboard.press('Tab');
      const focusedRow = () =>
        inPage<number>(page, "Array.from(document.querySelectorAll('#messages li.message > a')).indexOf(document.activeElement)");
      expect(await focusedRow()).to.equal(0);
      expect(await visibleFocus(page), 'focus is visible on a row').to.equal(true);
      await page.keyboard.press('ArrowDown');
      expect(await focusedRow()).to.equal(1);
      await page.keyboard.press('ArrowDown');
      expect(await focusedRow()).to.equal(2);
      await page.keyboard.press('ArrowUp');
      expect(await focusedRow()).to.equal(1);
      const rows = await page.locator('#messages li.message').count();
      await page.keyboard.press('End');
      expect(await focusedRow()).to.equal(rows - 1);
      await page.keyboard.press('Home');
      expect(await focusedRow()).to.equal(0);
      expect(await inPage(page, "document.querySelector('#messages').getAttribute('aria-describedby')")).to.equal('messages-hint');
      await screenshot(page, 'live-3-inbox-320');

      // Enter opens the focused row; the message screen too is all reachable, named, and fits.
      await page.keyboard.press('Enter');
      await page.locator('#message-text').waitFor({ timeout: 60_000 });
      await page.locator('#flag-actions[data-flags~="seen"]').waitFor();
      await screenChecks(page, 'the message');
      await inPage(page, "document.querySelector('main h1').focus()");
      for (let i = 0; i < 20 && !(await inPage<boolean>(page, "document.activeElement?.id === 'toggle-flagged'")); i++)
        await page.keyboard.press('Tab');
      expect(await visibleFocus(page), 'focus is visible on a toggle').to.equal(true);
      await page.keyboard.press('Space');
      await page.locator('#flag-actions[data-flags~="flagged"]').waitFor();
      await screenshot(page, 'live-4-message-320');
    } finally {
      await page.setViewportSize({ width: 1024, height: 800 });
    }
  });

  it('compose and activity: every control reached by Tab and named, focus visible, nothing overflows at 320 px; status messages are said', async () => {
    const { page } = device;
    await page.setViewportSize({ width: 320, height: 700 });
    try {
      await go(page, `#/compose/${compatible.id}`);
      await page.locator('#compose-to').waitFor({ timeout: 30_000 });
      await screenChecks(page, 'compose');
      await inPage(page, "document.querySelector('main h1').focus()");
      for (let i = 0; i < 20 && !(await inPage<boolean>(page, "document.activeElement?.id === 'compose-to'")); i++)
        await page.keyboard.press('Tab');
      expect(await visibleFocus(page), 'focus is visible in a field').to.equal(true);
      // Whether it sent or not is a status message, said where it is shown.
      expect(await page.locator('#compose-status').getAttribute('role')).to.equal('status');
      await screenshot(page, 'live-5-compose-320');

      await go(page, '#/events');
      await page.locator('#events').waitFor({ timeout: 60_000 });
      await page.locator('#events-position:not(:empty)').waitFor();
      await screenChecks(page, 'activity');
      expect(await page.locator('#events-position').getAttribute('role')).to.equal('status');
      await inPage(page, "document.querySelector('main h1').focus()");
      await page.keyboard.press('Tab');
      expect(await visibleFocus(page), 'focus is visible on the first control').to.equal(true);
      await screenshot(page, 'live-6-activity-320');
    } finally {
      await page.setViewportSize({ width: 1024, height: 800 });
    }
  });
});
