// What a word is to message search (lib/mail/search.ts), the same for both store engines: both
// text indexes are built from it (each word marked with its inbox, inboxMark).
//
// SQLite's unicode61 tokenizer (categories L* N* Co, remove_diacritics 2) is the reference, rule
// for rule (test/search/search-words.test.ts compares them): a word is a run of letters, digits and
// private-use characters; a Latin letter with diacritics is its base letter (only Latin: a Greek
// ΐ stays ΐ); the combining diacritics below are dropped inside a word, any other mark separates
// words; case is folded one character at a time (no final sigma).

import { createHash } from 'node:crypto';

const LATIN = /[\u00c0-\u024f\u1e00-\u1eff]/g;
/** Latin letters unicode61 leaves whole although they decompose (Ǣ, Ǿ, …). */
const UNFOLDED = /[\u01e0-\u01e3\u01ee\u01ef\u01fc-\u01ff]/;
/** The combining marks unicode61 drops (sqlite3Fts5UnicodeIsdiacritic). */
const DIACRITICS = /[\u0300-\u0304\u0306-\u030c\u030f\u0311\u031b\u0323-\u0328\u032d\u032e\u0330\u0331]/g;
const NOT_WORD = /[^\p{L}\p{N}\p{Co}]+/u;
/** Longer runs are not words anyone types (an encoded blob in a Subject, say). */
const MAX_WORD = 100;

function foldLatin(c: string): string {
  // The long s folds to s as its case (ſ, ẛ).
  if (c === '\u017f' || c === '\u1e9b') return 's';
  return UNFOLDED.test(c) ? c : c.normalize('NFD').replace(/[\u0300-\u036f]/g, '');
}

/**
 * The words of a text as the text index holds them: runs of letters and digits, lower case,
 * without diacritics. `alice@example.com` is alice, example, com: each address part is a word.
 */
export function searchWords(text: string): string[] {
  const folded = Array.from(text.replace(LATIN, foldLatin), (c) => c.toLowerCase()).join('');
  return folded
    .replace(DIACRITICS, '')
    .split(NOT_WORD)
    .filter((w) => w.length > 0 && w.length <= MAX_WORD);
}

/**
 * The inbox's mark on each of its words in the text index (docs/search.md, "The text index"):
 * eight letters and digits from a hash of its id. A word is held as `<mark><word>`, so the
 * index's terms are grouped by inbox and a search, a prefix one included, reads only the terms
 * of the inbox it searches, whatever the other inboxes hold. Two inboxes sharing a mark (one pair
 * in about a million inboxes) only share that cost: results still come from one inbox.
 */
export function inboxMark(inboxId: string): string {
  const n = createHash('sha256').update(inboxId).digest().readUIntBE(0, 5);
  return n.toString(32).padStart(8, '0');
}

/** The words of a text as the text index holds them for this inbox (searchWords, each marked). */
export function markedWords(inboxId: string, text: string): string[] {
  const mark = inboxMark(inboxId);
  return searchWords(text).map((w) => mark + w);
}
