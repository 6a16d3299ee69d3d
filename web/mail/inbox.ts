// The inbox screen, `#/inbox/<ibx>` (INBOX) or `#/inbox/<ibx>/label/<lbl>`, in three panes
// (panes.ts): its labels with unread counts; the label's messages newest first a page at a time
// (docs/api.md, "Messages": `limit`, `before`), live changes from the inbox stream (docs/api.md,
// "Inbox change stream") applied in place, multi-select and the actions (actions.ts) with Undo,
// rows dragged onto a label to move them, Delete forever in Trash and Junk; and the reading pane,
// where message.ts opens a message without taking the list down. Rows, addresses and the arrow
// keys are list.ts's, shared with search.
import type { Flag, InboxList, Label, LabelList, LiveChange, MessageList, MessageSummary } from '../../schemas/wire.ts';
import { api } from '../api.ts';
import { addRoute } from '../routes.ts';
import { button, confirmDialog, h, main, report, show } from '../ui.ts';
import {
  ActionRefused,
  applyChange,
  deletedWords,
  deleteForever,
  deletesForever,
  isAction,
  messagesOf,
  plan,
  type Plan,
} from './actions.ts';
import { labelDepth, labelIcon, labelName, modeWords } from './labels.ts';
import { inboxHash, listKeys, moveTabStop, PAGE_SIZE, row, rowLinks, rowOf, shownSummary, startListing, tabStop } from './list.ts';
import { subscribe } from './live.ts';
import { closeReader, mountPanes, panesFor, type ListControl } from './panes.ts';
import { searchForm } from './search.ts';
import { helpButton } from './shortcuts.ts';
import { groupByThread, groupedByThread } from './thread.ts';
import { offer } from './undo.ts';

/** The inbox signed-in members land in next time (docs/app.md, "Panes"): an id, nothing secret. */
export const LAST_INBOX = 'postern.lastInbox';

function labelNav(inboxId: string, labels: Label[], current: string): HTMLElement {
  return h(
    'nav',
    { 'aria-label': 'Labels', 'aria-describedby': 'labels-hint' },
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

/** A removal the list itself undid a moment ago is its own change's echo, not news (ids → until). */
const SHIELD_MS = 15_000;

/** The most rows the list holds in the DOM, however long the label (docs/app.md, "Large labels"). */
const MAX_ROWS = 300;

async function inboxScreen(inboxId: string, wantedLabel: string | undefined): Promise<void> {
  const hash = location.hash;
  // Back from a message opened from this list: the list is as it was; only the reading pane closes.
  const mounted = panesFor(inboxId);
  if (mounted && mounted.listHash === hash && mounted.open) return closeReader(mounted);
  const [{ inboxes }, { labels: firstLabels }] = await Promise.all([
    api<InboxList>('GET', '/inboxes'),
    api<LabelList>('GET', `/inboxes/${inboxId}/labels`),
  ]);
  let labels = firstLabels;
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
  if (grant) localStorage.setItem(LAST_INBOX, inboxId);

  const list = h('ul', {
    class: 'list messages',
    id: 'messages',
    'aria-label': `Messages in ${labelName(label)}`,
    'aria-describedby': 'messages-hint',
  });
  listKeys(list);
  const heading = h('h2', { id: 'label-heading', tabindex: '-1' }, labelName(label));
  const more = h('div', { class: 'actions' });
  const status = h('p', { class: 'muted', id: 'live-status', role: 'status' }, 'Connecting for live updates…');
  // New rows are seen as they appear; a screen reader hears how many came (a status message).
  const arrivals = h('p', { class: 'sr-only', id: 'new-mail', role: 'status' });
  let arrived = 0;
  let nav = labelNav(inboxId, labels, label.id);
  let before: number | undefined;
  const alive = () => main().contains(list);

  // Multi-select: the ids checked, kept across live redraws of their rows.
  const selected = new Set<string>();
  const draw = (m: MessageSummary) => row(inboxId, m, { selectable: true, selected: selected.has(m.id) });
  const rowEl = (id: string) => list.querySelector<HTMLLIElement>(`li.message[data-msg="${id}"]`);
  const ids = () => Array.from(list.querySelectorAll<HTMLLIElement>('li.message')).map((li) => li.dataset.msg!);

  const selectedCount = h('span', { id: 'selected-count', class: 'muted' });
  const moveTo = h(
    'select',
    { id: 'move-to', 'aria-label': 'Move the selected messages to' },
    h('option', { value: '' }, 'Move to…'),
    ...labels.filter((l) => l.id !== label.id).map((l) => h('option', { value: l.id }, labelName(l))),
  );
  const junkAction = label.specialUse === '\\Junk' ? 'not-junk' : 'junk';
  const toolbar = h(
    'div',
    { class: 'actions toolbar', id: 'bulk-actions', role: 'group', 'aria-label': 'Selected messages', hidden: '' },
    selectedCount,
    button('Archive', () => act('archive', [...selected]), { class: 'secondary', id: 'bulk-archive' }),
    button('Delete', () => act('trash', [...selected]), { class: 'secondary', id: 'bulk-trash' }),
    deletesForever(label) ? button('Delete forever', () => destroy([...selected]), { class: 'secondary', id: 'bulk-destroy' }) : null,
    button(junkAction === 'junk' ? 'Junk' : 'Not junk', () => act(junkAction, [...selected]), { class: 'secondary', id: 'bulk-junk' }),
    button('Read', () => act('read', [...selected]), { class: 'secondary', id: 'bulk-read' }),
    button('Unread', () => act('unread', [...selected]), { class: 'secondary', id: 'bulk-unread' }),
    button('Flag', () => act('flag', [...selected]), { class: 'secondary', id: 'bulk-flag' }),
    button('Unflag', () => act('unflag', [...selected]), { class: 'secondary', id: 'bulk-unflag' }),
    h(
      'span',
      { class: 'move' },
      moveTo,
      button('Move', () => act('move', [...selected], moveTo.value), { class: 'secondary', id: 'bulk-move' }),
    ),
    button('Clear selection', () => setSelection([]), { class: 'secondary', id: 'bulk-clear' }),
  );
  const selectAll = h('input', { type: 'checkbox', id: 'select-all' });
  // Grouped by conversation: one row per thread (its newest message here), which opens the thread.
  const grouped = groupedByThread();
  const conversations = h('input', { type: 'checkbox', id: 'group-threads', ...(grouped ? { checked: '' } : {}) });
  conversations.addEventListener('change', () => {
    groupByThread(conversations.checked);
    panes.open = undefined;
    void inboxScreen(inboxId, wantedLabel).catch(report);
  });
  const listQuery = (extra: Record<string, string> = {}) =>
    new URLSearchParams({ limit: String(PAGE_SIZE), ...(grouped ? { collapseThreads: 'true' } : {}), ...extra });
  const drawSelection = () => {
    const hadFocus = toolbar.contains(document.activeElement);
    for (const li of list.querySelectorAll<HTMLLIElement>('li.message')) {
      const on = selected.has(li.dataset.msg!);
      li.classList.toggle('selected', on);
      const box = li.querySelector<HTMLInputElement>('input.select');
      if (box) box.checked = on;
      const said = li.querySelector('.mark-selected');
      if (said) said.textContent = on ? ' selected' : '';
    }
    selectedCount.textContent = `${selected.size} selected`;
    toolbar.hidden = selected.size === 0;
    const all = list.querySelectorAll('li.message').length;
    selectAll.checked = all > 0 && selected.size === all;
    selectAll.indeterminate = selected.size > 0 && selected.size < all;
    // The toolbar went with the selection: focus goes back to the list rather than to the page.
    if (hadFocus && toolbar.hidden) focusRow(undefined);
  };
  const setSelection = (next: string[]) => {
    selected.clear();
    for (const id of next) selected.add(id);
    drawSelection();
  };
  const toggle = (id: string) => {
    if (selected.has(id)) selected.delete(id);
    else selected.add(id);
    drawSelection();
  };
  selectAll.addEventListener('change', () => setSelection(selectAll.checked ? ids() : []));
  list.addEventListener('change', (e) => {
    const box = e.target instanceof HTMLInputElement && e.target.classList.contains('select') ? e.target : null;
    const id = rowOf(box)?.dataset.msg;
    if (id) toggle(id);
  });
  // Space on a row selects it, as x does (Enter opens it).
  list.addEventListener('keydown', (e) => {
    const id = e.key === ' ' && !e.altKey && !e.ctrlKey && !e.metaKey ? rowOf(document.activeElement)?.dataset.msg : undefined;
    if (!id) return;
    e.preventDefault();
    toggle(id);
  });

  const focusRow = (id: string | undefined) => {
    const link = (id ? rowEl(id)?.querySelector<HTMLAnchorElement>(':scope > a') : null) ?? tabStop(list);
    if (link) moveTabStop(list, link);
    else heading.focus();
  };
  const neighbour = (id: string, step: 1 | -1) => {
    const all = ids();
    const at = all.indexOf(id);
    if (at < 0) return undefined;
    return all[at + step] ?? all[at - step];
  };

  // Rows taken out by an action (until the server refuses or the member undoes it).
  const shield = new Map<string, number>();
  const insertByUid = (li: HTMLLIElement) => {
    const uid = Number(li.dataset.uid);
    const below = Array.from(list.children).find((other) => Number((other as HTMLElement).dataset.uid) < uid);
    list.insertBefore(li, below ?? null);
  };
  const take = (taken: string[]) => {
    const rows = taken.map(rowEl).filter((li): li is HTMLLIElement => li !== null);
    for (const li of rows) li.remove();
    empty();
    /** Puts the rows back (only those `only` names, when given). */
    return (only?: string[]) => {
      for (const li of rows) {
        if (rowEl(li.dataset.msg!) || (only && !only.includes(li.dataset.msg!))) continue;
        const summary = shownSummary(li.dataset.msg!);
        insertByUid(summary ? draw(summary) : li);
      }
      empty();
      drawSelection();
    };
  };
  const redraw = (id: string, flags: Flag[]) => {
    const shown = shownSummary(id);
    const li = rowEl(id);
    if (!shown || !li) return;
    const focused = li.contains(document.activeElement);
    const tab = li.querySelector('a')?.tabIndex === 0;
    const next = draw({ ...shown, flags });
    li.replaceWith(next);
    const link = next.querySelector<HTMLAnchorElement>(':scope > a');
    if (link && (focused || tab)) moveTabStop(list, link, focused);
  };

  /**
   * The messages the rows `targets` stand for: themselves, or with the list grouped by
   * conversation, every message of each row's conversation in this label (actions.ts).
   */
  const messagesIn = (targets: string[]) =>
    grouped
      ? messagesOf(
          inboxId,
          label.id,
          targets.map((id) => shownSummary(id) ?? { id }),
        )
      : Promise.resolve(targets);

  /**
   * Takes the rows of `targets` out of the list at once. Focus follows the list: to the row after
   * the one it was on (or the last acted on), else before. Returns how to put them back, and that row.
   */
  const takeRows = (targets: string[]) => {
    const all = ids();
    const gone = new Set(targets);
    const from = rowOf(document.activeElement)?.dataset.msg ?? targets[targets.length - 1]!;
    const at = all.indexOf(from);
    const next =
      all.slice(at + 1).find((id) => !gone.has(id)) ??
      all
        .slice(0, Math.max(0, at))
        .reverse()
        .find((id) => !gone.has(id));
    const focusWasHere = list.contains(document.activeElement) || toolbar.contains(document.activeElement);
    const restore = take(targets);
    for (const id of targets) selected.delete(id);
    drawSelection();
    if (focusWasHere || document.activeElement === document.body) focusRow(next);
    return { restore, next };
  };

  /** An action on `targets`, at once on screen; reconciled by the server's answer and the stream. */
  const act = async (action: string, targets: string[], target?: string): Promise<void> => {
    if (!isAction(action) || targets.length === 0) return;
    let p: Plan;
    try {
      p = plan(action, label, labels, target);
    } catch (err) {
      if (err instanceof ActionRefused) return offer(err.message);
      throw err;
    }
    if (!p.removes) {
      const was = targets.map((id) => [id, shownSummary(id)?.flags] as const);
      for (const [id, flags] of was) if (flags) redraw(id, p.flags!(flags));
      try {
        const messages = await messagesIn(targets);
        offer(p.done(messages.length));
        await applyChange(inboxId, messages, p.change);
      } catch (err) {
        for (const [id, flags] of was) if (flags) redraw(id, flags);
        throw err;
      }
      refreshCounts();
      return;
    }
    const { restore, next } = takeRows(targets);
    let messages: string[];
    try {
      messages = await messagesIn(targets);
    } catch (err) {
      restore();
      throw err;
    }
    const done = applyChange(inboxId, messages, p.change);
    const undo = p.undo!;
    offer(
      p.done(messages.length),
      async () => {
        // The first change must be in before its opposite goes.
        await done.catch(() => undefined);
        for (const id of messages) shield.set(id, Date.now() + SHIELD_MS);
        restore();
        focusRow(targets[0]);
        await applyChange(inboxId, messages, undo);
        refreshCounts();
      },
      () => focusRow(next),
    );
    try {
      await done;
    } catch (err) {
      restore();
      report(err);
    }
    refreshCounts();
  };

  /**
   * Delete forever (Trash and Junk only, docs/organize.md, "Delete forever"): asked first, then
   * the rows leave at once and each message is deleted; not undoable. Rows of messages the server
   * kept (also in another label) come back. `confirmed` runs once the member said yes.
   */
  const destroy = async (targets: string[], confirmed: () => void = () => undefined): Promise<void> => {
    if (targets.length === 0) return;
    if (!deletesForever(label)) return offer('Delete forever is for messages in Trash or Junk: delete them to Trash first.');
    const conversations = grouped && targets.some((id) => (shownSummary(id)?.thread?.messages ?? 1) > 1);
    const n = targets.length;
    const what = conversations
      ? `${n} conversation${n === 1 ? '' : 's'} (every message of ${n === 1 ? 'it' : 'them'} in ${labelName(label)})`
      : n === 1
        ? 'This message'
        : `These ${n} messages`;
    const sure = await confirmDialog(
      'Delete forever?',
      `${what} will be deleted for good, from this inbox and from every mail app that reads it. This cannot be undone.`,
      'Delete forever',
    );
    if (!sure) return;
    const { restore } = takeRows(targets);
    confirmed();
    try {
      const result = await deleteForever(inboxId, await messagesIn(targets));
      if (result.kept.length > 0) restore(result.kept);
      offer(deletedWords(result));
    } catch (err) {
      // Those deleted leave again with their removal from the stream.
      restore();
      report(err);
    }
    refreshCounts();
  };

  // The window (docs/app.md, "Large labels"): at most MAX_ROWS rows in the DOM. Rows scrolled far
  // past go into `above` or `below` (their summaries, newest first) and a spacer of their measured
  // height keeps the scroll where it was; they come back as the spacer nears the view. Older
  // pages load as the end of the list nears it.
  const topSpacer = h('div', { class: 'spacer', id: 'rows-above', 'aria-hidden': 'true' });
  const bottomSpacer = h('div', { class: 'spacer', id: 'rows-below', 'aria-hidden': 'true' });
  const above: MessageSummary[] = [];
  const below: MessageSummary[] = [];
  let aboveHeight = 0;
  let belowHeight = 0;
  const setSpacers = () => {
    if (above.length === 0) aboveHeight = 0;
    if (below.length === 0) belowHeight = 0;
    topSpacer.style.height = `${Math.max(0, aboveHeight)}px`;
    bottomSpacer.style.height = `${Math.max(0, belowHeight)}px`;
  };
  const domRows = () => Array.from(list.querySelectorAll<HTMLLIElement>('li.message'));
  const outOfWindow = (id: string) => above.some((m) => m.id === id) || below.some((m) => m.id === id);
  /** Takes rows off one end while there are more than MAX_ROWS (never the row focus is on). */
  const trim = (end: 'top' | 'bottom') => {
    const rows = domRows();
    const excess = rows.length - MAX_ROWS;
    if (excess <= 0) return;
    const taken = end === 'top' ? rows.slice(0, excess) : rows.slice(rows.length - excess).reverse();
    const gone: MessageSummary[] = [];
    for (const li of taken) {
      if (li.contains(document.activeElement)) break;
      const summary = shownSummary(li.dataset.msg!);
      if (!summary) break;
      const height = li.getBoundingClientRect().height;
      li.remove();
      gone.push(summary);
      if (end === 'top') aboveHeight += height;
      else belowHeight += height;
    }
    if (end === 'top') above.push(...gone);
    else below.unshift(...gone.reverse());
    setSpacers();
  };
  /** Brings back up to a page of rows at one end of the window. */
  const bringBack = (end: 'top' | 'bottom') => {
    const back = end === 'top' ? above.splice(Math.max(0, above.length - PAGE_SIZE)) : below.splice(0, PAGE_SIZE);
    if (back.length === 0) return;
    const rows = back.map(draw);
    if (end === 'top') list.prepend(...rows);
    else list.append(...rows);
    const height = rows.reduce((sum, li) => sum + li.getBoundingClientRect().height, 0);
    if (end === 'top') aboveHeight -= height;
    else belowHeight -= height;
    setSpacers();
    trim(end === 'top' ? 'bottom' : 'top');
    drawSelection();
  };
  let loading = false;
  /** The next older rows: those the window let go first, else the next page. Resolves with the first new row. */
  const loadOlder = async (): Promise<string | undefined> => {
    if (loading) return undefined;
    loading = true;
    try {
      const last = domRows().length;
      if (below.length > 0) bringBack('bottom');
      else if (before !== undefined) await loadPage(false);
      const first = domRows()[last]?.dataset.msg;
      trim('top');
      return first;
    } finally {
      loading = false;
    }
  };
  // Near the view (a screen ahead): the spacer above brings rows back, the end loads older ones.
  // Watching again after each step asks once more whether the edge is still near.
  const near = new IntersectionObserver(
    (entries) => {
      for (const e of entries) {
        if (!e.isIntersecting || !alive()) continue;
        if (e.target === topSpacer && above.length > 0) {
          bringBack('top');
          near.unobserve(topSpacer);
          near.observe(topSpacer);
        } else if (e.target === more && (below.length > 0 || before !== undefined)) {
          void loadOlder().then(() => {
            near.unobserve(more);
            near.observe(more);
          }, report);
        }
      }
    },
    { rootMargin: '600px 0px' },
  );

  const loadPage = async (fresh: boolean) => {
    const q = listQuery(!fresh && before !== undefined ? { before: String(before) } : {});
    const page = await api<MessageList>('GET', `/inboxes/${inboxId}/labels/${label.id}/messages?${q}`);
    if (fresh) {
      list.replaceChildren();
      above.length = 0;
      below.length = 0;
      setSpacers();
    }
    for (const m of page.messages) if (!rowEl(m.id) && !outOfWindow(m.id)) list.append(draw(m));
    before = page.before;
    more.replaceChildren(
      ...(before !== undefined || below.length > 0
        ? [
            button(
              'Older messages',
              async () => {
                // The button goes with the last page: focus goes to the first row it brought.
                const first = await loadOlder();
                if (!more.querySelector('#older')) focusRow(first);
              },
              { class: 'secondary', id: 'older' },
            ),
          ]
        : []),
    );
    empty();
    drawSelection();
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
      if (!fresh || !alive()) return;
      labels = fresh.labels;
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
      const page = await api<MessageList>('GET', `/inboxes/${inboxId}/labels/${label.id}/messages?${listQuery()}`).catch(() => null);
      if (!page || !alive()) return;
      const had = arrived;
      for (const m of page.messages) {
        if (rowEl(m.id) || outOfWindow(m.id)) continue;
        // A conversation's new message takes the place of its row.
        if (grouped && m.threadId) list.querySelector(`li.message[data-thread="${m.threadId}"]`)?.remove();
        arrived++;
        // Scrolled far down a long list: the new row waits above the window, its place held.
        if (above.length > 0) {
          above.unshift(m);
          aboveHeight += list.getBoundingClientRect().height / Math.max(1, domRows().length);
          setSpacers();
          continue;
        }
        insertByUid(draw(m));
      }
      if (arrived > had)
        arrivals.textContent = `${arrived} new message${arrived === 1 ? '' : 's'} in ${labelName(label)} since you opened it.`;
      empty();
      drawSelection();
    }, 100);
  };

  const apply = (change: LiveChange) => {
    const existing = rowEl(change.msgId);
    if (change.type === 'message.added' && change.labelId === label.id && !existing) {
      // One listing per burst, whatever its size (a mail app moving a thousand messages here).
      refreshTop();
    } else if (change.type === 'message.removed' && change.labelId === label.id) {
      for (const kept of [above, below]) {
        const at = kept.findIndex((m) => m.id === change.msgId);
        if (at >= 0) kept.splice(at, 1);
      }
      // The echo of a change this list undid: the message is back (the undo's own add follows).
      if ((shield.get(change.msgId) ?? 0) > Date.now()) return refreshCounts();
      if (existing) {
        const focused = existing.contains(document.activeElement);
        const next = focused ? neighbour(change.msgId, 1) : undefined;
        existing.remove();
        selected.delete(change.msgId);
        drawSelection();
        if (focused) focusRow(next);
      }
      empty();
    } else if (change.type === 'message.flags' && existing && change.flags && (!change.labelId || change.labelId === label.id)) {
      redraw(change.msgId, change.flags);
    }
    refreshCounts();
  };

  const control: ListControl = {
    act,
    deleteForever: destroy,
    neighbour,
    focusRow,
    moveTargets: () => labels.filter((l) => l.id !== label.id).map((l) => ({ id: l.id, name: labelName(l) })),
    targets: () => (selected.size > 0 ? [...selected] : [rowOf(tabStop(list))?.dataset.msg].filter((id): id is string => !!id)),
    step: (by) => {
      const links = rowLinks(list);
      const at = links.indexOf(tabStop(list)!);
      // From outside the list, the first j or k goes into it, on the row it was last on.
      if (!list.contains(document.activeElement)) return moveTabStop(list, tabStop(list));
      moveTabStop(list, links[Math.max(0, Math.min(links.length - 1, at + by))]);
    },
    focused: () => rowOf(tabStop(list))?.dataset.msg,
    toggleSelect: () => {
      const id = rowOf(tabStop(list))?.dataset.msg;
      if (id) toggle(id);
    },
    focusMove: () => {
      if (selected.size === 0) control.toggleSelect();
      if (!toolbar.hidden) moveTo.focus();
    },
    label: () => label,
    labels: () => labels,
  };

  // Drag to a label (docs/app.md, "Actions"): the rows dragged (the selection when the row is in
  // it, else that row) move to the label they are dropped on, as Move does, with Undo. Keyboard
  // users have Move (v); the labels say so (#labels-hint), and where a drop would go is said as
  // the drag reaches it. Dragging moves no focus and leaves the list's tab stop as it was.
  let dragged: string[] = [];
  const dropStatus = h('p', { class: 'sr-only', id: 'drop-status', role: 'status' });
  list.addEventListener('dragstart', (e) => {
    const id = e.target instanceof Element ? rowOf(e.target)?.dataset.msg : undefined;
    if (!id || !e.dataTransfer) return;
    dragged = selected.has(id) ? [...selected] : [id];
    e.dataTransfer.effectAllowed = 'move';
    e.dataTransfer.setData(
      'text/plain',
      dragged.length === 1 ? (shownSummary(id)?.subject ?? '(no subject)') : `${dragged.length} messages`,
    );
  });
  const clearTarget = () => {
    for (const a of document.querySelectorAll('.labels a.drop-target')) a.classList.remove('drop-target');
  };
  list.addEventListener('dragend', () => {
    dragged = [];
    clearTarget();
  });
  const dragToLabels = (pane: HTMLElement) => {
    const targetOf = (e: DragEvent) => {
      const a = e.target instanceof Element ? e.target.closest<HTMLAnchorElement>('a[data-label]') : null;
      return a && dragged.length > 0 && a.dataset.label !== label.id ? a : null;
    };
    pane.addEventListener('dragover', (e) => {
      const a = targetOf(e);
      if (!a) return;
      e.preventDefault();
      if (e.dataTransfer) e.dataTransfer.dropEffect = 'move';
      if (a.classList.contains('drop-target')) return;
      clearTarget();
      a.classList.add('drop-target');
      const to = labels.find((l) => l.id === a.dataset.label);
      dropStatus.textContent = `Drop to move ${dragged.length === 1 ? 'it' : `${dragged.length} messages`} to ${to ? labelName(to) : 'this label'}.`;
    });
    pane.addEventListener('dragleave', (e) => {
      const a = targetOf(e);
      if (a && !(e.relatedTarget instanceof Node && a.contains(e.relatedTarget))) a.classList.remove('drop-target');
    });
    pane.addEventListener('drop', (e) => {
      const a = targetOf(e);
      if (!a) return;
      e.preventDefault();
      const moving = dragged;
      dragged = [];
      clearTarget();
      dropStatus.textContent = '';
      act('move', moving, a.dataset.label).catch(report);
    });
  };

  // The member may have moved on while the labels loaded.
  if (location.hash !== hash) return;
  const { root, panes } = mountPanes(
    inboxId,
    hash,
    [
      h('p', {}, h('a', { href: '#' }, '← All inboxes')),
      h('h1', {}, name),
      mode ? h('p', { class: 'muted', id: 'inbox-mode' }, h('strong', {}, `${mode.name} inbox. `), mode.says) : null,
      h(
        'div',
        { class: 'actions' },
        h('a', { class: 'button', href: `#/compose/${inboxId}`, id: 'compose' }, 'Compose'),
        h('a', { class: 'button secondary', href: `#/compose/${inboxId}/drafts`, id: 'drafts' }, 'Drafts'),
        h('a', { class: 'button secondary', href: `#/inbox/${inboxId}/outbox`, id: 'outbox' }, 'Outbox'),
        h('a', { class: 'button secondary', href: '#/events', id: 'activity' }, 'Activity'),
        helpButton(),
      ),
      nav,
      h(
        'p',
        { id: 'labels-hint', class: 'sr-only' },
        'Messages dragged onto a label move there. From the keyboard: select them, then Move to (v).',
      ),
      dropStatus,
    ],
    [
      searchForm(inboxId, labels, ''),
      h(
        'div',
        { class: 'list-head' },
        h('label', { class: 'select-all' }, selectAll, h('span', { class: 'sr-only' }, 'Select all shown')),
        heading,
        h('label', { class: 'check conversations' }, conversations, 'Conversations'),
      ),
      status,
      arrivals,
      h(
        'p',
        { id: 'messages-hint', class: 'sr-only' },
        'Arrow keys move between messages; Enter opens one; Space or x selects it. Press ? for every shortcut.',
      ),
      toolbar,
      topSpacer,
      list,
      bottomSpacer,
      more,
    ],
    control,
  );
  show(root);
  dragToLabels(root.querySelector<HTMLElement>('.pane-labels')!);
  // Rows keep what the list gave (their summary) so a flag change can redraw them.
  startListing(inboxId, label.id, { hash, name: labelName(label) }, true);
  await loadPage(true);

  // The member may have left while the first page loaded.
  if (!alive() || panes.root !== root) return;
  near.observe(topSpacer);
  near.observe(more);
  // The inbox's stream, shared with the message screen (live.ts): kept while the panes are shown,
  // the reading pane's messages included, so the list stays live under an open message.
  const unsubscribe = subscribe(inboxId, {
    onOpen: (reconnected) => {
      status.textContent = 'Live: new mail appears here as it arrives.';
      status.dataset.live = 'true';
      status.dataset.connects = String(Number(status.dataset.connects ?? 0) + 1);
      // The inbox stream has no cursor: whatever happened while it was down is read again.
      if (reconnected) {
        void refreshTop();
        refreshCounts();
      }
    },
    onDown: () => {
      status.textContent = 'Reconnecting for live updates…';
      delete status.dataset.live;
    },
    onChange: (change) => (alive() ? apply(change) : stop()),
    onFail: (err) => {
      status.textContent = `Live updates stopped: ${err instanceof Error ? err.message : String(err)}`;
      delete status.dataset.live;
    },
  });
  // Left when the member goes anywhere but this list or one of this inbox's messages (which open
  // in its reading pane); a rebuild of the same list replaces this one's rows, and it stops too.
  const leave = () => {
    const now = location.hash;
    if (now === hash || now.startsWith(`#/inbox/${inboxId}/message/`)) return;
    stop();
  };
  const stop = () => {
    near.disconnect();
    window.removeEventListener('hashchange', leave);
    unsubscribe();
  };
  window.addEventListener('hashchange', leave);
}

addRoute(/^#\/inbox\/(ibx_[0-9A-Z]{26})(?:\/label\/(lbl_[0-9A-Z]{26}))?$/, (m) => inboxScreen(m[1]!, m[2]));
