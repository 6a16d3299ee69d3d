// GET /healthz: the process is up and its dependencies answer. Unauthenticated, for load balancers.
import type { AppRouter } from '../context.ts';

export function healthRoutes(check: () => void | Promise<void>) {
  return (router: AppRouter): void => {
    router.get('/healthz', async (ctx) => {
      await check();
      ctx.body = { status: 'ok' };
    });
  };
}
