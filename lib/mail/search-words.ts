// What a word is to message search (lib/mail/search.ts), the same for both store engines: the
// SQLite text index's tokenizer agrees with it, and the PostgreSQL one is built from it.

// Diacritics as NFKD splits them off (the combining diacritical blocks), as SQLite's unicode61
// `remove_diacritics 2` drops them. Other marks (a Devanagari vowel sign) belong to their word,
// as they do to unicode61: only spaces and punctuation separate words.
const MARKS = /[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f]/g;
const NOT_WORD = /[^\p{L}\p{N}\p{M}]+/u;
/** Longer runs are not words anyone types (an encoded blob in a Subject, say). */
const MAX_WORD = 100;

/**
 * The words of a text as the text index holds them: runs of letters, digits (and their marks), lower case,
 * without diacritics. `alice@example.com` is alice, example, com: each address part is a word.
 */
export function searchWords(text: string): string[] {
  return text
    .normalize('NFKD')
    .replace(MARKS, '')
    .toLowerCase()
    .split(NOT_WORD)
    .filter((w) => w.length > 0 && w.length <= MAX_WORD);
}
