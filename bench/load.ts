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
  /** Answers by status code. */
  statuses: Map<number, number>;
  /** With `abuse`: connections that failed or were closed under a request, and requests cut at the hard stop. */
  dropped: number;
}

/**
 * For load that is meant to be refused (bench/tenants.ts): a connection the server closes or
 * resets is counted and opened again, and a request still unanswered `graceMs` after the end is
 * cut, so that a server that stalls cannot hold the run.
 */
export interface Abuse {
  graceMs: number;
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

/** The length of a chunked body starting at `from`, once `buf` holds all of it; else null. */
function chunkedLength(buf: Buffer, from: number): number | null {
  let at = from;
  for (;;) {
    const eol = buf.indexOf('\r\n', at);
    if (eol < 0) return null;
    const size = parseInt(buf.toString('latin1', at, eol), 16);
    if (size === 0) {
      // No trailers are sent to us: the last chunk is followed by an empty line.
      return buf.length >= eol + 4 ? eol + 4 - from : null;
    }
    at = eol + 2 + size + 2;
    if (at > buf.length) return null;
  }
}

/** One answer's status and total length, once `buf` holds all of its head (and, chunked, its body). */
function frame(buf: Buffer): { status: number; length: number } | null {
  const end = buf.indexOf(HEADER_END);
  if (end < 0) return null;
  const head = buf.toString('latin1', 0, end);
  const status = Number(head.slice(9, 12));
  // These never have a body (RFC 9110, 6.4.1): a 304 carries no Content-Length.
  if (status === 204 || status === 304) return { status, length: end + 4 };
  const m = /\r\ncontent-length:\s*(\d+)/i.exec(head);
  if (m) return { status, length: end + 4 + Number(m[1]) };
  if (/\r\ntransfer-encoding:\s*chunked/i.test(head)) {
    const body = chunkedLength(buf, end + 4);
    return body === null ? null : { status, length: end + 4 + body };
  }
  throw new Error(`answer without Content-Length: ${head.slice(0, 200)}`);
}

export async function closedLoop(
  baseUrl: string,
  options: {
    clients: number;
    seconds: number;
    next: (client: number) => Request;
    ok: (status: number) => boolean;
    /** The local address to connect from (any of 127.0.0.0/8 on loopback): one client address per tenant. */
    localAddress?: string;
    abuse?: Abuse;
  },
): Promise<LoadResult> {
  const u = new URL(baseUrl);
  const latencies: number[] = [];
  const statuses = new Map<number, number>();
  let done = 0;
  let failed = 0;
  let dropped = 0;
  let firstFailure: string | null = null;
  const end = performance.now() + options.seconds * 1000;
  const abuse = options.abuse;

  const runClient = (client: number) =>
    new Promise<void>((resolve, reject) => {
      let finished = false;
      const finish = (sock: Socket) => {
        finished = true;
        sock.destroy();
        resolve();
      };
      const open = () => {
        const sock: Socket = connect({
          port: Number(u.port),
          host: u.hostname,
          ...(options.localAddress ? { localAddress: options.localAddress } : {}),
        });
        sock.setNoDelay(true);
        let buf: Buffer = Buffer.alloc(0);
        let sent = 0;
        let waiting = false;
        const sendNext = () => {
          if (performance.now() >= end) {
            finished = true;
            sock.end();
            resolve();
            return;
          }
          sent = performance.now();
          waiting = true;
          sock.write(encode(u.host, options.next(client)));
        };
        sock.on('connect', sendNext);
        if (abuse) {
          // Cut a request the server has not answered by the hard stop.
          const stop = setTimeout(
            () => {
              if (finished) return;
              if (waiting) dropped++;
              finish(sock);
            },
            Math.max(0, end - performance.now()) + abuse.graceMs,
          );
          sock.on('close', () => {
            clearTimeout(stop);
            if (finished) return;
            // Closed or reset under us (a refusal, a cap on connections): count it, connect again.
            dropped++;
            if (performance.now() >= end) {
              finished = true;
              resolve();
            } else setTimeout(open, 10);
          });
          sock.on('error', () => {});
        } else sock.on('error', reject);
        sock.on('data', (chunk: Buffer) => {
          buf = buf.length ? Buffer.concat([buf, chunk]) : chunk;
          const f = frame(buf);
          if (!f || buf.length < f.length) return;
          waiting = false;
          latencies.push(performance.now() - sent);
          statuses.set(f.status, (statuses.get(f.status) ?? 0) + 1);
          if (options.ok(f.status)) done++;
          else {
            failed++;
            firstFailure ??= buf.toString('utf8', 0, Math.min(buf.length, 400));
          }
          buf = buf.subarray(f.length);
          sendNext();
        });
      };
      open();
    });

  const started = performance.now();
  await Promise.all(Array.from({ length: options.clients }, (_, i) => runClient(i)));
  return { rate: done / ((performance.now() - started) / 1000), failed, latencies, firstFailure, statuses, dropped };
}
