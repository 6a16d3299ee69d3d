// What one message search may ask of the store (lib/mail/search.ts), apart so that lib/config.ts
// can name the defaults without loading the search.
import { unavailable } from '../errors.ts';

/**
 * What one search's words may cost (docs/search.md, "What a search may cost"): the words of
 * `from`, `to`, `cc` and `subject` together, the phrases whose last word matches as a prefix,
 * and how long such a last word must be to match as one (shorter, it matches a whole word: a
 * one-letter prefix is most of the inbox's words). The store's time for one search, in ms.
 */
export interface SearchBounds {
  maxWords: number;
  maxPrefixes: number;
  minPrefix: number;
  budgetMs: number;
}

/** The defaults of POSTERN_SEARCH_MAX_WORDS, _MAX_PREFIXES, _MIN_PREFIX and _TIMEOUT_MS (lib/config.ts). */
export const DEFAULT_SEARCH_BOUNDS: SearchBounds = { maxWords: 24, maxPrefixes: 12, minPrefix: 2, budgetMs: 3000 };

/** A search still running at its budget (SearchBounds.budgetMs), on either engine: the store's time ran out. */
export const searchOverBudget = (ms: number) =>
  unavailable(`the search took longer than ${ms} ms and was stopped: try again later, or narrow it (longer words, a label, dates)`, 5);
