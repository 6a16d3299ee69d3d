// Helpers the benchmarks share: statistics, /proc readings, a keep-alive GET, an SSE reader that
// timestamps each frame, seeding Dovecot with `doveadm import`, and the machine's description.
import { execFile } from 'node:child_process';
import { chmodSync, chownSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { once } from 'node:events';
import { Agent, request } from 'node:http';
import type { AddressInfo, Server } from 'node:net';
import { cpus, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { MasterKey } from '../lib/crypto/master-key.ts';
import type { Cursors } from '../lib/events/cursor.ts';
import { posternEnv, type MailEnv } from '../scripts/mailenv.ts';
import { childPids } from '../test/helpers/processes.ts';

const run = promisify(execFile);

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
export const log = (msg: string) => process.stderr.write(`${msg}\n`);
/** Wall-clock milliseconds with sub-millisecond resolution (comparable across processes). */
export const now = () => performance.timeOrigin + performance.now();
export const f0 = (n: number) => Math.round(n).toLocaleString('en-US');
export const f1 = (n: number) => n.toFixed(1);

/** The q-quantile (nearest rank, rounding down); NaN for no samples. */
export function pct(xs: readonly number[], q: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))] ?? NaN;
}
export const median = (xs: readonly number[]) => pct(xs, 0.5);

/** CPU seconds a process has used (user + system), from /proc. */
export function cpuSeconds(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

/**
 * CPU time (ms) of a process from /proc: user and system, and `reaped`, what the children it
 * waited for used; zeros once it is gone.
 */
export function cpuTimes(pid: number): { user: number; system: number; reaped: number } {
  try {
    // Fields after the command name: state is [0], utime [11], stime [12], cutime [13], cstime [14].
    const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
    return { user: Number(f[11]) * 10, system: Number(f[12]) * 10, reaped: (Number(f[13]) + Number(f[14])) * 10 };
  } catch {
    return { user: 0, system: 0, reaped: 0 };
  }
}

/** All the CPU time (ms) a process has used, with its children's that it waited for. */
export function cpuMs(pid: number): number {
  const t = cpuTimes(pid);
  return t.user + t.system + t.reaped;
}

/** CPU time (ms) of a process and its live children (Dovecot's imap processes are its master's). */
export function treeCpuMs(pid: number): number {
  return cpuMs(pid) + childPids(pid).reduce((sum, child) => sum + cpuMs(child), 0);
}

/** The machine's busy and total CPU time so far, from /proc/stat (all cores, in ticks). */
export function machineTicks(): { busy: number; total: number } {
  const [, ...fields] = readFileSync('/proc/stat', 'utf8').split('\n', 1)[0]!.trim().split(/\s+/);
  const n = fields.map(Number);
  // user nice system idle iowait irq softirq steal: idle and iowait are not busy.
  const total = n.slice(0, 8).reduce((a, b) => a + b, 0);
  return { busy: total - n[3]! - n[4]!, total };
}

/**
 * Waits until `ready()` holds and the machine has been quiet (under `busyShare` of its CPU) for
 * two 250 ms windows running, or `timeoutMs` passed: what one round of a bench set off (Postfix
 * delivering its queue, Dovecot filing copies) is done before the next round starts, so each
 * round is measured on the same quiet machine rather than on the last one's leftovers.
 */
export async function settle(ready: () => Promise<boolean> | boolean = () => true, busyShare = 0.15, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let quiet = 0;
  while (Date.now() < deadline && quiet < 2) {
    const a = machineTicks();
    await sleep(250);
    const b = machineTicks();
    const share = (b.busy - a.busy) / Math.max(1, b.total - a.total);
    quiet = share < busyShare && (await ready()) ? quiet + 1 : 0;
  }
}

/** Messages in a Postfix queue (incoming, active, deferred, hold, maildrop): 0 once it delivered everything. */
export async function postfixQueued(env: MailEnv): Promise<number> {
  const { stdout } = await run('postqueue', ['-c', join(env.dir, 'postfix', 'conf'), '-j']);
  return stdout.split('\n').filter((line) => line.trim() !== '').length;
}

/** Resident memory of a process now, in MB. */
export function rssMb(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : NaN;
}

/** The machine, for a results table: cores and model (as lscpu names it), memory, Node. */
export function machine(): string {
  return `${cpus().length} × ${cpus()[0]?.model.trim() ?? 'unknown CPU'}, ${Math.round(totalmem() / 2 ** 30)} GB RAM, Node ${process.version}`;
}

// ---------------------------------------------------------------------------------------------
// HTTP

export const agent = new Agent({ keepAlive: true, maxSockets: 256 });

/** Starts `server` (an HTTP or a plain TCP one) on a free loopback port: its base URL. */
export async function listenLoopback(server: Server): Promise<string> {
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

export interface Answer {
  status: number;
  body: string;
  headers: Record<string, string | string[] | undefined>;
}

export function get(url: string, headers: Record<string, string>): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = request(url, { agent, headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString(), headers: res.headers }));
    });
    req.on('error', reject);
    req.end();
  });
}

/** GET that must answer 200 with JSON. */
export async function getJson<T>(url: string, headers: Record<string, string>): Promise<T> {
  const r = await get(url, headers);
  if (r.status !== 200) throw new Error(`GET ${url}: ${r.status} ${r.body.slice(0, 300)}`);
  return JSON.parse(r.body) as T;
}

/**
 * A minimal SSE reader recording each event's arrival time (wall clock, `now()`). Resolves once
 * the stream answered 200, with a function that closes it.
 */
export function sse(
  url: string,
  headers: Record<string, string>,
  onEvent: (event: string, data: string, at: number) => void,
): Promise<() => void> {
  return new Promise((resolve, reject) => {
    const req = request(url, { headers: { ...headers, accept: 'text/event-stream' } }, (res) => {
      if (res.statusCode !== 200) return reject(new Error(`stream answered ${res.statusCode}`));
      let buf = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        const at = now();
        buf += chunk;
        let i: number;
        while ((i = buf.indexOf('\n\n')) >= 0) {
          const block = buf.slice(0, i);
          buf = buf.slice(i + 2);
          const ev = /^event: (.*)$/m.exec(block)?.[1];
          const data = /^data: (.*)$/m.exec(block)?.[1];
          if (ev && data) onEvent(ev, data, at);
        }
      });
      resolve(() => req.destroy());
    });
    req.on('error', reject);
    req.end();
  });
}

// ---------------------------------------------------------------------------------------------
// Seeding: doveadm import from mbox files (MULTIAPPEND over IMAP costs ~9 ms a message).

/** `count` small, distinct messages in mbox format; `tag` makes their Message-IDs unique. */
export function mbox(count: number, tag: string): string {
  let out = '';
  for (let i = 0; i < count; i++) {
    out +=
      `From sender@example.org Mon Jan  1 00:00:00 2024\n` +
      `From: Sender ${i % 97} <sender${i % 97}@example.org>\nTo: Someone <someone@postern.test>\n` +
      `Subject: ${tag} message ${i} about topic ${i % 13}\nDate: ${new Date(Date.UTC(2024, 0, 1) + i * 60_000).toUTCString()}\n` +
      `Message-ID: <${tag}.${i}@example.org>\n\n${`Body of message ${i}. `.repeat(8 + (i % 20))}\n\n`;
  }
  return out;
}

/**
 * Imports messages into a user's mailboxes in one doveadm run: `{ INBOX: 14, Archive: 6 }`.
 * `encrypted` keeps mail_crypt on (as delivery does). Dovecot's push plugins are always off
 * here, so seeding sends no hints to a running Postern (as an import of old mail should not).
 */
export async function seed(env: MailEnv, user: string, counts: Record<string, number>, encrypted: boolean): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'postern-seed-'));
  try {
    // doveadm reads (and locks) the mbox as the mail user.
    const owner = statSync(join(env.dir, 'mail'));
    chmodSync(dir, 0o755);
    chownSync(dir, owner.uid, owner.gid);
    const tag = `${user.split('@')[0]}.${Date.now().toString(36)}`;
    for (const [mailbox, count] of Object.entries(counts)) {
      writeFileSync(join(dir, mailbox), mbox(count, `${tag}.${mailbox}`));
      chownSync(join(dir, mailbox), owner.uid, owner.gid);
    }
    const conf = join(env.dir, 'dovecot', 'dovecot.conf');
    const opts = ['-c', conf, '-o', 'mail_fsync=never', '-o', `mail_plugins=${encrypted ? 'mail_crypt' : ''}`];
    // mbox names INBOX by its own setting, not by a file in the directory.
    const source = `mbox:${dir}:INDEX=MEMORY${'INBOX' in counts ? `:INBOX=${join(dir, 'INBOX')}` : ''}`;
    await run('doveadm', [...opts, 'import', '-u', user, source, '', 'all'], { maxBuffer: 1 << 24 });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Runs `task` over `items`, `concurrency` at a time. */
export async function eachLimit<T>(items: readonly T[], concurrency: number, task: (item: T, i: number) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(concurrency, items.length) }, async () => {
      while (next < items.length) {
        const i = next++;
        await task(items[i]!, i);
      }
    }),
  );
}

/**
 * Runs a bench's main and exits with its outcome: benches hold pools, agents and children whose
 * handles would otherwise keep the process alive after the figures are printed.
 */
export function runBench(main: () => Promise<void>): void {
  main().then(
    () => process.exit(0),
    (err: unknown) => {
      log(err instanceof Error ? (err.stack ?? err.message) : String(err));
      process.exit(1);
    },
  );
}

/**
 * A bench drives one token far past what a client would (thousands of requests a second, every
 * search back to back): with the per-credential budgets on, it would measure the 429s.
 */
export const NO_RATE_LIMITS = { POSTERN_RATE_REQUESTS: '0', POSTERN_RATE_EXPENSIVE: '0', POSTERN_RATE_PER_TURN: '0' };

/** The settings every bench's Postern starts from: a free port, a store in `dir`, the mail env, a fresh master key, quiet logs, no request budgets. */
export function benchServerEnv(env: MailEnv, dir: string, extra: Record<string, string> = {}): Record<string, string> {
  return {
    ...NO_RATE_LIMITS,
    POSTERN_PORT: '0',
    POSTERN_DB: join(dir, 'postern.db'),
    ...posternEnv(env),
    POSTERN_MASTER_KEY: MasterKey.generate(),
    POSTERN_LOG_LEVEL: 'warn',
    ...extra,
  };
}

const MARK = Buffer.from('"specversion"');

/**
 * GET a page and count its events in the raw bytes as they stream in (each event has exactly one
 * "specversion"), so the load generator does not spend more than the server on each response.
 */
export function countEvents(agent: Agent, url: string, headers: Record<string, string>): Promise<number> {
  return new Promise((resolve, reject) => {
    const u = new URL(url);
    const req = request({ agent, host: u.hostname, port: u.port, path: u.pathname + u.search, headers }, (res) => {
      if (res.statusCode !== 200) return reject(new Error(`GET /events: ${res.statusCode}`));
      let n = 0;
      let tail: Buffer = Buffer.alloc(0);
      res.on('data', (chunk: Buffer) => {
        // Keep the last few bytes so a mark split across chunks is still found once.
        const buf = tail.length ? Buffer.concat([tail, chunk]) : chunk;
        let i = buf.indexOf(MARK);
        let lastEnd = 0;
        while (i >= 0) {
          n++;
          lastEnd = i + MARK.length;
          i = buf.indexOf(MARK, lastEnd);
        }
        tail = buf.subarray(Math.max(lastEnd, buf.length - MARK.length + 1));
      });
      res.on('end', () => resolve(n));
    });
    req.on('error', reject);
    req.end();
  });
}

/**
 * GET /events?limit=500 from `clients` keep-alive connections for `seconds`, each page after a
 * random position of `range`: events read per second.
 */
export async function pageRate(
  base: string,
  reader: { token: string; projectId: string },
  range: { first: number; last: number; cursors: Cursors },
  clients: number,
  seconds: number,
): Promise<number> {
  const agent = new Agent({ keepAlive: true, maxSockets: clients });
  const headers = { authorization: `Bearer ${reader.token}` };
  let events = 0;
  const end = performance.now() + seconds * 1000;
  await Promise.all(
    Array.from({ length: clients }, async () => {
      while (performance.now() < end) {
        const after = range.first + Math.floor(Math.random() * (range.last - range.first - 500));
        // Not `events += await …`: that reads `events` before the await and loses the other clients' counts.
        const n = await countEvents(agent, `${base}/events?limit=500&after=${range.cursors.encode(reader.projectId, after)}`, headers);
        events += n;
      }
    }),
  );
  agent.destroy();
  return events / seconds;
}
