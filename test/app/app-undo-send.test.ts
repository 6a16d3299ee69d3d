// The web app's undo send and send later in real Chromium (docs/app.md, "Compose"): every send
// waits on the server for its undo hold, Undo takes it back from the outbox and reopens it as a
// draft, and "Send later" sends at a chosen time (docs/sending.md, "Send later", "The outbox").
import { expect } from 'chai';
import type { Browser, Page } from 'playwright-core';
import { call, json, newProject, unique, type TestInbox, type TestProject, type TestServer } from '../helpers/harness.ts';
import { until } from '../helpers/mail-fixtures.ts';
import { atSink, rcpt } from '../helpers/send-fixtures.ts';
import { enrollMember, go, inPage, launchChromium, newDevice, startAppServer, type Device } from '../helpers/browser.ts';

interface OutboxRow {
  id: string;
  state: string;
}

describe('web app: undo send and send later (Chromium)', function () {
  this.timeout(180_000);
  let s: TestServer;
  let p: TestProject;
  let browser: Browser;
  let device: Device;
  let a: TestInbox;
  let z: TestInbox;
  let token: string;

  before(async () => {
    ({ s } = await startAppServer({ POSTERN_EVENTS_SETTLE_MS: '100' }));
    p = await newProject(s);
    a = await p.inbox();
    z = await p.inbox({ mode: 'zero-access' });
    token = await p.token(['messages:read', 'send']);
    browser = await launchChromium();
    device = await newDevice(browser, { prf: true });
    await enrollMember(device, (await s.postern.passkeys.invite(p.memberId)).link, 'undo send test passphrase');
  });
  after(async () => {
    await browser?.close();
    await s?.close();
  });
  afterEach(() => {
    expect(device.problems, 'CSP violations or page errors').to.deep.equal([]);
  });

  const outbox = async (all: boolean) =>
    (await json<{ sends: OutboxRow[] }>(await call(`${s.base}/inboxes/${a.id}/outbox${all ? '?state=all' : ''}`, { token }))).sends;
  const write = async (page: Page, to: string, subject: string, text: string, inbox: TestInbox = a) => {
    // Through the drafts list: setting the hash the page already has would not open a new form.
    await go(page, `#/compose/${inbox.id}/drafts`);
    await page.locator('#drafts, #drafts-empty').first().waitFor({ timeout: 60_000 });
    await go(page, `#/compose/${inbox.id}`);
    await page.locator('#compose-to:enabled').waitFor({ timeout: 60_000 });
    await page.fill('#compose-to', to);
    await page.fill('#compose-subject', subject);
    await page.fill('#compose-body', text);
  };
  /** The outbox id of the send the page says is waiting. */
  const waitingAs = async (page: Page, state: 'held' | 'scheduled') => {
    await page.locator(`#compose-status[data-state="${state}"], #compose-status[data-state="failed"]`).first().waitFor({ timeout: 60_000 });
    const id = await page.locator('#compose-status').getAttribute('data-outbox');
    if (!id) throw new Error(`the page says: ${await page.locator('#compose-status').innerText()}`);
    return id;
  };

  it('Undo inside the hold brings the form back as a draft; the outbox says cancelled and nothing is sent', async () => {
    const { page } = device;
    const undone = rcpt('undone');
    const subject = `Undo me ${unique('u')}`;
    await write(page, undone, subject, 'Second thoughts about this one.\n');
    await page.click('#compose-send');
    const outboxId = await waitingAs(page, 'held');
    // The status region announces the wait, with the Undo button in it.
    const region = page.locator('#compose-status[role="status"][aria-live="polite"]');
    expect(await region.innerText()).to.match(/^Sending…/);
    expect(await region.locator('#compose-undo').count()).to.equal(1);

    await page.click('#compose-undo');
    await page.waitForURL(/#\/compose\/ibx_[0-9A-Z]{26}\/draft\/draft_/, { timeout: 30_000 });
    await until('the draft back in the form', async () => (await page.locator('#compose-subject').inputValue()) === subject);
    expect(await page.locator('#compose-body').inputValue()).to.include('Second thoughts about this one.');
    expect(await page.locator('#compose-to').inputValue()).to.equal(undone);
    expect(await page.locator('#compose-send').isEnabled()).to.equal(true);
    const row = (await outbox(true)).find((r) => r.id === outboxId);
    expect(row?.state).to.equal('cancelled');
    // The draft reopened is the one the cancel put back in Drafts.
    const draftId = decodeURIComponent(page.url().split('/draft/')[1]!);
    const drafts = (await json<{ drafts: Array<{ id: string }> }>(await call(`${s.base}/inboxes/${a.id}/drafts`, { token }))).drafts;
    expect(drafts.map((d) => d.id)).to.include(draftId);

    // The system had its chance: a second send, held as every send is and sent after the first, reaches the sink...
    const marker = rcpt('marker');
    await write(page, marker, `After the undo ${unique('m')}`, 'This one goes.\n');
    await page.click('#compose-send');
    await waitingAs(page, 'held');
    await atSink(marker, 1, 60_000);
    await page.locator('#compose-status[data-state="sent"]').waitFor({ timeout: 30_000 });
    // ...and the first never did.
    const sink = await atSink((m) => m.rcptTo.includes(undone) || m.rcptTo.includes(marker), 1);
    expect(sink.map((m) => m.rcptTo)).to.deep.equal([[marker]]);
  });

  it('"Send later" waits in the outbox as scheduled and goes at its time', async () => {
    const { page } = device;
    const later = rcpt('later');
    await write(page, later, `Later ${unique('l')}`, 'In a few seconds.\n');
    // The browser's local time, as the datetime-local box takes it, a few seconds ahead.
    const when = await inPage<string>(
      page,
      `(() => { const d = new Date(Date.now() + 8000); const two = (n) => String(n).padStart(2, '0');
        return d.getFullYear() + '-' + two(d.getMonth() + 1) + '-' + two(d.getDate()) + 'T' + two(d.getHours()) + ':' + two(d.getMinutes()) + ':' + two(d.getSeconds()); })()`,
    );
    await page.fill('#compose-send-at', when);
    await page.click('#compose-send-later');
    const outboxId = await waitingAs(page, 'scheduled');
    expect(await page.locator('#compose-status').innerText()).to.match(/^Scheduled for/);
    const row = (await outbox(false)).find((r) => r.id === outboxId);
    expect(row?.state).to.equal('scheduled');
    const [arrived] = await atSink(later, 1, 60_000);
    expect(arrived).to.not.equal(undefined);
    await page.locator('#compose-status[data-state="sent"]').waitFor({ timeout: 30_000 });
    expect((await outbox(true)).find((r) => r.id === outboxId)?.state).to.equal('sent');
  });

  it('Undo in a zero-access inbox: the sealed send comes back as a sealed draft, opened in the browser', async () => {
    const { page } = device;
    const subject = `Sealed undo ${unique('z')}`;
    await write(page, rcpt('sealed'), subject, 'Only this browser reads this.\n', z);
    await page.click('#compose-send');
    await waitingAs(page, 'held');
    await page.click('#compose-undo');
    await page.waitForURL(/#\/compose\/ibx_[0-9A-Z]{26}\/draft\/draft_/, { timeout: 30_000 });
    await until('the sealed draft back in the form', async () => (await page.locator('#compose-subject').inputValue()) === subject);
    expect(await page.locator('#compose-body').inputValue()).to.include('Only this browser reads this.');
  });
});
