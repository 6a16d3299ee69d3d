// The HTTP server and what it allows a connection (docs/mail.md, "Limits"): a request's headers, and then its
// whole request, must arrive in time, and one client address holds a bounded number of sockets.
// Otherwise a slow client (headers or a body dribbled in, or nothing at all) holds a socket and a
// waiting handler forever.
//
// Node's own deadlines do the timing: `headersTimeout` and `requestTimeout` cover a request until
// it is fully received, so a GET event stream, whose request ends with its headers, is never cut
// by them once it is open. A connection that sends nothing counts as a request whose headers are
// late. Whatever is cut gets a JSON 408 (`clientError` below) and the socket is closed.
import { once } from 'node:events';
import { createServer, type RequestListener, type Server } from 'node:http';
import type { Socket } from 'node:net';
import type { Config } from '../config.ts';

export type ConnectionLimits = Pick<Config['http'], 'headersTimeoutMs' | 'requestTimeoutMs' | 'maxConnectionsPerAddress' | 'trustProxy'>;

/** Idle keep-alive connections close after this long (longer than common proxies' 60 s). */
const KEEP_ALIVE_MS = 65_000;
/** A refused connection that does not close after its 429 is dropped after this long. */
const REFUSED_GRACE_MS = 2_000;

export function createHttpServer(handler: RequestListener, limits: ConnectionLimits): Server {
  const server = createServer(
    {
      headersTimeout: limits.headersTimeoutMs,
      requestTimeout: limits.requestTimeoutMs,
      // Node checks the deadlines at this interval (30 s by default): late requests are cut
      // within a quarter of the shorter deadline, at most a second after it.
      connectionsCheckingInterval: Math.max(25, Math.min(1000, Math.floor(limits.headersTimeoutMs / 4))),
      keepAliveTimeout: KEEP_ALIVE_MS,
    },
    handler,
  );
  server.on('clientError', answerClientError);
  // Behind a trusted proxy every connection comes from the proxy: capping its address would cap
  // the whole service. The proxy limits each client (nginx: limit_conn); docs/access.md.
  if (limits.maxConnectionsPerAddress > 0 && !limits.trustProxy) capPerAddress(server, limits.maxConnectionsPerAddress);
  return server;
}

/** While draining, connections that went idle between requests are closed this often. */
const DRAIN_POLL_MS = 100;

/**
 * Shutdown (docs/operations.md, "Health and shutdown"): the listener closes, so new connections
 * are refused; idle keep-alive connections close now, and busy ones once their response is out
 * (it says Connection: close, lib/http/app.ts). Resolves true when the last connection is gone,
 * false when `graceMs` ran out first (what is left is the caller's to cut: closeAllConnections).
 */
export async function drainServer(server: Server, graceMs: number): Promise<boolean> {
  const closed = once(server, 'close').then(() => true);
  server.close();
  const idle = setInterval(() => server.closeIdleConnections(), DRAIN_POLL_MS);
  let timer: NodeJS.Timeout | undefined;
  const graceOver = new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), graceMs)));
  try {
    return await Promise.race([closed, graceOver]);
  } finally {
    clearInterval(idle);
    clearTimeout(timer);
  }
}

/** The address a socket's connections are counted under (an IPv4 peer seen through IPv6 as itself). */
function addressOf(socket: Socket): string {
  const a = socket.remoteAddress ?? '';
  return a.startsWith('::ffff:') && a.includes('.') ? a.slice(7) : a;
}

/**
 * Node's own `connection` listener (the HTTP parser) runs only for sockets under the cap; the
 * others get a 429 and are closed without a request being read. Replacing the listener rather
 * than adding one: a listener added beside it could not keep it from parsing the socket.
 */
function capPerAddress(server: Server, max: number): void {
  const parse = server.listeners('connection') as Array<(socket: Socket) => void>;
  server.removeAllListeners('connection');
  const open = new Map<string, number>();
  server.on('connection', (socket: Socket) => {
    const address = addressOf(socket);
    const n = open.get(address) ?? 0;
    if (n >= max) {
      refuse(socket, max);
      return;
    }
    open.set(address, n + 1);
    socket.once('close', () => {
      const left = (open.get(address) ?? 1) - 1;
      if (left > 0) open.set(address, left);
      else open.delete(address);
    });
    for (const listener of parse) listener.call(server, socket);
  });
}

function refuse(socket: Socket, max: number): void {
  socket.on('error', () => socket.destroy());
  socket.end(
    rawResponse(429, 'Too Many Requests', `too many open connections from your address (at most ${max}); close one or try again later`, {
      'Retry-After': '5',
    }),
  );
  // Whatever the client sends is read and dropped, so its close (or ours) can come through.
  socket.resume();
  socket.setTimeout(REFUSED_GRACE_MS, () => socket.destroy());
}

const CLIENT_ERRORS: Record<string, [number, string]> = {
  ERR_HTTP_REQUEST_TIMEOUT: [408, 'Request Timeout'],
  HPE_HEADER_OVERFLOW: [431, 'Request Header Fields Too Large'],
};

/**
 * A request that cannot be served (too slow, malformed, headers too large) is answered as every
 * error is, `{ "error": ... }`, unless a response has started; then the socket just closes.
 */
function answerClientError(err: NodeJS.ErrnoException, socket: Socket): void {
  // The client is gone already: nobody to answer.
  if (err.code === 'ECONNRESET' || !socket.writable) {
    socket.destroy();
    return;
  }
  // The response under way, if any (Node's own field). A live stream writes straight to the
  // socket, so bytes already written on a connection with a response under way mean "started".
  const current = (socket as Socket & { _httpMessage?: { headersSent: boolean } | null })._httpMessage;
  const started = current != null && (current.headersSent || socket.bytesWritten > 0);
  if (!started) {
    const [status, reason] = CLIENT_ERRORS[err.code ?? ''] ?? [400, 'Bad Request'];
    const message =
      status === 408 ? 'the request did not arrive in time' : status === 431 ? 'request headers are too large' : 'malformed HTTP request';
    socket.write(rawResponse(status, reason, message));
  }
  socket.destroy();
}

function rawResponse(status: number, reason: string, error: string, headers: Record<string, string> = {}): string {
  const body = JSON.stringify({ error });
  const lines = [
    `HTTP/1.1 ${status} ${reason}`,
    'Content-Type: application/json; charset=utf-8',
    `Content-Length: ${Buffer.byteLength(body)}`,
    'Cache-Control: no-store',
    'X-Content-Type-Options: nosniff',
    'Connection: close',
    ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`),
  ];
  return `${lines.join('\r\n')}\r\n\r\n${body}`;
}
