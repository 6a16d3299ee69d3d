// Compiled event data schemas are freed, not just forgotten (docs/events.md, "Registered types"): registering and
// publishing 20,000 type versions must not keep 20,000 compiled schemas on the heap. Measured in
// a child process started with --expose-gc (test/helpers/schema-cache-heap.ts), so collections are real
// and this process's own heap does not blur the figure.
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { expect } from 'chai';
import { ROOT } from '../../lib/paths.ts';

const run = promisify(execFile);
const MB = 1024 * 1024;

describe('event types: compiled schemas stay bounded in memory', function () {
  // 20,000 compilations take about 10 s of CPU; this machine's cores are shared.
  this.timeout(600_000);

  it('20,000 type versions: the second 10,000 add no compiled schemas to the heap', async () => {
    const { stdout } = await run(
      process.execPath,
      ['--expose-gc', '--import', 'tsx', join(ROOT, 'test/helpers/schema-cache-heap.ts'), '10000'],
      {
        cwd: ROOT,
        maxBuffer: 1024 * 1024,
      },
    );
    const r = JSON.parse(stdout.trim().split('\n').at(-1)!) as {
      versions: number;
      afterFirst: number;
      afterSecond: number;
      growth: number;
    };
    expect(r.versions).to.equal(20_000);
    // Kept, each compiled schema costs about 7 KB: 10,000 more would be about 70 MB. Bounded,
    // the caches were already full after the first 10,000 and the heap stays level (the
    // generation of compiled schemas in use may be fuller or emptier: at most 2,000 of them).
    expect(
      r.growth / MB,
      `heap after 10,000: ${(r.afterFirst / MB).toFixed(1)} MB, after 20,000: ${(r.afterSecond / MB).toFixed(1)} MB`,
    ).to.be.below(25);
  });
});
