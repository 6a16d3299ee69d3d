// What a word is to message search (lib/mail/search.ts), the same for both store engines: the
// SQLite text index's tokenizer agrees with it, and the PostgreSQL one is built from it.

// SQLite's unicode61 tokenizer (categories L* N* Co, remove_diacritics 2) is the reference: a word
// is a run of letters, digits and private-use characters, anything else separates words (so a
// Devanagari vowel sign does too, as it does there). Diacritics as NFD splits them off (the
// combining diacritical blocks) are dropped, as remove_diacritics drops them; NFD, not NFKD: a
// ligature or a circled digit stays what unicode61 keeps it as.
const MARKS = /[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f]/g;
const NOT_WORD = /[^\p{L}\p{N}\p{Co}]+/u;
/** Longer runs are not words anyone types (an encoded blob in a Subject, say). */
const MAX_WORD = 100;

/**
 * The words of a text as the text index holds them: runs of letters and digits, lower case,
 * without diacritics. `alice@example.com` is alice, example, com: each address part is a word.
 */
export function searchWords(text: string): string[] {
  return text
    .normalize('NFD')
    .replace(MARKS, '')
    .toLowerCase()
    .split(NOT_WORD)
    .filter((w) => w.length > 0 && w.length <= MAX_WORD);
}
