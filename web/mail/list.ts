// What the inbox screen and the search results share: the screens' addresses, a message's row,
// the arrow keys between rows, and what was listed last (the message screen's way back, and the
// listing sealing.ts starts from).
import type { MessageSummary } from '../../schemas/wire.ts';
import { timeElement } from '../dates.ts';
import { h } from '../ui.ts';

export const PAGE_SIZE = 50;

export const inboxHash = (inboxId: string, labelId?: string) => `#/inbox/${inboxId}${labelId ? `/label/${labelId}` : ''}`;
export const messageHash = (inboxId: string, msgId: string) => `#/inbox/${inboxId}/message/${msgId}`;
export const threadHash = (inboxId: string, threadId: string) => `#/inbox/${inboxId}/thread/${threadId}`;
export const searchHash = (inboxId: string, query: string) => `#/inbox/${inboxId}/search/${encodeURIComponent(query)}`;

/** What each row shows, by message id, so a row can be redrawn with new flags. */
const summaries = new Map<string, MessageSummary>();
/** The label the rows in `summaries` were listed from, when they all come from one. */
let shownLabel: string | undefined;
/** The list or search screen last shown, per inbox: where "back" from a message leads. */
const lastList = new Map<string, { hash: string; name: string }>();
/** The label screen last shown, per inbox: where leaving a search leads. */
const lastLabel = new Map<string, string>();

/** A new listing replaces the rows: `labelId` when they are one label's (a search may span several). */
export function startListing(inboxId: string, labelId: string | undefined, back: { hash: string; name: string }, isLabel: boolean): void {
  summaries.clear();
  shownLabel = labelId;
  lastList.set(inboxId, back);
  if (isLabel) lastLabel.set(inboxId, back.hash);
}

/** Where the message screen's "back" leads: the list or results it was opened from. */
export const backFromMessage = (inboxId: string) => lastList.get(inboxId) ?? { hash: inboxHash(inboxId), name: 'the inbox' };
/** Where leaving a search leads: the label shown before it. */
export const backFromSearch = (inboxId: string) => lastLabel.get(inboxId) ?? inboxHash(inboxId);

/** A message's row as last listed, and its label: what the message screen knows before opening it. */
export function listedMessage(msgId: string): { summary: MessageSummary; labelId: string } | undefined {
  const summary = summaries.get(msgId);
  return summary && shownLabel ? { summary, labelId: shownLabel } : undefined;
}

/** The row as last drawn. */
export const shownSummary = (msgId: string) => summaries.get(msgId);

/**
 * A message's row: a link to it, with its marks spelled out for screen readers; `selectable` adds
 * a checkbox for multi-select (out of the Tab order: the list is one tab stop, `x` or Space on a
 * row selects it, and a selected row says so to screen readers).
 */
export function row(inboxId: string, m: MessageSummary, options: { selectable?: boolean; selected?: boolean } = {}): HTMLLIElement {
  summaries.set(m.id, m);
  const unread = !m.flags.includes('seen');
  const flagged = m.flags.includes('flagged');
  // A row standing for a conversation of several (the list grouped by thread) opens the conversation.
  const count = m.thread && m.thread.messages > 1 ? m.thread.messages : 0;
  const href = count && m.threadId ? threadHash(inboxId, m.threadId) : messageHash(inboxId, m.id);
  const li = h(
    'li',
    {
      'data-msg': m.id,
      'data-uid': String(m.uid),
      ...(m.threadId ? { 'data-thread': m.threadId } : {}),
      class: `message${unread ? ' unread' : ''}${flagged ? ' flagged' : ''}`,
    },
    options.selectable
      ? h('input', {
          type: 'checkbox',
          class: 'select',
          tabindex: '-1',
          'aria-label': `Select: ${m.subject ?? '(no subject)'}`,
          ...(options.selected ? { checked: '' } : {}),
        })
      : null,
    h(
      'a',
      { href, tabindex: '-1' },
      h(
        'span',
        { class: 'from' },
        m.from ?? '(no sender)',
        count
          ? h('span', { class: 'thread-count' }, ` (${count})`, h('span', { class: 'sr-only' }, ' messages in this conversation'))
          : null,
      ),
      h('span', { class: 'subject' }, m.subject ?? '(no subject)'),
      timeElement(m.date ?? m.receivedAt, { class: 'muted' }),
      h(
        'span',
        { class: 'marks' },
        unread ? h('span', { class: 'mark-unread', title: 'Unread' }, '●', h('span', { class: 'sr-only' }, ' unread')) : null,
        flagged ? h('span', { class: 'mark-flagged', title: 'Flagged' }, '★', h('span', { class: 'sr-only' }, ' flagged')) : null,
        m.flags.includes('answered')
          ? h('span', { class: 'mark-answered', title: 'Answered' }, '↩', h('span', { class: 'sr-only' }, ' answered'))
          : null,
        h('span', { class: 'sr-only mark-selected' }, options.selected ? ' selected' : ''),
      ),
    ),
  );
  if (options.selected) li.classList.add('selected');
  return li;
}

/** The rows' links, in order. */
export const rowLinks = (list: HTMLElement) => Array.from(list.querySelectorAll<HTMLAnchorElement>('li.message > a'));

/** The row holding `el`, if any. */
export const rowOf = (el: Element | null): HTMLLIElement | null => el?.closest<HTMLLIElement>('li.message') ?? null;

/** The list's one tab stop: the row focus was last on, else the first. */
export function tabStop(list: HTMLElement): HTMLAnchorElement | null {
  return list.querySelector<HTMLAnchorElement>('li.message > a[tabindex="0"]') ?? rowLinks(list)[0] ?? null;
}

/** Makes `link` the list's tab stop (and focuses it, unless `focus` is false). */
export function moveTabStop(list: HTMLElement, link: HTMLAnchorElement | null | undefined, focus = true): void {
  if (!link) return;
  for (const a of list.querySelectorAll<HTMLAnchorElement>('li.message > a[tabindex="0"]')) if (a !== link) a.tabIndex = -1;
  link.tabIndex = 0;
  if (focus) {
    link.focus();
    // The list pane scrolls; the row comes into view without jumping the page.
    link.scrollIntoView({ block: 'nearest' });
  }
}

/**
 * The list is one tab stop (a roving tabindex): Tab enters on the row last used, the arrow keys
 * (and Home, End) move between rows, as in a mail app's list. Rows come and go with live changes
 * and actions; there is always exactly one row Tab reaches.
 */
export function listKeys(list: HTMLElement): void {
  list.dataset.oneTabStop = 'true';
  list.addEventListener('keydown', (e) => {
    if (e.altKey || e.ctrlKey || e.metaKey || e.shiftKey) return;
    const links = rowLinks(list);
    const at = links.findIndex((a) => a === document.activeElement);
    if (at < 0) return;
    const to =
      e.key === 'ArrowDown' ? at + 1 : e.key === 'ArrowUp' ? at - 1 : e.key === 'Home' ? 0 : e.key === 'End' ? links.length - 1 : null;
    if (to === null) return;
    e.preventDefault();
    moveTabStop(list, links[Math.max(0, Math.min(links.length - 1, to))]);
  });
  // Where Tab enters: the row last used, except that a member last at the top stays at the top as
  // new mail arrives above (and one who has not been in the list yet enters at the top too).
  let atTop = true;
  list.addEventListener('focusin', (e) => {
    const link = e.target instanceof HTMLAnchorElement && rowOf(e.target) ? e.target : null;
    if (!link) return;
    atTop = link === rowLinks(list)[0];
    moveTabStop(list, link, false);
  });
  const keepOne = () => {
    const first = rowLinks(list)[0];
    if (!first) return;
    const stop = list.querySelector('li.message > a[tabindex="0"]');
    if (!stop || (atTop && !list.contains(document.activeElement))) moveTabStop(list, first, false);
  };
  new MutationObserver(keepOne).observe(list, { childList: true });
}
