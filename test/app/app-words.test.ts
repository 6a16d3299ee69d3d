// The web app's words in real Chromium (docs/app.md, "Dates", "Labels", "Words on screen"): one date
// format on every screen (time today, weekday this week, short date before; the full date on hover
// and for screen readers), the unread count in the tab's title, labels by friendly names with icons
// and nested folders indented, and no internal word (prf, epoch, INBOX, an id) on any screen.
// Screenshots go to test-artifacts/app/ (git-ignored).
import { randomBytes } from 'node:crypto';
import { expect } from 'chai';
import type { Browser, Page } from 'playwright-core';
import { call, newProject, type TestInbox, type TestProject, type TestServer } from '../helpers/harness.ts';
import { enrollMember, go, inPage, launchChromium, newDevice, screenshot, startAppServer, type Device } from '../helpers/browser.ts';
import { append, mailApp, until } from '../helpers/mail-fixtures.ts';

const DAY = 24 * 60 * 60 * 1000;

/** A message dated `date` (the list shows the Date header's date). */
const dated = (subject: string, date: Date) =>
  [
    'From: Dora Dates <dora@example.org>',
    'To: someone@postern.test',
    `Subject: ${subject}`,
    `Date: ${date.toUTCString()}`,
    `Message-ID: <d${randomBytes(6).toString('hex')}@example.org>`,
    '',
    'Dated.',
    '',
  ].join('\r\n');

/**
 * Words of the app's insides that a member should never read: key-wrapping terms, the IMAP name
 * INBOX and special-use attributes, ids, event type names and field names.
 */
const INTERNAL = [
  /\bprf\b/i,
  /\bepochs?\b/i,
  /\bwrap(s|ped)?\b/i,
  /\b(kdf|scrypt|hkdf|dek)\b/i,
  /\bINBOX\b/,
  /\\(Sent|Drafts|Trash|Junk|Archive)\b/,
  /\b(msg|ibx|lbl|mem|ses)_[0-9A-Z]{26}\b/,
  /\b(containerid|msgId|labelId|wrappedDek|keyEpoch)\b/,
  /\b(message|mail|access)\.(received|added|removed|flags|delivery|content|key)\b/,
];

describe('web app: dates, labels and words (Chromium, virtual passkeys)', function () {
  this.timeout(180_000);
  let s: TestServer;
  let p: TestProject;
  let browser: Browser;
  let device: Device;
  let inbox: TestInbox;
  const tag = randomBytes(3).toString('hex');

  before(async () => {
    ({ s } = await startAppServer());
    p = await newProject(s);
    inbox = await p.inbox();
    browser = await launchChromium();
    device = await newDevice(browser, { prf: true });
    await enrollMember(device, (await s.postern.passkeys.invite(p.memberId)).link, 'words test passphrase');
    const app = await mailApp(inbox);
    try {
      // A minute ago (today), three days ago (this week), 400 days ago (another year).
      const now = Date.now();
      for (const [name, at] of [
        ['today', now - 60_000],
        ['week', now - 3 * DAY],
        ['old', now - 400 * DAY],
      ] as const) {
        const res = await app.append('INBOX', dated(`Dated ${tag} ${name}`, new Date(at)), []);
        if (!res) throw new Error('APPEND failed');
      }
      await app.mailboxCreate('Work');
      await app.mailboxCreate('Work/Clients');
      await append(app, 'Work/Clients', { subject: `Nested ${tag}` });
    } finally {
      await app.logout();
    }
  });
  after(async () => {
    await browser?.close();
    await s?.close();
  });
  afterEach(() => {
    expect(device.problems, 'CSP violations or page errors').to.deep.equal([]);
  });

  const openInbox = async (page: Page) => {
    await go(page, `#/inbox/${inbox.id}`);
    await page.locator('#live-status[data-live]').waitFor({ timeout: 30_000 });
  };

  /** The Activity screen once it lists events (the log's pages hold events a few seconds old). */
  const activity = async (page: Page) => {
    await go(page, '#/events');
    await until(
      'events listed',
      async () => {
        await page.locator('#events-position:not(:empty)').waitFor({ timeout: 60_000 });
        if ((await page.locator('#events li').count()) > 0) return true;
        await page.click('#events-refresh');
        return false;
      },
      60_000,
    );
  };

  /** A row's date: what it shows, what it says to a screen reader, its hover title and datetime. */
  const dateOf = (page: Page, selector: string) =>
    inPage<{ shown: string; said: string; title: string; datetime: string; hidden: string | null }>(
      page,
      `(() => {
        const t = document.querySelector(${JSON.stringify(selector)});
        const shown = t.querySelector('[aria-hidden=true]');
        return { shown: shown.textContent, hidden: shown.getAttribute('aria-hidden'), said: t.querySelector('.sr-only').textContent, title: t.getAttribute('title'), datetime: t.getAttribute('datetime') };
      })()`,
    );

  /** The date as the page's own Intl formats `iso` (the browser's locale and time zone). */
  const intl = (page: Page, iso: string, options: object) =>
    inPage<string>(page, `new Date(${JSON.stringify(iso)}).toLocaleString([], ${JSON.stringify(options)})`);

  it('one date format: time today, weekday this week, short date before; the full date on hover and for screen readers', async () => {
    const { page } = device;
    await openInbox(page);
    await until('the three listed', async () => (await page.locator('#messages li', { hasText: `Dated ${tag}` }).count()) === 3, 30_000);
    const select = async (name: string) => {
      const id = await page.locator('#messages li', { hasText: `Dated ${tag} ${name}` }).getAttribute('data-msg');
      return `#messages li[data-msg="${id}"] time`;
    };
    const today = await dateOf(page, await select('today'));
    const week = await dateOf(page, await select('week'));
    const old = await dateOf(page, await select('old'));
    for (const d of [today, week, old]) {
      expect(new Date(d.datetime).toISOString(), 'datetime is a valid date').to.equal(d.datetime);
      expect(d.title).to.equal(d.said);
      expect(d.hidden).to.equal('true');
      expect(d.said).to.equal(await intl(page, d.datetime, { dateStyle: 'full', timeStyle: 'short' }));
    }
    expect(today.shown).to.equal(await intl(page, today.datetime, { hour: 'numeric', minute: '2-digit' }));
    expect(week.shown).to.equal(await intl(page, week.datetime, { weekday: 'short' }));
    expect(old.shown).to.equal(await intl(page, old.datetime, { month: 'short', day: 'numeric', year: 'numeric' }));
    await screenshot(page, 'words-1-dates');

    // The same on the message screen, the Activity screen and the sessions on the home screen.
    await page
      .locator('#messages li', { hasText: `Dated ${tag} week` })
      .locator('a')
      .click();
    await page.locator('#message-date time').waitFor({ timeout: 60_000 });
    const shown = await dateOf(page, '#message-date time');
    expect(shown.shown).to.equal(week.shown);
    expect(shown.said).to.equal(week.said);
    await activity(page);
    const event = await dateOf(page, '#events li time');
    expect(event.title).to.equal(event.said);
    expect(event.shown).to.equal(await intl(page, event.datetime, { hour: 'numeric', minute: '2-digit' }));
    // No other way of writing a date is left in the app's screens: every <time> has the two forms.
    expect(await inPage<number>(page, "document.querySelectorAll('main time:not([title])').length")).to.equal(0);
  });

  it('the tab title counts unread mail in the inbox, and follows it live', async () => {
    const { page } = device;
    await openInbox(page);
    const unread = Number(await page.locator('#labels a[data-label]').first().locator('.count').getAttribute('data-unread'));
    expect(unread).to.be.greaterThan(0);
    expect(await page.title()).to.equal(`(${unread}) ${inbox.address} · Postern`);
    const app = await mailApp(inbox);
    try {
      await append(app, 'INBOX', { subject: `Title ${tag}` });
    } finally {
      await app.logout();
    }
    await until('the title counts it', async () => (await page.title()) === `(${unread + 1}) ${inbox.address} · Postern`, 30_000);
    await go(page, '#');
    await page.locator('#inboxes').waitFor();
    expect(await page.title()).to.equal('Postern');
  });

  it('labels by friendly names with icons, special-use ones by their role, nested folders indented', async () => {
    const { page } = device;
    await openInbox(page);
    const labels = await inPage<Array<{ name: string; icon: string; depth: string; indent: number }>>(
      page,
      `Array.from(document.querySelectorAll('#labels li')).map((li) => ({
        name: li.querySelector('.name').textContent,
        icon: li.querySelector('svg.icon').dataset.icon,
        depth: li.dataset.depth,
        indent: parseFloat(getComputedStyle(li).paddingInlineStart),
      }))`,
    );
    const byName = (n: string) => labels.find((l) => l.name === n);
    expect(labels[0]).to.include({ name: 'Inbox', icon: 'inbox', depth: '0' });
    for (const name of ['Sent', 'Drafts', 'Trash', 'Junk', 'Archive'])
      expect(byName(name), name).to.include({ icon: `\\${name}`, depth: '0' });
    expect(byName('Work')).to.include({ icon: 'folder', depth: '0' });
    expect(byName('Clients')).to.include({ icon: 'folder', depth: '1' });
    expect(byName('Clients')!.indent).to.be.greaterThan(byName('Work')!.indent);
    // The icons are decoration: hidden from screen readers, which hear the name.
    expect(await inPage<number>(page, "document.querySelectorAll('#labels svg:not([aria-hidden=true])').length")).to.equal(0);
    expect(await page.locator('#label-heading').textContent()).to.equal('Inbox');
    await page.locator('#labels a', { hasText: 'Clients' }).click();
    await page.locator('#label-heading', { hasText: 'Clients' }).waitFor({ timeout: 30_000 });
    await page.locator('#messages li', { hasText: `Nested ${tag}` }).waitFor({ timeout: 30_000 });
    await screenshot(page, 'words-2-labels');
  });

  it("each inbox's mode in plain words: what the server can and cannot read (GET /inboxes says which, an extension)", async () => {
    const { page } = device;
    const zero = await p.inbox({ mode: 'zero-access' });
    const res = await call(`${s.base}/inboxes`, { token: await p.token(['messages:read']) });
    const { inboxes } = (await res.json()) as { inboxes: Array<{ inboxId: string; mode?: string }> };
    expect(inboxes.find((i) => i.inboxId === inbox.id)?.mode).to.equal('compatible');
    expect(inboxes.find((i) => i.inboxId === zero.id)?.mode).to.equal('zero-access');
    await go(page, '#');
    await page.locator(`#inboxes li[data-inbox="${zero.id}"]`).waitFor({ timeout: 30_000 });
    expect(await page.locator(`#inboxes li[data-inbox="${inbox.id}"]`).innerText()).to.include('Standard');
    expect(await page.locator(`#inboxes li[data-inbox="${zero.id}"]`).innerText()).to.include('Private');
    await go(page, `#/inbox/${zero.id}`);
    await page.locator('#inbox-mode').waitFor({ timeout: 30_000 });
    expect(await page.locator('#inbox-mode').innerText()).to.match(
      /^Private inbox\. .*open only in your browser.*Senders, recipients, subjects and dates stay readable/,
    );
    await go(page, `#/inbox/${inbox.id}`);
    await page.locator('#inbox-mode', { hasText: 'Standard inbox.' }).waitFor({ timeout: 30_000 });
    expect(await page.locator('#inbox-mode').innerText()).to.include('The server can read these messages');
  });

  /** Internal words in the screen's visible text, names and titles. */
  const internalWords = async (page: Page) => {
    const text = await inPage<string>(
      page,
      `(() => {
        const main = document.querySelector('main');
        const attrs = Array.from(main.querySelectorAll('[aria-label], [title], [placeholder]')).flatMap((e) => ['aria-label', 'title', 'placeholder'].map((a) => e.getAttribute(a) ?? ''));
        return [document.title, main.innerText, ...attrs].join('\\n');
      })()`,
    );
    return INTERNAL.flatMap((re) => {
      const m = re.exec(text);
      return m ? [`${re}: …${text.slice(Math.max(0, m.index - 40), m.index + 40)}…`] : [];
    });
  };

  it('no internal words on any screen: home, inbox, message, search, compose, activity', async () => {
    const { page } = device;
    const screens: Array<[string, string, string]> = [
      ['home', '#', '#key-status'],
      ['inbox', `#/inbox/${inbox.id}`, '#live-status[data-live]'],
      ['search', `#/inbox/${inbox.id}/search/${encodeURIComponent(`Dated ${tag}`)}`, '#search-results li'],
      ['compose', `#/compose/${inbox.id}`, '#compose-to'],
    ];
    for (const [name, hash, ready] of screens) {
      await go(page, hash);
      await page.locator(ready).first().waitFor({ timeout: 60_000 });
      expect(await internalWords(page), name).to.deep.equal([]);
    }
    await activity(page);
    expect(await internalWords(page), 'activity').to.deep.equal([]);
    await go(page, `#/inbox/${inbox.id}`);
    await page
      .locator('#messages li', { hasText: `Dated ${tag} today` })
      .locator('a')
      .click();
    await page.locator('#message-text').waitFor({ timeout: 60_000 });
    expect(await internalWords(page), 'message').to.deep.equal([]);
    await screenshot(page, 'words-3-message');
  });
});
