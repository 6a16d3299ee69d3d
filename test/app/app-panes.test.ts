// The web app's panes, actions and keyboard in real Chromium (docs/app.md, "Panes", "Actions",
// "Keyboard"): three panes on a wide screen, one at a time at 360 and 320 px; opening a message
// keeps the list live and in place, and going back restores its scroll, focus and pages; archive,
// delete, junk, move, read and flag on one message or a selection, answered at once, with Undo;
// a keyboard-only triage of 20 messages with focus never lost; the shortcuts' help and the setting
// that turns them off; sign-in landing in the last inbox used. Mail is seeded with IMAP APPEND.
import { randomBytes } from 'node:crypto';
import { expect } from 'chai';
import type { Browser, Page } from 'playwright-core';
import { call, newProject, type TestInbox, type TestProject, type TestServer } from '../helpers/harness.ts';
import { enrollMember, go, inPage, launchChromium, newDevice, screenshot, startAppServer, type Device } from '../helpers/browser.ts';
import { append, importMessages, mailApp, until } from '../helpers/mail-fixtures.ts';
import { axeViolations } from '../helpers/axe.ts';
import { labelIds, listLabel } from '../helpers/send-fixtures.ts';

describe('web app: panes, actions and keyboard (Chromium)', function () {
  this.timeout(240_000);
  let s: TestServer;
  let p: TestProject;
  let browser: Browser;
  let device: Device;
  let token: string;

  before(async () => {
    ({ s } = await startAppServer());
    p = await newProject(s);
    token = await p.token(['messages:read']);
    browser = await launchChromium();
    device = await newDevice(browser, { prf: true });
    await device.page.setViewportSize({ width: 1280, height: 800 });
    await enrollMember(device, (await s.postern.passkeys.invite(p.memberId)).link, 'panes test passphrase');
  });
  after(async () => {
    await browser?.close();
    await s?.close();
  });
  afterEach(() => {
    expect(device.problems, 'CSP violations or page errors').to.deep.equal([]);
  });

  /** An inbox with `n` messages in INBOX, "<tag> 1" oldest to "<tag> n" newest. */
  const seeded = async (n: number, tag: string): Promise<TestInbox> => {
    const inbox = await p.inbox();
    const app = await mailApp(inbox);
    try {
      for (let i = 1; i <= n; i++) await append(app, 'INBOX', { subject: `${tag} ${i}` });
    } finally {
      await app.logout();
    }
    return inbox;
  };
  const openInbox = async (page: Page, inbox: TestInbox, rows: number) => {
    await go(page, `#/inbox/${inbox.id}`);
    await page.locator('#live-status[data-live]').waitFor({ timeout: 30_000 });
    await until('the rows listed', async () => (await page.locator('#messages li.message').count()) === rows, 30_000);
  };
  /** The subject of the row focus is on, or null when focus is not on a row of the list. */
  const focusedRow = (page: Page) =>
    inPage<string | null>(
      page,
      `(() => { const a = document.activeElement; return a && a.matches('#messages li.message > a') ? a.querySelector('.subject').textContent : null; })()`,
    );
  const subjects = async (inboxId: string, name: string) => {
    const ids = await labelIds(s, token, inboxId);
    return (await listLabel(s, token, inboxId, ids[name]!)).map((m) => m.subject);
  };
  const fits = (page: Page) => inPage<boolean>(page, 'document.documentElement.scrollWidth <= window.innerWidth');

  it('three panes; a message opens beside the list, which stays live and in place; back restores scroll, focus and pages; sign-in lands there', async () => {
    const { page } = device;
    const tag = `Panes ${randomBytes(3).toString('hex')}`;
    const inbox = await seeded(60, tag);
    await openInbox(page, inbox, 50);
    // The end of the list coming into view loads the next page (docs/app.md, "Large labels").
    await until('the second page', async () => {
      await inPage(page, "document.getElementById('older')?.scrollIntoView()");
      return (await page.locator('#messages li.message').count()) === 60;
    });

    // Labels | list | reading pane, side by side.
    const boxes = await inPage<number[]>(
      page,
      `['.pane-labels', '.pane-list', '.pane-reader'].map((s) => document.querySelector(s).getBoundingClientRect().left)`,
    );
    expect(boxes[0]).to.be.below(boxes[1]!);
    expect(boxes[1]).to.be.below(boxes[2]!);
    await inPage(page, `document.querySelector('#messages').dataset.mark = 'same list'`);

    // Scrolled down the list, a row opens in the reading pane.
    const row = page.locator('#messages li.message', { has: page.locator('.subject', { hasText: new RegExp(`^${tag} 5$`) }) });
    await row.scrollIntoViewIfNeeded();
    const scrolled = await inPage<number>(page, `document.querySelector('.pane-list').scrollTop`);
    expect(scrolled).to.be.above(100);
    // Where the row is on screen: mail arriving above it must not move it (scroll anchoring).
    const rowTop = () => row.evaluate((el) => (el as unknown as { getBoundingClientRect(): { top: number } }).getBoundingClientRect().top);
    const top = await rowTop();
    await row.locator('a').click();
    await page.locator('#message-subject', { hasText: `${tag} 5` }).waitFor({ timeout: 60_000 });
    expect(await inPage(page, 'document.activeElement?.id')).to.equal('message-subject');
    expect(await page.locator('#messages[data-mark="same list"] li.message').count()).to.equal(60);
    await screenshot(page, 'panes-1-three-panes');

    // The list stays live under the open message.
    const app = await mailApp(inbox);
    try {
      await append(app, 'INBOX', { subject: `${tag} live` });
    } finally {
      await app.logout();
    }
    await page.locator('#messages li.message', { hasText: `${tag} live` }).waitFor({ timeout: 30_000 });
    expect(await page.locator('#message-subject').textContent()).to.equal(`${tag} 5`);

    // Back (u): the pane closes; the same list, its pages, its scroll, focus on the row opened.
    await page.keyboard.press('u');
    await page.locator('#panes[data-pane="list"]').waitFor();
    expect(await focusedRow(page)).to.equal(`${tag} 5`);
    expect(await page.locator('#messages[data-mark="same list"] li.message').count()).to.equal(61);
    expect(await rowTop()).to.be.closeTo(top, 2);
    // The browser's Back does the same.
    await row.locator('a').click();
    await page.locator('#message-subject', { hasText: `${tag} 5` }).waitFor({ timeout: 60_000 });
    await page.goBack();
    await page.locator('#panes[data-pane="list"]').waitFor();
    expect(await focusedRow(page)).to.equal(`${tag} 5`);
    expect(await page.locator('#messages[data-mark="same list"] li.message').count()).to.equal(61);

    // Signed out and in again: the last inbox used, not the home screen.
    await go(page, '#');
    await page.click('#sign-out');
    await page.click('#sign-in');
    await page.locator('#messages li.message', { hasText: `${tag} live` }).waitFor({ timeout: 60_000 });
    expect(await inPage(page, 'location.hash')).to.equal(`#/inbox/${inbox.id}`);
  });

  for (const width of [360, 320]) {
    it(`${width} px: one pane at a time, nothing scrolls sideways, tap targets of 24 px; back restores the page's scroll`, async () => {
      const { page } = device;
      const tag = `Phone ${width} ${randomBytes(3).toString('hex')}`;
      const inbox = await seeded(30, tag);
      await page.setViewportSize({ width, height: 700 });
      try {
        await openInbox(page, inbox, 30);
        expect(await fits(page), 'the list fits').to.equal(true);
        const small = await inPage<string[]>(
          page,
          `Array.from(document.querySelectorAll('#messages li.message > a, #messages input, #labels a, main button, #select-all'))
            .filter((e) => e.getClientRects().length > 0)
            .filter((e) => { const r = e.getBoundingClientRect(); return r.width < 24 || r.height < 24; })
            .map((e) => e.outerHTML.slice(0, 60))`,
        );
        expect(small, 'tap targets under 24 px').to.deep.equal([]);
        expect(await inPage(page, `getComputedStyle(document.querySelector('.pane-reader')).display`)).to.equal('none');
        await screenshot(page, `panes-2-list-${width}`);

        const row = page.locator('#messages li.message', { hasText: `${tag} 8` }).first();
        await row.scrollIntoViewIfNeeded();
        const y = await inPage<number>(page, 'window.scrollY');
        expect(y).to.be.above(200);
        await row.locator('a').click();
        await page.locator('#message-subject', { hasText: `${tag} 8` }).waitFor({ timeout: 60_000 });
        // One pane: the message alone.
        expect(await inPage(page, `getComputedStyle(document.querySelector('.pane-list')).display`)).to.equal('none');
        expect(await fits(page), 'the message fits').to.equal(true);
        await screenshot(page, `panes-3-message-${width}`);
        await page.click('#back');
        await page.locator('#panes[data-pane="list"]').waitFor();
        expect(await focusedRow(page)).to.equal(`${tag} 8`);
        expect(await inPage<number>(page, 'window.scrollY')).to.be.closeTo(y, 40);
      } finally {
        await page.setViewportSize({ width: 1280, height: 800 });
      }
    });
  }

  it('actions: a selection archived, deleted, moved, flagged at once; Undo puts it back; junk and not junk', async () => {
    const { page } = device;
    const tag = `Acts ${randomBytes(3).toString('hex')}`;
    const inbox = await seeded(8, tag);
    await openInbox(page, inbox, 8);
    const select = async (...ns: number[]) => {
      for (const n of ns)
        await page
          .locator('#messages li.message', { hasText: `${tag} ${n}` })
          .locator('input.select')
          .check();
    };
    const listed = () => page.locator('#messages li.message .subject').allTextContents();

    // Archive two: gone from the list at once, in Archive on the server.
    await select(8, 7);
    expect(await page.locator('#selected-count').textContent()).to.equal('2 selected');
    await page.click('#bulk-archive');
    expect(await listed()).to.not.include.members([`${tag} 8`, `${tag} 7`]);
    await page.locator('#undo-status', { hasText: 'Archived 2 messages.' }).waitFor();
    await until('archived on the server', async () => (await subjects(inbox.id, 'Archive')).length === 2, 30_000);
    await screenshot(page, 'panes-4-undo');
    // Undo: back in the list and in INBOX.
    await page.click('#undo');
    await until('back in the list', async () => (await listed()).includes(`${tag} 8`));
    await until('back in INBOX', async () => (await subjects(inbox.id, 'INBOX')).includes(`${tag} 8`), 30_000);
    expect(await subjects(inbox.id, 'Archive')).to.deep.equal([]);
    // No row twice once the stream has said its piece.
    await until('the Undo settled', async () => (await page.locator('#undo-status', { hasText: 'Undone.' }).count()) === 1);
    expect((await listed()).filter((t) => t === `${tag} 8`)).to.have.length(1);

    // Delete one (to Trash), flag two, move one to Junk and back.
    await select(6);
    await page.click('#bulk-trash');
    await until('in Trash', async () => (await subjects(inbox.id, 'Trash')).includes(`${tag} 6`), 30_000);
    await select(5, 4);
    await page.click('#bulk-flag');
    await page.locator('#messages li.flagged', { hasText: `${tag} 4` }).waitFor();
    await until(
      'flagged on the server',
      async () => {
        const ids = await labelIds(s, token, inbox.id);
        const flagged = (await listLabel(s, token, inbox.id, ids.INBOX!)).filter((m) => m.flags.includes('flagged'));
        return flagged.length === 2;
      },
      30_000,
    );
    // Still selected after the flag: clear, then junk one.
    await page.click('#bulk-clear');
    await select(3);
    await page.click('#bulk-junk');
    await until('in Junk', async () => (await subjects(inbox.id, 'Junk')).includes(`${tag} 3`), 30_000);
    await page.locator('#labels a', { hasText: 'Junk' }).click();
    await page.locator('#label-heading', { hasText: 'Junk' }).waitFor();
    await page
      .locator('#messages li.message', { hasText: `${tag} 3` })
      .locator('input.select')
      .check();
    expect(await page.locator('#bulk-junk').textContent()).to.equal('Not junk');
    await page.click('#bulk-junk');
    await until('not junk: back in INBOX', async () => (await subjects(inbox.id, 'INBOX')).includes(`${tag} 3`), 30_000);

    // From the reading pane: Archive closes it onto the next row.
    await page.locator('#labels a', { hasText: 'Inbox' }).click();
    await page.locator('#label-heading', { hasText: 'Inbox' }).waitFor();
    await page
      .locator('#messages li.message', { hasText: `${tag} 2` })
      .locator('a')
      .click();
    await page.locator('#message-subject', { hasText: `${tag} 2` }).waitFor({ timeout: 60_000 });
    await page.click('#msg-archive');
    await page.locator('#panes[data-pane="list"]').waitFor();
    expect(await focusedRow(page)).to.equal(`${tag} 1`);
    await until('archived from the pane', async () => (await subjects(inbox.id, 'Archive')).includes(`${tag} 2`), 30_000);
  });

  it('keyboard only: 20 messages triaged (archive, delete, flag) in at most 45 keys, focus never lost; Undo with z', async () => {
    const { page } = device;
    const tag = `Triage ${randomBytes(3).toString('hex')}`;
    const inbox = await seeded(20, tag);
    await openInbox(page, inbox, 20);
    let keys = 0;
    const press = async (key: string) => {
      keys++;
      await page.keyboard.press(key);
    };
    // From the screen's heading, j goes into the list (its one tab stop, on the first row).
    expect(await inPage(page, 'document.activeElement?.tagName')).to.equal('H1');
    await press('j');
    expect(await focusedRow(page)).to.equal(`${tag} 20`);
    const plan: string[] = [];
    for (let n = 20; n >= 1; n--) plan.push(n % 3 === 0 ? 'e' : n % 3 === 1 ? '#' : 's');
    for (const [i, key] of plan.entries()) {
      const n = 20 - i;
      expect(await focusedRow(page), `focus before ${key} on ${n}`).to.equal(`${tag} ${n}`);
      await press(key === '#' ? 'Shift+#' : key);
      if (key === 's') {
        await page
          .locator('#messages li.flagged', { hasText: `${tag} ${n}` })
          .first()
          .waitFor();
        if (n > 1) await press('j');
      }
      expect(await focusedRow(page), `focus after ${key} on ${n}`).to.not.equal(null);
    }
    expect(keys).to.be.at.most(45);
    const archived = plan.filter((k) => k === 'e').length;
    const trashed = plan.filter((k) => k === '#').length;
    await until('archived', async () => (await subjects(inbox.id, 'Archive')).length === archived, 30_000);
    await until('trashed', async () => (await subjects(inbox.id, 'Trash')).length === trashed, 30_000);
    // The index sees a move's copy in one folder and its expunge in the other as two changes, and
    // the flags the app sent after the moves may land after them: wait for the whole outcome.
    const ids = await labelIds(s, token, inbox.id);
    let left = await listLabel(s, token, inbox.id, ids.INBOX!);
    const settled = () => left.length === 20 - archived - trashed && left.every((m) => m.flags.includes('flagged'));
    await until(
      'the rest left in the inbox, each flagged',
      async () => {
        left = await listLabel(s, token, inbox.id, ids.INBOX!);
        return settled();
      },
      60_000,
    ).catch(() => undefined);
    expect(
      left.map((m) => `${m.subject}: ${m.flags.includes('flagged') ? 'flagged' : 'not flagged'}`),
      'what is left in the inbox, each flagged',
    ).to.have.members(plan.flatMap((k, i) => (k === 's' ? [`${tag} ${20 - i}: flagged`] : [])));

    // z undoes the last archive: the row is back and focused.
    const before = await focusedRow(page);
    await press('e');
    await until('archived', async () => (await subjects(inbox.id, 'Archive')).length === archived + 1, 30_000);
    await press('z');
    await until('undone', async () => (await subjects(inbox.id, 'Archive')).length === archived, 30_000);
    expect(await focusedRow(page)).to.equal(before);
  });

  it('? shows every shortcut; single-key shortcuts can be turned off (WCAG 2.1.4); the arrow keys stay', async () => {
    const { page } = device;
    const tag = `Keys ${randomBytes(3).toString('hex')}`;
    const inbox = await seeded(3, tag);
    await openInbox(page, inbox, 3);
    await inPage(page, "document.querySelector('#messages li.message > a').focus()");
    await page.keyboard.press('Shift+?');
    await page.locator('#shortcuts-help[open]').waitFor();
    expect(await page.locator('#shortcuts-help dt').count()).to.be.above(10);
    await screenshot(page, 'panes-5-shortcuts');
    await page.uncheck('#shortcuts-on');
    await page.keyboard.press('Escape');
    await until('closed', async () => (await page.locator('#shortcuts-help[open]').count()) === 0);
    expect(await focusedRow(page), 'focus back on the row').to.equal(`${tag} 3`);
    // Off: e does nothing; the arrow key after it moves (the keys were read).
    await page.keyboard.press('e');
    await page.keyboard.press('ArrowDown');
    expect(await focusedRow(page)).to.equal(`${tag} 2`);
    expect(await page.locator('#messages li.message').count()).to.equal(3);
    expect(await page.locator('#undo-bar:not([hidden]) #undo-status', { hasText: 'Archived' }).count()).to.equal(0);
    // On again from the button (the setting is reachable without shortcuts).
    await page.click('#shortcuts');
    await page.check('#shortcuts-on');
    await page.click('#shortcuts-close');
    // Closed, the dialog gives focus back to the button that opened it.
    await until('focus back on the button', () => inPage<boolean>(page, "document.activeElement?.id === 'shortcuts'"));
    await inPage(page, "document.querySelectorAll('#messages li.message > a')[1].focus()");
    await page.keyboard.press('j');
    expect(await focusedRow(page)).to.equal(`${tag} 1`);
  });
  it('conversations: grouped by thread, one row each; a thread opens with read messages collapsed and the newest unread expanded', async () => {
    const { page } = device;
    const tag = `Thread ${randomBytes(3).toString('hex')}`;
    const inbox = await p.inbox();
    const app = await mailApp(inbox);
    const raw = (n: number, parent?: string) =>
      [
        'From: Ann <ann@example.org>',
        'To: someone@postern.test',
        `Subject: ${n === 1 ? '' : 'Re: '}${tag}`,
        `Date: ${new Date(Date.now() - (10 - n) * 60_000).toUTCString()}`,
        `Message-ID: <${tag.replace(' ', '.')}.${n}@example.org>`,
        ...(parent ? [`In-Reply-To: ${parent}`, `References: ${parent}`] : []),
        '',
        `Part ${n} of the conversation.`,
        '',
      ].join('\r\n');
    const inboxLabel = (await labelIds(s, token, inbox.id)).INBOX!;
    // Back to back, as a mail app appends a conversation: however many of it each sync pass finds,
    // the index places the three in one thread (test/mail/threads.test.ts tests its linking).
    try {
      await app.append('INBOX', raw(1), ['\\Seen']);
      await app.append('INBOX', raw(2, `<${tag.replace(' ', '.')}.1@example.org>`), ['\\Seen']);
      await app.append('INBOX', raw(3, `<${tag.replace(' ', '.')}.2@example.org>`));
      await append(app, 'INBOX', { subject: `${tag} alone` });
    } finally {
      await app.logout();
    }
    // The index links the three as it places them: first the API's own collapsed list says so.
    let collapsed: Array<{ subject?: string; threadId?: string }> = [];
    await until(
      'the API lists one row for the thread',
      async () => {
        const res = await call(`${s.base}/inboxes/${inbox.id}/labels/${inboxLabel}/messages?limit=100&collapseThreads=true`, { token });
        collapsed = ((await res.json()) as { messages: typeof collapsed }).messages;
        return collapsed.length === 2;
      },
      60_000,
    ).catch((err: Error) => {
      throw new Error(`${err.message}: ${JSON.stringify(collapsed.map((m) => [m.subject, m.threadId]))}`);
    });
    await openInbox(page, inbox, 4);
    await page.check('#group-threads');
    try {
      // The index links the three as it places them: the list is read again until it has.
      await until(
        'grouped',
        async () => {
          if ((await page.locator('#messages li.message').count()) === 2) return true;
          await go(page, `#/inbox/${inbox.id}/label/lbl_00000000000000000000000000`);
          await go(page, `#/inbox/${inbox.id}`);
          await page.locator('#live-status[data-live]').waitFor({ timeout: 30_000 });
          return false;
        },
        60_000,
      );
      await page.locator('#messages li.message .thread-count', { hasText: '(3)' }).waitFor();
      await page
        .locator('#messages li.message', { has: page.locator('.thread-count') })
        .locator('a')
        .click();
      await page.locator('#thread-subject', { hasText: tag }).waitFor({ timeout: 60_000 });
      expect(await page.locator('#thread li.thread-message').count()).to.equal(3);
      expect(
        await page
          .locator('#thread li.thread-message')
          .evaluateAll((els) => els.map((e) => (e as unknown as { dataset: { expanded: string } }).dataset.expanded)),
      ).to.deep.equal(['false', 'false', 'true']);
      await page.locator('#thread .thread-body:not([hidden]) pre', { hasText: 'Part 3 of the conversation.' }).waitFor({ timeout: 60_000 });
      expect(await page.locator('#thread .thread-body[hidden]').count()).to.equal(2);
      await screenshot(page, 'panes-6-conversation');
      // A read one expands on demand.
      await page.locator('#thread li.thread-message').first().locator('button.thread-toggle').click();
      await page.locator('#thread pre', { hasText: 'Part 1 of the conversation.' }).waitFor({ timeout: 60_000 });
      expect(
        await page.locator('#thread li.thread-message').first().locator('button.thread-toggle').getAttribute('aria-expanded'),
      ).to.equal('true');
    } finally {
      await inPage(page, "localStorage.removeItem('postern.conversations')");
    }
  });
  it('a label of 10,000 messages: at most 300 rows in the page; scrolling loads older pages and brings the newest back', async () => {
    const { page } = device;
    const TOTAL = 10_000;
    const inbox = await p.inbox();
    await importMessages(inbox.imapUser, 'Big', TOTAL);
    // The index takes a while over 10,000 messages: the inbox screen is read again until it lists the label.
    await until(
      'the label listed',
      async () => {
        await go(page, `#/inbox/${inbox.id}/label/lbl_00000000000000000000000000`);
        await go(page, `#/inbox/${inbox.id}`);
        return page
          .locator('#labels a', { hasText: 'Big' })
          .waitFor({ timeout: 5000 })
          .then(
            () => true,
            () => false,
          );
      },
      180_000,
    );
    await page.locator('#labels a', { hasText: 'Big' }).click();
    await page.locator('#label-heading', { hasText: 'Big' }).waitFor({ timeout: 30_000 });
    await page.locator('#messages li.message').first().waitFor({ timeout: 120_000 });
    expect(await page.locator('#labels a[aria-current="page"] .count').getAttribute('data-unread')).to.equal(String(TOTAL));
    const rows = () => page.locator('#messages li.message').count();
    const last = () => page.locator('#messages li.message .subject').last().textContent();
    // Scrolled to the end again and again: older pages come in (700 rows and more); the DOM keeps at most 300.
    const lastNumber = async () => Number((await last())!.replace('imported ', ''));
    let most = 0;
    for (let i = 0; i < 40 && (await lastNumber()) > TOTAL - 701; i++) {
      const before = await last();
      await inPage(page, `document.querySelector('.pane-list').scrollTop = 1e9`);
      await until('an older page', async () => (await last()) !== before, 30_000);
      most = Math.max(most, await rows());
    }
    expect(await lastNumber()).to.be.at.most(TOTAL - 701);
    expect(most).to.be.at.most(300);
    expect(await rows()).to.be.at.most(300);
    expect(await page.locator('#messages li.message', { hasText: new RegExp(`^imported ${TOTAL - 1}$`) }).count()).to.equal(0);
    expect(await inPage<number>(page, `document.getElementById('rows-above').getBoundingClientRect().height`)).to.be.above(1000);
    await screenshot(page, 'panes-7-large-label');
    // Back to the top: the newest rows are back, still at most 300.
    for (
      let i = 0;
      i < 40 && (await page.locator('#messages li.message .subject').first().textContent()) !== `imported ${TOTAL - 1}`;
      i++
    ) {
      await inPage(page, `document.querySelector('.pane-list').scrollTop = 0`);
      await page.waitForTimeout(100);
    }
    expect(await page.locator('#messages li.message .subject').first().textContent()).to.equal(`imported ${TOTAL - 1}`);
    expect(await rows()).to.be.at.most(300);
  });
  it('axe (WCAG 2.2 AA), light and dark, wide and 360 px: the selection toolbar, the Undo bar, the shortcuts help, a conversation', async () => {
    const { page } = device;
    const tag = `Axe ${randomBytes(3).toString('hex')}`;
    const inbox = await seeded(4, tag);
    await openInbox(page, inbox, 4);
    const audit = (screen: string): Promise<string[]> => axeViolations(page, screen, { widths: [1280, 360], restoreWidth: 1280 });
    const found: string[] = [];
    await page
      .locator('#messages li.message', { hasText: `${tag} 4` })
      .locator('input.select')
      .check();
    await page
      .locator('#messages li.message', { hasText: `${tag} 3` })
      .locator('input.select')
      .check();
    found.push(...(await audit('selection')));
    await page.click('#bulk-archive');
    await page.locator('#undo').waitFor();
    found.push(...(await audit('undo')));
    await page.click('#shortcuts');
    await page.locator('#shortcuts-help[open]').waitFor();
    found.push(...(await audit('shortcuts help')));
    await page.click('#shortcuts-close');
    await page.check('#group-threads');
    try {
      await until('grouped', async () => (await page.locator('#messages li.message').count()) === 2, 30_000);
      await page.locator('#messages li.message > a').first().click();
      await page.locator('#thread-subject, #message-subject').first().waitFor({ timeout: 60_000 });
      found.push(...(await audit('conversation')));
    } finally {
      await inPage(page, "localStorage.removeItem('postern.conversations')");
    }
    expect(found).to.deep.equal([]);
  });
});
