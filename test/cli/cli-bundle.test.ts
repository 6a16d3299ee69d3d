// bin/postern runs bin/postern.ts bundled into plain JavaScript (bin/cli-bundle.mjs), rebuilt
// whenever a source it was built from changed. Each test works on a copy of the sources whose
// node_modules has every package but tsx, so nothing here can pass by compiling TypeScript, and
// editing the copy disturbs no other test.
import { execFile } from 'node:child_process';
import {
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  utimesSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import { ROOT } from '../../lib/paths.ts';
import { envVars, mailEnv, newStore, type TestStore } from '../helpers/harness.ts';

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

/** A copy of what bin/postern builds from, with ROOT's packages except tsx. */
function copySources(): string {
  const dir = mkdtempSync(join(tmpdir(), 'postern-bundle-'));
  for (const part of ['bin', 'lib', 'adapters', 'scripts', 'schemas', 'package.json', 'tsconfig.json']) {
    cpSync(join(ROOT, part), join(dir, part), { recursive: true });
  }
  mkdirSync(join(dir, 'node_modules'));
  for (const name of readdirSync(join(ROOT, 'node_modules'))) {
    if (name !== 'tsx' && name !== '.bin') symlinkSync(join(ROOT, 'node_modules', name), join(dir, 'node_modules', name));
  }
  return dir;
}

function runFile(file: string, args: string[], env: Record<string, string> = {}): Promise<Run> {
  return new Promise((resolve) => {
    execFile(file, args, { env: { ...process.env, ...env } }, (err, stdout, stderr) => {
      resolve({ code: err ? Number((err as { code?: number }).code ?? -1) : 0, stdout, stderr });
    });
  });
}

/** The copy's bin/postern. */
const run = (dir: string, args: string[], env: Record<string, string> = {}): Promise<Run> =>
  runFile(join(dir, 'bin', 'postern'), args, env);

const stampOf = (dir: string) =>
  JSON.parse(readFileSync(join(dir, 'dist', 'cli', 'current.json'), 'utf8')) as { build: string; inputs: Record<string, string> };

describe('bin/postern runs its bundle', function () {
  // Every first run builds (esbuild), and the machine may be busy.
  this.timeout(180_000);
  let dir: string;
  let store: TestStore;

  before(async () => {
    dir = copySources();
    store = await newStore(dir);
  });
  after(async () => {
    await store?.drop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('builds on the first runs, several at once, and every one of them answers in full', async () => {
    const runs = await Promise.all([1, 2, 3, 4].map(() => run(dir, ['help'])));
    for (const r of runs) {
      expect(r.code, r.stderr).to.equal(0);
      expect(r.stdout)
        .to.match(/^usage:\n/)
        .and.match(/postern admin import --from FILE/);
    }
    const { build } = stampOf(dir);
    // Each built the same bundle: one build stays, no half-written one is left behind.
    expect(readdirSync(join(dir, 'dist', 'cli')).sort()).to.deep.equal([build, 'current.json']);
  });

  it('is built ahead by `npm run build:cli`, which has nothing to do while it is current', async () => {
    const ahead = await runFile(process.execPath, [join(dir, 'bin', 'cli-bundle.mjs')]);
    expect(ahead.code, ahead.stderr).to.equal(0);
    expect(JSON.parse(ahead.stdout)).to.deep.include({ bundle: `dist/cli/${stampOf(dir).build}/postern.mjs`, built: false });
  });

  it('answers a staff command without tsx, on the configured store', async () => {
    const env = envVars(mailEnv(), store.env);
    const created = await run(dir, ['admin', 'project', 'create', '--name', 'bundled'], env);
    expect(created.code, created.stdout + created.stderr).to.equal(0);
    const { id } = JSON.parse(created.stdout) as { id: string };
    const listed = await run(dir, ['admin', 'project', 'list'], env);
    expect(listed.code, listed.stderr).to.equal(0);
    expect((JSON.parse(listed.stdout) as Array<{ id: string; name: string }>).find((p) => p.id === id)?.name).to.equal('bundled');
  });

  it('rebuilds when a source it was built from is edited, or only has another modification time', async () => {
    expect((await run(dir, ['help'])).code).to.equal(0);
    const before = stampOf(dir);
    const source = join(dir, 'bin', 'postern.ts');
    writeFileSync(source, readFileSync(source, 'utf8').replace('const USAGE = `usage:', 'const USAGE = `usage (edited):'));
    const edited = await run(dir, ['help']);
    expect(edited.stdout).to.match(/^usage \(edited\):/);
    const after = stampOf(dir);
    expect(after.build).to.not.equal(before.build);
    expect(existsSync(join(dir, 'dist', 'cli', after.build, 'postern.mjs'))).to.equal(true);

    // Older, not newer: a checkout or a copy may set any time. The same content builds the same
    // bundle, and the stamp now has the file's new time.
    const ids = join(dir, 'lib', 'ids.ts');
    utimesSync(ids, new Date('2001-01-01T00:00:00Z'), new Date('2001-01-01T00:00:00Z'));
    expect((await run(dir, ['help'])).code).to.equal(0);
    const touched = stampOf(dir);
    expect(touched.inputs['lib/ids.ts']).to.equal(`${statSync(ids).mtimeMs}:${statSync(ids).size}`);
    expect(touched.build).to.equal(after.build);
  });
});
