// Unauthenticated probes for load balancers and orchestrators (docs/operations.md, "Health and
// shutdown"). GET /healthz is liveness: the process answers HTTP, nothing else is asked, so a
// mail server outage never gets a healthy process restarted. GET /readyz is readiness: 200 when
// the store, IMAP (a master login) and SMTP submission answer, 503 naming what did not, and 503
// from the moment the process starts shutting down.
import type { Readiness } from '../../health.ts';
import type { AppRouter } from '../context.ts';

export function healthRoutes(readiness: Readiness) {
  return (router: AppRouter): void => {
    router.get('/healthz', (ctx) => {
      ctx.body = { status: 'ok' };
    });
    router.get('/readyz', async (ctx) => {
      const report = await readiness.report();
      ctx.status = report.ready ? 200 : 503;
      ctx.body = report.draining
        ? { status: 'unavailable', draining: true, checks: report.checks }
        : { status: report.ready ? 'ready' : 'unavailable', checks: report.checks };
    });
  };
}
