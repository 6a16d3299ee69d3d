// Staff commands' start-up (docs/operations.md, "The postern command"): how long `postern admin …`
// takes as bin/postern runs it (the esbuild bundle, bin/cli-bundle.mjs, current) against the same
// command through tsx (`node --import tsx bin/postern.ts`, what bin/postern ran before) and, when
// `npm run build` has compiled it, the images' `node dist/bin/postern.js`; `node -e 0` is the
// floor. Read-only commands on a SQLite store of its own in a temporary folder, seeded first (a
// project, a member, a token, a session). Engines and commands take turns in each round, so a
// busy moment of the machine falls on all of them alike. Wall time (median, p90) and CPU time
// (user + system of the process, the mean) for each; the target is a wall time under 300 ms.
// It also times the launcher's staleness check in this process (freshBundle(): the stamp read,
// every input's stat).
//
//   npm run bench:cli                    # prints the results as Markdown
//   npm run bench:cli -- --write         # also replaces the cli section of bench/RESULTS.md
//   npm run bench:cli -- --quick         # 3 rounds instead of 15, for a smoke run
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { ensureBundle, freshBundle } from '../bin/cli-bundle.mjs';
import { ROOT } from '../lib/paths.ts';
import { cpuTimes, f0, log, machine, median, pct } from './common.ts';
import { writeResults } from './results.ts';

const args = new Set(process.argv.slice(2));
const ROUNDS = args.has('--quick') ? 3 : 15;
const TARGET_MS = 300;

interface Engine {
  name: string;
  /** The program and the arguments before the command's own. */
  argv: [string, ...string[]];
}

const TSC_BUILD = join(ROOT, 'dist/bin/postern.js');
const ENGINES: Engine[] = [
  { name: 'bundle (bin/postern)', argv: [join(ROOT, 'bin/postern')] },
  { name: 'tsx', argv: [process.execPath, '--import', 'tsx', join(ROOT, 'bin/postern.ts')] },
  ...(existsSync(TSC_BUILD) ? [{ name: 'tsc build (dist/bin/postern.js)', argv: [process.execPath, TSC_BUILD] as [string, string] }] : []),
];

/** One run: its wall time and the CPU time the child used (ms), from this process's reaped children. */
function timed(argv: readonly string[], env: NodeJS.ProcessEnv): { wallMs: number; cpuMs: number } {
  const before = cpuTimes(process.pid).reaped;
  const started = performance.now();
  const r = spawnSync(argv[0]!, argv.slice(1), { env, cwd: ROOT, encoding: 'utf8' });
  const wallMs = performance.now() - started;
  if (r.status !== 0) throw new Error(`${argv.join(' ')} exited ${r.status}: ${r.stdout}${r.stderr}`);
  return { wallMs, cpuMs: cpuTimes(process.pid).reaped - before };
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'postern-bench-cli-'));
  // Only the store: no master key, no mail server (read-only commands need neither).
  const env: NodeJS.ProcessEnv = { ...process.env, POSTERN_DB: join(dir, 'postern.db') };
  delete env.POSTERN_DATABASE_URL;
  try {
    const built = Date.now();
    const entryWasFresh = freshBundle() !== null;
    await ensureBundle();
    log(entryWasFresh ? 'bundle current' : `bundle built in ${Date.now() - built} ms`);

    const postern = (...a: string[]) => JSON.parse(execFileSync(join(ROOT, 'bin/postern'), a, { env, encoding: 'utf8' })) as { id: string };
    const project = postern('admin', 'project', 'create', '--name', 'bench').id;
    const member = postern('admin', 'member', 'add', '--project', project, '--email', 'bench@example.org').id;
    postern('admin', 'token', 'create', '--member', member, '--scopes', 'events:read');
    postern('admin', 'session', 'create', '--member', member);

    const commands: string[][] = [
      ['admin', 'project', 'list'],
      ['admin', 'member', 'list', '--project', project],
      ['admin', 'token', 'list', '--project', project],
      ['help'],
    ];
    const floor = { name: '(floor) node -e 0', argv: [process.execPath, '-e', '0'] };
    const cases = [
      ...commands.flatMap((command) =>
        ENGINES.map((engine) => ({ key: `${engine.name}\t${command.join(' ')}`, argv: [...engine.argv, ...command] })),
      ),
      { key: `${floor.name}\t`, argv: floor.argv },
    ];
    const samples = new Map<string, { wall: number[]; cpu: number[] }>(cases.map((c) => [c.key, { wall: [], cpu: [] }]));
    const loadBefore = loadavg()[0]!;
    // One unmeasured turn: the page cache holds every file each case reads.
    for (const c of cases) timed(c.argv, env);
    for (let round = 0; round < ROUNDS; round++) {
      for (const c of cases) {
        const { wallMs, cpuMs } = timed(c.argv, env);
        samples.get(c.key)!.wall.push(wallMs);
        samples.get(c.key)!.cpu.push(cpuMs);
      }
      log(`round ${round + 1}/${ROUNDS}`);
    }
    const loadAfter = loadavg()[0]!;

    // The staleness check alone, in this process, after a warm-up.
    const checks: number[] = [];
    for (let i = 0; i < 25; i++) {
      const t = performance.now();
      if (freshBundle() === null) throw new Error('the bundle went stale during the benchmark');
      if (i >= 5) checks.push(performance.now() - t);
    }

    const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
    const cell = (key: string) => {
      const s = samples.get(key)!;
      return `${f0(median(s.wall))} ms (p90 ${f0(pct(s.wall, 0.9))}; CPU ${f0(mean(s.cpu))})`;
    };
    const floorWall = median(samples.get(`${floor.name}\t`)!.wall);
    const rows = commands.map((command) => {
      const name = command.join(' ').replace(/(prj|mem)_\w+/, '$1_…');
      const [bundle, ...others] = ENGINES.map((e) => `${e.name}\t${command.join(' ')}`);
      const bundleWall = median(samples.get(bundle!)!.wall);
      const tsxWall = median(samples.get(others[0]!)!.wall);
      return `| \`postern ${name}\` | ${[bundle!, ...others].map(cell).join(' | ')} | ${(bundleWall / tsxWall).toFixed(2)} | ${f0(bundleWall - floorWall)} ms |`;
    });
    const md = `## Staff commands: the bundle against tsx (issue 29 item 7; \`npm run bench:cli\`)

Machine: ${machine()}. ${ROUNDS} rounds, every case once a round in turn, after one unmeasured
turn; a SQLite store in a temporary folder holding one project, one member, a token and a
session. Load average (1 min) ${loadBefore.toFixed(1)} before, ${loadAfter.toFixed(1)} after: on
a busy host every wall time includes waiting for a core, so the floor is measured beside them.
Each cell: median wall time (p90; mean CPU time, user + system, in 10 ms ticks).

| Command | ${ENGINES.map((e) => e.name).join(' | ')} | Bundle / tsx (wall) | Bundle above the floor |
|---|${ENGINES.map(() => '---|').join('')}---|---|
${rows.join('\n')}
| (floor) \`node -e 0\` | ${cell(`${floor.name}\t`)} | ${ENGINES.slice(1)
      .map(() => '(same)')
      .join(' | ')} | — | — |

Target: a staff command under ${TARGET_MS} ms wall (from about 1 s through tsx). The launcher's
staleness check (\`freshBundle()\`: read \`dist/cli/current.json\`, \`stat\` each input) took a
median ${median(checks).toFixed(1)} ms (p90 ${pct(checks, 0.9).toFixed(1)}) in this process, 20
calls after a warm-up; every bundle run above includes it.
`;
    process.stdout.write(md);
    if (args.has('--write')) log(`written to ${writeResults('cli', md)}`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
