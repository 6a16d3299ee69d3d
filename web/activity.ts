// `#/events`: the project event log for the member's inboxes, newest first, a page at a time.
// Pages are read backwards from the newest event (GET /events?order=desc, then `before` the last
// page's cursor: docs/events.md, "Reading backwards"), so a visit reads one page, not the log;
// pages already read are kept for Newer. A web session must name its inboxes (spec 4.6).
import type { InboxList } from '../schemas/wire.ts';
import { api } from './api.ts';
import { timeElement } from './dates.ts';
import { messageHash } from './mail/list.ts';
import { addRoute, navigate } from './routes.ts';
import { button, h, report, show, type Child } from './ui.ts';

const PAGE = 50;

interface LogEvent {
  id: string;
  type: string;
  time: string;
  containerid?: string;
  subject?: string;
  data?: Record<string, unknown>;
}

interface OlderPage {
  events: LogEvent[];
  /** For the next, older page's `before`. */
  cursor: string | null;
  /** The start of the log was reached: nothing older. */
  end: boolean;
}

/**
 * Up to PAGE events older than `before` (null: from the newest), newest first. A sparse stretch
 * of the log can answer with fewer, even none, while its cursor moves on: read on until the page
 * is full or the log's start (an empty page whose cursor did not move).
 */
async function olderEvents(inboxIds: string[], before: string | null): Promise<OlderPage> {
  const events: LogEvent[] = [];
  let cursor = before;
  while (events.length < PAGE) {
    const q = new URLSearchParams({ inboxes: inboxIds.join(','), limit: String(PAGE - events.length), order: 'desc' });
    if (cursor) q.set('before', cursor);
    const page = await api<{ events: LogEvent[]; cursor: string }>('GET', `/events?${q}`);
    events.push(...page.events);
    if (page.events.length === 0 && page.cursor === cursor) return { events, cursor, end: true };
    cursor = page.cursor;
  }
  return { events, cursor, end: false };
}

/** The built-in types in words; a project's own `ext.*` types keep the names it gave them. */
const TYPE_WORDS: Record<string, string> = {
  'message.received': 'Received',
  'message.added': 'Added',
  'message.removed': 'Removed',
  'message.flags': 'Marked',
  'mail.delivery.accepted': 'Sent',
  'mail.delivery.failed': 'Not delivered',
  'access.content.read': 'Opened',
  'access.content.searched': 'Searched',
  'access.key.set': 'Key changed',
};

/** The flags as the message screen names them. */
const FLAG_WORDS: Record<string, string> = { seen: 'read', not_junk: 'not junk' };

/** One line saying what happened, from the fields the built-in types carry (lib/events/catalog.ts). */
export function summary(e: LogEvent): string {
  const d = e.data ?? {};
  const text = (k: string) => (typeof d[k] === 'string' || typeof d[k] === 'number' ? String(d[k]) : null);
  switch (e.type) {
    case 'mail.delivery.accepted':
      return `Sent from ${text('from') ?? '?'} to ${text('recipients') ?? '?'} recipient(s)`;
    case 'mail.delivery.failed':
      return `Delivery from ${text('from') ?? '?'} failed: ${text('reason') ?? text('status') ?? 'no reason given'}`;
    case 'message.received':
      return `Received from ${text('from') ?? '?'}${text('size') ? ` (${text('size')} bytes)` : ''}`;
    case 'message.added':
      return 'Added to a label';
    case 'message.removed':
      return 'Removed from a label';
    case 'access.content.read':
      return 'A message was opened';
    case 'access.content.searched':
      return 'The inbox was searched';
    case 'access.key.set':
      return 'A member set a new encryption key';
    case 'message.flags':
      return `Now: ${Array.isArray(d.flags) ? (d.flags as unknown[]).map((f) => FLAG_WORDS[String(f)] ?? String(f)).join(', ') || 'unread, no marks' : '?'}`;
    default:
      return (
        e.subject ??
        Object.entries(d)
          .slice(0, 3)
          .map(([k, v]) => `${k}: ${typeof v === 'object' ? JSON.stringify(v) : String(v)}`)
          .join(', ')
      );
  }
}

/** A link to the message the event names, when it names one in an inbox. */
function messageLink(e: LogEvent): Child[] {
  const msgId = e.data?.msgId;
  if (typeof msgId !== 'string' || !/^msg_[0-9A-Z]{26}$/.test(msgId) || !e.containerid) return [];
  return [' · ', h('a', { href: messageHash(e.containerid, msgId) }, 'open')];
}

async function activityPage(): Promise<void> {
  show(h('h1', {}, 'Activity'), h('p', { class: 'muted' }, 'Loading…'));
  const { inboxes } = await api<InboxList>('GET', '/inboxes');
  const names = new Map(inboxes.map((i) => [i.inboxId, i.label ?? i.inboxId]));
  const ids = inboxes.map((i) => i.inboxId);
  // Pages read so far, newest first; Newer shows a kept one again, Older reads the next.
  const pages: OlderPage[] = [ids.length ? await olderEvents(ids, null) : { events: [], cursor: null, end: true }];
  let at = 0;
  const list = h('ul', { class: 'list', id: 'events' });
  // A status message: paging with Newer and Older says where it is now.
  const position = h('p', { class: 'muted', id: 'events-position', role: 'status' });
  // Plain buttons: render() decides whether they are enabled, which button() would undo.
  const newer = h('button', { type: 'button', class: 'secondary', id: 'events-newer' }, 'Newer');
  const older = h('button', { type: 'button', class: 'secondary', id: 'events-older' }, 'Older');
  newer.addEventListener('click', () => render(at - 1));
  older.addEventListener('click', () => {
    void (async () => {
      // Disabling the focused button would drop focus to the page: Newer takes it at the end.
      const hadFocus = document.activeElement === older;
      older.disabled = true;
      try {
        if (at + 1 >= pages.length) {
          const last = pages[pages.length - 1]!;
          const next = await olderEvents(ids, last.cursor);
          // Nothing older after all (the last page was exactly full): stay, and say so.
          if (next.events.length === 0) {
            last.end = true;
            return render(at);
          }
          pages.push(next);
        }
        render(at + 1);
      } catch (err) {
        report(err);
        render(at);
      } finally {
        if (hadFocus && older.disabled) newer.focus();
        else if (hadFocus) older.focus();
      }
    })();
  });
  function render(index: number): void {
    at = Math.max(0, Math.min(index, pages.length - 1));
    const page = pages[at]!;
    list.replaceChildren(
      ...page.events.map((e) =>
        h(
          'li',
          { 'data-type': e.type, 'data-event': e.id },
          h('span', {}, h('strong', {}, TYPE_WORDS[e.type] ?? e.type), ' ', summary(e), ...messageLink(e)),
          h('span', { class: 'muted' }, `${names.get(e.containerid ?? '') ?? e.containerid ?? 'project'} · `, timeElement(e.time)),
        ),
      ),
    );
    const first = at * PAGE + 1;
    position.textContent = page.events.length
      ? `Events ${first}–${first + page.events.length - 1}, newest first${page.end ? ' (the oldest)' : ''}`
      : 'No events yet.';
    newer.disabled = at === 0;
    older.disabled = page.end;
  }
  show(
    h('h1', {}, 'Activity'),
    h(
      'p',
      { class: 'muted' },
      'What happened in your inboxes, newest first. Events a few seconds old appear here (the log settles first).',
    ),
    h(
      'div',
      { class: 'actions' },
      button('Refresh', () => navigate('#/events'), { id: 'events-refresh' }),
      h('a', { href: '#' }, 'Home'),
    ),
    list,
    position,
    h('div', { class: 'actions' }, newer, older),
  );
  render(0);
}

addRoute(/^#\/events$/, activityPage);
