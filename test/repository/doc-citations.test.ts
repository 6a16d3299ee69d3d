// Comments and docs pages cite decisions as `docs/<page>.md, "<section>"`: each must name a page
// of docs/ and a heading of it (docs/architecture.md, "Citations"), so a renamed heading or a
// removed page fails here rather than leaving the citation pointing nowhere. No mail environment.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { expect } from 'chai';
import { ROOT } from '../../lib/paths.ts';

const SEARCHED = ['lib', 'adapters', 'bin', 'scripts', 'web', 'schemas', 'test', 'bench', 'docker', 'docs', 'README.md'];
/** `docs/mail.md, "The index"`, `docs/api.md, "Inboxes", "Sending"`, `docs/operations.md "Metrics"`. */
const CITATION = /docs\/([a-z-]+\.md)[,:]?\s*\(?"([^"]+)"((?:,? (?:and )?"[^"]+")*)/g;

function files(path: string): string[] {
  if (statSync(path).isFile()) return [path];
  return readdirSync(path).flatMap((name) => (name === 'node_modules' ? [] : files(join(path, name))));
}

/** A section name wrapped over lines of a comment, as one line. */
const unwrap = (text: string) => text.replace(/\s*\n\s*(?:\/\/|--|\*|#)?\s*/g, ' ');
const plain = (heading: string) => heading.replace(/`/g, '');

describe('docs citations', function () {
  it('name a page of docs/ and one of its headings', () => {
    const docs = join(ROOT, 'docs');
    const headings = new Map<string, string[]>();
    for (const page of readdirSync(docs).filter((f) => f.endsWith('.md'))) {
      headings.set(
        page,
        readFileSync(join(docs, page), 'utf8')
          .split('\n')
          .filter((l) => l.startsWith('#'))
          .map((l) => plain(l.replace(/^#+\s*/, ''))),
      );
    }
    const broken: string[] = [];
    let seen = 0;
    for (const file of SEARCHED.flatMap((p) => files(join(ROOT, p)))) {
      if (file.endsWith('RESULTS.md') || /\.(png|ico|woff2?)$/.test(file)) continue;
      const text = readFileSync(file, 'utf8');
      for (const m of text.matchAll(CITATION)) {
        const page = m[1]!;
        const sections = [m[2]!, ...[...(m[3] ?? '').matchAll(/"([^"]+)"/g)].map((s) => s[1]!)].map(unwrap);
        for (const section of sections) {
          if (section.startsWith('<')) continue; // a placeholder in prose that explains the form
          seen++;
          const heads = headings.get(page);
          if (!heads?.some((h) => h.startsWith(plain(section)))) broken.push(`${relative(ROOT, file)}: docs/${page}, "${section}"`);
        }
      }
    }
    expect(seen, 'citations found').to.be.greaterThan(100);
    expect(broken, 'citations of a page or heading that does not exist').to.deep.equal([]);
  });
});
