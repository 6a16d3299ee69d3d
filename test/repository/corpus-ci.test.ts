// No corpus suite can pass unseen: without the corpus each is reported as skipped on a
// developer's machine, and fails in CI. Checked by running them in a child mocha (one for CI,
// one for a developer's machine), without the global setup. And every test that reads the corpus
// does so through test/helpers/corpus-files.ts, the one place that rule lives.
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { expect } from 'chai';
import { ROOT } from '../../lib/paths.ts';

/** Each suite that reads the corpus (all of it, or some tests through itWithCorpus). */
const CORPUS_SUITES: string[] = [
  'test/mail/corpus.test.ts',
  'test/send/send-corpus.test.ts',
  'test/crypto/encryption-corpus.test.ts',
  'test/crypto/seal.test.ts',
  'test/mail/ingress.test.ts',
  'test/search/search-corpus.test.ts',
  'test/mail/organize.test.ts',
  'test/send/compose.test.ts',
  'test/mail/bulk.test.ts',
  'test/mail/threads.test.ts',
];

/** One test as mocha's JSON reporter writes it. */
interface ReportedTest {
  file: string;
  fullTitle: string;
  err: { message?: string };
}
interface Report {
  stats: { passes: number; failures: number; pending: number };
  passes: ReportedTest[];
  failures: ReportedTest[];
  pending: ReportedTest[];
}

/**
 * Every corpus suite in one child mocha (one process start, not one per suite), running only the
 * tests that stand in for a missing corpus; the JSON report says which file each came from.
 */
function mochaOnAll(env: Record<string, string>): Promise<{ report: Report; output: string }> {
  const out = join(mkdtempSync(join(tmpdir(), 'postern-corpus-ci-')), 'report.json');
  const args = [
    join(ROOT, 'node_modules/mocha/bin/mocha.js'),
    '--no-config',
    '--import=tsx',
    // What the suites leave open once their stand-ins ran (a server a hook started) is not this
    // check's subject, and would keep the child alive after its report is written.
    '--exit',
    '--reporter=json',
    `--reporter-option=output=${out}`,
    '--grep',
    'needs the corpus at',
    ...CORPUS_SUITES,
  ];
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, args, { cwd: ROOT, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr.on('data', (d: Buffer) => (output += d.toString()));
    child.on('error', reject);
    child.on('close', () => {
      try {
        resolve({ report: JSON.parse(readFileSync(out, 'utf8')) as Report, output });
      } catch (err) {
        reject(new Error(`no report from the child mocha (${(err as Error).message}):\n${output}`));
      } finally {
        rmSync(dirname(out), { recursive: true, force: true });
      }
    });
  });
}

describe('the corpus suites without their corpus', function () {
  this.timeout(120_000);
  const missing = { POSTERN_CORPUS_DIR: join(ROOT, 'no-such-corpus') };
  const byFile = (tests: ReportedTest[]) => (file: string) => tests.filter((t) => t.file === join(ROOT, file));
  let ci: { report: Report; output: string };
  let local: { report: Report; output: string };
  before(async function () {
    // Two child processes that each load every corpus suite: minutes on a loaded two-core host.
    // One after the other: a suite's hooks may take the lane's fixed ports (ingress's LMTP).
    this.timeout(300_000);
    ci = await mochaOnAll({ ...missing, CI: 'true' });
    local = await mochaOnAll({ ...missing, CI: '' });
  });

  for (const file of CORPUS_SUITES) {
    it(`${file} fails in CI saying what is missing, and is reported as skipped elsewhere`, () => {
      const failed = byFile(ci.report.failures)(file);
      expect(failed, ci.output).to.not.be.empty;
      for (const t of failed) expect(t.err.message).to.include(`the corpus is missing at ${missing.POSTERN_CORPUS_DIR}`);
      expect(byFile(ci.report.passes)(file)).to.have.length(0);

      const skipped = byFile(local.report.pending)(file);
      expect(skipped, local.output).to.not.be.empty;
      for (const t of skipped) expect(t.fullTitle).to.include('needs the corpus at');
      expect(byFile(local.report.failures)(file)).to.have.length(0);
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
    expect(usingHelper.sort()).to.deep.equal([...CORPUS_SUITES].sort());
  });
});
