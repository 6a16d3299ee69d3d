// No corpus suite can pass unseen: without the corpus each is reported as skipped on a
// developer's machine, and fails in CI. Checked by running each in a child mocha, without the
// global setup (neither outcome needs the mail environment). And every test that reads the corpus
// does so through test/helpers/corpus-files.ts, the one place that rule lives.
import { spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { expect } from 'chai';
import { ROOT } from '../../lib/paths.ts';

/** Each suite that reads the corpus, and the tests of it that do (a grep), when not all of them. */
const CORPUS_SUITES: Array<{ file: string; grep?: string }> = [
  { file: 'test/mail/corpus.test.ts' },
  { file: 'test/send/send-corpus.test.ts' },
  { file: 'test/crypto/encryption-corpus.test.ts' },
  { file: 'test/crypto/seal.test.ts', grep: 'corpus' },
  { file: 'test/mail/ingress.test.ts', grep: 'corpus' },
  { file: 'test/search/search-corpus.test.ts' },
  { file: 'test/mail/organize.test.ts' },
  { file: 'test/send/compose.test.ts', grep: 'corpus' },
  { file: 'test/mail/bulk.test.ts' },
  { file: 'test/mail/threads.test.ts' },
];

function mochaOn(suite: { file: string; grep?: string }, env: Record<string, string>): Promise<{ code: number; output: string }> {
  const args = [
    join(ROOT, 'node_modules/mocha/bin/mocha.js'),
    '--no-config',
    '--import=tsx',
    suite.file,
    ...(suite.grep ? ['--grep', suite.grep] : []),
  ];
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, args, { cwd: ROOT, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr.on('data', (d: Buffer) => (output += d.toString()));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code: code ?? -1, output }));
  });
}

describe('the corpus suites without their corpus', function () {
  this.timeout(120_000);
  const missing = { POSTERN_CORPUS_DIR: join(ROOT, 'no-such-corpus') };

  for (const suite of CORPUS_SUITES) {
    it(`${suite.file}${suite.grep ? ` (${suite.grep})` : ''} fails in CI saying what is missing, and is reported as skipped elsewhere`, async () => {
      const ci = await mochaOn(suite, { ...missing, CI: 'true' });
      expect(ci.code, ci.output).to.not.equal(0);
      expect(ci.output).to.include(`the corpus is missing at ${missing.POSTERN_CORPUS_DIR}`);
      expect(ci.output).to.match(/0 passing[\s\S]*1 failing/);

      const local = await mochaOn(suite, { ...missing, CI: '' });
      expect(local.code, local.output).to.equal(0);
      expect(local.output).to.match(/1 pending/);
      expect(local.output).to.include('needs the corpus at');
    });
  }

  it('every test file that reads the corpus goes through test/helpers/corpus-files.ts, and is listed above', () => {
    const own = new Set(['corpus-files.ts', 'corpus-ci.test.ts']);
    const readers = readdirSync(join(ROOT, 'test'), { recursive: true, encoding: 'utf8' })
      .filter((f) => f.endsWith('.ts') && !own.has(basename(f)))
      .filter((f) => /corpus-files\.ts|['"]corpus['"]|shared\/corpus/.test(readFileSync(join(ROOT, 'test', f), 'utf8')));
    for (const f of readers) {
      const text = readFileSync(join(ROOT, 'test', f), 'utf8');
      // Finding the corpus on its own path would bypass the CI rule.
      expect(text, f).to.not.match(/['"]shared['"],\s*['"]corpus['"]|POSTERN_CORPUS_DIR/);
    }
    const usingHelper = readers
      .filter((f) => readFileSync(join(ROOT, 'test', f), 'utf8').includes('../helpers/corpus-files.ts'))
      .map((f) => `test/${f}`);
    expect(usingHelper.sort()).to.deep.equal(CORPUS_SUITES.map((s) => s.file).sort());
  });
});
