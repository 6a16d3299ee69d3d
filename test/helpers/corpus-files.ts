// The real-world corpus (377 messages, ../shared/corpus by default, or POSTERN_CORPUS_DIR) and
// the one rule every suite and test that reads it follows: without it, a developer's run reports
// it pending, and CI (CI set) fails, so CI cannot pass without having run it.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ROOT } from '../../lib/paths.ts';

/** Kept outside the repository (../shared/corpus by default); POSTERN_CORPUS_DIR points elsewhere. */
export const CORPUS_DIR = process.env.POSTERN_CORPUS_DIR || join(ROOT, '..', 'shared', 'corpus');
/** CI runs every suite: there a missing corpus is a failure, not a skip. */
const IN_CI = !['', '0', 'false', 'no'].includes((process.env.CI ?? '').toLowerCase());

export interface CorpusFile {
  /** `eml/…` or `eml2/…`. */
  name: string;
  raw: Buffer;
}

/** Every message, in name order. */
export function corpusFiles(): CorpusFile[] {
  return ['eml', 'eml2'].flatMap((sub) =>
    readdirSync(join(CORPUS_DIR, sub))
      .filter((f) => f.endsWith('.eml'))
      .sort()
      .map((f) => ({ name: `${sub}/${f}`, raw: readFileSync(join(CORPUS_DIR, sub, f)) })),
  );
}

const present = () => existsSync(join(CORPUS_DIR, 'eml')) && existsSync(join(CORPUS_DIR, 'eml2'));

/** The test standing in for what needs the corpus when it is missing. */
function missing(title: string): void {
  (IN_CI ? it : it.skip)(`${title}: needs the corpus at ${CORPUS_DIR} (POSTERN_CORPUS_DIR)`, () => {
    throw new Error(
      `the corpus is missing at ${CORPUS_DIR}; CI (CI=${process.env.CI}) must run this suite: provide it, or point POSTERN_CORPUS_DIR at it`,
    );
  });
}

/** describe() for a suite that reads the corpus. */
export function describeWithCorpus(title: string, suite: (this: Mocha.Suite) => void): void {
  if (present()) describe(title, suite);
  else describe(title, () => missing(title));
}

/** it() for one test that reads the corpus, in a suite that does not otherwise need it. */
export function itWithCorpus(title: string, test: (this: Mocha.Context) => Promise<void>): void {
  if (present()) it(title, test);
  else missing(title);
}
