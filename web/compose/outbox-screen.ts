// The outbox, `#/inbox/<ibx>/outbox` (docs/app.md, "Compose, reply, forward, drafts"): the
// inbox's sends that wait on the server (GET …/outbox, docs/sending.md, "The outbox"), held inside
// their undo hold, scheduled for later or being sent, each with its state and time. A held or
// scheduled send can be cancelled (it comes back as a draft, which the screen links to); a
// scheduled one can be given another time. The inbox stream carries no outbox change, so the
// screen reads the outbox when it opens, after each change it makes, when the tab is shown again,
// and when a send's time (or hold) comes or one is being sent.
import { ApiError } from '../api.ts';
import { dateTexts } from '../dates.ts';
import { addRoute } from '../routes.ts';
import { button, h, report, show } from '../ui.ts';
import { cancelSend, reschedule, waitingSends, type OutboxSend } from './outbox.ts';

/** A date as a datetime-local box takes it (local time, to the minute). */
function localInput(d: Date): string {
  const two = (n: number) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${two(d.getMonth() + 1)}-${two(d.getDate())}T${two(d.getHours())}:${two(d.getMinutes())}`;
}

/** The full date people read ("Monday, 30 November 2026 at 09:00"), in a <time>. */
function when(iso: string): HTMLTimeElement {
  return h('time', { datetime: new Date(iso).toISOString() }, dateTexts(iso)?.full ?? iso);
}

/** When the send can no longer be taken back (or goes): its send time or hold, the later. */
const goesAt = (s: OutboxSend) => Math.max(s.sendAt ? Date.parse(s.sendAt) : 0, s.holdUntil ? Date.parse(s.holdUntil) : 0);

function stateLine(s: OutboxSend): HTMLElement {
  const at = goesAt(s);
  if (s.state === 'held')
    return h('p', { class: 'state' }, 'Waiting to send (Undo is still possible) until ', when(new Date(at).toISOString()), '.');
  if (s.state === 'scheduled') return h('p', { class: 'state' }, 'Scheduled for ', when(new Date(at).toISOString()), '.');
  if (s.state === 'sending') return h('p', { class: 'state' }, 'Sending now: too late to cancel.');
  if (s.state === 'unknown')
    return h(
      'p',
      { class: 'state' },
      "Outcome unknown: the mail server's answer was lost, so it may or may not have it. It will not be sent again, and it is filed in Sent once a delivery report shows it went.",
    );
  return h('p', { class: 'state' }, s.state === 'failed' ? `Not sent: ${s.reason ?? 'it failed'}.` : `State: ${s.state}.`);
}

async function outboxPage(inboxId: string): Promise<void> {
  const hash = location.hash;
  const list = h('ul', { class: 'outbox', id: 'outbox-list', 'aria-labelledby': 'outbox-heading' });
  const status = h('p', { class: 'muted', id: 'outbox-status', role: 'status' });
  const empty = h('p', { id: 'outbox-empty', hidden: '' }, 'Nothing waits to be sent.');
  let timer: number | undefined;
  /** This screen is the one up (a later visit to the outbox is another screen, with its own timer). */
  const shown = () => location.hash === hash && list.isConnected;

  const item = (s: OutboxSend): HTMLLIElement => {
    const heading = `To ${s.recipients} recipient${s.recipients === 1 ? '' : 's'}, from ${s.from}`;
    const li = h(
      'li',
      { 'data-outbox': s.id, 'data-state': s.state },
      h('h2', { id: `outbox-${s.id}` }, heading),
      stateLine(s),
      h('p', { class: 'muted' }, 'Written ', when(s.createdAt), '.'),
    );
    if (s.state !== 'held' && s.state !== 'scheduled') return li;
    const actions = h('div', { class: 'actions', role: 'group', 'aria-labelledby': `outbox-${s.id}` });
    actions.append(
      button(
        'Cancel send',
        async () => {
          const draftId = await cancelSend(inboxId, s.id).catch((err: unknown) => {
            if (err instanceof ApiError && err.status === 409) throw new Error(`Too late to cancel: ${err.message}`);
            throw err;
          });
          await refresh();
          status.replaceChildren(
            'Cancelled: the message is a draft again. ',
            h('a', { href: `#/compose/${inboxId}/draft/${draftId}`, id: 'outbox-draft' }, 'Open the draft'),
          );
          if (!list.contains(document.activeElement)) document.getElementById('outbox-heading')?.focus();
        },
        { class: 'secondary', id: `outbox-cancel-${s.id}` },
      ),
    );
    if (s.state === 'scheduled') {
      const box = h('input', {
        type: 'datetime-local',
        id: `outbox-at-${s.id}`,
        value: localInput(new Date(goesAt(s))),
      });
      actions.append(
        h('label', { for: box.id }, 'New time'),
        box,
        button(
          'Reschedule',
          async () => {
            const at = box.value ? new Date(box.value) : null;
            if (!at || Number.isNaN(at.getTime())) {
              status.textContent = 'Choose the day and time to send it.';
              box.focus();
              return;
            }
            await reschedule(inboxId, s.id, at);
            await refresh();
            status.replaceChildren('Rescheduled for ', when(at.toISOString()), '.');
          },
          { class: 'secondary', id: `outbox-reschedule-${s.id}` },
        ),
      );
    }
    li.append(actions);
    return li;
  };

  /** Reads the outbox again; focus on a control of a send still listed stays on it. */
  const refresh = async (): Promise<void> => {
    clearTimeout(timer);
    if (!shown()) return;
    const sends = await waitingSends(inboxId);
    if (!shown()) return;
    const focused = document.activeElement instanceof HTMLElement && list.contains(document.activeElement) ? document.activeElement.id : '';
    list.replaceChildren(...sends.map(item));
    empty.hidden = sends.length > 0;
    list.hidden = sends.length === 0;
    if (focused) document.getElementById(focused)?.focus();
    else if (list.contains(document.activeElement) || document.activeElement === document.body)
      document.getElementById('outbox-heading')?.focus();
    // Read again when the next send is due, or soon while one is being sent.
    const next = Math.min(...sends.map((s) => (s.state === 'sending' ? Date.now() + 2000 : goesAt(s) + 1500)));
    if (Number.isFinite(next)) timer = window.setTimeout(() => void refresh().catch(report), Math.max(1000, next - Date.now()));
  };

  show(
    h('p', {}, h('a', { href: `#/inbox/${inboxId}`, id: 'back' }, '← Back to the inbox')),
    h('h1', { id: 'outbox-heading' }, 'Outbox'),
    h(
      'p',
      { class: 'muted' },
      'Messages waiting to be sent: held for a few seconds so you can undo, or scheduled for later. Cancelling one makes it a draft again.',
    ),
    status,
    list,
    empty,
  );
  // Back to this tab (its timers slowed while hidden): read again. Left with the screen.
  const onVisible = () => {
    if (!shown()) return document.removeEventListener('visibilitychange', onVisible);
    if (document.visibilityState === 'visible') void refresh().catch(report);
  };
  document.addEventListener('visibilitychange', onVisible);
  await refresh();
}

addRoute(/^#\/inbox\/(ibx_[0-9A-Z]{26})\/outbox$/, (m) => outboxPage(m[1]!));
