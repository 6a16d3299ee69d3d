// `#/events`: the project event log for the member's inboxes, newest first, a page at a time.
// GET /events reads oldest first (docs/api.md, "Events") and a web session must name its inboxes, so the
// screen walks the log forward from the start, keeps the newest KEEP events, and pages through
// those. Events carry ids and metadata only (never message content), so holding them is cheap.
import type { InboxList } from '../schemas/wire.ts';
import { api } from './api.ts';
import { timeElement } from './dates.ts';
import { messageHash } from './mail/list.ts';
import { addRoute, navigate } from './routes.ts';
import { button, h, show, type Child } from './ui.ts';

/** How many of the newest events the screen keeps; older ones are not shown. */
const KEEP = 2000;
const PAGE = 50;
const READ = 500;

interface LogEvent {
  id: string;
  type: string;
  time: string;
  containerid?: string;
  subject?: string;
  data?: Record<string, unknown>;
}

async function newestEvents(inboxIds: string[]): Promise<LogEvent[]> {
  const kept: LogEvent[] = [];
  let after: string | undefined;
  // A page that returns nothing and does not move the cursor is the end of the log; a sparse
  // filter can return an empty page that still moves it (docs/events.md), so that is not the end.
  for (;;) {
    const q = new URLSearchParams({ inboxes: inboxIds.join(','), limit: String(READ) });
    if (after) q.set('after', after);
    const page = await api<{ events: LogEvent[]; cursor: string }>('GET', `/events?${q}`);
    kept.push(...page.events);
    if (kept.length > KEEP) kept.splice(0, kept.length - KEEP);
    if (page.events.length === 0 && page.cursor === after) break;
    after = page.cursor;
  }
  return kept.reverse();
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
  const events = inboxes.length ? await newestEvents(inboxes.map((i) => i.inboxId)) : [];
  let at = 0;
  const list = h('ul', { class: 'list', id: 'events' });
  // A status message: paging with Newer and Older says where it is now.
  const position = h('p', { class: 'muted', id: 'events-position', role: 'status' });
  // Plain buttons: render() decides whether they are enabled, which button() would undo.
  const newer = h('button', { type: 'button', class: 'secondary', id: 'events-newer' }, 'Newer');
  const older = h('button', { type: 'button', class: 'secondary', id: 'events-older' }, 'Older');
  newer.addEventListener('click', () => render(at - PAGE));
  older.addEventListener('click', () => render(at + PAGE));
  function render(start: number): void {
    at = Math.max(0, Math.min(start, Math.max(0, events.length - PAGE)));
    list.replaceChildren(
      ...events
        .slice(at, at + PAGE)
        .map((e) =>
          h(
            'li',
            { 'data-type': e.type, 'data-event': e.id },
            h('span', {}, h('strong', {}, TYPE_WORDS[e.type] ?? e.type), ' ', summary(e), ...messageLink(e)),
            h('span', { class: 'muted' }, `${names.get(e.containerid ?? '') ?? e.containerid ?? 'project'} · `, timeElement(e.time)),
          ),
        ),
    );
    position.textContent = events.length
      ? `${at + 1}–${Math.min(at + PAGE, events.length)} of ${events.length}${events.length === KEEP ? ' (the newest kept)' : ''}`
      : 'No events yet.';
    newer.disabled = at === 0;
    older.disabled = at + PAGE >= events.length;
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
