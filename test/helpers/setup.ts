// Once per test run: bring up the real mail environment (Dovecot, Postfix, the SMTP sink, a
// private Redis) and, at the end, stop what test runs started. A developer's already running
// environment is used as it is and left running. When the default ports are held by something
// else (another checkout's environment), the run moves to free ones.
//
// Several runs may share one environment (a developer running two test files at once): each
// registers itself in the environment's directory, and only the last one out stops what a test
// run started, so no run pulls Dovecot from under another. It also makes the bundle that every
// `postern` a test spawns runs (bin/cli-bundle.mjs) current first.
import { existsSync, mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ensureBundle } from '../../bin/cli-bundle.mjs';
import { down, portsFree, status, up, type MailEnv, type MailEnvOptions } from '../../scripts/mailenv.ts';
import { failIfStillAliveAfter } from './open-handles.ts';
import { alive } from './processes.ts';

let options: MailEnvOptions = {};
let envDir: string | null = null;

const runsDir = (dir: string) => join(dir, 'test-runs');
/** Present while services a test run started are up: the last run out stops them. */
const startedMarker = (dir: string) => join(dir, 'started-by-tests');

async function chooseOptions(): Promise<MailEnvOptions> {
  if (process.env.POSTERN_ENV_BASE_PORT) return {};
  const { running } = await status();
  if (Object.values(running).some(Boolean) || (await portsFree())) return {};
  for (let base = 14200; base < 20000; base += 100) {
    if (await portsFree({ basePort: base })) {
      // Child processes (the CLI, the demo) must find the same environment.
      process.env.POSTERN_ENV_BASE_PORT = String(base);
      return { basePort: base };
    }
  }
  throw new Error('no free ports for the mail environment between 14200 and 20000');
}

export async function mochaGlobalSetup(): Promise<void> {
  // Before the first test spawns `postern` (a few ms when current; npm test built it once).
  await ensureBundle();
  options = await chooseOptions();
  const env: MailEnv & { startedNow: string[] } = await up(options);
  envDir = env.dir;
  mkdirSync(runsDir(env.dir), { recursive: true });
  writeFileSync(join(runsDir(env.dir), String(process.pid)), '');
  if (env.startedNow.length > 0) writeFileSync(startedMarker(env.dir), env.startedNow.join('\n'));
  process.env.POSTERN_TEST_ENV = JSON.stringify(env);
}

export async function mochaGlobalTeardown(): Promise<void> {
  try {
    await stopEnvironment();
  } finally {
    failIfStillAliveAfter(10_000);
  }
}

async function stopEnvironment(): Promise<void> {
  if (!envDir) return;
  rmSync(join(runsDir(envDir), String(process.pid)), { force: true });
  const others = readdirSync(runsDir(envDir))
    .map(Number)
    .filter((pid) => pid !== process.pid && alive(pid));
  if (others.length > 0 || !existsSync(startedMarker(envDir))) return;
  await down(options);
  rmSync(startedMarker(envDir), { force: true });
}
