// The one Server-Sent Events writer, used by the inbox change stream and the project event log.
// Frames are serialized once (formatFrame) and the same text is written to every client; a
// client that falls behind by more than `maxBufferedBytes` is cut off (it resumes from the log)
// rather than buffering without bound.
import type { Socket } from 'node:net';
import type { Context } from 'koa';

export interface SseFrame {
  id?: string;
  event?: string;
  data: string;
}

/** One frame as wire text. Data lines are split so a newline in the data cannot end the frame. */
export function formatFrame(frame: SseFrame): string {
  let out = '';
  if (frame.id !== undefined) out += `id: ${frame.id.replace(/[\r\n]/g, '')}\n`;
  if (frame.event !== undefined) out += `event: ${frame.event.replace(/[\r\n]/g, '')}\n`;
  for (const line of frame.data.split(/\r\n|\r|\n/)) out += `data: ${line}\n`;
  return `${out}\n`;
}

/**
 * Serializes each item once for all its clients: the frame text is cached on the item itself
 * (a WeakMap), so a thousand subscribers of one event cost one JSON.stringify.
 */
export function framer<T extends object>(format: (item: T) => SseFrame): (item: T) => string {
  const cache = new WeakMap<T, string>();
  return (item) => {
    let text = cache.get(item);
    if (text === undefined) cache.set(item, (text = formatFrame(format(item))));
    return text;
  };
}

/**
 * Live frames are queued per stream and flushed together. A flush writes to every stream with
 * something pending, one write each, and that costs about one syscall per stream whatever the
 * number of frames. With few streams a flush is cheap and runs at once, so each frame goes out as
 * it comes. With many streams, the next flush waits as long as the last one took, so writing takes
 * at most about half of the process's time: each write then carries every frame that arrived
 * meanwhile, instead of the process falling behind with one write per frame. A frame never waits
 * more than MAX_COALESCE_MS. (Measured with 1,000 streams at 100 events/s: twice the cost and at
 * most 20 ms gave p99 53-58 ms; this gives 37 ms.)
 */
const MAX_COALESCE_MS = 10;
/** After a stream ends, how long its client has to read the rest before the socket is dropped. */
const END_GRACE_MS = 10_000;
const outboxes = new Map<SseStream, string[]>();
let flushScheduled = false;
let lastFlushEnd = 0;
let lastFlushCost = 0;

function flushOutboxes(): void {
  flushScheduled = false;
  const started = performance.now();
  for (const [sse, frames] of outboxes) sse.write(frames.length === 1 ? frames[0]! : frames.join(''));
  outboxes.clear();
  // Measured on the next tick, so whatever the writes queued for it counts too.
  process.nextTick(() => {
    lastFlushEnd = performance.now();
    lastFlushCost = lastFlushEnd - started;
  });
}

export interface SseOptions {
  heartbeatMs: number;
  /** End the stream after this long; the client reconnects (with a fresh token). */
  maxDurationMs?: number;
  maxBufferedBytes?: number;
  /** Sent first: tells EventSource how long to wait before reconnecting. */
  retryMs?: number;
}

export type CloseReason = 'client' | 'timeout' | 'slow' | 'server';

export class SseStream {
  private readonly socket: Socket;
  private readonly timers: NodeJS.Timeout[] = [];
  private readonly closeHandlers: Array<(reason: CloseReason) => void> = [];
  private readonly maxBuffered: number;
  closed = false;

  constructor(ctx: Context, options: SseOptions) {
    this.maxBuffered = options.maxBufferedBytes ?? 1024 * 1024;
    ctx.status = 200;
    ctx.set('Content-Type', 'text/event-stream; charset=utf-8');
    ctx.set('Cache-Control', 'no-store');
    // Reverse proxies (nginx) must not buffer, and nothing may compress, or events sit in buffers.
    ctx.set('X-Accel-Buffering', 'no');
    ctx.set('Content-Encoding', 'identity');
    ctx.respond = false;
    const socket = ctx.req.socket;
    socket.setNoDelay(true);
    socket.setTimeout(0);
    // HEAD learns the headers of the stream, and no stream follows.
    if (ctx.method === 'HEAD') {
      this.socket = socket;
      this.closed = true;
      ctx.res.writeHead(200);
      ctx.res.end();
      return;
    }
    // The stream takes the connection over: the head is written once, then frames go straight
    // to the socket, and the body ends when the connection does (RFC 9112 6.3). A live fan-out
    // writes to thousands of clients per flush; through the response, each of those writes paid
    // for chunked framing and the response's own bookkeeping.
    ctx.set('Connection', 'close');
    ctx.set('Date', new Date().toUTCString());
    this.socket = socket;
    // The client left while the request was being authorized: nothing to stream to.
    if (socket.destroyed) {
      this.closed = true;
      return;
    }
    let head = 'HTTP/1.1 200 OK\r\n';
    for (const [name, value] of Object.entries(ctx.res.getHeaders())) {
      // setHeader has refused CR and LF already; a list is one line per value (Set-Cookie).
      for (const v of Array.isArray(value) ? value : value === undefined ? [] : [value]) head += `${name}: ${String(v)}\r\n`;
    }
    socket.on('close', () => this.close('client'));
    socket.on('error', () => this.close('client'));
    this.write(`${head}\r\nretry: ${options.retryMs ?? 2000}\n\n`);
    const heartbeat = setInterval(() => this.write(': keep-alive\n\n'), options.heartbeatMs);
    heartbeat.unref();
    this.timers.push(heartbeat);
    if (options.maxDurationMs) {
      const end = setTimeout(() => this.close('timeout'), options.maxDurationMs);
      end.unref();
      this.timers.push(end);
    }
  }

  /** Writes preformatted frame text; false (and the stream closed) when the client is too slow. */
  write(text: string): boolean {
    if (this.closed) return false;
    if (this.socket.writableLength > this.maxBuffered) {
      this.close('slow');
      return false;
    }
    this.socket.write(text);
    return true;
  }

  send(frame: SseFrame): boolean {
    return this.write(formatFrame(frame));
  }

  /** Ends the stream with a last `event: error` frame saying why, as a request would get it. */
  endWith(error: string): void {
    this.send({ event: 'error', data: JSON.stringify({ error }) });
    this.close('server');
  }

  /**
   * Ends the stream for the server's shutdown: a last `retry:` field tells an EventSource how
   * long to wait before it reconnects (to another instance, behind a balancer), and no error
   * frame: nothing went wrong for the client. It resumes with Last-Event-ID as after any end.
   */
  reconnect(retryMs: number): void {
    this.write(`retry: ${Math.round(retryMs)}\n\n`);
    this.close('server');
  }

  /** Queues preformatted frame text for the next coalesced flush (live fan-out). */
  enqueue(text: string): void {
    if (this.closed) return;
    const box = outboxes.get(this);
    if (box) box.push(text);
    else outboxes.set(this, [text]);
    if (flushScheduled) return;
    flushScheduled = true;
    const wait = Math.min(MAX_COALESCE_MS, lastFlushCost) - (performance.now() - lastFlushEnd);
    if (wait >= 1) setTimeout(flushOutboxes, wait);
    else setImmediate(flushOutboxes);
  }

  /** True when the socket is behind: a backfill should await drained() before writing more. */
  get needsDrain(): boolean {
    return this.socket.writableNeedDrain;
  }

  /** Resolves when the client can take more, or is gone; leaves no listener behind. */
  drained(): Promise<void> {
    const socket = this.socket;
    return new Promise((resolve) => {
      const done = () => {
        socket.off('drain', done);
        socket.off('close', done);
        resolve();
      };
      socket.on('drain', done);
      socket.on('close', done);
    });
  }

  onClose(handler: (reason: CloseReason) => void): void {
    if (this.closed) handler('server');
    else this.closeHandlers.push(handler);
  }

  close(reason: CloseReason = 'server'): void {
    if (this.closed) return;
    this.closed = true;
    outboxes.delete(this);
    for (const t of this.timers) clearTimeout(t);
    if (reason === 'slow') {
      // A client that stopped reading would never let an end() finish: let go of it now.
      this.socket.destroy();
    } else {
      this.socket.end();
      // Ended politely, but a client that does not read it must not hold the socket forever.
      this.socket.setTimeout(END_GRACE_MS, () => this.socket.destroy());
    }
    for (const h of this.closeHandlers.splice(0)) h(reason);
  }
}
