// The corpus suite cannot pass unseen: without its corpus it is reported as skipped on a
// developer's machine, and fails in CI. Checked by running it in a child mocha, without the
// global setup (neither outcome needs the mail environment).
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { expect } from 'chai';
import { ROOT } from '../lib/paths.ts';

function mochaOnCorpus(env: Record<string, string>): Promise<{ code: number; output: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [join(ROOT, 'node_modules/mocha/bin/mocha.js'), '--no-config', '--import=tsx', 'test/corpus.test.ts'], {
      cwd: ROOT,
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (d: Buffer) => (output += d));
    child.stderr.on('data', (d: Buffer) => (output += d));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code: code ?? -1, output }));
  });
}

describe('the corpus suite without its corpus', function () {
  this.timeout(60_000);
  const missing = { POSTERN_CORPUS_DIR: join(ROOT, 'no-such-corpus') };

  it('fails in CI, saying what is missing', async () => {
    const { code, output } = await mochaOnCorpus({ ...missing, CI: 'true' });
    expect(code, output).to.not.equal(0);
    expect(output).to.include(`the corpus is missing at ${missing.POSTERN_CORPUS_DIR}`);
    expect(output).to.match(/0 passing[\s\S]*1 failing/);
  });

  it('is reported as skipped elsewhere', async () => {
    const { code, output } = await mochaOnCorpus({ ...missing, CI: '' });
    expect(code, output).to.equal(0);
    expect(output).to.match(/1 pending/);
    expect(output).to.include('needs the corpus at');
  });
});
