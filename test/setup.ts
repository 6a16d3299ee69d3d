// Once per test run: bring up the real mail environment (Dovecot, Postfix, the SMTP sink, a
// private Redis) and, at the end, stop only what this run started. A developer's already
// running environment is used as it is and left running.
import { down, up, type MailEnv } from '../scripts/mailenv.ts';

let started: string[] = [];

export async function mochaGlobalSetup(): Promise<void> {
  const env: MailEnv & { startedNow: string[] } = await up();
  started = env.startedNow;
  process.env.POSTERN_TEST_ENV = JSON.stringify(env);
}

export async function mochaGlobalTeardown(): Promise<void> {
  if (started.length > 0) await down();
}
