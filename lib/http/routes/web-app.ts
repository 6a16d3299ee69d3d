// The web app's files, served from {app_url}'s origin under /app/: built from web/ by
// `npm run build:app` (scripts/build-app.ts) into dist/web/. A strict Content-Security-Policy:
// scripts and styles only from this origin, no inline script, no framing, requests only to here.
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { notFound } from '../../errors.ts';
import { HttpError, httpErrorOf } from '../errors.ts';
import { ROOT } from '../../paths.ts';
import type { AppContext, AppRouter } from '../context.ts';

export const WEB_APP_DIR = join(ROOT, 'dist', 'web');

export const APP_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  // data: for a message's own cid: images; http(s): only for remote images in a message the member
  // chose to show them for (the message's frame has its own stricter policy until then: web/mail/html.ts).
  "img-src 'self' data: http: https:",
  "connect-src 'self'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ');

const TYPES: Record<string, string> = {
  html: 'text/html; charset=utf-8',
  js: 'text/javascript; charset=utf-8',
  css: 'text/css; charset=utf-8',
  map: 'application/json',
};
/** Only the built file names: no path can leave the directory. */
const FILE = /^[a-z0-9-]+(?:\.js)?\.(html|js|css|map)$/;

/**
 * Every response under /app (pages, files, the redirect, errors) carries these: a browser may
 * render any of them, and a header that only the happy path sets is one an error page lacks.
 * X-Frame-Options for browsers that predate frame-ancestors; no-cache (not the API's no-store)
 * because the file names carry no content hash: the browser revalidates, so a new build is
 * picked up at once and the app works offline of nothing stale.
 */
export const APP_HEADERS: Readonly<Record<string, string>> = {
  'Content-Security-Policy': APP_CSP,
  'X-Frame-Options': 'DENY',
  'X-Content-Type-Options': 'nosniff',
  'Referrer-Policy': 'no-referrer',
  'Cross-Origin-Opener-Policy': 'same-origin',
  'Cross-Origin-Resource-Policy': 'same-origin',
  // The app uses none of these; a message or a bug that asks gets nothing.
  'Permissions-Policy': 'camera=(), microphone=(), geolocation=(), payment=(), usb=(), interest-cohort=()',
  'Cache-Control': 'no-cache',
};

/**
 * An /app route: its headers on success, and on an error too (the error middleware drops headers
 * set before a failure, keeping those the error carries; an error stays no-store).
 */
const appRoute =
  (handler: (ctx: AppContext) => Promise<void> | void) =>
  async (ctx: AppContext): Promise<void> => {
    ctx.set(APP_HEADERS);
    try {
      await handler(ctx);
    } catch (err) {
      const known = httpErrorOf(err);
      if (!known) throw err;
      const { 'Cache-Control': _cache, ...headers } = APP_HEADERS;
      throw new HttpError(known.status, known.message, { ...headers, ...known.headers });
    }
  };

async function send(ctx: AppContext, dir: string, name: string): Promise<void> {
  const m = FILE.exec(name);
  if (!m) throw notFound();
  let body: Buffer;
  try {
    body = await readFile(join(dir, name));
  } catch (err) {
    if ((err as { code?: string }).code !== 'ENOENT') throw err;
    if (name === 'index.html') throw new HttpError(503, 'the web app is not built: run npm run build:app');
    throw notFound();
  }
  ctx.type = TYPES[m[1]!]!;
  // no-cache revalidates: an ETag of the bytes lets an unchanged file come back as a 304.
  ctx.status = 200;
  ctx.etag = createHash('sha256').update(body).digest('base64url').slice(0, 32);
  if (ctx.fresh) {
    ctx.status = 304;
    return;
  }
  ctx.body = body;
}

export function webAppRoutes(dir = WEB_APP_DIR) {
  return (router: AppRouter): void => {
    // This route matches /app and /app/ alike; the page's relative URLs need the slash.
    router.get(
      '/app',
      appRoute((ctx) => (ctx.path === '/app/' ? send(ctx, dir, 'index.html') : ctx.redirect('/app/'))),
    );
    router.get(
      '/app/:file',
      appRoute((ctx) => send(ctx, dir, ctx.params.file!)),
    );
    // Deeper paths exist nowhere: a 404 that carries the app's headers like the rest.
    router.get(
      '/app/{*rest}',
      appRoute(() => {
        throw notFound();
      }),
    );
  };
}
