// The one error middleware: every failure leaves as { error } with the right status, and an
// unknown route is a JSON 404. This is the one place that knows which status each of the
// domain's error kinds (lib/errors.ts) is. A thrown error that is neither a DomainError nor an
// HttpError is a bug: logged, and a bare 500.
import type { Logger } from 'pino';
import type { Context, Next } from 'koa';
import { isDomainError, type DomainError, type ErrorKind } from '../errors.ts';

/** A failure of the HTTP exchange itself (a body too slow, a content type): only lib/http throws these. */
export class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly headers: Readonly<Record<string, string>> = {},
  ) {
    super(message);
    this.name = 'HttpError';
  }
}

const STATUS: Record<ErrorKind, number> = {
  invalid: 400,
  unauthenticated: 401,
  forbidden: 403,
  'not-found': 404,
  gone: 410,
  conflict: 409,
  'too-large': 413,
  unprocessable: 422,
  'rate-limited': 429,
  unavailable: 503,
};

/** What a domain error is on the wire: its status, and the headers that explain it. */
export function toHttp(err: DomainError): HttpError {
  const headers: Record<string, string> = {};
  if (err.kind === 'unauthenticated') headers['WWW-Authenticate'] = 'Bearer';
  if (err.retryAfterSeconds !== undefined) headers['Retry-After'] = String(err.retryAfterSeconds);
  return new HttpError(STATUS[err.kind], err.message, headers);
}

/** The HTTP form of an expected failure, or null for a bug. */
export function httpErrorOf(err: unknown): HttpError | null {
  if (err instanceof HttpError) return err;
  return isDomainError(err) ? toHttp(err) : null;
}

interface HttpishError {
  status?: number;
  statusCode?: number;
  expose?: boolean;
  message?: string;
  headers?: Record<string, string>;
}

const KEPT_ON_ERROR = new Set(['x-content-type-options', 'x-request-id', 'allow', 'www-authenticate', 'retry-after']);

export function errorMiddleware(log: Logger) {
  return async function handleErrors(ctx: Context, next: Next): Promise<void> {
    try {
      await next();
      // An unknown route (404) or method (405, 501, with Allow set by the router) has no body yet.
      if (ctx.status >= 400 && ctx.body == null) {
        const status = ctx.status;
        ctx.body = { error: status === 404 ? 'not found' : ctx.message.toLowerCase() };
        ctx.status = status;
      }
    } catch (err) {
      if (ctx.headerSent) {
        log.warn({ err, path: ctx.path }, 'error after the response started');
        return;
      }
      let status = 500;
      let message = 'internal error';
      let headers: Record<string, string> = {};
      const known = httpErrorOf(err);
      if (known) {
        status = known.status;
        message = known.message;
        headers = { ...known.headers };
      } else {
        const e = (err ?? {}) as HttpishError;
        const s = e.status ?? e.statusCode;
        // Errors from Koa and the router (405, 501, a client abort) carry a status and say so.
        if (typeof s === 'number' && s >= 400 && s < 500 && e.expose !== false) {
          status = s;
          message = e.message || 'request failed';
          headers = { ...(e.headers ?? {}) };
        } else {
          log.error({ err, method: ctx.method, path: ctx.path, requestId: ctx.state.requestId }, 'unhandled error');
        }
      }
      // Headers set before the failure (an ETag, a content type) describe a body never sent;
      // those that explain the error (Allow on a 405) stay.
      for (const name of Object.keys(ctx.response.headers)) {
        if (!KEPT_ON_ERROR.has(name)) ctx.remove(name);
      }
      ctx.status = status;
      ctx.set('Cache-Control', 'no-store');
      for (const [name, value] of Object.entries(headers)) ctx.set(name, value);
      ctx.body = { error: message };
    }
  };
}
