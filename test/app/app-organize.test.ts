// The web app's organizing in real Chromium (docs/app.md, "Actions"): with the list grouped by
// conversation, an action on a conversation's row acts on every message of it in that label (and
// Undo puts them all back), leaving its messages in other labels alone; Delete forever from Trash,
// on a selection, asked first and not undoable, keeping a message that is in another label too;
// rows dragged onto a label move there with Undo, the keyboard's list untouched. axe on each new
// state. Mail is seeded with IMAP APPEND (and COPY).
import { randomBytes } from 'node:crypto';
import { expect } from 'chai';
import type { Browser, Page } from 'playwright-core';
import { newProject, type TestInbox, type TestProject, type TestServer } from '../helpers/harness.ts';
import { enrollMember, go, inPage, launchChromium, newDevice, startAppServer, type Device } from '../helpers/browser.ts';
import { append, mailApp, until } from '../helpers/mail-fixtures.ts';
import { axeViolations } from '../helpers/axe.ts';
import { labelIds, listLabel } from '../helpers/send-fixtures.ts';

describe('web app: conversation actions, delete forever, drag to a label (Chromium)', function () {
  this.timeout(120_000);
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
    await enrollMember(device, (await s.postern.passkeys.invite(p.memberId)).link, 'organize test passphrase');
  });
  after(async () => {
    await browser?.close();
    await s?.close();
  });
  afterEach(async () => {
    expect(device.problems, 'CSP violations or page errors').to.deep.equal([]);
    // The next test starts from an ungrouped list (the setting is this browser's).
    await inPage(device.page, "localStorage.removeItem('postern.conversations')");
  });

  const subjects = async (inboxId: string, name: string) => {
    const ids = await labelIds(s, token, inboxId);
    return (await listLabel(s, token, inboxId, ids[name]!)).map((m) => m.subject).sort();
  };
  const openLabel = async (page: Page, inbox: TestInbox, name: string, rows: number) => {
    const ids = await labelIds(s, token, inbox.id);
    await go(page, `#/inbox/${inbox.id}${name === 'INBOX' ? '' : `/label/${ids[name]}`}`);
    await page.locator('#live-status[data-live]').waitFor({ timeout: 30_000 });
    await until('the rows listed', async () => (await page.locator('#messages li.message').count()) === rows, 30_000);
  };
  const rowOf = (page: Page, text: string) => page.locator('#messages li.message', { hasText: text });
  const audit = (page: Page, screen: string) => axeViolations(page, screen, { widths: [1280, 360], restoreWidth: 1280 });

  it('conversations: archive, flag, read and move on a conversation (row or pane) act on all its messages in the label; Undo puts them all back', async () => {
    const { page } = device;
    const tag = `Conv ${randomBytes(3).toString('hex')}`;
    const inbox = await p.inbox();
    const app = await mailApp(inbox);
    const mid = (n: number) => `<${tag.replace(' ', '.')}.${n}@example.org>`;
    const raw = (n: number) =>
      [
        'From: Ann <ann@example.org>',
        'To: someone@postern.test',
        `Subject: ${n === 1 ? '' : 'Re: '}${tag}`,
        `Date: ${new Date(Date.now() - (10 - n) * 60_000).toUTCString()}`,
        `Message-ID: ${mid(n)}`,
        ...(n > 1 ? [`In-Reply-To: ${mid(n - 1)}`, `References: ${mid(n - 1)}`] : []),
        '',
        `Part ${n} of the conversation.`,
        '',
      ].join('\r\n');
    const ids = await labelIds(s, token, inbox.id);
    const count = async (name: string) => (await listLabel(s, token, inbox.id, ids[name]!)).length;
    // Each indexed before the next, as mail comes (the index's own linking: test/mail/threads.test.ts).
    // Part 2 is the member's reply, in Sent: of the same conversation, but not in INBOX.
    try {
      await app.append('INBOX', raw(1), ['\\Seen']);
      await until('1 indexed', async () => (await count('INBOX')) === 1, 60_000);
      await app.append('Sent', raw(2), ['\\Seen']);
      await until('2 indexed', async () => (await count('Sent')) === 1, 60_000);
      await app.append('INBOX', raw(3));
      await until('3 indexed', async () => (await count('INBOX')) === 2, 60_000);
      await append(app, 'INBOX', { subject: `${tag} alone` });
    } finally {
      await app.logout();
    }
    await openLabel(page, inbox, 'INBOX', 3);
    await page.check('#group-threads');
    await until('grouped', async () => (await page.locator('#messages li.message').count()) === 2, 30_000);
    const conversation = page.locator('#messages li.message', { has: page.locator('.thread-count') });
    await conversation.locator('.thread-count', { hasText: '(3)' }).waitFor();

    // Flag the conversation: both its INBOX messages flagged, its Sent one not.
    await conversation.locator('input.select').check();
    await page.click('#bulk-flag');
    await page.locator('#undo-status', { hasText: 'Flagged 2 messages.' }).waitFor();
    const flagged = async (name: string) =>
      (await listLabel(s, token, inbox.id, ids[name]!)).filter((m) => m.flags.includes('flagged')).map((m) => m.subject);
    await until('both flagged in INBOX', async () => (await flagged('INBOX')).length === 2, 30_000);
    expect(await flagged('Sent')).to.deep.equal([]);
    // Read: the unread part 3 too (and not the other row's message, unselected).
    await page.click('#bulk-read');
    await page.locator('#undo-status', { hasText: 'Marked 2 messages as read.' }).waitFor();
    await until(
      'all read in INBOX',
      async () =>
        (await listLabel(s, token, inbox.id, ids.INBOX!))
          .filter((m) => m.subject !== `${tag} alone`)
          .every((m) => m.flags.includes('seen')),
      30_000,
    );
    await page.click('#bulk-clear');

    // Archive it with the keyboard (e on the row): the row goes at once, both messages go to the
    // Archive, the reply stays in Sent.
    await conversation.locator('a').focus();
    await page.keyboard.press('e');
    await page.locator('#undo-status', { hasText: 'Archived 2 messages.' }).waitFor();
    expect(await page.locator('#messages li.message').count()).to.equal(1);
    // The index hears of the Archive and of INBOX each in its own time: both are waited for.
    await until('both in the Archive', async () => (await subjects(inbox.id, 'Archive')).length === 2, 30_000);
    await until('out of INBOX', async () => (await subjects(inbox.id, 'INBOX')).length === 1, 30_000);
    expect(await subjects(inbox.id, 'INBOX')).to.deep.equal([`${tag} alone`]);
    expect(await subjects(inbox.id, 'Sent')).to.deep.equal([`Re: ${tag}`]);
    // Undo puts both back (and only them).
    await page.click('#undo');
    await page.locator('#undo-status', { hasText: 'Undone.' }).waitFor({ timeout: 30_000 });
    await until('both back in INBOX', async () => (await subjects(inbox.id, 'INBOX')).length === 3, 30_000);
    await until('out of the Archive', async () => (await subjects(inbox.id, 'Archive')).length === 0, 30_000);
    expect(await subjects(inbox.id, 'Sent')).to.deep.equal([`Re: ${tag}`]);
    await until('one row for the conversation again', async () => (await page.locator('#messages li.message').count()) === 2);
    expect(await conversation.count()).to.equal(1);

    // Opened in the reading pane, the conversation has the same actions: Move to Junk moves both.
    await conversation.locator('a').click();
    await page.locator('#thread-subject', { hasText: tag }).waitFor({ timeout: 60_000 });
    expect(await page.locator('#message-actions').getAttribute('aria-label')).to.equal('This conversation');
    await page.selectOption('#msg-move-to', { label: 'Junk' });
    await page.click('#msg-move');
    await page.locator('#panes[data-pane="list"]').waitFor();
    await page.locator('#undo-status', { hasText: 'Moved to Junk: 2 messages.' }).waitFor();
    await until('both in Junk', async () => (await subjects(inbox.id, 'Junk')).length === 2, 30_000);
    await until('out of INBOX again', async () => (await subjects(inbox.id, 'INBOX')).length === 1, 30_000);
    expect(await subjects(inbox.id, 'Sent')).to.deep.equal([`Re: ${tag}`]);
  });

  it('Delete forever from Trash: asked first (Cancel changes nothing), a selection deleted, one also in INBOX kept; axe', async () => {
    const { page } = device;
    const tag = `Forever ${randomBytes(3).toString('hex')}`;
    const inbox = await p.inbox();
    const app = await mailApp(inbox);
    try {
      for (let i = 1; i <= 3; i++) await append(app, 'Trash', { subject: `${tag} ${i}` });
      // Number 3 is in INBOX too (a label elsewhere): the server keeps it.
      await app.mailboxOpen('Trash');
      await app.messageCopy('3', 'INBOX');
      await app.mailboxClose();
    } finally {
      await app.logout();
    }
    await until('in INBOX too', async () => (await subjects(inbox.id, 'INBOX')).length === 1, 30_000);
    await openLabel(page, inbox, 'INBOX', 1);
    // Not offered outside Trash and Junk.
    await rowOf(page, `${tag} 3`).locator('input.select').check();
    expect(await page.locator('#bulk-destroy').count()).to.equal(0);
    await page.click('#bulk-clear');
    await page.locator('#labels a', { hasText: 'Trash' }).click();
    await page.locator('#label-heading', { hasText: 'Trash' }).waitFor();
    await until('Trash listed', async () => (await page.locator('#messages li.message').count()) === 3, 30_000);

    for (const n of [1, 3]) await rowOf(page, `${tag} ${n}`).locator('input.select').check();
    await page.click('#bulk-destroy');
    const dialog = page.locator('dialog#confirm[open]');
    await dialog.waitFor();
    expect(await dialog.locator('#confirm-text').textContent()).to.match(/These 2 messages will be deleted for good.*cannot be undone/);
    // Focus starts on Cancel; axe on the dialog.
    expect(await inPage(page, 'document.activeElement?.id')).to.equal('confirm-no');
    const found = await audit(page, 'delete forever confirmation');
    // A shortcut typed while the question is up does nothing (the Escape after it is handled in order).
    await page.keyboard.press('e');
    await page.keyboard.press('Escape');
    // Gone from the page once its close was handled (focus given back first).
    await page.locator('dialog#confirm').waitFor({ state: 'detached' });
    expect(await inPage(page, 'document.activeElement?.id')).to.equal('bulk-destroy');
    expect(await page.locator('#messages li.message').count()).to.equal(3);
    expect(await subjects(inbox.id, 'Trash')).to.have.length(3);
    expect(await page.locator('#undo-status').textContent()).to.not.match(/Archived/);

    await page.click('#bulk-destroy');
    await page.click('#confirm-yes');
    await page.locator('#undo-status', { hasText: /Deleted 1 message forever\. Kept 1 message that is also in another label/ }).waitFor({
      timeout: 30_000,
    });
    // No Undo for this one.
    expect(await page.locator('#undo').count()).to.equal(0);
    await until('deleted on the server', async () => (await subjects(inbox.id, 'Trash')).length === 2, 30_000);
    expect(await subjects(inbox.id, 'Trash')).to.deep.equal([`${tag} 2`, `${tag} 3`]);
    expect(await subjects(inbox.id, 'INBOX')).to.deep.equal([`${tag} 3`]);
    // The kept row is back in the list; the deleted one is not.
    await until(
      'the list says so',
      async () => (await page.locator('#messages li.message .subject').allTextContents()).sort().join() === `${tag} 2,${tag} 3`,
    );
    found.push(...(await audit(page, 'after delete forever')));

    // From the reading pane: the button, the same question.
    await rowOf(page, `${tag} 2`).locator('a').click();
    await page.locator('#message-subject', { hasText: `${tag} 2` }).waitFor({ timeout: 60_000 });
    await page.click('#msg-destroy');
    await page.click('#confirm-yes');
    await page.locator('#panes[data-pane="list"]').waitFor();
    await until('deleted from the pane', async () => (await subjects(inbox.id, 'Trash')).length === 1, 30_000);
    expect(found).to.deep.equal([]);
  });

  it('drag to a label: a row, then a selection, move there with Undo; the list stays one tab stop and j/k work', async () => {
    const { page } = device;
    const tag = `Drag ${randomBytes(3).toString('hex')}`;
    const inbox = await p.inbox();
    const app = await mailApp(inbox);
    try {
      for (let i = 1; i <= 4; i++) await append(app, 'INBOX', { subject: `${tag} ${i}` });
    } finally {
      await app.logout();
    }
    const ids = await labelIds(s, token, inbox.id);
    await openLabel(page, inbox, 'INBOX', 4);
    // The labels say how to move from the keyboard.
    expect(await page.locator('nav[aria-describedby="labels-hint"]').count()).to.equal(1);
    expect(await page.locator('#labels-hint').textContent()).to.include('Move to (v)');

    await rowOf(page, `${tag} 4`)
      .locator('a')
      .dragTo(page.locator(`#labels a[data-label="${ids.Archive}"]`));
    await page.locator('#undo-status', { hasText: 'Moved to Archive: 1 message.' }).waitFor({ timeout: 30_000 });
    expect(await rowOf(page, `${tag} 4`).count()).to.equal(0);
    await until('in the Archive', async () => (await subjects(inbox.id, 'Archive')).length === 1, 30_000);
    await page.click('#undo');
    await until('back in INBOX', async () => (await subjects(inbox.id, 'INBOX')).length === 4, 30_000);
    await until('back in the list', async () => (await rowOf(page, `${tag} 4`).count()) === 1);

    // A selection goes whole when one of its rows is dragged.
    for (const n of [3, 2]) await rowOf(page, `${tag} ${n}`).locator('input.select').check();
    await rowOf(page, `${tag} 2`)
      .locator('a')
      .dragTo(page.locator(`#labels a[data-label="${ids.Junk}"]`));
    await page.locator('#undo-status', { hasText: /2 messages/ }).waitFor({ timeout: 30_000 });
    await until('both moved', async () => (await subjects(inbox.id, 'Junk')).length === 2, 30_000);
    expect(await page.locator('#messages li.message .subject').allTextContents()).to.deep.equal([`${tag} 4`, `${tag} 1`]);
    // Dropping on the label shown does nothing: it is no drop target.
    await rowOf(page, `${tag} 1`)
      .locator('a')
      .dragTo(page.locator(`#labels a[data-label="${ids.INBOX}"]`));
    expect(await page.locator('#labels a.drop-target').count()).to.equal(0);

    // The keyboard's list is as it was: one tab stop, the arrows and j move along it.
    expect(await page.locator('#messages li.message > a[tabindex="0"]').count()).to.equal(1);
    await page.locator('#label-heading').focus();
    await page.keyboard.press('j');
    const focused = () =>
      inPage<string | null>(page, `document.activeElement?.closest('li.message')?.querySelector('.subject')?.textContent ?? null`);
    expect(await focused()).to.not.equal(null);
    await page.keyboard.press('Home');
    expect(await focused()).to.equal(`${tag} 4`);
    await page.keyboard.press('ArrowDown');
    expect(await focused()).to.equal(`${tag} 1`);
    expect(await audit(page, 'after a drag')).to.deep.equal([]);
  });
});
