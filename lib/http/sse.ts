// The one Server-Sent Events writer, used by the inbox change stream and the project event log.
// Frames are serialized once (formatFrame) and the same text is written to every client; a
// client that falls behind by more than `maxBufferedBytes` is cut off (it resumes from the log)
// rather than buffering without bound.
import type { ServerResponse } from 'node:http';
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
 * it comes. With many streams, flushes are spaced so that writing takes at most about a third of
 * the process's time: each write then carries every frame that arrived meanwhile, instead of the
 * process falling behind with one write per frame. A frame never waits more than MAX_COALESCE_MS.
 */
const MAX_COALESCE_MS = 20;
const outboxes = new Map<SseStream, string[]>();
let flushScheduled = false;
let lastFlushEnd = 0;
let lastFlushCost = 0;

function flushOutboxes(): void {
  flushScheduled = false;
  const started = performance.now();
  for (const [sse, frames] of outboxes) sse.write(frames.length === 1 ? frames[0]! : frames.join(''));
  outboxes.clear();
  // The sockets are written when each response uncorks, on process.nextTick: measure up to then.
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
  private readonly res: ServerResponse;
  private readonly timers: NodeJS.Timeout[] = [];
  private readonly closeHandlers: Array<(reason: CloseReason) => void> = [];
  private readonly maxBuffered: number;
  closed = false;

  constructor(ctx: Context, options: SseOptions) {
    this.maxBuffered = options.maxBufferedBytes ?? 1024 * 1024;
    this.res = ctx.res;
    ctx.set('Content-Type', 'text/event-stream; charset=utf-8');
    ctx.set('Cache-Control', 'no-store');
    ctx.set('Connection', 'keep-alive');
    // Reverse proxies (nginx) must not buffer, and nothing may compress, or events sit in buffers.
    ctx.set('X-Accel-Buffering', 'no');
    ctx.set('Content-Encoding', 'identity');
    ctx.req.socket.setNoDelay(true);
    ctx.req.socket.setTimeout(0);
    // Frames go straight to the response, not through a stream Koa pipes: a live fan-out writes
    // to thousands of clients per flush, and each layer in between costs on every one of them.
    ctx.respond = false;
    this.res.writeHead(200);
    // HEAD learns the headers of the stream, and no stream follows.
    if (ctx.method === 'HEAD') {
      this.closed = true;
      this.res.end();
      return;
    }
    this.res.on('close', () => this.close('client'));
    this.res.on('error', () => this.close('client'));
    this.write(`retry: ${options.retryMs ?? 2000}\n\n`);
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
    if (this.res.writableLength > this.maxBuffered) {
      this.close('slow');
      return false;
    }
    this.res.write(text);
    return true;
  }

  send(frame: SseFrame): boolean {
    return this.write(formatFrame(frame));
  }

  /** Queues preformatted frame text for the next coalesced flush (live fan-out). */
  enqueue(text: string): void {
    if (this.closed) return;
    const box = outboxes.get(this);
    if (box) box.push(text);
    else outboxes.set(this, [text]);
    if (flushScheduled) return;
    flushScheduled = true;
    const wait = Math.min(MAX_COALESCE_MS, lastFlushCost * 2) - (performance.now() - lastFlushEnd);
    if (wait >= 1) setTimeout(flushOutboxes, wait);
    else setImmediate(flushOutboxes);
  }

  /** True when the socket is behind: a backfill should await drained() before writing more. */
  get needsDrain(): boolean {
    return this.res.writableNeedDrain;
  }

  /** Resolves when the client can take more, or is gone; leaves no listener behind. */
  drained(): Promise<void> {
    const res = this.res;
    return new Promise((resolve) => {
      const done = () => {
        res.off('drain', done);
        res.off('close', done);
        resolve();
      };
      res.on('drain', done);
      res.on('close', done);
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
    this.res.end();
    for (const h of this.closeHandlers.splice(0)) h(reason);
  }
}
