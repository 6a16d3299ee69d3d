// The web app's outbox screen in real Chromium (docs/app.md, "Compose, reply, forward, drafts"):
// the inbox's held and scheduled sends (docs/sending.md, "The outbox"), each with its state and
// time; a held one leaves the screen when its hold ends, without a reload; a scheduled one
// rescheduled goes at its new time; one cancelled comes back as a draft the screen links to. axe
// on the screen.
import { expect } from 'chai';
import type { Browser } from 'playwright-core';
import { call, json, newProject, unique, type TestInbox, type TestProject, type TestServer } from '../helpers/harness.ts';
import { until } from '../helpers/mail-fixtures.ts';
import { atSink, rcpt } from '../helpers/send-fixtures.ts';
import { axeViolations } from '../helpers/axe.ts';
import { enrollMember, go, inPage, launchChromium, newDevice, startAppServer, type Device } from '../helpers/browser.ts';

interface OutboxRow {
  id: string;
  state: string;
  sendAt: string | null;
}

describe('web app: the outbox (Chromium)', function () {
  this.timeout(120_000);
  let s: TestServer;
  let p: TestProject;
  let browser: Browser;
  let device: Device;
  let a: TestInbox;
  let token: string;

  before(async () => {
    ({ s } = await startAppServer({ POSTERN_EVENTS_SETTLE_MS: '100' }));
    p = await newProject(s);
    a = await p.inbox();
    token = await p.token(['messages:read', 'send']);
    browser = await launchChromium();
    device = await newDevice(browser, { prf: true });
    await device.page.setViewportSize({ width: 1280, height: 800 });
    await enrollMember(device, (await s.postern.passkeys.invite(p.memberId)).link, 'outbox test passphrase');
  });
  after(async () => {
    await browser?.close();
    await s?.close();
  });
  afterEach(() => {
    expect(device.problems, 'CSP violations or page errors').to.deep.equal([]);
  });

  const outbox = async () =>
    (await json<{ sends: OutboxRow[] }>(await call(`${s.base}/inboxes/${a.id}/outbox?state=all`, { token }))).sends;
  /** A send through JSON compose that waits: its outbox id. */
  const waiting = async (to: string, subject: string, when: { sendAt?: string; holdSeconds?: number }) => {
    const res = await call(`${s.base}/inboxes/${a.id}/messages/compose`, {
      method: 'POST',
      token,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ from: a.address, to: [to], subject, text: 'Waiting in the outbox.', ...when }),
    });
    expect(res.status, await res.clone().text()).to.equal(202);
    return (await json<{ outboxId: string }>(res)).outboxId;
  };

  it('lists held and scheduled sends with their state; a hold ending shows without a reload; reschedule and cancel; axe', async () => {
    const { page } = device;
    const inAnHour = new Date(Date.now() + 3600_000).toISOString();
    const toMove = rcpt('moved');
    const moved = await waiting(toMove, `Rescheduled ${unique('r')}`, { sendAt: inAnHour });
    const cancelledSubject = `Cancelled ${unique('c')}`;
    const cancelled = await waiting(rcpt('cancelled'), cancelledSubject, { sendAt: inAnHour });
    const held = await waiting(rcpt('held'), `Held ${unique('h')}`, { holdSeconds: 12 });

    // From the inbox screen's Outbox link.
    await go(page, `#/inbox/${a.id}`);
    await page.locator('#live-status[data-live]').waitFor({ timeout: 30_000 });
    await page.click('#outbox');
    await page.locator('#outbox-heading').waitFor();
    const item = (id: string) => page.locator(`#outbox-list li[data-outbox="${id}"]`);
    await item(held).waitFor({ timeout: 30_000 });
    expect(await item(moved).getAttribute('data-state')).to.equal('scheduled');
    expect(await item(held).getAttribute('data-state')).to.equal('held');
    expect(await item(moved).locator('h2').textContent()).to.equal(`To 1 recipient, from ${a.address}`);
    expect(await item(moved).locator('.state').textContent()).to.match(/^Scheduled for .+\.$/);
    expect(await item(held).locator('.state').textContent()).to.match(/^Waiting to send \(Undo is still possible\) until/);
    // A held send can be cancelled, not rescheduled.
    expect(await item(held).locator('button', { hasText: 'Reschedule' }).count()).to.equal(0);
    const found = await axeViolations(page, 'outbox', { widths: [1280, 360], restoreWidth: 1280 });

    // The hold ends: the send goes and leaves the screen, which read the outbox again by itself.
    await item(held).waitFor({ state: 'detached', timeout: 30_000 });
    expect((await outbox()).find((r) => r.id === held)?.state).to.be.oneOf(['sending', 'sent']);

    // Reschedule to a few seconds from now (the browser's local time, as the box takes it).
    const soon = await inPage<string>(
      page,
      `(() => { const d = new Date(Date.now() + 6000); const two = (n) => String(n).padStart(2, '0');
        return d.getFullYear() + '-' + two(d.getMonth() + 1) + '-' + two(d.getDate()) + 'T' + two(d.getHours()) + ':' + two(d.getMinutes()) + ':' + two(d.getSeconds()); })()`,
    );
    await page.fill(`#outbox-at-${moved}`, soon);
    await page.click(`#outbox-reschedule-${moved}`);
    await page.locator('#outbox-status', { hasText: /^Rescheduled for / }).waitFor({ timeout: 30_000 });
    const row = (await outbox()).find((r) => r.id === moved)!;
    expect(Date.parse(row.sendAt!)).to.be.below(Date.parse(inAnHour) - 3000_000);
    await atSink(toMove, 1, 60_000);
    await item(moved).waitFor({ state: 'detached', timeout: 30_000 });

    // Cancel: back to a draft, which the screen links to.
    await page.click(`#outbox-cancel-${cancelled}`);
    await page.locator('#outbox-status', { hasText: 'Cancelled: the message is a draft again.' }).waitFor({ timeout: 30_000 });
    expect((await outbox()).find((r) => r.id === cancelled)?.state).to.equal('cancelled');
    await item(cancelled).waitFor({ state: 'detached' });
    await page.locator('#outbox-empty:not([hidden])').waitFor();
    found.push(...(await axeViolations(page, 'outbox, empty, after a cancel')));
    await page.click('#outbox-draft');
    await until(
      'the draft in the form',
      async () =>
        (await page
          .locator('#compose-subject')
          .inputValue()
          .catch(() => '')) === cancelledSubject,
      30_000,
    );
    expect(found).to.deep.equal([]);
  });
});
