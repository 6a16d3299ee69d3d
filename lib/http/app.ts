// The Koa application: the same routes served twice, on {base_url} (/v1, API tokens) and on
// {app_url} (/api/v1, web sessions), behind one error middleware and one cache policy.
import { randomUUID } from 'node:crypto';
import Router from '@koa/router';
import Koa from 'koa';
import type { Logger } from 'pino';
import type { Access } from '../auth/access.ts';
import { authenticate } from './authenticate.ts';
import type { AppRouter, AppState, Surface } from './context.ts';
import { errorMiddleware } from './errors.ts';

export type RouteModule = (router: AppRouter) => void;

export interface AppOptions {
  access: Access;
  log: Logger;
  /** Mounted under both base addresses. */
  routes: RouteModule[];
  /** Mounted at the root, without authentication (health, metrics, the OpenAPI document). */
  publicRoutes?: RouteModule[];
  trustProxy?: boolean;
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
  const app = new Koa<AppState>({ proxy: options.trustProxy ?? false });
  app.silent = true; // the error middleware logs what matters

  app.use(async (ctx, next) => {
    const incoming = ctx.get('x-request-id');
    ctx.state.requestId = /^[\w.-]{1,128}$/.test(incoming) ? incoming : randomUUID();
    ctx.set('X-Request-Id', ctx.state.requestId);
    // Shared caches never store responses (spec 1); routes that can be cached privately say so.
    ctx.set('Cache-Control', 'no-store');
    ctx.set('X-Content-Type-Options', 'nosniff');
    const started = performance.now();
    try {
      await next();
    } finally {
      options.log.debug(
        { method: ctx.method, path: ctx.path, status: ctx.status, ms: Math.round(performance.now() - started), requestId: ctx.state.requestId },
        'request',
      );
    }
  });
  app.use(errorMiddleware(options.log));

  const root: AppRouter = new Router<AppState>();
  for (const mount of options.publicRoutes ?? []) mount(root);
  app.use(root.routes()).use(root.allowedMethods());

  for (const [surface, prefix] of Object.entries(SURFACES) as Array<[Surface, string]>) {
    const router: AppRouter = new Router<AppState>({ prefix });
    router.use(authenticate(options.access, surface));
    for (const mount of options.routes) mount(router);
    app.use(router.routes()).use(router.allowedMethods());
  }
  return app;
}
