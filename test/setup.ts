// Once per test run: bring up the real mail environment (Dovecot, Postfix, the SMTP sink, a
// private Redis) and, at the end, stop only what this run started. A developer's already
// running environment is used as it is and left running. When the default ports are held by
// something else (another checkout's environment), the run moves to free ones.
import { down, portsFree, status, up, type MailEnv, type MailEnvOptions } from '../scripts/mailenv.ts';

let started: string[] = [];
let options: MailEnvOptions = {};

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
  options = await chooseOptions();
  const env: MailEnv & { startedNow: string[] } = await up(options);
  started = env.startedNow;
  process.env.POSTERN_TEST_ENV = JSON.stringify(env);
}

export async function mochaGlobalTeardown(): Promise<void> {
  if (started.length > 0) await down(options);
}
