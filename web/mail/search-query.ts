// The search box's language, turned into GET /inboxes/{inbox}/search's conditions (docs/search.md).
// Only what the API answers for a web session: metadata. Bodies are not searchable here (a
// zero-access inbox's are ciphertext to the server, and sessions may not search content at all),
// so plain words search the subject, and the box says so. No DOM here: test/search/search-query.test.ts
// runs it in Node.

export class SearchSyntaxError extends Error {}

export interface SearchTerms {
  /** Query parameters of the search, but `inLabel`. */
  conditions: Record<string, string>;
  /** The label named by `in:`, by name (the screen knows the inbox's labels). */
  label?: string;
}

/** `is:` values: the keyword condition each sets. The API takes one hasKeyword and one notKeyword. */
const IS: Record<string, ['hasKeyword' | 'notKeyword', string]> = {
  unread: ['notKeyword', 'seen'],
  read: ['hasKeyword', 'seen'],
  flagged: ['hasKeyword', 'flagged'],
  unflagged: ['notKeyword', 'flagged'],
  answered: ['hasKeyword', 'answered'],
  unanswered: ['notKeyword', 'answered'],
};

const WORD_FIELDS = ['from', 'to', 'cc', 'subject'] as const;
const SIZE_UNITS: Record<string, number> = { '': 1, k: 1024, m: 1024 * 1024 };

/** `prefix:value`, `prefix:"a value"`, `"a phrase"` or a word. */
const TOKEN = /([A-Za-z]+):(?:"([^"]*)"?|(\S*))|"([^"]*)"?|(\S+)/g;

/** A YYYY-MM-DD day's start in this browser's time zone, as RFC 3339. */
function dayStart(prefix: string, value: string): string {
  const m = /^(\d{4})-(\d{2})-(\d{2})$/.exec(value);
  const d = m ? new Date(Number(m[1]), Number(m[2]) - 1, Number(m[3])) : null;
  if (!m || !d || d.getMonth() !== Number(m[2]) - 1 || d.getDate() !== Number(m[3]))
    throw new SearchSyntaxError(`${prefix}: takes a date as YYYY-MM-DD, not "${value}".`);
  return d.toISOString();
}

function size(prefix: string, value: string): string {
  const m = /^(\d+)([kKmM]?)$/.exec(value);
  if (!m) throw new SearchSyntaxError(`${prefix}: takes a size in bytes, or with K or M (${prefix}:500K), not "${value}".`);
  return String(Number(m[1]) * SIZE_UNITS[m[2]!.toLowerCase()]!);
}

export function parseSearch(text: string): SearchTerms {
  const words: Record<(typeof WORD_FIELDS)[number], string[]> = { from: [], to: [], cc: [], subject: [] };
  const conditions: Record<string, string> = {};
  let label: string | undefined;
  const once = (name: string, value: string, said: string) => {
    if (conditions[name] !== undefined && conditions[name] !== value) throw new SearchSyntaxError(`Only one ${said} at a time.`);
    conditions[name] = value;
  };
  for (const m of text.matchAll(TOKEN)) {
    const prefix = m[1]?.toLowerCase();
    const value = (m[2] ?? m[3] ?? '').trim();
    if (prefix === undefined || value === '') {
      // A word (a subject's "Re:" too: a prefix with nothing after it is just a word).
      const word = (m[4] ?? m[5] ?? m[0]).trim();
      if (word) words.subject.push(word);
      continue;
    }
    if ((WORD_FIELDS as readonly string[]).includes(prefix)) words[prefix as (typeof WORD_FIELDS)[number]].push(value);
    else if (prefix === 'in') {
      if (label !== undefined && label !== value) throw new SearchSyntaxError('Only one in: at a time.');
      label = value;
    } else if (prefix === 'is') {
      const keyword = IS[value.toLowerCase()];
      if (!keyword) throw new SearchSyntaxError(`is: takes ${Object.keys(IS).join(', ')}; not "${value}".`);
      once(
        keyword[0],
        keyword[1],
        keyword[0] === 'hasKeyword' ? 'of is:read, is:flagged, is:answered' : 'of is:unread, is:unflagged, is:unanswered',
      );
    } else if (prefix === 'has') {
      if (value.toLowerCase() !== 'attachment') throw new SearchSyntaxError(`has: takes attachment; not "${value}".`);
      conditions.hasAttachment = 'true';
    } else if (prefix === 'after' || prefix === 'before') once(prefix, dayStart(prefix, value), `${prefix}:`);
    else if (prefix === 'larger') once('minSize', size(prefix, value), 'larger:');
    else if (prefix === 'smaller') once('maxSize', size(prefix, value), 'smaller:');
    else
      throw new SearchSyntaxError(
        `Unknown search term "${prefix}:". Try from:, to:, cc:, subject:, in:, is:, has:attachment, after:, before:, larger:, smaller:.`,
      );
  }
  for (const field of WORD_FIELDS) if (words[field].length > 0) conditions[field] = words[field].join(' ');
  return label === undefined ? { conditions } : { conditions, label };
}
