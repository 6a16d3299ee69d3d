// Without "exit" in .mocharc, a handle a test leaves open would hang the run. The global teardown
// (test/helpers/setup.ts) turns that into a failure that names the handle: checked on a child mocha
// running a test that leaks a listening server.
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { expect } from 'chai';
import { ROOT } from '../../lib/paths.ts';

describe('a test run that leaves a handle open', function () {
  this.timeout(90_000);

  it('fails soon after the suite, naming what holds the process', async () => {
    const started = Date.now();
    const child = spawn(
      process.execPath,
      [
        join(ROOT, 'node_modules/mocha/bin/mocha.js'),
        '--no-config',
        '--import=tsx',
        '--require',
        'test/helpers/setup.ts',
        'test/fixtures/leaks-a-server.ts',
      ],
      { cwd: ROOT, env: process.env, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let output = '';
    child.stdout.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr.on('data', (d: Buffer) => (output += d.toString()));
    const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
    expect(code, output).to.equal(1);
    expect(output).to.include('1 passing');
    expect(output).to.include('still alive 10 s after the suite ended');
    expect(output).to.match(/Server \{"address":"127\.0\.0\.1"/);
    expect(Date.now() - started).to.be.below(80_000);
  });
});
