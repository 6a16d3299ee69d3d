// The Koa application: the same routes served twice, on {base_url} (/v1, API tokens) and on
// {app_url} (/api/v1, web sessions), behind one error middleware and one cache policy.
import { randomUUID } from 'node:crypto';
import Router from '@koa/router';
import Koa from 'koa';
import type { Logger } from 'pino';
import type { Access, Principal } from '../auth/access.ts';
import { authenticate } from './authenticate.ts';
import type { AppRouter, AppState, Surface } from './context.ts';
import { errorMiddleware } from './errors.ts';

export type RouteModule = (router: AppRouter) => void;

export interface AppOptions {
  access: Access;
  log: Logger;
  /** Mounted under both base addresses. */
  routes: RouteModule[];
  /** Mounted on {app_url} only, each route choosing its own authentication (passkey sign-in). */
  appRoutes?: RouteModule[];
  /** Mounted at the root, without authentication (health, metrics, the OpenAPI document). */
  publicRoutes?: RouteModule[];
  trustProxy?: boolean;
  /** POSTERN_BODY_IDLE_TIMEOUT_MS: what lib/http/body.ts allows a body to stall. */
  bodyIdleTimeoutMs: number;
}

/** A caller's (or proxy's) X-Request-Id when it is printable ASCII of at most 128 characters; otherwise a new one. */
export function requestIdOf(incoming: string): string {
  return /^[\x21-\x7e](?:[\x20-\x7e]{0,126}[\x21-\x7e])?$/.test(incoming) ? incoming : randomUUID();
}

export const SURFACES: Record<Surface, string> = { token: '/v1', session: '/api/v1' };

/** Method and path of every operation the route modules define (paths in OpenAPI form). */
export function listOperations(routes: RouteModule[]): Array<{ method: string; path: string }> {
  const router: AppRouter = new Router<AppState>();
  for (const mount of routes) mount(router);
  return router.stack.flatMap((layer) =>
    layer.methods
      .filter((m) => m !== 'HEAD')
      .map((method) => ({ method: method.toLowerCase(), path: String(layer.path).replace(/:(\w+)/g, '{$1}') })),
  );
}

export function createApp(options: AppOptions): Koa<AppState> {
  // Behind a trusted proxy the client is the last X-Forwarded-For entry, the one the proxy added:
  // entries before it are whatever the client sent, so reading them would let anyone pick an address.
  const app = new Koa<AppState>({ proxy: options.trustProxy ?? false, maxIpsCount: 1 });
  app.silent = true; // the error middleware logs what matters

  app.use(async (ctx, next) => {
    ctx.state.requestId = requestIdOf(ctx.get('x-request-id'));
    ctx.state.bodyIdleMs = options.bodyIdleTimeoutMs;
    ctx.set('X-Request-Id', ctx.state.requestId);
    // Shared caches never store responses (spec 1); routes that can be cached privately say so.
    ctx.set('Cache-Control', 'no-store');
    ctx.set('X-Content-Type-Options', 'nosniff');
    const started = performance.now();
    try {
      await next();
    } finally {
      // One line per request, a live stream's when it ends. The credential by its id (tok_…,
      // ses_…) once authenticated, never what was presented; the path without its query.
      const principal = ctx.state.principal as Principal | undefined;
      const ms = Math.round(performance.now() - started);
      options.log.info(
        { requestId: ctx.state.requestId, method: ctx.method, path: ctx.path, status: ctx.status, ms, credentialId: principal?.credentialId ?? null },
        'request',
      );
    }
  });
  app.use(errorMiddleware(options.log));

  const root: AppRouter = new Router<AppState>();
  for (const mount of options.publicRoutes ?? []) mount(root);
  app.use(root.routes()).use(root.allowedMethods());

  const appOnly: AppRouter = new Router<AppState>({ prefix: SURFACES.session });
  appOnly.use(async (ctx, next) => {
    ctx.state.surface = 'session';
    await next();
  });
  for (const mount of options.appRoutes ?? []) mount(appOnly);
  app.use(appOnly.routes()).use(appOnly.allowedMethods());

  for (const [surface, prefix] of Object.entries(SURFACES) as Array<[Surface, string]>) {
    const router: AppRouter = new Router<AppState>({ prefix });
    router.use(authenticate(options.access, surface));
    for (const mount of options.routes) mount(router);
    app.use(router.routes()).use(router.allowedMethods());
  }
  return app;
}
