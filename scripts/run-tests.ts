// `npm test`'s runner: every test file of both passes (SQLite, then PostgreSQL for what serves from
// a store; .mocharc.postgres.cjs says which), the container test and the static checks (npm run
// typecheck, npm run lint), several at a time. Most of the
// suite waits on IMAP, SMTP and PostgreSQL, not on the two cores, so files run side by side in
// lanes. Each lane has a mail environment of its own (its own Dovecot, Postfix, sink, Redis and
// PostgreSQL, on its own ports under .mailenv/lanes/), because some tests stop Dovecot or Postfix
// or listen on the environment's hint port; within a lane files run one after another, each in its
// own mocha process, so a file keeps every check a lone run has (the open-handle check included).
//
//   node --import tsx scripts/run-tests.ts [--jobs N] [--store sqlite|postgres|both] [--no-container] [--no-checks] [FILE…]
//
// Files start longest first, by the durations of this machine's last run (kept beside the mail
// environment), else by those of a reference run kept in test/durations.json (a fresh clone has no
// run of its own, and the container test, longest of all, must not start last), else by size. Each file's output is
// printed whole when it ends; the last line is the plain count CI reads.
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join, relative } from 'node:path';
import { ROOT } from '../lib/paths.ts';
import { ensureBundle } from '../bin/cli-bundle.mjs';
import { down, portsFree, up } from './mailenv.ts';
import { buildTestBundle, type TestBundle } from './test-bundle.ts';

type Store = 'sqlite' | 'postgres';
/** A lane's own mail environment. */
interface Lane {
  dir: string;
  basePort: number;
}
/** A test file on one engine, or an npm script (the container test, a static check). */
type Entry = { name: string; kind: 'mocha'; store: Store; file: string } | { name: string; kind: 'script'; script: string };
interface Outcome {
  entry: Entry;
  code: number | null;
  output: string;
  ms: number;
  passed: number;
  failed: number;
  skipped: number;
}

function parseArgs(argv: string[]): { jobs: number; stores: Store[]; container: boolean; checks: boolean; files: string[] } {
  let jobs = Number(process.env.POSTERN_TEST_JOBS ?? 5);
  let stores: Store[] = ['sqlite', 'postgres'];
  let container = true;
  let checks = true;
  const files: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === '--jobs') jobs = Number(argv[++i]);
    else if (a === '--store') {
      const s = argv[++i];
      stores = s === 'both' ? ['sqlite', 'postgres'] : s === 'sqlite' || s === 'postgres' ? [s] : [];
      if (stores.length === 0) throw new Error(`--store takes sqlite, postgres or both, not ${s}`);
    } else if (a === '--no-container') container = false;
    else if (a === '--no-checks') checks = false;
    else if (a.startsWith('-')) throw new Error(`unknown option ${a}`);
    else files.push(relative(ROOT, join(process.cwd(), a)));
  }
  if (!Number.isInteger(jobs) || jobs < 1) throw new Error('--jobs takes a whole number from 1');
  if (files.length > 0) container = checks = false;
  return { jobs, stores, container, checks, files };
}

/** The files of one pass: the SQLite pass runs them all, PostgreSQL's leaves out what its config ignores. */
function passFiles(store: Store, only: string[]): string[] {
  const all =
    only.length > 0
      ? only
      : readdirSync(join(ROOT, 'test'), { recursive: true, encoding: 'utf8' })
          .filter((f) => f.endsWith('.test.ts'))
          .map((f) => `test/${f}`)
          .sort();
  if (store === 'sqlite') return all;
  // Its patterns are file paths and folders ending in /**.
  const config = createRequire(import.meta.url)(join(ROOT, '.mocharc.postgres.cjs')) as { ignore: string[] };
  const ignored = (f: string) => config.ignore.some((p) => (p.endsWith('/**') ? f.startsWith(p.slice(0, -2)) : f === p));
  return all.filter((f) => !ignored(f));
}

const durationsFile = (envDir: string) => join(envDir, 'test-durations.json');
/** A full run's durations on a two-core machine, for a checkout that has none of its own yet. */
const referenceDurationsFile = join(ROOT, 'test', 'durations.json');

function readJsonDurations(file: string): Record<string, number> {
  if (!existsSync(file)) return {};
  try {
    return JSON.parse(readFileSync(file, 'utf8')) as Record<string, number>;
  } catch {
    return {};
  }
}

/** This machine's last durations, over the reference run's for entries it has not run yet. */
function readDurations(envDir: string): Record<string, number> {
  return { ...readJsonDurations(referenceDurationsFile), ...readJsonDurations(durationsFile(envDir)) };
}

/** Expected milliseconds: the last run's, or a guess from the file's size (about 40 ms a byte... of waiting). */
function expected(entry: Entry, durations: Record<string, number>): number {
  if (entry.kind === 'script') return durations[entry.name] ?? 60_000;
  return durations[entry.name] ?? statSync(join(ROOT, entry.file)).size * 4;
}

function counts(output: string): { passed: number; failed: number; skipped: number } {
  const n = (re: RegExp) => Number(re.exec(output)?.[1] ?? 0);
  return { passed: n(/^\s*(\d+) passing/m), failed: n(/^\s*(\d+) failing/m), skipped: n(/^\s*(\d+) pending/m) };
}

/** Lane k's environment: its own folder and the k-th free block of ports from 14300 up. */
async function laneEnvironments(count: number): Promise<Lane[]> {
  const lanes: Lane[] = [];
  for (let basePort = 14300; lanes.length < count && basePort < 20000; basePort += 100) {
    const dir = join(ROOT, '.mailenv', 'lanes', String(lanes.length));
    // What an interrupted run left running in this lane's folder is stopped first (a service is
    // known by its port too, so by the base port it was started on).
    const portFile = join(dir, 'base-port');
    if (existsSync(portFile)) await down({ dir, basePort: Number(readFileSync(portFile, 'utf8')) });
    if (await portsFree({ dir, basePort })) {
      mkdirSync(dir, { recursive: true });
      writeFileSync(portFile, String(basePort));
      lanes.push({ dir, basePort });
    }
  }
  if (lanes.length < count) throw new Error(`no free ports for ${count} mail environments between 14300 and 20000`);
  return lanes;
}

const children = new Set<ChildProcess>();

/** What .mocharc.json sets besides loading tsx and the setup, which the bundle replaces. */
const MOCHA_OPTIONS = (() => {
  const config = JSON.parse(readFileSync(join(ROOT, '.mocharc.json'), 'utf8')) as { timeout: number; slow: number };
  return ['--no-config', '--timeout', String(config.timeout), '--slow', String(config.slow)];
})();

function run(entry: Entry, lane: Lane, bundle: TestBundle): Promise<Outcome> {
  const started = Date.now();
  const args =
    entry.kind === 'script'
      ? ['run', '--silent', entry.script]
      : [
          // Stack traces name the TypeScript sources.
          '--enable-source-maps',
          join(ROOT, 'node_modules/mocha/bin/mocha.js'),
          ...MOCHA_OPTIONS,
          '--require',
          bundle.setup,
          bundle.files.get(entry.file)!,
        ];
  const env: NodeJS.ProcessEnv = { ...process.env, POSTERN_ENV_DIR: lane.dir, POSTERN_ENV_BASE_PORT: String(lane.basePort) };
  delete env.POSTERN_TEST_ENV;
  if (entry.kind === 'mocha' && entry.store === 'postgres') env.POSTERN_TEST_STORE = 'postgres';
  else delete env.POSTERN_TEST_STORE;
  return new Promise((resolve) => {
    const child = spawn(entry.kind === 'script' ? 'npm' : process.execPath, args, { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
    children.add(child);
    let output = '';
    child.stdout.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr.on('data', (d: Buffer) => (output += d.toString()));
    child.on('close', (code) => {
      children.delete(child);
      const c = entry.kind === 'script' ? { passed: code === 0 ? 1 : 0, failed: code === 0 ? 0 : 1, skipped: 0 } : counts(output);
      // A file that exits non-zero with nothing failing (a crash, a handle left open) counts as a failure.
      if (code !== 0 && c.failed === 0) c.failed = 1;
      resolve({ entry, code, output, ms: Date.now() - started, ...c });
    });
  });
}

async function main(): Promise<number> {
  const { jobs, stores, container, checks, files } = parseArgs(process.argv.slice(2));
  const started = Date.now();
  const envDir = join(ROOT, '.mailenv');
  const durations = readDurations(envDir);
  const entries: Entry[] = stores.flatMap((store) =>
    passFiles(store, files).map((file) => ({ name: `${store} ${file}`, kind: 'mocha' as const, store, file })),
  );
  if (container) entries.push({ name: 'container', kind: 'script', script: 'test:container' });
  if (checks) entries.push({ name: 'typecheck', kind: 'script', script: 'typecheck' }, { name: 'lint', kind: 'script', script: 'lint' });
  entries.sort((a, b) => expected(b, durations) - expected(a, durations));

  // What bin/postern and the tests' `postern serve` run, built from the sources once here rather
  // than by the first process of each lane at once (docs/operations.md, "The postern command").
  await ensureBundle();
  // The test files as JavaScript, built once for both passes (scripts/test-bundle.ts).
  const bundle = await buildTestBundle([...new Set(entries.flatMap((e) => (e.kind === 'mocha' ? [e.file] : [])))], 'test/helpers/setup.ts');
  const lanes = await laneEnvironments(Math.min(jobs, entries.length));
  // Interrupted: no file starts any more, the files running are stopped, then every lane's
  // environment (a lane that started its next file meanwhile would bring its environment back).
  let stopping = false;
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => {
      stopping = true;
      process.stdout.write(`\n${signal}: stopping the files running and the lanes' environments\n`);
      for (const child of children) child.kill('SIGTERM');
      void Promise.all(lanes.map((lane) => down(lane))).finally(() => process.exit(130));
    });
  }
  // The first lane alone first: on a new machine it installs the packages every lane needs.
  await up(lanes[0]);
  await Promise.all(lanes.slice(1).map((lane) => up(lane)));
  process.stdout.write(
    `${lanes.length} lanes, each with its own mail environment (base ports ${lanes.map((l) => l.basePort).join(', ')})\n`,
  );

  const outcomes: Outcome[] = [];
  let next = 0;
  const worker = async (lane: Lane) => {
    while (next < entries.length && !stopping) {
      const entry = entries[next++]!;
      const outcome = await run(entry, lane, bundle);
      outcomes.push(outcome);
      const verdict = outcome.code === 0 ? 'ok' : `FAILED (exit ${outcome.code})`;
      process.stdout.write(
        `\n=== ${entry.name}: ${verdict}, ${outcome.passed} passed, ${outcome.failed} failed, ${(outcome.ms / 1000).toFixed(1)} s [${outcomes.length}/${entries.length}]\n`,
      );
      if (outcome.code !== 0 || process.env.POSTERN_TEST_VERBOSE) process.stdout.write(outcome.output);
    }
  };
  try {
    await Promise.all(lanes.map(worker));
  } finally {
    const kept = { ...durations };
    for (const o of outcomes) kept[o.entry.name] = o.ms;
    writeFileSync(durationsFile(envDir), JSON.stringify(kept, null, 1));
    await Promise.all(lanes.map((lane) => down(lane)));
    bundle.remove();
  }

  const sum = (k: 'passed' | 'failed' | 'skipped') => outcomes.reduce((s, o) => s + o[k], 0);
  const failedFiles = outcomes.filter((o) => o.code !== 0).map((o) => o.entry.name);
  const slowest = [...outcomes].sort((a, b) => b.ms - a.ms).slice(0, 8);
  process.stdout.write(`\nSlowest: ${slowest.map((o) => `${o.entry.name} ${(o.ms / 1000).toFixed(0)} s`).join(', ')}\n`);
  if (failedFiles.length > 0) {
    // Repeated at the end, where a log cut to its tail (as CI reports show it) still has the cause.
    for (const o of outcomes.filter((x) => x.code !== 0)) process.stdout.write(`\n--- ${o.entry.name}\n${failureSummary(o.output)}\n`);
    process.stdout.write(`Failed: ${failedFiles.join(', ')}\n`);
  }
  process.stdout.write(`${entries.length} files in ${((Date.now() - started) / 1000).toFixed(0)} s with ${jobs} at a time\n`);
  process.stdout.write(`tests: ${sum('passed')} passed, ${sum('failed')} failed, ${sum('skipped')} skipped\n`);
  return failedFiles.length > 0 ? 1 : 0;
}

/** Mocha's list of failures (from "N failing" on), at most 40 lines; else the output's last lines. */
function failureSummary(output: string): string {
  const lines = output.split('\n');
  const from = lines.findIndex((l) => /^\s*\d+ failing/.test(l));
  const picked = from >= 0 ? lines.slice(from) : lines.slice(-20);
  return picked
    .filter((l) => !/^\s+at /.test(l) || /test\//.test(l))
    .join('\n')
    .replace(/\n{3,}/g, '\n\n')
    .split('\n')
    .slice(0, 40)
    .join('\n')
    .trimEnd();
}

process.exitCode = await main();
