/**
 * The SMTP sink: stands in for "the internet" behind Postfix's relayhost. Every message it
 * accepts becomes <dir>/<id>.eml (the raw bytes) and <id>.json (the envelope), each written to
 * a temp file and renamed, the .json last, so a reader that sees the .json sees the whole message.
 *
 * Test hooks by recipient local part: "reject-..." gets 550, "defer-..." gets 451.
 *
 *   node [--import tsx] scripts/sink.(ts|js) --port PORT --dir DIR [--host 127.0.0.1]
 */
import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs/promises';
import * as path from 'node:path';
import { parseArgs } from 'node:util';
import { SMTPServer, type SMTPServerAddress, type SMTPServerDataStream, type SMTPServerSession } from 'smtp-server';

interface SinkRecord {
  id: string;
  mailFrom: string;
  rcptTo: string[];
  /** DSN ENVID, xtext-decoded (RFC 3461). */
  envid: string | null;
  ret: string | null;
  notify: Record<string, string[]>;
  receivedAt: string;
  size: number;
}

function parseOptions(): { host: string; port: number; dir: string } {
  const { values } = parseArgs({
    options: { host: { type: 'string', default: '127.0.0.1' }, port: { type: 'string' }, dir: { type: 'string' } },
  });
  const port = Number(values.port);
  if (!values.dir || !Number.isInteger(port) || port <= 0) {
    process.stderr.write('usage: sink --port PORT --dir DIR [--host HOST]\n');
    process.exit(2);
  }
  return { host: values.host ?? '127.0.0.1', port, dir: path.resolve(values.dir) };
}
const { host, port, dir } = parseOptions();

function log(message: string): void {
  process.stdout.write(`${new Date().toISOString()} ${message}\n`);
}

/** RFC 3461 xtext: "+XX" is the byte with hex value XX. */
function xtextDecode(s: string): string {
  return s.replace(/\+([0-9A-Fa-f]{2})/g, (_m, hex: string) => String.fromCharCode(Number.parseInt(hex, 16)));
}

function smtpError(code: number, message: string): Error & { responseCode: number } {
  return Object.assign(new Error(message), { responseCode: code });
}

// Sortable by arrival: milliseconds, then a per-process counter, then randomness.
let counter = 0;
function newId(): string {
  counter = (counter + 1) % 1_000_000;
  return `${Date.now().toString().padStart(14, '0')}-${String(counter).padStart(6, '0')}-${randomBytes(4).toString('hex')}`;
}

async function writeAtomic(file: string, data: string | Buffer): Promise<void> {
  const tmp = path.join(path.dirname(file), `.${path.basename(file)}.tmp`);
  await fs.writeFile(tmp, data);
  await fs.rename(tmp, file);
}

async function store(session: SMTPServerSession, raw: Buffer): Promise<string> {
  const id = newId();
  const envelope = session.envelope;
  const mailFrom = envelope.mailFrom ? envelope.mailFrom.address : '';
  const notify: Record<string, string[]> = {};
  for (const r of envelope.rcptTo) if (r.dsn?.notify) notify[r.address] = r.dsn.notify;
  const envid = envelope.dsn?.envid;
  const record: SinkRecord = {
    id,
    mailFrom,
    rcptTo: envelope.rcptTo.map((r) => r.address),
    envid: envid ? xtextDecode(envid) : null,
    ret: envelope.dsn?.ret ?? null,
    notify,
    receivedAt: new Date().toISOString(),
    size: raw.length,
  };
  await writeAtomic(path.join(dir, `${id}.eml`), raw);
  await writeAtomic(path.join(dir, `${id}.json`), `${JSON.stringify(record, null, 2)}\n`);
  log(
    `stored ${id} from <${mailFrom}> to ${record.rcptTo.map((a) => `<${a}>`).join(' ')} envid=${record.envid ?? '-'} ${raw.length} bytes`,
  );
  return id;
}

const server = new SMTPServer({
  name: 'sink.postern.test',
  banner: 'Postern SMTP sink',
  secure: false,
  authOptional: true,
  disabledCommands: ['AUTH', 'STARTTLS'],
  hideSTARTTLS: true,
  hideDSN: false,
  size: 0,
  logger: false,
  onRcptTo(address: SMTPServerAddress, _session: SMTPServerSession, callback: (err?: Error | null) => void): void {
    const local = address.address.split('@')[0]?.toLowerCase() ?? '';
    if (local.startsWith('reject-')) return callback(smtpError(550, `5.1.1 <${address.address}> rejected by the sink (reject- test hook)`));
    if (local.startsWith('defer-')) {
      // Each attempt logged: the witness that the relay retried (test/cli/mailenv.test.ts).
      log(`deferred <${address.address}> with 451`);
      return callback(smtpError(451, `4.3.0 <${address.address}> deferred by the sink (defer- test hook)`));
    }
    callback();
  },
  onData(stream: SMTPServerDataStream, session: SMTPServerSession, callback: (err?: Error | null, message?: string) => void): void {
    const chunks: Buffer[] = [];
    stream.on('data', (b: Buffer) => chunks.push(b));
    stream.on('error', (e: Error) => callback(e));
    stream.on('end', () => {
      store(session, Buffer.concat(chunks)).then(
        (id) => callback(null, `2.0.0 Ok: queued as ${id}`),
        (e: unknown) => {
          log(`store failed: ${e instanceof Error ? e.message : String(e)}`);
          callback(smtpError(451, '4.3.0 sink could not store the message'));
        },
      );
    });
  },
});

server.on('error', (e: Error) => {
  log(`server error: ${e.message}`);
  // A listen failure (port taken) is fatal; per-connection errors are not.
  if ((e as NodeJS.ErrnoException).syscall === 'listen') process.exit(1);
});

function shutdown(): void {
  log('stopping');
  // Give open sessions a moment, then go regardless.
  setTimeout(() => process.exit(0), 2000).unref();
  server.close(() => process.exit(0));
}
process.on('SIGTERM', shutdown);
process.on('SIGINT', shutdown);

await fs.mkdir(dir, { recursive: true });
server.listen(port, host, () => log(`listening on ${host}:${port}, storing into ${dir}`));
