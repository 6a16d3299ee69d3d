// Writes one benchmark's section of bench/RESULTS.md, between its markers, leaving the other
// sections as they are: each benchmark owns its section and can be rerun alone.
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ROOT } from '../lib/paths.ts';

export function writeResults(name: string, markdown: string): string {
  const file = join(ROOT, 'bench/RESULTS.md');
  const start = `<!-- ${name}:start -->`;
  const end = `<!-- ${name}:end -->`;
  const section = `${start}\n${markdown}${end}`;
  const current = existsSync(file) ? readFileSync(file, 'utf8') : '# Benchmark results\n';
  const next = current.includes(start)
    ? current.slice(0, current.indexOf(start)) + section + current.slice(current.indexOf(end) + end.length)
    : `${current.trimEnd()}\n\n${section}\n`;
  writeFileSync(file, next);
  return file;
}
