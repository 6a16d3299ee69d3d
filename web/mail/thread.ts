// A conversation, `#/inbox/<ibx>/thread/<thr>` (docs/app.md, "Conversations"): the list grouped by
// thread (`collapseThreads=true`, docs/threads.md) opens a row of several messages here, in the
// reading pane when the list is up. GET …/threads/{thread} gives its messages oldest first; read
// ones are collapsed to their sender and date, the newest unread (else the newest) is expanded:
// opened in this browser (open.ts) and marked read, as opening a message does. Each expands on
// demand and opens on its own (HTML, images, attachments, actions) from "Open this message". In
// the list's reading pane the conversation has the list's actions: on all of it in that label.
import PostalMime from 'postal-mime';
import type { MessageSummary, Thread } from '../../schemas/wire.ts';
import { api } from '../api.ts';
import { timeElement } from '../dates.ts';
import { addRoute } from '../routes.ts';
import { h, report, show, type Child } from '../ui.ts';
import { labelName } from './labels.ts';
import { backFromMessage, messageHash } from './list.ts';
import { messageActions } from './message.ts';
import { openMessage } from './open.ts';
import { panesFor, showInReader } from './panes.ts';

/** Whether the list groups messages by conversation (a setting of this browser). */
const SETTING = 'postern.conversations';
export const groupedByThread = () => localStorage.getItem(SETTING) === 'on';
export const groupByThread = (on: boolean) => (on ? localStorage.setItem(SETTING, 'on') : localStorage.removeItem(SETTING));

/** One message of the conversation: its sender and date as a disclosure button, its text below. */
function item(inboxId: string, m: MessageSummary, expanded: boolean): HTMLLIElement {
  const unread = !m.flags.includes('seen');
  const panel = h('div', { class: 'thread-body', id: `thread-body-${m.id}` });
  const toggle = h(
    'button',
    { type: 'button', class: 'thread-toggle', 'aria-expanded': 'false', 'aria-controls': panel.id },
    h('span', { class: 'from' }, m.from ?? '(no sender)'),
    unread ? h('span', { class: 'mark-unread' }, ' ●', h('span', { class: 'sr-only' }, ' unread')) : null,
    ' ',
    timeElement(m.date ?? m.receivedAt, { class: 'muted' }),
  );
  let loaded = false;
  const load = async () => {
    loaded = true;
    panel.replaceChildren(h('p', { class: 'muted' }, 'Decrypting it in this browser…'));
    const email = await PostalMime.parse(await openMessage(inboxId, m.id));
    panel.replaceChildren(
      email.text
        ? h('pre', { class: 'text' }, email.text)
        : h('p', { class: 'muted' }, 'This message is formatted (HTML): open it to read it.'),
      h('p', {}, h('a', { href: messageHash(inboxId, m.id), class: 'open-message' }, 'Open this message')),
    );
    if (unread) await api('POST', `/inboxes/${inboxId}/messages/${m.id}/flags`, { add: ['seen'] });
  };
  const set = (open: boolean) => {
    toggle.setAttribute('aria-expanded', String(open));
    panel.hidden = !open;
    if (open && !loaded) load().catch(report);
  };
  toggle.addEventListener('click', () => set(toggle.getAttribute('aria-expanded') !== 'true'));
  set(expanded);
  return h(
    'li',
    { class: `thread-message${unread ? ' unread' : ''}`, 'data-msg': m.id, 'data-expanded': String(expanded) },
    h('h2', {}, toggle),
    panel,
  );
}

async function threadScreen(inboxId: string, threadId: string): Promise<void> {
  const hash = location.hash;
  const panes = panesFor(inboxId);
  // The row that opened it carries the thread's id; it is marked as the one open.
  const listed = panes?.root.querySelector<HTMLElement>(`li.message[data-thread="${threadId}"]`)?.dataset.msg;
  const rowId = listed ?? threadId;
  const display = panes ? (...children: Child[]) => showInReader(panes, rowId, ...children) : show;
  const from = panes ? { hash: panes.listHash, name: labelName(panes.control.label()) } : backFromMessage(inboxId);
  const back = h('p', {}, h('a', { href: from.hash, id: 'back' }, `← Back to ${from.name}`));
  display(back, h('h1', {}, 'Opening the conversation…'));
  const thread = await api<Thread>('GET', `/inboxes/${inboxId}/threads/${threadId}`);
  if (location.hash !== hash) return;
  // Oldest first by the date each was written: mail appended in one second (a mail app's sync)
  // has one receivedAt, which the API breaks by id.
  const when = (m: MessageSummary) => Date.parse(m.date ?? m.receivedAt) || Date.parse(m.receivedAt) || 0;
  const messages = [...thread.messages].sort((a, b) => when(a) - when(b));
  const newestUnread = [...messages].reverse().find((m) => !m.flags.includes('seen'));
  const expanded = (newestUnread ?? messages[messages.length - 1])?.id;
  display(
    back,
    h('h1', { id: 'thread-subject' }, messages[0]?.subject ?? '(no subject)'),
    h('p', { class: 'muted', id: 'thread-count' }, `${messages.length} message${messages.length === 1 ? '' : 's'} in this conversation.`),
    // In the list's reading pane, the list's actions on the conversation's row: all of it in the label.
    panes && listed ? messageActions(inboxId, listed, panes, panes.listHash, 'This conversation') : null,
    h('ol', { class: 'thread', id: 'thread' }, ...messages.map((m) => item(inboxId, m, m.id === expanded))),
  );
}

addRoute(/^#\/inbox\/(ibx_[0-9A-Z]{26})\/thread\/(thr_[0-9A-Z]{26})$/, (m) => threadScreen(m[1]!, m[2]!));
