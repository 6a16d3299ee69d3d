// Profiles Postern's answer path for sending (docs/sending.md): spawns `bin/postern serve` with
// `--cpu-prof`, sends 20 KB messages at 16 concurrent clients through POST /messages (as
// bench/send.ts does, without its baseline), and writes the profile of the Postern process.
// Sent copies are held back (POSTERN_SENT_COPY_YIELD_MS) so the profile is the answers' alone.
//
//   node --import tsx bench/send-profile.ts [--messages=2000] [--dir=/tmp/prof] [--no-prof] [--forbidden]
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { Agent } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { up } from '../scripts/mailenv.ts';
import { spawnPostern, stopProcess } from '../test/helpers/processes.ts';
import { benchServerEnv, cpuTimes, log, runBench } from './common.ts';
import { benchMessage, postJson, sendingInbox } from './sending.ts';

const opt = (name: string, dflt: string) => process.argv.find((a) => a.startsWith(`--${name}=`))?.split('=')[1] ?? dflt;
const MESSAGES = Number(opt('messages', '2000'));
const PROF_DIR = opt('dir', join(tmpdir(), 'postern-send-prof'));
const PROFILE = !process.argv.includes('--no-prof');
/** Every request refused with 403 after its body was read (from: not the inbox's): the HTTP part's cost alone. */
const FORBIDDEN = process.argv.includes('--forbidden');
const CLIENTS = 16;

async function main(): Promise<void> {
  const env = await up();
  const dir = mkdtempSync(join(tmpdir(), 'postern-send-prof-'));
  const serverEnv = benchServerEnv(env, dir, {
    POSTERN_SEND_RATE_PER_HOUR: '10000000',
    POSTERN_SMTP_MAX_PER_INBOX: '8',
    POSTERN_SENT_COPY_YIELD_MS: '3600000',
  });
  mkdirSync(PROF_DIR, { recursive: true });
  const { id, user, token } = await sendingInbox(env, serverEnv);
  const server = await spawnPostern(serverEnv, PROFILE ? ['--cpu-prof', `--cpu-prof-dir=${PROF_DIR}`] : []);
  try {
    const pid = server.child.pid!;
    const url = `${server.url}/v1/inboxes/${id}/messages`;
    const agent = new Agent({ keepAlive: true, maxSockets: CLIENTS });
    const bodies = Array.from({ length: 64 }, (_, i) =>
      JSON.stringify({
        from: FORBIDDEN ? `other-${user}` : user,
        to: [`bench-${i}@example.org`],
        raw: benchMessage(user, `bench-${i}@example.org`, 20 * 1024).toString('base64'),
      }),
    );
    const run = async (count: number) => {
      let next = 0;
      await Promise.all(
        Array.from({ length: CLIENTS }, async () => {
          for (let i = next++; i < count; i = next++) {
            const { status, text } = await postJson(agent, url, token, bodies[i % 64]!);
            if (status !== (FORBIDDEN ? 403 : 200)) throw new Error(`Postern answered ${status}: ${text}`);
          }
        }),
      );
    };
    await run(CLIENTS * 4);
    const c0 = cpuTimes(pid);
    const t0 = performance.now();
    await run(MESSAGES);
    const seconds = (performance.now() - t0) / 1000;
    const c1 = cpuTimes(pid);
    const userMs = (c1.user - c0.user) / MESSAGES;
    const systemMs = (c1.system - c0.system) / MESSAGES;
    log(
      `${MESSAGES} messages: ${(MESSAGES / seconds).toFixed(1)} messages/s, Postern CPU ${(userMs + systemMs).toFixed(2)} ms per message (user ${userMs.toFixed(2)}, system ${systemMs.toFixed(2)})${PROFILE ? ', profiled' : ''}; load ${readFileSync('/proc/loadavg', 'utf8').split(' ')[0]}`,
    );
  } finally {
    await stopProcess(server.child);
    rmSync(dir, { recursive: true, force: true });
  }
  if (PROFILE) log(`profile in ${PROF_DIR}`);
}

runBench(main);
