// Reads a JSON request body with a byte limit, refusing an oversized body before buffering it.
import type { ParameterizedContext } from 'koa';
import { invalid, tooLarge, type DomainError } from '../errors.ts';
import { HttpError } from './errors.ts';
import type { AppState } from './context.ts';

/** What reading a body needs of the request's context (any route's). */
type BodyContext = ParameterizedContext<Pick<AppState, 'bodyIdleMs'>>;

export const DEFAULT_BODY_LIMIT = 256 * 1024;
const PREALLOCATE_FROM = 1024 * 1024;

/**
 * The raw body, or 413 as soon as it passes `limit` bytes. A body that sends no byte for
 * `ctx.state.bodyIdleMs` (POSTERN_BODY_IDLE_TIMEOUT_MS) is a 408 and the connection closes, like
 * nginx's client_body_timeout: the whole request's POSTERN_REQUEST_TIMEOUT_MS (lib/http/
 * connections.ts) must leave a slow upload minutes, and a stalled one should not hold its socket,
 * its handler and its memory budget (lib/http/body-gate.ts) that long. The timer runs only
 * while the body is read: a request waiting for the budget is not reading, and not idle.
 */
export function readRaw(ctx: BodyContext, limit: number): Promise<Buffer> {
  const declared = Number(ctx.get('content-length') || NaN);
  if (declared > limit) return Promise.reject(tooLarge(`request body is over ${limit} bytes`));
  const req = ctx.req;
  // The client may have gone while the request was being authorized: its `close` came and went.
  if (req.destroyed || req.readableEnded) return Promise.reject(invalid('request body was cut off'));
  // A small body usually comes in the same packets as its headers: Node's parser has it all
  // buffered by now (never more than its Content-Length), and it is taken at once, without
  // listeners and a timer.
  if (declared > 0 && req.readableLength === declared && req.readableFlowing !== true) {
    const whole = req.read() as Buffer | null;
    if (whole !== null && whole.length === declared) return Promise.resolve(whole);
    if (whole !== null) req.unshift(whole);
  }
  // Listeners rather than `for await`: the async iterator costs a promise per chunk and a
  // stream wrapper per request, on every write request.
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    // A large body of declared length is copied into one buffer as it arrives, so it is never
    // held twice (its chunks and their concatenation) at the end.
    const whole = declared > PREALLOCATE_FROM ? Buffer.allocUnsafe(declared) : null;
    const idle = setTimeout(() => {
      // The rest of the body may still come: the connection cannot carry another request.
      done(new HttpError(408, `the request body stopped arriving: no bytes for ${ctx.state.bodyIdleMs} ms`, { Connection: 'close' }));
    }, ctx.state.bodyIdleMs);
    const done = (err: HttpError | DomainError | null) => {
      clearTimeout(idle);
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('error', onAbort);
      req.off('close', onClose);
      if (err) {
        // Stop reading what is left; the answer (413 or 400) goes out at once.
        req.pause();
        reject(err);
      } else if (whole) resolve(whole.subarray(0, size));
      else resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size));
    };
    const onData = (chunk: Buffer) => {
      idle.refresh();
      size += chunk.length;
      if (size > limit) {
        // The rest of the body stays unread: the connection cannot carry another request.
        ctx.set('Connection', 'close');
        return done(tooLarge(`request body is over ${limit} bytes`));
      }
      if (!whole) chunks.push(chunk);
      // Node's parser holds a body to its Content-Length; this only guards the copy.
      else if (size > whole.length) return done(invalid('request body is longer than its Content-Length'));
      else chunk.copy(whole, size - chunk.length);
    };
    const onEnd = () => done(null);
    // The client went away mid-body: its fault, and nobody is left to read the answer.
    const onAbort = () => done(invalid('request body was cut off'));
    // `close` before `end`: the body never finished (a reset, or a half-close Node aborts).
    const onClose = () => {
      if (!req.readableEnded) onAbort();
    };
    req.on('data', onData);
    req.on('end', onEnd);
    req.on('error', onAbort);
    req.on('close', onClose);
  });
}

/** The parsed JSON body; 400 when absent or not JSON, 415 for another content type. */
export async function readJson(ctx: BodyContext, limit = DEFAULT_BODY_LIMIT): Promise<unknown> {
  const type = ctx.get('content-type');
  if (type && !/^application\/([\w.+-]+\+)?json\s*(;|$)/i.test(type)) {
    throw new HttpError(415, 'send the body as Content-Type: application/json');
  }
  const raw = await readRaw(ctx, limit);
  if (raw.length === 0) throw invalid('request body required');
  try {
    return JSON.parse(raw.toString('utf8')) as unknown;
  } catch {
    throw invalid('request body is not valid JSON');
  }
}
