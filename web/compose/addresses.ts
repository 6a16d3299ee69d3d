// Address suggestions for the To, Cc and Bcc boxes (docs/app.md, "Compose"): the correspondents of
// the messages the inbox lists, newest first, read from the first page of its Inbox and Sent
// labels (From and To of each summary). No index on the server: what the member's own list shows
// is what is suggested, and nothing is kept once the compose screen is left.
import type { LabelList, MessageList } from '../../schemas/wire.ts';
import { api } from '../api.ts';
import { h } from '../ui.ts';
import { parseAddressList } from './mime.ts';

/** The most a page holds (schemas/mail.json). */
const PAGE = 100;
/** Options shown at once: a datalist is a list to pick from, not a directory. */
const SHOWN = 8;

/** `Name <address>` entries seen in `fields`, one per address (the first, newest, name wins). */
export function correspondents(fields: Array<string | undefined>, own: string[]): string[] {
  const ownSet = new Set(own.map((a) => a.toLowerCase()));
  const seen = new Map<string, string>();
  for (const field of fields) {
    if (!field) continue;
    let list;
    try {
      list = parseAddressList(field);
    } catch {
      // A summary's field the strict box parser refuses: suggested entries must parse when sent.
      continue;
    }
    for (const m of list) {
      const key = m.address.toLowerCase();
      if (ownSet.has(key) || seen.has(key)) continue;
      seen.set(key, m.name && !/[",<>@;:\\]/.test(m.name) ? `${m.name} <${m.address}>` : m.address);
    }
  }
  return [...seen.values()];
}

export async function seenAddresses(inboxId: string, own: string[]): Promise<string[]> {
  const { labels } = await api<LabelList>('GET', `/inboxes/${inboxId}/labels`);
  const wanted = labels.filter((l) => l.name.toUpperCase() === 'INBOX' || l.specialUse === '\\Sent');
  const pages = await Promise.all(
    wanted.map((l) => api<MessageList>('GET', `/inboxes/${inboxId}/labels/${l.id}/messages?limit=${PAGE}`).catch(() => null)),
  );
  const messages = pages.flatMap((p) => p?.messages ?? []).sort((x, y) => y.receivedAt.localeCompare(x.receivedAt));
  return correspondents(
    messages.flatMap((m) => [m.from, m.to]),
    own,
  );
}

/**
 * Suggests addresses in `boxes` through one datalist: each option is the box's text before its
 * last entry followed by a candidate, so picking one completes the entry being typed and keeps
 * the ones before it.
 */
export function attachSuggestions(boxes: HTMLInputElement[], candidates: Promise<string[]>): HTMLDataListElement {
  const list = h('datalist', { id: 'compose-addresses' });
  let known: string[] = [];
  const refresh = (box: HTMLInputElement) => {
    const cut = Math.max(box.value.lastIndexOf(','), box.value.lastIndexOf(';')) + 1;
    const before = box.value.slice(0, cut);
    const typed = box.value.slice(cut).trim().toLowerCase();
    const already = new Set(before.toLowerCase().match(/[^\s<>,;"]+@[^\s<>,;"]+/g) ?? []);
    const prefix = before ? `${before.trimEnd()} ` : '';
    const options = known
      .filter((c) => typed.length > 0 && c.toLowerCase().includes(typed))
      .filter((c) => !already.has((/<([^>]+)>$/.exec(c)?.[1] ?? c).toLowerCase()))
      .slice(0, SHOWN)
      .map((c) => h('option', { value: `${prefix}${c}` }));
    list.replaceChildren(...options);
  };
  candidates.then(
    (c) => {
      known = c;
      // Typed before the suggestions arrived: offered now.
      const active = boxes.find((b) => b === document.activeElement);
      if (active) refresh(active);
    },
    () => undefined,
  );
  for (const box of boxes) {
    box.setAttribute('list', list.id);
    box.addEventListener('input', () => refresh(box));
    box.addEventListener('focus', () => refresh(box));
  }
  return list;
}
