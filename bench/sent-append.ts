// Where filing Sent copies costs Dovecot its CPU (docs/sending.md): 20 KB messages APPENDed to
// Sent one at a time, pipelined on one connection, and as MULTIAPPEND (RFC 3502) batches, each
// into a fresh user's empty Sent, over a plain socket (imapflow keeps one command in flight, so it
// cannot pipeline). Dovecot's CPU is read from /proc like bench/send.ts does. It measures the
// running environment as configured: to compare mail_crypt or the push Lua off, edit the
// environment's rendered .mailenv/dovecot/dovecot.conf, `dovecot -c … reload`, and run it again
// (`npm run mailenv -- up` renders the bundled config back).
//
//   POSTERN_ENV_BASE_PORT=… node --import tsx bench/sent-append.ts [--messages=400] [--repeats=3] [--hints] [--warm] [--fetch]
//
// --hints answers Dovecot's push hints with 204 (as a Postern with POSTERN_HINT_LISTEN does,
// without its sync); without it nothing listens on the hint port, as in `npm run bench:send`.
// --warm first appends 3 messages and FETCHes them as the index's sync does, so Dovecot has made
// its caching decisions for the folder (as for a Sent the index has read before); --fetch then
// also measures that FETCH of the messages appended.
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { connect, type Socket } from 'node:net';
import { join } from 'node:path';
import { addUser, status } from '../scripts/mailenv.ts';
import { log, median, treeCpuMs } from './common.ts';
import { benchMessage } from './sending.ts';

const arg = (name: string) => process.argv.find((a) => a.startsWith(`--${name}=`))?.split('=')[1];
const MESSAGES = Number(arg('messages') ?? 400);
const SIZE = 20 * 1024;
const FETCH_ITEMS = 'UID FLAGS MODSEQ X-GUID RFC822.SIZE INTERNALDATE ENVELOPE';
const REPEATS = Number(arg('repeats') ?? 3);

/** A bare IMAP client: commands go out as given, tagged answers are awaited by tag. */
class Raw {
  private buf = '';
  private tag = 0;
  private readonly waiting = new Map<string, (line: string) => void>();
  private greeted: Promise<void>;
  constructor(private readonly socket: Socket) {
    let greet: () => void = () => undefined;
    this.greeted = new Promise((r) => (greet = r));
    socket.setEncoding('latin1');
    socket.on('data', (d: string) => {
      this.buf += d;
      for (let i = this.buf.indexOf('\r\n'); i >= 0; i = this.buf.indexOf('\r\n')) {
        const line = this.buf.slice(0, i);
        this.buf = this.buf.slice(i + 2);
        if (line.startsWith('* OK')) greet();
        const t = line.split(' ', 1)[0]!;
        const w = this.waiting.get(t);
        if (w) {
          this.waiting.delete(t);
          w(line);
        }
      }
    });
  }
  ready(): Promise<void> {
    return this.greeted;
  }
  /** Writes one command (its parts: strings, and Buffers sent as LITERAL+); resolves with the tagged line. */
  send(parts: Array<string | Buffer>): Promise<string> {
    const tag = `a${++this.tag}`;
    const out: Buffer[] = [Buffer.from(`${tag} `)];
    for (const p of parts) out.push(typeof p === 'string' ? Buffer.from(p) : Buffer.concat([Buffer.from(`{${p.length}+}\r\n`), p]));
    out.push(Buffer.from('\r\n'));
    const done = new Promise<string>((r) => this.waiting.set(tag, r));
    this.socket.write(Buffer.concat(out));
    return done.then((line) => {
      if (!line.startsWith(`${tag} OK`)) throw new Error(line);
      return line;
    });
  }
}

async function main(): Promise<void> {
  const { env } = await status();
  const dovecot = Number(readFileSync(join(env.dir, 'dovecot/run/master.pid'), 'utf8').trim());
  let hints: ReturnType<typeof createServer> | null = null;
  let hinted = 0;
  if (process.argv.includes('--hints')) {
    const [host, port] = env.hints.listen.split(':');
    hints = createServer((req, res) => {
      hinted++;
      req.resume();
      req.on('end', () => res.writeHead(204).end());
    });
    await new Promise<void>((r) => hints!.listen(Number(port), host, r));
  }
  const bodies = Array.from({ length: 64 }, () => benchMessage('a@example.org', 'b@example.org', SIZE));
  const stamp = Date.now().toString(36);
  let n = 0;
  const modes: Array<{ name: string; batch: number; window: number }> = [
    { name: 'one at a time', batch: 1, window: 1 },
    { name: 'pipelined (16 in flight)', batch: 1, window: 16 },
    { name: 'MULTIAPPEND × 10', batch: 10, window: 1 },
    { name: 'MULTIAPPEND × 50', batch: 50, window: 1 },
  ];
  const results = new Map<string, { ms: number[]; cpu: number[] }>();
  for (let rep = 0; rep < REPEATS; rep++) {
    for (const mode of modes) {
      const user = `probe-${stamp}-${n++}@${env.domain}`;
      await addUser(env, user, 'pw');
      const socket = connect(env.imap.port, env.imap.host);
      const imap = new Raw(socket);
      await imap.ready();
      await imap.send([`LOGIN "${user}*${env.master.user}" "${env.master.password}"`]);
      await imap.send(['SELECT Sent']).then(() => imap.send(['UNSELECT']));
      // A folder the index has read before: Dovecot's caching decisions for what the sync
      // fetches are made (they apply to messages saved after them), as in a long-lived Sent.
      const WARM = process.argv.includes('--warm') ? 3 : 0;
      if (WARM > 0) {
        for (let i = 0; i < WARM; i++) await imap.send(['APPEND Sent (\\Seen) ', bodies[i]!]);
        await imap.send(['EXAMINE Sent']);
        await imap.send([`UID FETCH 1:* (${FETCH_ITEMS})`]);
        await imap.send(['UNSELECT']);
      }
      hinted = 0;
      const c0 = treeCpuMs(dovecot);
      const t0 = performance.now();
      const inFlight = new Set<Promise<string>>();
      for (let i = 0; i < MESSAGES; i += mode.batch) {
        const parts: Array<string | Buffer> = ['APPEND Sent'];
        for (let j = i; j < Math.min(MESSAGES, i + mode.batch); j++) parts.push(' (\\Seen) ', bodies[j % bodies.length]!);
        const p = imap.send(parts);
        inFlight.add(p);
        void p.finally(() => inFlight.delete(p));
        if (inFlight.size >= mode.window) await Promise.race(inFlight);
      }
      await Promise.all(inFlight);
      const ms = (performance.now() - t0) / MESSAGES;
      // What the index's sync then asks for the new messages (adapters/imap/raw.ts FULL_ITEMS).
      let fetchCpu = NaN;
      if (process.argv.includes('--fetch')) {
        const f0 = treeCpuMs(dovecot);
        await imap.send(['EXAMINE Sent']);
        await imap.send([`UID FETCH ${WARM + 1}:* (${FETCH_ITEMS})`]);
        await imap.send(['UNSELECT']);
        fetchCpu = (treeCpuMs(dovecot) - f0) / MESSAGES;
      }
      await imap.send(['LOGOUT']).catch(() => undefined);
      socket.destroy();
      // The imap process's CPU reaches its master's cutime once it exited and was reaped.
      await new Promise((r) => setTimeout(r, 300));
      const cpu = (treeCpuMs(dovecot) - c0) / MESSAGES;
      const r = results.get(mode.name) ?? { ms: [], cpu: [] };
      r.ms.push(ms);
      r.cpu.push(cpu);
      results.set(mode.name, r);
      log(
        `${mode.name}: ${ms.toFixed(2)} ms per message, Dovecot CPU ${cpu.toFixed(2)} ms per message${hints ? `, ${hinted} hints` : ''}${Number.isNaN(fetchCpu) ? '' : ` (of which the FETCH after: ${fetchCpu.toFixed(2)} ms)`}`,
      );
    }
  }
  process.stdout.write(`| Filing ${MESSAGES} × 20 KB into Sent | ms per message (wall) | Dovecot CPU per message |\n|---|---|---|\n`);
  for (const [name, r] of results) process.stdout.write(`| ${name} | ${median(r.ms).toFixed(2)} | ${median(r.cpu).toFixed(2)} ms |\n`);
  hints?.close();
}

main().catch((err: unknown) => {
  process.stderr.write(`${err instanceof Error ? err.stack : String(err)}\n`);
  process.exit(1);
});
