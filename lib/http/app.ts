// The Koa application: the same routes served twice, on {base_url} (/v1, API tokens) and on
// {app_url} (/api/v1, web sessions), behind one error middleware and one cache policy.
import { randomUUID } from 'node:crypto';
import Router from '@koa/router';
import Koa from 'koa';
import type { Logger } from 'pino';
import type { Access, Principal } from '../auth/access.ts';
import type { CredentialRate } from '../rate.ts';
import { authenticate } from './authenticate.ts';
import type { AppRouter, AppState, Surface } from './context.ts';
import { errorMiddleware } from './errors.ts';
import { UNMATCHED_ROUTE } from '../metrics.ts';

export type RouteModule = (router: AppRouter) => void;

export interface AppOptions {
  access: Access;
  /** Each token's and session's request budget, charged as it authenticates. */
  rate: CredentialRate;
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
  /** True once the server is shutting down: each response then closes its connection. */
  draining?: () => boolean;
  /** Each request's method, route template, status and duration (lib/metrics.ts); absent: not measured. */
  metrics?: { request(method: string, route: string, status: number, seconds: number): void };
}

/**
 * A caller's (or proxy's) X-Request-Id when it is at most 64 of A-Z a-z 0-9 . _ : - (what
 * tracing systems mint: UUIDs, hex trace ids, `host:seq`); otherwise a new one. It is echoed in
 * a header and written to every log line of the request, so nothing else is taken.
 */
export function requestIdOf(incoming: string): string {
  return /^[A-Za-z0-9._:-]{1,64}$/.test(incoming) ? incoming : randomUUID();
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

interface MatchedLayer {
  path: unknown;
  methods: string[];
}

/**
 * The route template a request went to, as @koa/router records it. A request stopped before its
 * route ran (a 401 from the surface's authentication) still has its route among the layers its
 * path matched; a 405 names the path's route; a path no route has is UNMATCHED_ROUTE.
 */
function routeTemplate(ctx: { method: string }): string {
  const { matched, _matchedRoute: current } = ctx as { matched?: MatchedLayer[]; _matchedRoute?: unknown };
  const routes = (matched ?? []).filter((l): l is MatchedLayer & { path: string } => l.methods.length > 0 && typeof l.path === 'string');
  if (routes.some((l) => l.path === current)) return current as string;
  return (routes.find((l) => l.methods.includes(ctx.method)) ?? routes[0])?.path ?? UNMATCHED_ROUTE;
}

export function createApp(options: AppOptions): Koa<AppState> {
  // Behind a trusted proxy the client is the last X-Forwarded-For entry, the one the proxy added:
  // entries before it are whatever the client sent, so reading them would let anyone pick an address.
  const app = new Koa<AppState>({ proxy: options.trustProxy ?? false, maxIpsCount: 1 });
  app.silent = true; // the error middleware logs what matters

  const metrics = options.metrics;
  if (metrics) {
    // Outermost, so the status is the one sent (the error middleware's included). The route is
    // the router's template (`/v1/inboxes/:inboxId`), never the path: paths hold ids.
    app.use(async (ctx, next) => {
      const started = performance.now();
      try {
        await next();
      } finally {
        metrics.request(ctx.method, routeTemplate(ctx), ctx.status, (performance.now() - started) / 1000);
      }
    });
  }

  app.use(async (ctx, next) => {
    ctx.state.requestId = requestIdOf(ctx.get('x-request-id'));
    ctx.state.bodyIdleMs = options.bodyIdleTimeoutMs;
    ctx.set('X-Request-Id', ctx.state.requestId);
    // Shared caches never store responses (docs/api.md, "What the service does"); routes that can be cached privately say so.
    ctx.set('Cache-Control', 'no-store');
    ctx.set('X-Content-Type-Options', 'nosniff');
    const started = performance.now();
    try {
      await next();
    } finally {
      // Set last, so a request that started before the shutdown is told too (and the error
      // middleware does not drop it); a stream that wrote its head already is left alone by Koa.
      if (options.draining?.()) ctx.set('Connection', 'close');
      // One line per request, a live stream's when it ends. The credential by its id (tok_…,
      // ses_…) once authenticated, never what was presented; the path without its query.
      const principal = ctx.state.principal as Principal | undefined;
      const ms = Math.round(performance.now() - started);
      options.log.info(
        {
          requestId: ctx.state.requestId,
          method: ctx.method,
          path: ctx.path,
          status: ctx.status,
          ms,
          credentialId: principal?.credentialId ?? null,
        },
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
    router.use(authenticate(options.access, surface, options.rate));
    for (const mount of options.routes) mount(router);
    app.use(router.routes()).use(router.allowedMethods());
  }
  return app;
}
