// A closed-loop HTTP/1.1 load generator on raw sockets: `clients` keep-alive connections, each
// sending its next request as soon as the previous answer is complete. No HTTP client library:
// on this 2-core machine the generator shares the cores with the servers it measures, and Node's
// http client spends about as much CPU per request as a small server handler, so with it the
// generator, not the server, set the ceiling (GET /healthz topped out near 10k/s on one or two
// server processes alike).
import { connect, type Socket } from 'node:net';

export interface Request {
  method: string;
  path: string;
  headers?: Record<string, string>;
  body?: string;
}

export interface LoadResult {
  /** Answers with an expected status, per second of the run. */
  rate: number;
  failed: number;
  latencies: number[];
  /** A sample answer that was not expected (status line and body), to report why. */
  firstFailure: string | null;
}

const HEADER_END = Buffer.from('\r\n\r\n');

function encode(host: string, r: Request): Buffer {
  const body = r.body === undefined ? null : Buffer.from(r.body);
  let head = `${r.method} ${r.path} HTTP/1.1\r\nHost: ${host}\r\n`;
  for (const [k, v] of Object.entries(r.headers ?? {})) head += `${k}: ${v}\r\n`;
  if (body) head += `Content-Length: ${body.length}\r\n`;
  head += '\r\n';
  return body ? Buffer.concat([Buffer.from(head, 'latin1'), body]) : Buffer.from(head, 'latin1');
}

/** One answer's status and total length, once `buf` holds all of its head. */
function frame(buf: Buffer): { status: number; length: number } | null {
  const end = buf.indexOf(HEADER_END);
  if (end < 0) return null;
  const head = buf.toString('latin1', 0, end);
  const status = Number(head.slice(9, 12));
  const m = /\r\ncontent-length:\s*(\d+)/i.exec(head);
  if (!m) throw new Error(`answer without Content-Length: ${head.slice(0, 200)}`);
  return { status, length: end + 4 + Number(m[1]) };
}

export async function closedLoop(
  baseUrl: string,
  options: { clients: number; seconds: number; next: (client: number) => Request; ok: (status: number) => boolean },
): Promise<LoadResult> {
  const u = new URL(baseUrl);
  const latencies: number[] = [];
  let done = 0;
  let failed = 0;
  let firstFailure: string | null = null;
  const end = performance.now() + options.seconds * 1000;

  const runClient = (client: number) =>
    new Promise<void>((resolve, reject) => {
      const sock: Socket = connect(Number(u.port), u.hostname);
      sock.setNoDelay(true);
      let buf: Buffer = Buffer.alloc(0);
      let sent = 0;
      const sendNext = () => {
        if (performance.now() >= end) {
          sock.end();
          resolve();
          return;
        }
        sent = performance.now();
        sock.write(encode(u.host, options.next(client)));
      };
      sock.on('connect', sendNext);
      sock.on('error', reject);
      sock.on('data', (chunk: Buffer) => {
        buf = buf.length ? Buffer.concat([buf, chunk]) : chunk;
        const f = frame(buf);
        if (!f || buf.length < f.length) return;
        latencies.push(performance.now() - sent);
        if (options.ok(f.status)) done++;
        else {
          failed++;
          firstFailure ??= buf.toString('utf8', 0, Math.min(buf.length, 400));
        }
        buf = buf.subarray(f.length);
        sendNext();
      });
    });

  const started = performance.now();
  await Promise.all(Array.from({ length: options.clients }, (_, i) => runClient(i)));
  return { rate: done / ((performance.now() - started) / 1000), failed, latencies, firstFailure };
}
