// Message search (docs/search.md): JMAP's Email/query filter names (RFC 8621 4.4.1) over one inbox.
// Metadata conditions are answered by the index's text index (both engines, both modes); `body`
// and `text` read content, so they go to the mail server's own SEARCH and are audited.
import { forbidden, invalid, notFound, unprocessable } from '../errors.ts';
import { guidFromId } from '../ids.ts';
import type { MessageSearchPage } from '../../schemas/wire.ts';
import { FLAGS, imapSpellings } from './flags.ts';
import type { MailMirror } from './mirror.ts';
import { directionOf, primaryLocation, summarize } from './service.ts';
import { DEFAULT_SEARCH_BOUNDS, type SearchBounds } from './search-bounds.ts';
import { searchWords } from './search-words.ts';
import { collapsedSearch, withThreadCounts } from './thread-reads.ts';
import type { IndexSearch, MailInbox, Phrase, SearchAfter, TextField } from './types.ts';
import type { MailIndexStore, MailSource } from './ports.ts';

/** The query as the route validated it (schemas/mail.json MessageSearchQuery). */
export interface SearchQuery {
  limit: number;
  cursor?: string;
  inLabel?: string;
  from?: string;
  to?: string;
  cc?: string;
  subject?: string;
  text?: string;
  body?: string;
  after?: string;
  before?: string;
  minSize?: number;
  maxSize?: number;
  hasKeyword?: string;
  notKeyword?: string;
  hasAttachment?: boolean;
  /** docs/threads.md: one row per thread. */
  collapseThreads?: boolean;
  /** docs/threads.md, "Previews": checked and served by the route. */
  preview?: boolean;
}

/** What reading content needs beyond listing: checked by the route, which knows the caller. */
export const readsContent = (q: SearchQuery): boolean => q.body !== undefined || q.text !== undefined;

/**
 * A condition's phrases: each whitespace-separated piece of what the caller typed is a phrase
 * (its words adjacent, in order), the last word of each matching as a prefix when it has at
 * least `minPrefix` characters. `subject=invoice march` wants both words anywhere;
 * `from=alice@exa` wants that address, however it goes on; `subject=part 2` the word 2.
 */
export function searchPhrases(value: string, minPrefix = DEFAULT_SEARCH_BOUNDS.minPrefix): Phrase[] {
  return value
    .split(/\s+/)
    .map(searchWords)
    .filter((words) => words.length > 0)
    .map((words) => ({ words, prefix: [...words.at(-1)!].length >= minPrefix }));
}

// The cursor: the last row's place in the order (receivedAt, then GUID, both descending). Opaque
// to callers; a tampered one is a 400, never a wrong page.
const CURSOR = /^(\d{1,15})\.([0-9a-f]{32})$/;

export function encodeCursor(after: SearchAfter): string {
  return Buffer.from(`${after.receivedAt}.${after.guid}`).toString('base64url');
}

export function decodeCursor(cursor: string): SearchAfter {
  const m = CURSOR.exec(Buffer.from(cursor, 'base64url').toString('latin1'));
  if (!m) throw invalid('query parameter cursor is not a cursor this search returned');
  return { receivedAt: Number(m[1]), guid: m[2]! };
}

/** A Flag name (docs/api.md, "Flag and WebFlag") or a custom keyword: the IMAP spellings that mean it, lower case. */
function keywordSpellings(name: string): string[] {
  return (FLAGS as readonly string[]).includes(name) ? imapSpellings(name) : [name.toLowerCase()];
}

const TEXT_FIELDS: readonly TextField[] = ['from', 'to', 'cc', 'subject'];

/** The index's part of the query; throws 400/404 for what cannot be searched, 422 beyond the bounds. */
export function indexSearch(q: SearchQuery, bounds: SearchBounds = DEFAULT_SEARCH_BOUNDS): IndexSearch {
  const search: IndexSearch = { text: [], budgetMs: bounds.budgetMs };
  if (q.inLabel !== undefined) {
    const guid = guidFromId('lbl', q.inLabel);
    if (!guid) throw notFound('label not found');
    search.labelGuid = guid;
  }
  for (const field of TEXT_FIELDS) {
    const value = q[field];
    if (value === undefined) continue;
    const phrases = searchPhrases(value, bounds.minPrefix);
    if (phrases.length === 0) throw invalid(`query parameter ${field} has no word to search for (words are letters and digits)`);
    search.text.push({ field, phrases });
  }
  const phrases = search.text.flatMap((t) => t.phrases);
  const words = phrases.reduce((n, p) => n + p.words.length, 0);
  if (words > bounds.maxWords) {
    throw unprocessable(
      `the search has ${words} words in from, to, cc and subject together; at most ${bounds.maxWords} are searched at once`,
    );
  }
  const prefixes = phrases.filter((p) => p.prefix).length;
  if (prefixes > bounds.maxPrefixes) {
    throw unprocessable(
      `the search has ${prefixes} space-separated pieces in from, to, cc and subject together, each ending in a word matched as a prefix; at most ${bounds.maxPrefixes} are searched at once`,
    );
  }
  for (const field of ['body', 'text'] as const) {
    // An IMAP string cannot carry them (imapflow refuses to send it): the caller's mistake, not a 500.
    if (/[\0\r\n]/.test(q[field] ?? '')) throw invalid(`query parameter ${field} holds a line break or NUL, which IMAP cannot search for`);
  }
  if (q.after !== undefined) search.receivedFrom = Date.parse(q.after);
  if (q.before !== undefined) search.receivedBefore = Date.parse(q.before);
  if (q.minSize !== undefined) search.minSize = q.minSize;
  if (q.maxSize !== undefined) search.maxSize = q.maxSize;
  if (q.hasKeyword !== undefined) search.hasKeyword = keywordSpellings(q.hasKeyword);
  if (q.notKeyword !== undefined) search.notKeyword = keywordSpellings(q.notKeyword);
  if (q.hasAttachment !== undefined) search.hasAttachment = q.hasAttachment;
  return search;
}

export interface MailSearchOptions {
  index: MailIndexStore;
  mirror: MailMirror;
  source: MailSource;
  bounds?: SearchBounds;
}

export class MailSearch {
  private readonly index: MailIndexStore;
  private readonly mirror: MailMirror;
  private readonly source: MailSource;
  private readonly bounds: SearchBounds;

  constructor(o: MailSearchOptions) {
    this.index = o.index;
    this.mirror = o.mirror;
    this.source = o.source;
    this.bounds = o.bounds ?? DEFAULT_SEARCH_BOUNDS;
  }

  /**
   * One page, newest first. `body`/`text` need `recordRead`: the route gives it once it checked
   * that the caller may have content read; it is called (the audit event recorded) after every
   * other check passed and before the mail server reads anything. Without it they are refused.
   */
  async search(inbox: MailInbox, q: SearchQuery, recordRead?: () => Promise<void>): Promise<MessageSearchPage> {
    if (readsContent(q) && !recordRead) throw forbidden('body and text conditions read content');
    const search = indexSearch(q, this.bounds);
    const after = q.cursor === undefined ? null : decodeCursor(q.cursor);
    await this.mirror.refresh(inbox);
    // One read serves the label check and the page's locations (a round trip on PostgreSQL).
    let labels = await this.index.labels(inbox.id);
    if (search.labelGuid && !labels.some((l) => l.guid === search.labelGuid)) throw notFound('label not found');
    if (readsContent(q)) {
      await recordRead!();
      search.guids = await this.contentMatches(inbox, q, search.labelGuid);
      // The mail server's search can take seconds: labels made meanwhile may hold a match.
      labels = await this.index.labels(inbox.id);
    }
    const rows =
      search.guids?.length === 0
        ? []
        : q.collapseThreads
          ? await collapsedSearch(this.index, inbox.id, search, after, q.limit + 1)
          : await this.index.search(inbox.id, search, after, q.limit + 1);
    const more = rows.length > q.limit;
    const shown = rows.slice(0, q.limit);
    const sent = new Set(labels.filter((l) => l.specialUse === '\\Sent').map((l) => l.guid));
    const messages = shown.map(({ message, locations }) => {
      const [first, ...rest] = locations;
      // Inside a label, the message as that label lists it (its UID there); else as the detail shows it.
      const inLabel = search.labelGuid ? locations.find((l) => l.labelGuid === search.labelGuid) : undefined;
      const at = inLabel ?? primaryLocation([first!, ...rest], labels);
      return summarize(message, at, inLabel ? inLabel.uid : 0, directionOf(inbox, message, locations, sent));
    });
    if (q.collapseThreads) {
      await withThreadCounts(
        this.index,
        inbox.id,
        shown.map((r, i) => ({ summary: messages[i]!, message: r.message })),
      );
    }
    const last = shown.at(-1);
    return more && last
      ? { messages, cursor: encodeCursor({ receivedAt: last.message.receivedAt, guid: last.message.guid }) }
      : { messages };
  }

  /** The GUIDs whose content matches, from the mail server's SEARCH in every label searched. */
  private async contentMatches(inbox: MailInbox, q: SearchQuery, labelGuid: string | undefined): Promise<string[]> {
    // An empty label has nothing to find (and Dovecot nothing to index or read). Asked label by
    // label (the newest place of each): counting them all scans every place of the inbox (12 ms
    // at 100,000 messages), and opening each on the mail server costs a round trip.
    const named = (await this.index.labels(inbox.id)).filter((l) => !labelGuid || l.guid === labelGuid);
    const held = await Promise.all(named.map(async (l) => (await this.index.page(inbox.id, l.guid, null, 1)).length > 0));
    const labels = named.filter((_, i) => held[i]);
    if (labels.length === 0) return [];
    const found = await this.source.searchContent(inbox, labels, {
      ...(q.body !== undefined ? { body: q.body } : {}),
      ...(q.text !== undefined ? { text: q.text } : {}),
    });
    const guids = new Set<string>();
    for (const [label, uids] of found) {
      for (const l of await this.index.locations(inbox.id, label, uids)) guids.add(l.msgGuid);
    }
    return [...guids];
  }
}
