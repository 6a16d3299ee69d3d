// Profiles Postern's answer path for sending (issue 10): spawns `bin/postern serve` with
// `--cpu-prof`, sends 20 KB messages at 16 concurrent clients through POST /messages (as
// bench/send.ts does, without its baseline), and writes the profile of the Postern process.
// Sent copies are held back (POSTERN_SENT_COPY_YIELD_MS) so the profile is the answers' alone.
//
//   node --import tsx bench/send-profile.ts [--messages=2000] [--dir=/tmp/prof] [--no-prof] [--forbidden]
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { loadConfig } from '../lib/config.ts';
import { createPostern } from '../lib/server.ts';
import { addUser, up } from '../scripts/mailenv.ts';
import { spawnPostern, stopProcess } from '../test/processes.ts';
import { benchServerEnv, log, runBench } from './common.ts';

const opt = (name: string, dflt: string) => process.argv.find((a) => a.startsWith(`--${name}=`))?.split('=')[1] ?? dflt;
const MESSAGES = Number(opt('messages', '2000'));
const PROF_DIR = opt('dir', join(tmpdir(), 'postern-send-prof'));
const PROFILE = !process.argv.includes('--no-prof');
/** Every request refused with 403 after its body was read (from: not the inbox's): the HTTP part's cost alone. */
const FORBIDDEN = process.argv.includes('--forbidden');
const CLIENTS = 16;

function message(from: string, to: string, size: number): Buffer {
  const head = `From: <${from}>\r\nTo: <${to}>\r\nSubject: bench ${randomBytes(4).toString('hex')}\r\nDate: ${new Date().toUTCString()}\r\nMessage-ID: <${randomBytes(12).toString('hex')}@bench>\r\n\r\n`;
  const lines: string[] = [];
  for (let n = head.length; n < size; ) {
    const line = randomBytes(57).toString('base64');
    lines.push(line);
    n += line.length + 2;
  }
  return Buffer.from(`${head}${lines.join('\r\n')}\r\n`);
}

/** User and system CPU time (ms) of a process. */
function cpuMs(pid: number): { user: number; system: number } {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return { user: Number(f[11]) * 10, system: Number(f[12]) * 10 };
}

function post(agent: Agent, url: string, token: string, body: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method: 'POST', agent, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } });
    req.on('response', (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
    });
    req.on('error', reject);
    req.end(body);
  });
}

async function main(): Promise<void> {
  const env = await up();
  const dir = mkdtempSync(join(tmpdir(), 'postern-send-prof-'));
  const serverEnv = benchServerEnv(env, dir, { POSTERN_SEND_RATE_PER_HOUR: '10000000', POSTERN_SMTP_MAX_PER_INBOX: '8', POSTERN_SENT_COPY_YIELD_MS: '3600000' });
  mkdirSync(PROF_DIR, { recursive: true });
  const stamp = Date.now().toString(36);
  const user = `bench-send-${stamp}@${env.domain}`;
  await addUser(env, user, 'pw-send');
  const admin = createPostern(loadConfig(serverEnv), pino({ level: 'silent' }));
  const project = await admin.admin.createProject('bench');
  const member = await admin.admin.addMember(project.id, `bench-${stamp}@example.org`);
  const { id } = await admin.admin.addInbox({ projectId: project.id, imapUser: user, addresses: [user], mode: 'compatible' });
  await admin.admin.grant(member.id, id, 'owner');
  const { token } = await admin.admin.createToken({ memberId: member.id, scopes: ['send'] });
  await admin.close();
  const server = await spawnPostern(serverEnv, PROFILE ? ['--cpu-prof', `--cpu-prof-dir=${PROF_DIR}`] : []);
  try {
    const pid = server.child.pid!;
    const url = `${server.url}/v1/inboxes/${id}/messages`;
    const agent = new Agent({ keepAlive: true, maxSockets: CLIENTS });
    const bodies = Array.from({ length: 64 }, (_, i) => JSON.stringify({ from: FORBIDDEN ? `other-${user}` : user, to: [`bench-${i}@example.org`], raw: message(user, `bench-${i}@example.org`, 20 * 1024).toString('base64') }));
    const run = async (count: number) => {
      let next = 0;
      await Promise.all(
        Array.from({ length: CLIENTS }, async () => {
          for (let i = next++; i < count; i = next++) {
            const status = await post(agent, url, token, bodies[i % 64]!);
            if (status !== (FORBIDDEN ? 403 : 200)) throw new Error(`Postern answered ${status}`);
          }
        }),
      );
    };
    await run(CLIENTS * 4);
    const c0 = cpuMs(pid);
    const t0 = performance.now();
    await run(MESSAGES);
    const seconds = (performance.now() - t0) / 1000;
    const c1 = cpuMs(pid);
    const userMs = (c1.user - c0.user) / MESSAGES;
    const systemMs = (c1.system - c0.system) / MESSAGES;
    log(`${MESSAGES} messages: ${(MESSAGES / seconds).toFixed(1)} messages/s, Postern CPU ${(userMs + systemMs).toFixed(2)} ms per message (user ${userMs.toFixed(2)}, system ${systemMs.toFixed(2)})${PROFILE ? ', profiled' : ''}; load ${readFileSync('/proc/loadavg', 'utf8').split(' ')[0]}`);
  } finally {
    await stopProcess(server.child);
    rmSync(dir, { recursive: true, force: true });
  }
  if (PROFILE) log(`profile in ${PROF_DIR}`);
}

runBench(main);
