// The one Server-Sent Events writer, used by the inbox change stream and the project event log.
// Frames are serialized once (formatFrame) and the same text is written to every client; a
// client that falls behind by more than `maxBufferedBytes` is cut off (it resumes from the log)
// rather than buffering without bound.
import { PassThrough } from 'node:stream';
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
  private readonly out = new PassThrough();
  private readonly timers: NodeJS.Timeout[] = [];
  private readonly closeHandlers: Array<(reason: CloseReason) => void> = [];
  private readonly maxBuffered: number;
  closed = false;

  constructor(ctx: Context, options: SseOptions) {
    this.maxBuffered = options.maxBufferedBytes ?? 1024 * 1024;
    ctx.status = 200;
    ctx.set('Content-Type', 'text/event-stream; charset=utf-8');
    ctx.set('Cache-Control', 'no-store');
    ctx.set('Connection', 'keep-alive');
    // Reverse proxies (nginx) must not buffer, and nothing may compress, or events sit in buffers.
    ctx.set('X-Accel-Buffering', 'no');
    ctx.set('Content-Encoding', 'identity');
    ctx.req.socket.setNoDelay(true);
    ctx.req.socket.setTimeout(0);
    ctx.body = this.out;
    ctx.req.on('close', () => this.close('client'));
    this.out.on('error', () => this.close('client'));
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
    if (this.out.writableLength > this.maxBuffered) {
      this.close('slow');
      return false;
    }
    this.out.write(text);
    return true;
  }

  send(frame: SseFrame): boolean {
    return this.write(formatFrame(frame));
  }

  onClose(handler: (reason: CloseReason) => void): void {
    if (this.closed) handler('server');
    else this.closeHandlers.push(handler);
  }

  close(reason: CloseReason = 'server'): void {
    if (this.closed) return;
    this.closed = true;
    for (const t of this.timers) clearTimeout(t);
    this.out.end();
    for (const h of this.closeHandlers.splice(0)) h(reason);
  }
}
