// The inbox screen, `#/inbox/<ibx>` (INBOX) or `#/inbox/<ibx>/label/<lbl>`: its labels with unread
// counts, the label's messages newest first a page at a time (docs/api.md, "Messages": `limit`, `before`), and
// live changes from the inbox stream (docs/api.md, "Inbox change stream") applied in place without a reload; above them the
// search box (search.ts). Rows, addresses and the arrow keys are list.ts's, shared with search.
import type { InboxList, Label, LabelList, LiveChange, MessageList } from '../../schemas/wire.ts';
import { api } from '../api.ts';
import { addRoute } from '../routes.ts';
import { button, h, main, show } from '../ui.ts';
import { labelDepth, labelIcon, labelName, modeWords } from './labels.ts';
import { inboxHash, listKeys, PAGE_SIZE, row, shownSummary, startListing } from './list.ts';
import { subscribeWhileOn } from './live.ts';
import { searchForm } from './search.ts';

function labelNav(inboxId: string, labels: Label[], current: string): HTMLElement {
  return h(
    'nav',
    { 'aria-label': 'Labels' },
    h(
      'ul',
      { class: 'labels', id: 'labels' },
      ...labels.map((l) => {
        const li = h(
          'li',
          { 'data-depth': String(labelDepth(l)) },
          h(
            'a',
            { href: inboxHash(inboxId, l.id), 'data-label': l.id, ...(l.id === current ? { 'aria-current': 'page' } : {}) },
            labelIcon(l),
            h('span', { class: 'name' }, labelName(l)),
            unreadCount(l),
          ),
        );
        // Nested folders step in; through the CSSOM, which the CSP allows (a style attribute it does not).
        li.style.paddingInlineStart = `${labelDepth(l) * 1.25}em`;
        return li;
      }),
    ),
  );
}

const unreadCount = (l: Label) =>
  h(
    'span',
    { class: 'count', 'data-unread': String(l.unread) },
    l.unread > 0 ? ` ${l.unread}` : '',
    h('span', { class: 'sr-only' }, ` (${l.unread} unread)`),
  );

/**
 * The labels' new counts. The links stay the same elements when the labels are the same, so a
 * keyboard user's focus on one (and the place Tab goes next) is not lost to a count changing;
 * when labels came or went the list is built again, and focus goes back to the link it was on.
 */
function updateLabelNav(nav: HTMLElement, inboxId: string, labels: Label[], current: string): HTMLElement {
  const links = Array.from(nav.querySelectorAll<HTMLAnchorElement>('a[data-label]'));
  const same =
    links.length === labels.length &&
    labels.every((l, i) => links[i]!.dataset.label === l.id && links[i]!.querySelector('.name')?.textContent === labelName(l));
  if (same) {
    labels.forEach((l, i) => links[i]!.querySelector('.count')!.replaceWith(unreadCount(l)));
    return nav;
  }
  const focused = links.find((a) => a === document.activeElement)?.dataset.label;
  const next = labelNav(inboxId, labels, current);
  nav.replaceWith(next);
  if (focused)
    Array.from(next.querySelectorAll<HTMLAnchorElement>('a[data-label]'))
      .find((a) => a.dataset.label === focused)
      ?.focus();
  return next;
}

async function inboxScreen(inboxId: string, wantedLabel: string | undefined): Promise<void> {
  const hash = location.hash;
  const [{ inboxes }, { labels }] = await Promise.all([
    api<InboxList>('GET', '/inboxes'),
    api<LabelList>('GET', `/inboxes/${inboxId}/labels`),
  ]);
  const label = labels.find((l) => l.id === wantedLabel) ?? labels[0];
  if (!label) throw new Error('This inbox has no labels yet.');
  const grant = inboxes.find((i) => i.inboxId === inboxId);
  const name = grant?.label ?? inboxId;
  const mode = modeWords(grant?.mode);
  // The tab says how much is unread in this inbox's INBOX (labels[0]: the API lists INBOX first).
  const title = (ls: Label[]) => {
    const unread = (ls.find((l) => l.name.toUpperCase() === 'INBOX') ?? ls[0])?.unread ?? 0;
    document.title = `${unread > 0 ? `(${unread}) ` : ''}${name} · Postern`;
  };
  title(labels);

  const list = h('ul', {
    class: 'list messages',
    id: 'messages',
    'aria-label': `Messages in ${labelName(label)}`,
    'aria-describedby': 'messages-hint',
  });
  listKeys(list);
  const more = h('div', { class: 'actions' });
  const status = h('p', { class: 'muted', id: 'live-status', role: 'status' }, 'Connecting for live updates…');
  // New rows are seen as they appear; a screen reader hears how many came (a status message).
  const arrivals = h('p', { class: 'sr-only', id: 'new-mail', role: 'status' });
  let arrived = 0;
  let nav = labelNav(inboxId, labels, label.id);
  let before: number | undefined;

  const loadPage = async (fresh: boolean) => {
    const q = new URLSearchParams({ limit: String(PAGE_SIZE) });
    if (!fresh && before !== undefined) q.set('before', String(before));
    const page = await api<MessageList>('GET', `/inboxes/${inboxId}/labels/${label.id}/messages?${q}`);
    if (fresh) list.replaceChildren();
    for (const m of page.messages) if (!list.querySelector(`[data-msg="${m.id}"]`)) list.append(row(inboxId, m));
    before = page.before;
    more.replaceChildren(
      ...(before !== undefined ? [button('Older messages', () => loadPage(false), { class: 'secondary', id: 'older' })] : []),
    );
    empty();
  };
  const empty = () => {
    document.getElementById('no-messages')?.remove();
    if (list.childElementCount === 0) list.after(h('p', { id: 'no-messages', class: 'muted' }, 'No messages.'));
  };
  // Counts change with every change: read them again, at most once per burst.
  let countsTimer: number | undefined;
  const refreshCounts = () => {
    clearTimeout(countsTimer);
    countsTimer = window.setTimeout(async () => {
      const fresh = await api<LabelList>('GET', `/inboxes/${inboxId}/labels`).catch(() => null);
      if (!fresh || location.hash !== hash) return;
      nav = updateLabelNav(nav, inboxId, fresh.labels, label.id);
      title(fresh.labels);
    }, 150);
  };

  // New mail: the first page again, its new rows put in UID order (newest first) above and among
  // those shown, so pages already loaded below stay.
  let topTimer: number | undefined;
  const refreshTop = () => {
    clearTimeout(topTimer);
    topTimer = window.setTimeout(async () => {
      const page = await api<MessageList>('GET', `/inboxes/${inboxId}/labels/${label.id}/messages?limit=${PAGE_SIZE}`).catch(() => null);
      if (!page || location.hash !== hash) return;
      const had = arrived;
      for (const m of page.messages) {
        if (list.querySelector(`[data-msg="${m.id}"]`)) continue;
        const below = Array.from(list.children).find((li) => Number((li as HTMLElement).dataset.uid) < m.uid);
        list.insertBefore(row(inboxId, m), below ?? null);
        arrived++;
      }
      if (arrived > had)
        arrivals.textContent = `${arrived} new message${arrived === 1 ? '' : 's'} in ${labelName(label)} since you opened it.`;
      empty();
    }, 100);
  };

  const apply = (change: LiveChange) => {
    const existing = list.querySelector<HTMLLIElement>(`[data-msg="${change.msgId}"]`);
    if (change.type === 'message.added' && change.labelId === label.id && !existing) {
      // One listing per burst, whatever its size (a mail app moving a thousand messages here).
      refreshTop();
    } else if (change.type === 'message.removed' && change.labelId === label.id) {
      existing?.remove();
      empty();
    } else if (change.type === 'message.flags' && existing && change.flags && (!change.labelId || change.labelId === label.id)) {
      const shown = shownSummary(change.msgId);
      if (shown) existing.replaceWith(row(inboxId, { ...shown, flags: change.flags }));
    }
    refreshCounts();
  };

  // The member may have moved on while the labels loaded.
  if (location.hash !== hash) return;
  show(
    h('p', {}, h('a', { href: '#' }, '← All inboxes')),
    h('h1', {}, name),
    mode ? h('p', { class: 'muted', id: 'inbox-mode' }, h('strong', {}, `${mode.name} inbox. `), mode.says) : null,
    h(
      'div',
      { class: 'actions' },
      h('a', { class: 'button', href: `#/compose/${inboxId}`, id: 'compose' }, 'Compose'),
      h('a', { class: 'button secondary', href: `#/compose/${inboxId}/drafts`, id: 'drafts' }, 'Drafts'),
      h('a', { class: 'button secondary', href: '#/events', id: 'activity' }, 'Activity'),
    ),
    searchForm(inboxId, labels, ''),
    nav,
    h('h2', { id: 'label-heading' }, labelName(label)),
    status,
    arrivals,
    h('p', { id: 'messages-hint', class: 'sr-only' }, 'Arrow keys move between messages; Enter opens one.'),
    list,
    more,
  );
  // Rows keep what the list gave (their summary) so a flag change can redraw them.
  startListing(inboxId, label.id, { hash, name: labelName(label) }, true);
  await loadPage(true);

  // The member may have left while the first page loaded.
  if (location.hash !== hash || !main().contains(list)) return;
  // The inbox's stream, shared with the message screen (live.ts); left with the screen.
  subscribeWhileOn(hash, inboxId, {
    onOpen: (reconnected) => {
      status.textContent = 'Live: new mail appears here as it arrives.';
      status.dataset.live = 'true';
      status.dataset.connects = String(Number(status.dataset.connects ?? 0) + 1);
      // The inbox stream has no cursor: whatever happened while it was down is read again.
      if (reconnected) {
        void loadPage(true);
        refreshCounts();
      }
    },
    onDown: () => {
      status.textContent = 'Reconnecting for live updates…';
      delete status.dataset.live;
    },
    onChange: apply,
    onFail: (err) => {
      status.textContent = `Live updates stopped: ${err instanceof Error ? err.message : String(err)}`;
      delete status.dataset.live;
    },
  });
}

addRoute(/^#\/inbox\/(ibx_[0-9A-Z]{26})(?:\/label\/(lbl_[0-9A-Z]{26}))?$/, (m) => inboxScreen(m[1]!, m[2]));
